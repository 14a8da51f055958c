// The log store's parts that are classes or functions of their own: the tail cache, the stream
// table and the cleaner's choice of segments.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "store/log/cleaner_policy.h"
#include "store/log/stream_table.h"
#include "store/log/tail_cache.h"

namespace runnel::log {
namespace {

std::shared_ptr<const std::string> Bytes(size_t n) {
  return std::make_shared<const std::string>(n, 'x');
}

TEST(TailCacheTest, FindsAGroupOnlyWhenItHoldsTheWholeRange) {
  TailCache cache;
  cache.Add(3, 100, Bytes(50), 1000);  // [100, 150) of segment 3
  cache.Add(3, 150, Bytes(50), 1000);  // [150, 200)
  const TailCache::CachedGroup* g = cache.Find(3, 120, 30);
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(g->key, (uint64_t{3} << 32) | 100);
  g = cache.Find(3, 150, 50);
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(g->key, (uint64_t{3} << 32) | 150);
  EXPECT_EQ(cache.Find(3, 140, 20), nullptr);  // spans two groups
  EXPECT_EQ(cache.Find(3, 90, 5), nullptr);    // before the first group
  EXPECT_EQ(cache.Find(3, 190, 20), nullptr);  // past the last group's end
  EXPECT_EQ(cache.Find(4, 100, 10), nullptr);  // another segment
}

TEST(TailCacheTest, EvictsTheOldestGroupsBeyondTheBound) {
  TailCache cache;
  cache.Add(1, 16, Bytes(40), 100);
  cache.Add(1, 56, Bytes(40), 100);
  ASSERT_NE(cache.Find(1, 16, 40), nullptr);
  cache.Add(2, 16, Bytes(40), 100);  // 120 bytes: the first group goes
  EXPECT_EQ(cache.Find(1, 16, 40), nullptr);
  EXPECT_NE(cache.Find(1, 56, 40), nullptr);
  EXPECT_NE(cache.Find(2, 16, 40), nullptr);
  cache.Add(2, 56, Bytes(200), 100);  // larger than the bound: nothing stays
  EXPECT_EQ(cache.Find(1, 56, 40), nullptr);
  EXPECT_EQ(cache.Find(2, 16, 40), nullptr);
  EXPECT_EQ(cache.Find(2, 56, 10), nullptr);
}

std::unique_ptr<StreamState> Stream(StreamId id) {
  auto s = std::make_unique<StreamState>();
  s->id = id;
  return s;
}

TEST(StreamTableTest, InsertFindEraseThroughGrowthAndShrinking) {
  StreamTable table;
  EXPECT_EQ(table.Find(1), nullptr);
  constexpr StreamId kCount = 1000;
  for (StreamId id = 1; id <= kCount; ++id) ASSERT_NE(table.Insert(Stream(id)), nullptr);
  EXPECT_EQ(table.size(), kCount);
  EXPECT_EQ(table.Insert(Stream(7)), nullptr);  // the id is taken
  EXPECT_EQ(table.size(), kCount);
  for (StreamId id = 1; id <= kCount; id += 2) table.Erase(id);
  EXPECT_EQ(table.size(), kCount / 2);
  for (StreamId id = 1; id <= kCount; ++id) {
    StreamState* s = table.Find(id);
    if (id % 2 == 1) {
      EXPECT_EQ(s, nullptr) << id;
    } else {
      ASSERT_NE(s, nullptr) << id;
      EXPECT_EQ(s->id, id);
    }
  }
  for (StreamId id = 2; id <= kCount; id += 2) table.Erase(id);
  EXPECT_EQ(table.size(), 0u);
  size_t seen = 0;
  table.ForEach([&](const StreamState&) { ++seen; });
  EXPECT_EQ(seen, 0u);
}

TEST(StreamStateTest, KeySizesAreKeptOnlyOnceARecordHasAKey) {
  StreamState s;
  s.PushSize(10, 0);
  s.PushSize(20, 0);
  EXPECT_EQ(s.extras, nullptr);
  s.PushSize(30, 5);
  ASSERT_NE(s.extras, nullptr);
  EXPECT_EQ(s.extras->key_sizes, (std::vector<uint32_t>{0, 0, 5}));
  EXPECT_EQ(s.KeySize(2), 5u);
  s.PushSize(40 | kDroppedBit, 0);  // a dropped record (from a checkpoint) is not counted
  EXPECT_TRUE(s.DroppedAt(3));
  EXPECT_EQ(s.Dropped(), 1u);
  EXPECT_EQ(s.RecordBytesAt(3), 0u);
  EXPECT_EQ(s.bytes, s.RecordBytesAt(0) + s.RecordBytesAt(1) + s.RecordBytesAt(2));
}

TEST(CleanerPolicyTest, TakesTheEmptiestWithinTheBudgetBySegmentNumber) {
  // (bytes, segment)
  const std::vector<std::pair<uint64_t, uint64_t>> candidates = {
      {500, 1}, {100, 4}, {300, 2}, {200, 9}};
  EXPECT_EQ(PickEmptiest(candidates, 600, false), (std::vector<uint64_t>{2, 4, 9}));
  EXPECT_EQ(PickEmptiest(candidates, 599, false), (std::vector<uint64_t>{4, 9}));
  EXPECT_EQ(PickEmptiest(candidates, 10000, false), (std::vector<uint64_t>{1, 2, 4, 9}));
  // The emptiest alone over the budget: taken only with at_least_one.
  EXPECT_TRUE(PickEmptiest(candidates, 50, false).empty());
  EXPECT_EQ(PickEmptiest(candidates, 50, true), (std::vector<uint64_t>{4}));
  EXPECT_TRUE(PickEmptiest({}, 1000, true).empty());
}

}  // namespace
}  // namespace runnel::log
