// The load driver's plumbing: sockets, TLS, HTTP/1.1 framing, process figures.
#include "cli/load_internal.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <queue>
#include <sstream>
#include <thread>
#include <utility>

#include "base/mutex.h"

namespace runnel::cli::load {

namespace internal {

std::string Errno(std::string_view what) {
  return std::string(what) + ": " + std::strerror(errno);
}

int64_t NowMicros() {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000 + ts.tv_nsec / 1000;
}

double SecondsSince(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

Result<int> ConnectBlocking(const Endpoint& e) {
  const int fd = ::socket(e.addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status::Internal(Errno("socket"));
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&e.addr), e.addr_len) != 0) {
    Status s = Status::Unavailable(Errno("cannot connect to " + e.host_header));
    ::close(fd);
    return s;
  }
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  const timeval timeout{30, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  return fd;
}

SSL* NewTls(const Endpoint& e, int fd) {
  SSL* ssl = SSL_new(e.tls.get());
  if (ssl == nullptr) return nullptr;
  if (SSL_set_fd(ssl, fd) != 1) {
    SSL_free(ssl);
    return nullptr;
  }
  unsigned char ip[16];
  if (::inet_pton(AF_INET, e.host.c_str(), ip) == 1 ||
      ::inet_pton(AF_INET6, e.host.c_str(), ip) == 1) {
    X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), e.host.c_str());
  } else {
    SSL_set_tlsext_host_name(ssl, e.host.c_str());
    SSL_set1_host(ssl, e.host.c_str());
  }
  return ssl;
}

std::string HandshakeError(SSL* ssl, const Endpoint& e) {
  std::string reason;
  const long verify = SSL_get_verify_result(ssl);
  if (verify != X509_V_OK) {
    reason = std::string("certificate not trusted: ") + X509_verify_cert_error_string(verify) +
             " (pass --cacert FILE for a self-signed server)";
  } else if (const unsigned long err = ERR_get_error(); err != 0) {
    char buf[256];
    ERR_error_string_n(err, buf, sizeof(buf));
    reason = buf;
  } else {
    reason = "the connection was closed";
  }
  return "TLS handshake with " + e.host_header + " failed: " + reason;
}

int StepHandshake(SSL* ssl, uint32_t* want) {
  ERR_clear_error();
  const int rc = SSL_connect(ssl);
  if (rc == 1) return 1;
  switch (SSL_get_error(ssl, rc)) {
    case SSL_ERROR_WANT_READ: *want = EPOLLIN; return 0;
    case SSL_ERROR_WANT_WRITE: *want = EPOLLOUT; return 0;
    default: return -1;
  }
}

ssize_t SendSome(int fd, SSL* ssl, const char* data, size_t size) {
  if (ssl == nullptr) {
    for (;;) {
      const ssize_t n = ::send(fd, data, size, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return kAgain;
      return n <= 0 ? kFailed : n;
    }
  }
  ERR_clear_error();
  const int n = SSL_write(ssl, data, static_cast<int>(std::min<size_t>(size, INT_MAX)));
  if (n > 0) return n;
  const int err = SSL_get_error(ssl, n);
  return err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE ? kAgain : kFailed;
}

ssize_t RecvSome(int fd, SSL* ssl, char* data, size_t size) {
  if (ssl == nullptr) {
    for (;;) {
      const ssize_t n = ::recv(fd, data, size, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return kAgain;
      return n < 0 ? kFailed : n;
    }
  }
  ERR_clear_error();
  const int n = SSL_read(ssl, data, static_cast<int>(std::min<size_t>(size, INT_MAX)));
  if (n > 0) return n;
  switch (SSL_get_error(ssl, n)) {
    case SSL_ERROR_WANT_READ:
    case SSL_ERROR_WANT_WRITE: return kAgain;
    case SSL_ERROR_ZERO_RETURN: return kClosed;  // also an end without close_notify
    default: return kFailed;
  }
}

bool Drained(const SSL* ssl, ssize_t n, size_t size) {
  return ssl == nullptr && static_cast<size_t>(n) < size;
}

namespace {

bool HeaderIs(std::string_view line, std::string_view name, std::string_view* value) {
  if (line.size() <= name.size() || line[name.size()] != ':') return false;
  for (size_t i = 0; i < name.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(line[i])) != name[i]) return false;
  }
  std::string_view v = line.substr(name.size() + 1);
  while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
  while (!v.empty() && (v.back() == '\r' || v.back() == ' ')) v.remove_suffix(1);
  *value = v;
  return true;
}

}  // namespace

std::optional<Head> ParseHead(std::string_view head) {
  if (head.size() < 12 || head.substr(0, 5) != "HTTP/") return std::nullopt;
  Head h;
  h.status = std::atoi(std::string(head.substr(9, 3)).c_str());
  if (h.status < 100 || h.status > 599) return std::nullopt;
  size_t at = head.find('\n');
  while (at != std::string_view::npos && at + 1 < head.size()) {
    const size_t end = head.find('\n', at + 1);
    const std::string_view line =
        head.substr(at + 1, (end == std::string_view::npos ? head.size() : end) - at - 1);
    std::string_view v;
    if (HeaderIs(line, "content-length", &v)) {
      h.content_length = std::strtoull(std::string(v).c_str(), nullptr, 10);
    } else if (HeaderIs(line, "transfer-encoding", &v)) {
      h.chunked = v.find("chunked") != std::string_view::npos;
    } else if (HeaderIs(line, "stream-next-offset", &v)) {
      h.next_offset = std::string(v);
    } else if (HeaderIs(line, "stream-up-to-date", &v)) {
      h.up_to_date = v == "true";
    }
    at = end;
  }
  return h;
}

std::string RequestHead(std::string_view method, std::string_view target, const Endpoint& e,
                        std::string_view token) {
  std::string req;
  req.append(method).append(" ").append(target).append(" HTTP/1.1\r\nHost: ");
  req.append(e.host_header).append("\r\n");
  if (!token.empty()) req.append("Authorization: Bearer ").append(token).append("\r\n");
  return req;
}

std::string Escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.') {
      out.push_back(c);
    } else {
      char hex[4];
      std::snprintf(hex, sizeof(hex), "%%%02X", static_cast<unsigned char>(c));
      out.append(hex);
    }
  }
  return out;
}

double RssMb(long pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::atof(line.c_str() + 6) / 1024.0;
  }
  return -1;
}

double ProcessCpuMs(long pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos) return -1;
  // Fields after the command: state is field 3; utime and stime are fields 14 and 15.
  std::istringstream fields(stat.substr(paren + 2));
  std::string field;
  double ticks = 0;
  for (int i = 3; i <= 15 && fields >> field; ++i) {
    if (i >= 14) ticks += std::atof(field.c_str());
  }
  return ticks * 1000.0 / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

int OpenNonBlocking(const Endpoint& e, int epoll, uint64_t tag) {
  const int fd = ::socket(e.addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  const int rc = ::connect(fd, reinterpret_cast<const sockaddr*>(&e.addr), e.addr_len);
  epoll_event ev{};
  ev.events = EPOLLOUT;
  ev.data.u64 = tag;
  if ((rc != 0 && errno != EINPROGRESS) || ::epoll_ctl(epoll, EPOLL_CTL_ADD, fd, &ev) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

bool ConnectFailed(int fd) {
  int err = 0;
  socklen_t len = sizeof(err);
  return ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0;
}

}  // namespace internal

}  // namespace runnel::cli::load
