// Several channel instances on one store, in threads (S3, S5). No timing assumptions: every
// loop is bounded by a count, and the checks read the partitions after the threads joined.
#include <algorithm>
#include <latch>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "channel/channel_suites.h"
#include "channel/channel_test_base.h"

namespace runnel::testing {
namespace {

constexpr size_t kPartitions = 3;
constexpr int kPerWriter = 400;
// A publish refused by two conflicts is retried; each refusal means another writer committed,
// so this bound is never reached unless publishing is broken.
constexpr int kMaxAttempts = 100'000;

struct WriterLog {
  // idempotency key -> receipt
  std::map<std::string, PublishReceipt> receipts;
  int conflicts = 0;
  std::string failure;
};

void RunWriter(StreamRegistry registry, std::string channel, size_t partitions, int writer,
               std::latch* start, WriterLog* log) {
  auto ch = DurableChannel::WithPartitionKey(channel, partitions, registry, HashKeyPartitioner);
  start->arrive_and_wait();
  if (!ch.ok()) {
    log->failure = ch.status().ToString();
    return;
  }
  for (int i = 0; i < kPerWriter; ++i) {
    MessageEnvelope e;
    e.publisher_id = "writer-" + std::to_string(writer);
    e.timestamp_ms = static_cast<uint64_t>(i);
    e.key = "user-" + std::to_string(i % 5);
    e.idempotency_key = e.publisher_id + "/" + std::to_string(i);
    e.payload = "payload " + *e.idempotency_key;
    bool done = false;
    for (int attempt = 0; attempt < kMaxAttempts && !done; ++attempt) {
      auto r = ch->PublishWithReceipt(e);
      // Invite the other writer in between publishes, so their appends interleave.
      std::this_thread::yield();
      if (r.ok()) {
        log->receipts.emplace(*e.idempotency_key, *r);
        done = true;
      } else if (r.status().code() == StatusCode::kConflict) {
        ++log->conflicts;
      } else {
        log->failure = r.status().ToString();
        return;
      }
    }
    if (!done) {
      log->failure = "publish " + std::to_string(i) + " never landed";
      return;
    }
  }
}

class ChannelConcurrencyTest : public ChannelTestBase {
 protected:
  // Two instances of `channel` publish kPerWriter messages each from two threads; then every
  // receipt and every stored row are checked against each other.
  void TwoWriters(const std::string& channel, size_t partitions);
};

void ChannelConcurrencyTest::TwoWriters(const std::string& channel, size_t partitions) {
  // Open once first so both writers find the partitions created.
  ASSERT_TRUE(
      DurableChannel::WithPartitionKey(channel, partitions, registry(), HashKeyPartitioner).ok());
  WriterLog logs[2];
  std::latch start(2);
  const uint64_t appends_before = faulty().appends();
  std::thread a(RunWriter, registry(), channel, partitions, 0, &start, &logs[0]);
  std::thread b(RunWriter, registry(), channel, partitions, 1, &start, &logs[1]);
  a.join();
  b.join();
  for (const WriterLog& log : logs) ASSERT_TRUE(log.failure.empty()) << log.failure;
  // How contended the run was (informational: interleaving is up to the scheduler).
  RecordProperty("conflicts_refused", logs[0].conflicts + logs[1].conflicts);
  RecordProperty("appends_sent", static_cast<int>(faulty().appends() - appends_before));

  // Every publish was committed exactly once: no duplicate receipts, no shared positions.
  std::set<std::pair<size_t, uint64_t>> positions;
  size_t receipts = 0;
  for (const WriterLog& log : logs) {
    ASSERT_EQ(log.receipts.size(), static_cast<size_t>(kPerWriter));
    for (const auto& [key, r] : log.receipts) {
      EXPECT_FALSE(r.duplicate) << key;
      EXPECT_EQ(r.offset, r.sequence + 1);
      EXPECT_TRUE(positions.emplace(r.partition, r.offset).second)
          << key << " shares partition " << r.partition << " offset " << r.offset;
      ++receipts;
    }
  }
  EXPECT_EQ(receipts, 2u * kPerWriter);

  // The partitions hold exactly those rows, each at the position its receipt named.
  std::map<std::string, std::pair<size_t, uint64_t>> stored;
  const std::vector<ChannelRow> rows = ReadChannel(channel, partitions);
  ASSERT_FALSE(HasFailure()) << "a gap or an undecodable row";
  for (const ChannelRow& row : rows) {
    const auto& key = row.envelope.idempotency_key;
    ASSERT_TRUE(key.has_value());
    EXPECT_TRUE(stored.emplace(*key, std::make_pair(row.partition, row.offset)).second)
        << *key << " stored twice";
  }
  EXPECT_EQ(stored.size(), 2u * kPerWriter);
  for (const WriterLog& log : logs) {
    for (const auto& [key, r] : log.receipts) {
      auto it = stored.find(key);
      ASSERT_NE(it, stored.end()) << key << " was acknowledged but is not stored";
      EXPECT_EQ(it->second, std::make_pair(r.partition, r.offset)) << key;
    }
  }
  // Per-key order within a partition (K7): one writer's messages for one key are ascending.
  for (const WriterLog& log : logs) {
    std::map<std::string, uint64_t> last_offset_per_user;
    for (int i = 0; i < kPerWriter; ++i) {
      const std::string key = log.receipts.begin()->first.substr(0, 9) + std::to_string(i);
      auto it = log.receipts.find(key);
      ASSERT_NE(it, log.receipts.end()) << key;
      const std::string user = "user-" + std::to_string(i % 5);
      EXPECT_GT(it->second.offset, last_offset_per_user[user]) << key;
      last_offset_per_user[user] = it->second.offset;
    }
  }
}

TEST_P(ChannelConcurrencyTest, S3_TwoInstancesNeverCommitTheSamePositionAndLoseNothing) {
  TwoWriters("busy", kPartitions);
}

TEST_P(ChannelConcurrencyTest, S3_TwoInstancesOnOnePartitionNeverCommitTheSamePosition) {
  TwoWriters("hot", 1);
}

TEST_P(ChannelConcurrencyTest, S3_ConcurrentRetriesOfOneKeyCommitItOnce) {
  ASSERT_TRUE(DurableChannel::WithPartitionKey("retry", 2, registry(), HashKeyPartitioner).ok());
  constexpr int kKeys = 200;
  std::vector<std::vector<PublishReceipt>> got(2);
  std::vector<std::string> failures(2);
  std::latch start(2);
  auto run = [&](int w) {
    auto ch = DurableChannel::WithPartitionKey("retry", 2, registry(), HashKeyPartitioner);
    start.arrive_and_wait();
    if (!ch.ok()) {
      failures[w] = ch.status().ToString();
      return;
    }
    for (int i = 0; i < kKeys; ++i) {
      // Both writers publish the same envelope: a producer retrying through two nodes.
      MessageEnvelope e;
      e.publisher_id = "producer";
      e.key = "k" + std::to_string(i % 7);
      e.idempotency_key = "req-" + std::to_string(i);
      e.payload = "body " + std::to_string(i);
      for (int attempt = 0; attempt < kMaxAttempts; ++attempt) {
        auto r = ch->PublishWithReceipt(e);
        std::this_thread::yield();
        if (r.ok()) {
          got[w].push_back(*r);
          break;
        }
        if (r.status().code() != StatusCode::kConflict) {
          failures[w] = r.status().ToString();
          return;
        }
      }
    }
  };
  std::thread a(run, 0);
  std::thread b(run, 1);
  a.join();
  b.join();
  for (const auto& f : failures) ASSERT_TRUE(f.empty()) << f;
  ASSERT_EQ(got[0].size(), static_cast<size_t>(kKeys));
  ASSERT_EQ(got[1].size(), static_cast<size_t>(kKeys));
  size_t rows = 0;
  for (size_t p = 0; p < 2; ++p) rows += ReadAll("retry:" + std::to_string(p)).size();
  EXPECT_EQ(rows, static_cast<size_t>(kKeys));
  for (int i = 0; i < kKeys; ++i) {
    EXPECT_EQ(got[0][i].partition, got[1][i].partition) << i;
    EXPECT_EQ(got[0][i].offset, got[1][i].offset) << i;
    EXPECT_NE(got[0][i].duplicate, got[1][i].duplicate)
        << "request " << i << " committed twice or not at all";
  }
}

TEST_P(ChannelConcurrencyTest, S5_ConcurrentAcksOnAPartitionKeepTheMaximum) {
  auto ch = DurableChannel::Open("acks", 1, registry());
  ASSERT_TRUE(ch.ok());
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(ch->Publish(Env("m")).ok());
  auto acker = [this](uint64_t start) {
    for (uint64_t o = start; o <= 50; o += 2) {
      EXPECT_TRUE(registry().Ack(StreamScope::Global(), "acks:0", "g", o).ok());
    }
  };
  std::thread a(acker, 1);
  std::thread b(acker, 2);
  a.join();
  b.join();
  auto offset = registry().GetOffset(StreamScope::Global(), "acks:0", "g");
  ASSERT_TRUE(offset.ok());
  EXPECT_EQ(*offset, 50u);
  ASSERT_TRUE(registry().Ack(StreamScope::Global(), "acks:0", "g", 10).ok());
  EXPECT_EQ(*registry().GetOffset(StreamScope::Global(), "acks:0", "g"), 50u);
}

RUNNEL_CHANNEL_SUITE_INSTANCES(ChannelConcurrencyTest);

}  // namespace
}  // namespace runnel::testing
