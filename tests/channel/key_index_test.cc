// KeyIndex: the hash table under the channel's idempotency index. Hash collisions are forced
// here by inserting equal hashes directly (the channel confirms every candidate by reading).
#include "core/channel/key_index.h"

#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

namespace runnel::channel {
namespace {

std::vector<std::pair<size_t, uint64_t>> Candidates(const KeyIndex& index, uint64_t hash) {
  std::vector<std::pair<size_t, uint64_t>> out;
  index.ForEachCandidate(hash, [&](size_t p, uint64_t s) {
    out.emplace_back(p, s);
    return false;
  });
  return out;
}

TEST(KeyIndexTest, I1_EmptyIndexHasNoCandidates) {
  KeyIndex index;
  EXPECT_TRUE(Candidates(index, KeyIndex::Hash("k")).empty());
  EXPECT_EQ(index.size(), 0u);
}

TEST(KeyIndexTest, I1_CollidingHashesKeepEveryPositionInInsertionOrderAcrossGrowth) {
  KeyIndex index;
  const uint64_t h = 12345;
  // Interleave other hashes so the table grows several times between the colliding inserts.
  for (uint64_t i = 0; i < 1000; ++i) {
    ASSERT_TRUE(index.Insert(KeyIndex::Hash("other-" + std::to_string(i)), 9, i));
    if (i % 100 == 0) {
      ASSERT_TRUE(index.Insert(h, static_cast<size_t>(i % 7), i));
    }
  }
  auto got = Candidates(index, h);
  ASSERT_EQ(got.size(), 10u);
  for (size_t k = 0; k < got.size(); ++k) {
    EXPECT_EQ(got[k].second, k * 100) << k;
    EXPECT_EQ(got[k].first, (k * 100) % 7) << k;
  }
  EXPECT_EQ(index.size(), 1010u);
}

TEST(KeyIndexTest, I1_VisitStopsAtTheConfirmedCandidate) {
  KeyIndex index;
  ASSERT_TRUE(index.Insert(0, 1, 10));  // hash 0 is stored like any other
  ASSERT_TRUE(index.Insert(0, 2, 20));
  int visits = 0;
  const bool found = index.ForEachCandidate(0, [&](size_t p, uint64_t) {
    ++visits;
    return p == 1;
  });
  EXPECT_TRUE(found);
  EXPECT_EQ(visits, 1);
  EXPECT_EQ(Candidates(index, 0).size(), 2u);
}

TEST(KeyIndexTest, I1_SameTagOrSameHomeButAnotherHashIsNoCandidate) {
  KeyIndex index;
  // Same upper 32 bits (the table's tag) and the same low bits (the home slot of a small
  // table), different full hashes: only the full hash decides.
  const uint64_t a = 0xAAAABBBB00000005ull;
  const uint64_t b = 0xAAAABBBB00010005ull;
  // Same home slot, other tag.
  const uint64_t c = 0x1111222200000005ull;
  ASSERT_TRUE(index.Insert(a, 1, 10));
  ASSERT_TRUE(index.Insert(b, 2, 20));
  ASSERT_TRUE(index.Insert(c, 3, 30));
  ASSERT_TRUE(index.Insert(a, 4, 40));
  using Found = std::vector<std::pair<size_t, uint64_t>>;
  EXPECT_EQ(Candidates(index, a), (Found{{1, 10}, {4, 40}}));
  EXPECT_EQ(Candidates(index, b), (Found{{2, 20}}));
  EXPECT_EQ(Candidates(index, c), (Found{{3, 30}}));
  EXPECT_TRUE(Candidates(index, 0xAAAABBBB00020005ull).empty());
}

TEST(KeyIndexTest, I1_EntriesAreNumberedInInsertionOrderWithTheStoredHash) {
  KeyIndex index;
  ASSERT_TRUE(index.Insert(77, 5, 9));
  ASSERT_TRUE(index.Insert(0, 6, 3));  // a hash of 0 is stored as 1
  ASSERT_EQ(index.size(), 2u);
  EXPECT_EQ(index.at(0).hash, 77u);
  EXPECT_EQ(index.at(0).partition, 5u);
  EXPECT_EQ(index.at(0).slot, 9u);
  EXPECT_EQ(index.at(1).hash, 1u);
  EXPECT_EQ(index.at(1).partition, 6u);
  EXPECT_EQ(index.at(1).slot, 3u);
  // 0 and 1 are one stored hash, so each finds the other's entry.
  ASSERT_TRUE(index.Insert(1, 7, 4));
  using Found = std::vector<std::pair<size_t, uint64_t>>;
  EXPECT_EQ(Candidates(index, 0), (Found{{6, 3}, {7, 4}}));
  EXPECT_EQ(Candidates(index, 1), (Found{{6, 3}, {7, 4}}));
}

// 300000 entries: past 2^16, and past the 2 MiB size where the table and the entry array move
// to their own mappings, with several growths of each in between.
TEST(KeyIndexTest, I1_GrowthBeyond2To16EntriesKeepsEveryEntryAndCandidateOrder) {
  KeyIndex index;
  constexpr uint64_t kEntries = 300000;
  const uint64_t shared = KeyIndex::Hash("shared");
  std::vector<uint64_t> shared_slots;
  for (uint64_t i = 0; i < kEntries; ++i) {
    if (i % 9973 == 0) {
      ASSERT_TRUE(index.Insert(shared, static_cast<size_t>(i % 16), i));
      shared_slots.push_back(i);
    } else {
      ASSERT_TRUE(
          index.Insert(KeyIndex::Hash("req-" + std::to_string(i)), static_cast<size_t>(i % 16), i));
    }
  }
  ASSERT_EQ(index.size(), kEntries);
  for (uint64_t i = 0; i < kEntries; ++i) {
    ASSERT_EQ(index.at(i).slot, i) << i;
    if (i % 9973 == 0) continue;
    const auto got = Candidates(index, KeyIndex::Hash("req-" + std::to_string(i)));
    ASSERT_EQ(got.size(), 1u) << i;
    ASSERT_EQ(got[0], std::make_pair(static_cast<size_t>(i % 16), i)) << i;
  }
  const auto got = Candidates(index, shared);
  ASSERT_EQ(got.size(), shared_slots.size());
  for (size_t k = 0; k < got.size(); ++k) {
    EXPECT_EQ(got[k].second, shared_slots[k]) << k;
    EXPECT_EQ(got[k].first, shared_slots[k] % 16) << k;
  }
  EXPECT_TRUE(Candidates(index, KeyIndex::Hash("req-" + std::to_string(kEntries))).empty());
}

TEST(KeyIndexTest, I1_AFullIndexRefusesAnInsertAndChangesNothing) {
  KeyIndex index(3);
  EXPECT_FALSE(index.full());
  ASSERT_TRUE(index.Insert(10, 0, 0));
  ASSERT_TRUE(index.Insert(11, 0, 1));
  ASSERT_TRUE(index.Insert(12, 0, 2));
  EXPECT_TRUE(index.full());
  EXPECT_FALSE(index.Insert(13, 0, 3));
  EXPECT_EQ(index.size(), 3u);
  EXPECT_TRUE(Candidates(index, 13).empty());
  EXPECT_EQ(Candidates(index, 12).size(), 1u);
  EXPECT_EQ(KeyIndex(KeyIndex::kMaxEntries + 5).full(), false);
}

TEST(KeyIndexTest, HashSpreadsSimilarKeys) {
  EXPECT_NE(KeyIndex::Hash("req-1"), KeyIndex::Hash("req-2"));
  EXPECT_NE(KeyIndex::Hash(""), KeyIndex::Hash(std::string(1, '\0')));
  EXPECT_EQ(KeyIndex::Hash("same"), KeyIndex::Hash("same"));
}

}  // namespace
}  // namespace runnel::channel
