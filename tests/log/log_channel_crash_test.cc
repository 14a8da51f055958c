// A durable channel on the log store through power losses. Each round opens the store and the
// channel over what the last power loss left (recovery of the partitions and of the head
// checkpoint chain, V2 V3), checks the partitions against what was acknowledged, then publishes
// (keyed and plain, checkpoints now and then) until the power fails just before a random
// fdatasync, keeping a random part of the unsynced writes and tearing the last one:
//   - every acknowledged publish is stored exactly once, at its receipt's position;
//   - a publish whose outcome the crash made unknown is stored at most once;
//   - nothing else is stored, and no idempotency key is stored twice;
//   - a key stored before the crash, published again after it, is a duplicate at its position.
// RUNNEL_CHANNEL_CRASH_ROUNDS raises the default 25 rounds.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "env/fault_env.h"
#include "env/mem_env.h"
#include "runnel/channel.h"
#include "runnel/log_store.h"
#include "runnel/registry.h"

namespace runnel::testing {
namespace {

constexpr size_t kPartitions = 2;
using Position = std::pair<size_t, uint64_t>;  // partition, public offset

struct Stored {
  std::map<std::string, Position> by_payload;
  std::map<std::string, Position> by_key;
};

// Reads every partition; every row must decode, payloads and keys must be unique.
Stored ReadPartitions(StreamRegistry& registry) {
  Stored out;
  for (size_t p = 0; p < kPartitions; ++p) {
    const std::string name = "crashy:" + std::to_string(p);
    uint64_t from = 1;
    for (;;) {
      auto events = registry.ReadSince(StreamScope::Global(), name, from, 1000);
      EXPECT_TRUE(events.ok()) << events.status().ToString();
      if (!events.ok() || events->empty()) break;
      for (const auto& e : *events) {
        auto env = DecodeEnvelope(e.payload);
        EXPECT_TRUE(env.ok()) << name << " offset " << e.offset << ": " << env.status().ToString();
        if (!env.ok()) continue;
        EXPECT_TRUE(out.by_payload.emplace(env->payload, Position{p, e.offset}).second)
            << env->payload << " stored twice";
        if (env->idempotency_key) {
          EXPECT_TRUE(out.by_key.emplace(*env->idempotency_key, Position{p, e.offset}).second)
              << "key " << *env->idempotency_key << " stored twice";
        }
      }
      from = events->back().offset + 1;
    }
  }
  return out;
}

TEST(LogChannelCrashTest, AcknowledgedPublishesSurvivePowerLossesOnceAndKeysStayUnique) {
  const char* rounds_env = std::getenv("RUNNEL_CHANNEL_CRASH_ROUNDS");
  const int rounds = rounds_env != nullptr ? std::atoi(rounds_env) : 25;
  env::MemEnv mem;
  env::FaultInjectionEnv faults(&mem);
  LogStoreOptions options;
  options.dir = "/data";
  options.env = &faults;
  options.segment_size = 16 << 10;
  options.checkpoint_interval_bytes = 40 << 10;
  std::mt19937_64 rng(2026);
  std::map<std::string, Position> acknowledged;  // payload -> position
  std::map<std::string, Position> first_commit;  // idempotency key -> position
  std::set<std::string> unknown;                 // payloads whose outcome the crash hid
  int crashes = 0, duplicates_after_crash = 0;
  uint64_t counter = 0;
  for (int round = 0; round < rounds; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    auto opened = OpenLogStore(options);
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    StreamRegistry registry(std::move(*opened));
    ChannelOptions channel_options;
    channel_options.checkpoint_policy = CheckpointPolicy::PerBatch(1 + rng() % 20);
    channel_options.warn = [](std::string_view) {};
    auto ch = DurableChannel::WithPartitionKey("crashy", kPartitions, registry, HashKeyPartitioner,
                                               channel_options);
    ASSERT_TRUE(ch.ok()) << ch.status().ToString();

    // What survived: the acknowledged publishes at their positions, unknown ones at most once.
    Stored stored = ReadPartitions(registry);
    ASSERT_FALSE(::testing::Test::HasFailure());
    for (const auto& [payload, position] : acknowledged) {
      auto it = stored.by_payload.find(payload);
      ASSERT_NE(it, stored.by_payload.end()) << payload << " was acknowledged and is gone";
      ASSERT_EQ(it->second, position) << payload;
    }
    for (const auto& [payload, position] : stored.by_payload) {
      ASSERT_TRUE(acknowledged.count(payload) != 0 || unknown.count(payload) != 0)
          << payload << " is stored but was never published with that outcome";
    }
    // Unknown outcomes are settled by what is stored now.
    for (const std::string& payload : unknown) {
      auto it = stored.by_payload.find(payload);
      if (it != stored.by_payload.end()) acknowledged.emplace(payload, it->second);
    }
    unknown.clear();
    for (const auto& [key, position] : stored.by_key) first_commit.emplace(key, position);

    // Publish until the power fails.
    std::atomic<bool> crashed{false};
    const uint64_t keep_seed = rng();
    const size_t tear = rng() % 3 == 0 ? 0 : 1 + rng() % 500;
    faults.BeforeSyncDo(static_cast<int>(1 + rng() % 40), [&mem, &crashed, keep_seed, tear] {
      // The flag first: a failure the crash causes on another thread must find it set.
      crashed = true;
      mem.Crash(
          [keep_seed](const std::string& path, size_t pending) {
            return static_cast<size_t>((keep_seed ^ std::hash<std::string>()(path)) %
                                       (pending + 1));
          },
          tear);
    });
    for (int i = 0; i < 200 && !crashed.load(); ++i) {
      MessageEnvelope e;
      e.payload = "m" + std::to_string(++counter);
      e.publisher_id = "p";
      e.timestamp_ms = counter;
      e.key = "user-" + std::to_string(rng() % 4);
      if (rng() % 2 == 0) e.idempotency_key = "k" + std::to_string(rng() % 60);
      if (rng() % 25 == 0) (void)ch->RecordCheckpoint();
      auto r = ch->PublishWithReceipt(e);
      if (crashed.load()) {
        // The power failed during this publish. A dead process answers nothing: whatever this
        // one answered (the store goes on in the simulation, with files it opens afterwards),
        // its outcome is unknown.
        unknown.insert(e.payload);
        break;
      }
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      const Position at{r->partition, r->offset};
      if (e.idempotency_key) {
        auto known = first_commit.find(*e.idempotency_key);
        if (known != first_commit.end()) {
          ASSERT_TRUE(r->duplicate) << *e.idempotency_key << " committed again";
          ASSERT_EQ(at, known->second) << *e.idempotency_key;
          if (round > 0) ++duplicates_after_crash;
          continue;
        }
        first_commit.emplace(*e.idempotency_key, at);
      }
      ASSERT_FALSE(r->duplicate) << e.payload;
      acknowledged.emplace(e.payload, at);
    }
    if (crashed.load()) ++crashes;
    // The channel and the store close at the end of the round; after a crash they write nothing
    // that survives (their handles died with the power). Without a crash the power fails now.
    faults.ClearFaults();
    if (!crashed.load()) {
      ch = Status::Unavailable("closed");  // before the store, whose close syncs
      registry = StreamRegistry(NewMemoryStore());
      mem.DropUnsyncedData();
    }
  }
  EXPECT_GT(crashes, rounds / 2);
  EXPECT_GT(duplicates_after_crash, 0);
}

}  // namespace
}  // namespace runnel::testing
