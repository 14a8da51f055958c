// The HTTP server from the wire: the input is the raw bytes a client sends on one connection
// (request lines, headers, chunked framing, bodies, pipelined requests, garbage), written to a
// real server on a loopback port; the server's answer is read until it closes the connection.
// The server must never crash, answer every request it can frame with a well-formed HTTP/1.1
// status line, and never answer 500: bad input is a client error.
//
// One server (memory store, small limits, short live reads) serves every input; requests meet
// on the same few streams across inputs, as a long-running server's would.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

#include "runnel/registry.h"
#include "server/http_server.h"
#include "support/loopback_socket.h"

namespace {

using runnel::server::HttpServer;
using runnel::server::ServerOptions;

// One server for the process; stopped when the process exits normally (the replay's end), so
// its threads end before static destruction.
class WireServer {
 public:
  WireServer() {
    ServerOptions options;
    options.host = "127.0.0.1";
    options.port = 0;
    options.threads = 2;
    options.max_body_bytes = 64u << 10;
    options.max_header_bytes = 4u << 10;
    options.max_url_bytes = 1u << 10;
    options.request_timeout_ms = 2000;
    options.idle_timeout_ms = 2000;
    options.sse_max_duration_ms = 50;
    options.service.long_poll_timeout_ms = 20;
    options.service.max_append_messages = 1000;
    auto server = HttpServer::Start(runnel::StreamRegistry(), options);
    if (!server.ok()) {
      std::fprintf(stderr, "cannot start the server: %s\n", server.status().ToString().c_str());
      std::abort();
    }
    server_ = std::move(*server);
    thread_ = std::thread([this] { server_->Run(); });
  }
  ~WireServer() {
    server_->Stop();
    thread_.join();
  }
  uint16_t port() const { return server_->port(); }

 private:
  std::unique_ptr<HttpServer> server_;
  std::thread thread_;
};

uint16_t ServerPort() {
  static WireServer server;
  return server.port();
}

// Reads what the server sends until it closes the connection, or 5 s pass.
std::string ReadAll(int fd) {
  std::string out;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  char buf[16384];
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

// Every status line in `answer` (at the start, and after each blank line that ends a head,
// skipping bodies roughly) must be HTTP/1.1 with a 3-digit status other than 500.
void CheckAnswer(std::string_view answer) {
  size_t at = 0;
  while ((at = answer.find("HTTP/1.1 ", at)) != std::string_view::npos) {
    // Only status lines at the start of a line; a body may quote the text.
    if (at != 0 && answer[at - 1] != '\n') {
      at += 9;
      continue;
    }
    const std::string_view code = answer.substr(at + 9, 3);
    if (code.size() != 3 || code[0] < '1' || code[0] > '5' || code[1] < '0' || code[1] > '9' ||
        code[2] < '0' || code[2] > '9') {
      std::fprintf(stderr, "malformed status line at %zu\n", at);
      std::abort();
    }
    if (code == "500") {
      std::fprintf(stderr, "the server answered 500:\n%.*s\n", static_cast<int>(answer.size()),
                   answer.data());
      std::abort();
    }
    at += 12;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const int fd = runnel::testing::ConnectLoopback(ServerPort(), 5);
  if (fd < 0) {
    std::fprintf(stderr, "cannot connect to the server\n");
    std::abort();
  }
  // The peer may close early (after a 4xx); what it did not read is dropped.
  runnel::testing::SendAll(fd, std::string_view(reinterpret_cast<const char*>(data), size));
  ::shutdown(fd, SHUT_WR);
  const std::string answer = ReadAll(fd);
  ::close(fd);
  if (std::getenv("HTTP_WIRE_FUZZ_PRINT") != nullptr) {
    std::fwrite(answer.data(), 1, answer.size(), stdout);
    std::fputs("\n----\n", stdout);
  }
  CheckAnswer(answer);
  return 0;
}
