// TenantQuota: per-tenant limits on `runnel serve`, answered with 429 and Retry-After.
//
// - max_streams: a PUT that would create a stream in a tenant scope already holding this many
//   streams is refused (soft-deleted and expired-but-not-yet-collected streams count).
// - max_bytes: an append (POST with a body), a create with an initial body or a fork (PUT with
//   Stream-Forked-From) in a tenant scope whose retained bytes are at or above this is refused.
//   The scope's total is recomputed from the store at most once a second; in between, admitted
//   request bodies are added to it (an upper bound, since retention and prune may trim; a
//   fork's copy counts from the next recount). The write that crosses the limit is admitted.
// - appends_per_sec: a token bucket per tenant (capacity = one second's worth) over POSTs to its
//   streams, creates with a body and forks.
// 0 means unlimited. The global scope is not limited. Checks run after authorization, so a
// caller who may not act in a scope never learns anything about it from a 429.
//
// Concurrent creates in one tenant cannot overshoot the stream limit: an admitted create holds
// a reservation (CreateHold) until its request is finished, and every other create counts the
// reservations it finds alongside the stored streams. Reservations are per process: creates
// racing through different nodes that share a database each count only what is stored.
//
// Thread-safety: Check may be called from any thread concurrently.
#ifndef RUNNEL_SERVER_TENANT_QUOTA_H_
#define RUNNEL_SERVER_TENANT_QUOTA_H_

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "base/mutex.h"
#include "runnel/clock.h"
#include "runnel/registry.h"
#include "server/http_types.h"

namespace runnel::server {

struct QuotaOptions {
  uint64_t max_streams = 0;
  uint64_t max_bytes = 0;
  uint64_t appends_per_sec = 0;
  // Time for the rate limit and the bytes recomputation; not owned. Null: a monotonic clock.
  Clock* clock = nullptr;

  bool any() const { return max_streams || max_bytes || appends_per_sec; }
};

class TenantQuota {
 public:
  TenantQuota(QuotaOptions options, StreamRegistry registry)
      : options_(options), registry_(std::move(registry)) {}

  // Keeps a create's place under the stream limit until it is destroyed (after the create).
  using CreateHold = std::shared_ptr<void>;
  // nullopt: within quota. Otherwise the 429 response to send. For a PUT that may create a
  // stream in a limited scope, `hold` (when given) receives a reservation that the caller keeps
  // until the create has finished, whatever its outcome; without `hold` nothing is reserved.
  std::optional<HttpResponse> Check(const Route& route, const HttpRequest& request,
                                    CreateHold* hold = nullptr);

 private:
  struct Bucket {
    double tokens = 0;
    uint64_t last_ms = 0;
    bool started = false;
  };
  struct Usage {
    uint64_t bytes = 0;
    uint64_t computed_ms = 0;
    bool known = false;
  };
  uint64_t NowMs() const;
  Result<uint64_t> CountStreams(const std::string& ns, uint64_t stop_at);
  Result<uint64_t> RetainedBytes(const std::string& ns);

  const QuotaOptions options_;
  StreamRegistry registry_;
  Mutex mu_;
  std::map<std::string, Bucket> buckets_ RUNNEL_GUARDED_BY(mu_);     // by tenant
  std::map<std::string, Usage> usage_ RUNNEL_GUARDED_BY(mu_);        // by tenant
  std::map<std::string, uint64_t> creating_ RUNNEL_GUARDED_BY(mu_);  // reservations, by tenant
};

}  // namespace runnel::server

#endif  // RUNNEL_SERVER_TENANT_QUOTA_H_
