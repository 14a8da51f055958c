// A bounded outgoing HTTP client for webhook deliveries: one POST per call, over http:// or
// https:// (OpenSSL, peer and host name verified against the system trust store).
//
// Every limit is explicit: name resolution, connect, TLS handshake, write and read each run
// under one overall deadline (`timeout_ms`); the response body is read up to
// `max_response_bytes` (a longer body fails the delivery); redirects are not followed. Before
// connecting, every resolved address is checked with AddressAllowed (webhook_url.h), so a name
// that resolves to a private address is refused even if it looked public when the subscription
// was created.
//
// Thread-safety: PostWebhook may be called from any thread concurrently; it blocks the caller
// for at most about timeout_ms. Beast stays inside webhook_client.cc.
#ifndef RUNNEL_SERVER_WEBHOOK_CLIENT_H_
#define RUNNEL_SERVER_WEBHOOK_CLIENT_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace runnel::server {

struct WebhookClientOptions {
  uint64_t timeout_ms = 10000;
  size_t max_response_bytes = 64u << 10;
  // The localhost development exception (webhook_url.h).
  bool allow_localhost = false;
};

struct WebhookPost {
  std::string url;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
};

struct WebhookReply {
  // False when no HTTP response arrived (refused address, resolve/connect/TLS failure, timeout,
  // oversized or malformed response); `error` says why.
  bool responded = false;
  int status = 0;
  std::string body;
  std::string error;
};

WebhookReply PostWebhook(const WebhookClientOptions& options, const WebhookPost& post);

}  // namespace runnel::server

#endif  // RUNNEL_SERVER_WEBHOOK_CLIENT_H_
