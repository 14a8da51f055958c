// Declarations shared by the subscription service's files (subscription_service.cc: lifecycle,
// configuration and linking; subscription_state.cc: the state stream; subscription_tokens.cc:
// wake tokens and signing keys; subscription_engine.cc: wakes, retries and deliveries;
// subscription_http.cc: the HTTP handlers). Internal to the service.
#ifndef RUNNEL_SERVER_SUBSCRIPTION_INTERNAL_H_
#define RUNNEL_SERVER_SUBSCRIPTION_INTERNAL_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "server/http_types.h"
#include "server/subscription_service.h"

namespace runnel::server {

struct SubscriptionService::Sub {
  using json = nlohmann::json;

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

namespace subscription_internal {

using json = nlohmann::json;

constexpr std::string_view kReserved = "__ds/";
constexpr std::string_view kSubsPrefix = "__ds/subscriptions/";
constexpr char kStateStream[] = "__ds/subscriptions";
constexpr size_t kMaxPathBytes = 1024;

// A random identifier: prefix followed by 24 hex digits.
std::string RandomId(const char* prefix);
// Uniform in [0, 1), per thread.
double UnitRandom();

HttpResponse Error(int status, std::string code, std::string message, json extra = json::object());
HttpResponse NoContent();
HttpResponse FromStatus(const Status& status);

// A stream path a subscription may link: non-empty, bounded, not reserved.
bool ValidPath(std::string_view path);

// Serializes state and events. Everything in them is UTF-8 already (paths are checked); should
// anything not be, it is replaced rather than thrown from a writer's callback.
std::string Dump(const json& j);

// The HTTP path prefix of a scope's streams.
std::string StreamRoot(const StreamScope& scope);

// Fills a Sub's configuration from a PUT body (or a persisted "config"). kInvalidArgument with
// the reason; *url_rejected tells a refused webhook URL apart.
Status ParseConfig(const json& body, bool allow_localhost, SubscriptionService::Sub* sub,
                   bool* url_rejected);

// The state record of a node's public signing key.
json PublicKeyRecord(const std::string& kid, const std::string& x, uint64_t at_ms);
// Keeps the most recently recorded public keys (nodes that restart without a key file record a
// new key each time).
void TrimPublicKeys(std::map<std::string, std::pair<std::string, uint64_t>>* keys);

// A wake's entries: every linked stream with its acked offset and current tail.
std::vector<SubscriptionService::Sub::Entry> Snapshot(
    const SubscriptionService::Sub& sub, const std::function<uint64_t(const std::string&)>& tail);
json EntriesJson(const std::vector<SubscriptionService::Sub::Entry>& entries);

}  // namespace subscription_internal

}  // namespace runnel::server

#endif  // RUNNEL_SERVER_SUBSCRIPTION_INTERNAL_H_
