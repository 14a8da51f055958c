// Publish throughput of a DurableChannel over 16 partitions with message keys, with and without
// idempotency keys, measured side by side in one run on the memory store; and whether the
// issue's target holds: idempotent publishing costs at most 20% more time per message than
// plain publishing.
//
//   channel_bench [messages_per_mode] [chunk] [runs]      (defaults 300000 1000 3)
//
// Each run opens two fresh channels (each on its own memory store) and feeds them alternately,
// `chunk` messages at a time, swapping which goes first every chunk. Per chunk it takes the
// ratio of the two modes' times; a run's cost is the median of those ratios minus 1, so a burst
// of load from other processes, which hits a few chunks, does not decide the figure. The
// aggregate throughput of each mode is printed too. The verdict uses the median cost of the
// runs.
//
// Build: cmake -S . -B build/release -G Ninja -DRUNNEL_BUILD_BENCHMARKS=ON && ninja -C
// build/release channel_bench
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "runnel/channel.h"
#include "runnel/registry.h"

namespace {

constexpr size_t kPartitions = 16;
constexpr int kUsers = 1000;
constexpr double kTargetCost = 0.20;

std::vector<runnel::MessageEnvelope> MakeEnvelopes(int messages, bool idempotent) {
  std::vector<runnel::MessageEnvelope> envelopes(static_cast<size_t>(messages));
  for (int i = 0; i < messages; ++i) {
    runnel::MessageEnvelope& e = envelopes[static_cast<size_t>(i)];
    e.payload = std::string(100, 'x');
    e.timestamp_ms = static_cast<uint64_t>(i);
    e.publisher_id = "bench";
    e.key = "user-" + std::to_string(i % kUsers);
    if (idempotent) e.idempotency_key = "req-" + std::to_string(i);
  }
  return envelopes;
}

struct Mode {
  const char* name;
  const std::vector<runnel::MessageEnvelope>* envelopes;
  runnel::StreamRegistry registry;
  std::optional<runnel::DurableChannel> channel;
  double total_s = 0;
};

// Publishes envelopes [from, to); returns the seconds taken, or a negative value on failure.
double Run(Mode& m, size_t from, size_t to) {
  const auto start = std::chrono::steady_clock::now();
  for (size_t i = from; i < to; ++i) {
    auto r = m.channel->Publish((*m.envelopes)[i]);
    if (!r.ok()) {
      std::fprintf(stderr, "%s publish: %s\n", m.name, r.status().ToString().c_str());
      return -1;
    }
  }
  const std::chrono::duration<double> d = std::chrono::steady_clock::now() - start;
  m.total_s += d.count();
  return d.count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t k = v.size() / 2;
  return v.size() % 2 ? v[k] : (v[k - 1] + v[k]) / 2;
}

}  // namespace

int main(int argc, char** argv) {
  const int messages = argc > 1 ? std::atoi(argv[1]) : 300'000;
  const int chunk = argc > 2 ? std::atoi(argv[2]) : 1000;
  const int runs = argc > 3 ? std::atoi(argv[3]) : 3;
  if (messages <= 0 || chunk <= 0 || runs <= 0 || runs > 100) {
    std::fprintf(stderr, "usage: channel_bench [messages_per_mode>0] [chunk>0] [runs 1..100]\n");
    return 2;
  }
  const std::vector<runnel::MessageEnvelope> plain_envelopes = MakeEnvelopes(messages, false);
  const std::vector<runnel::MessageEnvelope> idem_envelopes = MakeEnvelopes(messages, true);
  std::printf(
      "channel publish, memory store, %zu partitions, keyed, %d msgs per mode, "
      "interleaved in chunks of %d, %d runs\n",
      kPartitions, messages, chunk, runs);
  std::vector<double> run_costs;
  for (int run = 0; run < runs; ++run) {
    Mode modes[2] = {{"plain", &plain_envelopes, {}, {}}, {"idempotent", &idem_envelopes, {}, {}}};
    for (Mode& m : modes) {
      auto ch = runnel::DurableChannel::WithPartitionKey("bench", kPartitions, m.registry,
                                                         runnel::HashKeyPartitioner);
      if (!ch.ok()) {
        std::fprintf(stderr, "open: %s\n", ch.status().ToString().c_str());
        return 1;
      }
      m.channel.emplace(std::move(*ch));
    }
    const size_t n = static_cast<size_t>(messages);
    const size_t step = static_cast<size_t>(chunk);
    std::vector<double> chunk_ratios;
    for (size_t from = 0, k = 0; from < n; from += step, ++k) {
      const size_t to = std::min(n, from + step);
      double t[2];
      const size_t first = k % 2;
      t[first] = Run(modes[first], from, to);
      t[1 - first] = Run(modes[1 - first], from, to);
      if (t[0] < 0 || t[1] < 0) return 1;
      if (t[0] > 0) chunk_ratios.push_back(t[1] / t[0]);
    }
    const double plain = messages / modes[0].total_s;
    const double idem = messages / modes[1].total_s;
    const double cost = Median(chunk_ratios) - 1.0;
    run_costs.push_back(cost);
    std::printf(
        "  run %d: plain %10.0f msgs/s, idempotent %10.0f msgs/s; time per message "
        "+%.1f%% in total, +%.1f%% median over %zu chunks\n",
        run + 1, plain, idem, (modes[1].total_s / modes[0].total_s - 1.0) * 100.0, cost * 100.0,
        chunk_ratios.size());
  }
  const double cost = Median(run_costs);
  const bool met = cost <= kTargetCost;
  std::printf("idempotent cost (median of runs): +%.1f%% time per message; target <= +%.0f%%: %s\n",
              cost * 100.0, kTargetCost * 100.0, met ? "MET" : "NOT MET");
  return 0;
}
