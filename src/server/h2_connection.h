// One HTTP/2 connection of the HTTP edge (h2c on the plain port, or h2 chosen by ALPN on the TLS
// port) and one stream of it, as the request handling writes to it (http_h2.cc). The connection
// wraps the socket and the H2Session (h2_session.h) that frames it; everything here is touched
// on the connection's io thread only.
#ifndef RUNNEL_SERVER_H2_CONNECTION_H_
#define RUNNEL_SERVER_H2_CONNECTION_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "server/h2_session.h"
#include "server/http_net.h"
#include "server/live_waker.h"

namespace runnel::server {

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

}  // namespace runnel::server

#endif  // RUNNEL_SERVER_H2_CONNECTION_H_
