// What the load driver's files share (load_net.cc: sockets, TLS, HTTP/1.1 framing, process
// figures; load_driver.cc: URLs and the read load; load_append.cc: the append load; load_sse.cc:
// the SSE fan-out and soak). Internal to `runnel bench`.
#ifndef RUNNEL_CLI_LOAD_INTERNAL_H_
#define RUNNEL_CLI_LOAD_INTERNAL_H_

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <sys/types.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "cli/load_driver.h"
#include "runnel/status.h"

namespace runnel::cli::load::internal {

using Clock = std::chrono::steady_clock;

// "what: " and the text of errno.
std::string Errno(std::string_view what);

// Wall-clock time in microseconds since the epoch.
int64_t NowMicros();

// Seconds from `since` to now.
double SecondsSince(Clock::time_point since);

// A connected blocking socket with a receive timeout, or kUnavailable.
Result<int> ConnectBlocking(const Endpoint& e);

// ---- TLS --------------------------------------------------------------------------------------

// A TLS client connection on `fd` for the endpoint, with the name (SNI) or address the server's
// certificate must carry; null when OpenSSL cannot make one.
SSL* NewTls(const Endpoint& e, int fd);

// Why a handshake failed, in the words of the other CLI commands.
std::string HandshakeError(SSL* ssl, const Endpoint& e);

// One step of a non-blocking handshake: 1 when done, 0 when the socket must first be ready for
// *want (EPOLLIN or EPOLLOUT), -1 when it failed.
int StepHandshake(SSL* ssl, uint32_t* want);

// What one attempt to move bytes on a non-blocking connection (TLS when `ssl`) says: the bytes
// moved (> 0), kClosed at the end of the stream, kAgain when the socket is not ready (the caller
// waits for readability or writability and tries again), kFailed on an error.
constexpr ssize_t kClosed = 0;
constexpr ssize_t kAgain = -1;
constexpr ssize_t kFailed = -2;

ssize_t SendSome(int fd, SSL* ssl, const char* data, size_t size);
ssize_t RecvSome(int fd, SSL* ssl, char* data, size_t size);

// Whether a read that returned `n` bytes into a buffer of `size` drained the connection: on a
// plain socket a short read did (level-triggered epoll reports anything newer); through TLS
// bytes may wait decrypted inside OpenSSL where epoll does not see them, so never.
bool Drained(const SSL* ssl, ssize_t n, size_t size);

// Decodes a chunked body incrementally; Feed hands each piece of payload to `sink`.
class Dechunker {
 public:
  // Returns false on a malformed stream. Sets done() after the last chunk's CRLF.
  template <typename Sink>
  bool Feed(const char* p, size_t n, Sink&& sink) {
    while (n > 0 && !done_) {
      switch (state_) {
        case State::kSize: {
          const char c = *p;
          ++p, --n;
          if (c == '\n') {
            if (!saw_digit_) return false;
            state_ = remaining_ == 0 ? State::kTrailer : State::kData;
            saw_digit_ = false;
            in_extension_ = false;
          } else if (c == '\r' || in_extension_) {
          } else if (c == ';') {
            in_extension_ = true;
          } else {
            int v = -1;
            if (c >= '0' && c <= '9') v = c - '0';
            if (c >= 'a' && c <= 'f') v = c - 'a' + 10;
            if (c >= 'A' && c <= 'F') v = c - 'A' + 10;
            if (v < 0 || remaining_ > (uint64_t{1} << 40)) return false;
            remaining_ = remaining_ * 16 + static_cast<uint64_t>(v);
            saw_digit_ = true;
          }
          break;
        }
        case State::kData: {
          const size_t take = static_cast<size_t>(std::min<uint64_t>(remaining_, n));
          sink(p, take);
          p += take, n -= take, remaining_ -= take;
          if (remaining_ == 0) state_ = State::kDataEnd;
          break;
        }
        case State::kDataEnd: {
          const char c = *p;
          ++p, --n;
          if (c == '\n') {
            state_ = State::kSize;
          } else if (c != '\r') {
            return false;
          }
          break;
        }
        case State::kTrailer: {
          // Trailer lines end at an empty line.
          const char c = *p;
          ++p, --n;
          if (c == '\n') {
            if (trailer_line_empty_) done_ = true;
            trailer_line_empty_ = true;
          } else if (c != '\r') {
            trailer_line_empty_ = false;
          }
          break;
        }
      }
    }
    return true;
  }
  bool done() const { return done_; }

 private:
  enum class State { kSize, kData, kDataEnd, kTrailer };
  State state_ = State::kSize;
  uint64_t remaining_ = 0;
  bool saw_digit_ = false;
  bool in_extension_ = false;
  bool trailer_line_empty_ = true;
  bool done_ = false;
};

struct Head {
  int status = 0;
  std::optional<uint64_t> content_length;
  bool chunked = false;
  std::string next_offset;
  bool up_to_date = false;
};

// Parses a response head (status line and headers, without the blank line's CRLF).
std::optional<Head> ParseHead(std::string_view head);

std::string RequestHead(std::string_view method, std::string_view target, const Endpoint& e,
                        std::string_view token);

// One blocking keep-alive connection for request/response traffic.
class Client {
 public:
  // Connects, and for https handshakes (kUnavailable when the certificate is not trusted).
  static Result<std::unique_ptr<Client>> Connect(const Endpoint& e, std::string token) {
    RUNNEL_ASSIGN_OR_RETURN(int fd, ConnectBlocking(e));
    std::unique_ptr<Client> client(new Client(e, fd, std::move(token)));
    if (e.tls) {
      client->ssl_ = NewTls(e, fd);
      if (client->ssl_ == nullptr) return Status::Internal("cannot set up a TLS connection");
      ERR_clear_error();
      if (SSL_connect(client->ssl_) != 1) {
        return Status::Unavailable(HandshakeError(client->ssl_, e));
      }
    }
    return client;
  }
  ~Client() {
    if (ssl_ != nullptr) SSL_free(ssl_);
    ::close(fd_);
  }
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Sends one request and reads the whole answer; returns the head, and counts the body bytes
  // in *body_bytes when given.
  Result<Head> Request(std::string_view method, std::string_view target,
                       std::string_view content_type, std::string_view body,
                       uint64_t* body_bytes = nullptr) {
    std::string req = RequestHead(method, target, endpoint_, token_);
    if (!content_type.empty()) req.append("Content-Type: ").append(content_type).append("\r\n");
    if (!body.empty() || method == "POST" || method == "PUT") {
      req.append("Content-Length: ").append(std::to_string(body.size())).append("\r\n");
    }
    req.append("\r\n").append(body);
    RUNNEL_RETURN_IF_ERROR(WriteAll(req));
    size_t head_end;
    while ((head_end = buf_.find("\r\n\r\n")) == std::string::npos) {
      if (buf_.size() > (64u << 10)) return Status::Internal("an answer's head passed 64 KiB");
      RUNNEL_RETURN_IF_ERROR(Fill());
    }
    auto h = ParseHead(std::string_view(buf_).substr(0, head_end));
    if (!h) return Status::Internal("malformed answer from " + endpoint_.host_header);
    buf_.erase(0, head_end + 4);
    uint64_t bytes = 0;
    auto sink = [&bytes](const char*, size_t n) { bytes += n; };
    if (method == "HEAD" || h->status == 204 || h->status == 304) {
      // no body
    } else if (h->chunked) {
      Dechunker d;
      for (;;) {
        if (!d.Feed(buf_.data(), buf_.size(), sink)) {
          return Status::Internal("malformed chunked body");
        }
        buf_.clear();  // nothing is pipelined: bytes after the last chunk cannot exist
        if (d.done()) break;
        RUNNEL_RETURN_IF_ERROR(Fill());
      }
    } else if (h->content_length) {
      uint64_t left = *h->content_length;
      for (;;) {
        const size_t take = static_cast<size_t>(std::min<uint64_t>(left, buf_.size()));
        sink(buf_.data(), take);
        buf_.erase(0, take);
        left -= take;
        if (left == 0) break;
        RUNNEL_RETURN_IF_ERROR(Fill());
      }
    } else {
      return Status::Internal("an answer without a length on a keep-alive connection");
    }
    if (body_bytes != nullptr) *body_bytes = bytes;
    return *h;
  }

 private:
  Client(const Endpoint& e, int fd, std::string token)
      : endpoint_(e), fd_(fd), token_(std::move(token)) {}

  // The socket blocks (with a receive timeout), so kAgain means the timeout passed.
  Status WriteAll(std::string_view data) {
    while (!data.empty()) {
      const ssize_t n = SendSome(fd_, ssl_, data.data(), data.size());
      if (n <= 0) return Status::Unavailable(Errno("send"));
      data.remove_prefix(static_cast<size_t>(n));
    }
    return Status::OK();
  }

  Status Fill() {
    char chunk[1 << 16];
    const ssize_t n = RecvSome(fd_, ssl_, chunk, sizeof(chunk));
    if (n == kClosed) return Status::Unavailable("the server closed the connection");
    if (n < 0) return Status::Unavailable(Errno("recv"));
    buf_.append(chunk, static_cast<size_t>(n));
    return Status::OK();
  }

  const Endpoint& endpoint_;
  int fd_;
  SSL* ssl_ = nullptr;
  std::string token_;
  std::string buf_;
};

// `s` percent-encoded (all but letters, digits, '_', '-' and '.'), for a URL path or query.
std::string Escape(std::string_view s);

// The resident memory (VmRSS) of a process in MB; -1 when unknown.
double RssMb(long pid);

// CPU time (user + system) a process has used so far, in milliseconds; -1 when unknown.
double ProcessCpuMs(long pid);

// A non-blocking connection being opened: the socket, registered with `epoll` for writability
// under `tag`, or a negative value.
int OpenNonBlocking(const Endpoint& e, int epoll, uint64_t tag);

// Whether the non-blocking connect of `fd` failed (SO_ERROR).
bool ConnectFailed(int fd);

}  // namespace runnel::cli::load::internal

#endif  // RUNNEL_CLI_LOAD_INTERNAL_H_
