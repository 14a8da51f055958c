// `runnel bench append`: the append load.
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
using internal::Drained;
using internal::kAgain;
using internal::NewTls;
using internal::OpenNonBlocking;
using internal::ParseHead;
using internal::RecvSome;
using internal::RequestHead;
using internal::SecondsSince;
using internal::SendSome;
using internal::StepHandshake;

namespace {

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

// The limits of an append load checked before anything connects (the rate is checked later).
Status CheckAppendLoad(const AppendLoad& load) {
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
  return Status::OK();
}

}  // namespace

Result<AppendFigures> RunAppends(const Endpoint& endpoint, const AppendLoad& load) {
  RUNNEL_RETURN_IF_ERROR(CheckAppendLoad(load));
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

}  // namespace runnel::cli::load
