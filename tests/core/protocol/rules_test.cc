// The protocol's pure per-stream rules (core/protocol/rules.h), by rule id (docs/semantics.md,
// family E). The same rules through HTTP are the conformance suite's (tests/conformance).
#include "core/protocol/rules.h"

#include <gtest/gtest.h>

namespace runnel::protocol {
namespace {

StreamInfo Info(uint64_t head, uint64_t tail, uint64_t next) {
  StreamInfo info;
  info.head_offset = head;
  info.tail_offset = tail;
  info.next_offset = next;
  return info;
}

TEST(ProtocolRulesTest, E1_ExpiresAtIsInclusive) {
  Meta m;
  m.expires_at_ms = 10'000;
  EXPECT_FALSE(Expired(m, {.now_ms = 9'999}));
  EXPECT_TRUE(Expired(m, {.now_ms = 10'000}));
  EXPECT_TRUE(Expired(m, {.now_ms = 50'000}));
  // An access does not move an absolute expiry.
  EXPECT_TRUE(Expired(m, {.now_ms = 10'000, .last_access_ms = 10'000}));
}

TEST(ProtocolRulesTest, E2_TtlSlidesWithTheNewestAccessPlusGrace) {
  Meta m;
  m.ttl_s = 10;
  const ExpiryClock at_creation{.now_ms = 0, .last_access_ms = 1'000, .grace_ms = 500};
  ExpiryClock c = at_creation;
  c.now_ms = 11'499;
  EXPECT_FALSE(Expired(m, c));
  c.now_ms = 11'500;
  EXPECT_TRUE(Expired(m, c));
  // An access renews it.
  c.last_access_ms = 9'000;
  EXPECT_FALSE(Expired(m, c));
  c.now_ms = 19'500;
  EXPECT_TRUE(Expired(m, c));
  // An access recorded by another node counts as well.
  m.touched_ms = 15'000;
  EXPECT_FALSE(Expired(m, c));
}

TEST(ProtocolRulesTest, E2_OnASharedStoreATtlStreamLivesAQuarterLonger) {
  Meta m;
  m.ttl_s = 8;
  ExpiryClock c{.now_ms = 8'000, .last_access_ms = 0, .grace_ms = 0};
  EXPECT_TRUE(Expired(m, c));
  c.shared_with_other_nodes = true;
  EXPECT_FALSE(Expired(m, c));
  c.now_ms = 10'000;
  EXPECT_TRUE(Expired(m, c));
}

TEST(ProtocolRulesTest, E2_AccessesAreRecordedAQuarterTtlApart) {
  Meta m;
  EXPECT_FALSE(RecordAccessDue(m, 0, 1'000'000));  // no TTL: nothing to renew
  m.ttl_s = 40;
  EXPECT_FALSE(RecordAccessDue(m, 100'000, 109'999));
  EXPECT_TRUE(RecordAccessDue(m, 100'000, 110'000));
}

TEST(ProtocolRulesTest, E3_AChannelStreamNeverExpires) {
  Meta m;
  m.channel = true;
  m.ttl_s = 1;
  m.expires_at_ms = 1;
  EXPECT_FALSE(Expired(m, {.now_ms = 1'000'000'000}));
}

TEST(ProtocolRulesTest, E4_StreamSeqMustIncreaseComparingBytes) {
  EXPECT_TRUE(CheckStreamSeq(std::nullopt, "a").ok());
  EXPECT_TRUE(CheckStreamSeq(std::string("a"), "b").ok());
  EXPECT_EQ(CheckStreamSeq(std::string("b"), "b").code(), StatusCode::kConflict);
  EXPECT_EQ(CheckStreamSeq(std::string("b"), "a").code(), StatusCode::kConflict);
  // Bytes, not numbers: "10" sorts before "9".
  EXPECT_EQ(CheckStreamSeq(std::string("9"), "10").code(), StatusCode::kConflict);
  EXPECT_TRUE(CheckStreamSeq(std::string("09"), "10").ok());
  EXPECT_NE(CheckStreamSeq(std::string("x"), "w").message().find("'x'"), std::string::npos);
}

TEST(ProtocolRulesTest, E4_StreamSeqMustBeUtf8) {
  EXPECT_TRUE(ValidateStreamSeq("2024-01-01T00:00:00Z#7").ok());
  EXPECT_TRUE(ValidateStreamSeq("\xc3\xa9").ok());
  EXPECT_EQ(ValidateStreamSeq("\xff").code(), StatusCode::kInvalidArgument);
}

TEST(ProtocolRulesTest, E7_Rfc3339TimesAndOffsets) {
  EXPECT_EQ(ParseRfc3339("1970-01-01T00:00:00Z"), 0);
  EXPECT_EQ(ParseRfc3339("1970-01-01T00:00:01.5Z"), 1'500);
  EXPECT_EQ(ParseRfc3339("1970-01-01t00:00:01.123456z"), 1'123);
  EXPECT_EQ(ParseRfc3339("1970-01-01T01:00:00+01:00"), 0);
  EXPECT_EQ(ParseRfc3339("1969-12-31T23:00:00-01:00"), 0);
  EXPECT_EQ(ParseRfc3339("2024-02-29T00:00:00Z"), 1'709'164'800'000);
}

TEST(ProtocolRulesTest, E7_NotRfc3339IsRefused) {
  for (const char* bad :
       {"", "2024-02-30T00:00:00Z", "2023-02-29T00:00:00Z", "2024-13-01T00:00:00Z",
        "2024-01-01T24:00:00Z", "2024-01-01T00:00:00", "2024-01-01T00:00:00.Z",
        "2024-01-01T00:00:00+0100", "2024-01-01T00:00:00Zjunk", "1700000000"}) {
    EXPECT_FALSE(ParseRfc3339(bad).has_value()) << bad;
  }
}

TEST(ProtocolRulesTest, E8_TheTailCountsTrimmedRecords) {
  EXPECT_EQ(TailPosition(Info(0, 0, 1)), 0u);     // empty
  EXPECT_EQ(TailPosition(Info(4, 9, 10)), 9u);    // 1..3 trimmed
  EXPECT_EQ(TailPosition(Info(0, 0, 10)), 9u);    // all trimmed
  EXPECT_EQ(PastTrimmed(Info(4, 9, 10), 0), 3u);  // a reader from 0 stands past 1..3
  EXPECT_EQ(PastTrimmed(Info(4, 9, 10), 6), 6u);  // never moves a reader back
  EXPECT_EQ(PastTrimmed(Info(0, 0, 10), 2), 9u);  // emptied: past everything
}

TEST(ProtocolRulesTest, E9_ProducerSequencing) {
  const std::optional<ProducerState> none;
  const std::optional<ProducerState> at = ProducerState{"p", 3, 5, 0};
  EXPECT_EQ(CheckProducer(none, 0, 0).verdict, ProducerVerdict::kAccept);
  EXPECT_EQ(CheckProducer(none, 7, 0).verdict, ProducerVerdict::kAccept);
  ProducerCheck first_gap = CheckProducer(none, 0, 4);
  EXPECT_EQ(first_gap.verdict, ProducerVerdict::kGap);
  EXPECT_EQ(first_gap.expected_seq, 0u);
  EXPECT_EQ(CheckProducer(at, 3, 6).verdict, ProducerVerdict::kAccept);
  EXPECT_EQ(CheckProducer(at, 3, 5).verdict, ProducerVerdict::kDuplicate);
  EXPECT_EQ(CheckProducer(at, 3, 0).verdict, ProducerVerdict::kDuplicate);
  ProducerCheck gap = CheckProducer(at, 3, 8);
  EXPECT_EQ(gap.verdict, ProducerVerdict::kGap);
  EXPECT_EQ(gap.expected_seq, 6u);
  EXPECT_EQ(CheckProducer(at, 2, 6).verdict, ProducerVerdict::kStaleEpoch);
  EXPECT_EQ(CheckProducer(at, 4, 0).verdict, ProducerVerdict::kAccept);
  EXPECT_EQ(CheckProducer(at, 4, 1).verdict, ProducerVerdict::kBadNewEpoch);
}

TEST(ProtocolRulesTest, E11_AConditionalAppendMustStartAtTheTail) {
  EXPECT_TRUE(CheckExpectedPosition(9, Info(4, 9, 10)).ok());
  Status behind = CheckExpectedPosition(7, Info(4, 9, 10));
  EXPECT_EQ(behind.code(), StatusCode::kConflict);
  EXPECT_EQ(CheckExpectedPosition(12, Info(4, 9, 10)).code(), StatusCode::kConflict);
  EXPECT_TRUE(CheckExpectedPosition(0, Info(0, 0, 1)).ok());
}

}  // namespace
}  // namespace runnel::protocol
