// A small HTTP/1.1 load driver for the workloads of bench/http/compare.sh where the driver's own
// cost would otherwise dominate the figure: catch-up reads (GB/s) and thousands of SSE readers
// (delivery latency). Speaks only the public Durable Streams protocol, so it drives any
// conforming server (runnel, the Node reference server) the same way.
//
//   http_load catchup BASE PATH ROUNDS
//       Reads the whole stream from offset -1 ROUNDS times (after one warm-up round), following
//       Stream-Next-Offset until Stream-Up-To-Date, over one keep-alive connection.
//       Prints: bytes=N seconds=S mb_per_s=R
//   http_load sse BASE PATH READERS APPENDS PID [THREADS]
//       Opens READERS SSE readers at the tail (THREADS epoll threads, default 2), then appends
//       APPENDS messages "t=<microseconds since the epoch>" 100 ms apart, and measures when each
//       reader sees each one. Prints: readers= failed= complete= delivered= expected= p50_ms=
//       p99_ms= max_ms= rss_before_mb= rss_idle_mb= rss_mb= (the server's RSS from
//       /proc/PID/status: before the readers connect, with them connected and idle, and after
//       the appends; the readers' own cost is rss_idle_mb - rss_before_mb) open_s= (time to open
//       the readers) and the CPU time per append of the server and of this driver.
//
// BASE is http://HOST:PORT with a numeric IPv4 host. Every phase is bounded in count and time.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace {

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "http_load: %s\n", what.c_str());
  std::exit(1);
}

struct Base {
  sockaddr_in addr{};
  std::string host_header;
};

Base ParseBase(std::string_view base) {
  constexpr std::string_view kScheme = "http://";
  if (base.substr(0, kScheme.size()) != kScheme) Die("BASE must start with http://");
  base.remove_prefix(kScheme.size());
  while (!base.empty() && base.back() == '/') base.remove_suffix(1);
  const size_t colon = base.rfind(':');
  if (colon == std::string_view::npos) Die("BASE needs a port");
  Base b;
  b.host_header = std::string(base);
  b.addr.sin_family = AF_INET;
  const std::string host(base.substr(0, colon));
  if (::inet_pton(AF_INET, host.c_str(), &b.addr.sin_addr) != 1) Die("BASE host must be IPv4");
  const int port = std::atoi(std::string(base.substr(colon + 1)).c_str());
  if (port <= 0 || port > 65535) Die("BASE port is out of range");
  b.addr.sin_port = htons(static_cast<uint16_t>(port));
  return b;
}

int64_t NowMicros() {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000 + ts.tv_nsec / 1000;
}

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

int ConnectBlocking(const Base& base) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) Die("socket: " + std::string(std::strerror(errno)));
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&base.addr), sizeof(base.addr)) != 0) {
    Die("connect: " + std::string(std::strerror(errno)));
  }
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  const timeval timeout{30, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  return fd;
}

void WriteAll(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) Die("send: " + std::string(std::strerror(errno)));
    data.remove_prefix(static_cast<size_t>(n));
  }
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
          if (c == '\n')
            state_ = State::kSize;
          else if (c != '\r')
            return false;
          break;
        }
        case State::kTrailer: {
          // Trailer lines end at an empty line; runnel and the reference send none.
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
Head ParseHead(std::string_view head) {
  Head h;
  if (head.size() < 12 || head.substr(0, 5) != "HTTP/") Die("malformed status line");
  h.status = std::atoi(std::string(head.substr(9, 3)).c_str());
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

// One keep-alive connection for request/response traffic.
class Client {
 public:
  explicit Client(const Base& base) : base_(base), fd_(ConnectBlocking(base)) {}
  ~Client() { ::close(fd_); }
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Sends one request and reads the whole answer; returns the head, and counts the body bytes
  // in *body_bytes when given.
  Head Request(std::string_view method, const std::string& target, std::string_view content_type,
               std::string_view body, uint64_t* body_bytes = nullptr) {
    std::string req;
    req.reserve(256 + body.size());
    req.append(method).append(" ").append(target).append(" HTTP/1.1\r\nHost: ");
    req.append(base_.host_header).append("\r\n");
    if (!content_type.empty()) req.append("Content-Type: ").append(content_type).append("\r\n");
    if (!body.empty() || method == "POST") {
      req.append("Content-Length: ").append(std::to_string(body.size())).append("\r\n");
    }
    req.append("\r\n").append(body);
    WriteAll(fd_, req);
    // Head.
    size_t head_end;
    while ((head_end = buf_.find("\r\n\r\n")) == std::string::npos) Fill();
    Head h = ParseHead(std::string_view(buf_).substr(0, head_end));
    buf_.erase(0, head_end + 4);
    uint64_t bytes = 0;
    auto sink = [&bytes](const char*, size_t n) { bytes += n; };
    if (method == "HEAD" || h.status == 204 || h.status == 304) {
      // no body
    } else if (h.chunked) {
      Dechunker d;
      for (;;) {
        if (!d.Feed(buf_.data(), buf_.size(), sink)) Die("malformed chunked body");
        buf_.clear();  // nothing is pipelined: bytes after the last chunk cannot exist
        if (d.done()) break;
        Fill();
      }
    } else if (h.content_length) {
      uint64_t left = *h.content_length;
      for (;;) {
        const size_t take = static_cast<size_t>(std::min<uint64_t>(left, buf_.size()));
        sink(buf_.data(), take);
        buf_.erase(0, take);
        left -= take;
        if (left == 0) break;
        Fill();
      }
    } else {
      Die("answer without a length on a keep-alive connection");
    }
    if (body_bytes != nullptr) *body_bytes = bytes;
    return h;
  }

 private:
  void Fill() {
    char chunk[1 << 18];
    for (;;) {
      const ssize_t n = ::recv(fd_, chunk, sizeof(chunk), 0);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) Die("recv: " + std::string(std::strerror(errno)));
      if (n == 0) Die("the server closed the connection");
      buf_.append(chunk, static_cast<size_t>(n));
      return;
    }
  }

  const Base& base_;
  int fd_;
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

uint64_t ReadAll(Client& client, const std::string& path) {
  std::string offset = "-1";
  uint64_t total = 0;
  for (int page = 0; page < 100000; ++page) {
    uint64_t bytes = 0;
    const Head h = client.Request("GET", path + "?offset=" + Escape(offset), "", "", &bytes);
    if (h.status != 200) Die("catch-up read answered HTTP " + std::to_string(h.status));
    total += bytes;
    if (h.next_offset.empty()) Die("catch-up read without Stream-Next-Offset");
    offset = h.next_offset;
    if (h.up_to_date || bytes == 0) return total;
  }
  Die("catch-up read did not reach the tail in 100000 pages");
}

int Catchup(const Base& base, const std::string& path, int rounds) {
  Client client(base);
  ReadAll(client, path);  // warm-up
  const auto t0 = std::chrono::steady_clock::now();
  uint64_t bytes = 0;
  for (int i = 0; i < rounds; ++i) bytes += ReadAll(client, path);
  const double s = Seconds(t0);
  std::printf("bytes=%llu seconds=%.3f mb_per_s=%.1f\n", static_cast<unsigned long long>(bytes), s,
              static_cast<double>(bytes) / 1e6 / s);
  return 0;
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

// One SSE reader connection, driven by one epoll thread.
struct Reader {
  int fd = -1;
  enum class Phase { kConnecting, kHead, kBody, kDead } phase = Phase::kConnecting;
  std::string head;
  std::string events;  // dechunked body not yet cut into events
  Dechunker dechunker;
  int received = 0;
};

class ReaderThread {
 public:
  ReaderThread(const Base& base, std::string request, int count)
      : base_(base), request_(std::move(request)), readers_(static_cast<size_t>(count)) {
    epoll_ = ::epoll_create1(EPOLL_CLOEXEC);
    if (epoll_ < 0) Die("epoll_create1: " + std::string(std::strerror(errno)));
  }
  ~ReaderThread() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    for (Reader& r : readers_) {
      if (r.fd >= 0) ::close(r.fd);
    }
    ::close(epoll_);
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
  // Only after Stop().
  const std::vector<double>& latencies_ms() const { return latencies_ms_; }
  const std::vector<Reader>& readers() const { return readers_; }

 private:
  static constexpr size_t kConnectingAtOnce = 256;

  void Open(size_t i) {
    Reader& r = readers_[i];
    ++connecting_;  // Fail() counts it down again
    r.fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (r.fd < 0) return Fail(r);
    const int rc =
        ::connect(r.fd, reinterpret_cast<const sockaddr*>(&base_.addr), sizeof(base_.addr));
    if (rc != 0 && errno != EINPROGRESS) return Fail(r);
    epoll_event ev{};
    ev.events = EPOLLOUT;
    ev.data.u64 = i;
    if (::epoll_ctl(epoll_, EPOLL_CTL_ADD, r.fd, &ev) != 0) return Fail(r);
  }

  void Fail(Reader& r) {
    if (r.phase == Reader::Phase::kConnecting) --connecting_;
    if (r.phase != Reader::Phase::kDead) ++failed_;
    r.phase = Reader::Phase::kDead;
    if (r.fd >= 0) {
      ::epoll_ctl(epoll_, EPOLL_CTL_DEL, r.fd, nullptr);
      ::close(r.fd);
      r.fd = -1;
    }
  }

  void OnWritable(size_t i) {
    Reader& r = readers_[i];
    int err = 0;
    socklen_t len = sizeof(err);
    if (::getsockopt(r.fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) return Fail(r);
    // The request is small: one send on a fresh socket takes it whole.
    const ssize_t n = ::send(r.fd, request_.data(), request_.size(), MSG_NOSIGNAL);
    if (n != static_cast<ssize_t>(request_.size())) return Fail(r);
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
      const ssize_t n = ::recv(r.fd, buf, sizeof(buf), 0);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      if (n <= 0) return Fail(r);
      const int64_t now = NowMicros();
      const char* p = buf;
      size_t left = static_cast<size_t>(n);
      if (r.phase == Reader::Phase::kHead) {
        r.head.append(p, left);
        const size_t end = r.head.find("\r\n\r\n");
        if (end == std::string::npos) {
          if (r.head.size() > 65536) return Fail(r);
          continue;
        }
        const Head h = ParseHead(std::string_view(r.head).substr(0, end));
        if (h.status != 200 || !h.chunked) return Fail(r);
        std::string rest = r.head.substr(end + 4);
        r.head.clear();
        r.phase = Reader::Phase::kBody;
        ++connected_;
        if (!Body(r, rest.data(), rest.size(), now)) return Fail(r);
        continue;
      }
      if (!Body(r, p, left, now)) return Fail(r);
      // Level-triggered: a short read drained the socket, and anything newer is reported again;
      // skipping the recv that would say EAGAIN halves the driver's system calls.
      if (left < sizeof(buf)) return;
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
      if (event.rfind("event: data", 0) != 0 && event.rfind("event:data", 0) != 0) continue;
      for (size_t at = event.find("t="); at != std::string_view::npos;
           at = event.find("t=", at + 2)) {
        // Only "data:t=" / "data: t=" lines carry a send time.
        const bool line_start = (at >= 5 && event.substr(at - 5, 5) == "data:") ||
                                (at >= 6 && event.substr(at - 6, 6) == "data: ");
        if (!line_start) continue;
        const int64_t sent = std::strtoll(event.data() + at + 2, nullptr, 10);
        latencies_ms_.push_back(static_cast<double>(now - sent) / 1000.0);
        ++r.received;
        ++delivered_;
      }
    }
    r.events.erase(0, start);
    return true;
  }

  void Run() {
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
        } else {
          OnReadable(i);
        }
      }
    }
  }

  const Base& base_;
  const std::string request_;
  std::vector<Reader> readers_;
  int epoll_ = -1;
  size_t connecting_ = 0;  // only the thread itself
  std::atomic<int> connected_{0};
  std::atomic<int> failed_{0};
  std::atomic<uint64_t> delivered_{0};
  std::atomic<bool> stop_{false};
  std::vector<double> latencies_ms_;  // only the thread itself until Stop()
  std::thread thread_;
};

int Sse(const Base& base, const std::string& path, int readers, int appends, long pid,
        int threads) {
  Client control(base);
  Head h = control.Request("PUT", path, "text/plain", "");
  if (h.status != 200 && h.status != 201 && h.status != 204) {
    Die("create answered HTTP " + std::to_string(h.status));
  }
  h = control.Request("HEAD", path, "", "");
  if (h.next_offset.empty()) Die("HEAD without Stream-Next-Offset");
  const std::string request = "GET " + path + "?offset=" + Escape(h.next_offset) +
                              "&live=sse HTTP/1.1\r\nHost: " + base.host_header +
                              "\r\nAccept: text/event-stream\r\n\r\n";
  const double rss_before = RssMb(pid);
  std::vector<std::unique_ptr<ReaderThread>> pool;
  for (int t = 0; t < threads; ++t) {
    const int share = readers / threads + (t < readers % threads ? 1 : 0);
    pool.push_back(std::make_unique<ReaderThread>(base, request, share));
  }
  for (auto& t : pool) t->Start();
  auto sum = [&](auto f) {
    uint64_t s = 0;
    for (auto& t : pool) s += static_cast<uint64_t>(f(*t));
    return s;
  };
  const auto open_start = std::chrono::steady_clock::now();
  const auto open_deadline = open_start + std::chrono::seconds(60);
  while (sum([](ReaderThread& t) { return t.connected() + t.failed(); }) <
             static_cast<uint64_t>(readers) &&
         std::chrono::steady_clock::now() < open_deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const double open_s = Seconds(open_start);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const double rss_idle = RssMb(pid);
  const double server_cpu_before = ProcessCpuMs(pid);
  const double own_cpu_before = ProcessCpuMs(::getpid());
  for (int i = 0; i < appends; ++i) {
    const std::string body = "t=" + std::to_string(NowMicros());
    h = control.Request("POST", path, "text/plain", body);
    if (h.status != 200 && h.status != 204) Die("append answered HTTP " + std::to_string(h.status));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const uint64_t failed = sum([](ReaderThread& t) { return t.failed(); });
  const uint64_t expected =
      (static_cast<uint64_t>(readers) - failed) * static_cast<uint64_t>(appends);
  const auto wait_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (sum([](ReaderThread& t) { return t.delivered(); }) < expected &&
         std::chrono::steady_clock::now() < wait_deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const double rss_live = RssMb(pid);
  const double per_append = appends > 0 ? 1.0 / appends : 0;
  const double server_cpu = (ProcessCpuMs(pid) - server_cpu_before) * per_append;
  const double own_cpu = (ProcessCpuMs(::getpid()) - own_cpu_before) * per_append;
  std::vector<double> all;
  int complete = 0;
  for (auto& t : pool) {
    t->Stop();
    all.insert(all.end(), t->latencies_ms().begin(), t->latencies_ms().end());
    for (const Reader& r : t->readers()) complete += r.received == appends ? 1 : 0;
  }
  std::sort(all.begin(), all.end());
  auto pct = [&](double p) {
    if (all.empty()) return -1.0;
    return all[std::min(all.size() - 1, static_cast<size_t>(p * static_cast<double>(all.size())))];
  };
  std::printf(
      "readers=%d failed=%llu complete=%d delivered=%zu expected=%llu p50_ms=%.1f p99_ms=%.1f "
      "max_ms=%.1f rss_before_mb=%.0f rss_idle_mb=%.0f rss_mb=%.0f open_s=%.1f "
      "server_cpu_ms_per_append=%.1f "
      "load_cpu_ms_per_append=%.1f\n",
      readers, static_cast<unsigned long long>(failed), complete, all.size(),
      static_cast<unsigned long long>(expected), pct(0.5), pct(0.99), pct(1.0), rss_before,
      rss_idle, rss_live, open_s, server_cpu, own_cpu);
  return 0;
}

int Usage() {
  std::fprintf(stderr,
               "usage: http_load catchup BASE PATH ROUNDS\n"
               "       http_load sse BASE PATH READERS APPENDS PID [THREADS]\n");
  return 2;
}

int PositiveArg(const char* s, const char* what, int max) {
  char* end = nullptr;
  const long v = std::strtol(s, &end, 10);
  if (end == s || *end != '\0' || v < 0 || v > max) Die(std::string(what) + " is out of range");
  return static_cast<int>(v);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return Usage();
  const std::string_view cmd = argv[1];
  if (cmd == "catchup" && argc == 5) {
    return Catchup(ParseBase(argv[2]), argv[3], PositiveArg(argv[4], "ROUNDS", 1000));
  }
  if (cmd == "sse" && (argc == 7 || argc == 8)) {
    const int threads = argc == 8 ? PositiveArg(argv[7], "THREADS", 64) : 2;
    return Sse(ParseBase(argv[2]), argv[3], PositiveArg(argv[4], "READERS", 100000),
               PositiveArg(argv[5], "APPENDS", 100000), PositiveArg(argv[6], "PID", 1 << 30),
               std::max(threads, 1));
  }
  return Usage();
}
