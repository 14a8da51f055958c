// Blocking loopback TCP helpers for tests that speak raw HTTP to an in-process server.
#ifndef RUNNEL_TESTS_SUPPORT_LOOPBACK_SOCKET_H_
#define RUNNEL_TESTS_SUPPORT_LOOPBACK_SOCKET_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstdint>
#include <string_view>

namespace runnel::testing {

// A socket connected to 127.0.0.1:`port` whose reads time out after `receive_timeout_s`
// seconds; `receive_buffer` > 0 sets SO_RCVBUF before connecting. -1 when the connection
// fails (nothing to close then).
inline int ConnectLoopback(uint16_t port, int receive_timeout_s, int receive_buffer = 0) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  if (receive_buffer > 0) {
    ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &receive_buffer, sizeof(receive_buffer));
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  timeval tv{receive_timeout_s, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return fd;
}

// Sends all of `data`; false when the peer is gone.
inline bool SendAll(int fd, std::string_view data) {
  size_t sent = 0;
  while (sent < data.size()) {
    ssize_t n = ::send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace runnel::testing

#endif  // RUNNEL_TESTS_SUPPORT_LOOPBACK_SOCKET_H_
