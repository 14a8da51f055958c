// The outgoing webhook client. Beast and Asio SSL live only in this TU.
#include <utility>  // Boost 1.74's awaitable.hpp needs std::exchange declared first.

#include "server/webhook_client.h"

#include <openssl/ssl.h>

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
#include <chrono>

#include "server/webhook_url.h"

namespace runnel::server {

namespace beast = boost::beast;
namespace http = boost::beast::http;
namespace net = boost::asio;
namespace ssl = boost::asio::ssl;
using tcp = net::ip::tcp;

namespace {

// Writes the request and reads the response on a connected (and, for TLS, handshaken) stream.
template <typename Stream>
net::awaitable<void> Exchange(Stream& stream, http::request<http::string_body>& req,
                              size_t max_response_bytes, WebhookReply* out) {
  boost::system::error_code ec;
  co_await http::async_write(stream, req, net::redirect_error(net::use_awaitable, ec));
  if (ec) {
    out->error = "cannot send the request: " + ec.message();
    co_return;
  }
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(max_response_bytes);
  co_await http::async_read_header(stream, buffer, parser,
                                   net::redirect_error(net::use_awaitable, ec));
  if (!ec && parser.content_length() && *parser.content_length() > max_response_bytes) {
    ec = http::error::body_limit;
  }
  if (!ec && !parser.is_done()) {
    co_await http::async_read(stream, buffer, parser, net::redirect_error(net::use_awaitable, ec));
  }
  if (!ec && parser.get().body().size() > max_response_bytes) ec = http::error::body_limit;
  if (ec) {
    out->error = ec == http::error::body_limit ? "response body is larger than " +
                                                     std::to_string(max_response_bytes) + " bytes"
                                               : "cannot read the response: " + ec.message();
    co_return;
  }
  out->responded = true;
  out->status = static_cast<int>(parser.get().result_int());
  out->body = std::move(parser.get().body());
}

// Pointers are owned by PostWebhook and outlive the io_context running this coroutine.
net::awaitable<void> Deliver(const WebhookUrl* url, const WebhookPost* post,
                             const WebhookClientOptions* options, ssl::context* tls,
                             WebhookReply* out) {
  auto ex = co_await net::this_coro::executor;
  boost::system::error_code ec;
  tcp::resolver resolver(ex);
  auto results = co_await resolver.async_resolve(url->host, std::to_string(url->port),
                                                 net::redirect_error(net::use_awaitable, ec));
  if (ec) {
    out->error = "cannot resolve " + url->host + ": " + ec.message();
    co_return;
  }
  std::vector<tcp::endpoint> allowed;
  for (const auto& entry : results) {
    if (AddressAllowed(*url, entry.endpoint().address().to_string(), options->allow_localhost)) {
      allowed.push_back(entry.endpoint());
    }
  }
  if (allowed.empty()) {
    out->error = url->host + " resolves only to private, loopback or reserved addresses";
    co_return;
  }
  beast::tcp_stream tcp_stream(ex);
  co_await tcp_stream.async_connect(allowed, net::redirect_error(net::use_awaitable, ec));
  if (ec) {
    out->error = "cannot connect to " + url->host + ": " + ec.message();
    co_return;
  }
  const bool default_port = url->port == (url->https ? 443 : 80);
  std::string host_header =
      url->host.find(':') != std::string::npos ? "[" + url->host + "]" : url->host;
  if (!default_port) host_header += ":" + std::to_string(url->port);
  http::request<http::string_body> req{http::verb::post, url->target, 11};
  req.set(http::field::host, host_header);
  req.set(http::field::user_agent, "runnel-webhook/1");
  req.set(http::field::connection, "close");
  for (const auto& [name, value] : post->headers) req.set(name, value);
  req.body() = post->body;
  req.prepare_payload();
  if (!url->https) {
    co_await Exchange(tcp_stream, req, options->max_response_bytes, out);
    tcp_stream.socket().shutdown(tcp::socket::shutdown_both, ec);
    co_return;
  }
  beast::ssl_stream<beast::tcp_stream> tls_stream(std::move(tcp_stream), *tls);
  if (!SSL_set_tlsext_host_name(tls_stream.native_handle(), url->host.c_str())) {
    out->error = "cannot set the TLS server name";
    co_return;
  }
  tls_stream.set_verify_mode(ssl::verify_peer);
  tls_stream.set_verify_callback(ssl::host_name_verification(url->host));
  co_await tls_stream.async_handshake(ssl::stream_base::client,
                                      net::redirect_error(net::use_awaitable, ec));
  if (ec) {
    out->error = "TLS handshake with " + url->host + " failed: " + ec.message();
    co_return;
  }
  co_await Exchange(tls_stream, req, options->max_response_bytes, out);
}

// One client TLS context for the process: loading the system trust store is costly. OpenSSL
// contexts may be shared by concurrent connections.
ssl::context& TlsContext() {
  static ssl::context* context = [] {
    auto* c = new ssl::context(ssl::context::tls_client);
    c->set_default_verify_paths();
    return c;
  }();
  return *context;
}

}  // namespace

WebhookReply PostWebhook(const WebhookClientOptions& options, const WebhookPost& post) {
  WebhookReply reply;
  auto url = ParseWebhookUrl(post.url);
  if (!url.ok()) {
    reply.error = std::string(url.status().message());
    return reply;
  }
  try {
    net::io_context ioc(1);
    net::co_spawn(ioc,
                  Deliver(&*url, &post, &options, url->https ? &TlsContext() : nullptr, &reply),
                  net::detached);
    // The overall deadline: whatever is still pending afterwards is abandoned with the context.
    ioc.run_for(std::chrono::milliseconds(options.timeout_ms));
    if (!ioc.stopped() && !reply.responded && reply.error.empty()) {
      reply.error = "no response within " + std::to_string(options.timeout_ms) + " ms";
    }
  } catch (const std::exception& e) {
    reply = WebhookReply{};
    reply.error = std::string("delivery failed: ") + e.what();
  }
  if (!reply.responded && reply.error.empty()) reply.error = "no response";
  return reply;
}

}  // namespace runnel::server
