// SubscriptionService: the protocol's reserved subscription API (PROTOCOL.md sections 6-7) under
// `<stream root>/__ds/`, for the global stream root (/v1/stream/) and every tenant's
// (/v1/tenants/<t>/stream/); each scope has its own subscriptions.
//
//   PUT    __ds/subscriptions/<id>                 create (201) or re-confirm (200); 409 if the
//                                                  normalized configuration's hash differs
//   GET    __ds/subscriptions/<id>                 the subscription and its stream cursors
//   DELETE __ds/subscriptions/<id>                 tombstone (204); later callbacks are refused
//   POST   __ds/subscriptions/<id>/streams         add explicit links (204)
//   DELETE __ds/subscriptions/<id>/streams/<path>  remove an explicit link (204)
//   POST   __ds/subscriptions/<id>/claim           pull-wake: take the lease (409 ALREADY_CLAIMED)
//   POST   __ds/subscriptions/<id>/ack             pull-wake: ack / heartbeat (claim token)
//   POST   __ds/subscriptions/<id>/release         pull-wake: give the lease back (claim token)
//   POST   __ds/subscriptions/<id>/callback        webhook: ack / heartbeat (callback token)
//   GET    __ds/jwks.json                          the webhook signing keys (webhook_signer.h)
//
// State and durability. A subscription's whole state is persisted: its configuration, stream
// links and acked offsets, generation counter, webhook retry schedule, and the current wake
// (wake_id, its stream snapshot, the lease holder and expiry). Every change appends a JSON
// snapshot of that one subscription (or a tombstone) to the internal stream
// `__ds/subscriptions` of the scope, through the registry, so it is exactly as durable as the
// configured store (memory, log or PostgreSQL). The append is conditional on the stream's next
// offset as this service last read it: when another node sharing the store (PostgreSQL) wrote
// first, the append is refused, the service reads the new snapshots and decides again (at most
// kMaxCommitAttempts times, with a random pause between tries, then 503 SUBSCRIPTION_BUSY). So
// nodes behind a load balancer share subscriptions, claims, leases and fencing exactly; each
// request first reads what other nodes wrote since. The stream is compacted (all live snapshots
// rewritten, older records pruned) once it holds more than 4 x live + 256 records; a node that
// finds its read position pruned reloads from the head. Acked offsets are kept there rather than as
// consumer-group cursors: a group cursor cannot be removed, so a deleted subscription would hold
// back prune forever. The HMAC key of callback and claim tokens is one random key per store, kept
// in the global scope's state stream, so a token minted by one node is accepted by every node and
// across restarts, for as long as its wake is current. Leases expire by the registry clock's wall
// time (nodes' clocks should agree within a fraction of lease_ttl_ms). Process-local: the
// webhook delivery in flight.
//
// Wakes. A write through the HTTP server calls NoteWrite, which links a newly matching stream
// (at offset zero: "linked before that append") and marks the subscription for a check. The
// engine thread issues a wake (generation + 1, new wake_id) for every idle subscription with
// pending work: pull-wake subscriptions get a wake event appended to their wake stream;
// webhook subscriptions get a signed POST from a delivery thread. Appends made through the
// embedded library rather than HTTP, or through another node, are noticed by a periodic
// re-check (recheck_interval_ms). Wakes are issued by the conditional state append, so when
// several nodes see the same pending work only one issues the wake. A pull-wake wake that no
// worker claims within lease_ttl_ms ends like an expired lease, and pending work gets a new
// wake event (a worker that missed the event, or a node that stopped between recording a wake
// and writing its event, cannot leave the subscription waiting forever). The engine re-reads
// every loaded scope's state stream at least once a second. When it finds a pattern
// subscription another node created, it links the matching streams not linked yet from offset
// zero: streams written through this node before it knew the subscription, whose writes
// linked nothing, so they still wake it (up to a second late).
// A failed webhook delivery ends the wake; it is retried after RetryDelayMs(attempt) (1 s
// doubling to 60 s, +-20% jitter) with a new wake, at most max_delivery_attempts times in a
// row; then the subscription stays `failed` without further attempts until a new append
// arrives at least 60 s after the last attempt, or the subscription is re-confirmed.
//
// Authorization. The HTTP server's access gate admits every route here like the stream routes
// of the same scope, except ack, release and callback, which authenticate with the
// subscription-scoped token in `Authorization: Bearer` (SelfAuthenticated).
//
// Limits: kMaxSubscriptionsPerScope, kMaxLinks per subscription, kMaxIdBytes, lease_ttl_ms in
// [1 s, 10 min], delivery queue kMaxQueuedDeliveries (a full queue counts as a failed attempt).
//
// Thread-safety: every public method may be called from any thread. Handle and NoteWrite block
// on the store. One mutex guards all subscription state.
#ifndef RUNNEL_SERVER_SUBSCRIPTION_SERVICE_H_
#define RUNNEL_SERVER_SUBSCRIPTION_SERVICE_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "base/mutex.h"
#include "runnel/registry.h"
#include "server/http_types.h"
#include "server/webhook_client.h"
#include "server/webhook_signer.h"

namespace runnel::server {

struct SubscriptionOptions {
  // The Ed25519 signing key file; empty keeps a process-local key.
  std::string signing_key_path;
  // The localhost development exception for webhook URLs (webhook_url.h).
  bool allow_localhost_webhooks = false;
  // Scheme and authority used in callback_url and jwks_url, e.g. "https://streams.example".
  // Empty: default_scheme + "://" plus the request's Host header.
  std::string public_base_url;
  // "https" when the server serves TLS.
  std::string default_scheme = "http";
  uint64_t recheck_interval_ms = 5000;
  // A scope's state stream is compacted (its live state rewritten, older records pruned) once
  // it holds more than 4 records per live subscription plus this many.
  size_t compaction_slack_records = 256;
  size_t delivery_threads = 2;
  uint32_t max_delivery_attempts = 10;
  WebhookClientOptions client;
  // False: no engine or delivery threads; the caller drives Tick() and RunDeliveries() (tests).
  bool start_threads = true;
  // Sends one webhook; null means PostWebhook(client, ...). For tests.
  std::function<WebhookReply(const WebhookPost&)> poster;
};

// The delay before retry `attempt` (1-based): min(1 s * 2^(attempt-1), 60 s), scaled by
// 0.8 + 0.4 * unit (unit in [0, 1)), so +-20% jitter.
uint64_t RetryDelayMs(uint32_t attempt, double unit);

class SubscriptionService {
 public:
  static constexpr size_t kMaxSubscriptionsPerScope = 1024;
  static constexpr size_t kMaxLinks = 1024;
  static constexpr size_t kMaxIdBytes = 200;
  static constexpr size_t kMaxQueuedDeliveries = 1024;
  static constexpr uint64_t kMinLeaseMs = 1000;
  static constexpr uint64_t kMaxLeaseMs = 600000;
  static constexpr uint64_t kDefaultLeaseMs = 30000;
  static constexpr uint64_t kMaxRetryDelayMs = 60000;
  // Conditional state appends tried per request before answering 503 SUBSCRIPTION_BUSY. A
  // request that lost a race waits a random 0..min(2^attempt, 32) ms (without the lock) before
  // the next try, so nodes writing one scope at once do not keep colliding.
  static constexpr int kMaxCommitAttempts = 16;

  // Loads or creates the signing key and starts the threads (unless options say not to).
  static Result<std::unique_ptr<SubscriptionService>> Create(StreamRegistry registry,
                                                             SubscriptionOptions options);
  // Stops and joins the threads; queued deliveries are dropped.
  ~SubscriptionService();
  SubscriptionService(const SubscriptionService&) = delete;
  SubscriptionService& operator=(const SubscriptionService&) = delete;

  // True for stream routes whose name is under the reserved `__ds/` prefix.
  static bool Matches(const Route& route);
  // True for the ack, release and callback endpoints, which carry their own token.
  static bool SelfAuthenticated(const Route& route);

  HttpResponse Handle(const Route& route, const HttpRequest& request);
  // After a successful write to `route`'s stream (any method).
  void NoteWrite(const Route& route);

  // One engine pass at the registry clock's now: expire leases, issue due wakes, queue
  // deliveries. The engine thread calls it; with start_threads = false tests call it.
  void Tick();
  // Sends every queued delivery on the calling thread and applies the replies (tests).
  void RunDeliveries();

  const WebhookSigner& signer() const { return *signer_; }

  struct Sub;
  struct ScopeState;

 private:
  struct Job {
    std::string key;
    std::string wake_id;
    WebhookPost post;
  };
  SubscriptionService(StreamRegistry registry, SubscriptionOptions options,
                      std::unique_ptr<WebhookSigner> signer);

  // Every method below that takes a ScopeState runs with mu_ held.
  ScopeState& LoadScope(const StreamScope& scope) RUNNEL_REQUIRES(mu_);
  // Applies the state records other nodes appended since this one last read the scope.
  Status Refresh(ScopeState& scope) RUNNEL_REQUIRES(mu_);
  void Apply(ScopeState& scope, const StreamEvent& event) RUNNEL_REQUIRES(mu_);
  // Links every stream the subscription's pattern matches (up to kMaxLinks links): at its tail
  // when `at_tail` (a new subscription does not replay history, 6.2), else only streams not
  // linked yet, from offset zero (see Tick). Returns whether a link was added or changed.
  Result<bool> LinkMatching(const StreamScope& scope, Sub* sub, bool at_tail);
  // Links, for each pattern subscription another node created since the last pass
  // (ScopeState::arrived), the matching streams not linked yet, from offset zero.
  void LinkArrived(ScopeState& scope) RUNNEL_REQUIRES(mu_);
  // Appends `record` to the scope's state stream if nobody else wrote since the last read
  // (kConflict otherwise).
  Status Write(ScopeState& scope, const nlohmann::json& record) RUNNEL_REQUIRES(mu_);
  // Rewrites the live state (the token key and every subscription in `scope.subs`) and prunes
  // what came before, when the stream is long enough. Only called once the memory state holds
  // the last write: the rewrite replaces it.
  void MaybeCompact(ScopeState& scope) RUNNEL_REQUIRES(mu_);
  // Makes `next` the subscription's state (inserting it when new) once written; a conflict sets
  // conflicted_, so Handle reads the other node's change and runs the request again.
  Status Commit(ScopeState& scope, Sub next) RUNNEL_REQUIRES(mu_);
  Status CommitDelete(ScopeState& scope, const std::string& id) RUNNEL_REQUIRES(mu_);
  // Loads the store's token key, creating it on first use. It reads (and may write) the global
  // scope's state, so it is called before a request or an engine pass walks any scope, never
  // in the middle of one.
  Status EnsureTokenKey() RUNNEL_REQUIRES(mu_);
  // Reads the store's token key if one exists, never creating it (nor anything else): for
  // requests whose wake token must be checked before they may cause a write.
  Status LoadTokenKey() RUNNEL_REQUIRES(mu_);
  // On a store shared with other nodes: records this node's public signing key in the global
  // scope's state stream (once), so that every node's `__ds/jwks.json` lists the keys of all
  // nodes, whichever node signed a delivery. Called where EnsureTokenKey is.
  Status EnsurePublicKeyShared() RUNNEL_REQUIRES(mu_);
  // The JWK Set: this node's key, then the other nodes' recorded keys (newest first).
  std::string JwksJson() RUNNEL_REQUIRES(mu_);
  // The token key once EnsureTokenKey or LoadTokenKey found or made one, else empty.
  const std::string& token_key() RUNNEL_REQUIRES(mu_);
  uint64_t TailOf(const StreamScope& scope, const std::string& path) const;
  bool Pending(const ScopeState& scope, const Sub& sub) const RUNNEL_REQUIRES(mu_);
  void IssueWake(ScopeState& scope, Sub& sub, uint64_t now, std::vector<Job>* jobs)
      RUNNEL_REQUIRES(mu_);
  void FailAttempt(ScopeState& scope, Sub& sub, uint64_t now) RUNNEL_REQUIRES(mu_);
  void OnReply(const Job& job, const WebhookReply& reply);
  void Enqueue(std::vector<Job> jobs);
  void EngineLoop();
  void DeliveryLoop();

  HttpResponse HandleSubscription(ScopeState& scope, const std::string& id, const Route& route,
                                  const HttpRequest& request) RUNNEL_REQUIRES(mu_);
  HttpResponse Put(ScopeState& scope, const std::string& id, const HttpRequest& request)
      RUNNEL_REQUIRES(mu_);
  HttpResponse Claim(ScopeState& scope, Sub& sub, const HttpRequest& request) RUNNEL_REQUIRES(mu_);
  HttpResponse Settle(ScopeState& scope, Sub& sub, const HttpRequest& request, bool release,
                      const char* kind) RUNNEL_REQUIRES(mu_);
  // The wake token of `request` (Authorization: Bearer) checked for (scope, subscription id,
  // kind "claim" or "callback") and expiry: nullopt (and the claims in *claims_out when not
  // null) when valid, else the 401 to send. Needs no state: callable before a scope is loaded.
  std::optional<HttpResponse> CheckWakeToken(const HttpRequest& request,
                                             const std::string& scope_label, const std::string& id,
                                             const char* kind, nlohmann::json* claims_out)
      RUNNEL_REQUIRES(mu_);

  StreamRegistry registry_;
  SubscriptionOptions options_;
  std::unique_ptr<WebhookSigner> signer_;

  // Subscriptions in every loaded scope; lets NoteWrite skip the lock when there are none.
  std::atomic<size_t> live_subs_{0};
  Mutex mu_;
  std::condition_variable engine_cv_;
  std::condition_variable jobs_cv_;
  // By StreamScope::Label().
  std::map<std::string, std::unique_ptr<ScopeState>> scopes_ RUNNEL_GUARDED_BY(mu_);
  std::deque<Job> jobs_ RUNNEL_GUARDED_BY(mu_);
  bool poked_ RUNNEL_GUARDED_BY(mu_) = false;
  bool stopping_ RUNNEL_GUARDED_BY(mu_) = false;
  // The last Commit lost to another node's write.
  bool conflicted_ RUNNEL_GUARDED_BY(mu_) = false;
  uint64_t next_recheck_ms_ RUNNEL_GUARDED_BY(mu_) = 0;
  uint64_t next_deadline_ms_ RUNNEL_GUARDED_BY(mu_) = 0;
  std::vector<std::thread> threads_;
};

}  // namespace runnel::server

#endif  // RUNNEL_SERVER_SUBSCRIPTION_SERVICE_H_
