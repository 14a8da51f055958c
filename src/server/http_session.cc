// One HTTP/1.1 connection of the HTTP edge, plain or TLS: reading each request within the
// server's limits (head, URL, body, chunk framing, timeouts), turning it into an HttpRequest for
// Dispatch, writing answers, and closing; a plain connection that opens with the h2c preface,
// or asks for `Upgrade: h2c`, is handed to HTTP/2 (http_h2.cc).
#include "server/http_internal.h"

#include <algorithm>
#include <iterator>
#include <vector>

#include "base/utf8.h"
#include "server/http_errors.h"
#include "server/webhook_signer.h"

namespace runnel::server {

namespace {

// Whether a Transfer-Encoding list item (surrounding blanks allowed) is "chunked".
bool IsChunked(std::string_view coding) {
  return EqualsIgnoreCase(TrimBlanks(coding), "chunked");
}

// The client connection preface of HTTP/2 (RFC 9113 3.4), which starts an h2c connection with
// prior knowledge on the plain port.
constexpr std::string_view kH2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

// Whether the bytes read so far could still be the start of the preface.
bool MayBeH2Preface(const beast::flat_buffer& buffer) {
  const std::string_view head(static_cast<const char*>(buffer.data().data()),
                              std::min(buffer.size(), kH2Preface.size()));
  return kH2Preface.starts_with(head);
}

}  // namespace

// Writes our response as HTTP/1.1, serialized into one buffer: on plain TCP it usually goes
// out in one non-blocking write, with no asynchronous operation (WriteLive). A HEAD answer
// carries the head only, whatever the caller passed as `head`, with the Content-Length of the
// body a GET would have carried (none when that is unknown here: length_unknown); 204 and
// 304 carry no Content-Length.
template <typename Stream>
net::awaitable<bool> HttpServer::Impl::Write(Stream& stream, HttpResponse response, bool keep_alive,
                                             bool head, std::string_view route,
                                             std::string_view method) {
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

// Whether a request asks for h2c by Upgrade (RFC 7540 3.2): `Upgrade` lists h2c, `Connection`
// lists Upgrade and HTTP2-Settings, and the settings are there.
bool HttpServer::Impl::WantsH2cUpgrade(const HttpRequest& request) {
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

std::string HttpServer::Impl::BodyReadMessage(BodyRead kind) {
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

// Reads the body of the request whose head `parser` holds. Every byte after the head counts:
// data against max_body_bytes, chunk extensions and trailer fields against max_header_bytes,
// chunk framing in all against ChunkFramingLimit(), and nothing waits in `buffer` beyond its
// maximum (ReadBufferLimit), so a client cannot make the server hold more than these limits
// before its request is authorized.
template <typename Stream>
net::awaitable<HttpServer::Impl::BodyOutcome> HttpServer::Impl::ReadBody(
    Stream& stream, beast::flat_buffer& buffer, http::request_parser<http::string_body>& parser,
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
net::awaitable<void> HttpServer::Impl::RefuseAndClose(Stream& stream, unsigned status,
                                                      std::string message) {
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
net::awaitable<void> HttpServer::Impl::DiscardInput(Stream& tls_or_plain) {
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
net::awaitable<void> HttpServer::Impl::Session(beast::tcp_stream stream, beast::flat_buffer buffer,
                                               [[maybe_unused]] SocketSlot slot) {
  if (options_.http2) {
    boost::system::error_code ec;
    stream.expires_after(std::chrono::milliseconds(options_.idle_timeout_ms));
    while (buffer.size() < kH2Preface.size() && MayBeH2Preface(buffer)) {
      const size_t n = co_await stream.async_read_some(buffer.prepare(ReadSize(buffer)),
                                                       net::redirect_error(net::use_awaitable, ec));
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
net::awaitable<void> HttpServer::Impl::Serve(Stream& stream, beast::flat_buffer buffer) {
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
net::awaitable<void> HttpServer::Impl::RefuseMalformed(Stream& stream,
                                                       const boost::system::error_code& ec) {
  if (ec.category() != http::make_error_code(http::error::bad_target).category() ||
      ec == http::error::end_of_stream || ec == http::error::partial_message) {
    co_return;
  }
  HttpResponse r = StreamService::ErrorResponse(
      Status::InvalidArgument("malformed HTTP request: " + ec.message()));
  co_await Write(stream, std::move(r), false, false, "other", "-");
  co_await DiscardInput(stream);
}

// Parses the head of a request into `parser`, reading more only while the buffered bytes hold
// no complete head: what http::async_read_header does, without its composed operation, which
// completes by posting to the io thread even when the head was buffered already (the usual
// case: the head and body of an append arrive in one read). The errors are Beast's: a head
// larger than the parser's header limit, buffer_overflow when the head does not fit the
// buffer, end_of_stream on a clean close before any byte, partial_message on a close within
// the head.
template <typename Stream>
net::awaitable<void> HttpServer::Impl::ParseHead(Stream& stream, beast::flat_buffer& buffer,
                                                 http::request_parser<http::string_body>& parser,
                                                 boost::system::error_code& ec) {
  for (;;) {
    if (buffer.size() > 0) {
      const size_t used = parser.put(buffer.data(), ec);
      buffer.consume(used);
      if (ec == http::error::need_more) {
        ec = {};
      } else if (ec || parser.is_header_done()) {
        co_return;
      }
    }
    if (buffer.size() >= buffer.max_size()) {
      ec = http::error::buffer_overflow;
      co_return;
    }
    const size_t n = co_await stream.async_read_some(buffer.prepare(ReadSize(buffer)),
                                                     net::redirect_error(net::use_awaitable, ec));
    buffer.commit(n);
    if (ec == net::error::eof || ec == ssl::error::stream_truncated) {
      if (!parser.got_some()) {
        ec = http::error::end_of_stream;
        co_return;
      }
      parser.put_eof(ec);
      if (!ec) ec = http::error::partial_message;
    }
    if (ec) co_return;
  }
}

// Reads the head of the next request into `parser`, within the limits of the head, the URL and
// the announced body (answering those that pass one: 413, 414, 431, and 400 or 501 for a
// transfer coding other than chunked), and says `100 Continue` when asked. False when the
// connection must close: it did, idled or failed between requests, or the request was refused.
template <typename Stream>
net::awaitable<bool> HttpServer::Impl::ReadHead(Stream& stream, beast::flat_buffer& buffer,
                                                http::request_parser<http::string_body>& parser,
                                                IdleWatch* idle) {
  boost::system::error_code ec;
  // Between requests the connection may idle for idle_timeout_ms; once a request's first
  // byte is here, the whole request (its head too) must arrive within request_timeout_ms.
  if (buffer.size() == 0) {
    const auto idle_timeout = std::chrono::milliseconds(options_.idle_timeout_ms);
    size_t n = 0;
    if constexpr (std::is_same_v<Stream, beast::tcp_stream>) {
      // On the socket itself, outside Beast's timeouts: the IdleWatch cancels it (WatchIdle).
      tcp::socket& socket = stream.socket();
      idle->deadline = std::chrono::steady_clock::now() + idle_timeout;
      idle->waiting = &socket;
      n = co_await socket.async_read_some(buffer.prepare(ReadSize(buffer)),
                                          net::redirect_error(net::use_awaitable, ec));
      idle->waiting = nullptr;
    } else {
      Tcp(stream).expires_after(idle_timeout);
      n = co_await stream.async_read_some(buffer.prepare(ReadSize(buffer)),
                                          net::redirect_error(net::use_awaitable, ec));
    }
    buffer.commit(n);
    if (ec) co_return false;  // a close or an idle connection between requests: nothing to answer
  }
  Tcp(stream).expires_after(std::chrono::milliseconds(options_.request_timeout_ms));
  co_await ParseHead(stream, buffer, parser, ec);
  if (ec == http::error::header_limit || ec == http::error::buffer_overflow) {
    // The head did not fit. When it is the request line that did not (the parser has no
    // target yet, and the buffer starts with that line) and that line is longer than a URL
    // may be, say so (414) rather than blaming the header fields.
    const std::string_view head(static_cast<const char*>(buffer.data().data()), buffer.size());
    const bool long_url = parser.get().target().empty() &&
                          head.substr(0, head.find("\r\n")).size() > options_.max_url_bytes + 32;
    co_await RefuseAndClose(stream, long_url ? 414 : 431,
                            long_url ? "request URL is too long" : "request headers are too large");
    co_return false;
  }
  if (ec == http::error::body_limit) {  // a Content-Length above the limit
    co_await RefuseAndClose(stream, 413, "request body is larger than the server's limit");
    co_return false;
  }
  if (ec) {
    co_await RefuseMalformed(stream, ec);
    co_return false;
  }
  if (parser.get().target().size() > options_.max_url_bytes) {
    co_await RefuseAndClose(stream, 414, "request URL is too long");
    co_return false;
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
    co_return false;
  }
  if (auto length = parser.content_length(); length && *length > options_.max_body_bytes) {
    co_await RefuseAndClose(stream, 413, "request body is larger than the server's limit");
    co_return false;
  }
  if (beast::iequals(parser.get()[http::field::expect], "100-continue")) {
    static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
    co_await net::async_write(stream, net::buffer(kContinue.data(), kContinue.size()),
                              net::redirect_error(net::use_awaitable, ec));
    if (ec) co_return false;
  }
  co_return true;
}

// The request as the services see it (HttpRequest) from Beast's parse of it: method, decoded
// path and query, header fields (names lower-cased, repeated ones joined; trailer fields, after
// the first `header_fields`, left out), Host (the authority of an absolute-form target) and
// body, which is moved out of `req`. What makes it unanswerable is returned.
HttpServer::Impl::RequestFaults HttpServer::Impl::ToHttpRequest(
    http::request<http::string_body>& req, size_t header_fields, HttpRequest* request) {
  request->method = std::string(req.method_string());
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
  if (path) request->path = std::move(*path);
  if (question != std::string_view::npos &&
      !ParseQuery(target.substr(question + 1), &request->query)) {
    bad = true;
  }
  // Names (streams, tenants, channels, groups) are text: they reach JSON answers, listings
  // and subscription state, where bytes that are not UTF-8 would be altered or refused.
  bool not_utf8 = !bad && !IsValidUtf8(request->path);
  for (const auto& [key, value] : request->query) {
    not_utf8 = not_utf8 || !IsValidUtf8(key) || !IsValidUtf8(value);
  }
  size_t field_index = 0;
  request->headers.Reserve(header_fields);
  for (const auto& field : req) {
    if (field_index++ == header_fields) break;
    std::string name(field.name_string());
    for (char& c : name) c = (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
    request->headers.Append(std::move(name), std::string(field.value()));
  }
  request->headers.MergeRepeated(/*join=*/true);
  if (absolute_form) request->headers["host"] = std::string(authority);
  request->body = std::move(req.body());
  return RequestFaults{hosts, bad_host, bad, not_utf8};
}

void HttpServer::Impl::WatchIdle(const std::shared_ptr<IdleWatch>& watch) {
  watch->armed = true;
  watch->timer.expires_at(watch->deadline);
  watch->timer.async_wait([watch](const boost::system::error_code& ec) {
    watch->armed = false;
    if (ec || watch->closed || watch->waiting == nullptr) return;  // re-armed at the next wait
    if (std::chrono::steady_clock::now() < watch->deadline) {
      WatchIdle(watch);  // the connection served requests since: wait for its new deadline
      return;
    }
    boost::system::error_code ignored;
    watch->waiting->cancel(ignored);  // the read ends with operation_aborted: the connection closes
  });
}

// Serves requests until the connection must close or a request turns into an SSE response,
// which it leaves in *sse (still counted in flight) for the caller to serve.
template <typename Stream>
net::awaitable<void> HttpServer::Impl::ServeRequests(Stream& stream, beast::flat_buffer buffer,
                                                     PendingSse* sse, PendingUpgrade* upgrade) {
  std::shared_ptr<IdleWatch> idle;
  if constexpr (std::is_same_v<Stream, beast::tcp_stream>) {
    idle = std::make_shared<IdleWatch>(stream.get_executor());
  }
  // However the loop ends, the watch lets go of the socket.
  struct EndWatch {
    IdleWatch* idle;
    ~EndWatch() {
      if (idle == nullptr) return;
      idle->closed = true;
      idle->waiting = nullptr;
      idle->timer.cancel();
    }
  } end_watch{idle.get()};
  for (;;) {
    http::request_parser<http::string_body> parser;
    parser.header_limit(static_cast<uint32_t>(options_.max_header_bytes));
    parser.body_limit(options_.max_body_bytes);
    if (idle && !idle->armed && buffer.size() == 0) {
      idle->deadline =
          std::chrono::steady_clock::now() + std::chrono::milliseconds(options_.idle_timeout_ms);
      WatchIdle(idle);
    }
    if (!co_await ReadHead(stream, buffer, parser, idle.get())) break;
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
    const RequestFaults faults = ToHttpRequest(req, header_fields, &request);
    metrics_.AddBytesIn(request.body.size());
    bool keep = false;
    AccessScope access(options_.access_log.get(), &stream, request.method,
                       std::string_view(req.target().data(), req.target().size()));
    in_flight_.fetch_add(1);
    if (faults.bad_host) {  // answered, then the connection closes
      co_await Write(stream,
                     StreamService::ErrorResponse(Status::InvalidArgument(
                         faults.hosts == 0 ? "an HTTP/1.1 request needs a Host header"
                                           : "a request may carry only one Host header")),
                     false, false, "other", request.method);
    } else if (faults.bad || faults.not_utf8) {
      keep = co_await Write(
          stream,
          StreamService::ErrorResponse(Status::InvalidArgument(
              faults.bad ? "malformed percent-encoding in URL"
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

template net::awaitable<bool> HttpServer::Impl::Write<beast::tcp_stream>(beast::tcp_stream&,
                                                                         HttpResponse, bool, bool,
                                                                         std::string_view,
                                                                         std::string_view);
template net::awaitable<bool> HttpServer::Impl::Write<TlsStream>(TlsStream&, HttpResponse, bool,
                                                                 bool, std::string_view,
                                                                 std::string_view);
template net::awaitable<void> HttpServer::Impl::DiscardInput<beast::tcp_stream>(beast::tcp_stream&);
template net::awaitable<void> HttpServer::Impl::DiscardInput<TlsStream>(TlsStream&);
template net::awaitable<void> HttpServer::Impl::Serve<TlsStream>(TlsStream&, beast::flat_buffer);

}  // namespace runnel::server
