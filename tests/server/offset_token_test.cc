#include "server/offset_token.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <initializer_list>

namespace runnel::server {
namespace {

TEST(OffsetTokenTest, FormatsZeroPaddedSortableTokens) {
  EXPECT_EQ(FormatOffset(0), "0000000000000000_0000000000000000");
  EXPECT_EQ(FormatOffset(42), "0000000000000000_0000000000000042");
  EXPECT_LT(FormatOffset(9), FormatOffset(10));
  EXPECT_LT(FormatOffset(99999), FormatOffset(100000));
}

// Every 64-bit position has a token: above 10^16 the first field carries the high part (a
// stream imported at a large first offset through the library must still read exactly).
TEST(OffsetTokenTest, PositionsPastSixteenDigitsUseTheFirstField) {
  EXPECT_EQ(FormatOffset(10000000000000000ULL), "0000000000000001_0000000000000000");
  EXPECT_EQ(FormatOffset(UINT64_MAX), "0000000000001844_6744073709551615");
  EXPECT_LT(FormatOffset(9999999999999999ULL), FormatOffset(10000000000000000ULL));
  EXPECT_LT(FormatOffset(UINT64_MAX - 1), FormatOffset(UINT64_MAX));
}

TEST(OffsetTokenTest, RoundTripsPositions) {
  for (uint64_t p :
       std::initializer_list<uint64_t>{0, 1, 7, 1000, 9999999999999999ULL, 10000000000000001ULL,
                                       123456789012345678ULL, UINT64_MAX - 1, UINT64_MAX}) {
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
  for (std::string_view bad :
       {"", "0", "0,1", "0 1", "abc", "-2", "NOW", "0000000000000000-0000000000000001",
        "0000000000000000_000000000000001", "0000000000000000_00000000000000011",
        "000000000000000a_0000000000000001", "0000000000001845_0000000000000000",
        "0000000000001844_6744073709551616", "9999999999999999_9999999999999999"}) {
    auto parsed = ParseOffset(bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace runnel::server
