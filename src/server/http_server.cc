// HttpServer and the lifecycle of its implementation: construction, the io threads, Run and
// Stop with the drain of in-flight requests, and the periodic recheck of live SSE readers'
// access. The rest of HttpServer::Impl is spread over the other http_*.cc files
// (http_internal.h lists them).
#include "server/http_internal.h"

#include <spdlog/spdlog.h>

#include <thread>

#include "base/thread_name.h"
#include "server/tls_context.h"

namespace runnel::server {

namespace {

// Live SSE responses recheck their caller's token whenever the token file changes (a token
// revoked) and every kAccessRecheckEvery in any case (a token expired): a response admitted
// earlier ends once its token would no longer be admitted.
constexpr auto kAccessRecheckEvery = std::chrono::seconds(30);

}  // namespace

HttpServer::Impl::Impl(StreamRegistry registry, const ServerOptions& options,
                       std::unique_ptr<ssl::context> tls)
    : options_(options),
      tls_(std::move(tls)),
      iocs_(MakeIoContexts(options.threads)),
      wake_queues_(MakeWakeQueues(iocs_, this)),
      acceptor_(*iocs_[0]),
      offload_(options.offload_store_calls.value_or(registry.store().CallsMayBlock())),
      service_(std::move(registry), WithBlockingPool(options.service, &blocking_workers_, offload_),
               &metrics_),
      channels_(service_.registry(), service_.options().blocking_executor),
      groups_(&service_, service_.options().blocking_executor, options.max_groups_per_stream),
      blocking_workers_(BlockingThreads(options), "store") {
  if (options.quotas.any()) {
    quota_ = std::make_unique<TenantQuota>(options.quotas, service_.registry());
  }
  SetMaxConnections(options.max_connections);
}

HttpServer::Impl::~Impl() {
  if (spare_fd_ >= 0) ::close(spare_fd_);
}

void HttpServer::Impl::SetMaxConnections(size_t n) {
  max_connections_.store(n);
  metrics_.SetMaxConnections(n);
}

std::vector<std::unique_ptr<net::io_context>> HttpServer::Impl::MakeIoContexts(size_t threads) {
  std::vector<std::unique_ptr<net::io_context>> iocs;
  // Concurrency hint 1: each is run by one thread (others may still post to it).
  for (size_t i = 0; i < std::max<size_t>(1, threads); ++i) {
    iocs.push_back(std::make_unique<net::io_context>(1));
    // Creates the io_context's reactor now (epoll, eventfd, timerfd: three descriptors)
    // rather than at its first connection, so the descriptors open once the server has
    // started (CountOpenFds, fd_budget.h) include it.
    tcp::socket reactor_user(*iocs.back());
  }
  return iocs;
}

std::vector<std::unique_ptr<WakeQueue>> HttpServer::Impl::MakeWakeQueues(
    const std::vector<std::unique_ptr<net::io_context>>& iocs, Impl* impl) {
  std::vector<std::unique_ptr<WakeQueue>> queues;
  for (const auto& ioc : iocs) {
    queues.push_back(std::make_unique<WakeQueue>(
        *ioc, [impl](Waker& waker, DeliveryMemo& memo) { impl->Wake(waker, memo); }));
  }
  return queues;
}

// The services' blocking calls run on the blocking pool (constructed after the services, used
// only once serving); their coroutines resume on the io thread of their connection.
StreamServiceOptions HttpServer::Impl::WithBlockingPool(StreamServiceOptions options,
                                                        WorkerPool* blocking, bool offload) {
  options.offload_store_calls = offload;
  options.blocking_executor = [blocking](std::function<void()> fn) {
    blocking->Post(std::move(fn));
  };
  return options;
}

void HttpServer::Impl::Run() {
  net::io_context& first = *iocs_[0];
  net::co_spawn(first, Accept(), net::detached);
  if (options_.access) net::co_spawn(first, WatchAccess(), net::detached);
  std::optional<net::signal_set> signals;
  if (options_.handle_signals) {
    signals.emplace(first, SIGINT, SIGTERM);
    signals->async_wait([this](const boost::system::error_code& ec, int) {
      if (!ec) Stop();
    });
  }
  // An io_context without connections would return from run() at once; Drain stops them all.
  std::vector<net::executor_work_guard<net::io_context::executor_type>> keep_running;
  for (auto& ioc : iocs_) keep_running.push_back(net::make_work_guard(*ioc));
  auto serve = [](net::io_context* ioc) { ioc->run(); };
  std::vector<std::thread> pool;
  for (size_t i = 1; i < iocs_.size(); ++i) {
    pool.emplace_back(serve, iocs_[i].get());
    SetThreadName(pool.back(), "io-" + std::to_string(i));  // io 0 is the calling thread
  }
  serve(&first);
  for (auto& t : pool) t.join();
}

void HttpServer::Impl::Stop() {
  net::post(*iocs_[0], [this] {
    if (stopping_.exchange(true)) return;
    boost::system::error_code ec;
    acceptor_.close(ec);
    MutexLock lock(live_mu_);
    for (auto& weak : live_) {
      if (auto waker = weak.lock()) {
        net::post(waker->timer.get_executor(), [waker] {
          waker->stopped = true;
          waker->timer.cancel();
          // A reader that does not drain its socket would hold the drain for its whole
          // write timeout.
          CancelStuckWrite(*waker);
        });
      }
    }
    net::co_spawn(*iocs_[0], Drain(), net::detached);
  });
}

net::awaitable<void> HttpServer::Impl::WatchAccess() {
  net::steady_timer timer(*iocs_[0]);
  uint64_t seen = options_.access->Refresh();
  auto last_round = std::chrono::steady_clock::now();
  while (!stopping_.load()) {
    timer.expires_after(std::chrono::seconds(1));
    boost::system::error_code ec;
    co_await timer.async_wait(net::redirect_error(net::use_awaitable, ec));
    if (stopping_.load()) co_return;
    const uint64_t generation = options_.access->Refresh();
    const auto now = std::chrono::steady_clock::now();
    if (generation == seen && now - last_round < kAccessRecheckEvery) continue;
    seen = generation;
    last_round = now;
    MutexLock lock(live_mu_);
    for (auto& weak : live_) {
      if (auto waker = weak.lock()) {
        net::post(waker->timer.get_executor(), [waker] {
          if (!waker->sse) return;
          waker->recheck = true;
          waker->timer.cancel();
        });
      }
    }
  }
}

// Whether a GET of `path` with this Authorization header would still be admitted.
bool HttpServer::Impl::StillAdmitted(const std::string& path,
                                     const std::optional<std::string>& authorization) {
  HttpRequest request;
  request.method = "GET";
  request.path = path;
  if (authorization) request.headers["authorization"] = *authorization;
  Principal who = Principal::Platform(/*cross_tenant=*/true);
  return !options_.access->Admit(request, ParseRoute(path, /*allow_tenants=*/true), &who);
}

net::awaitable<void> HttpServer::Impl::Drain() {
  net::steady_timer timer(*iocs_[0]);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (in_flight_.load() > 0 && std::chrono::steady_clock::now() < deadline) {
    timer.expires_after(std::chrono::milliseconds(20));
    boost::system::error_code ec;
    co_await timer.async_wait(net::redirect_error(net::use_awaitable, ec));
  }
  Status flushed = service_.registry().Flush();
  if (!flushed.ok()) spdlog::error("flush at shutdown failed: {}", flushed.ToString());
  for (auto& ioc : iocs_) ioc->stop();
}

Result<std::unique_ptr<HttpServer>> HttpServer::Start(StreamRegistry registry,
                                                      const ServerOptions& options) {
  ServerOptions resolved = options;
  if (resolved.threads == 0) resolved.threads = std::max(1u, std::thread::hardware_concurrency());
  std::unique_ptr<ssl::context> tls;
  if (!resolved.tls_cert_file.empty() || !resolved.tls_key_file.empty()) {
    if (resolved.tls_cert_file.empty() || resolved.tls_key_file.empty()) {
      return Status::InvalidArgument("TLS needs both a certificate file and a key file");
    }
    RUNNEL_ASSIGN_OR_RETURN(tls, MakeTlsContext(resolved.tls_cert_file, resolved.tls_key_file));
    OfferAlpn(tls.get(), resolved.http2);
  }
  std::unique_ptr<Impl> impl;
  try {
    impl = std::make_unique<Impl>(std::move(registry), resolved, std::move(tls));
  } catch (const std::exception& e) {
    return Status::Internal(std::string("cannot set up the server: ") + e.what());
  }
  RUNNEL_RETURN_IF_ERROR(impl->Listen());
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HttpServer::~HttpServer() = default;
uint16_t HttpServer::port() const {
  return impl_->port();
}
void HttpServer::Run() {
  impl_->Run();
}
void HttpServer::Stop() {
  impl_->Stop();
}
void HttpServer::SetMaxConnections(size_t n) {
  impl_->SetMaxConnections(n);
}

}  // namespace runnel::server
