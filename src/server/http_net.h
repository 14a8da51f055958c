// The Asio and Beast names the HTTP edge's files share (http_internal.h and what it includes):
// namespace aliases, the TLS stream type, and the TCP stream under a plain or TLS stream.
// Only the http_*.cc files, h2_connection.h and live_waker.h include it: Beast is slow to
// compile.
#ifndef RUNNEL_SERVER_HTTP_NET_H_
#define RUNNEL_SERVER_HTTP_NET_H_

#include <utility>  // Boost 1.74's awaitable.hpp needs std::exchange declared first.

#include <boost/asio.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

namespace runnel::server {

namespace beast = boost::beast;
namespace http = boost::beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;
namespace ssl = boost::asio::ssl;
using TlsStream = beast::ssl_stream<beast::tcp_stream>;

// The TCP stream under a plain or TLS stream (where timeouts are set).
inline beast::tcp_stream& Tcp(beast::tcp_stream& stream) {
  return stream;
}
inline beast::tcp_stream& Tcp(TlsStream& stream) {
  return stream.next_layer();
}

}  // namespace runnel::server

#endif  // RUNNEL_SERVER_HTTP_NET_H_
