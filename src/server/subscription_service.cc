#include "server/subscription_service.h"

#include <openssl/rand.h>
#include <openssl/sha.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <set>
#include <utility>

#include "base/json_bounded.h"
#include "base/thread_name.h"
#include "base/utf8.h"
#include "server/http_errors.h"
#include "server/offset_token.h"
#include "server/path_glob.h"
#include "server/subscription_internal.h"
#include "server/webhook_url.h"

namespace runnel::server {

using subscription_internal::Dump;
using subscription_internal::Error;
using subscription_internal::FromStatus;
using subscription_internal::json;
using subscription_internal::kMaxPathBytes;
using subscription_internal::kReserved;
using subscription_internal::kSubsPrefix;
using subscription_internal::NoContent;
using subscription_internal::ParseConfig;
using subscription_internal::RandomId;
using subscription_internal::StreamRoot;
using subscription_internal::UnitRandom;
using subscription_internal::ValidPath;

namespace {

constexpr size_t kMaxTextBytes = 1024;

std::string Hex(const unsigned char* data, size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    out += kDigits[data[i] >> 4];
    out += kDigits[data[i] & 15];
  }
  return out;
}

// The literal part of a pattern before its first wildcard, for listing candidates.
std::string LiteralPrefix(std::string_view pattern) {
  return std::string(pattern.substr(0, pattern.find('*')));
}

}  // namespace

namespace subscription_internal {

std::string RandomId(const char* prefix) {
  unsigned char bytes[12];
  if (RAND_bytes(bytes, sizeof(bytes)) != 1) std::abort();
  return prefix + Hex(bytes, sizeof(bytes));
}

double UnitRandom() {
  thread_local std::mt19937_64 rng(std::random_device{}());
  return std::uniform_real_distribution<double>(0.0, 1.0)(rng);
}

HttpResponse Error(int status, std::string code, std::string message, json extra) {
  json error = {{"code", std::move(code)}, {"message", std::move(message)}};
  for (auto& [k, v] : extra.items()) error[k] = v;
  return JsonResponse(status, json{{"error", error}});
}

HttpResponse NoContent() {
  HttpResponse r;
  r.status = 204;
  r.Set("Cache-Control", "no-store");
  return r;
}

HttpResponse FromStatus(const Status& status) {
  HttpResponse r;
  r.status = HttpStatusFor(status);
  r.Set("Content-Type", "application/json");
  r.Set("Cache-Control", "no-store");
  r.body = ErrorBody(status);
  return r;
}

// A stream path a subscription may link: non-empty, bounded, not reserved.
bool ValidPath(std::string_view path) {
  return !path.empty() && path.size() <= kMaxPathBytes && !path.starts_with(kReserved) &&
         path != "__ds" && IsValidUtf8(path);
}

// Serializes state and events. Everything in them is UTF-8 already (paths are checked); should
// anything not be, it is replaced rather than thrown from a writer's callback.
std::string Dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string StreamRoot(const StreamScope& scope) {
  return scope.tenant() ? "/v1/tenants/" + *scope.tenant() + "/stream/" : "/v1/stream/";
}

// Fills a Sub's configuration from a PUT body (or a persisted "config"). kInvalidArgument with
// the reason; *url_rejected tells a refused webhook URL apart.
Status ParseConfig(const json& body, bool allow_localhost, SubscriptionService::Sub* sub,
                   bool* url_rejected) {
  *url_rejected = false;
  if (!body.is_object()) return Status::InvalidArgument("the body must be a JSON object");
  auto text = [&](const char* name, std::string* out, size_t max) -> Status {
    auto it = body.find(name);
    if (it == body.end() || it->is_null()) return Status::OK();
    if (!it->is_string()) return Status::InvalidArgument(std::string(name) + " must be a string");
    *out = it->get<std::string>();
    if (out->size() > max) {
      return Status::InvalidArgument(std::string(name) + " is longer than " + std::to_string(max) +
                                     " bytes");
    }
    return Status::OK();
  };
  RUNNEL_RETURN_IF_ERROR(text("type", &sub->type, 32));
  if (sub->type != "webhook" && sub->type != "pull-wake") {
    return Status::InvalidArgument("type must be \"webhook\" or \"pull-wake\"");
  }
  RUNNEL_RETURN_IF_ERROR(text("pattern", &sub->pattern, kMaxPathBytes));
  RUNNEL_RETURN_IF_ERROR(text("description", &sub->description, kMaxTextBytes));
  if (auto it = body.find("streams"); it != body.end() && !it->is_null()) {
    if (!it->is_array() || it->size() > SubscriptionService::kMaxLinks) {
      return Status::InvalidArgument("streams must be an array of at most " +
                                     std::to_string(SubscriptionService::kMaxLinks) + " paths");
    }
    std::set<std::string> unique;
    for (const auto& s : *it) {
      if (!s.is_string() || !ValidPath(s.get<std::string>())) {
        return Status::InvalidArgument("streams must hold non-empty stream paths outside __ds/");
      }
      unique.insert(s.get<std::string>());
    }
    sub->streams.assign(unique.begin(), unique.end());
  }
  if (sub->pattern.empty() && sub->streams.empty()) {
    return Status::InvalidArgument("a subscription needs a pattern or streams");
  }
  if (auto it = body.find("lease_ttl_ms"); it != body.end() && !it->is_null()) {
    if (!it->is_number_integer() ||
        it->get<int64_t>() < int64_t(SubscriptionService::kMinLeaseMs) ||
        it->get<int64_t>() > int64_t(SubscriptionService::kMaxLeaseMs)) {
      return Status::InvalidArgument("lease_ttl_ms must be an integer from 1000 to 600000");
    }
    sub->lease_ttl_ms = it->get<uint64_t>();
  }
  if (sub->webhook()) {
    auto it = body.find("webhook");
    if (it == body.end() || !it->is_object() || !it->contains("url") || !(*it)["url"].is_string()) {
      return Status::InvalidArgument("a webhook subscription needs webhook.url");
    }
    sub->webhook_url = (*it)["url"].get<std::string>();
    Status ok = CheckWebhookUrl(sub->webhook_url, allow_localhost);
    if (!ok.ok()) {
      *url_rejected = true;
      return ok;
    }
  } else {
    RUNNEL_RETURN_IF_ERROR(text("wake_stream", &sub->wake_stream, kMaxPathBytes));
    if (!ValidPath(sub->wake_stream)) {
      return Status::InvalidArgument("a pull-wake subscription needs wake_stream, a stream path");
    }
  }
  std::string normalized = Dump(sub->ConfigJson());
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(normalized.data()), normalized.size(), digest);
  sub->hash = Hex(digest, sizeof(digest));
  return Status::OK();
}

}  // namespace subscription_internal

uint64_t RetryDelayMs(uint32_t attempt, double unit) {
  uint64_t base = SubscriptionService::kMaxRetryDelayMs;
  if (attempt >= 1 && attempt <= 6) base = std::min<uint64_t>(base, 1000ull << (attempt - 1));
  unit = std::clamp(unit, 0.0, 1.0);
  return static_cast<uint64_t>(static_cast<double>(base) * (0.8 + 0.4 * unit));
}

// --- Lifecycle ---

Result<std::unique_ptr<SubscriptionService>> SubscriptionService::Create(
    StreamRegistry registry, SubscriptionOptions options) {
  auto signer = WebhookSigner::LoadOrCreate(options.signing_key_path);
  if (!signer.ok()) return signer.status();
  auto service = std::unique_ptr<SubscriptionService>(
      new SubscriptionService(std::move(registry), std::move(options), std::move(*signer)));
  {
    MutexLock lock(service->mu_);
    service->LoadScope(StreamScope::Global());
    // Other nodes list this node's key from now on (retried before requests and engine passes
    // when the store cannot be written yet).
    if (Status shared = service->EnsurePublicKeyShared(); !shared.ok()) {
      spdlog::warn("subscriptions: cannot record this node's signing key yet: {}",
                   shared.ToString());
    }
  }
  if (service->options_.start_threads) {
    service->threads_.emplace_back([s = service.get()] { s->EngineLoop(); });
    SetThreadName(service->threads_.back(), "sub-engine");
    for (size_t i = 0; i < std::max<size_t>(1, service->options_.delivery_threads); ++i) {
      service->threads_.emplace_back([s = service.get()] { s->DeliveryLoop(); });
      SetThreadName(service->threads_.back(), "sub-deliver");
    }
  }
  return service;
}

SubscriptionService::SubscriptionService(StreamRegistry registry, SubscriptionOptions options,
                                         std::unique_ptr<WebhookSigner> signer)
    : registry_(std::move(registry)), options_(std::move(options)), signer_(std::move(signer)) {
  if (!options_.poster) {
    WebhookClientOptions client = options_.client;
    client.allow_localhost = options_.allow_localhost_webhooks;
    options_.poster = [client](const WebhookPost& post) { return PostWebhook(client, post); };
  }
}

SubscriptionService::~SubscriptionService() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  engine_cv_.notify_all();
  jobs_cv_.notify_all();
  for (auto& t : threads_) t.join();
}

bool SubscriptionService::Matches(const Route& route) {
  return route.kind == Route::Kind::kStream &&
         (route.name.starts_with(kReserved) || route.name == "__ds");
}

bool SubscriptionService::SelfAuthenticated(const Route& route) {
  if (!Matches(route) || !route.name.starts_with(kSubsPrefix)) return false;
  std::string_view rest = std::string_view(route.name).substr(kSubsPrefix.size());
  size_t slash = rest.find('/');
  if (slash == std::string_view::npos) return false;
  std::string_view op = rest.substr(slash + 1);
  return op == "ack" || op == "release" || op == "callback";
}

// --- Linking ---

Result<bool> SubscriptionService::LinkMatching(const StreamScope& scope, Sub* sub, bool at_tail) {
  if (sub->pattern.empty()) return false;
  bool changed = false;
  auto pattern = PathSegments(sub->pattern);
  ListStreamsOptions list;
  list.prefix = LiteralPrefix(sub->pattern);
  list.limit = StreamRegistry::kMaxReadLimit;
  while (sub->links.size() < kMaxLinks) {
    auto page = registry_.ListStreamsPage(scope, list);
    if (!page.ok()) return page.status();
    for (const auto& d : *page) {
      if (!ValidPath(d.name) || sub->links.size() >= kMaxLinks) continue;
      if (d.name == sub->wake_stream || !PathGlobMatch(pattern, PathSegments(d.name))) continue;
      auto [link, inserted] = sub->links.try_emplace(d.name);
      if (!at_tail && !inserted) continue;
      link->second.glob = true;
      if (at_tail && !link->second.explicit_link) link->second.acked = d.next_offset - 1;
      changed = true;
    }
    if (page->size() < list.limit) break;
    list.start_after = page->back().name;
  }
  return changed;
}

void SubscriptionService::LinkArrived(ScopeState& scope) {
  // Streams first written through this node before it read the subscription were not linked by
  // those writes. Link them from offset zero (their records all came after the creator linked
  // what existed); a lost race or a failed listing is tried again on the next pass.
  for (std::string& id : std::exchange(scope.arrived, {})) {
    auto it = scope.subs.find(id);
    if (it == scope.subs.end()) continue;
    Sub next = *it->second;
    auto linked = LinkMatching(scope.scope, &next, /*at_tail=*/false);
    if (!linked.ok() || (*linked && !Commit(scope, std::move(next)).ok())) {
      scope.arrived.push_back(std::move(id));
      continue;
    }
    it->second->dirty = true;
  }
}

uint64_t SubscriptionService::TailOf(const StreamScope& scope, const std::string& path) const {
  auto d = registry_.Describe(scope, path);
  return d ? d->next_offset - 1 : 0;
}

bool SubscriptionService::Pending(const ScopeState& scope, const Sub& sub) const {
  for (const auto& [path, link] : sub.links) {
    if (TailOf(scope.scope, path) > link.acked) return true;
  }
  return false;
}

}  // namespace runnel::server
