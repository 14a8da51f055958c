// Live reads on the HTTP edge: long-polls and SSE responses (of streams and of consumer groups)
// waiting for records. A reader's Waker (live_waker.h) is woken by the registry's subscription
// hint, through its io thread's WakeQueue; a parked SSE reader on plain HTTP/1.1 gets its next
// event written in place by the io thread. HTTP/2 streams share the waiting (WaitForRecords);
// their SSE writing is in http_h2.cc.
#include "server/http_internal.h"

#include <array>
#include <cstdio>

#include <sys/socket.h>

namespace runnel::server {

void CancelStuckWrite(Waker& waker) {
  if (waker.writing == nullptr) return;
  boost::system::error_code ec;
  waker.writing->cancel(ec);
}

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

void StopWatchingHangUp(tcp::socket& socket, Waker& waker) {
  if (!waker.watching) return;
  boost::system::error_code ec;
  socket.cancel(ec);
}

// `ex` is a connection's executor, on one of iocs_.
std::shared_ptr<Waker> HttpServer::Impl::NewWaker(const net::any_io_executor& ex) {
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

std::function<void()> HttpServer::Impl::HintFor(const std::shared_ptr<Waker>& waker) {
  std::weak_ptr<Waker> weak = waker;
  WakeQueue* queue = waker->queue;
  return [weak, queue] { queue->Push(weak); };
}

// A hint on the io thread: a parked SSE reader gets its next event written right here when
// that is all there is to do; anything else (no records yet, the stream closed or gone, a
// socket that does not take the whole event, an error) resumes the reader's coroutine.
void HttpServer::Impl::Wake(Waker& waker, DeliveryMemo& memo) {
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
bool HttpServer::Impl::DeliverParked(SseParked& parked, DeliveryMemo& memo) {
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
net::awaitable<bool> HttpServer::Impl::WaitForHint(Waker& waker,
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
net::awaitable<Result<Subscription>> HttpServer::Impl::WatchFrom(
    const ReadState& state, const std::shared_ptr<Waker>& waker) {
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
net::awaitable<ReadChunk> HttpServer::Impl::WaitForRecords(
    Stream& stream, const ReadState& state,
    std::optional<std::chrono::steady_clock::time_point> until) {
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
void HttpServer::Impl::BeginLiveWait(Stream& stream, const std::shared_ptr<Waker>& waker) {
  Tcp(stream).expires_never();
  WatchHangUp(Tcp(stream).socket(), waker);
}

template <typename Stream>
void HttpServer::Impl::EndLiveWait(Stream& stream, Waker& waker) {
  StopWatchingHangUp(Tcp(stream).socket(), waker);
}

void HttpServer::Impl::BeginLiveWait(H2Stream& stream, const std::shared_ptr<Waker>& waker) {
  if (stream.conn->closed || !stream.conn->session->Open(stream.id)) waker->hung_up = true;
  stream.conn->wakers[stream.id] = waker;
  stream.conn->Release(stream.id);  // a waiting reader holds no answer
}

void HttpServer::Impl::EndLiveWait(H2Stream& stream, Waker&) {
  stream.conn->wakers.erase(stream.id);
}

template <typename Stream>
net::awaitable<bool> HttpServer::Impl::LongPoll(Stream& stream, ReadState state, bool keep_alive) {
  ReadChunk chunk = co_await WaitForRecords(stream, state);
  HttpResponse response = (chunk.gone || !chunk.records.empty())
                              ? service_.ReadResponse(state, chunk)
                              : service_.LongPollEmptyResponse(state, chunk);
  co_return co_await Write(stream, std::move(response), keep_alive, false, "stream", "GET");
}

// A group read-next that waits for work: the stream's long-poll wait from the group's offset;
// when records arrive, the read-next answer (200), else the protocol's 204.
template <typename Stream>
net::awaitable<bool> HttpServer::Impl::GroupLongPoll(Stream& stream, Principal principal,
                                                     std::shared_ptr<const HttpRequest> request,
                                                     ReadState state, bool keep_alive) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(service_.options().long_poll_timeout_ms);
  ReadChunk chunk = co_await WaitForRecords(stream, state, deadline);
  while (!chunk.gone && !chunk.records.empty()) {
    GroupAnswer again = co_await groups_.Handle(principal, *request);
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
  co_return co_await Write(stream, service_.LongPollEmptyResponse(state, chunk), keep_alive, false,
                           "groups", "GET");
}

// Writes the head of an SSE response. Its own coroutine, so the header and its serializer
// are not kept for the whole life of the response (memory per live reader).
template <typename Stream>
net::awaitable<bool> HttpServer::Impl::WriteSseHead(Stream& stream, const ReadState& state) {
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
// server stops. Always ends the connection. Longer than most functions here: it is one loop
// over the response's life whose state (the waker, the parked state the io thread writes
// through, the armed write timeout, a failed write) every step of it reads and changes; split,
// each step would take all of it.
template <typename Stream>
net::awaitable<void> HttpServer::Impl::Sse(Stream& stream, ReadState state, std::string_view label,
                                           std::string path,
                                           std::optional<std::string> authorization) {
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

template net::awaitable<bool> HttpServer::Impl::LongPoll<beast::tcp_stream>(beast::tcp_stream&,
                                                                            ReadState, bool);
template net::awaitable<bool> HttpServer::Impl::LongPoll<TlsStream>(TlsStream&, ReadState, bool);
template net::awaitable<bool> HttpServer::Impl::LongPoll<H2Stream>(H2Stream&, ReadState, bool);
template net::awaitable<bool> HttpServer::Impl::GroupLongPoll<beast::tcp_stream>(
    beast::tcp_stream&, Principal, std::shared_ptr<const HttpRequest>, ReadState, bool);
template net::awaitable<bool> HttpServer::Impl::GroupLongPoll<TlsStream>(
    TlsStream&, Principal, std::shared_ptr<const HttpRequest>, ReadState, bool);
template net::awaitable<bool> HttpServer::Impl::GroupLongPoll<H2Stream>(
    H2Stream&, Principal, std::shared_ptr<const HttpRequest>, ReadState, bool);
template net::awaitable<void> HttpServer::Impl::Sse<beast::tcp_stream>(beast::tcp_stream&,
                                                                       ReadState, std::string_view,
                                                                       std::string,
                                                                       std::optional<std::string>);
template net::awaitable<void> HttpServer::Impl::Sse<TlsStream>(TlsStream&, ReadState,
                                                               std::string_view, std::string,
                                                               std::optional<std::string>);

}  // namespace runnel::server
