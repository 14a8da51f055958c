// Server metrics in the Prometheus text exposition format.
//
// Thread-safety: every method may be called concurrently from any thread. The per-request
// calls (CountRequest, ObserveAppendLatency) take no lock once a thread has counted the same
// route, method and status before: the io threads do not contend for one mutex per request.
#ifndef RUNNEL_SERVER_METRICS_H_
#define RUNNEL_SERVER_METRICS_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/mutex.h"
#include "runnel/store.h"

namespace runnel::server {

class Metrics {
 public:
  // One finished request: route label ("stream", "healthz", ...), method and status.
  void CountRequest(std::string_view route, std::string_view method, int status);
  // One finished request over HTTP/2 (counted by CountRequest too): requests by protocol
  // version are rendered as runnel_http_requests_by_version_total{version="1.1"|"2"}.
  void CountHttp2Request() { http2_requests_.fetch_add(1, std::memory_order_relaxed); }
  // An HTTP/2 connection opened or closed (counted as a connection too).
  void Http2ConnectionOpened() { http2_connections_.fetch_add(1, std::memory_order_relaxed); }
  void Http2ConnectionClosed() { http2_connections_.fetch_sub(1, std::memory_order_relaxed); }
  // An HTTP/2 stream waited for room in its connection's answer budget; one refused
  // (REFUSED_STREAM, or its live read ended) when none came in time.
  void CountHttp2BudgetWait() { http2_budget_waits_.fetch_add(1, std::memory_order_relaxed); }
  void CountHttp2BudgetRefusal() { http2_budget_refusals_.fetch_add(1, std::memory_order_relaxed); }
  // Latency of one append, from request parsed to commit acknowledged.
  void ObserveAppendLatency(uint64_t micros);
  void AddBytesIn(uint64_t n) { bytes_in_.fetch_add(n, std::memory_order_relaxed); }
  void AddBytesOut(uint64_t n) { bytes_out_.fetch_add(n, std::memory_order_relaxed); }
  void LiveReaderStarted() { live_readers_.fetch_add(1, std::memory_order_relaxed); }
  void LiveReaderEnded() { live_readers_.fetch_sub(1, std::memory_order_relaxed); }
  void ConnectionOpened() { connections_.fetch_add(1, std::memory_order_relaxed); }
  void ConnectionClosed() { connections_.fetch_sub(1, std::memory_order_relaxed); }
  int64_t connections() const { return connections_.load(std::memory_order_relaxed); }
  // One failed accept() call (out of descriptors, say).
  void CountAcceptFailure() { accept_failures_.fetch_add(1, std::memory_order_relaxed); }
  // One connection refused (beyond the connection cap, or accepted on the spare descriptor
  // while out of descriptors), answered 503 (`answered`) or closed unanswered.
  void CountRefusedConnection(bool answered) {
    (answered ? refused_answered_ : refused_closed_).fetch_add(1, std::memory_order_relaxed);
  }
  // The connection cap in force (HttpServer::SetMaxConnections).
  void SetMaxConnections(uint64_t n) { max_connections_.store(n, std::memory_order_relaxed); }

  std::string Render() const;

 private:
  static constexpr std::array<uint64_t, 12> kBucketsMicros = {
      50, 100, 250, 500, 1000, 2500, 5000, 10000, 25000, 50000, 100000, 1000000};

  // Tells instances apart in each thread's CountRequest cache (an address could be reused).
  static std::atomic<uint64_t> next_id_;
  const uint64_t id_ = next_id_.fetch_add(1) + 1;
  mutable Mutex mu_;
  // Entries are only ever added (under mu_); a counter's address is stable, so it is counted
  // without the lock.
  std::map<std::tuple<std::string, std::string, int>, std::atomic<uint64_t>> requests_
      RUNNEL_GUARDED_BY(mu_);
  // Appends whose latency fell in (kBucketsMicros[i-1], kBucketsMicros[i]], not cumulative:
  // Render adds them up.
  std::array<std::atomic<uint64_t>, kBucketsMicros.size()> append_buckets_{};
  std::atomic<uint64_t> append_count_{0};
  std::atomic<uint64_t> append_sum_micros_{0};

  std::atomic<uint64_t> http2_requests_{0};
  std::atomic<int64_t> http2_connections_{0};
  std::atomic<uint64_t> http2_budget_waits_{0};
  std::atomic<uint64_t> http2_budget_refusals_{0};
  std::atomic<uint64_t> bytes_in_{0};
  std::atomic<uint64_t> bytes_out_{0};
  std::atomic<int64_t> live_readers_{0};
  std::atomic<int64_t> connections_{0};
  std::atomic<uint64_t> accept_failures_{0};
  std::atomic<uint64_t> refused_answered_{0};
  std::atomic<uint64_t> refused_closed_{0};
  std::atomic<uint64_t> max_connections_{0};
};

// The store's group-commit counters (Store::CommitStats) in the exposition format: syncs,
// records and bytes made durable, sync time, and a records-per-sync histogram. Empty when the
// store reports none.
std::string RenderStoreCommitStats(const StoreCommitStats& stats);

// The `runnel_info` gauge (always 1) with `labels` and the durability mode: the first word of
// Store::Durability(), the part before ": " ("fsync", "interval:5", "none", "postgresql").
std::string RenderInfo(const std::vector<std::pair<std::string, std::string>>& labels,
                       std::string_view durability);

}  // namespace runnel::server

#endif  // RUNNEL_SERVER_METRICS_H_
