// HttpServer: `runnel serve`'s HTTP/1.1 and HTTP/2 front end on Boost.Beast with C++20 coroutines.
//
// `threads` io threads, each running an io_context of its own; accepted connections are spread
// over them round robin, and a connection stays on its thread, so its state is touched by one
// thread and io threads never hand work to each other. Nothing on an io thread blocks on the
// store for long: appends complete through the store's asynchronous callback, posted back to the
// connection's thread; channel and consumer-group requests, whose registry calls have no
// asynchronous form, run on their services' worker threads and resume on the connection's
// thread; long-polls and SSE (of streams and of groups alike) wait on a timer that a registry
// subscription hint (posted to the connection's thread) cancels.
//
// Limits: every byte a client sends counts against one before its request is authorized or
// dispatched. Request bodies above max_body_bytes get 413; a head above max_header_bytes 431
// (414 when its request line alone is longer than max_url_bytes allows); targets above
// max_url_bytes 414. In a chunked body, chunk extensions and trailer fields together count
// against max_header_bytes (431; trailer fields are never taken as header fields), and all of
// its framing (size lines, CRLFs, extensions, trailers) against max_header_bytes +
// max_body_bytes / 8 (431). A connection's read buffer holds at most max(max_header_bytes +
// 1 KiB, 64 KiB): one chunk-size line or trailer section must fit in it (431). After any of
// these the connection closes. A connection idle for idle_timeout_ms between requests, or
// slower than request_timeout_ms to send one (counted from its first byte, head included), is
// closed.
//
// Connections: at most max_connections accepted sockets are served at a time (counted from
// accept, TLS handshakes included; SetMaxConnections changes the cap, `runnel serve` derives it
// from the descriptor limit, fd_budget.h). One beyond the cap is answered 503 with
// `Retry-After: 1` and closed at once (on TLS, after the handshake); at most reject_slots are
// being refused at a time, and more are closed unanswered, so refused clients hold at most
// reject_slots descriptors. When accept() fails for want of a descriptor (EMFILE, ENFILE), the
// accept loop closes a spare descriptor it keeps open for the purpose, accepts the pending
// client into it, writes it the 503 (a TLS client is only closed), closes it and reopens the
// spare, so clients are not left waiting in the backlog until a descriptor frees up. When that
// takes no client off the backlog, and after any other failure, the next accept waits 10 ms,
// doubling to 1 s while failures go on (accept_backoff.h). Failures are logged at most once per
// 10 s, with the number left out, and counted on /metrics (runnel_accept_failures_total).
//
// TLS (ServerOptions::tls_cert_file/tls_key_file): every connection is TLS (OpenSSL through
// Asio; TLS 1.2 or later) and runs the same request handling as plain HTTP, templated on the
// stream type. A plain-HTTP request to a TLS listener is answered with a clear 400 in plain text
// and the connection is closed.
//
// HTTP/2 (ServerOptions::http2): a plain connection whose first bytes are the HTTP/2 client
// preface (`PRI * HTTP/2.0`, h2c with prior knowledge), and a TLS connection whose client chose
// `h2` by ALPN (offered before http/1.1), are served as HTTP/2 through libnghttp2
// (h2_session.h); any other is HTTP/1.1. Each stream's request goes through the same handling
// as an HTTP/1.1 request (routing, authorization, quotas, limits, metrics, live reads), its
// answer through the stream, paced by the peer's flow-control windows: an SSE response reads
// no further while 256 KiB wait for its window, and is reset when none of it leaves within
// request_timeout_ms. A reset stream releases its live reader at once. At most
// http2_max_streams streams are open per connection; header fields count against
// max_header_bytes (431), :path against max_url_bytes (414), DATA against max_body_bytes (413),
// and the bodies one connection sends at once against max_body_bytes too (503).
// A connection with no open stream for idle_timeout_ms, or with a request not received whole
// or a write not finished within request_timeout_ms, is closed; the answers waiting for the
// peer's window on one connection stay within http2_connection_buffer (a stream that would pass
// it waits, then is refused); Stop() sends GOAWAY. An h2 connection beyond the cap gets 503 on its
// requests, then GOAWAY. On the plain port, an HTTP/1.1 request asking for `Upgrade: h2c` (with
// HTTP2-Settings) gets 101 and its answer on stream 1 of the HTTP/2 connection the socket turns
// into.
//
// Lifecycle: Start() binds and listens; Run() serves on the calling thread plus threads - 1
// more, and returns after Stop() has drained: Stop() stops accepting, ends live readers,
// waits (bounded) for in-flight requests, flushes the registry and stops the io threads.
// Stop() may be called from any thread, more than once.
#ifndef RUNNEL_SERVER_HTTP_SERVER_H_
#define RUNNEL_SERVER_HTTP_SERVER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "runnel/registry.h"
#include "runnel/status.h"
#include "server/access_gate.h"
#include "server/access_log.h"
#include "server/fd_budget.h"
#include "server/group_service.h"
#include "server/stream_service.h"
#include "server/subscription_service.h"
#include "server/tenant_quota.h"

namespace runnel::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  // 0 picks a free port (see HttpServer::port()).
  uint16_t port = 4437;
  // io threads; 0 means one per core.
  size_t threads = 0;
  size_t max_body_bytes = 64u << 20;
  size_t max_header_bytes = 16u << 10;
  size_t max_url_bytes = 8u << 10;
  uint64_t idle_timeout_ms = 60000;
  uint64_t request_timeout_ms = 30000;
  size_t max_connections = 10000;
  // Connections beyond max_connections that may be in the middle of being refused (their 503
  // written, or on TLS their handshake done first) at a time; more are closed unanswered.
  size_t reject_slots = kRejectSlots;
  // Most consumer groups per stream (GroupService); past it a new group's ack gets 429.
  size_t max_groups_per_stream = GroupService::kDefaultMaxGroupsPerStream;
  // SSE responses end after this long so clients reconnect (PROTOCOL.md 10.2).
  uint64_t sse_max_duration_ms = 60000;
  // Stop gracefully on SIGINT and SIGTERM while Run() is active.
  bool handle_signals = false;
  // Calls that block on the store run on one pool of worker threads ("store-N"): catalog
  // writes (create, retention change, delete), which wait for their commit (concurrent ones
  // share a group commit, so more threads mean more creates per sync), stream requests' store
  // calls when offloaded, and /v1/channels and /v1/groups requests. The pool has as many
  // threads as the largest of these three.
  size_t channel_threads = 2;
  size_t catalog_threads = 16;
  size_t group_threads = 2;
  // HTTPS: PEM files of the certificate chain and its private key. Both empty serves plain
  // HTTP; one without the other, or files that cannot be loaded, fail Start().
  std::string tls_cert_file;
  std::string tls_key_file;
  // HTTP/2 cleartext (h2c) with prior knowledge on the plain port: a connection that opens
  // with the HTTP/2 preface speaks HTTP/2, any other HTTP/1.1. False serves HTTP/1.1 only.
  bool http2 = true;
  // Streams one HTTP/2 connection may have open at a time (SETTINGS_MAX_CONCURRENT_STREAMS).
  size_t http2_max_streams = 100;
  // Bytes of answers one HTTP/2 connection may hold for the peer's flow-control window,
  // queued or reserved by streams about to answer (a read reserves max_read_bytes): a stream
  // that would pass it waits, and is refused with RST_STREAM REFUSED_STREAM when no room comes
  // within request_timeout_ms. A connection holding nothing may always take one answer.
  size_t http2_connection_buffer = 8u << 20;
  // A TLS connection must complete its handshake within this long, else it is closed.
  uint64_t tls_handshake_timeout_ms = 10000;
  // Where stream requests make their store calls (lookups, reads, HEAD, listings): on the
  // catalog workers when true, on the io threads when false. Unset follows the store
  // (Store::CallsMayBlock: true for PostgreSQL, whose every call is a round trip), so no io
  // thread waits on a database.
  std::optional<bool> offload_store_calls;
  StreamServiceOptions service;
  // Authentication and tenant authorization (access_gate.h). Null runs open: every request is
  // the platform principal with the cross-tenant capability.
  std::shared_ptr<AccessGate> access;
  // Per-tenant limits (tenant_quota.h); all zero means none.
  QuotaOptions quotas;
  // The reserved `__ds` subscription API (subscription_service.h), routed before the stream
  // operations. Null answers `__ds` paths as ordinary stream names.
  std::shared_ptr<SubscriptionService> subscriptions;
  // Scopes (StreamScope::Label(): "global", "tenant:<id>") whose catch-up reads answer
  // `Cache-Control: public` even when they needed a token. Any other read that needed a token
  // answers `private` (with `Vary: Authorization`), so a shared cache never hands it to another
  // caller.
  std::set<std::string> public_cache_scopes;
  // The built-in dashboard at `/` (dashboard.h); false answers its paths with 404.
  bool dashboard = true;
  // Labels of the `runnel_info` gauge on /metrics (for example version and store), next to the
  // store's durability mode, which the server adds itself.
  std::vector<std::pair<std::string, std::string>> info;
  // One line per answered request (access_log.h); null: no access log.
  std::shared_ptr<AccessLog> access_log;
};

class HttpServer {
 public:
  // Binds and listens; kInvalidArgument for a bad host or TLS files that cannot be loaded,
  // kUnavailable when the bind fails.
  static Result<std::unique_ptr<HttpServer>> Start(StreamRegistry registry,
                                                   const ServerOptions& options);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // The bound port.
  uint16_t port() const;
  // Replaces ServerOptions::max_connections; any thread, any time. Connections already served
  // beyond a lowered cap are left to finish.
  void SetMaxConnections(size_t n);
  // Serves until Stop() completes.
  void Run();
  void Stop();

  class Impl;

 private:
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace runnel::server

#endif  // RUNNEL_SERVER_HTTP_SERVER_H_
