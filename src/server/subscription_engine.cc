// The engine: wakes, retries, webhook deliveries, and the notes of writes that link streams.
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
using subscription_internal::EntriesJson;
using subscription_internal::json;
using subscription_internal::kSubsPrefix;
using subscription_internal::RandomId;
using subscription_internal::Snapshot;
using subscription_internal::StreamRoot;
using subscription_internal::UnitRandom;

namespace subscription_internal {

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

}  // namespace subscription_internal

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

}  // namespace runnel::server
