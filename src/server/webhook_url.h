// Webhook URL parsing and SSRF rules (PROTOCOL.md 6.2 and 12.8).
//
// A webhook URL must be https://. Targets on private, loopback, link-local, shared, multicast,
// reserved and cloud-metadata addresses are refused, both when the URL names an IP literal
// (checked at subscription creation) and when a host name resolves to one (checked by the
// webhook client before it connects, so DNS cannot smuggle a private target in later).
//
// The one exception is the protocol's development exception, and only when the server enables
// it explicitly (`runnel serve --webhook-allow-localhost`): http:// or https:// to `localhost`
// (or a name under `.localhost`) and to 127.0.0.x.
//
// Thread-safety: pure functions.
#ifndef RUNNEL_SERVER_WEBHOOK_URL_H_
#define RUNNEL_SERVER_WEBHOOK_URL_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "runnel/status.h"

namespace runnel::server {

// The longest webhook URL accepted.
inline constexpr size_t kMaxWebhookUrlBytes = 2048;

struct WebhookUrl {
  bool https = false;
  // Lower-cased; IPv6 literals without brackets.
  std::string host;
  uint16_t port = 0;
  // Path and query, at least "/".
  std::string target;
};

// Splits an absolute http(s) URL. kInvalidArgument for other schemes, user info, fragments,
// control characters, a bad port or an empty host.
Result<WebhookUrl> ParseWebhookUrl(std::string_view url);

// True for `localhost`, names under `.localhost`, and 127.0.0.0/24.
bool IsDevelopmentLoopbackHost(std::string_view host);

// True when `ip` (a textual IPv4 or IPv6 address) is a public unicast address. False for
// anything else, including text that is not an address.
bool IsPublicAddress(std::string_view ip);

// The creation-time check: kInvalidArgument naming the reason when the URL may not be used.
Status CheckWebhookUrl(std::string_view url, bool allow_localhost);

// The connect-time check of one resolved address for a parsed URL.
bool AddressAllowed(const WebhookUrl& url, std::string_view ip, bool allow_localhost);

}  // namespace runnel::server

#endif  // RUNNEL_SERVER_WEBHOOK_URL_H_
