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
#include "server/webhook_url.h"

namespace runnel::server {

namespace {

using json = nlohmann::json;

constexpr std::string_view kReserved = "__ds/";
constexpr std::string_view kSubsPrefix = "__ds/subscriptions/";
constexpr char kStateStream[] = "__ds/subscriptions";
constexpr size_t kMaxPathBytes = 1024;
constexpr size_t kMaxTextBytes = 1024;
constexpr size_t kMaxWorkerBytes = 256;

std::string Hex(const unsigned char* data, size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    out += kDigits[data[i] >> 4];
    out += kDigits[data[i] & 15];
  }
  return out;
}

std::string RandomId(const char* prefix) {
  unsigned char bytes[12];
  if (RAND_bytes(bytes, sizeof(bytes)) != 1) std::abort();
  return prefix + Hex(bytes, sizeof(bytes));
}

double UnitRandom() {
  thread_local std::mt19937_64 rng(std::random_device{}());
  return std::uniform_real_distribution<double>(0.0, 1.0)(rng);
}

HttpResponse Error(int status, std::string code, std::string message, json extra = json::object()) {
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

bool ValidId(std::string_view id) {
  if (id.empty() || id.size() > SubscriptionService::kMaxIdBytes) return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' ||
           c == ':' || c == '~';
  });
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

// The literal part of a pattern before its first wildcard, for listing candidates.
std::string LiteralPrefix(std::string_view pattern) {
  return std::string(pattern.substr(0, pattern.find('*')));
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

std::string StreamRoot(const StreamScope& scope) {
  return scope.tenant() ? "/v1/tenants/" + *scope.tenant() + "/stream/" : "/v1/stream/";
}

}  // namespace

uint64_t RetryDelayMs(uint32_t attempt, double unit) {
  uint64_t base = SubscriptionService::kMaxRetryDelayMs;
  if (attempt >= 1 && attempt <= 6) base = std::min<uint64_t>(base, 1000ull << (attempt - 1));
  unit = std::clamp(unit, 0.0, 1.0);
  return static_cast<uint64_t>(static_cast<double>(base) * (0.8 + 0.4 * unit));
}

struct SubscriptionService::Sub {
  struct Link {
    bool glob = false;
    bool explicit_link = false;
    uint64_t acked = 0;
  };
  struct Entry {
    std::string path;
    std::string link_type;
    uint64_t acked = 0;
    uint64_t tail = 0;
  };

  std::string id;
  // Configuration (hashed).
  std::string type;  // "webhook" | "pull-wake"
  std::string pattern;
  std::vector<std::string> streams;
  std::string webhook_url;
  std::string wake_stream;
  uint64_t lease_ttl_ms = kDefaultLeaseMs;
  std::string description;
  std::string hash;
  // Persisted state.
  std::string base_url;
  uint64_t created_at_ms = 0;
  std::map<std::string, Link> links;
  uint64_t generation = 0;
  uint32_t attempts = 0;
  uint64_t next_attempt_at_ms = 0;  // 0: no retry scheduled
  uint64_t last_attempt_at_ms = 0;
  bool failed = false;
  bool parked = false;  // gave up after max_delivery_attempts
  // The current wake, persisted too: any node may be asked to claim, ack or fence it.
  bool wake_active = false;
  std::string wake_id;
  std::vector<Entry> snapshot;
  std::string holder;
  uint64_t lease_expires_ms = 0;  // 0: no lease running
  // Process-local.
  std::string delivering;  // the wake_id of this node's delivery in flight, if any
  bool dirty = true;

  bool webhook() const { return type == "webhook"; }
  // Ends the current wake and its lease (released, done, failed or timed out).
  void EndWake() {
    wake_active = false;
    wake_id.clear();
    snapshot.clear();
    holder.clear();
    lease_expires_ms = 0;
  }
  // A lease past its expiry has ended, on every node alike (7.3); nothing needs writing.
  bool ExpireLease(uint64_t now) {
    if (lease_expires_ms == 0 || now < lease_expires_ms) return false;
    EndWake();
    dirty = true;
    return true;
  }

  json ConfigJson() const {
    json c = {{"type", type},
              {"pattern", pattern.empty() ? json(nullptr) : json(pattern)},
              {"streams", streams},
              {"lease_ttl_ms", lease_ttl_ms},
              {"description", description.empty() ? json(nullptr) : json(description)}};
    if (webhook()) {
      c["webhook"] = {{"url", webhook_url}};
    } else {
      c["wake_stream"] = wake_stream;
    }
    return c;
  }

  json StateJson() const {
    json links_json = json::array();
    for (const auto& [path, link] : links) {
      links_json.push_back({{"path", path},
                            {"glob", link.glob},
                            {"explicit", link.explicit_link},
                            {"acked", link.acked}});
    }
    return {{"id", id},
            {"config", ConfigJson()},
            {"hash", hash},
            {"base_url", base_url},
            {"created_at_ms", created_at_ms},
            {"links", links_json},
            {"generation", generation},
            {"attempts", attempts},
            {"next_attempt_at_ms", next_attempt_at_ms},
            {"last_attempt_at_ms", last_attempt_at_ms},
            {"failed", failed},
            {"parked", parked},
            {"wake", WakeJson()}};
  }

  json WakeJson() const {
    if (!wake_active) return nullptr;
    json entries = json::array();
    for (const auto& e : snapshot) {
      entries.push_back(
          {{"path", e.path}, {"link_type", e.link_type}, {"acked", e.acked}, {"tail", e.tail}});
    }
    return {{"id", wake_id},
            {"holder", holder},
            {"lease_expires_ms", lease_expires_ms},
            {"snapshot", entries}};
  }
};

struct SubscriptionService::ScopeState {
  explicit ScopeState(StreamScope s) : scope(std::move(s)) {}
  StreamScope scope;
  std::map<std::string, std::unique_ptr<Sub>> subs;
  uint64_t state_records = 0;  // records in the state stream, head to tail
  uint64_t next = 1;           // the state stream's next offset as last read
  std::string token_key;       // the global scope only: the deployment's token key
  // The global scope only: the public signing keys nodes recorded, kid -> (x, recorded at ms).
  std::map<std::string, std::pair<std::string, uint64_t>> public_keys;
  bool loaded = false;  // read successfully at least once
  // Pattern subscriptions another node created after this node loaded the scope: streams
  // written through this node before it read them were not linked by those writes (Tick).
  std::vector<std::string> arrived;
};

namespace {

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

}  // namespace

namespace {

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

}  // namespace

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

// --- State ---

SubscriptionService::ScopeState& SubscriptionService::LoadScope(const StreamScope& scope) {
  std::string label = scope.Label();
  auto it = scopes_.find(label);
  if (it != scopes_.end()) return *it->second;
  it = scopes_.emplace(label, std::make_unique<ScopeState>(scope)).first;
  Status loaded = Refresh(*it->second);
  if (!loaded.ok()) {
    // Read again on the next request or engine pass.
    spdlog::warn("subscriptions ({}): cannot read the state stream yet: {}", label,
                 loaded.ToString());
  }
  return *it->second;
}

Status SubscriptionService::Refresh(ScopeState& scope) {
  const size_t before = scope.subs.size();
  Status status = Status::OK();
  std::optional<std::set<std::string>> known;  // the ids before this read, once it finds news
  for (;;) {
    auto page =
        registry_.ReadSince(scope.scope, kStateStream, scope.next, StreamRegistry::kMaxReadLimit);
    if (!page.ok()) {
      // No state stream yet: no subscription was ever made in this scope.
      if (page.status().code() != StatusCode::kNotFound) status = page.status();
      break;
    }
    if (page->empty()) break;
    if (scope.loaded && !known) {
      known.emplace();
      for (const auto& [id, sub] : scope.subs) known->insert(id);
    }
    if (page->front().offset > scope.next && scope.next > 1) {
      // Another node compacted the stream past this node's position. The head holds every live
      // subscription (compaction rewrites them all before pruning), so start over from there.
      std::map<std::string, std::unique_ptr<Sub>> old;
      old.swap(scope.subs);
      for (const auto& event : *page) Apply(scope, event);
      // A subscription absent from the rewrite was deleted; delivery state of survivors stays.
      for (auto& [id, sub] : scope.subs) {
        auto was = old.find(id);
        if (was != old.end()) sub->delivering = was->second->delivering;
      }
      scope.state_records = page->size();
    } else {
      for (const auto& event : *page) Apply(scope, event);
      scope.state_records += page->size();
    }
    scope.next = page->back().offset + 1;
  }
  if (known) {
    for (const auto& [id, sub] : scope.subs) {
      if (!sub->pattern.empty() && !known->count(id)) {
        scope.arrived.push_back(id);
        poked_ = true;
      }
    }
  }
  if (status.ok()) scope.loaded = true;
  live_subs_ += scope.subs.size();
  live_subs_ -= before;
  return status;
}

void SubscriptionService::Apply(ScopeState& scope, const StreamEvent& event) {
  const std::string label = scope.scope.Label();
  json record = ParseJsonBounded(event.payload);
  if (record.is_object() && record.contains("token_key") && record["token_key"].is_string()) {
    auto key = Base64UrlDecode(record["token_key"].get<std::string>());
    if (key && !key->empty()) scope.token_key = *key;
    return;
  }
  if (record.is_object() && record.contains("public_key") && record["public_key"].is_object()) {
    const json& key = record["public_key"];
    const std::string kid = key.value("kid", "");
    const std::string x = key.value("x", "");
    if (!kid.empty() && !x.empty()) {
      scope.public_keys[kid] = {x, key.value("at_ms", uint64_t{0})};
      TrimPublicKeys(&scope.public_keys);
    }
    return;
  }
  if (record.is_discarded() || !record.is_object() || !record.contains("id")) {
    spdlog::warn("subscriptions ({}): skipping unreadable record {}", label, event.offset);
    return;
  }
  std::string id = record.value("id", "");
  if (record.value("deleted", false)) {
    scope.subs.erase(id);
    return;
  }
  auto sub = std::make_unique<Sub>();
  bool rejected = false;
  // Persisted URLs were checked at creation; do not re-judge them under today's flags.
  Status parsed = ParseConfig(record.value("config", json::object()), true, sub.get(), &rejected);
  if (!parsed.ok()) {
    spdlog::warn("subscriptions ({}): skipping record {}: {}", label, event.offset,
                 parsed.ToString());
    return;
  }
  sub->id = id;
  sub->base_url = record.value("base_url", "");
  sub->created_at_ms = record.value("created_at_ms", uint64_t{0});
  sub->generation = record.value("generation", uint64_t{0});
  sub->attempts = record.value("attempts", uint32_t{0});
  sub->next_attempt_at_ms = record.value("next_attempt_at_ms", uint64_t{0});
  sub->last_attempt_at_ms = record.value("last_attempt_at_ms", uint64_t{0});
  sub->failed = record.value("failed", false);
  sub->parked = record.value("parked", false);
  for (const auto& l : record.value("links", json::array())) {
    Sub::Link link;
    link.glob = l.value("glob", false);
    link.explicit_link = l.value("explicit", false);
    link.acked = l.value("acked", uint64_t{0});
    sub->links[l.value("path", "")] = link;
  }
  // Records written before wakes were persisted have none: such a wake is simply not current.
  if (auto w = record.find("wake"); w != record.end() && w->is_object()) {
    sub->wake_active = true;
    sub->wake_id = w->value("id", "");
    sub->holder = w->value("holder", "");
    sub->lease_expires_ms = w->value("lease_expires_ms", uint64_t{0});
    for (const auto& e : w->value("snapshot", json::array())) {
      sub->snapshot.push_back({e.value("path", ""), e.value("link_type", "glob"),
                               e.value("acked", uint64_t{0}), e.value("tail", uint64_t{0})});
    }
  }
  auto& slot = scope.subs[id];
  if (slot) {
    // Same object, so references held by a caller stay valid; this node's delivery stays.
    sub->delivering = std::move(slot->delivering);
    *slot = std::move(*sub);
  } else {
    slot = std::move(sub);
  }
}

Status SubscriptionService::Write(ScopeState& scope, const json& record) {
  std::vector<AppendRecord> batch{{std::nullopt, Dump(record)}};
  AppendOptions options;
  options.expected_offset = scope.next;
  auto appended = registry_.AppendBatch(scope.scope, kStateStream, batch, options);
  if (!appended.ok() && appended.status().code() == StatusCode::kNotFound) {
    CreateStreamOptions create;
    create.content_type = "application/json";
    Status created = registry_.CreateStream(scope.scope, kStateStream, create);
    if (!created.ok() && created.code() != StatusCode::kAlreadyExists) return created;
    appended = registry_.AppendBatch(scope.scope, kStateStream, batch, options);
  }
  if (!appended.ok()) return appended.status();
  scope.next = appended->last_offset + 1;
  ++scope.state_records;
  return Status::OK();
}

void SubscriptionService::MaybeCompact(ScopeState& scope) {
  if (scope.state_records <= 4 * scope.subs.size() + options_.compaction_slack_records) return;
  std::vector<AppendRecord> all;
  if (!scope.token_key.empty()) {
    all.push_back({std::nullopt, Dump({{"token_key", Base64UrlEncode(scope.token_key)}})});
  }
  for (const auto& [kid, key] : scope.public_keys) {
    all.push_back({std::nullopt, Dump(PublicKeyRecord(kid, key.first, key.second))});
  }
  for (const auto& [id, live] : scope.subs) all.push_back({std::nullopt, Dump(live->StateJson())});
  if (all.empty()) return;
  AppendOptions options;
  options.expected_offset = scope.next;
  // A conflict leaves the compaction to the next write.
  auto rewritten = registry_.AppendBatch(scope.scope, kStateStream, std::move(all), options);
  if (!rewritten.ok()) return;
  scope.next = rewritten->last_offset + 1;
  scope.state_records += rewritten->last_offset - rewritten->first_offset + 1;
  auto pruned = registry_.Prune(scope.scope, kStateStream, rewritten->first_offset - 1);
  if (pruned.ok()) scope.state_records = rewritten->last_offset - rewritten->first_offset + 1;
}

Status SubscriptionService::Commit(ScopeState& scope, Sub next) {
  Status written = Write(scope, next.StateJson());
  if (!written.ok()) {
    conflicted_ = written.code() == StatusCode::kConflict;
    return written;
  }
  auto& slot = scope.subs[next.id];
  if (slot) {
    *slot = std::move(next);
  } else {
    slot = std::make_unique<Sub>(std::move(next));
    live_subs_ += 1;
  }
  MaybeCompact(scope);
  return Status::OK();
}

Status SubscriptionService::CommitDelete(ScopeState& scope, const std::string& id) {
  Status written = Write(scope, {{"id", id}, {"deleted", true}});
  if (!written.ok()) {
    conflicted_ = written.code() == StatusCode::kConflict;
    return written;
  }
  if (scope.subs.erase(id) != 0) live_subs_ -= 1;
  MaybeCompact(scope);
  return Status::OK();
}

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

namespace {

std::vector<SubscriptionService::Sub::Entry> Snapshot(
    const SubscriptionService::Sub& sub, const std::function<uint64_t(const std::string&)>& tail) {
  std::vector<SubscriptionService::Sub::Entry> out;
  for (const auto& [path, link] : sub.links) {
    out.push_back({path, link.explicit_link ? "explicit" : "glob", link.acked, tail(path)});
  }
  return out;
}

json EntriesJson(const std::vector<SubscriptionService::Sub::Entry>& entries) {
  json out = json::array();
  for (const auto& e : entries) {
    out.push_back({{"path", e.path},
                   {"link_type", e.link_type},
                   {"acked_offset", FormatOffset(e.acked)},
                   {"tail_offset", FormatOffset(e.tail)},
                   {"has_pending", e.tail > e.acked}});
  }
  return out;
}

}  // namespace

// --- Engine ---

void SubscriptionService::IssueWake(ScopeState& scope, Sub& sub, uint64_t now,
                                    std::vector<Job>* jobs) {
  const std::string& key = token_key();
  if (sub.webhook() && key.empty()) {
    sub.dirty = true;  // Tick could not load the key; a later pass will
    return;
  }
  Sub next = sub;
  next.generation += 1;
  next.wake_id = RandomId("w_");
  next.wake_active = true;
  next.holder.clear();
  next.snapshot = Snapshot(sub, [&](const std::string& p) { return TailOf(scope.scope, p); });
  // The webhook's lease starts now (7.3); a pull-wake wake nobody claims within the lease TTL
  // ends the same way, and pending work is woken again.
  next.lease_expires_ms = now + sub.lease_ttl_ms;
  if (next.webhook()) next.last_attempt_at_ms = now;
  Status committed = Commit(scope, std::move(next));
  if (!committed.ok()) {
    // Another node changed the subscription first (perhaps issuing this very wake), or the
    // store failed: decide again on the next pass, from the stored state.
    if (committed.code() != StatusCode::kConflict) {
      spdlog::warn("subscription {}: cannot record its wake: {}", sub.id, committed.ToString());
    }
    sub.dirty = true;
    poked_ = true;
    return;
  }
  if (sub.webhook()) {
    sub.delivering = sub.wake_id;
    json claims = {{"k", "callback"},     {"s", scope.scope.Label()}, {"i", sub.id},
                   {"g", sub.generation}, {"w", sub.wake_id},         {"e", now + 3600 * 1000}};
    std::string root = sub.base_url + StreamRoot(scope.scope);
    json body = {{"subscription_id", sub.id},
                 {"wake_id", sub.wake_id},
                 {"generation", sub.generation},
                 {"streams", EntriesJson(sub.snapshot)},
                 {"callback_url", root + std::string(kSubsPrefix) + sub.id + "/callback"},
                 {"callback_token", MintToken(key, Dump(claims))}};
    Job job;
    job.key = scope.scope.Label() + "\n" + sub.id;
    job.wake_id = sub.wake_id;
    job.post.url = sub.webhook_url;
    job.post.headers = {{"Content-Type", "application/json"}};
    job.post.body = body.dump(-1, ' ', false, json::error_handler_t::replace);
    jobs->push_back(std::move(job));
    return;
  }
  std::string stream;
  for (const auto& e : sub.snapshot) {
    if (e.tail > e.acked) {
      stream = e.path;
      break;
    }
  }
  json event = {{"type", "wake"},
                {"subscription_id", sub.id},
                {"stream", stream},
                {"generation", sub.generation},
                {"ts", now}};
  auto written = registry_.AppendBatch(scope.scope, sub.wake_stream, {{std::nullopt, Dump(event)}});
  if (!written.ok()) {
    spdlog::warn("subscription {}: cannot write a wake event to {}: {}", sub.id, sub.wake_stream,
                 written.status().ToString());
    FailAttempt(scope, sub, now);
  }
}

void SubscriptionService::FailAttempt(ScopeState& scope, Sub& sub, uint64_t now) {
  Sub next = sub;
  next.EndWake();
  next.failed = true;
  next.attempts += 1;
  next.last_attempt_at_ms = now;
  if (next.attempts >= options_.max_delivery_attempts) {
    next.parked = true;
    next.next_attempt_at_ms = 0;
  } else {
    next.next_attempt_at_ms = now + RetryDelayMs(next.attempts, UnitRandom());
  }
  Status persisted = Commit(scope, std::move(next));
  if (!persisted.ok()) {
    // The wake still stands in the stored state; its lease expiry ends it.
    if (persisted.code() != StatusCode::kConflict) {
      spdlog::warn("subscription {}: cannot persist its retry state: {}", sub.id,
                   persisted.ToString());
    }
    sub.dirty = true;
  }
}

void SubscriptionService::Tick() {
  std::vector<Job> jobs;
  {
    MutexLock lock(mu_);
    const uint64_t now = registry_.clock().NowMs();
    bool recheck = now >= next_recheck_ms_;
    if (recheck) next_recheck_ms_ = now + options_.recheck_interval_ms;
    uint64_t deadline = next_recheck_ms_;
    LoadScope(StreamScope::Global());
    // Before any scope is walked: webhook wakes mint tokens (see EnsureTokenKey).
    if (live_subs_.load() > 0) {
      if (Status key = EnsureTokenKey(); !key.ok()) {
        spdlog::warn("subscriptions: cannot load the token key: {}", key.ToString());
      }
      if (Status shared = EnsurePublicKeyShared(); !shared.ok()) {
        spdlog::warn("subscriptions: cannot record this node's signing key: {}", shared.ToString());
      }
    }
    for (auto& [label, scope] : scopes_) {
      // Other nodes' changes first: their wakes, claims and acks.
      Status fresh = Refresh(*scope);
      if (!fresh.ok()) {
        spdlog::warn("subscriptions ({}): cannot read the state stream: {}", label,
                     fresh.ToString());
        continue;
      }
      LinkArrived(*scope);
      for (auto& [id, owned] : scope->subs) {
        Sub& sub = *owned;
        sub.ExpireLease(now);
        if (sub.lease_expires_ms != 0) deadline = std::min(deadline, sub.lease_expires_ms);
        if (sub.wake_active || !sub.delivering.empty() || sub.parked) continue;
        bool due = false;
        if (sub.next_attempt_at_ms != 0) {
          if (now < sub.next_attempt_at_ms) {
            deadline = std::min(deadline, sub.next_attempt_at_ms);
            continue;
          }
          due = true;
        }
        if (!sub.dirty && !due && !recheck) continue;
        sub.dirty = false;
        if (!Pending(*scope, sub)) {
          if (sub.next_attempt_at_ms != 0) {
            Sub next = sub;
            next.next_attempt_at_ms = 0;
            if (!Commit(*scope, std::move(next)).ok()) sub.dirty = true;
          }
          continue;
        }
        IssueWake(*scope, sub, now, &jobs);
        if (sub.lease_expires_ms != 0) deadline = std::min(deadline, sub.lease_expires_ms);
      }
    }
    next_deadline_ms_ = deadline;
    conflicted_ = false;  // a lost race here is decided again on the next pass
  }
  Enqueue(std::move(jobs));
}

void SubscriptionService::Enqueue(std::vector<Job> jobs) {
  if (jobs.empty()) return;
  std::vector<Job> refused;
  {
    MutexLock lock(mu_);
    for (auto& job : jobs) {
      if (jobs_.size() >= kMaxQueuedDeliveries) {
        refused.push_back(std::move(job));
      } else {
        jobs_.push_back(std::move(job));
      }
    }
  }
  jobs_cv_.notify_all();
  for (const auto& job : refused) {
    WebhookReply reply;
    reply.error = "the delivery queue is full";
    OnReply(job, reply);
  }
}

void SubscriptionService::OnReply(const Job& job, const WebhookReply& reply) {
  {
    MutexLock lock(mu_);
    size_t nl = job.key.find('\n');
    auto scope_it = scopes_.find(job.key.substr(0, nl));
    if (scope_it == scopes_.end()) return;
    ScopeState& scope = *scope_it->second;
    const std::string id = job.key.substr(nl + 1);
    if (auto it = scope.subs.find(id);
        it != scope.subs.end() && it->second->delivering == job.wake_id) {
      it->second->delivering.clear();
    }
    const bool delivered = reply.responded && reply.status >= 200 && reply.status <= 299;
    if (delivered) {
      spdlog::debug("subscription {}: webhook delivered", id);
    } else {
      spdlog::info("subscription {}: webhook delivery failed: {}", id,
                   reply.responded ? "HTTP " + std::to_string(reply.status) : reply.error);
    }
    for (int attempt = 0; attempt < kMaxCommitAttempts; ++attempt) {
      conflicted_ = false;
      if (!Refresh(scope).ok()) break;
      auto it = scope.subs.find(id);
      if (it == scope.subs.end()) break;
      Sub& sub = *it->second;
      const uint64_t now = registry_.clock().NowMs();
      sub.ExpireLease(now);
      // The wake ended meanwhile (lease expiry, a callback, another node): the reply is stale.
      if (!sub.wake_active || sub.wake_id != job.wake_id) break;
      if (!delivered) {
        FailAttempt(scope, sub, now);
      } else {
        Sub next = sub;
        const bool was_failed = next.failed || next.attempts != 0;
        next.failed = false;
        next.attempts = 0;
        json answer = ParseJsonBounded(reply.body);
        const bool done = answer.is_object() && answer.value("done", false) == true;
        if (done) {
          // Synchronous completion: ack the wake's snapshot and release the lease (7.1).
          for (const auto& e : next.snapshot) {
            auto link = next.links.find(e.path);
            if (link != next.links.end()) link->second.acked = std::max(link->second.acked, e.tail);
          }
          next.EndWake();
          next.dirty = true;
        }
        if (done || was_failed) (void)Commit(scope, std::move(next));
      }
      if (!conflicted_) break;
    }
    conflicted_ = false;
    poked_ = true;
  }
  engine_cv_.notify_all();
}

void SubscriptionService::RunDeliveries() {
  for (;;) {
    Job job;
    {
      MutexLock lock(mu_);
      if (jobs_.empty()) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    WebhookPost post = job.post;
    uint64_t t = registry_.clock().NowMs() / 1000;
    post.headers.emplace_back("Webhook-Signature", signer_->SignatureHeader(t, post.body));
    OnReply(job, options_.poster(post));
  }
}

void SubscriptionService::EngineLoop() {
  MutexLock lock(mu_);
  while (!stopping_) {
    lock.Unlock();
    Tick();
    lock.Lock();
    const uint64_t now = registry_.clock().NowMs();
    uint64_t wait = next_deadline_ms_ > now ? next_deadline_ms_ - now : 1;
    wait = std::clamp<uint64_t>(wait, 1, 1000);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait);
    while (!poked_ && !stopping_) {
      if (lock.WaitUntil(engine_cv_, deadline) == std::cv_status::timeout) break;
    }
    poked_ = false;
  }
}

void SubscriptionService::DeliveryLoop() {
  MutexLock lock(mu_);
  while (!stopping_) {
    while (!stopping_ && jobs_.empty()) lock.Wait(jobs_cv_);
    if (stopping_) return;
    Job job = std::move(jobs_.front());
    jobs_.pop_front();
    lock.Unlock();
    WebhookPost post = job.post;
    uint64_t t = registry_.clock().NowMs() / 1000;
    post.headers.emplace_back("Webhook-Signature", signer_->SignatureHeader(t, post.body));
    WebhookReply reply = options_.poster(post);
    OnReply(job, reply);
    lock.Lock();
  }
}

void SubscriptionService::NoteWrite(const Route& route) {
  if (route.kind != Route::Kind::kStream || Matches(route)) return;
  // Fast path: no subscription in any loaded scope, and the global scope is loaded at Create
  // (tenant scopes load lazily, so their writes take the slow path until loaded).
  if (live_subs_.load() == 0 && !route.scope.tenant()) return;
  bool poke = false;
  {
    MutexLock lock(mu_);
    ScopeState& scope = LoadScope(route.scope);
    const uint64_t now = registry_.clock().NowMs();
    std::vector<std::string_view> path = PathSegments(route.name);
    // Works on this node's view; a conflicting change from another node is read and the
    // subscription decided again.
    for (int attempt = 0; attempt < kMaxCommitAttempts; ++attempt) {
      conflicted_ = false;
      for (auto& [id, owned] : scope.subs) {
        Sub& sub = *owned;
        const bool link = !sub.links.count(route.name);
        // Never its own wake stream: each wake would then leave pending work for the next.
        if (link &&
            (sub.pattern.empty() || sub.links.size() >= kMaxLinks ||
             route.name == sub.wake_stream || !PathGlobMatch(PathSegments(sub.pattern), path))) {
          continue;
        }
        const bool revive = sub.parked && now >= sub.last_attempt_at_ms + kMaxRetryDelayMs;
        if (link || revive) {
          Sub next = sub;
          // Linked before this append, so the append itself is pending (6.2).
          if (link) next.links[route.name].glob = true;
          if (revive) {
            next.parked = false;
            next.attempts = 0;
          }
          if (!Commit(scope, std::move(next)).ok()) continue;
        }
        sub.dirty = true;
        // Only an idle subscription needs the engine now; a busy one re-checks when its wake
        // ends.
        if (!sub.wake_active && sub.delivering.empty() && !sub.parked &&
            sub.next_attempt_at_ms == 0) {
          poke = true;
        }
      }
      if (!conflicted_ || !Refresh(scope).ok()) break;
    }
    conflicted_ = false;
    if (poke) poked_ = true;
  }
  if (poke) engine_cv_.notify_all();
}

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
  if (body.contains("acks")) {
    if (!body["acks"].is_array() || body["acks"].size() > kMaxLinks) {
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
      const uint64_t tail = TailOf(scope.scope, path);
      uint64_t position = offset->kind == OffsetQuery::Kind::kPosition ? offset->position
                          : offset->kind == OffsetQuery::Kind::kNow    ? tail
                                                                       : 0;
      if (position > tail) {
        return Error(400, "BAD_REQUEST", "offset is beyond the tail of '" + path + "'");
      }
      acks.emplace_back(path, position);
    }
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
