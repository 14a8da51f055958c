// The state stream of a scope's subscriptions: load, refresh, apply, write, compact.
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

using subscription_internal::Dump;
using subscription_internal::json;
using subscription_internal::kStateStream;
using subscription_internal::ParseConfig;
using subscription_internal::PublicKeyRecord;
using subscription_internal::TrimPublicKeys;

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

}  // namespace runnel::server
