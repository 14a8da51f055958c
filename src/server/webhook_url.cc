#include "server/webhook_url.h"

#include <arpa/inet.h>

#include <cctype>
#include <cstring>

namespace runnel::server {

namespace {

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool PublicV4(const uint8_t a[4]) {
  uint32_t v = (uint32_t(a[0]) << 24) | (uint32_t(a[1]) << 16) | (uint32_t(a[2]) << 8) | a[3];
  struct Block {
    uint32_t net;
    int bits;
  };
  // IANA special-purpose blocks that are not globally reachable unicast.
  static constexpr Block kBlocked[] = {
      {0x00000000, 8},   // 0.0.0.0/8 "this network"
      {0x0A000000, 8},   // 10/8 RFC 1918
      {0x64400000, 10},  // 100.64/10 shared address space
      {0x7F000000, 8},   // 127/8 loopback
      {0xA9FE0000, 16},  // 169.254/16 link-local, cloud metadata
      {0xAC100000, 12},  // 172.16/12 RFC 1918
      {0xC0000000, 24},  // 192.0.0/24 IETF protocol assignments
      {0xC0000200, 24},  // 192.0.2/24 documentation
      {0xC0A80000, 16},  // 192.168/16 RFC 1918
      {0xC6120000, 15},  // 198.18/15 benchmarking
      {0xC6336400, 24},  // 198.51.100/24 documentation
      {0xCB007100, 24},  // 203.0.113/24 documentation
      {0xE0000000, 4},   // 224/4 multicast
      {0xF0000000, 4},   // 240/4 reserved and broadcast
  };
  for (const Block& b : kBlocked) {
    uint32_t mask = b.bits == 0 ? 0 : ~uint32_t(0) << (32 - b.bits);
    if ((v & mask) == b.net) return false;
  }
  return true;
}

bool PublicV6(const uint8_t a[16]) {
  static constexpr uint8_t kZero[16] = {};
  // ::/96: ::, ::1 and the deprecated IPv4-compatible ::a.b.c.d, which some stacks still route
  // to the embedded IPv4 address.
  if (std::memcmp(a, kZero, 12) == 0) return false;
  // IPv4-mapped ::ffff:a.b.c.d, IPv4-translated ::ffff:0:a.b.c.d and NAT64 64:ff9b::/96: judge
  // the embedded IPv4 address.
  static constexpr uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  static constexpr uint8_t kTranslated[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0};
  static constexpr uint8_t kNat64[12] = {0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0};
  if (std::memcmp(a, kMapped, 12) == 0 || std::memcmp(a, kTranslated, 12) == 0 ||
      std::memcmp(a, kNat64, 12) == 0) {
    return PublicV4(a + 12);
  }
  // 6to4 2002::/16 carries an IPv4 address in its next 32 bits: judge that one.
  if (a[0] == 0x20 && a[1] == 0x02) return PublicV4(a + 2);
  // Local-use NAT64 64:ff9b:1::/48 (RFC 8215) reaches the local network's IPv4 addresses.
  if (a[0] == 0 && a[1] == 0x64 && a[2] == 0xff && a[3] == 0x9b && a[4] == 0 && a[5] == 1) {
    return false;
  }
  if (a[0] == 0) return false;  // the rest of 0000::/8, reserved (its usable forms are above)
  if (a[0] == 0x01 && a[1] == 0 && std::memcmp(a + 2, kZero, 6) == 0) return false;  // 100::/64
  // 2001::/23 IETF protocol assignments (Teredo 2001::/32 hides an IPv4 address, and more).
  if (a[0] == 0x20 && a[1] == 0x01 && (a[2] & 0xfe) == 0) return false;
  if (a[0] == 0x3f && a[1] == 0xff && (a[2] & 0xf0) == 0) return false;  // 3fff::/20 docs
  if ((a[0] & 0xfe) == 0xfc) return false;                               // fc00::/7 unique local
  if (a[0] == 0xfe && (a[1] & 0xc0) == 0x80) return false;               // fe80::/10 link-local
  if (a[0] == 0xfe && (a[1] & 0xc0) == 0xc0) return false;               // fec0::/10 site-local
  if (a[0] == 0xff) return false;                                        // multicast
  if (a[0] == 0x20 && a[1] == 0x01 && a[2] == 0x0d && a[3] == 0xb8) return false;  // docs
  return true;
}

bool IsIpLiteral(std::string_view host) {
  std::string h(host);
  uint8_t buf[16];
  return inet_pton(AF_INET, h.c_str(), buf) == 1 || inet_pton(AF_INET6, h.c_str(), buf) == 1;
}

}  // namespace

Result<WebhookUrl> ParseWebhookUrl(std::string_view url) {
  if (url.size() > kMaxWebhookUrlBytes) {
    return Status::InvalidArgument("webhook URL is longer than " +
                                   std::to_string(kMaxWebhookUrlBytes) + " bytes");
  }
  for (char c : url) {
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f) {
      return Status::InvalidArgument("webhook URL contains spaces or control characters");
    }
  }
  WebhookUrl out;
  std::string_view rest;
  std::string lower = Lower(url.substr(0, 8));
  if (lower.rfind("https://", 0) == 0) {
    out.https = true;
    rest = url.substr(8);
  } else if (lower.rfind("http://", 0) == 0) {
    rest = url.substr(7);
  } else {
    return Status::InvalidArgument(
        "webhook URL must start with https:// (or http:// under the "
        "localhost development exception)");
  }
  if (rest.find('#') != std::string_view::npos) {
    return Status::InvalidArgument("webhook URL must not contain a fragment");
  }
  size_t end = rest.find_first_of("/?");
  std::string_view authority = rest.substr(0, end);
  out.target = end == std::string_view::npos ? "/" : std::string(rest.substr(end));
  if (out.target[0] == '?') out.target = "/" + out.target;
  if (authority.find('@') != std::string_view::npos) {
    return Status::InvalidArgument("webhook URL must not contain user information");
  }
  std::string_view host = authority;
  std::string_view port;
  if (!authority.empty() && authority[0] == '[') {
    size_t close = authority.find(']');
    if (close == std::string_view::npos)
      return Status::InvalidArgument("webhook URL has a bad IPv6 host");
    host = authority.substr(1, close - 1);
    std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after[0] != ':') return Status::InvalidArgument("webhook URL has a bad IPv6 host");
      port = after.substr(1);
    }
  } else if (size_t colon = authority.rfind(':'); colon != std::string_view::npos) {
    host = authority.substr(0, colon);
    port = authority.substr(colon + 1);
  }
  if (host.empty()) return Status::InvalidArgument("webhook URL has no host");
  out.host = Lower(host);
  if (authority[0] == '[') {
    uint8_t v6[16];
    if (inet_pton(AF_INET6, out.host.c_str(), v6) != 1) {
      return Status::InvalidArgument("webhook URL has a bad IPv6 host");
    }
  } else {
    // A DNS name or an IPv4 address: letters, digits, '-', '_' and '.', nothing a resolver
    // could read some other way.
    for (char c : out.host) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') {
        return Status::InvalidArgument("webhook URL host '" + out.host +
                                       "' may hold only letters, digits, '-', '_' and '.'");
      }
    }
  }
  if (!out.host.empty() && out.host.back() == '.') out.host.pop_back();
  if (out.host.empty()) return Status::InvalidArgument("webhook URL has no host");
  out.port = out.https ? 443 : 80;
  if (!port.empty()) {
    if (port.size() > 5) return Status::InvalidArgument("webhook URL has a bad port");
    uint32_t p = 0;
    for (char c : port) {
      if (c < '0' || c > '9') return Status::InvalidArgument("webhook URL has a bad port");
      p = p * 10 + static_cast<uint32_t>(c - '0');
    }
    if (p == 0 || p > 65535) return Status::InvalidArgument("webhook URL has a bad port");
    out.port = static_cast<uint16_t>(p);
  }
  return out;
}

bool IsDevelopmentLoopbackHost(std::string_view host) {
  std::string h = Lower(host);
  if (h == "localhost" || (h.size() > 10 && h.compare(h.size() - 10, 10, ".localhost") == 0)) {
    return true;
  }
  uint8_t a[4];
  return inet_pton(AF_INET, h.c_str(), a) == 1 && a[0] == 127 && a[1] == 0 && a[2] == 0;
}

bool IsPublicAddress(std::string_view ip) {
  std::string h(ip);
  uint8_t buf[16];
  if (inet_pton(AF_INET, h.c_str(), buf) == 1) return PublicV4(buf);
  if (inet_pton(AF_INET6, h.c_str(), buf) == 1) return PublicV6(buf);
  return false;
}

Status CheckWebhookUrl(std::string_view url, bool allow_localhost) {
  auto parsed = ParseWebhookUrl(url);
  if (!parsed.ok()) return parsed.status();
  const WebhookUrl& u = *parsed;
  const bool dev = IsDevelopmentLoopbackHost(u.host);
  if (dev) {
    if (allow_localhost) return Status::OK();
    return Status::InvalidArgument("webhook URL targets " + u.host +
                                   ", a loopback host; the server allows that only with its "
                                   "localhost development exception enabled");
  }
  if (!u.https) return Status::InvalidArgument("webhook URL must use https://");
  if (IsIpLiteral(u.host) && !IsPublicAddress(u.host)) {
    return Status::InvalidArgument("webhook URL targets " + u.host +
                                   ", a private, loopback, link-local or reserved address");
  }
  // The resolver also reads the legacy numeric IPv4 forms ("127.1", "0x7f.1", "2130706433",
  // "0177.0.0.1") as addresses: judge them by the address they stand for, here and not only
  // when a delivery connects.
  if (struct in_addr legacy; inet_aton(u.host.c_str(), &legacy) == 1) {
    uint8_t a[4];
    std::memcpy(a, &legacy.s_addr, 4);  // network byte order: a[0] is the first octet
    if (!PublicV4(a)) {
      return Status::InvalidArgument("webhook URL targets " + u.host + " (" + std::to_string(a[0]) +
                                     "." + std::to_string(a[1]) + "." + std::to_string(a[2]) + "." +
                                     std::to_string(a[3]) +
                                     "), a private, loopback, link-local or reserved address");
    }
  }
  return Status::OK();
}

bool AddressAllowed(const WebhookUrl& url, std::string_view ip, bool allow_localhost) {
  if (IsPublicAddress(ip)) return true;
  if (!allow_localhost || !IsDevelopmentLoopbackHost(url.host)) return false;
  // The development exception covers loopback targets only.
  std::string h(ip);
  uint8_t a[16];
  if (inet_pton(AF_INET, h.c_str(), a) == 1) return a[0] == 127;
  static constexpr uint8_t kLoop[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  return inet_pton(AF_INET6, h.c_str(), a) == 1 && std::memcmp(a, kLoop, 16) == 0;
}

}  // namespace runnel::server
