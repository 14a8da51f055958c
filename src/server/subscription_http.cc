// The HTTP handlers of the __ds/subscriptions API.
#include "server/subscription_service.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <ctime>
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

using subscription_internal::Dump;
using subscription_internal::EntriesJson;
using subscription_internal::Error;
using subscription_internal::FromStatus;
using subscription_internal::json;
using subscription_internal::kReserved;
using subscription_internal::kSubsPrefix;
using subscription_internal::NoContent;
using subscription_internal::ParseConfig;
using subscription_internal::RandomId;
using subscription_internal::Snapshot;
using subscription_internal::StreamRoot;
using subscription_internal::UnitRandom;
using subscription_internal::ValidPath;

namespace {

constexpr size_t kMaxWorkerBytes = 256;

bool ValidId(std::string_view id) {
  if (id.empty() || id.size() > SubscriptionService::kMaxIdBytes) return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' ||
           c == ':' || c == '~';
  });
}

std::string IsoTime(uint64_t ms) {
  std::time_t secs = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[40];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
  char out[48];
  std::snprintf(out, sizeof(out), "%s.%03uZ", buf, static_cast<unsigned>(ms % 1000));
  return out;
}

// The acks of an ack request ({"acks": [{stream, offset}]}), each checked against the
// subscription's links and the stream's tail; an error response when one is not valid.
std::optional<HttpResponse> ParseAcks(const json& body, const SubscriptionService::Sub& sub,
                                      const std::function<uint64_t(const std::string&)>& tail_of,
                                      std::vector<std::pair<std::string, uint64_t>>* acks) {
  if (body.contains("acks")) {
    if (!body["acks"].is_array() || body["acks"].size() > SubscriptionService::kMaxLinks) {
      return Error(400, "BAD_REQUEST", "acks must be an array of {stream, offset}");
    }
    for (const auto& a : body["acks"]) {
      if (!a.is_object() || !a.contains("stream") || !a["stream"].is_string() ||
          !a.contains("offset") || !a["offset"].is_string()) {
        return Error(400, "BAD_REQUEST", "each ack needs stream and offset strings");
      }
      std::string path = a["stream"].get<std::string>();
      if (!sub.links.count(path)) {
        return Error(400, "BAD_REQUEST",
                     "stream '" + path + "' is not linked to this subscription");
      }
      auto offset = ParseOffset(a["offset"].get<std::string>());
      if (!offset.ok()) return Error(400, "BAD_REQUEST", std::string(offset.status().message()));
      const uint64_t tail = tail_of(path);
      uint64_t position = offset->kind == OffsetQuery::Kind::kPosition ? offset->position
                          : offset->kind == OffsetQuery::Kind::kNow    ? tail
                                                                       : 0;
      if (position > tail) {
        return Error(400, "BAD_REQUEST", "offset is beyond the tail of '" + path + "'");
      }
      acks->emplace_back(path, position);
    }
  }
  return std::nullopt;
}

}  // namespace

// --- HTTP ---

HttpResponse SubscriptionService::Handle(const Route& route, const HttpRequest& request) {
  std::string_view rest =
      std::string_view(route.name).substr(std::min(route.name.size(), kReserved.size()));
  if (rest == "jwks.json") {
    if (request.method != "GET" && request.method != "HEAD") {
      return Error(405, "METHOD_NOT_ALLOWED", "use GET for the key set");
    }
    HttpResponse r;
    r.Set("Content-Type", "application/jwk-set+json");
    r.Set("Cache-Control", "public, max-age=300");
    {
      MutexLock lock(mu_);
      r.body = JwksJson();
    }
    return r;
  }
  if (!route.name.starts_with(kSubsPrefix)) {
    return Error(404, "NOT_FOUND", "no such reserved __ds endpoint");
  }
  rest = std::string_view(route.name).substr(kSubsPrefix.size());
  std::string id(rest.substr(0, rest.find('/')));
  if (!ValidId(id)) {
    return Error(400, "BAD_REQUEST",
                 "a subscription id is 1-200 characters of letters, digits and - _ . : ~");
  }
  MutexLock lock(mu_);
  if (SelfAuthenticated(route)) {
    // The wake token is checked before anything is written, the scope is loaded or the
    // subscription looked up: a caller without one learns nothing (which ids exist, of which
    // kind) and makes the server write, load or remember nothing (any tenant name would
    // otherwise add a scope to memory). The token key is only read here: without one, no
    // token was ever issued.
    if (Status key = LoadTokenKey(); !key.ok()) return FromStatus(key);
    const char* kind = route.name.ends_with("/callback") ? "callback" : "claim";
    if (auto refused = CheckWakeToken(request, route.scope.Label(), id, kind, nullptr)) {
      return *refused;
    }
  } else if (route.name.ends_with("/claim")) {
    // Loaded before any scope is walked (see EnsureTokenKey); the handlers only read it.
    if (Status key = EnsureTokenKey(); !key.ok()) return FromStatus(key);
  }
  // Before this node signs anything another node's key set should vouch for.
  if (Status shared = EnsurePublicKeyShared(); !shared.ok()) {
    spdlog::warn("subscriptions: cannot record this node's signing key: {}", shared.ToString());
  }
  ScopeState& scope = LoadScope(route.scope);
  HttpResponse r;
  for (int attempt = 0;; ++attempt) {
    // What other nodes wrote since this one last read the scope comes first.
    Status fresh = Refresh(scope);
    if (!fresh.ok()) {
      r = FromStatus(fresh);
      break;
    }
    conflicted_ = false;
    r = HandleSubscription(scope, id, route, request);
    if (!conflicted_) break;
    conflicted_ = false;
    if (attempt + 1 == kMaxCommitAttempts) {
      r = Error(503, "SUBSCRIPTION_BUSY",
                "subscription '" + id + "' is being changed through other nodes; retry");
      r.Set("Retry-After", "1");
      break;
    }
    // Another node wrote this scope first. Let it finish before trying again; the scope's
    // state object stays in place (scopes are never removed).
    lock.Unlock();
    const double cap_ms = static_cast<double>(std::min(1 << std::min(attempt, 5), 32));
    std::this_thread::sleep_for(
        std::chrono::microseconds(static_cast<int64_t>(UnitRandom() * cap_ms * 1000)));
    lock.Lock();
  }
  bool poke = poked_;
  lock.Unlock();
  if (poke) engine_cv_.notify_all();
  return r;
}

// Long because it is the one routing table of the per-subscription operations; each branch is
// short and the heavy ones (Put, Claim, Settle) are methods of their own.
HttpResponse SubscriptionService::HandleSubscription(ScopeState& scope, const std::string& id,
                                                     const Route& route,
                                                     const HttpRequest& request) {
  std::string_view rest = std::string_view(route.name).substr(kSubsPrefix.size() + id.size());
  const std::string& method = request.method;
  if (rest.empty() && method == "PUT") return Put(scope, id, request);
  auto it = scope.subs.find(id);
  if (it == scope.subs.end()) {
    return Error(404, "SUBSCRIPTION_NOT_FOUND", "no subscription '" + id + "'");
  }
  Sub& sub = *it->second;
  const uint64_t now = registry_.clock().NowMs();
  if (rest.empty()) {
    if (method == "GET" || method == "HEAD") {
      json body = sub.ConfigJson();
      std::string root = (options_.public_base_url.empty()
                              ? options_.default_scheme + "://" +
                                    std::string(request.Header("host").value_or("localhost"))
                              : options_.public_base_url) +
                         StreamRoot(scope.scope);
      body["id"] = sub.id;
      body["subscription_id"] = sub.id;
      body["streams"] = json::array();
      for (const auto& [path, link] : sub.links) {
        body["streams"].push_back({{"path", path},
                                   {"link_type", link.explicit_link ? "explicit" : "glob"},
                                   {"acked_offset", FormatOffset(link.acked)}});
      }
      if (sub.webhook()) {
        body["webhook"]["signing"] = {
            {"alg", "ed25519"}, {"kid", signer_->kid()}, {"jwks_url", root + "__ds/jwks.json"}};
        body["wake_stream"] = nullptr;
      } else {
        body["webhook"] = nullptr;
      }
      body["created_at"] = IsoTime(sub.created_at_ms);
      body["status"] = sub.failed ? "failed" : "active";
      body["generation"] = sub.generation;
      return JsonResponse(200, body);
    }
    if (method == "DELETE") {
      Status s = CommitDelete(scope, id);
      if (!s.ok()) return FromStatus(s);
      return NoContent();
    }
    return Error(405, "METHOD_NOT_ALLOWED", "use PUT, GET or DELETE on a subscription");
  }
  if (rest.starts_with("/streams")) {
    std::string_view tail = rest.substr(std::string_view("/streams").size());
    if (tail.empty() && method == "POST") {
      json body = ParseJsonBounded(request.body);
      if (!body.is_object() || !body.contains("streams") || !body["streams"].is_array()) {
        return Error(400, "BAD_REQUEST", "the body must be {\"streams\": [paths]}");
      }
      std::vector<std::string> add;
      for (const auto& s : body["streams"]) {
        if (!s.is_string() || !ValidPath(s.get<std::string>())) {
          return Error(400, "BAD_REQUEST",
                       "streams must hold non-empty stream paths outside __ds/");
        }
        if (!sub.links.count(s.get<std::string>())) add.push_back(s.get<std::string>());
      }
      if (sub.links.size() + add.size() > kMaxLinks) {
        return Error(400, "TOO_MANY_STREAMS",
                     "a subscription links at most " + std::to_string(kMaxLinks) + " streams");
      }
      Sub next = sub;
      for (const auto& s : body["streams"]) {
        std::string path = s.get<std::string>();
        auto [link, inserted] = next.links.try_emplace(path);
        if (inserted) link->second.acked = TailOf(scope.scope, path);
        link->second.explicit_link = true;
      }
      Status persisted = Commit(scope, std::move(next));
      if (!persisted.ok()) return FromStatus(persisted);
      return NoContent();
    }
    if (tail.size() > 1 && tail[0] == '/' && method == "DELETE") {
      std::string path(tail.substr(1));
      Sub next = sub;
      auto link = next.links.find(path);
      if (link != next.links.end() && link->second.explicit_link) {
        const bool still_globbed =
            !next.pattern.empty() && path != next.wake_stream && PathGlobMatch(next.pattern, path);
        if (still_globbed) {
          link->second.explicit_link = false;
          link->second.glob = true;
        } else {
          next.links.erase(link);
        }
        Status persisted = Commit(scope, std::move(next));
        if (!persisted.ok()) return FromStatus(persisted);
      }
      return NoContent();
    }
    return Error(405, "METHOD_NOT_ALLOWED",
                 "use POST .../streams to add links and DELETE .../streams/<path> to remove one");
  }
  if (method != "POST") return Error(405, "METHOD_NOT_ALLOWED", "use POST");
  // An expired lease ends before anyone can act on it (7.3).
  if (sub.ExpireLease(now)) poked_ = true;
  if (rest == "/claim") return Claim(scope, sub, request);
  if (rest == "/ack" || rest == "/release") {
    if (sub.webhook()) {
      return Error(400, "BAD_REQUEST", "ack and release are for pull-wake subscriptions");
    }
    return Settle(scope, sub, request, rest == "/release", "claim");
  }
  if (rest == "/callback") {
    if (!sub.webhook()) {
      return Error(400, "BAD_REQUEST", "callback is for webhook subscriptions");
    }
    return Settle(scope, sub, request, false, "callback");
  }
  return Error(404, "NOT_FOUND", "no such subscription endpoint");
}

HttpResponse SubscriptionService::Put(ScopeState& scope, const std::string& id,
                                      const HttpRequest& request) {
  json body = ParseJsonBounded(request.body);
  if (body.is_discarded()) return Error(400, "BAD_REQUEST", "the body is not valid JSON");
  auto sub = std::make_unique<Sub>();
  bool url_rejected = false;
  Status parsed = ParseConfig(body, options_.allow_localhost_webhooks, sub.get(), &url_rejected);
  if (!parsed.ok()) {
    return Error(400, url_rejected ? "WEBHOOK_URL_REJECTED" : "BAD_REQUEST",
                 std::string(parsed.message()));
  }
  auto existing = scope.subs.find(id);
  if (existing != scope.subs.end()) {
    if (existing->second->hash != sub->hash) {
      return Error(409, "CONFLICT",
                   "subscription '" + id + "' exists with a different configuration");
    }
    Sub& current = *existing->second;
    if (current.parked) {
      // Re-confirmation revives a subscription whose deliveries gave up.
      Sub next = current;
      next.parked = false;
      next.attempts = 0;
      next.dirty = true;
      Status persisted = Commit(scope, std::move(next));
      if (!persisted.ok()) return FromStatus(persisted);
      poked_ = true;
    }
    HttpRequest get = request;
    get.method = "GET";
    Route route;
    route.kind = Route::Kind::kStream;
    route.scope = scope.scope;
    route.name = std::string(kSubsPrefix) + id;
    return HandleSubscription(scope, id, route, get);
  }
  if (scope.subs.size() >= kMaxSubscriptionsPerScope) {
    return Error(
        429, "TOO_MANY_SUBSCRIPTIONS",
        "a scope holds at most " + std::to_string(kMaxSubscriptionsPerScope) + " subscriptions");
  }
  sub->id = id;
  sub->created_at_ms = registry_.clock().NowMs();
  sub->base_url = options_.public_base_url.empty()
                      ? options_.default_scheme + "://" +
                            std::string(request.Header("host").value_or("localhost"))
                      : options_.public_base_url;
  for (const auto& path : sub->streams) {
    auto& link = sub->links[path];
    link.explicit_link = true;
    link.acked = TailOf(scope.scope, path);
  }
  // Eager backfill, linked at the current tails so history is not replayed (6.2).
  if (auto linked = LinkMatching(scope.scope, sub.get(), /*at_tail=*/true); !linked.ok()) {
    return FromStatus(linked.status());
  }
  Status persisted = Commit(scope, std::move(*sub));
  if (!persisted.ok()) return FromStatus(persisted);
  HttpRequest get = request;
  get.method = "GET";
  Route route;
  route.kind = Route::Kind::kStream;
  route.scope = scope.scope;
  route.name = std::string(kSubsPrefix) + id;
  HttpResponse r = HandleSubscription(scope, id, route, get);
  r.status = 201;
  return r;
}

HttpResponse SubscriptionService::Claim(ScopeState& scope, Sub& sub, const HttpRequest& request) {
  if (sub.webhook()) return Error(400, "BAD_REQUEST", "claim is for pull-wake subscriptions");
  json body = request.body.empty() ? json::object() : ParseJsonBounded(request.body);
  if (!body.is_object()) return Error(400, "BAD_REQUEST", "the body must be a JSON object");
  std::string worker = "anonymous";
  if (body.contains("worker")) {
    if (!body["worker"].is_string() || body["worker"].get<std::string>().empty() ||
        body["worker"].get<std::string>().size() > kMaxWorkerBytes) {
      return Error(400, "BAD_REQUEST", "worker must be a non-empty string of at most 256 bytes");
    }
    worker = body["worker"].get<std::string>();
  }
  if (!sub.holder.empty()) {
    return Error(409, "ALREADY_CLAIMED", "another worker holds the lease",
                 {{"current_holder", sub.holder}, {"generation", sub.generation}});
  }
  const std::string& key = token_key();  // loaded by Handle
  if (key.empty()) return FromStatus(Status::Unavailable("the token key could not be loaded"));
  const uint64_t now = registry_.clock().NowMs();
  Sub next = sub;
  if (!next.wake_active) {
    // No wake outstanding: the claim itself starts one (no wake event is needed).
    next.generation += 1;
    next.wake_id = RandomId("w_");
    next.wake_active = true;
  }
  next.snapshot = Snapshot(sub, [&](const std::string& p) { return TailOf(scope.scope, p); });
  next.holder = worker;
  next.lease_expires_ms = now + sub.lease_ttl_ms;
  Status persisted = Commit(scope, std::move(next));
  if (!persisted.ok()) return FromStatus(persisted);
  poked_ = true;  // the engine's next deadline is this lease
  json claims = {{"k", "claim"},        {"s", scope.scope.Label()}, {"i", sub.id},
                 {"g", sub.generation}, {"w", sub.wake_id},         {"e", now + 3600 * 1000}};
  return JsonResponse(200, {{"wake_id", sub.wake_id},
                            {"generation", sub.generation},
                            {"token", MintToken(key, Dump(claims))},
                            {"streams", EntriesJson(sub.snapshot)},
                            {"lease_ttl_ms", sub.lease_ttl_ms}});
}

HttpResponse SubscriptionService::Settle(ScopeState& scope, Sub& sub, const HttpRequest& request,
                                         bool release, const char* kind) {
  json claims;
  if (auto refused = CheckWakeToken(request, scope.scope.Label(), sub.id, kind, &claims)) {
    return *refused;
  }
  const uint64_t now = registry_.clock().NowMs();
  json body = ParseJsonBounded(request.body);
  if (!body.is_object() || !body.contains("generation") ||
      !body["generation"].is_number_unsigned() || !body.contains("wake_id") ||
      !body["wake_id"].is_string()) {
    return Error(400, "BAD_REQUEST", "the body needs wake_id and generation");
  }
  const bool current = sub.wake_active && claims.value("g", uint64_t{0}) == sub.generation &&
                       claims.value("w", "") == sub.wake_id &&
                       body["generation"].get<uint64_t>() == sub.generation &&
                       body["wake_id"].get<std::string>() == sub.wake_id &&
                       (sub.webhook() || !sub.holder.empty());
  if (!current) {
    return Error(409, "FENCED", "the wake is stale: its generation or wake_id is not current",
                 {{"generation", sub.generation}});
  }
  Sub next = sub;
  if (release) {
    next.EndWake();
    Status persisted = Commit(scope, std::move(next));
    if (!persisted.ok()) return FromStatus(persisted);
    sub.dirty = true;  // pending work gets a fresh wake event (7.2)
    poked_ = true;
    return NoContent();
  }
  // Validate every ack before applying any.
  std::vector<std::pair<std::string, uint64_t>> acks;
  if (auto refused = ParseAcks(
          body, sub, [&](const std::string& p) { return TailOf(scope.scope, p); }, &acks)) {
    return *refused;
  }
  for (const auto& [path, position] : acks) {
    auto& link = next.links[path];
    link.acked = std::max(link.acked, position);
  }
  const bool done = body.value("done", false) == true;
  if (done) {
    next.EndWake();
    next.failed = false;
    next.attempts = 0;
  } else {
    next.lease_expires_ms = now + sub.lease_ttl_ms;  // heartbeat (7.3), seen by every node
  }
  Status persisted = Commit(scope, std::move(next));
  if (!persisted.ok()) return FromStatus(persisted);
  poked_ = true;
  bool next_wake = false;
  if (done) {
    next_wake = Pending(scope, sub);
    sub.dirty = next_wake;
  }
  return JsonResponse(200, {{"ok", true}, {"next_wake", next_wake}});
}

}  // namespace runnel::server
