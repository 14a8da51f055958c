// HTTP/2 on the HTTP edge: h2c on the plain port (by prior knowledge or `Upgrade: h2c`) and h2
// chosen by ALPN on the TLS port. Each stream's request runs through Dispatch like an HTTP/1.1
// request; answers go out through the connection's H2Session (h2_connection.h), whose flow
// control decides when their bytes leave, within the connection's answer budget.
#include "server/http_internal.h"

#include <vector>

#include "base/utf8.h"

namespace runnel::server {

namespace {

// The most bytes of an HTTP/2 stream's answer that one reservation counts besides a read's
// records: its head and framing (ReserveAnswer).
constexpr size_t kH2SmallAnswer = 64u << 10;

// The most bytes of an SSE response queued for a stream whose peer has not opened its
// window for them: beyond it, the reader reads no further records until the peer takes some.
constexpr size_t kH2SseQueueLimit = 256u << 10;

}  // namespace

// The connection's answer budget (ServerOptions::http2_connection_buffer): before an HTTP/2
// stream produces an answer it reserves room for it (a read the largest answer a read makes,
// max_read_bytes, plus kH2SmallAnswer for its head and framing; anything else
// kH2SmallAnswer), waiting while the connection's queued answers and reservations leave no
// room, at most request_timeout_ms. The reservation ends when the answer is queued (then the
// queued bytes count) or the stream waits for records. A connection with nothing buffered
// always has room, so one answer larger than the budget still goes. False when the stream or
// connection went away or the wait timed out. HTTP/1.1 has one answer at a time on a
// connection, and nothing to reserve.
net::awaitable<bool> HttpServer::Impl::ReserveAnswer(H2Stream& stream, bool read) {
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

H2Limits HttpServer::Impl::MakeH2Limits() const {
  H2Limits limits;
  limits.max_concurrent_streams = options_.http2_max_streams;
  limits.max_header_bytes = options_.max_header_bytes;
  limits.max_url_bytes = options_.max_url_bytes;
  limits.max_body_bytes = options_.max_body_bytes;
  limits.max_connection_body_bytes = options_.max_body_bytes;
  return limits;
}

// Writes a whole answer on an HTTP/2 stream (the HTTP/2 form of Write, http_session.cc): the same
// fields, no connection-specific ones, Content-Length as HTTP/1.1 would send it.
net::awaitable<bool> HttpServer::Impl::Write(H2Stream& stream, HttpResponse response,
                                             bool /*keep_alive*/, bool head, std::string_view route,
                                             std::string_view method) {
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

// SSE on an HTTP/2 stream: as Sse (http_live.cc), with each event appended to the stream's
// queue, and no further read while kH2SseQueueLimit bytes wait for the peer's window (a reader
// that takes none for request_timeout_ms is reset). A reset stream ends it at once. Kept whole
// for the reason Sse is: one loop whose state (the waker, the position, the first event, the
// reset) every step shares.
net::awaitable<void> HttpServer::Impl::H2Sse(H2Stream& stream, ReadState state,
                                             std::string_view label, std::string path,
                                             std::optional<std::string> authorization) {
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
      const auto give_up =
          std::chrono::steady_clock::now() + std::chrono::milliseconds(options_.request_timeout_ms);
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
std::optional<std::string> HttpServer::Impl::FillTarget(std::string_view target,
                                                        HttpRequest* request) {
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
net::awaitable<void> HttpServer::Impl::H2Handle(std::shared_ptr<H2Conn> conn, H2Request in) {
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
    for (auto& [name, value] : in.headers) {
      request.headers.Append(std::string(name), std::move(value));  // names unique already
    }
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
net::awaitable<void> HttpServer::Impl::H2Run(H2Stream& stream, HttpRequest request) {
  PendingSse sse;
  co_await Dispatch(stream, std::move(request), true, &sse);
  if (sse.state) {
    co_await H2Sse(stream, std::move(*sse.state), sse.label, std::move(sse.path),
                   std::move(sse.authorization));
  }
}

// The request that upgraded an HTTP/1.1 connection, answered on stream 1.
net::awaitable<void> HttpServer::Impl::H2HandleUpgraded(std::shared_ptr<H2Conn> conn,
                                                        HttpRequest request, std::string target) {
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
net::awaitable<void> HttpServer::Impl::H2Writer(std::shared_ptr<H2Conn> conn) {
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
net::awaitable<void> HttpServer::Impl::H2Watchdog(std::shared_ptr<H2Conn> conn) {
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
net::awaitable<void> HttpServer::Impl::ServeH2(std::shared_ptr<H2Conn> conn,
                                               beast::flat_buffer buffer,
                                               std::optional<HttpRequest> upgraded,
                                               std::string settings, std::string upgraded_target) {
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

}  // namespace runnel::server
