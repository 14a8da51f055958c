// Two instances of one channel on one store, driven by a seeded random sequence of publishes
// (with and without idempotency keys from a small pool, routed by message key), appends whose
// reply is lost or that never land (U1-U4), another writer's rows taking a slot or the tail
// (S2, U4), reopenings (V2, V3), head checkpoints and store flushes, checked against a model
// of what was acknowledged:
//   - a publish of a key already committed, through either instance, is a duplicate at the
//     first commit's position (I4, with check_all_partitions_for_keys);
//   - every acknowledged message is stored exactly once, at its receipt's position, and nothing
//     else is stored (S3, U4): the partitions hold exactly the acknowledged first publishes
//     and the other writer's rows.
// RUNNEL_CHANNEL_MODEL_STEPS raises the default 250 steps per seed.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "channel/channel_suites.h"
#include "channel/channel_test_base.h"

namespace runnel::testing {
namespace {

constexpr size_t kPartitions = 3;
// A publish is refused at most once per other writer's commit in between; none happens here
// between two attempts, so a few attempts always suffice unless publishing is broken.
constexpr int kMaxAttempts = 8;

using Position = std::pair<size_t, uint64_t>;  // partition, public offset

class ChannelModelTest : public ChannelTestBase {
 protected:
  Result<DurableChannel> OpenInstance(const std::string& id) {
    ChannelOptions options;
    options.check_all_partitions_for_keys = true;
    options.warn = [](std::string_view) {};  // a refused checkpoint of a stale instance is fine
    return DurableChannel::WithPartitionKey(id, kPartitions, registry(), HashKeyPartitioner,
                                            options);
  }

  // What the partitions hold: payload -> position.
  std::map<std::string, Position> Stored(const std::string& id) {
    std::map<std::string, Position> out;
    for (const ChannelRow& row : ReadChannel(id, kPartitions)) {
      EXPECT_TRUE(out.emplace(row.envelope.payload, Position{row.partition, row.offset}).second)
          << row.envelope.payload << " stored twice";
    }
    return out;
  }
};

TEST_P(ChannelModelTest, TwoInstancesMatchTheModelUnderLostRepliesReopensAndCheckpoints) {
  const char* steps_env = std::getenv("RUNNEL_CHANNEL_MODEL_STEPS");
  const int steps = steps_env != nullptr ? std::atoi(steps_env) : 250;
  // How much of the model the runs exercised; each must happen for the test to mean anything.
  int duplicates = 0, resolved_committed = 0, resolved_absent = 0, reopens = 0;
  uint64_t foreign_stored = 0;
  MessageEnvelope foreign = Env("foreign");
  foreign.publisher_id = "someone else";
  faulty().SetForeignEnvelope(foreign);
  for (uint32_t seed = 1; seed <= 2; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    const std::string id = "model" + std::to_string(seed);
    std::mt19937 rng(seed);
    auto pick = [&rng](uint32_t n) { return rng() % n; };
    std::optional<DurableChannel> instances[2];
    for (auto& instance : instances) {
      auto opened = OpenInstance(id);
      ASSERT_TRUE(opened.ok()) << opened.status().ToString();
      instance.emplace(std::move(*opened));
    }
    const uint64_t foreign_before = faulty().foreign_writes();
    std::map<std::string, Position> first_commit;  // idempotency key -> position
    std::map<std::string, Position> acknowledged;  // payload stored -> position
    for (int step = 0; step < steps; ++step) {
      SCOPED_TRACE("step " + std::to_string(step));
      DurableChannel& ch = *instances[pick(2)];
      const uint32_t dice = pick(100);
      if (dice < 4) {
        auto reopened = OpenInstance(id);
        ASSERT_TRUE(reopened.ok()) << reopened.status().ToString();
        instances[pick(2)].emplace(std::move(*reopened));
        ++reopens;
        continue;
      }
      if (dice < 7) {
        // A stale instance's checkpoint may be refused (another one recorded meanwhile): it is
        // only an optimisation of the next open, so its status is not part of the model.
        (void)ch.RecordCheckpoint();
        continue;
      }
      if (dice < 9) {
        Status flushed = ch.FlushStore();
        ASSERT_TRUE(flushed.ok()) << flushed.ToString();
        continue;
      }
      MessageEnvelope e = Env("m" + std::to_string(seed) + "-" + std::to_string(step));
      e.key = "user-" + std::to_string(pick(5));
      if (pick(3) != 0) e.idempotency_key = "k" + std::to_string(pick(12));
      if (pick(6) == 0) {
        // Lost replies, appends that never land, and another writer's row taking the slot or
        // the tail first (a real conflict: the channel reads and indexes the row, then retries).
        const FaultyStore::AppendFault faults[] = {
            FaultyStore::AppendFault::kLandedReplyLost, FaultyStore::AppendFault::kNotLanded,
            FaultyStore::AppendFault::kForeignInSlotThenUnknown,
            FaultyStore::AppendFault::kForeignWriterFirst};
        faulty().InjectAppendFault(faults[pick(4)]);
      }
      std::optional<Position> landed;
      bool duplicate = false;
      for (int attempt = 0; attempt < kMaxAttempts && !landed; ++attempt) {
        auto r = ch.PublishWithReceipt(e);
        if (r.ok()) {
          landed = Position{r->partition, r->offset};
          duplicate = r->duplicate;
        } else if (r.status().code() == StatusCode::kOutcomeUnknown) {
          // U1-U4: the exact slot tells; an absent append is published again.
          auto resolved = ch.ResolvePending();
          ASSERT_TRUE(resolved.ok()) << resolved.status().ToString();
          ASSERT_TRUE(resolved->has_value());
          if ((*resolved)->committed()) {
            landed = Position{(*resolved)->partition, (*resolved)->offset};
            ++resolved_committed;
          } else {
            ++resolved_absent;
          }
        } else {
          ASSERT_EQ(r.status().code(), StatusCode::kConflict) << r.status().ToString();
        }
      }
      // A duplicate sends no append: its fault must not hit a later call.
      faulty().ClearAppendFaults();
      ASSERT_TRUE(landed.has_value()) << "publish never landed";
      if (e.idempotency_key) {
        auto known = first_commit.find(*e.idempotency_key);
        if (known != first_commit.end()) {
          EXPECT_TRUE(duplicate) << *e.idempotency_key << " committed again";
          ++duplicates;
          EXPECT_EQ(*landed, known->second) << *e.idempotency_key;
          continue;
        }
        first_commit.emplace(*e.idempotency_key, *landed);
      }
      EXPECT_FALSE(duplicate) << e.payload;
      acknowledged.emplace(e.payload, *landed);
      if (::testing::Test::HasFailure()) return;
    }
    // The partitions hold exactly the acknowledged first publishes, at their positions, and the
    // other writer's rows.
    std::map<std::string, Position> stored = Stored(id);
    uint64_t foreign_rows = 0;
    for (auto it = stored.begin(); it != stored.end();) {
      if (it->first.rfind("foreign-", 0) == 0) {
        ++foreign_rows;
        it = stored.erase(it);
      } else {
        ++it;
      }
    }
    EXPECT_EQ(stored, acknowledged);
    // (A foreign write into a slot that is already taken fails, so not every one is stored.)
    EXPECT_LE(foreign_rows, faulty().foreign_writes() - foreign_before);
    foreign_stored += foreign_rows;
  }
  EXPECT_GT(duplicates, 0);
  EXPECT_GT(resolved_committed, 0);
  EXPECT_GT(resolved_absent, 0);
  EXPECT_GT(foreign_stored, 0u);
  EXPECT_GT(reopens, 0);
}

RUNNEL_CHANNEL_SUITE_INSTANCES(ChannelModelTest);

}  // namespace
}  // namespace runnel::testing
