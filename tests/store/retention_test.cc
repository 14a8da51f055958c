// The shared retention arithmetic (SEMANTICS P1-P3, P6, A4) on plain vectors.
#include "store/retention.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

namespace runnel::store {
namespace {

size_t Drop(const StreamRetention& r, uint64_t now, const std::vector<uint64_t>& ts,
            const std::vector<uint64_t>& sizes) {
  RetainedView v;
  v.count = ts.size();
  v.total_bytes = std::accumulate(sizes.begin(), sizes.end(), uint64_t{0});
  v.timestamp_at = [&](size_t i) { return ts[i]; };
  v.bytes_at = [&](size_t i) { return sizes[i]; };
  return RetentionDropCount(r, now, v);
}

TEST(RetentionTest, NoCapsDropNothing) {
  EXPECT_EQ(Drop({}, 100, {1, 2, 3}, {1, 1, 1}), 0u);
}

TEST(RetentionTest, CountCap) {
  EXPECT_EQ(Drop({3, std::nullopt, std::nullopt}, 0, {0, 0, 0, 0, 0}, {1, 1, 1, 1, 1}), 2u);
  EXPECT_EQ(Drop({9, std::nullopt, std::nullopt}, 0, {0, 0}, {1, 1}), 0u);
}

TEST(RetentionTest, ByteCapKeepsNewestThatFitAndAlwaysTheLast) {
  EXPECT_EQ(Drop({std::nullopt, std::nullopt, 10}, 0, {0, 0, 0}, {4, 4, 4}), 1u);
  EXPECT_EQ(Drop({std::nullopt, std::nullopt, 10}, 0, {0, 0, 0}, {4, 4, 40}), 2u);
}

TEST(RetentionTest, AgeCapIsStrictSaturatingAndStopsAtFirstFresh) {
  const StreamRetention r{std::nullopt, 1000, std::nullopt};
  EXPECT_EQ(Drop(r, 10000, {0, 500, 10000}, {1, 1, 1}), 2u);
  EXPECT_EQ(Drop(r, 2000, {1000, 2000}, {1, 1}), 0u);  // exactly at the cutoff stays
  EXPECT_EQ(Drop(r, 500, {0, 500}, {1, 1}), 0u);       // now - age saturates at 0
  EXPECT_EQ(Drop(r, 10000, {9500, 0, 10000}, {1, 1, 1}), 0u);
}

TEST(RetentionTest, TheNewestRecordIsNeverDropped) {
  EXPECT_EQ(Drop({1, 0, 1}, 5, {0, 0, 0}, {5, 5, 5}), 2u);
  EXPECT_EQ(Drop({1, 0, 1}, 5, {0}, {5}), 0u);
  EXPECT_EQ(Drop({1, 0, 1}, 5, {}, {}), 0u);
}

TEST(RetentionTest, ZeroCapsAreInvalidButZeroAgeIsAllowed) {
  EXPECT_EQ(ValidateRetention({0, std::nullopt, std::nullopt}).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateRetention({std::nullopt, std::nullopt, 0}).code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE(ValidateRetention({std::nullopt, 0, std::nullopt}).ok());
  EXPECT_TRUE(ValidateRetention({}).ok());
  EXPECT_EQ(ValidateStreamName("").code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(ValidateStreamName("x").ok());
}

}  // namespace
}  // namespace runnel::store
