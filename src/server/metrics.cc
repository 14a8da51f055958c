#include "server/metrics.h"

#include <fmt/format.h>

#include <algorithm>
#include <tuple>

namespace runnel::server {

std::atomic<uint64_t> Metrics::next_id_{0};

namespace {

// The counter a thread used last, with what it counts: a run of requests alike (the common
// case under load) is counted without the lock or a map lookup.
struct LastCounter {
  uint64_t metrics_id = 0;
  std::string route;
  std::string method;
  int status = 0;
  std::atomic<uint64_t>* counter = nullptr;
};
thread_local LastCounter t_last_counter;

}  // namespace

void Metrics::CountRequest(std::string_view route, std::string_view method, int status) {
  LastCounter& last = t_last_counter;
  if (last.metrics_id != id_ || last.status != status || last.route != route ||
      last.method != method) {
    MutexLock lock(mu_);
    last.counter = &requests_[std::make_tuple(std::string(route), std::string(method), status)];
    last.metrics_id = id_;
    last.route.assign(route);
    last.method.assign(method);
    last.status = status;
  }
  last.counter->fetch_add(1, std::memory_order_relaxed);
}

void Metrics::ObserveAppendLatency(uint64_t micros) {
  const auto bucket = std::lower_bound(kBucketsMicros.begin(), kBucketsMicros.end(), micros);
  if (bucket != kBucketsMicros.end()) {
    append_buckets_[static_cast<size_t>(bucket - kBucketsMicros.begin())].fetch_add(
        1, std::memory_order_relaxed);
  }
  append_sum_micros_.fetch_add(micros, std::memory_order_relaxed);
  append_count_.fetch_add(1, std::memory_order_relaxed);
}

namespace {

// A metric's HELP and TYPE lines (the exposition format's head of a metric family).
void AppendHead(std::string* out, std::string_view name, std::string_view type,
                std::string_view help) {
  *out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

// A metric with one unlabelled sample: its HELP and TYPE lines and its value.
template <typename T>
void AppendMetric(std::string* out, std::string_view name, std::string_view type,
                  std::string_view help, T value) {
  AppendHead(out, name, type, help);
  *out += fmt::format("{} {}\n", name, value);
}

}  // namespace

std::string Metrics::Render() const {
  std::string out;
  MutexLock lock(mu_);
  AppendHead(&out, "runnel_http_requests_total", "counter",
             "HTTP requests by route, method and status.");
  for (const auto& [key, count] : requests_) {
    out +=
        fmt::format("runnel_http_requests_total{{route=\"{}\",method=\"{}\",status=\"{}\"}} {}\n",
                    std::get<0>(key), std::get<1>(key), std::get<2>(key), count.load());
  }
  {
    uint64_t all = 0;
    for (const auto& [key, count] : requests_) all += count.load();
    const uint64_t h2 = http2_requests_.load(std::memory_order_relaxed);
    AppendHead(&out, "runnel_http_requests_by_version_total", "counter",
               "HTTP requests by protocol version.");
    out += fmt::format("runnel_http_requests_by_version_total{{version=\"1.1\"}} {}\n",
                       all - std::min(all, h2));
    out += fmt::format("runnel_http_requests_by_version_total{{version=\"2\"}} {}\n", h2);
    AppendMetric(&out, "runnel_http2_connections", "gauge", "Open HTTP/2 connections.",
                 http2_connections_.load(std::memory_order_relaxed));
    AppendMetric(&out, "runnel_http2_budget_waits_total", "counter",
                 "HTTP/2 streams that waited for room in their connection's answer budget.",
                 http2_budget_waits_.load(std::memory_order_relaxed));
    AppendMetric(&out, "runnel_http2_budget_refusals_total", "counter",
                 "HTTP/2 streams refused because their connection's answer budget had no room "
                 "in time.",
                 http2_budget_refusals_.load(std::memory_order_relaxed));
  }
  AppendHead(&out, "runnel_append_latency_seconds", "histogram",
             "Append latency until the commit is acknowledged.");
  // Read without a lock while appends go on: the count is read last and never shown below the
  // buckets' total, so the histogram stays monotonic.
  uint64_t cumulative = 0;
  for (size_t i = 0; i < kBucketsMicros.size(); ++i) {
    cumulative += append_buckets_[i].load();
    out += fmt::format("runnel_append_latency_seconds_bucket{{le=\"{}\"}} {}\n",
                       static_cast<double>(kBucketsMicros[i]) / 1e6, cumulative);
  }
  const uint64_t sum_micros = append_sum_micros_.load();
  const uint64_t count = std::max(cumulative, append_count_.load());
  out += fmt::format("runnel_append_latency_seconds_bucket{{le=\"+Inf\"}} {}\n", count);
  out +=
      fmt::format("runnel_append_latency_seconds_sum {}\n", static_cast<double>(sum_micros) / 1e6);
  out += fmt::format("runnel_append_latency_seconds_count {}\n", count);
  AppendMetric(&out, "runnel_live_readers", "gauge", "Open long-poll and SSE readers.",
               live_readers_.load());
  AppendMetric(&out, "runnel_connections", "gauge", "Open HTTP connections.", connections_.load());
  AppendMetric(&out, "runnel_max_connections", "gauge",
               "The connection cap in force (after the descriptor budget).",
               max_connections_.load());
  AppendHead(&out, "runnel_connections_refused_total", "counter",
             "Connections refused, beyond the cap or while out of descriptors, by whether they "
             "got a 503.");
  out += fmt::format("runnel_connections_refused_total{{answer=\"503\"}} {}\n",
                     refused_answered_.load());
  out += fmt::format("runnel_connections_refused_total{{answer=\"none\"}} {}\n",
                     refused_closed_.load());
  AppendMetric(&out, "runnel_accept_failures_total", "counter",
               "Failed accept() calls (out of descriptors, say).", accept_failures_.load());
  AppendMetric(&out, "runnel_http_bytes_in_total", "counter", "Request body bytes received.",
               bytes_in_.load());
  AppendMetric(&out, "runnel_http_bytes_out_total", "counter", "Response body bytes sent.",
               bytes_out_.load());
  return out;
}

std::string RenderStoreCommitStats(const StoreCommitStats& stats) {
  if (!stats.available) return "";
  std::string out;
  auto counter = [&out](std::string_view name, std::string_view help, auto value) {
    AppendMetric(&out, name, "counter", help, value);
  };
  auto seconds = [](uint64_t micros) { return static_cast<double>(micros) / 1e6; };
  counter("runnel_store_syncs_total",
          "Durable group commits (log store: fdatasync of the log; postgres: committed append "
          "transaction).",
          stats.syncs);
  counter("runnel_store_synced_bytes_total",
          "Bytes made durable by those commits (log store: log bytes; postgres: record keys and "
          "payloads).",
          stats.bytes);
  counter("runnel_store_sync_seconds_total",
          "Time spent in those commits (log store: the fdatasync; postgres: the write and COMMIT "
          "round trip).",
          seconds(stats.sync_micros));
  AppendHead(&out, "runnel_store_records_per_sync", "histogram",
             "Appended records made durable by one commit.");
  uint64_t cumulative = 0;
  for (size_t i = 0; i < StoreCommitStats::kRecordBuckets.size(); ++i) {
    cumulative += stats.records_per_sync[i];
    out += fmt::format("runnel_store_records_per_sync_bucket{{le=\"{}\"}} {}\n",
                       StoreCommitStats::kRecordBuckets[i], cumulative);
  }
  out += fmt::format("runnel_store_records_per_sync_bucket{{le=\"+Inf\"}} {}\n", stats.syncs);
  out += fmt::format("runnel_store_records_per_sync_sum {}\n", stats.records);
  out += fmt::format("runnel_store_records_per_sync_count {}\n", stats.syncs);
  counter("runnel_store_checkpoint_waits_total",
          "Times commits waited for a checkpoint still being written, because appends had "
          "outrun it by four checkpoint intervals (log store).",
          stats.checkpoint_waits);
  counter("runnel_store_checkpoint_wait_seconds_total", "Time commits spent in those waits.",
          seconds(stats.checkpoint_wait_micros));
  counter("runnel_store_checkpoints_total",
          "Checkpoints whose contents the writer built (log store).", stats.checkpoints);
  counter("runnel_store_checkpoint_build_seconds_total",
          "Time the writer spent building them; commits wait meanwhile.",
          seconds(stats.checkpoint_build_micros));
  counter("runnel_store_segment_rolls_total",
          "Log segments the writer moved to, the first one at open included (log store).",
          stats.segment_rolls);
  counter("runnel_store_segment_rolls_unprepared_total",
          "Of those, segments the writer had to create and zero itself because none was "
          "prepared in the background yet.",
          stats.segment_rolls_unprepared);
  counter("runnel_store_segment_roll_seconds_total",
          "Time the writer spent moving to new segments; commits wait meanwhile.",
          seconds(stats.segment_roll_micros));
  counter("runnel_store_scrubbed_bytes_total",
          "Bytes of sealed log segments the background scrub re-read and verified (log store).",
          stats.scrubbed_bytes);
  counter("runnel_store_scrub_passes_total",
          "Passes of the background scrub over every sealed segment (log store).",
          stats.scrub_passes);
  counter("runnel_store_damaged_frames_total",
          "Damaged frames the background scrub found in sealed segments, each counted once; the "
          "server log names each (log store).",
          stats.damaged_frames);
  counter("runnel_store_unreadable_reads_total",
          "Reads that started at damaged records and failed (log store).", stats.unreadable_reads);
  counter("runnel_store_cleaner_bytes_total",
          "Bytes of live records the cleaner copied out of mostly dead segments (log store).",
          stats.cleaner_bytes);
  counter("runnel_store_space_reclaims_total",
          "Times a full disk gave space back by moving live records out of partly dead "
          "segments and deleting them (log store).",
          stats.space_reclaims);
  counter("runnel_store_reserve_draws_total",
          "Times the space reserve was given up for that, the disk having no room left.",
          stats.reserve_draws);
  return out;
}

namespace {

// A label value in the exposition format: backslash, double quote and newline escaped.
std::string EscapeLabel(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

std::string RenderInfo(const std::vector<std::pair<std::string, std::string>>& labels,
                       std::string_view durability) {
  std::string out;
  AppendHead(&out, "runnel_info", "gauge",
             "The server's version, store and durability mode, as labels.");
  out += "runnel_info{";
  for (const auto& [name, value] : labels) {
    out += fmt::format("{}=\"{}\",", name, EscapeLabel(value));
  }
  out += fmt::format("durability=\"{}\"}} 1\n",
                     EscapeLabel(durability.substr(0, durability.find(": "))));
  return out;
}

}  // namespace runnel::server
