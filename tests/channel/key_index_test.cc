// KeyIndex: the hash table under the channel's idempotency index. Hash collisions are forced
// here by inserting equal hashes directly (the channel confirms every candidate by reading).
#include "core/channel/key_index.h"

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
    index.Insert(KeyIndex::Hash("other-" + std::to_string(i)), 9, i);
    if (i % 100 == 0) index.Insert(h, static_cast<size_t>(i % 7), i);
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
  index.Insert(0, 1, 10);  // hash 0 is stored like any other
  index.Insert(0, 2, 20);
  int visits = 0;
  const bool found = index.ForEachCandidate(0, [&](size_t p, uint64_t) {
    ++visits;
    return p == 1;
  });
  EXPECT_TRUE(found);
  EXPECT_EQ(visits, 1);
  EXPECT_EQ(Candidates(index, 0).size(), 2u);
}

TEST(KeyIndexTest, HashSpreadsSimilarKeys) {
  EXPECT_NE(KeyIndex::Hash("req-1"), KeyIndex::Hash("req-2"));
  EXPECT_NE(KeyIndex::Hash(""), KeyIndex::Hash(std::string(1, '\0')));
  EXPECT_EQ(KeyIndex::Hash("same"), KeyIndex::Hash("same"));
}

}  // namespace
}  // namespace runnel::channel
