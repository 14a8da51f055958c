#include "cli/load_driver.h"

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
namespace {

using Clock = std::chrono::steady_clock;

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

// A connected blocking socket with a receive timeout, or kUnavailable.
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

// ---- TLS --------------------------------------------------------------------------------------

// A TLS client connection on `fd` for the endpoint, with the name (SNI) or address the server's
// certificate must carry; null when OpenSSL cannot make one.
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

// Why a handshake failed, in the words of the other CLI commands.
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

// One step of a non-blocking handshake: 1 when done, 0 when the socket must first be ready for
// *want (EPOLLIN or EPOLLOUT), -1 when it failed.
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

// What one attempt to move bytes on a non-blocking connection (TLS when `ssl`) says: the bytes
// moved (> 0), kClosed at the end of the stream, kAgain when the socket is not ready (the caller
// waits for readability or writability and tries again), kFailed on an error.
constexpr ssize_t kClosed = 0;
constexpr ssize_t kAgain = -1;
constexpr ssize_t kFailed = -2;

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

// Whether a read that returned `n` bytes into a buffer of `size` drained the connection: on a
// plain socket a short read did (level-triggered epoll reports anything newer); through TLS
// bytes may wait decrypted inside OpenSSL where epoll does not see them, so never.
bool Drained(const SSL* ssl, ssize_t n, size_t size) {
  return ssl == nullptr && static_cast<size_t>(n) < size;
}

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

// Parses a response head (status line and headers, without the blank line's CRLF).
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

Result<uint64_t> ReadAll(Client& client, const std::string& target) {
  std::string offset = "-1";
  uint64_t total = 0;
  for (int page = 0; page < 1000000; ++page) {
    uint64_t bytes = 0;
    RUNNEL_ASSIGN_OR_RETURN(
        Head h, client.Request("GET", target + "?offset=" + Escape(offset), "", "", &bytes));
    if (h.status == 404) return Status::NotFound("no stream at " + target);
    if (h.status != 200) {
      return Status::Internal("a catch-up read answered HTTP " + std::to_string(h.status));
    }
    total += bytes;
    if (h.next_offset.empty()) return Status::Internal("a read without Stream-Next-Offset");
    offset = h.next_offset;
    if (h.up_to_date || bytes == 0) return total;
  }
  return Status::Internal("a catch-up read did not reach the tail in 1,000,000 pages");
}

double RssMb(long pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::atof(line.c_str() + 6) / 1024.0;
  }
  return -1;
}

// CPU time (user + system) a process has used so far, in milliseconds; -1 when unknown.
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

// A non-blocking connection being opened: the socket, registered with `epoll` for writability
// under `tag`, or a negative value.
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

// ---- appends ----------------------------------------------------------------------------------

// One epoll thread driving some of the append connections.
class AppendThread {
 public:
  // `interval` zero: each connection sends its next append as soon as the last is answered.
  // Otherwise each sends on a fixed schedule, one append per `interval` from `first_due[i]`.
  // Connection i sends the requests of `requests[i]` in turn (they must outlive the thread).
  AppendThread(const Endpoint& e, std::vector<std::vector<const std::string*>> requests,
               Clock::time_point deadline, Clock::duration interval,
               std::vector<Clock::time_point> first_due)
      : endpoint_(e),
        requests_(std::move(requests)),
        deadline_(deadline),
        interval_(interval),
        first_due_(std::move(first_due)) {
    epoll_ = ::epoll_create1(EPOLL_CLOEXEC);
  }
  ~AppendThread() {
    if (thread_.joinable()) thread_.join();
    for (Conn& c : conns_) {
      if (c.ssl != nullptr) SSL_free(c.ssl);
      if (c.fd >= 0) ::close(c.fd);
    }
    if (epoll_ >= 0) ::close(epoll_);
  }
  void Start() {
    thread_ = std::thread([this] { Run(); });
  }
  void Join() {
    if (thread_.joinable()) thread_.join();
  }
  bool done() const { return done_.load(std::memory_order_acquire); }
  // Acknowledged appends so far, readable while the thread runs.
  uint64_t acknowledged() const { return acked_.load(std::memory_order_relaxed); }
  // After Join().
  AppendFigures& figures() { return figures_; }
  Clock::time_point last_answer() const { return last_answer_; }

 private:
  struct Conn {
    int fd = -1;
    SSL* ssl = nullptr;  // https: the TLS connection on fd
    bool connecting = true;
    bool handshaking = false;  // https: connected, the TLS handshake under way
    // The requests this connection sends in turn, and the next one's index.
    std::vector<const std::string*> rotation;
    size_t next_request = 0;
    const std::string* request = nullptr;
    size_t sent = 0;  // bytes of *request written
    bool in_flight = false;
    // When the append in flight was sent; on a schedule, when it was due (so a server that
    // falls behind is charged for the wait its slowness caused).
    Clock::time_point sent_at;
    Clock::time_point due;  // on a schedule: when the next append is due
    std::string in;
  };

  struct Due {
    Clock::time_point at;
    size_t conn;
    bool operator>(const Due& o) const { return at > o.at; }
  };

  // Ends the connection's socket (and TLS connection).
  void Drop(Conn& c) {
    ::epoll_ctl(epoll_, EPOLL_CTL_DEL, c.fd, nullptr);
    if (c.ssl != nullptr) SSL_free(c.ssl);
    c.ssl = nullptr;
    ::close(c.fd);
    c.fd = -1;
  }

  void Close(Conn& c) {
    Drop(c);
    --live_;
  }

  // After an answer (or the connect): the next append now, at its due time, or none after the
  // deadline.
  void Next(Conn& c, Clock::time_point now) {
    if (interval_ == Clock::duration::zero()) {
      if (now < deadline_) return Begin(c, now);
      return Close(c);
    }
    if (c.due >= deadline_) return Close(c);
    if (now >= deadline_) {
      // Behind the schedule when time ran out: what was still due is counted, not sent.
      figures_.unsent +=
          static_cast<uint64_t>((deadline_ - c.due + interval_ - Clock::duration(1)) / interval_);
      return Close(c);
    }
    if (c.due <= now) return Begin(c, c.due);
    schedule_.push(Due{c.due, static_cast<size_t>(&c - conns_.data())});
  }

  void Fail(Conn& c) {
    if (c.fd >= 0) Drop(c);
    ++figures_.failed;
    ++figures_.statuses[0];
    --live_;
  }

  // Writes what is left of the request; waits for writability when the socket is full.
  void Send(Conn& c) {
    while (c.sent < c.request->size()) {
      const ssize_t n =
          SendSome(c.fd, c.ssl, c.request->data() + c.sent, c.request->size() - c.sent);
      if (n == kAgain) {
        Watch(c, EPOLLIN | EPOLLOUT);
        return;
      }
      if (n <= 0) return Fail(c);
      c.sent += static_cast<size_t>(n);
    }
    Watch(c, EPOLLIN);
  }

  void Watch(Conn& c, uint32_t events) {
    epoll_event ev{};
    ev.events = events;
    ev.data.u64 = static_cast<uint64_t>(&c - conns_.data());
    if (::epoll_ctl(epoll_, EPOLL_CTL_MOD, c.fd, &ev) != 0) Fail(c);
  }

  void Begin(Conn& c, Clock::time_point sent_at) {
    c.request = c.rotation[c.next_request];
    c.next_request = (c.next_request + 1) % c.rotation.size();
    c.sent = 0;
    c.in_flight = true;
    c.sent_at = sent_at;
    c.due += interval_;
    Send(c);
  }

  // Consumes whole answers from c.in; false when the connection must end.
  bool Answers(Conn& c) {
    for (;;) {
      const size_t end = c.in.find("\r\n\r\n");
      if (end == std::string::npos) return c.in.size() <= (64u << 10);
      auto h = ParseHead(std::string_view(c.in).substr(0, end));
      if (!h) return false;
      uint64_t length = 0;
      if (h->status != 204 && h->status != 304) {
        if (!h->content_length) return false;  // appends are answered with a length
        length = *h->content_length;
      }
      if (c.in.size() < end + 4 + length) return true;  // the body is still coming
      c.in.erase(0, end + 4 + length);
      if (!c.in_flight) return false;  // an answer nobody asked for
      const Clock::time_point now = Clock::now();
      c.in_flight = false;
      last_answer_ = now;
      if (h->status >= 200 && h->status < 300) {
        ++figures_.acknowledged;
        acked_.fetch_add(1, std::memory_order_relaxed);
        const auto us = std::chrono::duration_cast<std::chrono::microseconds>(now - c.sent_at);
        figures_.latency_us.push_back(static_cast<uint32_t>(
            std::min<int64_t>(us.count(), std::numeric_limits<uint32_t>::max())));
      } else {
        ++figures_.failed;
        ++figures_.statuses[h->status];
      }
      Next(c, now);
      if (c.fd < 0 || !c.in_flight) return true;
    }
  }

  void OnEvent(Conn& c, uint32_t events) {
    if (c.fd < 0) return;
    if (c.connecting) {
      if (ConnectFailed(c.fd)) return Fail(c);
      c.connecting = false;
      if (endpoint_.tls) {
        c.ssl = NewTls(endpoint_, c.fd);
        if (c.ssl == nullptr) return Fail(c);
        c.handshaking = true;
      } else {
        Watch(c, EPOLLIN);  // connected: from now on writability matters only mid-request
        if (c.fd < 0) return;
        return Next(c, Clock::now());
      }
    }
    if (c.handshaking) {
      uint32_t want = 0;
      const int step = StepHandshake(c.ssl, &want);
      if (step < 0) return Fail(c);
      if (step == 0) return Watch(c, want);
      c.handshaking = false;
      Watch(c, EPOLLIN);
      if (c.fd < 0) return;
      return Next(c, Clock::now());
    }
    if ((events & EPOLLOUT) != 0 && c.in_flight && c.sent < c.request->size()) Send(c);
    if (c.fd < 0 || (events & (EPOLLIN | EPOLLHUP | EPOLLERR)) == 0) return;
    char buf[16384];
    for (;;) {
      const ssize_t n = RecvSome(c.fd, c.ssl, buf, sizeof(buf));
      if (n == kAgain) return;
      if (n <= 0) {
        if (c.in_flight) return Fail(c);
        return Close(c);
      }
      c.in.append(buf, static_cast<size_t>(n));
      if (!Answers(c)) return Fail(c);
      if (c.fd < 0 || Drained(c.ssl, n, sizeof(buf))) return;
    }
  }

  void Run() {
    if (epoll_ < 0) return;
    conns_.resize(requests_.size());
    for (size_t i = 0; i < conns_.size(); ++i) {
      conns_[i].rotation = requests_[i];
      conns_[i].request = requests_[i].front();
      if (i < first_due_.size()) conns_[i].due = first_due_[i];
      conns_[i].fd = OpenNonBlocking(endpoint_, epoll_, i);
      if (conns_[i].fd < 0) {
        ++figures_.failed;
        ++figures_.statuses[0];
      } else {
        ++live_;
      }
    }
    // After the deadline the requests in flight are awaited, but not forever.
    const Clock::time_point drain_until = deadline_ + std::chrono::seconds(10);
    std::vector<epoll_event> evs(256);
    while (live_ > 0 && Clock::now() < drain_until) {
      // Sleep until the next scheduled append at the latest (to the microsecond).
      auto wait = std::chrono::nanoseconds(std::chrono::milliseconds(50));
      if (!schedule_.empty()) {
        wait = std::clamp<std::chrono::nanoseconds>(schedule_.top().at - Clock::now(),
                                                    std::chrono::nanoseconds(0), wait);
      }
      const timespec timeout{0, static_cast<long>(wait.count())};
      const int n =
          ::epoll_pwait2(epoll_, evs.data(), static_cast<int>(evs.size()), &timeout, nullptr);
      for (int k = 0; k < n; ++k) {
        const epoll_event& ev = evs[static_cast<size_t>(k)];
        OnEvent(conns_[ev.data.u64], ev.events);
      }
      const Clock::time_point now = Clock::now();
      while (!schedule_.empty() && schedule_.top().at <= now) {
        Conn& c = conns_[schedule_.top().conn];
        const Clock::time_point due = schedule_.top().at;
        schedule_.pop();
        if (c.fd >= 0 && !c.in_flight && c.due == due) Next(c, now);
      }
    }
    for (Conn& c : conns_) {
      if (c.fd >= 0 && c.in_flight) {
        ++figures_.failed;
        ++figures_.statuses[0];
      }
    }
    done_.store(true, std::memory_order_release);
  }

  const Endpoint& endpoint_;
  const std::vector<std::vector<const std::string*>> requests_;
  const Clock::time_point deadline_;
  const Clock::duration interval_;
  const std::vector<Clock::time_point> first_due_;
  int epoll_ = -1;
  std::vector<Conn> conns_;
  std::priority_queue<Due, std::vector<Due>, std::greater<>> schedule_;
  int live_ = 0;
  AppendFigures figures_;
  std::atomic<uint64_t> acked_{0};
  std::atomic<bool> done_{false};
  Clock::time_point last_answer_{};
  std::thread thread_;
};

// ---- SSE fan-out ------------------------------------------------------------------------------

// One SSE reader connection, driven by one epoll thread.
struct Reader {
  int fd = -1;
  SSL* ssl = nullptr;  // https: the TLS connection on fd
  // kHandshake: https only, connected and handshaking.
  enum class Phase { kConnecting, kHandshake, kHead, kBody, kDead } phase = Phase::kConnecting;
  std::string head;
  std::string events;  // dechunked body not yet cut into events
  Dechunker dechunker;
  int received = 0;
  // Following readers: the offset of the last control event, where a new response resumes.
  std::string offset;
  int reconnects = 0;
};

// How the readers of a ReaderThread read.
struct ReaderMode {
  // Each message carries its send time: "t=<micros>" lines (text) or {"t":<micros>} (JSON).
  bool json = false;
  // Keep every delivery's latency (a soak counts deliveries only: its latencies would not fit).
  bool keep_latencies = true;
  // When a response ends (the server ends SSE responses after a while), reconnect from the
  // offset of its last control event, as a client following the stream does. `target` and
  // `token` build that request.
  bool follow = false;
  std::string target;
  std::string token;
};

class ReaderThread {
 public:
  ReaderThread(const Endpoint& e, std::string request, int count, ReaderMode mode = {})
      : endpoint_(e),
        request_(std::move(request)),
        mode_(std::move(mode)),
        readers_(static_cast<size_t>(count)) {
    epoll_ = ::epoll_create1(EPOLL_CLOEXEC);
  }
  ~ReaderThread() {
    Stop();
    for (Reader& r : readers_) {
      if (r.ssl != nullptr) SSL_free(r.ssl);
      if (r.fd >= 0) ::close(r.fd);
    }
    if (epoll_ >= 0) ::close(epoll_);
  }

  void Start() {
    thread_ = std::thread([this] { Run(); });
  }
  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  int connected() const { return connected_.load(); }
  int failed() const { return failed_.load(); }
  uint64_t delivered() const { return delivered_.load(); }
  // Readers that have seen at least `n` messages (any thread; a moment's count).
  int received_at_least(int n) const {
    MutexLock lock(received_mu_);
    int out = 0;
    for (int r : received_) out += r >= n ? 1 : 0;
    return out;
  }
  // Only after Stop().
  const std::vector<double>& latencies_ms() const { return latencies_ms_; }
  const std::vector<Reader>& readers() const { return readers_; }

 private:
  static constexpr size_t kConnectingAtOnce = 256;

  void Open(size_t i) {
    Reader& r = readers_[i];
    ++connecting_;  // Fail() counts it down again
    r.fd = OpenNonBlocking(endpoint_, epoll_, i);
    if (r.fd < 0) Fail(r);
  }

  // Ends the reader's socket (and TLS connection).
  void Drop(Reader& r) {
    ::epoll_ctl(epoll_, EPOLL_CTL_DEL, r.fd, nullptr);
    if (r.ssl != nullptr) SSL_free(r.ssl);
    r.ssl = nullptr;
    ::close(r.fd);
    r.fd = -1;
  }

  void Fail(Reader& r) {
    if (r.phase == Reader::Phase::kConnecting || r.phase == Reader::Phase::kHandshake) {
      --connecting_;
    }
    if (r.phase != Reader::Phase::kDead) ++failed_;
    r.phase = Reader::Phase::kDead;
    if (r.fd >= 0) Drop(r);
  }

  // A following reader whose response ended: a new connection from its last offset.
  void Reopen(size_t i) {
    Reader& r = readers_[i];
    Drop(r);
    r.head.clear();
    r.events.clear();
    r.dechunker = Dechunker();
    r.phase = Reader::Phase::kConnecting;
    ++r.reconnects;
    --connected_;
    Open(i);
  }

  std::string RequestFor(const Reader& r) const {
    if (!mode_.follow || r.offset.empty()) return request_;
    std::string req = RequestHead("GET", mode_.target + "?offset=" + Escape(r.offset) + "&live=sse",
                                  endpoint_, mode_.token);
    return req + "Accept: text/event-stream\r\n\r\n";
  }

  void OnWritable(size_t i) {
    Reader& r = readers_[i];
    if (ConnectFailed(r.fd)) return Fail(r);
    if (endpoint_.tls) {
      r.ssl = NewTls(endpoint_, r.fd);
      if (r.ssl == nullptr) return Fail(r);
      r.phase = Reader::Phase::kHandshake;
      return OnHandshake(i);
    }
    SendRequest(i);
  }

  void OnHandshake(size_t i) {
    Reader& r = readers_[i];
    uint32_t want = 0;
    const int step = StepHandshake(r.ssl, &want);
    if (step < 0) return Fail(r);
    if (step == 1) return SendRequest(i);
    epoll_event ev{};
    ev.events = want;
    ev.data.u64 = i;
    if (::epoll_ctl(epoll_, EPOLL_CTL_MOD, r.fd, &ev) != 0) return Fail(r);
  }

  void SendRequest(size_t i) {
    Reader& r = readers_[i];
    // The request is small: one send on a fresh connection takes it whole.
    const std::string request = RequestFor(r);
    const ssize_t n = SendSome(r.fd, r.ssl, request.data(), request.size());
    if (n != static_cast<ssize_t>(request.size())) return Fail(r);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = i;
    if (::epoll_ctl(epoll_, EPOLL_CTL_MOD, r.fd, &ev) != 0) return Fail(r);
    r.phase = Reader::Phase::kHead;
    --connecting_;
  }

  void OnReadable(size_t i) {
    Reader& r = readers_[i];
    char buf[16384];
    for (;;) {
      const ssize_t n = RecvSome(r.fd, r.ssl, buf, sizeof(buf));
      if (n == kAgain) return;
      if (n == kClosed && mode_.follow && r.phase == Reader::Phase::kBody && r.dechunker.done()) {
        return Reopen(i);
      }
      if (n <= 0) return Fail(r);
      const int64_t now = NowMicros();
      const size_t left = static_cast<size_t>(n);
      if (r.phase == Reader::Phase::kHead) {
        r.head.append(buf, left);
        const size_t end = r.head.find("\r\n\r\n");
        if (end == std::string::npos) {
          if (r.head.size() > 65536) return Fail(r);
          continue;
        }
        const auto h = ParseHead(std::string_view(r.head).substr(0, end));
        if (!h || h->status != 200 || !h->chunked) return Fail(r);
        std::string rest = r.head.substr(end + 4);
        r.head.clear();
        r.phase = Reader::Phase::kBody;
        ++connected_;
        if (!Body(r, rest.data(), rest.size(), now)) return Fail(r);
        continue;
      }
      if (!Body(r, buf, left, now)) return Fail(r);
      // Level-triggered: a short read drained the socket, and anything newer is reported again;
      // skipping the recv that would say EAGAIN halves the driver's system calls.
      if (Drained(r.ssl, n, sizeof(buf))) return;
    }
  }

  bool Body(Reader& r, const char* p, size_t n, int64_t now) {
    if (!r.dechunker.Feed(p, n, [&](const char* d, size_t m) { r.events.append(d, m); })) {
      return false;
    }
    size_t start = 0;
    for (;;) {
      const size_t cut = r.events.find("\n\n", start);
      if (cut == std::string::npos) break;
      const std::string_view event(r.events.data() + start, cut - start);
      start = cut + 2;
      if (mode_.follow &&
          (event.rfind("event: control", 0) == 0 || event.rfind("event:control", 0) == 0)) {
        constexpr std::string_view kKey = "\"streamNextOffset\":\"";
        const size_t at = event.find(kKey);
        if (at != std::string_view::npos) {
          const size_t from = at + kKey.size();
          r.offset = std::string(event.substr(from, event.find('"', from) - from));
        }
        continue;
      }
      if (event.rfind("event: data", 0) != 0 && event.rfind("event:data", 0) != 0) continue;
      const std::string_view key = mode_.json ? "\"t\":" : "t=";
      for (size_t at = event.find(key); at != std::string_view::npos;
           at = event.find(key, at + key.size())) {
        // Text: only "data:t=" / "data: t=" lines carry a send time.
        const bool line_start = mode_.json || (at >= 5 && event.substr(at - 5, 5) == "data:") ||
                                (at >= 6 && event.substr(at - 6, 6) == "data: ");
        if (!line_start) continue;
        const int64_t sent = std::strtoll(event.data() + at + key.size(), nullptr, 10);
        if (mode_.keep_latencies) {
          latencies_ms_.push_back(static_cast<double>(now - sent) / 1000.0);
        }
        ++r.received;
        ++delivered_;
      }
    }
    r.events.erase(0, start);
    if (mode_.follow) {
      MutexLock lock(received_mu_);
      received_[static_cast<size_t>(&r - readers_.data())] = r.received;
    }
    return true;
  }

  void Run() {
    if (epoll_ < 0) {
      failed_ = static_cast<int>(readers_.size());
      return;
    }
    size_t next = 0;
    std::vector<epoll_event> evs(1024);
    while (!stop_) {
      while (next < readers_.size() && connecting_ < kConnectingAtOnce) Open(next++);
      const int n = ::epoll_wait(epoll_, evs.data(), static_cast<int>(evs.size()), 20);
      for (int k = 0; k < n; ++k) {
        const size_t i = evs[static_cast<size_t>(k)].data.u64;
        Reader& r = readers_[i];
        if (r.phase == Reader::Phase::kDead) continue;
        if (r.phase == Reader::Phase::kConnecting) {
          OnWritable(i);
        } else if (r.phase == Reader::Phase::kHandshake) {
          OnHandshake(i);
        } else {
          OnReadable(i);
        }
      }
    }
  }

  const Endpoint& endpoint_;
  const std::string request_;
  const ReaderMode mode_;
  std::vector<Reader> readers_;
  mutable Mutex received_mu_;
  std::vector<int> received_ RUNNEL_GUARDED_BY(received_mu_) = std::vector<int>(readers_.size());
  int epoll_ = -1;
  size_t connecting_ = 0;  // only the thread itself
  std::atomic<int> connected_{0};
  std::atomic<int> failed_{0};
  std::atomic<uint64_t> delivered_{0};
  std::atomic<bool> stop_{false};
  std::vector<double> latencies_ms_;  // only the thread itself until Stop()
  std::thread thread_;
};

}  // namespace

Result<Endpoint> ResolveUrl(std::string_view url, const std::string& cacert) {
  const bool tls = url.starts_with("https://");
  if (!tls && !url.starts_with("http://")) {
    return Status::InvalidArgument("the URL must start with http:// or https:// (got '" +
                                   std::string(url) + "')");
  }
  if (!cacert.empty() && !tls) {
    return Status::InvalidArgument("--cacert needs an https:// server URL");
  }
  url.remove_prefix(tls ? 8 : 7);
  url = url.substr(0, url.find('/'));
  if (url.empty()) return Status::InvalidArgument("the URL has no host");
  std::string host;
  std::string port = tls ? "443" : "80";
  if (url.front() == '[') {
    const size_t close = url.find(']');
    if (close == std::string_view::npos) return Status::InvalidArgument("unclosed [ in the URL");
    host = std::string(url.substr(1, close - 1));
    std::string_view rest = url.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return Status::InvalidArgument("junk after ] in the URL");
      port = std::string(rest.substr(1));
    }
  } else {
    const size_t colon = url.rfind(':');
    host = std::string(url.substr(0, colon));
    if (colon != std::string_view::npos) port = std::string(url.substr(colon + 1));
  }
  if (port.empty() || port.size() > 5 ||
      !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; }) ||
      std::atoi(port.c_str()) < 1 || std::atoi(port.c_str()) > 65535) {
    return Status::InvalidArgument("the URL's port must be 1..65535");
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &found);
  if (rc != 0 || found == nullptr) {
    return Status::Unavailable("cannot resolve '" + host + "': " + ::gai_strerror(rc));
  }
  Endpoint e;
  std::memcpy(&e.addr, found->ai_addr, found->ai_addrlen);
  e.addr_len = found->ai_addrlen;
  ::freeaddrinfo(found);
  e.host_header = std::string(url);
  e.host = host;
  if (tls) {
    // As the other CLI commands (http_client.cc): TLS 1.2 or later, the server's certificate
    // verified against the system's trust store or `cacert`.
    SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
    if (ctx == nullptr) return Status::Internal("cannot create a TLS context");
    e.tls = std::shared_ptr<ssl_ctx_st>(ctx, SSL_CTX_free);
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
    if (cacert.empty()) {
      SSL_CTX_set_default_verify_paths(ctx);
    } else if (SSL_CTX_load_verify_locations(ctx, cacert.c_str(), nullptr) != 1) {
      return Status::InvalidArgument("cannot load CA certificates (PEM) from '" + cacert + "'");
    }
  }
  return e;
}

Result<AppendFigures> RunAppends(const Endpoint& endpoint, const AppendLoad& load) {
  if (load.targets.empty()) return Status::InvalidArgument("no stream to append to");
  if (load.connections < 1 || load.connections > kMaxConnections) {
    return Status::InvalidArgument("connections must be 1.." + std::to_string(kMaxConnections));
  }
  if (load.threads < 1 || load.threads > kMaxThreads) {
    return Status::InvalidArgument("threads must be 1.." + std::to_string(kMaxThreads));
  }
  if (!(load.seconds > 0) || load.seconds > kMaxSeconds) {
    return Status::InvalidArgument("seconds must be more than 0 and at most 3600");
  }
  if (load.body.size() > kMaxBodyBytes) {
    return Status::InvalidArgument("a record may be at most 16 MiB here");
  }
  // Fail early and clearly when nothing listens (or, for https, the handshake fails).
  RUNNEL_RETURN_IF_ERROR(Client::Connect(endpoint, load.token).status());
  std::vector<std::string> per_target;
  for (const std::string& t : load.targets) {
    std::string req = RequestHead("POST", t, endpoint, load.token);
    req.append("Content-Type: ").append(load.content_type).append("\r\n");
    req.append("Content-Length: ").append(std::to_string(load.body.size())).append("\r\n\r\n");
    req.append(load.body);
    per_target.push_back(std::move(req));
  }
  if (load.rate < 0 || load.rate > 10000000) {
    return Status::InvalidArgument("rate must be 0 (as fast as answers come) to 10,000,000/s");
  }
  const int threads = std::min(load.threads, load.connections);
  const Clock::time_point start = Clock::now();
  // On a schedule, each connection sends one append per `interval`, the connections staggered
  // evenly across it.
  const Clock::duration interval =
      load.rate > 0 ? std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(
                          static_cast<double>(load.connections) / load.rate))
                    : Clock::duration::zero();
  const Clock::time_point deadline = start + std::chrono::duration_cast<Clock::duration>(
                                                 std::chrono::duration<double>(load.seconds));
  std::vector<std::unique_ptr<AppendThread>> pool;
  // Connection c appends in turn to targets c, c + connections, c + 2 * connections...: every
  // target gets appends, also when there are more targets than connections.
  const auto connections = static_cast<size_t>(load.connections);
  for (int t = 0; t < threads; ++t) {
    std::vector<std::vector<const std::string*>> requests;
    std::vector<Clock::time_point> first_due;
    for (int c = t; c < load.connections; c += threads) {
      std::vector<const std::string*> rotation;
      for (size_t k = static_cast<size_t>(c); k < per_target.size(); k += connections) {
        rotation.push_back(&per_target[k]);
      }
      if (rotation.empty())
        rotation.push_back(&per_target[static_cast<size_t>(c) % per_target.size()]);
      requests.push_back(std::move(rotation));
      first_due.push_back(start + interval * c / load.connections);
    }
    pool.push_back(std::make_unique<AppendThread>(endpoint, std::move(requests), deadline, interval,
                                                  std::move(first_due)));
  }
  for (auto& t : pool) t->Start();
  if (load.progress) {
    Clock::time_point next_report = start + std::chrono::seconds(1);
    while (!std::all_of(pool.begin(), pool.end(), [](const auto& t) { return t->done(); })) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      if (Clock::now() < next_report) continue;
      next_report += std::chrono::seconds(1);
      uint64_t acked = 0;
      for (const auto& t : pool) acked += t->acknowledged();
      load.progress(SecondsSince(start), acked);
    }
  }
  AppendFigures out;
  Clock::time_point last = start;
  for (auto& t : pool) {
    t->Join();
    AppendFigures& f = t->figures();
    out.acknowledged += f.acknowledged;
    out.unsent += f.unsent;
    out.failed += f.failed;
    for (const auto& [status, n] : f.statuses) out.statuses[status] += n;
    out.latency_us.insert(out.latency_us.end(), f.latency_us.begin(), f.latency_us.end());
    last = std::max(last, t->last_answer());
  }
  // From the first request to the last answer (to now when nothing answered).
  const Clock::time_point end = last > start ? last : Clock::now();
  out.seconds = std::chrono::duration<double>(end - start).count();
  std::sort(out.latency_us.begin(), out.latency_us.end());
  return out;
}

Result<CatchupFigures> RunCatchup(const Endpoint& endpoint, const std::string& target,
                                  const std::string& token, int rounds) {
  if (rounds < 1 || rounds > 1000) return Status::InvalidArgument("rounds must be 1..1000");
  RUNNEL_ASSIGN_OR_RETURN(auto client, Client::Connect(endpoint, token));
  RUNNEL_RETURN_IF_ERROR(ReadAll(*client, target).status());  // warm-up
  const auto t0 = Clock::now();
  CatchupFigures f;
  for (int i = 0; i < rounds; ++i) {
    RUNNEL_ASSIGN_OR_RETURN(uint64_t bytes, ReadAll(*client, target));
    f.bytes += bytes;
  }
  f.seconds = SecondsSince(t0);
  return f;
}

namespace {

// Every reader is a socket: raises the soft open-files limit as far as the hard one allows.
Status RaiseOpenFiles(int sockets) {
  rlimit files{};
  const rlim_t need = static_cast<rlim_t>(sockets) + 64;
  if (::getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < need) {
    files.rlim_cur = std::min(need, files.rlim_max);
    ::setrlimit(RLIMIT_NOFILE, &files);
    if (files.rlim_cur < need) {
      return Status::InvalidArgument(std::to_string(sockets) +
                                     " sockets need more open files than this process may have (" +
                                     std::to_string(files.rlim_max) + "; see ulimit -Hn)");
    }
  }
  return Status::OK();
}

// Creates the stream at `target` (as `content_type`, when missing) and returns the SSE request
// that follows it from its tail.
Result<std::string> TailRequest(Client& control, const Endpoint& endpoint,
                                const std::string& target, const std::string& content_type,
                                const std::string& token) {
  RUNNEL_ASSIGN_OR_RETURN(Head h, control.Request("PUT", target, content_type, ""));
  if (h.status != 200 && h.status != 201 && h.status != 204) {
    return Status::Internal("creating the stream answered HTTP " + std::to_string(h.status));
  }
  RUNNEL_ASSIGN_OR_RETURN(h, control.Request("HEAD", target, "", ""));
  if (h.next_offset.empty()) return Status::Internal("HEAD without Stream-Next-Offset");
  std::string request = RequestHead(
      "GET", target + "?offset=" + Escape(h.next_offset) + "&live=sse", endpoint, token);
  return request + "Accept: text/event-stream\r\n\r\n";
}

}  // namespace

Result<FanoutFigures> RunFanout(const Endpoint& endpoint, const FanoutLoad& load) {
  if (load.readers < 1 || load.readers > 100000) {
    return Status::InvalidArgument("readers must be 1..100000");
  }
  if (load.appends < 1 || load.appends > 100000) {
    return Status::InvalidArgument("appends must be 1..100000");
  }
  if (load.threads < 1 || load.threads > kMaxThreads) {
    return Status::InvalidArgument("threads must be 1.." + std::to_string(kMaxThreads));
  }
  RUNNEL_RETURN_IF_ERROR(RaiseOpenFiles(load.readers));
  RUNNEL_ASSIGN_OR_RETURN(auto control, Client::Connect(endpoint, load.token));
  RUNNEL_ASSIGN_OR_RETURN(std::string request,
                          TailRequest(*control, endpoint, load.target, "text/plain", load.token));
  const long pid = load.server_pid;
  FanoutFigures f;
  f.readers = load.readers;
  if (pid > 0) f.rss_before_mb = RssMb(pid);
  std::vector<std::unique_ptr<ReaderThread>> pool;
  for (int t = 0; t < load.threads; ++t) {
    const int share = load.readers / load.threads + (t < load.readers % load.threads ? 1 : 0);
    pool.push_back(std::make_unique<ReaderThread>(endpoint, request, share));
  }
  for (auto& t : pool) t->Start();
  auto sum = [&](auto fn) {
    uint64_t s = 0;
    for (auto& t : pool) s += static_cast<uint64_t>(fn(*t));
    return s;
  };
  const auto open_start = Clock::now();
  const auto open_deadline = open_start + std::chrono::seconds(60);
  while (sum([](ReaderThread& t) { return t.connected() + t.failed(); }) <
             static_cast<uint64_t>(load.readers) &&
         Clock::now() < open_deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  f.open_s = SecondsSince(open_start);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  if (pid > 0) f.rss_idle_mb = RssMb(pid);
  const double server_cpu_before = pid > 0 ? ProcessCpuMs(pid) : 0;
  const double own_cpu_before = ProcessCpuMs(::getpid());
  for (int i = 0; i < load.appends; ++i) {
    const std::string body = "t=" + std::to_string(NowMicros());
    RUNNEL_ASSIGN_OR_RETURN(Head h, control->Request("POST", load.target, "text/plain", body));
    if (h.status != 200 && h.status != 204) {
      return Status::Internal("an append answered HTTP " + std::to_string(h.status));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  f.failed = sum([](ReaderThread& t) { return t.failed(); });
  f.expected =
      (static_cast<uint64_t>(load.readers) - f.failed) * static_cast<uint64_t>(load.appends);
  const auto wait_deadline = Clock::now() + std::chrono::seconds(10);
  while (sum([](ReaderThread& t) { return t.delivered(); }) < f.expected &&
         Clock::now() < wait_deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const double per_append = 1.0 / load.appends;
  if (pid > 0) {
    f.rss_mb = RssMb(pid);
    f.server_cpu_ms_per_append = (ProcessCpuMs(pid) - server_cpu_before) * per_append;
  }
  f.load_cpu_ms_per_append = (ProcessCpuMs(::getpid()) - own_cpu_before) * per_append;
  for (auto& t : pool) {
    t->Stop();
    f.latency_ms.insert(f.latency_ms.end(), t->latencies_ms().begin(), t->latencies_ms().end());
    for (const Reader& r : t->readers()) f.complete += r.received == load.appends ? 1 : 0;
  }
  f.delivered = f.latency_ms.size();
  std::sort(f.latency_ms.begin(), f.latency_ms.end());
  return f;
}

Result<SoakFigures> RunSoak(const Endpoint& endpoint, const SoakLoad& load) {
  if (load.readers < 1 || load.readers > 100000) {
    return Status::InvalidArgument("readers must be 1..100000");
  }
  if (load.writers < 1 || load.writers > kMaxConnections) {
    return Status::InvalidArgument("writers must be 1.." + std::to_string(kMaxConnections));
  }
  if (load.rate <= 0 || load.seconds <= 0 || load.seconds > kMaxSeconds ||
      load.warmup_seconds < 0 || load.warmup_seconds >= load.seconds) {
    return Status::InvalidArgument("a soak needs a positive rate, seconds up to " +
                                   std::to_string(int(kMaxSeconds)) +
                                   " and a warm-up shorter than the run");
  }
  if (load.threads < 1 || load.threads > kMaxThreads) {
    return Status::InvalidArgument("threads must be 1.." + std::to_string(kMaxThreads));
  }
  RUNNEL_RETURN_IF_ERROR(RaiseOpenFiles(load.readers + load.writers));
  RUNNEL_ASSIGN_OR_RETURN(auto control, Client::Connect(endpoint, load.token));
  RUNNEL_ASSIGN_OR_RETURN(std::string request, TailRequest(*control, endpoint, load.target,
                                                           "application/json", load.token));
  ReaderMode mode;
  mode.json = true;
  mode.keep_latencies = false;
  mode.follow = true;
  mode.target = load.target;
  mode.token = load.token;
  std::vector<std::unique_ptr<ReaderThread>> pool;
  for (int t = 0; t < load.threads; ++t) {
    const int share = load.readers / load.threads + (t < load.readers % load.threads ? 1 : 0);
    pool.push_back(std::make_unique<ReaderThread>(endpoint, request, share, mode));
  }
  for (auto& t : pool) t->Start();
  auto sum = [&](auto fn) {
    uint64_t s = 0;
    for (auto& t : pool) s += static_cast<uint64_t>(fn(*t));
    return s;
  };
  SoakFigures f;
  f.readers = load.readers;
  const auto open_deadline = Clock::now() + std::chrono::seconds(60);
  while (sum([](ReaderThread& t) { return t.connected() + t.failed(); }) <
             static_cast<uint64_t>(load.readers) &&
         Clock::now() < open_deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const long pid = load.server_pid;
  const double cpu_before = pid > 0 ? ProcessCpuMs(pid) : 0;
  AppendLoad appends;
  appends.targets = {load.target};
  appends.content_type = "application/json";
  appends.body = "{\"t\":0}";
  appends.token = load.token;
  appends.connections = load.writers;
  appends.threads = 1;
  appends.seconds = load.seconds;
  appends.rate = load.rate;
  Result<AppendFigures> written = Status::Internal("not run");
  const auto started = Clock::now();
  std::thread writer([&] { written = RunAppends(endpoint, appends); });
  // The server's memory while the load runs, sampled every second. It swings with the readers'
  // reconnection waves, so growth compares means: the first window after the warm-up against
  // the last window of the run (each a tenth of the measured time, at least 10 s).
  std::vector<std::pair<double, double>> samples;  // (seconds, MB) after the warm-up
  while (SecondsSince(started) < load.seconds) {
    std::this_thread::sleep_for(std::chrono::seconds(1));
    if (pid <= 0) continue;
    const double rss = RssMb(pid);
    const double at = SecondsSince(started);
    if (at >= load.warmup_seconds) {
      samples.emplace_back(at, rss);
      f.rss_max_mb = std::max(f.rss_max_mb, rss);
    }
    if (load.progress) load.progress(at, rss);
  }
  if (!samples.empty()) {
    const double measured = load.seconds - load.warmup_seconds;
    const double window = std::max(10.0, measured / 10);
    auto mean = [&](double from, double to) {
      double sum = 0;
      int n = 0;
      for (const auto& [at, mb] : samples) {
        if (at >= from && at < to) sum += mb, ++n;
      }
      return n > 0 ? sum / n : -1;
    };
    f.rss_warm_mb = mean(load.warmup_seconds, load.warmup_seconds + window);
    f.rss_last_mb = mean(load.seconds - window, load.seconds + 1);
  }
  writer.join();
  RUNNEL_RETURN_IF_ERROR(written.status());
  f.appended = written->acknowledged;
  f.append_failures = written->failed;
  f.seconds = SecondsSince(started);
  // Every reader should see every acknowledged append: wait (bounded) for the last ones.
  const int want = static_cast<int>(f.appended);
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  while (sum([&](ReaderThread& t) { return t.received_at_least(want); }) + sum([](ReaderThread& t) {
           return t.failed();
         }) < static_cast<uint64_t>(load.readers) &&
         Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (pid > 0) {
    f.rss_end_mb = RssMb(pid);
    if (f.appended > 0) f.server_cpu_ms_per_append = (ProcessCpuMs(pid) - cpu_before) / f.appended;
  }
  for (auto& t : pool) {
    t->Stop();
    for (const Reader& r : t->readers()) {
      f.complete += r.received == want ? 1 : 0;
      f.extra += r.received > want ? 1 : 0;
      f.reconnects += static_cast<uint64_t>(r.reconnects);
    }
    f.failed += static_cast<uint64_t>(t->failed());
    f.delivered += t->delivered();
  }
  return f;
}

}  // namespace runnel::cli::load
