// `runnel bench sse` and `runnel bench soak`: SSE readers, fan-out and soak.
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
#include "cli/load_internal.h"

namespace runnel::cli::load {

using internal::Client;
using internal::Clock;
using internal::ConnectFailed;
using internal::Dechunker;
using internal::Drained;
using internal::Escape;
using internal::Head;
using internal::kAgain;
using internal::kClosed;
using internal::NewTls;
using internal::NowMicros;
using internal::OpenNonBlocking;
using internal::ParseHead;
using internal::ProcessCpuMs;
using internal::RecvSome;
using internal::RequestHead;
using internal::RssMb;
using internal::SecondsSince;
using internal::SendSome;
using internal::StepHandshake;

namespace {

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

// The limits of a soak load.
Status CheckSoakLoad(const SoakLoad& load) {
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
  return Status::OK();
}

// The server's mean memory in the first window after the warm-up and in the last window of the
// run (each a tenth of the measured time, at least 10 s), from per-second (seconds, MB) samples.
void SetRssWindows(const SoakLoad& load, const std::vector<std::pair<double, double>>& samples,
                   SoakFigures* f) {
  if (samples.empty()) return;
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
  f->rss_warm_mb = mean(load.warmup_seconds, load.warmup_seconds + window);
  f->rss_last_mb = mean(load.seconds - window, load.seconds + 1);
}

// The appends of a soak: load.writers connections at load.rate to the followed stream.
AppendLoad SoakAppends(const SoakLoad& load) {
  AppendLoad appends;
  appends.targets = {load.target};
  appends.content_type = "application/json";
  appends.body = "{\"t\":0}";
  appends.token = load.token;
  appends.connections = load.writers;
  appends.threads = 1;
  appends.seconds = load.seconds;
  appends.rate = load.rate;
  return appends;
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

// Long because its phases (open the readers, write while sampling memory, drain, tally) share
// the reader pool and the figures.
Result<SoakFigures> RunSoak(const Endpoint& endpoint, const SoakLoad& load) {
  RUNNEL_RETURN_IF_ERROR(CheckSoakLoad(load));
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
  const AppendLoad appends = SoakAppends(load);
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
  SetRssWindows(load, samples, &f);
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
