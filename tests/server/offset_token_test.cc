#include "server/offset_token.h"

#include <gtest/gtest.h>

namespace runnel::server {
namespace {

TEST(OffsetTokenTest, FormatsZeroPaddedSortableTokens) {
  EXPECT_EQ(FormatOffset(0), "0000000000000000_0000000000000000");
  EXPECT_EQ(FormatOffset(42), "0000000000000000_0000000000000042");
  EXPECT_LT(FormatOffset(9), FormatOffset(10));
  EXPECT_LT(FormatOffset(99999), FormatOffset(100000));
}

TEST(OffsetTokenTest, RoundTripsPositions) {
  for (uint64_t p : {0ULL, 1ULL, 7ULL, 1000ULL, 9999999999999999ULL}) {
    auto parsed = ParseOffset(FormatOffset(p));
    ASSERT_TRUE(parsed.ok()) << p;
    EXPECT_EQ(parsed->kind, OffsetQuery::Kind::kPosition);
    EXPECT_EQ(parsed->position, p);
  }
}

TEST(OffsetTokenTest, RecognisesSentinels) {
  EXPECT_EQ(ParseOffset("-1")->kind, OffsetQuery::Kind::kBeginning);
  EXPECT_EQ(ParseOffset("now")->kind, OffsetQuery::Kind::kNow);
}

TEST(OffsetTokenTest, RejectsMalformedTokens) {
  for (std::string_view bad : {"", "0", "0,1", "0 1", "abc", "-2", "NOW",
                               "0000000000000000-0000000000000001",
                               "0000000000000000_000000000000001",
                               "0000000000000000_00000000000000011",
                               "000000000000000a_0000000000000001",
                               "0000000000000001_0000000000000001"}) {
    auto parsed = ParseOffset(bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace runnel::server
