#include "server/tenant_quota.h"

#include <algorithm>
#include <chrono>

#include "server/stream_service.h"

namespace runnel::server {

namespace {

uint64_t MonotonicMs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

HttpResponse TooMany(const std::string& message, uint64_t retry_after_s) {
  HttpResponse r = StreamService::ErrorResponse(Status::ResourceExhausted(message));
  r.status = 429;
  r.Set("Retry-After", std::to_string(std::max<uint64_t>(1, retry_after_s)));
  return r;
}

constexpr size_t kPage = 1000;

}  // namespace

uint64_t TenantQuota::NowMs() const {
  return options_.clock ? options_.clock->NowMs() : MonotonicMs();
}

Result<uint64_t> TenantQuota::CountStreams(const std::string& ns, uint64_t stop_at) {
  uint64_t count = 0;
  std::string after;
  for (;;) {
    RUNNEL_ASSIGN_OR_RETURN(auto page, registry_.store().ListStreams(ns, after, kPage));
    count += page.size();
    if (page.size() < kPage || count >= stop_at) return count;
    after = page.back().spec.name;
  }
}

Result<uint64_t> TenantQuota::RetainedBytes(const std::string& ns) {
  uint64_t bytes = 0;
  std::string after;
  for (;;) {
    RUNNEL_ASSIGN_OR_RETURN(auto page, registry_.store().ListStreams(ns, after, kPage));
    for (const StreamInfo& info : page) bytes += info.retained_bytes;
    if (page.size() < kPage) return bytes;
    after = page.back().spec.name;
  }
}

std::optional<HttpResponse> TenantQuota::Check(const Route& route, const HttpRequest& request,
                                               CreateHold* hold) {
  if (!options_.any() || route.kind != Route::Kind::kStream) return std::nullopt;
  const auto& tenant = route.scope.tenant();
  if (!tenant) return std::nullopt;
  const std::string ns = route.scope.Label();

  if (request.method == "PUT" && options_.max_streams > 0 &&
      !registry_.store().GetStream(ns, route.name).ok()) {
    // Reserve first, then count: a create admitted meanwhile is either among the stored
    // streams or still reserved (a reservation ends only after its create), so two creates can
    // never both see room for one.
    uint64_t reserved = 0;
    CreateHold reservation;
    if (hold != nullptr) {
      MutexLock lock(mu_);
      reserved = creating_[*tenant]++;
      reservation = CreateHold(nullptr, [this, t = *tenant](void*) {
        MutexLock lock(mu_);
        if (--creating_[t] == 0) creating_.erase(t);
      });
    }
    auto count = CountStreams(ns, options_.max_streams);
    if (!count.ok()) return StreamService::ErrorResponse(count.status());
    if (*count + reserved >= options_.max_streams) {
      return TooMany("tenant '" + *tenant + "' has reached its limit of " +
                         std::to_string(options_.max_streams) + " streams",
                     60);
    }
    if (hold != nullptr) *hold = std::move(reservation);
  }
  // Data enters a tenant's streams through appends, and also through a create with an initial
  // body or a fork (which copies its source's records): all three meet the bytes and rate limits.
  const bool fork = request.method == "PUT" && request.Header("stream-forked-from").has_value();
  const bool adds_data = !request.body.empty() || fork;
  if (request.method != "POST" && !(request.method == "PUT" && adds_data)) return std::nullopt;

  if (options_.max_bytes > 0 && adds_data) {
    const uint64_t now = NowMs();
    uint64_t bytes = 0;
    bool stale = false;
    {
      MutexLock lock(mu_);
      const Usage& u = usage_[*tenant];
      stale = !u.known || now - u.computed_ms >= 1000;
    }
    // The recount lists the tenant's streams: done outside the lock, so other tenants' appends
    // never wait for it (two concurrent recounts of one tenant are harmless).
    std::optional<uint64_t> recount;
    if (stale) {
      auto total = RetainedBytes(ns);
      if (!total.ok()) return StreamService::ErrorResponse(total.status());
      recount = *total;
    }
    {
      MutexLock lock(mu_);
      Usage& u = usage_[*tenant];
      if (recount) u = {*recount, now, true};
      bytes = u.bytes;
      // Count this append until the next recomputation (an upper bound: retention may trim).
      if (bytes < options_.max_bytes) u.bytes += request.body.size();
    }
    if (bytes >= options_.max_bytes) {
      return TooMany("tenant '" + *tenant + "' has reached its limit of " +
                         std::to_string(options_.max_bytes) + " stored bytes",
                     60);
    }
  }

  if (options_.appends_per_sec > 0) {
    const uint64_t now = NowMs();
    const double rate = static_cast<double>(options_.appends_per_sec);
    MutexLock lock(mu_);
    Bucket& b = buckets_[*tenant];
    if (!b.started) {
      b = {rate, now, true};
    } else {
      b.tokens = std::min(rate, b.tokens + rate * static_cast<double>(now - b.last_ms) / 1000.0);
      b.last_ms = now;
    }
    if (b.tokens < 1.0) {
      return TooMany("tenant '" + *tenant + "' is over its limit of " +
                         std::to_string(options_.appends_per_sec) + " appends per second",
                     1);
    }
    b.tokens -= 1.0;
  }
  return std::nullopt;
}

}  // namespace runnel::server
