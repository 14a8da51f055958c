// The HTTP edge's shared declarations: HttpServer::Impl, whose member functions are spread
// over the http_*.cc files by concern, and what they share. Only those files include it (it
// pulls in Beast, which is slow to compile).
//
//   http_server.cc    construction, io threads, Run/Stop and the drain, access rechecks
//   http_listener.cc  bind and accept loop, connection cap and refusals, the spare descriptor,
//                     the TLS handshake and the protocol it chose
//   http_session.cc   one HTTP/1.1 connection: read a request within the limits, write answers,
//                     close; the h2c preface and `Upgrade: h2c` hand-offs
//   http_dispatch.cc  one request, any protocol: admission, quotas, then the route's service
//   http_live.cc      long-polls and SSE: wake-ups, waiting for records, writing live responses
//   http_h2.cc        HTTP/2 connections: streams, their answers, SSE and the answer budget
//
// Everything a connection touches runs on its io thread (http_server.h); the templates over
// `Stream` are instantiated, in the file that defines them, for beast::tcp_stream (plain),
// TlsStream and, where HTTP/2 requests go through them too, H2Stream.
#ifndef RUNNEL_SERVER_HTTP_INTERNAL_H_
#define RUNNEL_SERVER_HTTP_INTERNAL_H_

#include "server/http_net.h"  // first: Boost 1.74 needs <utility> before awaitable.hpp

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/mutex.h"
#include "server/access_log.h"
#include "server/await_call.h"
#include "server/channel_service.h"
#include "server/group_service.h"
#include "server/h2_connection.h"
#include "server/h2_session.h"
#include "server/http_server.h"
#include "server/live_waker.h"
#include "server/metrics.h"
#include "server/stream_service.h"
#include "server/tenant_quota.h"
#include "server/worker_pool.h"

namespace runnel::server {

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

class HttpServer::Impl {
 public:
  // http_server.cc: construction and lifecycle.
  Impl(StreamRegistry registry, const ServerOptions& options, std::unique_ptr<ssl::context> tls);
  ~Impl();
  void SetMaxConnections(size_t n);
  uint16_t port() const { return port_; }
  void Run();
  void Stop();
  // Binds and listens (HttpServer::Start); in http_listener.cc.
  Status Listen();

 private:
  static std::vector<std::unique_ptr<net::io_context>> MakeIoContexts(size_t threads);
  static std::vector<std::unique_ptr<WakeQueue>> MakeWakeQueues(
      const std::vector<std::unique_ptr<net::io_context>>& iocs, Impl* impl);
  static StreamServiceOptions WithBlockingPool(StreamServiceOptions options, WorkerPool* blocking,
                                               bool offload);
  // The blocking pool's threads: the most any of its users was given (catalog_threads,
  // channel_threads, group_threads), so none has fewer than it asked for.
  static size_t BlockingThreads(const ServerOptions& options) {
    return std::max(
        {options.catalog_threads, options.channel_threads, options.group_threads, size_t{1}});
  }
  net::awaitable<void> WatchAccess();
  bool StillAdmitted(const std::string& path, const std::optional<std::string>& authorization);
  net::awaitable<void> Drain();

  // ---------------------------------------------------------------------------------------
  // http_listener.cc: accepting connections, refusing those beyond the cap, TLS.

  // The most time a connection beyond the cap is held to write its 503 (RejectBusy; an HTTP/2
  // one, H2Watchdog).
  static constexpr std::chrono::seconds kRejectWriteTimeout{1};
  net::awaitable<void> Accept();
  bool AnswerBusyOnSpare();
  net::awaitable<void> TlsSession(beast::tcp_stream tcp, bool busy, SocketSlot slot);
  net::awaitable<void> ShutdownSend(beast::tcp_stream& stream);
  net::awaitable<void> ShutdownSend(TlsStream& stream);
  net::awaitable<void> RejectBusy(tcp::socket socket, SocketSlot slot);

  // ---------------------------------------------------------------------------------------
  // http_session.cc: one HTTP/1.1 connection.

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

  // An HTTP/1.1 request that asked to continue as HTTP/2 (`Upgrade: h2c`), which ServeRequests
  // leaves to Serve with what was read after it.
  struct PendingUpgrade {
    std::optional<HttpRequest> request;
    std::string settings;  // the decoded HTTP2-Settings payload
    std::string target;    // as sent, for the access log
    beast::flat_buffer rest;
  };

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

  template <typename Stream>
  net::awaitable<bool> Write(Stream& stream, HttpResponse response, bool keep_alive, bool head,
                             std::string_view route, std::string_view method);
  static bool WantsH2cUpgrade(const HttpRequest& request);
  static std::string BodyReadMessage(BodyRead kind);
  template <typename Stream>
  net::awaitable<BodyOutcome> ReadBody(Stream& stream, beast::flat_buffer& buffer,
                                       http::request_parser<http::string_body>& parser,
                                       size_t header_fields);
  template <typename Stream>
  net::awaitable<void> RefuseAndClose(Stream& stream, unsigned status, std::string message);
  template <typename Stream>
  net::awaitable<void> DiscardInput(Stream& tls_or_plain);
  net::awaitable<void> Session(beast::tcp_stream stream, beast::flat_buffer buffer,
                               SocketSlot slot);
  template <typename Stream>
  net::awaitable<void> Serve(Stream& stream, beast::flat_buffer buffer);
  template <typename Stream>
  net::awaitable<void> RefuseMalformed(Stream& stream, const boost::system::error_code& ec);
  template <typename Stream>
  net::awaitable<void> ServeRequests(Stream& stream, beast::flat_buffer buffer, PendingSse* sse,
                                     PendingUpgrade* upgrade);
  // The idle timeout of a plain connection between requests, without a timer armed and
  // cancelled around every read (which beast::tcp_stream does, at the cost of a scheduler
  // round per request): the connection notes its deadline as it starts to wait, and one timer
  // wait, re-armed only when it fires early, cancels the read once the deadline has passed.
  // Touched only on the connection's io thread.
  struct IdleWatch {
    explicit IdleWatch(const net::any_io_executor& ex) : timer(ex) {}
    net::steady_timer timer;
    std::chrono::steady_clock::time_point deadline;
    tcp::socket* waiting = nullptr;  // set while the connection waits for a request
    bool armed = false;              // a wait on `timer` is pending
    bool closed = false;             // the connection is done; nothing to watch
  };
  static void WatchIdle(const std::shared_ptr<IdleWatch>& watch);
  // ServeRequests' steps.
  template <typename Stream>
  net::awaitable<void> ParseHead(Stream& stream, beast::flat_buffer& buffer,
                                 http::request_parser<http::string_body>& parser,
                                 boost::system::error_code& ec);
  template <typename Stream>
  net::awaitable<bool> ReadHead(Stream& stream, beast::flat_buffer& buffer,
                                http::request_parser<http::string_body>& parser, IdleWatch* idle);
  // What makes a parsed request unanswerable (ToHttpRequest): `hosts` Host fields where one
  // is needed, a malformed percent-encoding (`bad`), or a path or query that is not UTF-8.
  struct RequestFaults {
    size_t hosts = 0;
    bool bad_host = false;
    bool bad = false;
    bool not_utf8 = false;
  };
  static RequestFaults ToHttpRequest(http::request<http::string_body>& req, size_t header_fields,
                                     HttpRequest* request);

  // ---------------------------------------------------------------------------------------
  // Store and service calls from a connection's coroutine, which resume on its io thread.

  // A stream request's store calls: on the blocking pool when they may block (offload_),
  // else right here (server/await_call.h). GCC 12 mishandles temporaries that live across a
  // co_await, and lambda captures of coroutine parameters: callers pass a named std::function
  // whose captures are pointers.
  template <typename T>
  net::awaitable<T> StoreCall(const std::function<T()>& fn) {
    if (!offload_) co_return fn();
    co_return co_await AwaitOnPool<T>(&service_.options().blocking_executor, &fn);
  }
  // The start of a GET: the reader's state, or the whole response (an error, or a catch-up
  // read that is complete in one response) with no state.
  struct ReadStart {
    std::optional<ReadState> state;
    HttpResponse response;
  };

  // ---------------------------------------------------------------------------------------
  // http_dispatch.cc: one request, whatever its protocol.

  template <typename Stream>
  net::awaitable<bool> Dispatch(Stream& stream, HttpRequest request, bool keep_alive,
                                PendingSse* sse);
  // Dispatch's steps (http_dispatch.cc).
  net::awaitable<std::optional<HttpResponse>> CheckQuota(const Route& route,
                                                         const HttpRequest& request,
                                                         TenantQuota::CreateHold* hold);
  template <typename Stream>
  net::awaitable<bool> DispatchSubscription(Stream& stream, const Route& route,
                                            const HttpRequest& request, bool keep_alive);
  template <typename Stream>
  net::awaitable<bool> DispatchGroup(Stream& stream, Principal principal, HttpRequest request,
                                     const std::string& method, bool keep_alive, PendingSse* sse);
  template <typename Stream>
  net::awaitable<bool> DispatchService(Stream& stream, const Route& route, HttpRequest request,
                                       const std::string& method, bool keep_alive);
  template <typename Stream>
  net::awaitable<bool> DispatchStream(Stream& stream, const Route& route, HttpRequest request,
                                      const std::string& method, bool keep_alive, PendingSse* sse);
  template <typename Stream>
  net::awaitable<bool> DispatchRead(Stream& stream, const Route& route, HttpRequest request,
                                    bool keep_alive, PendingSse* sse);

  // ---------------------------------------------------------------------------------------
  // http_live.cc: long-polls and SSE.

  std::shared_ptr<Waker> NewWaker(const net::any_io_executor& ex);
  static std::function<void()> HintFor(const std::shared_ptr<Waker>& waker);
  void Wake(Waker& waker, DeliveryMemo& memo);
  bool DeliverParked(SseParked& parked, DeliveryMemo& memo);
  static net::awaitable<bool> WaitForHint(Waker& waker,
                                          std::chrono::steady_clock::time_point deadline);
  net::awaitable<Result<Subscription>> WatchFrom(const ReadState& state,
                                                 const std::shared_ptr<Waker>& waker);
  template <typename Stream>
  net::awaitable<ReadChunk> WaitForRecords(
      Stream& stream, const ReadState& state,
      std::optional<std::chrono::steady_clock::time_point> until = std::nullopt);
  template <typename Stream>
  static void BeginLiveWait(Stream& stream, const std::shared_ptr<Waker>& waker);
  template <typename Stream>
  static void EndLiveWait(Stream& stream, Waker& waker);
  static void BeginLiveWait(H2Stream& stream, const std::shared_ptr<Waker>& waker);
  static void EndLiveWait(H2Stream& stream, Waker&);
  template <typename Stream>
  net::awaitable<bool> LongPoll(Stream& stream, ReadState state, bool keep_alive);
  template <typename Stream>
  net::awaitable<bool> GroupLongPoll(Stream& stream, Principal principal,
                                     std::shared_ptr<const HttpRequest> request, ReadState state,
                                     bool keep_alive);
  template <typename Stream>
  net::awaitable<bool> WriteSseHead(Stream& stream, const ReadState& state);
  template <typename Stream>
  net::awaitable<void> Sse(Stream& stream, ReadState state, std::string_view label,
                           std::string path, std::optional<std::string> authorization);

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

  // ---------------------------------------------------------------------------------------
  // http_h2.cc: HTTP/2 (h2c with prior knowledge on the plain port). Each stream's request runs
  // through Dispatch like an HTTP/1.1 request; answers go out through the session (H2Session),
  // whose flow control decides when their bytes leave.
  net::awaitable<bool> ReserveAnswer(H2Stream& stream, bool read);
  H2Limits MakeH2Limits() const;
  net::awaitable<bool> Write(H2Stream& stream, HttpResponse response, bool /*keep_alive*/,
                             bool head, std::string_view route, std::string_view method);
  net::awaitable<void> H2Sse(H2Stream& stream, ReadState state, std::string_view label,
                             std::string path, std::optional<std::string> authorization);
  static std::optional<std::string> FillTarget(std::string_view target, HttpRequest* request);
  net::awaitable<void> H2Handle(std::shared_ptr<H2Conn> conn, H2Request in);
  net::awaitable<void> H2Run(H2Stream& stream, HttpRequest request);
  net::awaitable<void> H2HandleUpgraded(std::shared_ptr<H2Conn> conn, HttpRequest request,
                                        std::string target);
  static net::awaitable<void> H2Writer(std::shared_ptr<H2Conn> conn);
  net::awaitable<void> H2Watchdog(std::shared_ptr<H2Conn> conn);
  net::awaitable<void> ServeH2(std::shared_ptr<H2Conn> conn, beast::flat_buffer buffer,
                               std::optional<HttpRequest> upgraded = std::nullopt,
                               std::string settings = std::string(),
                               std::string upgraded_target = std::string());

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
  // Store calls of stream requests run on blocking_workers_, never on the io threads
  // (ServerOptions::offload_store_calls).
  const bool offload_;
  uint16_t port_ = 0;
  Metrics metrics_;
  StreamService service_;
  ChannelService channels_;
  GroupService groups_;
  // The one pool for calls that block on the store: catalog writes (create, retention change,
  // delete), which wait until durable, stream requests' store calls when offloaded, channel
  // and group requests. Sized by BlockingThreads. Declared after the services so it is
  // destroyed (finishing queued jobs) before them.
  WorkerPool blocking_workers_;
  std::unique_ptr<TenantQuota> quota_;  // null without quotas
  std::atomic<bool> stopping_{false};
  std::atomic<int64_t> in_flight_{0};
  Mutex live_mu_;
  std::vector<std::weak_ptr<Waker>> live_ RUNNEL_GUARDED_BY(live_mu_);
  size_t live_after_sweep_ RUNNEL_GUARDED_BY(live_mu_) = 0;
};

}  // namespace runnel::server

#endif  // RUNNEL_SERVER_HTTP_INTERNAL_H_
