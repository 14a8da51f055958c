#include "server/http_types.h"

#include <algorithm>
#include <cctype>
#include <cstring>

namespace runnel::server {

void FieldList::MergeRepeated(bool join) {
  if (fields_.size() < 2) return;
  const bool sorted = fields_.size() > kMergeLinear;
  if (sorted) {
    std::stable_sort(fields_.begin(), fields_.end(),
                     [](const value_type& a, const value_type& b) { return a.first < b.first; });
  }
  // In place: fields_[0, kept) are the names seen so far, each once.
  size_t kept = 0;
  for (size_t i = 0; i < fields_.size(); ++i) {
    size_t same = kept;
    if (sorted) {
      if (kept > 0 && fields_[kept - 1].first == fields_[i].first) same = kept - 1;
    } else {
      for (size_t k = 0; k < kept; ++k) {
        if (fields_[k].first == fields_[i].first) {
          same = k;
          break;
        }
      }
    }
    if (same < kept) {
      if (join) fields_[same].second.append(", ").append(fields_[i].second);
    } else {
      if (kept != i) fields_[kept] = std::move(fields_[i]);
      ++kept;
    }
  }
  fields_.resize(kept);
}

namespace {

// The value of `name` among `fields`: lengths first (most names asked for are absent, and
// differ in length from the few present), then bytes.
std::optional<std::string_view> Lookup(const FieldList& fields, std::string_view name) {
  for (const auto& [field, value] : fields) {
    if (field.size() == name.size() && std::memcmp(field.data(), name.data(), name.size()) == 0) {
      return std::string_view(value);
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string_view> HttpRequest::Header(std::string_view name) const {
  return Lookup(headers, name);
}

std::optional<std::string_view> HttpRequest::Query(std::string_view name) const {
  return Lookup(query, name);
}

Route ParseRoute(std::string_view path, bool allow_tenants) {
  Route route;
  if (path == "/healthz") {
    route.kind = Route::Kind::kHealth;
    route.label = "healthz";
    return route;
  }
  if (path == "/" || path.starts_with("/ui/")) {
    route.kind = Route::Kind::kDashboard;  // dashboard.h
    route.label = "dashboard";
    return route;
  }
  if (path == "/metrics") {
    route.kind = Route::Kind::kMetrics;
    route.label = "metrics";
    return route;
  }
  if (path == "/v1/streams") {
    route.kind = Route::Kind::kList;
    route.label = "streams";
    return route;
  }
  constexpr std::string_view kChannelPrefix = "/v1/channels/";
  if (path.starts_with(kChannelPrefix)) {
    std::string_view rest = path.substr(kChannelPrefix.size());
    const size_t slash = rest.find('/');
    std::string_view id = rest.substr(0, slash);
    if (id.empty()) return route;
    if (slash != std::string_view::npos) {
      constexpr std::string_view kKeys = "/keys/";
      constexpr std::string_view kPartitions = "/partitions/";
      std::string_view tail = rest.substr(slash);
      if (tail.starts_with(kKeys) && tail.size() > kKeys.size()) {
        route.channel_key = std::string(tail.substr(kKeys.size()));
      } else if (tail.starts_with(kPartitions) && tail.size() > kPartitions.size()) {
        route.channel_partition = std::string(tail.substr(kPartitions.size()));
      } else {
        return route;
      }
    }
    route.kind = Route::Kind::kChannel;
    route.label = "channel";
    route.name = std::string(id);
    return route;
  }
  constexpr std::string_view kStreamPrefix = "/v1/stream/";
  constexpr std::string_view kTenantPrefix = "/v1/tenants/";
  if (path.starts_with(kStreamPrefix)) {
    std::string_view name = path.substr(kStreamPrefix.size());
    if (name.empty()) return route;
    route.kind = Route::Kind::kStream;
    route.label = "stream";
    route.name = std::string(name);
    return route;
  }
  if (allow_tenants && path.starts_with(kTenantPrefix)) {
    std::string_view rest = path.substr(kTenantPrefix.size());
    size_t slash = rest.find('/');
    if (slash == std::string_view::npos || slash == 0) return route;
    std::string_view tenant = rest.substr(0, slash);
    rest = rest.substr(slash);
    if (rest == "/streams") {
      route.kind = Route::Kind::kList;
      route.label = "tenant_streams";
      route.scope = StreamScope::Tenant(std::string(tenant));
      return route;
    }
    constexpr std::string_view kTenantStream = "/stream/";
    if (!rest.starts_with(kTenantStream) || rest.size() == kTenantStream.size()) return route;
    route.kind = Route::Kind::kStream;
    route.label = "tenant_stream";
    route.scope = StreamScope::Tenant(std::string(tenant));
    route.name = std::string(rest.substr(kTenantStream.size()));
  }
  return route;
}

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

std::string_view TrimBlanks(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::string PercentEncode(std::string_view text, bool keep_slash) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(text.size());
  for (unsigned char c : text) {
    const bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                       c == '-' || c == '_' || c == '.' || c == '~' || (keep_slash && c == '/');
    if (plain) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

std::optional<std::string> OriginFormOf(std::string_view target, std::string_view* authority) {
  size_t scheme = 0;
  for (std::string_view prefix : {"http://", "https://"}) {
    if (target.size() >= prefix.size() &&
        EqualsIgnoreCase(target.substr(0, prefix.size()), prefix)) {
      scheme = prefix.size();
    }
  }
  if (scheme == 0) return std::nullopt;
  const std::string_view rest = target.substr(scheme);
  const size_t end = std::min(rest.find('/'), rest.find('?'));
  *authority = rest.substr(0, end);
  if (end == std::string_view::npos) return "/";
  std::string origin(rest.substr(end));
  if (origin[0] == '?') origin.insert(0, 1, '/');
  return origin;
}

std::optional<std::string> PercentDecode(std::string_view text, bool plus_is_space) {
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  // Most paths and parameters have nothing to decode: one copy.
  if (text.find('%') == std::string_view::npos &&
      (!plus_is_space || text.find('+') == std::string_view::npos)) {
    return std::string(text);
  }
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '%') {
      if (i + 2 >= text.size()) return std::nullopt;
      int hi = hex(text[i + 1]);
      int lo = hex(text[i + 2]);
      if (hi < 0 || lo < 0) return std::nullopt;
      out.push_back(static_cast<char>(hi * 16 + lo));
      i += 2;
    } else if (c == '+' && plus_is_space) {
      out.push_back(' ');
    } else {
      out.push_back(c);
    }
  }
  return out;
}

bool ParseQuery(std::string_view query, FieldList* out) {
  while (!query.empty()) {
    size_t amp = query.find('&');
    std::string_view part = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    if (part.empty()) continue;
    size_t eq = part.find('=');
    auto key = PercentDecode(part.substr(0, eq), true);
    auto value = PercentDecode(
        eq == std::string_view::npos ? std::string_view() : part.substr(eq + 1), true);
    if (!key || !value) return false;
    out->Append(std::move(*key), std::move(*value));
  }
  out->MergeRepeated(/*join=*/false);
  return true;
}

}  // namespace runnel::server
