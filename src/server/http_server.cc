// The Beast adapter. Keep Beast out of every other file: this TU is slow to compile.
#include <utility>  // Boost 1.74's awaitable.hpp needs std::exchange declared first.

#include "server/http_server.h"

#include <spdlog/spdlog.h>

#include <array>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/core/detect_ssl.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <openssl/err.h>
#include <openssl/x509.h>
#include <unistd.h>

#include "base/mutex.h"
#include "base/thread_name.h"
#include "base/utf8.h"
#include "server/accept_backoff.h"
#include "server/channel_service.h"
#include "server/dashboard.h"
#include "server/group_service.h"
#include "server/h2_session.h"
#include "server/http_errors.h"
#include "server/metrics.h"
#include "server/webhook_signer.h"
#include "server/worker_pool.h"

namespace runnel::server {

namespace beast = boost::beast;
namespace http = boost::beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;
namespace ssl = boost::asio::ssl;
using TlsStream = beast::ssl_stream<beast::tcp_stream>;

namespace {

// The io_context run by the calling thread, on an io thread; null elsewhere.
thread_local net::io_context* t_io_context = nullptr;

// How long a TLS close_notify exchange may take when a connection ends.
constexpr std::chrono::seconds kTlsShutdownTimeout(1);

// The TCP stream under a plain or TLS stream (where timeouts are set).
beast::tcp_stream& Tcp(beast::tcp_stream& stream) {
  return stream;
}
beast::tcp_stream& Tcp(TlsStream& stream) {
  return stream.next_layer();
}

// A server TLS context from PEM files; a clear error for a missing, unreadable or mismatched
// certificate or key.
Result<std::unique_ptr<ssl::context>> MakeTlsContext(const std::string& cert_file,
                                                     const std::string& key_file) {
  for (const auto& [what, file] : {std::pair{"certificate", &cert_file}, {"key", &key_file}}) {
    std::error_code fs_ec;
    if (!std::filesystem::is_regular_file(*file, fs_ec)) {
      return Status::InvalidArgument(std::string("TLS ") + what + " file '" + *file +
                                     "' does not exist or is not a regular file");
    }
  }
  auto ctx = std::make_unique<ssl::context>(ssl::context::tls_server);
  boost::system::error_code ec;
  ctx->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                       ssl::context::no_sslv3 | ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1 |
                       ssl::context::single_dh_use,
                   ec);
  ctx->use_certificate_chain_file(cert_file, ec);
  if (ec) {
    return Status::InvalidArgument("cannot load the TLS certificate chain from '" + cert_file +
                                   "' (PEM expected): " + ec.message());
  }
  ctx->use_private_key_file(key_file, ssl::context::pem, ec);
  if (ec && ec.category() == net::error::get_ssl_category() &&
      ERR_GET_REASON(static_cast<unsigned long>(ec.value())) == X509_R_KEY_VALUES_MISMATCH) {
    return Status::InvalidArgument("the TLS private key '" + key_file +
                                   "' does not match the certificate '" + cert_file + "'");
  }
  if (ec) {
    return Status::InvalidArgument("cannot load the TLS private key from '" + key_file +
                                   "' (PEM expected): " + ec.message());
  }
  if (SSL_CTX_check_private_key(ctx->native_handle()) != 1) {
    return Status::InvalidArgument("the TLS private key '" + key_file +
                                   "' does not match the certificate '" + cert_file + "'");
  }
  return ctx;
}

// The protocols offered by ALPN, in our order of preference (RFC 7301 wire format).
constexpr unsigned char kAlpnH2[] = "\x02h2\x08http/1.1";
constexpr unsigned char kAlpnHttp11[] = "\x08http/1.1";

// Has the TLS context choose a protocol by ALPN: h2 when the client offers it and `http2`,
// else http/1.1; a client that offers neither goes on without ALPN (HTTP/1.1).
void OfferAlpn(ssl::context* ctx, bool http2) {
  SSL_CTX_set_alpn_select_cb(
      ctx->native_handle(),
      [](SSL*, const unsigned char** out, unsigned char* outlen, const unsigned char* in,
         unsigned int inlen, void* arg) -> int {
        const bool h2 = arg != nullptr;
        const unsigned char* ours = h2 ? kAlpnH2 : kAlpnHttp11;
        const unsigned int ours_len = h2 ? sizeof(kAlpnH2) - 1 : sizeof(kAlpnHttp11) - 1;
        unsigned char* chosen = nullptr;
        if (SSL_select_next_proto(&chosen, outlen, ours, ours_len, in, inlen) !=
            OPENSSL_NPN_NEGOTIATED) {
          return SSL_TLSEXT_ERR_NOACK;
        }
        *out = chosen;
        return SSL_TLSEXT_ERR_OK;
      },
      http2 ? ctx : nullptr);
}

// One accepted socket's place in a count of sockets (HttpServer::Impl::serving_ or rejecting_),
// held by the connection's coroutine and given back when that ends, with the socket.
class SocketSlot {
 public:
  explicit SocketSlot(std::atomic<size_t>* count) : count_(count) { count_->fetch_add(1); }
  SocketSlot(SocketSlot&& other) noexcept : count_(std::exchange(other.count_, nullptr)) {}
  SocketSlot& operator=(SocketSlot&&) = delete;
  ~SocketSlot() {
    if (count_ != nullptr) count_->fetch_sub(1);
  }

 private:
  std::atomic<size_t>* count_;
};

// Whether an accept failed for want of a descriptor (EMFILE, ENFILE).
bool OutOfDescriptors(const boost::system::error_code& ec) {
  return ec == boost::system::errc::too_many_files_open ||
         ec == boost::system::errc::too_many_files_open_in_system;
}

// The answer to a connection beyond the cap.
const std::string& BusyResponse() {
  static const std::string text = [] {
    std::string body = ErrorBody(Status::ResourceExhausted("too many connections"));
    return "HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Type: "
           "application/json\r\nConnection: close\r\nContent-Length: " +
           std::to_string(body.size()) + "\r\n\r\n" + body;
  }();
  return text;
}

// A descriptor held in reserve (on /dev/null) so the accept loop can still take a pending
// connection when the process is out of descriptors; -1 when none could be opened.
int OpenSpareFd() {
  return ::open("/dev/null", O_RDONLY | O_CLOEXEC);
}

class WakeQueue;

// An SSE reader parked between events (see HttpServer::Impl::DeliverParked): what the io
// thread needs to write the next event itself, without resuming the reader's coroutine.
struct SseParked {
  ReadState* state = nullptr;     // the coroutine's; the position moves with each event
  tcp::socket* socket = nullptr;  // plain TCP only: null on TLS (never delivered in place)
  std::string pending;            // bytes of an event the socket did not take; the coroutine
                                  // writes them before anything else
  bool failed = false;            // a write failed; the coroutine ends the response
};

// A live reader's wake-up: a timer the subscription hint (or shutdown) cancels.
struct Waker {
  Waker(const net::any_io_executor& ex, WakeQueue* q) : timer(ex), queue(q) {}
  net::steady_timer timer;
  WakeQueue* const queue;       // of the connection's io thread
  SseParked* parked = nullptr;  // connection thread only: set while an SSE reader waits
  bool hinted = false;          // connection thread only
  bool stopped = false;         // connection thread only
  bool hung_up = false;         // connection thread only: the reader closed its connection
  bool watching = false;        // connection thread only: a hang-up watch is pending
  bool sse = false;             // connection thread only: an SSE reader whose access is rechecked
  bool recheck = false;         // connection thread only: its caller's token must be rechecked
  // Connection thread only: set while the reader waits in an asynchronous write to a full
  // socket. A hang-up or a shutdown cancels that write instead of waiting for its timeout.
  tcp::socket* writing = nullptr;
};

// Cancels the asynchronous write a live reader is stuck in, if any (connection thread only).
void CancelStuckWrite(Waker& waker) {
  if (waker.writing == nullptr) return;
  boost::system::error_code ec;
  waker.writing->cancel(ec);
}

// Whether a Transfer-Encoding list item (surrounding blanks allowed) is "chunked".
bool IsChunked(std::string_view coding) {
  return EqualsIgnoreCase(TrimBlanks(coding), "chunked");
}

// Watches a live reader's socket while its response waits for records: a reader that closes
// its connection is noticed at once (its Waker wakes with hung_up set), not at the next write
// or the end of the wait. Nothing is consumed from the socket: a readable socket is peeked,
// and only an orderly close or an error counts; bytes the client sent end the watch.
void WatchHangUp(tcp::socket& socket, const std::shared_ptr<Waker>& waker) {
  waker->watching = true;
  std::weak_ptr<Waker> weak = waker;
  socket.async_wait(tcp::socket::wait_read, [weak, &socket](boost::system::error_code ec) {
    // The Waker lives as long as the reader's coroutine, which the socket outlives.
    auto w = weak.lock();
    if (!w) return;
    w->watching = false;
    if (ec == net::error::operation_aborted) return;
    if (!ec) {
      char byte;
      const ssize_t n = ::recv(socket.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
      if (n > 0) return;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
        WatchHangUp(socket, w);
        return;
      }
    }
    w->hung_up = true;
    w->timer.cancel();
    // A reader blocked on a full socket whose peer is gone: the write can never finish.
    CancelStuckWrite(*w);
  });
}

// Ends a hang-up watch before the connection reads its next request.
void StopWatchingHangUp(tcp::socket& socket, Waker& waker) {
  if (!waker.watching) return;
  boost::system::error_code ec;
  socket.cancel(ec);
}

// The event last written in place during one batch of wake-ups: the readers of a stream at the
// same position, with the same cursor and encoding, get the same bytes, read and framed once.
struct DeliveryMemo {
  bool valid = false;
  StreamId id = 0;
  uint64_t position = 0;
  bool base64 = false;
  std::optional<std::string> client_cursor;
  uint64_t next = 0;         // the position after the event
  std::string chunk;         // the whole HTTP chunk: size line, data and control events, CRLF
  uint64_t event_bytes = 0;  // of the two events

  bool Matches(const ReadState& s) const {
    return valid && id == s.id && position == s.position && base64 == s.base64 &&
           client_cursor == s.client_cursor;
  }
};

// Wake-ups for the live readers of one io thread, handed over in batches: an append that hints
// thousands of readers (from a store thread) posts once per io thread, not once per reader.
class WakeQueue {
 public:
  // `wake` runs on the io thread for each live waker of a batch.
  WakeQueue(net::io_context& ioc, std::function<void(Waker&, DeliveryMemo&)> wake)
      : ioc_(ioc), wake_(std::move(wake)) {}

  // Any thread.
  void Push(std::weak_ptr<Waker> waker) {
    bool first;
    {
      MutexLock lock(mu_);
      first = pending_.empty();
      pending_.push_back(std::move(waker));
    }
    if (first) net::post(ioc_, [this] { Drain(); });
  }

 private:
  void Drain() {
    {
      MutexLock lock(mu_);
      draining_.swap(pending_);
    }
    DeliveryMemo memo;
    for (const std::weak_ptr<Waker>& weak : draining_) {
      if (auto w = weak.lock()) wake_(*w, memo);
    }
    draining_.clear();
  }

  net::io_context& ioc_;
  const std::function<void(Waker&, DeliveryMemo&)> wake_;
  Mutex mu_;
  std::vector<std::weak_ptr<Waker>> pending_ RUNNEL_GUARDED_BY(mu_);
  std::vector<std::weak_ptr<Waker>> draining_;  // the io thread only
};

// The client connection preface of HTTP/2 (RFC 9113 3.4), which starts an h2c connection with
// prior knowledge on the plain port.
constexpr std::string_view kH2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

// Whether the bytes read so far could still be the start of the preface.
bool MayBeH2Preface(const beast::flat_buffer& buffer) {
  const std::string_view head(static_cast<const char*>(buffer.data().data()),
                              std::min(buffer.size(), kH2Preface.size()));
  return kH2Preface.starts_with(head);
}

// One HTTP/2 connection (h2c on the plain port): its socket, its session and what the
// coroutines of its streams share. Everything here is touched on the connection's io thread
// only. The reader coroutine feeds the session, the writer coroutine writes what the session
// has ready whenever Kick() wakes it, and one coroutine per request runs the request handling.
struct H2Conn {
  explicit H2Conn(tcp::socket s) : plain(std::move(s)), signal(plain->get_executor()) {}
  explicit H2Conn(TlsStream s) : tls(std::move(s)), signal(tls->get_executor()) {}
  // One of the two: h2c on the plain port, or h2 chosen by ALPN on the TLS port.
  std::optional<tcp::socket> plain;
  std::optional<TlsStream> tls;
  net::steady_timer signal;  // the writer waits on it while there is nothing to write
  // Live readers (long-poll, SSE) by stream: a reset stream wakes its reader with hung_up set.
  std::map<int32_t, std::weak_ptr<Waker>> wakers;
  // After `wakers`, so it is destroyed first: its callbacks use them.
  std::optional<H2Session> session;
  bool closed = false;
  bool writer_waiting = false;
  tcp::socket& socket() { return plain ? *plain : tls->next_layer().socket(); }
  net::any_io_executor executor() { return socket().get_executor(); }
  net::awaitable<size_t> ReadSome(net::mutable_buffer buffer, boost::system::error_code& ec) {
    if (plain)
      co_return co_await plain->async_read_some(buffer,
                                                net::redirect_error(net::use_awaitable, ec));
    co_return co_await tls->async_read_some(buffer, net::redirect_error(net::use_awaitable, ec));
  }
  net::awaitable<void> WriteAll(net::const_buffer buffer, boost::system::error_code& ec) {
    if (plain) {
      co_await net::async_write(*plain, buffer, net::redirect_error(net::use_awaitable, ec));
    } else {
      co_await net::async_write(*tls, buffer, net::redirect_error(net::use_awaitable, ec));
    }
  }
  bool writing = false;
  bool shutting_down = false;
  // A connection beyond the cap (on TLS, refused after the handshake): every request is
  // answered 503 and the connection ends (GOAWAY), within about a second in any case.
  bool busy = false;
  const std::chrono::steady_clock::time_point opened = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point last_activity = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point write_started;
  // The connection's answer budget (ServerOptions::http2_connection_buffer): bytes reserved by
  // streams about to produce an answer, by stream, and their sum; with the bytes queued in the
  // session they may not pass the budget. Streams waiting for room park a timer in
  // `room_waiters`, cancelled whenever room may have freed.
  std::map<int32_t, size_t> reservations;
  size_t reserved = 0;
  std::vector<net::steady_timer*> room_waiters;

  void Kick() {
    if (writer_waiting) signal.cancel();
  }
  // Bytes counted against the budget: queued answers and reservations.
  size_t Buffered() const { return session->QueuedTotal() + reserved; }
  // Drops a stream's reservation (its answer is queued now, or it waits for records); wakes
  // the streams waiting for room.
  void Release(int32_t id) {
    auto it = reservations.find(id);
    if (it == reservations.end()) return;
    reserved -= it->second;
    reservations.erase(it);
    RoomMayHaveFreed();
  }
  void RoomMayHaveFreed() {
    for (net::steady_timer* t : room_waiters) t->cancel();
  }
  // Wakes a stream's live reader as gone (its stream was reset or the connection closed).
  void HangUp(int32_t id) {
    auto it = wakers.find(id);
    if (it == wakers.end()) return;
    if (auto w = it->second.lock()) {
      w->hung_up = true;
      w->timer.cancel();
    }
    wakers.erase(it);
  }
  // Ends the connection at once: every live reader is released, the socket closed.
  void Close() {
    if (closed) return;
    closed = true;
    RoomMayHaveFreed();
    for (auto& [id, weak] : wakers) {
      if (auto w = weak.lock()) {
        w->hung_up = true;
        w->timer.cancel();
      }
    }
    wakers.clear();
    boost::system::error_code ec;
    socket().shutdown(tcp::socket::shutdown_both, ec);
    socket().close(ec);
    signal.cancel();
  }
};

// One HTTP/2 stream, which the request handling writes its answer to as it writes to a
// connection on HTTP/1.1 (the `Stream` of Dispatch and the live reads).
struct H2Stream {
  std::shared_ptr<H2Conn> conn;
  int32_t id = 0;
  net::any_io_executor get_executor() const { return conn->executor(); }
};

}  // namespace

class HttpServer::Impl {
 public:
  Impl(StreamRegistry registry, const ServerOptions& options, std::unique_ptr<ssl::context> tls)
      : options_(options),
        tls_(std::move(tls)),
        iocs_(MakeIoContexts(options.threads)),
        wake_queues_(MakeWakeQueues(iocs_, this)),
        acceptor_(*iocs_[0]),
        offload_(options.offload_store_calls.value_or(registry.store().CallsMayBlock())),
        service_(std::move(registry),
                 WithExecutors(options.service, iocs_[0].get(), &catalog_workers_, offload_),
                 &metrics_),
        channels_(service_.registry(), options.channel_threads),
        groups_(&service_, options.group_threads, options.max_groups_per_stream),
        catalog_workers_(options.catalog_threads, "store") {
    if (options.quotas.any()) {
      quota_ = std::make_unique<TenantQuota>(options.quotas, service_.registry());
    }
    SetMaxConnections(options.max_connections);
  }

  ~Impl() {
    if (spare_fd_ >= 0) ::close(spare_fd_);
  }

  void SetMaxConnections(size_t n) {
    max_connections_.store(n);
    metrics_.SetMaxConnections(n);
  }

  static std::vector<std::unique_ptr<net::io_context>> MakeIoContexts(size_t threads) {
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

  static std::vector<std::unique_ptr<WakeQueue>> MakeWakeQueues(
      const std::vector<std::unique_ptr<net::io_context>>& iocs, Impl* impl) {
    std::vector<std::unique_ptr<WakeQueue>> queues;
    for (const auto& ioc : iocs) {
      queues.push_back(std::make_unique<WakeQueue>(
          *ioc, [impl](Waker& waker, DeliveryMemo& memo) { impl->Wake(waker, memo); }));
    }
    return queues;
  }

  // Store callbacks continue on the io threads, never on a store's writer thread: on the io
  // thread that started the operation when known, else on the first; catalog writes run on the
  // catalog workers (constructed after the service, used only once serving).
  static StreamServiceOptions WithExecutors(StreamServiceOptions options, net::io_context* first,
                                            WorkerPool* catalog, bool offload) {
    options.offload_store_calls = offload;
    options.executor = [first](std::function<void()> fn) { net::post(*first, std::move(fn)); };
    options.current_executor = []() -> std::function<void(std::function<void()>)> {
      net::io_context* here = t_io_context;
      if (here == nullptr) return nullptr;
      return [here](std::function<void()> fn) { net::post(*here, std::move(fn)); };
    };
    options.blocking_executor = [catalog](std::function<void()> fn) {
      catalog->Post(std::move(fn));
    };
    return options;
  }

  Status Listen() {
    boost::system::error_code ec;
    auto address = net::ip::make_address(options_.host, ec);
    if (ec) return Status::InvalidArgument("bad listen host '" + options_.host + "'");
    tcp::endpoint endpoint(address, options_.port);
    acceptor_.open(endpoint.protocol(), ec);
    if (!ec) acceptor_.set_option(net::socket_base::reuse_address(true), ec);
    if (!ec) acceptor_.bind(endpoint, ec);
    if (!ec) acceptor_.listen(net::socket_base::max_listen_connections, ec);
    if (ec) {
      return Status::Unavailable("cannot listen on " + options_.host + ":" +
                                 std::to_string(options_.port) + ": " + ec.message());
    }
    port_ = acceptor_.local_endpoint(ec).port();
    // Synchronous accepts (AnswerBusyOnSpare) must never block the accept loop; asynchronous
    // ones are unaffected.
    acceptor_.non_blocking(true, ec);
    spare_fd_ = OpenSpareFd();
    return Status::OK();
  }

  uint16_t port() const { return port_; }

  void Run() {
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
    auto serve = [](net::io_context* ioc) {
      t_io_context = ioc;
      ioc->run();
      t_io_context = nullptr;
    };
    std::vector<std::thread> pool;
    for (size_t i = 1; i < iocs_.size(); ++i) {
      pool.emplace_back(serve, iocs_[i].get());
      SetThreadName(pool.back(), "io-" + std::to_string(i));  // io 0 is the calling thread
    }
    serve(&first);
    for (auto& t : pool) t.join();
  }

  void Stop() {
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

 private:
  // Live SSE responses recheck their caller's token whenever the token file changes (a token
  // revoked) and every kAccessRecheckEvery in any case (a token expired): a response admitted
  // earlier ends once its token would no longer be admitted.
  static constexpr auto kAccessRecheckEvery = std::chrono::seconds(30);
  net::awaitable<void> WatchAccess() {
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
  bool StillAdmitted(const std::string& path, const std::optional<std::string>& authorization) {
    HttpRequest request;
    request.method = "GET";
    request.path = path;
    if (authorization) request.headers["authorization"] = *authorization;
    Principal who = Principal::Platform(/*cross_tenant=*/true);
    return !options_.access->Admit(request, ParseRoute(path, /*allow_tenants=*/true), &who);
  }

  net::awaitable<void> Drain() {
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

  net::awaitable<void> Accept() {
    AcceptBackoff backoff;
    auto on_error = [](std::exception_ptr e) {
      if (!e) return;
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& ex) {
        spdlog::error("connection failed: {}", ex.what());
      }
    };
    for (;;) {
      // Connections are spread over the io threads round robin.
      tcp::socket socket(iocs_[next_ioc_++ % iocs_.size()]->get_executor());
      boost::system::error_code ec;
      co_await acceptor_.async_accept(socket, net::redirect_error(net::use_awaitable, ec));
      if (ec) {
        if (stopping_.load() || ec == net::error::operation_aborted) co_return;
        metrics_.CountAcceptFailure();
        const AcceptBackoff::Decision next = backoff.Failed(AcceptBackoff::Clock::now());
        if (next.report_with_suppressed) {
          const uint64_t more = *next.report_with_suppressed;
          spdlog::warn(
              "accept failed: {}{}", ec.message(),
              more == 0 ? std::string()
                        : " (and " + std::to_string(more) + " more times since the last report)");
        }
        // Out of descriptors, the pending client would wait until one frees up: answer it from
        // the spare one instead, and go on at once while that works.
        if (OutOfDescriptors(ec) && AnswerBusyOnSpare()) {
          backoff.Succeeded();
          continue;
        }
        net::steady_timer timer(*iocs_[0], next.delay);
        co_await timer.async_wait(net::redirect_error(net::use_awaitable, ec));
        continue;
      }
      backoff.Succeeded();
      auto ex = socket.get_executor();
      if (serving_.load() >= max_connections_.load()) {
        if (rejecting_.load() >= options_.reject_slots) {
          // Every reject slot is busy: closed unanswered (the socket goes out of scope), so
          // refused clients never hold more than reject_slots descriptors.
          metrics_.CountRefusedConnection(/*answered=*/false);
          continue;
        }
        SocketSlot slot(&rejecting_);
        if (tls_) {
          net::co_spawn(ex, TlsSession(beast::tcp_stream(std::move(socket)), true, std::move(slot)),
                        on_error);
        } else {
          net::co_spawn(ex, RejectBusy(std::move(socket), std::move(slot)), net::detached);
        }
        continue;
      }
      SocketSlot slot(&serving_);
      if (tls_) {
        net::co_spawn(ex, TlsSession(beast::tcp_stream(std::move(socket)), false, std::move(slot)),
                      on_error);
      } else {
        net::co_spawn(
            ex, Session(beast::tcp_stream(std::move(socket)), MakeReadBuffer(), std::move(slot)),
            on_error);
      }
    }
  }

  // Called when accept failed for want of a descriptor: closes the spare descriptor, accepts
  // the oldest pending connection into the freed one, writes it the 503 without waiting (what
  // the socket does not take at once is dropped; on TLS nothing is written, as a plain answer
  // would not be understood), closes it and opens the spare again. True when a connection was
  // taken off the backlog; false when there was no spare (one is opened for next time) or
  // nothing could be accepted (another thread took the descriptor first, or the client had
  // gone).
  bool AnswerBusyOnSpare() {
    if (spare_fd_ < 0) {
      spare_fd_ = OpenSpareFd();
      return false;
    }
    ::close(spare_fd_);
    spare_fd_ = -1;
    boost::system::error_code ec;
    tcp::socket socket(*iocs_[0]);
    acceptor_.accept(socket, ec);
    const bool accepted = !ec;
    if (accepted) {
      bool answered = false;
      if (!tls_) {
        socket.non_blocking(true, ec);
        if (!ec) socket.write_some(net::buffer(BusyResponse()), ec);
        answered = !ec;
      }
      metrics_.CountRefusedConnection(answered);
      if (answered) metrics_.CountRequest("other", "-", 503);
      socket.shutdown(tcp::socket::shutdown_both, ec);
      socket.close(ec);
    }
    spare_fd_ = OpenSpareFd();
    return accepted;
  }

  // A connection to a TLS listener: answers a plain-HTTP request with a clear 400, otherwise
  // completes the handshake (bounded by tls_handshake_timeout_ms) and serves the session, or
  // when `busy`, answers 503. Like Session and RejectBusy, it holds the connection's `slot`
  // (its place in a count of sockets) until it ends.
  net::awaitable<void> TlsSession(beast::tcp_stream tcp, bool busy,
                                  [[maybe_unused]] SocketSlot slot) {
    beast::flat_buffer buffer = MakeReadBuffer();
    boost::system::error_code ec;
    tcp.expires_after(std::chrono::milliseconds(options_.tls_handshake_timeout_ms));
    bool is_tls =
        co_await beast::async_detect_ssl(tcp, buffer, net::redirect_error(net::use_awaitable, ec));
    if (ec) co_return;
    if (!is_tls) {
      HttpResponse r = StreamService::ErrorResponse(
          Status::InvalidArgument("this port serves HTTPS only; connect with https:// and TLS"));
      co_await Write(tcp, std::move(r), false, false, "other", "-");
      co_await DiscardInput(tcp);
      co_return;
    }
    TlsStream stream(std::move(tcp), *tls_);
    size_t used = co_await stream.async_handshake(ssl::stream_base::server, buffer.data(),
                                                  net::redirect_error(net::use_awaitable, ec));
    if (ec) {
      spdlog::debug("TLS handshake failed: {}", ec.message());
      co_return;
    }
    buffer.consume(used);
    // h2 when the client chose it by ALPN (offered only with ServerOptions::http2); a busy
    // server answers its requests 503 in HTTP/2 and sends GOAWAY.
    const unsigned char* protocol = nullptr;
    unsigned int protocol_len = 0;
    SSL_get0_alpn_selected(stream.native_handle(), &protocol, &protocol_len);
    if (protocol_len == 2 && std::memcmp(protocol, "h2", 2) == 0) {
      Tcp(stream).expires_never();
      auto conn = std::make_shared<H2Conn>(std::move(stream));
      conn->busy = busy;
      co_await ServeH2(std::move(conn), std::move(buffer));
      co_return;
    }
    if (busy) {
      // The same answer as RejectBusy's on plain HTTP: 503, not resource_exhausted's usual 429.
      HttpResponse r =
          StreamService::ErrorResponse(Status::ResourceExhausted("too many connections"));
      r.status = 503;
      r.Set("Retry-After", "1");
      co_await Write(stream, std::move(r), false, false, "other", "-");
      metrics_.CountRefusedConnection(/*answered=*/true);
      co_await ShutdownSend(stream);
      co_return;
    }
    co_await Serve(stream, std::move(buffer));
  }

  // Ends the sending side of a finished connection: TCP half-close, after a (bounded) TLS
  // close_notify exchange on TLS.
  net::awaitable<void> ShutdownSend(beast::tcp_stream& stream) {
    boost::system::error_code ec;
    stream.socket().shutdown(tcp::socket::shutdown_send, ec);
    co_return;
  }
  net::awaitable<void> ShutdownSend(TlsStream& stream) {
    boost::system::error_code ec;
    Tcp(stream).expires_after(kTlsShutdownTimeout);
    co_await stream.async_shutdown(net::redirect_error(net::use_awaitable, ec));
    Tcp(stream).socket().shutdown(tcp::socket::shutdown_send, ec);
  }

  // Answers a connection beyond the cap with 503 and closes it. What the client sent by then is
  // read and discarded first (without waiting for more), so that closing usually does not
  // reset the connection before the client has read the answer; the descriptor is held no
  // longer than it takes to write the answer (at most kRejectWriteTimeout).
  static constexpr std::chrono::seconds kRejectWriteTimeout{1};
  net::awaitable<void> RejectBusy(tcp::socket socket, [[maybe_unused]] SocketSlot slot) {
    beast::tcp_stream stream(std::move(socket));
    stream.expires_after(kRejectWriteTimeout);
    boost::system::error_code ec;
    co_await net::async_write(stream, net::buffer(BusyResponse()),
                              net::redirect_error(net::use_awaitable, ec));
    metrics_.CountRefusedConnection(/*answered=*/!ec);
    if (!ec) metrics_.CountRequest("other", "-", 503);
    stream.socket().shutdown(tcp::socket::shutdown_send, ec);
    stream.socket().non_blocking(true, ec);  // the reads below must not wait
    std::array<char, 4096> scratch;
    for (size_t total = 0; total < (64u << 10);) {
      const size_t n = stream.socket().receive(net::buffer(scratch), 0, ec);
      if (ec || n == 0) break;
      total += n;
    }
    stream.socket().close(ec);
  }

  // Writes our response as HTTP/1.1, serialized into one buffer: on plain TCP it usually goes
  // out in one non-blocking write, with no asynchronous operation (WriteLive). A HEAD answer
  // carries the head only, whatever the caller passed as `head`, with the Content-Length of the
  // body a GET would have carried (none when that is unknown here: length_unknown); 204 and
  // 304 carry no Content-Length.
  template <typename Stream>
  net::awaitable<bool> Write(Stream& stream, HttpResponse response, bool keep_alive, bool head,
                             std::string_view route, std::string_view method) {
    head = head || method == "HEAD";
    const bool no_body = response.status == 204 || response.status == 304;
    const std::string_view body =
        head || no_body ? std::string_view() : std::string_view(response.body);
    std::string out;
    out.reserve(256 + body.size());
    out += "HTTP/1.1 ";
    out += std::to_string(response.status);
    out += ' ';
    const auto reason = http::obsolete_reason(http::int_to_status(response.status));
    out.append(reason.data(), reason.size());
    out += "\r\n";
    for (const auto& [name, value] : response.headers) {
      out += name;
      out += ": ";
      // Values are ours or parsed request fields; a line break could never be meant.
      if (value.find_first_of("\r\n") == std::string::npos) {
        out += value;
      } else {
        for (char c : value) out += (c == '\r' || c == '\n') ? ' ' : c;
      }
      out += "\r\n";
    }
    out += StreamService::CommonHeaderLines();
    if (!keep_alive) out += "Connection: close\r\n";
    if (!no_body && !(head && response.length_unknown)) {
      out += "Content-Length: ";
      out += std::to_string(response.body.size());
      out += "\r\n";
    }
    out += "\r\n";
    out += body;
    metrics_.AddBytesOut(body.size());
    metrics_.CountRequest(route, method, response.status);
    if (options_.access_log) AccessScope::Record(&stream, response.status, body.size());
    bool timed = false;
    co_return co_await WriteLive(stream, net::buffer(out), &timed);
  }

  // Starts an operation that reports a T to a callback (on any thread) and returns an awaitable
  // for it; the callback is posted back to the awaiting coroutine's executor. Deliberately not a
  // coroutine itself: GCC 12 mishandles lambda captures of coroutine parameters.
  template <typename T>
  struct CallbackInitiation {
    std::function<void(std::function<void(T)>)> start;
    template <typename Handler>
    void operator()(Handler handler) {
      auto ex = net::get_associated_executor(handler);
      auto shared = std::make_shared<Handler>(std::move(handler));
      // A callback that arrives on an io thread after `start` returned (a store answer already
      // handed to the io threads) resumes the coroutine right there; one during `start`, or on
      // another thread, is posted.
      auto starting = std::make_shared<std::atomic<bool>>(true);
      start([shared, ex, starting](T value) {
        auto resume = [shared, value = std::move(value)]() mutable { (*shared)(std::move(value)); };
        if (starting->load(std::memory_order_acquire)) {
          net::post(ex, std::move(resume));
        } else {
          net::dispatch(ex, std::move(resume));
        }
      });
      starting->store(false, std::memory_order_release);
    }
  };
  template <typename T>
  static auto AwaitCallback(std::function<void(std::function<void(T)>)> start) {
    return net::async_initiate<decltype(net::use_awaitable), void(T)>(
        CallbackInitiation<T>{std::move(start)}, net::use_awaitable);
  }
  // Runs `fn` on the catalog workers and returns its result to the awaiting coroutine.
  template <typename T>
  auto OnWorkers(std::function<T()> fn) {
    return AwaitCallback<T>([this, fn = std::move(fn)](std::function<void(T)> done) {
      catalog_workers_.Post([fn, done = std::move(done)] { done(fn()); });
    });
  }
  // A stream request's store calls: on the catalog workers when they may block (offload_),
  // else right here. GCC 12 mishandles temporaries that live across a co_await, and lambda
  // captures of coroutine parameters: callers pass a named std::function whose captures are
  // pointers.
  template <typename T>
  net::awaitable<T> StoreCall(const std::function<T()>& fn) {
    if (!offload_) co_return fn();
    co_return co_await OnWorkers<T>(fn);
  }
  // The start of a GET: the reader's state, or the whole response (an error, or a catch-up
  // read that is complete in one response) with no state.
  struct ReadStart {
    std::optional<ReadState> state;
    HttpResponse response;
  };

  // A request on a service (StreamService::HandleWrite, ChannelService::Handle).
  template <typename Service>
  using StartFn = void (Service::*)(const Route&, HttpRequest, std::function<void(HttpResponse)>);
  template <typename Service>
  static auto AwaitService(Service* service, StartFn<Service> start, const Route& route,
                           std::shared_ptr<HttpRequest> request) {
    return AwaitCallback<HttpResponse>(
        [service, start, route, request](std::function<void(HttpResponse)> done) {
          (service->*start)(route, std::move(*request), std::move(done));
        });
  }
  // Group requests run on the group service's workers (they block on the store).
  auto AwaitGroup(const Principal& who, std::shared_ptr<const HttpRequest> request) {
    return AwaitCallback<GroupAnswer>([this, who, request](std::function<void(GroupAnswer)> done) {
      groups_.Handle(who, *request, std::move(done));
    });
  }
  // Writes run on the stream service; channel requests on the channel service's workers (they
  // block on the store).
  auto AwaitWrite(const Route& route, std::shared_ptr<HttpRequest> request) {
    return AwaitService(&service_, &StreamService::HandleWrite, route, std::move(request));
  }
  auto AwaitChannel(const Route& route, std::shared_ptr<HttpRequest> request) {
    return AwaitService(&channels_, &ChannelService::Handle, route, std::move(request));
  }

  // `ex` is a connection's executor, on one of iocs_.
  std::shared_ptr<Waker> NewWaker(const net::any_io_executor& ex) {
    net::execution_context* context = &net::query(ex, net::execution::context);
    WakeQueue* queue = wake_queues_[0].get();
    for (size_t i = 0; i < iocs_.size(); ++i) {
      if (static_cast<net::execution_context*>(iocs_[i].get()) == context) {
        queue = wake_queues_[i].get();
      }
    }
    auto waker = std::make_shared<Waker>(ex, queue);
    MutexLock lock(live_mu_);
    // Ended readers are swept once the list has doubled since the last sweep: amortized O(1)
    // per reader (a sweep on every new reader made each long-poll cost O(live readers)).
    if (live_.size() >= 2 * live_after_sweep_ + 64) {
      std::erase_if(live_, [](const std::weak_ptr<Waker>& w) { return w.expired(); });
      live_after_sweep_ = live_.size();
    }
    live_.push_back(waker);
    if (stopping_.load()) waker->stopped = true;
    return waker;
  }

  static std::function<void()> HintFor(const std::shared_ptr<Waker>& waker) {
    std::weak_ptr<Waker> weak = waker;
    WakeQueue* queue = waker->queue;
    return [weak, queue] { queue->Push(weak); };
  }

  // A hint on the io thread: a parked SSE reader gets its next event written right here when
  // that is all there is to do; anything else (no records yet, the stream closed or gone, a
  // socket that does not take the whole event, an error) resumes the reader's coroutine.
  void Wake(Waker& waker, DeliveryMemo& memo) {
    if (waker.parked != nullptr && !waker.hinted && !waker.stopped && !waker.hung_up &&
        DeliverParked(*waker.parked, memo)) {
      return;
    }
    waker.hinted = true;
    waker.timer.cancel();
  }

  // Writes the event at a parked reader's position in place. Returns true when it was written
  // whole (the reader stays parked); false when the coroutine must take over, with what the
  // socket did not take in `pending` or `failed` set.
  bool DeliverParked(SseParked& parked, DeliveryMemo& memo) {
    if (offload_ || parked.socket == nullptr || parked.failed || !parked.pending.empty()) {
      return false;
    }
    const ReadState& state = *parked.state;
    if (!memo.Matches(state)) {
      memo.valid = false;
      SseStep step = service_.ReadSse(state);
      if (step.gone || step.closed || !step.data || !step.up_to_date) return false;
      const std::string control = service_.SseControl(state, step);
      memo.event_bytes = step.data->size() + control.size();
      char size[24];
      const int size_len = std::snprintf(size, sizeof(size), "%llx\r\n",
                                         static_cast<unsigned long long>(memo.event_bytes));
      memo.chunk.clear();
      memo.chunk.reserve(static_cast<size_t>(size_len) + memo.event_bytes + 2);
      memo.chunk.append(size, static_cast<size_t>(size_len));
      memo.chunk.append(*step.data).append(control).append("\r\n");
      memo.next = step.next;
      memo.id = state.id;
      memo.position = state.position;
      memo.base64 = state.base64;
      memo.client_cursor = state.client_cursor;
      memo.valid = true;
    }
    boost::system::error_code ec;
    if (!parked.socket->non_blocking()) parked.socket->non_blocking(true, ec);
    const size_t written = ec ? 0 : parked.socket->write_some(net::buffer(memo.chunk), ec);
    metrics_.AddBytesOut(memo.event_bytes);
    parked.state->position = memo.next;
    if (written == memo.chunk.size()) return true;
    if (ec && ec != net::error::would_block && ec != net::error::try_again) {
      parked.failed = true;
      return false;
    }
    parked.pending = memo.chunk.substr(written);
    return false;
  }

  // Waits until a hint, an access recheck, shutdown or `deadline`. Returns false on deadline or
  // shutdown; a recheck is left set for the caller.
  static net::awaitable<bool> WaitForHint(Waker& waker,
                                          std::chrono::steady_clock::time_point deadline) {
    while (!waker.hinted && !waker.stopped && !waker.hung_up && !waker.recheck) {
      if (std::chrono::steady_clock::now() >= deadline) co_return false;
      waker.timer.expires_at(deadline);
      boost::system::error_code ec;
      co_await waker.timer.async_wait(net::redirect_error(net::use_awaitable, ec));
    }
    bool hinted = (waker.hinted || waker.recheck) && !waker.stopped && !waker.hung_up;
    waker.hinted = false;
    co_return hinted;
  }

  // Subscribes `waker` to the stream at the state's position (StreamService::Watch), on the
  // store's workers when store calls are offloaded.
  net::awaitable<Result<Subscription>> WatchFrom(const ReadState& state,
                                                 const std::shared_ptr<Waker>& waker) {
    StreamService* service = &service_;
    const ReadState* at = &state;
    const std::function<void()> hint = HintFor(waker);
    const std::function<Result<Subscription>()> watch = [service, at, hint] {
      return service->Watch(*at, hint);
    };
    co_return co_await StoreCall(watch);
  }

  // Reads at the state's position, waiting (the long-poll timeout) for records when there are
  // none: returns the first chunk with records, or the last one read when the stream is gone or
  // closed, the timeout passed or the server stops.
  template <typename Stream>
  net::awaitable<ReadChunk> WaitForRecords(
      Stream& stream, const ReadState& state,
      std::optional<std::chrono::steady_clock::time_point> until = std::nullopt) {
    StreamService* service = &service_;
    const ReadState* at = &state;
    const std::function<ReadChunk()> read = [service, at] { return service->Read(*at); };
    ReadChunk chunk = co_await StoreCall(read);
    if (chunk.gone || !chunk.records.empty() || chunk.closed) co_return chunk;
    auto waker = NewWaker(stream.get_executor());
    auto subscription = co_await WatchFrom(state, waker);
    metrics_.LiveReaderStarted();
    const auto deadline =
        until.value_or(std::chrono::steady_clock::now() +
                       std::chrono::milliseconds(service_.options().long_poll_timeout_ms));
    BeginLiveWait(stream, waker);
    for (;;) {
      // Read after subscribing, so an append between the first read and the subscription wakes.
      // On HTTP/2 each read first takes room in the connection's answer budget.
      if constexpr (std::is_same_v<Stream, H2Stream>) {
        if (!co_await ReserveAnswer(stream, /*read=*/true)) break;
      }
      chunk = co_await StoreCall(read);
      if (chunk.gone || !chunk.records.empty() || chunk.closed) break;
      if (!subscription.ok()) break;
      if constexpr (std::is_same_v<Stream, H2Stream>) stream.conn->Release(stream.id);
      if (!co_await WaitForHint(*waker, deadline)) {
        if (waker->hung_up) break;  // nobody to answer; the write fails and ends the session
        if constexpr (std::is_same_v<Stream, H2Stream>) {
          if (!co_await ReserveAnswer(stream, /*read=*/true)) break;
        }
        chunk = co_await StoreCall(read);
        break;
      }
    }
    EndLiveWait(stream, *waker);
    metrics_.LiveReaderEnded();
    co_return chunk;
  }

  // A live wait begins and ends: on a connection, no timeout while it waits and a watch for
  // the reader hanging up; on an HTTP/2 stream, a reset of the stream (or the connection
  // closing) wakes the reader as gone.
  template <typename Stream>
  static void BeginLiveWait(Stream& stream, const std::shared_ptr<Waker>& waker) {
    Tcp(stream).expires_never();
    WatchHangUp(Tcp(stream).socket(), waker);
  }
  template <typename Stream>
  static void EndLiveWait(Stream& stream, Waker& waker) {
    StopWatchingHangUp(Tcp(stream).socket(), waker);
  }
  static void BeginLiveWait(H2Stream& stream, const std::shared_ptr<Waker>& waker) {
    if (stream.conn->closed || !stream.conn->session->Open(stream.id)) waker->hung_up = true;
    stream.conn->wakers[stream.id] = waker;
    stream.conn->Release(stream.id);  // a waiting reader holds no answer
  }
  static void EndLiveWait(H2Stream& stream, Waker&) { stream.conn->wakers.erase(stream.id); }

  // The connection's answer budget (ServerOptions::http2_connection_buffer): before an HTTP/2
  // stream produces an answer it reserves room for it (a read the largest answer a read makes,
  // max_read_bytes, plus kH2SmallAnswer for its head and framing; anything else
  // kH2SmallAnswer), waiting while the connection's queued answers and reservations leave no
  // room, at most request_timeout_ms. The reservation ends when the answer is queued (then the
  // queued bytes count) or the stream waits for records. A connection with nothing buffered
  // always has room, so one answer larger than the budget still goes. False when the stream or
  // connection went away or the wait timed out. HTTP/1.1 has one answer at a time on a
  // connection, and nothing to reserve.
  static constexpr size_t kH2SmallAnswer = 64u << 10;
  net::awaitable<bool> ReserveAnswer(H2Stream& stream, bool read) {
    H2Conn& conn = *stream.conn;
    if (conn.closed) co_return false;
    if (conn.reservations.contains(stream.id)) co_return true;
    const size_t want = (read ? service_.options().max_read_bytes : size_t{0}) + kH2SmallAnswer;
    const size_t budget = options_.http2_connection_buffer;
    const auto give_up =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(options_.request_timeout_ms);
    bool counted = false;
    net::steady_timer timer(stream.get_executor());
    for (;;) {
      if (conn.closed || !conn.session->Open(stream.id)) co_return false;
      const size_t buffered = conn.Buffered();
      if (buffered == 0 || buffered + want <= budget) break;
      if (std::chrono::steady_clock::now() >= give_up) {
        metrics_.CountHttp2BudgetRefusal();
        co_return false;
      }
      if (!counted) {
        counted = true;
        metrics_.CountHttp2BudgetWait();
      }
      timer.expires_at(give_up);
      // Registered while it waits, and unregistered also when the coroutine is destroyed
      // suspended (the server stopping), so the connection never keeps a dangling timer.
      struct Parked {
        H2Conn& conn;
        net::steady_timer* timer;
        ~Parked() { std::erase(conn.room_waiters, timer); }
      } parked{conn, &timer};
      conn.room_waiters.push_back(&timer);
      boost::system::error_code ec;
      co_await timer.async_wait(net::redirect_error(net::use_awaitable, ec));
    }
    conn.reservations[stream.id] = want;
    conn.reserved += want;
    co_return true;
  }

  template <typename Stream>
  net::awaitable<bool> LongPoll(Stream& stream, ReadState state, bool keep_alive) {
    ReadChunk chunk = co_await WaitForRecords(stream, state);
    HttpResponse response = (chunk.gone || !chunk.records.empty())
                                ? service_.ReadResponse(state, chunk)
                                : service_.LongPollEmptyResponse(state, chunk);
    co_return co_await Write(stream, std::move(response), keep_alive, false, "stream", "GET");
  }

  // A group read-next that waits for work: the stream's long-poll wait from the group's offset;
  // when records arrive, the read-next answer (200), else the protocol's 204.
  template <typename Stream>
  net::awaitable<bool> GroupLongPoll(Stream& stream, Principal principal,
                                     std::shared_ptr<const HttpRequest> request, ReadState state,
                                     bool keep_alive) {
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::milliseconds(service_.options().long_poll_timeout_ms);
    ReadChunk chunk = co_await WaitForRecords(stream, state, deadline);
    while (!chunk.gone && !chunk.records.empty()) {
      GroupAnswer again = co_await AwaitGroup(principal, request);
      if (!again.live) {
        co_return co_await Write(stream, std::move(again.response), keep_alive, false, "groups",
                                 "GET");
      }
      // The group acked past the new records meanwhile: nothing to hand out yet, so wait on
      // from the group's new position until the same deadline.
      state = std::move(*again.live);
      if (std::chrono::steady_clock::now() >= deadline) {
        chunk.records.clear();
        chunk.next = state.position;
        chunk.closed = false;
        break;
      }
      chunk = co_await WaitForRecords(stream, state, deadline);
    }
    co_return co_await Write(stream, service_.LongPollEmptyResponse(state, chunk), keep_alive,
                             false, "groups", "GET");
  }

  // Writes `buffers` on a live response. On plain TCP the bytes usually fit the socket's send
  // buffer and are written in place, with no asynchronous operation and no timeout to arm and
  // cancel; whatever does not fit (a slow reader) is written asynchronously under
  // request_timeout_ms, which sets *timed; `waker` (if any) can cancel that write (a hang-up,
  // shutdown). Returns false when the connection failed or the write was cancelled.
  template <typename Stream, typename Buffers>
  net::awaitable<bool> WriteLive(Stream& stream, const Buffers& buffers, bool* timed,
                                 Waker* waker = nullptr) {
    boost::system::error_code ec;
    size_t written = 0;
    const size_t total = net::buffer_size(buffers);
    if constexpr (std::is_same_v<Stream, beast::tcp_stream>) {
      auto& socket = stream.socket();
      if (!socket.non_blocking()) socket.non_blocking(true, ec);
      while (!ec && written < total) {
        beast::buffers_suffix<Buffers> rest(buffers);
        rest.consume(written);
        const size_t n = socket.write_some(rest, ec);
        if (n == 0) break;
        written += n;
      }
      if (written == total) co_return true;
      if (ec != net::error::would_block && ec != net::error::try_again) co_return false;
      ec = {};
    }
    beast::buffers_suffix<Buffers> rest(buffers);
    rest.consume(written);
    if (waker != nullptr && (waker->hung_up || waker->stopped)) co_return false;
    Tcp(stream).expires_after(std::chrono::milliseconds(options_.request_timeout_ms));
    *timed = true;
    if (waker != nullptr) waker->writing = &Tcp(stream).socket();
    co_await net::async_write(stream, rest, net::redirect_error(net::use_awaitable, ec));
    if (waker != nullptr) waker->writing = nullptr;
    co_return !ec;
  }

  // Writes the head of an SSE response. Its own coroutine, so the header and its serializer
  // are not kept for the whole life of the response (memory per live reader).
  template <typename Stream>
  net::awaitable<bool> WriteSseHead(Stream& stream, const ReadState& state) {
    HttpResponse head = service_.SseHeaders(state);
    StreamService::AddCommonHeaders(&head);
    http::response<http::empty_body> res;
    res.version(11);
    res.result(http::status::ok);
    for (auto& [name, value] : head.headers) res.insert(name, value);
    res.keep_alive(false);
    res.chunked(true);
    http::response_serializer<http::empty_body> sr(res);
    boost::system::error_code ec;
    Tcp(stream).expires_after(std::chrono::milliseconds(options_.request_timeout_ms));
    co_await http::async_write_header(stream, sr, net::redirect_error(net::use_awaitable, ec));
    co_return !ec;
  }

  // Streams SSE until the stream closes, the reader leaves, the session's time is up or the
  // server stops. Always ends the connection.
  template <typename Stream>
  net::awaitable<void> Sse(Stream& stream, ReadState state, std::string_view label,
                           std::string path, std::optional<std::string> authorization) {
    boost::system::error_code ec;
    if (!co_await WriteSseHead(stream, state)) co_return;
    metrics_.CountRequest(label, "GET", 200);
    if (options_.access_log) AccessScope::Record(&stream, 200, 0);
    auto waker = NewWaker(stream.get_executor());
    waker->sse = options_.access != nullptr;
    StreamService* service = &service_;
    const ReadState* at = &state;
    Result<Subscription> subscription = co_await WatchFrom(state, waker);
    const std::function<SseStep()> read = [service, at] { return service->ReadSse(*at); };
    metrics_.LiveReaderStarted();
    WatchHangUp(Tcp(stream).socket(), waker);
    auto deadline =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(options_.sse_max_duration_ms);
    bool first = true;
    bool timed = false;  // a write timeout is armed on the connection
    // A write failed or was cancelled: the response cannot be ended cleanly, only closed.
    bool write_failed = false;
    SseParked parked;
    parked.state = &state;
    if constexpr (std::is_same_v<Stream, beast::tcp_stream>) parked.socket = &stream.socket();
    for (;;) {
      // What the io thread wrote in place while the reader was parked, and the socket did not
      // take whole, goes out first.
      if (parked.failed) break;
      if (!parked.pending.empty()) {
        std::string pending = std::move(parked.pending);
        parked.pending.clear();
        if (!co_await WriteLive(stream, net::buffer(pending), &timed, waker.get())) {
          write_failed = true;
          break;
        }
      }
      // The data event is shared with the stream's other SSE readers at this position; only
      // the control event is this reader's own.
      SseStep step = co_await StoreCall(read);
      if (step.gone) {
        // A read that failed (damaged records, a store error) says so before the response
        // ends, so the reader does not wait on a stream that went silent.
        if (!step.error.ok()) {
          const std::string event = StreamService::SseError(step.error);
          if (!co_await WriteLive(stream, http::make_chunk(net::buffer(event)), &timed,
                                  waker.get())) {
            write_failed = true;
          }
        }
        break;
      }
      if (first || step.data || step.closed) {
        std::string control = service_.SseControl(state, step);
        std::array<net::const_buffer, 2> events{
            step.data ? net::buffer(*step.data) : net::const_buffer(), net::buffer(control)};
        metrics_.AddBytesOut(net::buffer_size(events));
        if (options_.access_log) AccessScope::Record(&stream, 0, net::buffer_size(events));
        if (!co_await WriteLive(stream, http::make_chunk(events), &timed, waker.get())) {
          write_failed = true;
          break;
        }
        first = false;
        state.position = step.next;
      }
      if (step.closed) break;
      if (!step.up_to_date) continue;
      if (!subscription.ok()) break;
      if (timed) {
        Tcp(stream).expires_never();
        timed = false;
      }
      waker->parked = &parked;
      const bool hinted = co_await WaitForHint(*waker, deadline);
      waker->parked = nullptr;
      if (!hinted) break;
      if (waker->recheck) {
        waker->recheck = false;
        if (!StillAdmitted(path, authorization)) break;
      }
    }
    StopWatchingHangUp(Tcp(stream).socket(), *waker);
    metrics_.LiveReaderEnded();
    if (waker->hung_up || write_failed || parked.failed) co_return;
    Tcp(stream).expires_after(std::chrono::milliseconds(options_.request_timeout_ms));
    co_await net::async_write(stream, http::make_chunk_last(),
                              net::redirect_error(net::use_awaitable, ec));
  }

  // An HTTP/1.1 request that asked to continue as HTTP/2 (`Upgrade: h2c`), which ServeRequests
  // leaves to Serve with what was read after it.
  struct PendingUpgrade {
    std::optional<HttpRequest> request;
    std::string settings;  // the decoded HTTP2-Settings payload
    std::string target;    // as sent, for the access log
    beast::flat_buffer rest;
  };
  // Whether a request asks for h2c by Upgrade (RFC 7540 3.2): `Upgrade` lists h2c, `Connection`
  // lists Upgrade and HTTP2-Settings, and the settings are there.
  static bool WantsH2cUpgrade(const HttpRequest& request) {
    auto lists = [](std::optional<std::string_view> field, std::string_view token) {
      if (!field) return false;
      std::string_view rest = *field;
      while (!rest.empty()) {
        const size_t comma = rest.find(',');
        if (EqualsIgnoreCase(TrimBlanks(rest.substr(0, comma)), token)) return true;
        rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
      }
      return false;
    };
    return lists(request.Header("upgrade"), "h2c") &&
           lists(request.Header("connection"), "upgrade") &&
           request.Header("http2-settings").has_value();
  }

  // An SSE response Dispatch leaves to Serve, so Dispatch's large coroutine frame is not kept
  // for the whole life of the response (memory per live reader).
  struct PendingSse {
    std::optional<ReadState> state;
    std::string_view label;
    // What the request was admitted with, for rechecks while it runs.
    std::string path;
    std::optional<std::string> authorization;
    // The request's access log line, written when the SSE response ends.
    AccessScope access;
  };

  // Handles one request. Returns false when the connection must close; an SSE request is
  // returned in *sse (and false) for the caller to serve.
  template <typename Stream>
  net::awaitable<bool> Dispatch(Stream& stream, HttpRequest request, bool keep_alive,
                                PendingSse* sse) {
    Route route = ParseRoute(request.path, /*allow_tenants=*/true);
    const std::string method = request.method;
    if (method == "OPTIONS") {
      co_return co_await Write(stream, StreamService::Preflight(request), keep_alive, false,
                               route.label, method);
    }
    // Authentication and tenant authorization, before anything looks at a stream (Z4).
    Principal principal = Principal::Platform(/*cross_tenant=*/true);
    if (options_.access && route.kind != Route::Kind::kHealth &&
        route.kind != Route::Kind::kDashboard &&
        !(options_.subscriptions && SubscriptionService::SelfAuthenticated(route))) {
      if (auto denied = options_.access->Admit(request, route, &principal)) {
        co_return co_await Write(stream, std::move(*denied), keep_alive, method == "HEAD",
                                 route.label, method);
      }
    }
    StreamService* service = &service_;
    const Route* rt = &route;
    const HttpRequest* rq = &request;
    // Quotas limit a tenant's streams, bytes and appends; the reserved __ds endpoints
    // (subscriptions) are none of these, and their wake-token routes admit callers without a
    // tenant token, who must not be able to draw on (or learn about) a tenant's quota.
    // An admitted create keeps its place under the stream limit until this request is done.
    TenantQuota::CreateHold create_hold;
    if (quota_ && !SubscriptionService::Matches(route)) {
      TenantQuota* quota = quota_.get();
      TenantQuota::CreateHold* hold = &create_hold;
      const std::function<std::optional<HttpResponse>()> check = [quota, rt, rq, hold] {
        return quota->Check(*rt, *rq, hold);
      };
      if (auto limited = co_await StoreCall(check)) {
        co_return co_await Write(stream, std::move(*limited), keep_alive, method == "HEAD",
                                 route.label, method);
      }
    }
    if (options_.subscriptions && SubscriptionService::Matches(route)) {
      SubscriptionService* subscriptions = options_.subscriptions.get();
      const std::function<HttpResponse()> handle = [subscriptions, rt, rq] {
        return subscriptions->Handle(*rt, *rq);
      };
      HttpResponse r = co_await StoreCall(handle);
      co_return co_await Write(stream, std::move(r), keep_alive, method == "HEAD", "subscriptions",
                               method);
    }
    if (GroupService::Matches(request.path)) {
      auto shared = std::make_shared<const HttpRequest>(std::move(request));
      GroupAnswer answer = co_await AwaitGroup(principal, shared);
      if (!answer.live) {
        co_return co_await Write(stream, std::move(answer.response), keep_alive, method == "HEAD",
                                 "groups", method);
      }
      if (answer.live->mode == LiveMode::kSse) {
        sse->state = std::move(*answer.live);
        sse->label = "groups";
        sse->path = shared->path;
        if (auto a = shared->Header("authorization")) sse->authorization = std::string(*a);
        co_return false;
      }
      co_return co_await GroupLongPoll(stream, std::move(principal), std::move(shared),
                                       std::move(*answer.live), keep_alive);
    }
    if ((route.kind == Route::Kind::kHealth || route.kind == Route::Kind::kMetrics) &&
        method != "GET" && method != "HEAD") {
      HttpResponse r = StreamService::ErrorResponse(
          Status::InvalidArgument("use GET on /" + std::string(route.label)));
      r.status = 405;
      r.Set("Allow", "GET, HEAD");
      co_return co_await Write(stream, std::move(r), keep_alive, false, route.label, method);
    }
    switch (route.kind) {
      case Route::Kind::kHealth: {
        HttpResponse r;
        r.Set("Content-Type", "text/plain");
        r.Set("Cache-Control", "no-store");
        r.body = "ok\n";
        co_return co_await Write(stream, std::move(r), keep_alive, method == "HEAD", route.label,
                                 method);
      }
      case Route::Kind::kMetrics: {
        HttpResponse r;
        r.Set("Content-Type", "text/plain; version=0.0.4");
        r.Set("Cache-Control", "no-store");
        r.body = RenderInfo(options_.info, service_.registry().store().Durability()) +
                 metrics_.Render() +
                 RenderStoreCommitStats(service_.registry().store().CommitStats());
        co_return co_await Write(stream, std::move(r), keep_alive, method == "HEAD", route.label,
                                 method);
      }
      case Route::Kind::kDashboard: {
        HttpResponse r = options_.dashboard
                             ? DashboardResponse(request.path, method)
                             : StreamService::ErrorResponse(Status::NotFound("no such route"));
        co_return co_await Write(stream, std::move(r), keep_alive, method == "HEAD", route.label,
                                 method);
      }
      case Route::Kind::kNotFound:
        co_return co_await Write(stream,
                                 StreamService::ErrorResponse(Status::NotFound("no such route")),
                                 keep_alive, method == "HEAD", route.label, method);
      case Route::Kind::kList: {
        if (method == "GET" || method == "HEAD") {
          const std::function<HttpResponse()> list = [service, rt, rq] {
            return service->HandleList(*rt, *rq);
          };
          HttpResponse r = co_await StoreCall(list);
          co_return co_await Write(stream, std::move(r), keep_alive, method == "HEAD", route.label,
                                   method);
        }
        HttpResponse r =
            StreamService::ErrorResponse(Status::InvalidArgument("use GET to list streams"));
        r.status = 405;
        r.Set("Allow", "GET, HEAD");
        co_return co_await Write(stream, std::move(r), keep_alive, false, route.label, method);
      }
      case Route::Kind::kChannel: {
        const bool head = method == "HEAD";
        HttpResponse r =
            co_await AwaitChannel(route, std::make_shared<HttpRequest>(std::move(request)));
        co_return co_await Write(stream, std::move(r), keep_alive, head, route.label, method);
      }
      case Route::Kind::kStream: break;
    }
    if (method == "PUT" || method == "POST" || method == "DELETE" || method == "PATCH") {
      HttpResponse r =
          co_await AwaitWrite(route, std::make_shared<HttpRequest>(std::move(request)));
      if (options_.subscriptions && r.status < 300) options_.subscriptions->NoteWrite(route);
      co_return co_await Write(stream, std::move(r), keep_alive, false, route.label, method);
    }
    if (method == "HEAD") {
      const std::function<HttpResponse()> head = [service, rt, rq] {
        return service->HandleHead(*rt, *rq);
      };
      HttpResponse r = co_await StoreCall(head);
      co_return co_await Write(stream, std::move(r), keep_alive, true, route.label, method);
    }
    if (method == "GET") {
      // A read that needed a token answers `private` unless the operator declared its scope's
      // data public (ServerOptions::public_cache_scopes). Decided here, off the append path.
      const bool shared_cache = !options_.access || !options_.access->RequiresTokens() ||
                                options_.public_cache_scopes.count(route.scope.Label()) != 0;
      const std::function<ReadStart()> begin = [service, rt, rq, shared_cache] {
        ReadStart s;
        s.state = service->BeginRead(*rt, *rq, &s.response);
        if (s.state) s.state->shared_cache = shared_cache;
        if (s.state && s.state->mode == LiveMode::kNone) {
          s.response = service->ReadResponse(*s.state, service->Read(*s.state));
          s.state.reset();
        }
        return s;
      };
      ReadStart start = co_await StoreCall(begin);
      if (!start.state) {
        co_return co_await Write(stream, std::move(start.response), keep_alive, false, route.label,
                                 method);
      }
      auto& state = start.state;
      switch (state->mode) {
        case LiveMode::kNone:  // answered above; kept for completeness
          co_return co_await Write(stream, std::move(start.response), keep_alive, false,
                                   route.label, method);
        case LiveMode::kLongPoll:
          co_return co_await LongPoll(stream, std::move(*state), keep_alive);
        case LiveMode::kSse:
          sse->state = std::move(*state);
          sse->label = "stream";
          sse->path = request.path;
          if (auto a = request.Header("authorization")) sse->authorization = std::string(*a);
          co_return false;
      }
    }
    HttpResponse r = StreamService::ErrorResponse(
        Status::InvalidArgument("method " + method + " is not allowed on a stream"));
    r.status = 405;
    r.Set("Allow", "GET, HEAD, POST, PUT, DELETE, PATCH, OPTIONS");
    co_return co_await Write(stream, std::move(r), keep_alive, false, route.label, method);
  }

  // How a request body was read (ReadBody).
  enum class BodyRead {
    kOk,
    kMalformed,    // unparsable framing, or the peer closed mid-body: `ec` says which
    kTooLarge,     // the body passed max_body_bytes
    kExtensions,   // chunk extensions and trailer fields passed max_header_bytes
    kFraming,      // chunk framing passed its share (ChunkFramingLimit)
    kLineTooLong,  // one chunk-size line or the trailer section did not fit the read buffer
  };
  struct BodyOutcome {
    BodyRead kind = BodyRead::kOk;
    boost::system::error_code ec;
  };

  static std::string BodyReadMessage(BodyRead kind) {
    switch (kind) {
      case BodyRead::kTooLarge: return "request body is larger than the server's limit";
      case BodyRead::kExtensions:
        return "chunk extensions and trailer fields are larger than the server's header limit";
      case BodyRead::kFraming:
        return "the chunked body's framing (chunk-size lines) is too large for its data; "
               "send larger chunks";
      case BodyRead::kLineTooLong: return "a chunk-size line or the trailer section is too long";
      default: return "malformed request body";
    }
  }

  // The most a connection's read buffer holds: enough for a whole head (which the parser
  // limits to max_header_bytes), and for one chunk-size line or one trailer section, which must
  // fit whole. Body bytes pass through it into the request.
  size_t ReadBufferLimit() const {
    return std::max<size_t>(options_.max_header_bytes + 1024, 64u << 10);
  }
  beast::flat_buffer MakeReadBuffer() const { return beast::flat_buffer(ReadBufferLimit()); }
  // How much one read may add to `buffer` (at least 1: a full buffer is refused before reading).
  static size_t ReadSize(const beast::flat_buffer& buffer) {
    return std::max<size_t>(
        1, std::min<size_t>(64u << 10,
                            buffer.max_size() - std::min(buffer.max_size(), buffer.size())));
  }
  // The bytes of a chunked body that are not data (size lines, CRLFs, extensions, trailers):
  // a fixed allowance plus an eighth of the body limit, so chunks of 64 bytes or more always
  // fit, and tiny chunks cannot make a request cost many times its body.
  size_t ChunkFramingLimit() const {
    return options_.max_header_bytes + options_.max_body_bytes / 8;
  }

  // Reads the body of the request whose head `parser` holds. Every byte after the head counts:
  // data against max_body_bytes, chunk extensions and trailer fields against max_header_bytes,
  // chunk framing in all against ChunkFramingLimit(), and nothing waits in `buffer` beyond its
  // maximum (ReadBufferLimit), so a client cannot make the server hold more than these limits
  // before its request is authorized.
  template <typename Stream>
  net::awaitable<BodyOutcome> ReadBody(Stream& stream, beast::flat_buffer& buffer,
                                       http::request_parser<http::string_body>& parser,
                                       size_t header_fields) {
    BodyOutcome out;
    size_t metadata = 0;  // extension bytes so far; trailer bytes are added at the end
    bool metadata_over = false;
    auto on_chunk_header = [&](std::uint64_t, beast::string_view extensions,
                               boost::system::error_code& ec) {
      metadata += extensions.size();
      if (metadata > options_.max_header_bytes) {
        metadata_over = true;
        ec = http::error::header_limit;
      }
    };
    parser.on_chunk_header(on_chunk_header);
    parser.eager(true);
    const size_t framing_limit = ChunkFramingLimit();
    size_t consumed = 0;
    boost::system::error_code& ec = out.ec;
    for (;;) {
      while (!parser.is_done() && buffer.size() > 0) {
        const size_t used = parser.put(buffer.data(), ec);
        buffer.consume(used);
        consumed += used;
        if (ec == http::error::need_more) {
          ec = {};
          break;
        }
        if (ec || used == 0) break;
      }
      if (metadata_over) {
        out.kind = BodyRead::kExtensions;
        co_return out;
      }
      if (ec == http::error::body_limit) {
        out.kind = BodyRead::kTooLarge;
        co_return out;
      }
      if (ec) {
        out.kind = BodyRead::kMalformed;
        co_return out;
      }
      if (consumed - std::min(consumed, parser.get().body().size()) > framing_limit) {
        out.kind = BodyRead::kFraming;
        co_return out;
      }
      if (parser.is_done()) break;
      if (buffer.size() >= buffer.max_size()) {
        out.kind = BodyRead::kLineTooLong;
        co_return out;
      }
      const size_t n = co_await stream.async_read_some(buffer.prepare(ReadSize(buffer)),
                                                       net::redirect_error(net::use_awaitable, ec));
      buffer.commit(n);
      if (ec == net::error::eof || ec == ssl::error::stream_truncated) {
        parser.put_eof(ec);
        if (!ec) ec = http::error::partial_message;
      }
      if (ec) {
        out.kind = BodyRead::kMalformed;
        co_return out;
      }
    }
    // Trailer fields (the parser adds them after the head's `header_fields`) count with the
    // extensions.
    size_t i = 0;
    for (const auto& field : parser.get()) {
      if (i++ < header_fields) continue;
      metadata += field.name_string().size() + field.value().size() + 4;
    }
    if (metadata > options_.max_header_bytes) out.kind = BodyRead::kExtensions;
    co_return out;
  }

  // Answers a request that passed a limit (413, 414, 431) with the JSON error, then drains and
  // closes the connection: what follows cannot be framed.
  template <typename Stream>
  net::awaitable<void> RefuseAndClose(Stream& stream, unsigned status, std::string message) {
    HttpResponse r = StreamService::ErrorResponse(Status::ResourceExhausted(std::move(message)));
    r.status = status;
    co_await Write(stream, std::move(r), false, false, "other", "-");
    co_await DiscardInput(stream);
  }

  // After an error response on a connection we are closing: stop sending, then read and discard
  // (bounded in bytes and time) what the client still sends, so closing does not reset the
  // connection before the client has read the response.
  // On TLS the discarding happens below TLS: the bytes are only drained, never decrypted.
  template <typename Stream>
  net::awaitable<void> DiscardInput(Stream& tls_or_plain) {
    beast::tcp_stream& stream = Tcp(tls_or_plain);
    boost::system::error_code ec;
    stream.socket().shutdown(tcp::socket::shutdown_send, ec);
    stream.expires_after(std::chrono::seconds(1));
    std::vector<char> scratch(64 * 1024);
    size_t total = 0;
    while (!ec && total < (16u << 20)) {
      total += co_await stream.async_read_some(net::buffer(scratch),
                                               net::redirect_error(net::use_awaitable, ec));
    }
  }

  // A plain connection: HTTP/2 when it opens with the h2c preface (and ServerOptions::http2),
  // else HTTP/1.1.
  net::awaitable<void> Session(beast::tcp_stream stream, beast::flat_buffer buffer,
                               [[maybe_unused]] SocketSlot slot) {
    if (options_.http2) {
      boost::system::error_code ec;
      stream.expires_after(std::chrono::milliseconds(options_.idle_timeout_ms));
      while (buffer.size() < kH2Preface.size() && MayBeH2Preface(buffer)) {
        const size_t n = co_await stream.async_read_some(
            buffer.prepare(ReadSize(buffer)), net::redirect_error(net::use_awaitable, ec));
        buffer.commit(n);
        if (ec) co_return;  // closed or idle before a request: nothing to answer
      }
      if (MayBeH2Preface(buffer)) {
        stream.expires_never();
        co_await ServeH2(std::make_shared<H2Conn>(stream.release_socket()), std::move(buffer));
        co_return;
      }
    }
    co_await Serve(stream, std::move(buffer));
  }

  // Serves requests on a connection; `buffer` holds bytes already read from it.
  template <typename Stream>
  net::awaitable<void> Serve(Stream& stream, beast::flat_buffer buffer) {
    metrics_.ConnectionOpened();
    PendingSse sse;
    PendingUpgrade upgrade;
    co_await ServeRequests(stream, std::move(buffer), &sse, &upgrade);
    if constexpr (std::is_same_v<Stream, beast::tcp_stream>) {
      if (upgrade.request) {
        static constexpr std::string_view kSwitching =
            "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n";
        boost::system::error_code ec;
        stream.expires_after(std::chrono::milliseconds(options_.request_timeout_ms));
        co_await net::async_write(stream, net::buffer(kSwitching.data(), kSwitching.size()),
                                  net::redirect_error(net::use_awaitable, ec));
        metrics_.ConnectionClosed();  // counted again as an HTTP/2 connection
        if (ec) co_return;
        stream.expires_never();
        co_await ServeH2(std::make_shared<H2Conn>(stream.release_socket()), std::move(upgrade.rest),
                         std::move(upgrade.request), std::move(upgrade.settings),
                         std::move(upgrade.target));
        co_return;
      }
    }
    if (sse.state) {
      // The request loop's frame, parser and read buffer are gone by now: a live SSE reader
      // keeps only this small frame and the response's own.
      co_await Sse(stream, std::move(*sse.state), sse.label, std::move(sse.path),
                   std::move(sse.authorization));
      in_flight_.fetch_sub(1);
    }
    co_await ShutdownSend(stream);
    metrics_.ConnectionClosed();
  }

  // A request Beast could not parse (a bad request line, header or chunk framing): answers 400
  // with the JSON error body, then the connection closes, as what follows cannot be framed. A
  // clean close between requests or a message cut off by the peer gets nothing: no one reads it.
  template <typename Stream>
  net::awaitable<void> RefuseMalformed(Stream& stream, const boost::system::error_code& ec) {
    if (ec.category() != http::make_error_code(http::error::bad_target).category() ||
        ec == http::error::end_of_stream || ec == http::error::partial_message) {
      co_return;
    }
    HttpResponse r = StreamService::ErrorResponse(
        Status::InvalidArgument("malformed HTTP request: " + ec.message()));
    co_await Write(stream, std::move(r), false, false, "other", "-");
    co_await DiscardInput(stream);
  }

  // Serves requests until the connection must close or a request turns into an SSE response,
  // which it leaves in *sse (still counted in flight) for the caller to serve.
  template <typename Stream>
  net::awaitable<void> ServeRequests(Stream& stream, beast::flat_buffer buffer, PendingSse* sse,
                                     PendingUpgrade* upgrade) {
    boost::system::error_code ec;
    for (;;) {
      http::request_parser<http::string_body> parser;
      parser.header_limit(static_cast<uint32_t>(options_.max_header_bytes));
      parser.body_limit(options_.max_body_bytes);
      // Between requests the connection may idle for idle_timeout_ms; once a request's first
      // byte is here, the whole request (its head too) must arrive within request_timeout_ms.
      if (buffer.size() == 0) {
        Tcp(stream).expires_after(std::chrono::milliseconds(options_.idle_timeout_ms));
        const size_t n = co_await stream.async_read_some(
            buffer.prepare(ReadSize(buffer)), net::redirect_error(net::use_awaitable, ec));
        buffer.commit(n);
        if (ec) break;  // a close or an idle connection between requests: nothing to answer
      }
      Tcp(stream).expires_after(std::chrono::milliseconds(options_.request_timeout_ms));
      co_await http::async_read_header(stream, buffer, parser,
                                       net::redirect_error(net::use_awaitable, ec));
      if (ec == http::error::header_limit || ec == http::error::buffer_overflow) {
        // The head did not fit. When it is the request line that did not (the parser has no
        // target yet, and the buffer starts with that line) and that line is longer than a URL
        // may be, say so (414) rather than blaming the header fields.
        const std::string_view head(static_cast<const char*>(buffer.data().data()), buffer.size());
        const bool long_url =
            parser.get().target().empty() &&
            head.substr(0, head.find("\r\n")).size() > options_.max_url_bytes + 32;
        co_await RefuseAndClose(
            stream, long_url ? 414 : 431,
            long_url ? "request URL is too long" : "request headers are too large");
        break;
      }
      if (ec == http::error::body_limit) {  // a Content-Length above the limit
        co_await RefuseAndClose(stream, 413, "request body is larger than the server's limit");
        break;
      }
      if (ec) {
        co_await RefuseMalformed(stream, ec);
        break;
      }
      if (parser.get().target().size() > options_.max_url_bytes) {
        co_await RefuseAndClose(stream, 414, "request URL is too long");
        break;
      }
      // Only the chunked transfer coding is understood. A body in another coding (gzip, ...)
      // would be stored undecoded: 501. Without chunked last, the body cannot be framed at all
      // (RFC 9112 6.3): 400. Either way the connection closes.
      if (const auto field = parser.get()[http::field::transfer_encoding];
          !field.empty() && !IsChunked({field.data(), field.size()})) {
        const std::string_view te(field.data(), field.size());
        const bool framed = IsChunked(te.substr(te.rfind(',') + 1));
        HttpResponse r = StreamService::ErrorResponse(
            Status::InvalidArgument(framed ? "transfer coding '" + std::string(te) +
                                                 "' is not supported; send the body "
                                                 "chunked only"
                                           : "Transfer-Encoding must end with chunked"));
        r.status = framed ? 501 : 400;
        co_await Write(stream, std::move(r), false, false, "other", "-");
        co_await DiscardInput(stream);
        break;
      }
      if (auto length = parser.content_length(); length && *length > options_.max_body_bytes) {
        co_await RefuseAndClose(stream, 413, "request body is larger than the server's limit");
        break;
      }
      if (beast::iequals(parser.get()[http::field::expect], "100-continue")) {
        static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
        co_await net::async_write(stream, net::buffer(kContinue.data(), kContinue.size()),
                                  net::redirect_error(net::use_awaitable, ec));
        if (ec) break;
      }
      // Fields after this many are trailer fields of a chunked body: counted, never merged
      // into the request's headers.
      const size_t header_fields =
          static_cast<size_t>(std::distance(parser.get().begin(), parser.get().end()));
      const BodyOutcome body = co_await ReadBody(stream, buffer, parser, header_fields);
      if (body.kind == BodyRead::kMalformed) {
        co_await RefuseMalformed(stream, body.ec);
        break;
      }
      if (body.kind != BodyRead::kOk) {
        co_await RefuseAndClose(stream, body.kind == BodyRead::kTooLarge ? 413 : 431,
                                BodyReadMessage(body.kind));
        break;
      }
      auto& req = parser.get();
      const bool keep_alive = req.keep_alive() && !stopping_.load();
      HttpRequest request;
      request.method = std::string(req.method_string());
      std::string_view target(req.target().data(), req.target().size());
      // RFC 9112 3.2: an HTTP/1.1 request carries exactly one Host; a server must accept the
      // absolute form of a target ("http://host/path") and then use its authority as the host.
      std::string_view authority;
      const std::optional<std::string> origin_form = OriginFormOf(target, &authority);
      const bool absolute_form = origin_form.has_value();
      if (absolute_form) target = *origin_form;
      size_t hosts = 0;
      {
        size_t i = 0;
        for (const auto& field : req) {
          if (i++ == header_fields) break;
          hosts += field.name() == http::field::host ? 1 : 0;
        }
      }
      const bool bad_host = hosts > 1 || (hosts == 0 && req.version() >= 11 && !absolute_form);
      size_t question = target.find('?');
      auto path = PercentDecode(target.substr(0, question), false);
      bool bad = !path;
      if (path) request.path = std::move(*path);
      if (question != std::string_view::npos &&
          !ParseQuery(target.substr(question + 1), &request.query)) {
        bad = true;
      }
      // Names (streams, tenants, channels, groups) are text: they reach JSON answers, listings
      // and subscription state, where bytes that are not UTF-8 would be altered or refused.
      bool not_utf8 = !bad && !IsValidUtf8(request.path);
      for (const auto& [key, value] : request.query) {
        not_utf8 = not_utf8 || !IsValidUtf8(key) || !IsValidUtf8(value);
      }
      size_t field_index = 0;
      for (const auto& field : req) {
        if (field_index++ == header_fields) break;
        std::string name(field.name_string());
        for (char& c : name) c = (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
        std::string value(field.value());
        auto [it, inserted] = request.headers.emplace(std::move(name), value);
        if (!inserted) it->second += ", " + value;
      }
      if (absolute_form) request.headers["host"] = std::string(authority);
      request.body = std::move(req.body());
      metrics_.AddBytesIn(request.body.size());
      bool keep = false;
      AccessScope access(options_.access_log.get(), &stream, request.method,
                         std::string_view(req.target().data(), req.target().size()));
      in_flight_.fetch_add(1);
      if (bad_host) {  // answered, then the connection closes
        co_await Write(stream,
                       StreamService::ErrorResponse(Status::InvalidArgument(
                           hosts == 0 ? "an HTTP/1.1 request needs a Host header"
                                      : "a request may carry only one Host header")),
                       false, false, "other", request.method);
      } else if (bad || not_utf8) {
        keep = co_await Write(
            stream,
            StreamService::ErrorResponse(Status::InvalidArgument(
                bad ? "malformed percent-encoding in URL"
                    : "the URL's path and query must be UTF-8 once percent-decoded")),
            keep_alive, false, "other", request.method);
      } else {
        if constexpr (std::is_same_v<Stream, beast::tcp_stream>) {
          // `Upgrade: h2c` with its HTTP2-Settings: the request is answered on stream 1 of
          // the HTTP/2 connection this one turns into (Serve). One whose settings do not
          // decode is served as HTTP/1.1.
          if (options_.http2 && WantsH2cUpgrade(request)) {
            if (auto settings = Base64UrlDecode(*request.Header("http2-settings"))) {
              upgrade->settings = std::move(*settings);
              upgrade->target = std::string(req.target());
              upgrade->request = std::move(request);
              upgrade->rest = std::move(buffer);
              in_flight_.fetch_sub(1);
              co_return;
            }
          }
        }
        keep = co_await Dispatch(stream, std::move(request), keep_alive, sse);
        if (sse->state) {
          sse->access = std::move(access);
          co_return;
        }
      }
      in_flight_.fetch_sub(1);
      if (!keep || !keep_alive) break;
    }
  }

  // ---------------------------------------------------------------------------------------
  // HTTP/2 (h2c with prior knowledge on the plain port). Each stream's request runs through
  // Dispatch like an HTTP/1.1 request; answers go out through the session (H2Session), whose
  // flow control decides when their bytes leave.

  // The most bytes of an SSE response queued for a stream whose peer has not opened its
  // window for them: beyond it, the reader reads no further records until the peer takes some.
  static constexpr size_t kH2SseQueueLimit = 256u << 10;

  H2Limits MakeH2Limits() const {
    H2Limits limits;
    limits.max_concurrent_streams = options_.http2_max_streams;
    limits.max_header_bytes = options_.max_header_bytes;
    limits.max_url_bytes = options_.max_url_bytes;
    limits.max_body_bytes = options_.max_body_bytes;
    limits.max_connection_body_bytes = options_.max_body_bytes;
    return limits;
  }

  // Writes a whole answer on an HTTP/2 stream (the HTTP/2 form of Write above): the same
  // fields, no connection-specific ones, Content-Length as HTTP/1.1 would send it.
  net::awaitable<bool> Write(H2Stream& stream, HttpResponse response, bool /*keep_alive*/,
                             bool head, std::string_view route, std::string_view method) {
    head = head || method == "HEAD";
    const bool no_body = response.status == 204 || response.status == 304;
    StreamService::AddCommonHeaders(&response);
    if (!no_body && !(head && response.length_unknown)) {
      response.Set("Content-Length", std::to_string(response.body.size()));
    }
    std::string body = head || no_body ? std::string() : std::move(response.body);
    metrics_.AddBytesOut(body.size());
    metrics_.CountRequest(route, method, response.status);
    metrics_.CountHttp2Request();
    if (options_.access_log) AccessScope::Record(&stream, response.status, body.size());
    if (!stream.conn->closed) {
      stream.conn->session->Respond(stream.id, response.status, response.headers, std::move(body),
                                    /*streaming=*/false);
      stream.conn->Release(stream.id);  // the queued answer counts from now on
      stream.conn->Kick();
    }
    co_return false;
  }

  // SSE on an HTTP/2 stream: as Sse above, with each event appended to the stream's queue, and
  // no further read while kH2SseQueueLimit bytes wait for the peer's window (a reader that
  // takes none for request_timeout_ms is reset). A reset stream ends it at once.
  net::awaitable<void> H2Sse(H2Stream& stream, ReadState state, std::string_view label,
                             std::string path, std::optional<std::string> authorization) {
    std::shared_ptr<H2Conn> conn = stream.conn;
    HttpResponse head = service_.SseHeaders(state);
    StreamService::AddCommonHeaders(&head);
    if (conn->closed || !conn->session->Respond(stream.id, 200, head.headers, std::string(),
                                                /*streaming=*/true)) {
      co_return;
    }
    conn->Kick();
    metrics_.CountRequest(label, "GET", 200);
    metrics_.CountHttp2Request();
    if (options_.access_log) AccessScope::Record(&stream, 200, 0);
    auto waker = NewWaker(stream.get_executor());
    waker->sse = options_.access != nullptr;
    BeginLiveWait(stream, waker);
    StreamService* service = &service_;
    const ReadState* at = &state;
    Result<Subscription> subscription = co_await WatchFrom(state, waker);
    const std::function<SseStep()> read = [service, at] { return service->ReadSse(*at); };
    metrics_.LiveReaderStarted();
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(options_.sse_max_duration_ms);
    net::steady_timer drain(stream.get_executor());
    bool first = true;
    bool reset = false;
    auto gone = [&] { return waker->hung_up || conn->closed; };
    for (;;) {
      if (gone() || waker->stopped) break;
      if (conn->session->Queued(stream.id) > kH2SseQueueLimit) {
        const auto give_up = std::chrono::steady_clock::now() +
                             std::chrono::milliseconds(options_.request_timeout_ms);
        while (!gone() && !waker->stopped && conn->session->Queued(stream.id) > kH2SseQueueLimit &&
               std::chrono::steady_clock::now() < give_up) {
          drain.expires_after(std::chrono::milliseconds(10));
          boost::system::error_code ec;
          co_await drain.async_wait(net::redirect_error(net::use_awaitable, ec));
        }
        if (gone() || waker->stopped) break;
        if (conn->session->Queued(stream.id) > kH2SseQueueLimit) {
          reset = true;
          break;
        }
      }
      if (!co_await ReserveAnswer(stream, /*read=*/true)) {
        reset = !gone();
        break;
      }
      SseStep step = co_await StoreCall(read);
      conn->Release(stream.id);  // what the step appends counts as queued
      if (gone()) break;
      if (step.gone) {
        if (!step.error.ok()) conn->session->Append(stream.id, StreamService::SseError(step.error));
        break;
      }
      if (first || step.data || step.closed) {
        std::string event = step.data ? *step.data : std::string();
        event += service_.SseControl(state, step);
        metrics_.AddBytesOut(event.size());
        if (options_.access_log) AccessScope::Record(&stream, 0, event.size());
        if (!conn->session->Append(stream.id, event)) break;
        conn->Kick();
        first = false;
        state.position = step.next;
      }
      if (step.closed) break;
      if (!step.up_to_date) continue;
      if (!subscription.ok()) break;
      const bool hinted = co_await WaitForHint(*waker, deadline);
      if (!hinted) break;
      if (waker->recheck) {
        waker->recheck = false;
        if (!StillAdmitted(path, authorization)) break;
      }
    }
    EndLiveWait(stream, *waker);
    metrics_.LiveReaderEnded();
    if (gone()) co_return;
    if (reset) {
      conn->session->Reset(stream.id, /*CANCEL*/ 0x8);
    } else {
      conn->session->End(stream.id);
    }
    conn->Kick();
  }

  // Fills a request's path and query from an HTTP/2 :path; an error message when it is
  // malformed or not UTF-8.
  static std::optional<std::string> FillTarget(std::string_view target, HttpRequest* request) {
    const size_t question = target.find('?');
    auto path = PercentDecode(target.substr(0, question), false);
    if (!path || (question != std::string_view::npos &&
                  !ParseQuery(target.substr(question + 1), &request->query))) {
      return "malformed percent-encoding in URL";
    }
    request->path = std::move(*path);
    bool utf8 = IsValidUtf8(request->path);
    for (const auto& [key, value] : request->query) {
      utf8 = utf8 && IsValidUtf8(key) && IsValidUtf8(value);
    }
    if (!utf8) return "the URL's path and query must be UTF-8 once percent-decoded";
    if (request->path.empty() || request->path[0] != '/') return "the :path must start with '/'";
    return std::nullopt;
  }

  // One request on an HTTP/2 stream, through the same handling as on HTTP/1.1.
  net::awaitable<void> H2Handle(std::shared_ptr<H2Conn> conn, H2Request in) {
    H2Stream stream{conn, in.stream_id};
    // The stream's access log line, written once its answer (or SSE response) is done.
    AccessScope access(options_.access_log.get(), &stream, conn->busy ? "-" : in.method, in.target,
                       "HTTP/2");
    in_flight_.fetch_add(1);
    if (conn->busy) {
      HttpResponse r =
          StreamService::ErrorResponse(Status::ResourceExhausted("too many connections"));
      r.status = 503;
      r.Set("Retry-After", "1");
      co_await Write(stream, std::move(r), false, false, "other", "-");
      if (!conn->shutting_down) {
        conn->shutting_down = true;
        metrics_.CountRefusedConnection(/*answered=*/true);
        conn->session->Shutdown();
        conn->Kick();
      }
    } else if (in.refuse_status != 0) {
      HttpResponse r =
          StreamService::ErrorResponse(Status::ResourceExhausted(std::move(in.refuse_message)));
      r.status = in.refuse_status;
      if (r.status == 503) r.Set("Retry-After", "1");
      co_await Write(stream, std::move(r), false, false, "other", in.method);
    } else {
      HttpRequest request;
      request.method = std::move(in.method);
      request.headers = std::move(in.headers);
      // :authority stands for Host (RFC 9113 8.3.1).
      if (!in.authority.empty()) request.headers.emplace("host", std::move(in.authority));
      request.body = std::move(in.body);
      metrics_.AddBytesIn(request.body.size());
      if (auto bad = FillTarget(in.target, &request)) {
        co_await Write(stream, StreamService::ErrorResponse(Status::InvalidArgument(*bad)), false,
                       false, "other", request.method);
      } else if (!co_await ReserveAnswer(stream, request.method == "GET")) {
        // No room in the connection's answer budget within request_timeout_ms: refused
        // unprocessed (REFUSED_STREAM), so the client may retry it.
        if (!conn->closed) {
          conn->session->Reset(stream.id, /*REFUSED_STREAM*/ 0x7);
          conn->Kick();
        }
      } else {
        co_await H2Run(stream, std::move(request));
      }
    }
    conn->Release(stream.id);
    in_flight_.fetch_sub(1);
  }

  // A parsed request on an HTTP/2 stream: Dispatch, then SSE when it turned into that.
  net::awaitable<void> H2Run(H2Stream& stream, HttpRequest request) {
    PendingSse sse;
    co_await Dispatch(stream, std::move(request), true, &sse);
    if (sse.state) {
      co_await H2Sse(stream, std::move(*sse.state), sse.label, std::move(sse.path),
                     std::move(sse.authorization));
    }
  }

  // The request that upgraded an HTTP/1.1 connection, answered on stream 1.
  net::awaitable<void> H2HandleUpgraded(std::shared_ptr<H2Conn> conn, HttpRequest request,
                                        std::string target) {
    H2Stream stream{conn, 1};
    AccessScope access(options_.access_log.get(), &stream, request.method, target, "HTTP/2");
    in_flight_.fetch_add(1);
    if (co_await ReserveAnswer(stream, request.method == "GET")) {
      co_await H2Run(stream, std::move(request));
    }
    conn->Release(stream.id);
    in_flight_.fetch_sub(1);
  }

  // Writes what the session has ready, waiting on the connection's signal in between; ends the
  // connection when the session is done or a write fails.
  static net::awaitable<void> H2Writer(std::shared_ptr<H2Conn> conn) {
    std::string out;
    boost::system::error_code ec;
    while (!conn->closed) {
      out.clear();
      conn->session->Collect(&out);
      if (out.empty()) {
        if (!conn->session->Alive()) break;
        conn->writer_waiting = true;
        conn->signal.expires_at(std::chrono::steady_clock::time_point::max());
        co_await conn->signal.async_wait(net::redirect_error(net::use_awaitable, ec));
        conn->writer_waiting = false;
        continue;
      }
      conn->RoomMayHaveFreed();  // what Collect took left the queues
      conn->writing = true;
      conn->write_started = std::chrono::steady_clock::now();
      co_await conn->WriteAll(net::buffer(out), ec);
      conn->writing = false;
      if (ec) break;
    }
    conn->Close();
  }

  // Once a second: closes a connection idle for idle_timeout_ms with no stream open, one with a
  // request or a write not finished within request_timeout_ms, and starts a graceful shutdown
  // (GOAWAY) when the server stops.
  net::awaitable<void> H2Watchdog(std::shared_ptr<H2Conn> conn) {
    net::steady_timer timer(conn->executor());
    boost::system::error_code ec;
    while (!conn->closed) {
      timer.expires_after(std::chrono::seconds(1));
      co_await timer.async_wait(net::redirect_error(net::use_awaitable, ec));
      if (conn->closed) break;
      const auto now = std::chrono::steady_clock::now();
      if (conn->busy && now - conn->opened > kRejectWriteTimeout) {
        conn->Close();
        break;
      }
      // As on HTTP/1.1, a request (or a write) slower than request_timeout_ms ends the
      // connection.
      if (conn->session->RequestOverdue(std::chrono::milliseconds(options_.request_timeout_ms),
                                        now) ||
          (conn->writing &&
           now - conn->write_started > std::chrono::milliseconds(options_.request_timeout_ms))) {
        conn->Close();
        break;
      }
      if (conn->session->OpenStreams() == 0 &&
          now - conn->last_activity > std::chrono::milliseconds(options_.idle_timeout_ms)) {
        conn->Close();
        break;
      }
      if (stopping_.load() && !conn->shutting_down) {
        conn->shutting_down = true;
        conn->session->Shutdown();
        conn->Kick();
      }
    }
  }

  // Serves an HTTP/2 connection whose first bytes (of the preface, at least) are in `buffer`.
  // `upgraded`: the HTTP/1.1 request that asked for `Upgrade: h2c`, with its decoded
  // HTTP2-Settings in `settings` and its target as sent in `upgraded_target`.
  net::awaitable<void> ServeH2(std::shared_ptr<H2Conn> conn, beast::flat_buffer buffer,
                               std::optional<HttpRequest> upgraded = std::nullopt,
                               std::string settings = std::string(),
                               std::string upgraded_target = std::string()) {
    metrics_.ConnectionOpened();
    metrics_.Http2ConnectionOpened();
    std::weak_ptr<H2Conn> weak = conn;
    H2Conn* raw = conn.get();
    H2Session::Callbacks callbacks;
    callbacks.on_request = [this, weak](H2Request request) {
      auto c = weak.lock();
      if (!c) return;
      // Posted: the session is inside a call that must return before the handler uses it.
      auto ex = c->executor();
      net::post(ex, [this, c, request = std::move(request)]() mutable {
        net::co_spawn(c->executor(), H2Handle(c, std::move(request)), net::detached);
      });
    };
    callbacks.on_stream_closed = [raw](int32_t id) {
      raw->HangUp(id);
      raw->RoomMayHaveFreed();  // its queue is gone
    };
    conn->session.emplace(MakeH2Limits(), std::move(callbacks));
    auto ex = conn->executor();
    if (upgraded) {
      if (!conn->session->Upgrade(settings, upgraded->method == "HEAD")) {
        conn->Close();
        metrics_.Http2ConnectionClosed();
        metrics_.ConnectionClosed();
        co_return;
      }
      net::co_spawn(ex, H2HandleUpgraded(conn, std::move(*upgraded), std::move(upgraded_target)),
                    net::detached);
    }
    net::co_spawn(ex, H2Writer(conn), net::detached);
    net::co_spawn(ex, H2Watchdog(conn), net::detached);
    std::string_view pending(static_cast<const char*>(buffer.data().data()), buffer.size());
    std::vector<char> scratch(64u << 10);
    boost::system::error_code ec;
    while (!conn->closed) {
      const bool ok = conn->session->Receive(pending);
      conn->Kick();
      if (!ok || !conn->session->Alive()) break;  // the writer sends what is left, then closes
      const size_t n = co_await conn->ReadSome(net::buffer(scratch), ec);
      if (ec) {
        conn->Close();
        break;
      }
      conn->last_activity = std::chrono::steady_clock::now();
      pending = std::string_view(scratch.data(), n);
    }
    metrics_.Http2ConnectionClosed();
    metrics_.ConnectionClosed();
  }

  ServerOptions options_;
  std::unique_ptr<ssl::context> tls_;  // null for plain HTTP
  // One io_context per io thread, each run by that thread alone: a connection lives on one of
  // them, so its state is touched by one thread, with no strand and no hand-offs between io
  // threads. The first also runs the acceptor, signals and shutdown.
  std::vector<std::unique_ptr<net::io_context>> iocs_;
  std::vector<std::unique_ptr<WakeQueue>> wake_queues_;  // one per io_context, same order
  size_t next_ioc_ = 0;                                  // accept loop only
  tcp::acceptor acceptor_;
  int spare_fd_ = -1;  // accept loop only (after Listen): see AnswerBusyOnSpare
  // The connection cap, and the accepted sockets counted against it: connections being served
  // (TLS handshakes included) and connections being refused (ServerOptions::reject_slots).
  std::atomic<size_t> max_connections_{0};
  std::atomic<size_t> serving_{0};
  std::atomic<size_t> rejecting_{0};
  // Store calls of stream requests run on catalog_workers_, never on the io threads
  // (ServerOptions::offload_store_calls).
  const bool offload_;
  uint16_t port_ = 0;
  Metrics metrics_;
  StreamService service_;
  ChannelService channels_;
  GroupService groups_;
  // Catalog writes (create, retention change, delete) block until durable; they run here.
  // Declared after the services so it is destroyed (finishing queued jobs) before them.
  WorkerPool catalog_workers_;
  std::unique_ptr<TenantQuota> quota_;  // null without quotas
  std::atomic<bool> stopping_{false};
  std::atomic<int64_t> in_flight_{0};
  Mutex live_mu_;
  std::vector<std::weak_ptr<Waker>> live_ RUNNEL_GUARDED_BY(live_mu_);
  size_t live_after_sweep_ RUNNEL_GUARDED_BY(live_mu_) = 0;
};

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
