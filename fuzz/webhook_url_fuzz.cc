// Webhook URL parsing and the SSRF rules (PROTOCOL.md 6.2, 12.8) must never crash, and what
// they accept must hold up:
//   - a parsed URL has a non-empty lower-case host without control characters or brackets, a
//     port other than 0 and a target starting with '/';
//   - a URL that passes the creation-time check without the development exception is https://
//     and, when its host is an IP literal, that address is public;
//   - IsPublicAddress only ever says yes to text that is an IP address.
#include <arpa/inet.h>

#include <cctype>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "server/webhook_url.h"

namespace {

void Check(bool ok, const char* what, std::string_view input) {
  if (!ok) {
    std::fprintf(stderr, "webhook_url_fuzz: %s: %.*s\n", what, static_cast<int>(input.size()),
                 input.data());
    std::abort();
  }
}

bool IsIpLiteral(const std::string& host) {
  unsigned char buf[16];
  return inet_pton(AF_INET, host.c_str(), buf) == 1 || inet_pton(AF_INET6, host.c_str(), buf) == 1;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  using namespace runnel::server;
  auto url = ParseWebhookUrl(input);
  if (url.ok()) {
    Check(!url->host.empty(), "empty host", input);
    for (char c : url->host) {
      const auto u = static_cast<unsigned char>(c);
      Check(u > 0x20 && u != 0x7f && !std::isupper(u) && c != '[' && c != ']',
            "a host with a control, upper-case or bracket character", input);
    }
    Check(url->port != 0, "port 0", input);
    Check(!url->target.empty() && url->target.front() == '/', "a target not starting with /",
          input);
  }
  if (CheckWebhookUrl(input, false).ok()) {
    Check(url.ok() && url->https, "an accepted URL that is not https", input);
    if (IsIpLiteral(url->host)) {
      Check(IsPublicAddress(url->host), "an accepted URL names a non-public address", input);
    }
  }
  if (IsPublicAddress(input))
    Check(IsIpLiteral(input), "a public address that is no address", input);
  return 0;
}
