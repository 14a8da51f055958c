// Wake tokens (HMAC key shared through the global scope's state) and the nodes' public signing
// keys (JWKS).
#include "server/subscription_service.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <utility>

#include "base/json_bounded.h"
#include "base/utf8.h"
#include "server/http_errors.h"
#include "server/offset_token.h"
#include "server/path_glob.h"
#include "server/subscription_internal.h"

namespace runnel::server {

using subscription_internal::Error;
using subscription_internal::json;
using subscription_internal::PublicKeyRecord;
using subscription_internal::TrimPublicKeys;

namespace subscription_internal {

// The state record of a node's public signing key.
json PublicKeyRecord(const std::string& kid, const std::string& x, uint64_t at_ms) {
  return {{"public_key", {{"kid", kid}, {"x", x}, {"at_ms", at_ms}}}};
}

// Keeps the kMaxPublicKeys most recently recorded keys (nodes that restart without a key file
// record a new key each time).
constexpr size_t kMaxPublicKeys = 128;
void TrimPublicKeys(std::map<std::string, std::pair<std::string, uint64_t>>* keys) {
  while (keys->size() > kMaxPublicKeys) {
    auto oldest = keys->begin();
    for (auto it = keys->begin(); it != keys->end(); ++it) {
      if (it->second.second < oldest->second.second) oldest = it;
    }
    keys->erase(oldest);
  }
}

}  // namespace subscription_internal

// --- Tokens and signing keys ---

Status SubscriptionService::EnsureTokenKey() {
  ScopeState& global = LoadScope(StreamScope::Global());
  for (int attempt = 0; attempt < kMaxCommitAttempts; ++attempt) {
    if (!global.token_key.empty()) return Status::OK();
    RUNNEL_RETURN_IF_ERROR(Refresh(global));
    if (!global.token_key.empty()) return Status::OK();
    std::string key = NewTokenKey();
    Status written = Write(global, {{"token_key", Base64UrlEncode(key)}});
    if (written.ok()) {
      global.token_key = std::move(key);
      MaybeCompact(global);
      return Status::OK();
    }
    if (written.code() != StatusCode::kConflict) return written;
  }
  return Status::Unavailable("the subscription state is changing too fast to create a token key");
}

Status SubscriptionService::LoadTokenKey() {
  ScopeState& global = LoadScope(StreamScope::Global());
  if (!global.token_key.empty()) return Status::OK();
  return Refresh(global);
}

Status SubscriptionService::EnsurePublicKeyShared() {
  if (!registry_.store().SharedWithOtherNodes()) return Status::OK();
  ScopeState& global = LoadScope(StreamScope::Global());
  const std::string x = Base64UrlEncode(signer_->public_key());
  for (int attempt = 0; attempt < kMaxCommitAttempts; ++attempt) {
    if (global.public_keys.count(signer_->kid()) != 0) return Status::OK();
    RUNNEL_RETURN_IF_ERROR(Refresh(global));
    if (global.public_keys.count(signer_->kid()) != 0) return Status::OK();
    const uint64_t now = registry_.clock().NowMs();
    Status written = Write(global, PublicKeyRecord(signer_->kid(), x, now));
    if (written.ok()) {
      global.public_keys[signer_->kid()] = {x, now};
      TrimPublicKeys(&global.public_keys);
      MaybeCompact(global);
      return Status::OK();
    }
    if (written.code() != StatusCode::kConflict) return written;
  }
  return Status::Unavailable(
      "the subscription state is changing too fast to record this node's signing key");
}

std::string SubscriptionService::JwksJson() {
  json keys = json::parse(signer_->JwksJson())["keys"];
  // Another node's key differs from this node's JWK only in kid and x.
  auto jwk = [own = keys[0]](const std::string& kid, const std::string& x) {
    json key = own;
    key["kid"] = kid;
    key["x"] = x;
    return key;
  };
  ScopeState& global = LoadScope(StreamScope::Global());
  if (registry_.store().SharedWithOtherNodes()) {
    Status fresh = Refresh(global);
    if (!fresh.ok()) {
      spdlog::warn("subscriptions: cannot read the other nodes' signing keys: {}",
                   fresh.ToString());
    }
  }
  std::vector<std::pair<uint64_t, std::string>> others;
  for (const auto& [kid, key] : global.public_keys) {
    if (kid != signer_->kid()) others.emplace_back(key.second, kid);
  }
  std::sort(others.rbegin(), others.rend());
  for (const auto& [at, kid] : others) keys.push_back(jwk(kid, global.public_keys[kid].first));
  return json{{"keys", keys}}.dump();
}

const std::string& SubscriptionService::token_key() {
  return LoadScope(StreamScope::Global()).token_key;
}

std::optional<HttpResponse> SubscriptionService::CheckWakeToken(const HttpRequest& request,
                                                                const std::string& scope_label,
                                                                const std::string& id,
                                                                const char* kind,
                                                                json* claims_out) {
  auto auth = request.Header("authorization");
  std::string_view token = auth.value_or("");
  if (!token.starts_with("Bearer ")) {
    return Error(401, "UNAUTHORIZED", "send the wake's token as Authorization: Bearer <token>");
  }
  // Loaded by Handle; empty when no token was ever issued (then none is valid).
  auto claims_text = token_key().empty() ? std::nullopt : VerifyToken(token_key(), token.substr(7));
  json claims = claims_text ? ParseJsonBounded(*claims_text) : json();
  const uint64_t now = registry_.clock().NowMs();
  if (!claims.is_object() || claims.value("k", "") != kind ||
      claims.value("s", "") != scope_label || claims.value("i", "") != id ||
      claims.value("e", uint64_t{0}) <= now) {
    return Error(401, "UNAUTHORIZED", "the token is not valid for this subscription");
  }
  if (claims_out != nullptr) *claims_out = std::move(claims);
  return std::nullopt;
}

}  // namespace runnel::server
