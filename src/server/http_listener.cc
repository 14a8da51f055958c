// The HTTP edge's listener: binding, the accept loop (spread over the io threads, with backoff
// on failures), the connection cap and the refusal of connections beyond it (503, with a
// spare descriptor to answer clients when accept() runs out of descriptors), and TLS: the
// handshake, and the protocol the client chose by ALPN.
#include "server/http_internal.h"

#include <spdlog/spdlog.h>

#include <array>
#include <boost/beast/core/detect_ssl.hpp>
#include <cstring>

#include <fcntl.h>
#include <unistd.h>

#include "server/accept_backoff.h"
#include "server/http_errors.h"

namespace runnel::server {

namespace {

// How long a TLS close_notify exchange may take when a connection ends.
constexpr std::chrono::seconds kTlsShutdownTimeout(1);

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

}  // namespace

Status HttpServer::Impl::Listen() {
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

net::awaitable<void> HttpServer::Impl::Accept() {
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
        spdlog::warn("accept failed: {}{}", ec.message(),
                     more == 0
                         ? std::string()
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
bool HttpServer::Impl::AnswerBusyOnSpare() {
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
net::awaitable<void> HttpServer::Impl::TlsSession(beast::tcp_stream tcp, bool busy,
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
net::awaitable<void> HttpServer::Impl::ShutdownSend(beast::tcp_stream& stream) {
  boost::system::error_code ec;
  stream.socket().shutdown(tcp::socket::shutdown_send, ec);
  co_return;
}

net::awaitable<void> HttpServer::Impl::ShutdownSend(TlsStream& stream) {
  boost::system::error_code ec;
  Tcp(stream).expires_after(kTlsShutdownTimeout);
  co_await stream.async_shutdown(net::redirect_error(net::use_awaitable, ec));
  Tcp(stream).socket().shutdown(tcp::socket::shutdown_send, ec);
}

// Answers a connection beyond the cap with 503 and closes it. What the client sent by then is
// read and discarded first (without waiting for more), so that closing usually does not
// reset the connection before the client has read the answer; the descriptor is held no
// longer than it takes to write the answer (at most kRejectWriteTimeout).
net::awaitable<void> HttpServer::Impl::RejectBusy(tcp::socket socket,
                                                  [[maybe_unused]] SocketSlot slot) {
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

}  // namespace runnel::server
