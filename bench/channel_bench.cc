// Publish throughput of a DurableChannel over 16 partitions with message keys, with and without
// idempotency keys, measured side by side in one run on the memory store.
//
//   channel_bench [messages_per_mode] [chunk]
//
// Two channels (each on its own memory store) are fed alternately, `chunk` messages at a time,
// swapping which goes first every chunk, and the time of each mode is summed. Interleaving
// this finely keeps machine-load drift out of the ratio, which matters on a shared machine.
//
// Build (there is no bench/CMakeLists.txt yet):
//   cmake -S . -B build/rel -G Ninja -DCMAKE_BUILD_TYPE=Release -DRUNNEL_BUILD_TESTS=OFF
//   ninja -C build/rel runnel_lib
//   g++ -std=c++20 -O2 -Iinclude bench/channel_bench.cc build/rel/librunnel.a -lpthread
//       -o build/rel/channel_bench      (one command line)
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
  runnel::StreamRegistry registry;
  std::optional<runnel::DurableChannel> channel;
  std::vector<runnel::MessageEnvelope> envelopes;
  std::chrono::duration<double> elapsed{0};
};

// Publishes envelopes [from, to) and adds the time taken. False if a publish failed.
bool Run(Mode& m, size_t from, size_t to) {
  const auto start = std::chrono::steady_clock::now();
  for (size_t i = from; i < to; ++i) {
    auto r = m.channel->Publish(m.envelopes[i]);
    if (!r.ok()) {
      std::fprintf(stderr, "%s publish: %s\n", m.name, r.status().ToString().c_str());
      return false;
    }
  }
  m.elapsed += std::chrono::steady_clock::now() - start;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  const int messages = argc > 1 ? std::atoi(argv[1]) : 500'000;
  const int chunk = argc > 2 ? std::atoi(argv[2]) : 1000;
  if (messages <= 0 || chunk <= 0) {
    std::fprintf(stderr, "usage: channel_bench [messages_per_mode>0] [chunk>0]\n");
    return 2;
  }
  Mode modes[2] = {{"plain", {}, {}, MakeEnvelopes(messages, false)},
                   {"idempotent", {}, {}, MakeEnvelopes(messages, true)}};
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
  for (size_t from = 0, k = 0; from < n; from += step, ++k) {
    const size_t to = std::min(n, from + step);
    Mode& first = modes[k % 2];
    Mode& second = modes[1 - k % 2];
    if (!Run(first, from, to) || !Run(second, from, to)) return 1;
  }
  const double plain = messages / modes[0].elapsed.count();
  const double idem = messages / modes[1].elapsed.count();
  std::printf("channel publish, memory store, %zu partitions, keyed, %d msgs per mode, "
              "interleaved in chunks of %d\n",
              kPartitions, messages, chunk);
  std::printf("  plain:       %10.0f msgs/s\n", plain);
  std::printf("  idempotent:  %10.0f msgs/s\n", idem);
  std::printf("  ratio idempotent/plain: %.3f (cost %.1f%%)\n", idem / plain,
              (1.0 - idem / plain) * 100.0);
  return 0;
}
