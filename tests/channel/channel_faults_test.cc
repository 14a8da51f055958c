// DurableChannel under injected store outcomes: uncertain appends (U) and sequence conflicts (S).
// Every fault comes from FaultyStore; rule ids are in the test names.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "channel/channel_suites.h"
#include "channel/channel_test_base.h"

namespace runnel::testing {
namespace {

using Fault = FaultyStore::AppendFault;

class ChannelFaultsTest : public ChannelTestBase {
 protected:
  void OpenChannel(size_t partitions = 1) {
    auto ch =
        DurableChannel::WithPartitionKey("orders", partitions, registry(), HashKeyPartitioner);
    ASSERT_TRUE(ch.ok()) << ch.status().ToString();
    channel_.emplace(std::move(*ch));
  }
  DurableChannel& ch() { return *channel_; }

  std::optional<DurableChannel> channel_;
};

// ---- U: uncertain appends ----

TEST_P(ChannelFaultsTest, U1_UnknownOutcomeKeepsExactEvidenceAndNeverResends) {
  OpenChannel();
  ASSERT_TRUE(ch().Publish(Env("first")).ok());
  faulty().InjectAppendFault(Fault::kNotLanded);
  const MessageEnvelope e = Env("second", "idem-2");
  const uint64_t appends = faulty().appends();
  auto r = ch().Publish(e);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kOutcomeUnknown);
  EXPECT_EQ(
      r.status().message().rfind("AppendUnresolved: stream orders:0 sequence 1 (offset 2)", 0), 0u)
      << r.status().ToString();
  EXPECT_EQ(faulty().appends(), appends + 1) << "the payload was sent more than once";
  ASSERT_TRUE(ch().PendingAppend().has_value());
  const UnresolvedAppend& ev = *ch().PendingAppend();
  EXPECT_EQ(ev.channel, "orders");
  EXPECT_EQ(ev.stream_key, "orders:0");
  EXPECT_EQ(ev.partition, 0u);
  EXPECT_EQ(ev.sequence, 1u);
  EXPECT_EQ(ev.payload, EncodeEnvelope(e));
  EXPECT_EQ(ev.idempotency_key, std::optional<std::string>("idem-2"));
  EXPECT_EQ(ev.append_error.code(), StatusCode::kOutcomeUnknown);
  EXPECT_NE(ev.cause.find("connection dropped"), std::string::npos);
  ASSERT_TRUE(ch().LastError().has_value());
  EXPECT_EQ(ch().LastError()->kind, ChannelError::Kind::kAppendUnresolved);
  EXPECT_EQ(ch().LastError()->sequence, 1u);
}

TEST_P(ChannelFaultsTest, U2_NextSequenceDoesNotAdvanceWhileAnAppendIsPending) {
  OpenChannel();
  faulty().InjectAppendFault(Fault::kLandedReplyLost);
  ASSERT_FALSE(ch().Publish(Env("m")).ok());
  EXPECT_EQ(ch().NextExpectedSequence(0), 0u);
  EXPECT_TRUE(ch().PendingAppend().has_value());
  EXPECT_EQ(ch().PendingAppend()->sequence, 0u);
}

TEST_P(ChannelFaultsTest, U3_ResolveWithNothingPendingIsNone) {
  OpenChannel();
  const uint64_t calls = faulty().calls();
  auto r = ch().ResolvePending();
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->has_value());
  EXPECT_EQ(faulty().calls(), calls);
}

TEST_P(ChannelFaultsTest, U4_LandedButReplyLostResolvesCommittedByReadingTheSlot) {
  OpenChannel();
  faulty().InjectAppendFault(Fault::kLandedReplyLost);
  ASSERT_EQ(ch().Publish(Env("m", "k")).status().code(), StatusCode::kOutcomeUnknown);
  const uint64_t appends = faulty().appends();
  const uint64_t read_ats = faulty().read_ats();
  auto r = ch().ResolvePending();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(r->has_value());
  EXPECT_EQ(**r, AppendResolution::Committed(0, 0));
  EXPECT_EQ((*r)->offset, 1u);
  EXPECT_EQ(faulty().appends(), appends) << "resolve wrote";
  EXPECT_EQ(faulty().read_ats(), read_ats + 1);
  EXPECT_FALSE(ch().PendingAppend().has_value());
  EXPECT_EQ(ch().NextExpectedSequence(0), 1u);
  EXPECT_EQ(ReadAll("orders:0").size(), 1u);
  // The committed key is indexed.
  auto again = ch().PublishWithReceipt(Env("m", "k"));
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->duplicate);
}

TEST_P(ChannelFaultsTest, U4_NotLandedResolvesAbsent) {
  OpenChannel();
  faulty().InjectAppendFault(Fault::kNotLanded);
  ASSERT_FALSE(ch().Publish(Env("m")).ok());
  auto r = ch().ResolvePending();
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(r->has_value());
  EXPECT_EQ((*r)->kind, AppendResolution::Kind::kAbsent);
  EXPECT_FALSE(ch().PendingAppend().has_value());
  EXPECT_EQ(ch().NextExpectedSequence(0), 0u);
  EXPECT_TRUE(ReadAll("orders:0").empty());
}

TEST_P(ChannelFaultsTest, U4_AnotherWritersRowInTheSlotResolvesAbsentAndMovesNextPastIt) {
  OpenChannel();
  MessageEnvelope foreign = Env("theirs", "their-key");
  foreign.publisher_id = "other";
  faulty().SetForeignEnvelope(foreign);
  faulty().InjectAppendFault(Fault::kForeignInSlotThenUnknown);
  ASSERT_FALSE(ch().Publish(Env("mine")).ok());
  auto r = ch().ResolvePending();
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(r->has_value());
  EXPECT_EQ((*r)->kind, AppendResolution::Kind::kAbsent);
  EXPECT_EQ(ch().NextExpectedSequence(0), 1u);
  // The foreign row was indexed on the way past.
  auto theirs = ch().PublishWithReceipt(Env("x", "their-key"));
  ASSERT_TRUE(theirs.ok());
  EXPECT_TRUE(theirs->duplicate);
  auto mine = ch().Publish(Env("mine again"));
  ASSERT_TRUE(mine.ok());
  EXPECT_EQ(*mine, 2u);
}

TEST_P(ChannelFaultsTest, U5_UnreadableSlotKeepsEvidenceAndNamesBothErrorsThenResolves) {
  OpenChannel();
  faulty().InjectAppendFault(Fault::kLandedReplyLost);
  ASSERT_FALSE(ch().Publish(Env("m")).ok());
  const std::string payload = ch().PendingAppend()->payload;
  faulty().FailReadAts(1, Status::Unavailable("injected: replica down"));
  auto failed = ch().ResolvePending();
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), StatusCode::kFailedPrecondition);
  const std::string msg(failed.status().message());
  EXPECT_EQ(msg.rfind("PendingAppendUnreadable: stream orders:0 sequence 0", 0), 0u) << msg;
  EXPECT_NE(msg.find("reply was lost"), std::string::npos) << msg;
  EXPECT_NE(msg.find("replica down"), std::string::npos) << msg;
  ASSERT_TRUE(ch().LastError().has_value());
  const ChannelError& e = *ch().LastError();
  EXPECT_EQ(e.kind, ChannelError::Kind::kPendingAppendUnreadable);
  EXPECT_EQ(e.append_error.code(), StatusCode::kOutcomeUnknown);
  EXPECT_EQ(e.read_error.code(), StatusCode::kUnavailable);
  ASSERT_TRUE(ch().PendingAppend().has_value());
  EXPECT_EQ(ch().PendingAppend()->payload, payload);
  auto later = ch().ResolvePending();
  ASSERT_TRUE(later.ok()) << later.status().ToString();
  ASSERT_TRUE(later->has_value());
  EXPECT_TRUE((*later)->committed());
  EXPECT_FALSE(ch().LastError().has_value());
}

TEST_P(ChannelFaultsTest, U6_PublishSettlesTheEarlierPendingAppendWithOneReadFirst) {
  OpenChannel();
  faulty().InjectAppendFault(Fault::kLandedReplyLost);
  ASSERT_FALSE(ch().Publish(Env("first")).ok());
  const uint64_t read_ats = faulty().read_ats();
  auto second = ch().PublishWithReceipt(Env("second"));
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ(faulty().read_ats(), read_ats + 1);
  EXPECT_EQ(second->offset, 2u);
  auto events = ReadAll("orders:0");
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(DecodeEnvelope(events[0].payload)->payload, "first");
  EXPECT_EQ(DecodeEnvelope(events[1].payload)->payload, "second");
}

TEST_P(ChannelFaultsTest, U6_PublishIsRefusedByNameWhenThePendingSlotIsUnreadable) {
  OpenChannel();
  faulty().InjectAppendFault(Fault::kNotLanded);
  ASSERT_FALSE(ch().Publish(Env("first")).ok());
  faulty().FailReadAts(1);
  const uint64_t appends = faulty().appends();
  auto refused = ch().Publish(Env("second"));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(refused.status().message().rfind("PendingAppendUnreadable: ", 0), 0u);
  EXPECT_EQ(faulty().appends(), appends) << "the new payload was sent";
  EXPECT_EQ(ch().PendingAppend()->payload, EncodeEnvelope(Env("first")));
  auto retried = ch().Publish(Env("second"));
  ASSERT_TRUE(retried.ok()) << retried.status().ToString();
  EXPECT_EQ(*retried, 1u);  // "first" was absent, so "second" takes its slot
}

TEST_P(ChannelFaultsTest, U7_ReadBackDecidesAndAPositionGuardedRepublishLandsOnce) {
  OpenChannel();
  // Not landed: the read-back says absent; publishing again lands exactly once.
  faulty().InjectAppendFault(Fault::kNotLanded);
  ASSERT_FALSE(ch().Publish(Env("a", "ka")).ok());
  auto absent = ch().ResolvePending();
  ASSERT_TRUE(absent.ok() && absent->has_value());
  EXPECT_FALSE((*absent)->committed());
  auto again = ch().PublishWithReceipt(Env("a", "ka"));
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(again->duplicate);
  EXPECT_EQ(again->offset, 1u);
  // Landed: the read-back says applied; publishing again is a duplicate and writes nothing.
  faulty().InjectAppendFault(Fault::kLandedReplyLost);
  ASSERT_FALSE(ch().Publish(Env("b", "kb")).ok());
  auto republish = ch().PublishWithReceipt(Env("b", "kb"));
  ASSERT_TRUE(republish.ok());
  EXPECT_TRUE(republish->duplicate);
  EXPECT_EQ(republish->offset, 2u);
  EXPECT_EQ(ReadAll("orders:0").size(), 2u);
}

TEST_P(ChannelFaultsTest, U8_EveryAppendTheChannelSendsIsPositionGuarded) {
  OpenChannel(3);
  faulty().InjectAppendFault(Fault::kForeignWriterFirst);
  faulty().InjectAppendFault(Fault::kLandedReplyLost);
  const size_t before = faulty().expected_offsets().size();
  for (int i = 0; i < 12; ++i) {
    (void)ch().Publish(Env("m", "k" + std::to_string(i), "user" + std::to_string(i % 4)));
  }
  auto offsets = faulty().expected_offsets();
  ASSERT_GT(offsets.size(), before);
  for (size_t i = before; i < offsets.size(); ++i) {
    EXPECT_TRUE(offsets[i].has_value()) << "append " << i << " was not guarded";
  }
}

TEST_P(ChannelFaultsTest, U4_SlotRemovedByRetentionIsNotCalledAbsent) {
  OpenChannel();
  faulty().InjectAppendFault(Fault::kLandedReplyLost);
  ASSERT_FALSE(ch().Publish(Env("m")).ok());
  ASSERT_TRUE(AppendRaw("orders:0", EncodeEnvelope(Env("later"))) == 2u);
  ASSERT_TRUE(registry().Prune(StreamScope::Global(), "orders:0", 1).ok());
  auto r = ch().ResolvePending();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(ch().PendingAppend().has_value());
  ch().AbandonPending();
  EXPECT_FALSE(ch().PendingAppend().has_value());
  auto next = ch().Publish(Env("next"));
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  EXPECT_EQ(*next, 3u);
}

TEST_P(ChannelFaultsTest, I3_KeyHeldByAnUnresolvedAppendIsLookedUpOnlyAfterSettling) {
  OpenChannel();
  faulty().InjectAppendFault(Fault::kLandedReplyLost);
  ASSERT_FALSE(ch().Publish(Env("m", "held")).ok());
  const uint64_t reads = faulty().reads() + faulty().read_ats();
  auto early = ch().FindIdempotencyKey("held");
  ASSERT_FALSE(early.ok());
  EXPECT_EQ(early.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(early.status().message().rfind("AppendUnresolved: ", 0), 0u);
  EXPECT_EQ(faulty().reads() + faulty().read_ats(), reads) << "looked up before settling";
  // Other keys are not held.
  auto other = ch().FindIdempotencyKey("other");
  ASSERT_TRUE(other.ok());
  EXPECT_FALSE(other->committed());
  ASSERT_TRUE(ch().ResolvePending().ok());
  auto settled = ch().FindIdempotencyKey("held");
  ASSERT_TRUE(settled.ok());
  EXPECT_EQ(*settled, AppendResolution::Committed(0, 0));
}

TEST_P(ChannelFaultsTest, I2_FailedConfirmationReadIsAnErrorNotAbsentOrNew) {
  OpenChannel();
  ASSERT_TRUE(ch().Publish(Env("m", "k")).ok());
  faulty().FailReadAts(1);
  const uint64_t appends = faulty().appends();
  auto r = ch().PublishWithReceipt(Env("m", "k"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kIOError);
  EXPECT_EQ(faulty().appends(), appends) << "a failed read was taken for absence";
  auto again = ch().PublishWithReceipt(Env("m", "k"));
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->duplicate);
}

TEST_P(ChannelFaultsTest, I1_ResolveIdempotencyKeySettlesThePendingAppendThatHoldsIt) {
  OpenChannel();
  faulty().InjectAppendFault(Fault::kLandedReplyLost);
  ASSERT_FALSE(ch().Publish(Env("m", "timed-out")).ok());
  auto r = ch().ResolveIdempotencyKey("timed-out");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, AppendResolution::Committed(0, 0));
  EXPECT_FALSE(ch().PendingAppend().has_value());
  faulty().InjectAppendFault(Fault::kNotLanded);
  ASSERT_FALSE(ch().Publish(Env("n", "lost")).ok());
  auto lost = ch().ResolveIdempotencyKey("lost");
  ASSERT_TRUE(lost.ok());
  EXPECT_FALSE(lost->committed());
  auto other = ch().ResolveIdempotencyKey("timed-out");
  ASSERT_TRUE(other.ok());
  EXPECT_TRUE(other->committed());
}

// ---- S: sequence conflicts ----

TEST_P(ChannelFaultsTest, S1_AGuardedAppendAtATakenPositionIsRefusedAndWritesNoRow) {
  OpenChannel();
  ASSERT_TRUE(ch().Publish(Env("a")).ok());
  AppendOptions options;
  options.expected_offset = 1;
  auto r = registry().AppendBatch(StreamScope::Global(), "orders:0",
                                  {AppendRecord{std::nullopt, "dup"}}, options);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kConflict);
  EXPECT_EQ(r.status().conflict_expected(), 1u);
  EXPECT_EQ(r.status().conflict_actual(), 2u);
  EXPECT_EQ(ReadAll("orders:0").size(), 1u);
}

TEST_P(ChannelFaultsTest, S2_OneConflictReadsTheTailAndRetriesOnceAtTheNewTail) {
  OpenChannel();
  ASSERT_TRUE(ch().Publish(Env("a")).ok());
  faulty().InjectAppendFault(Fault::kForeignWriterFirst);
  const uint64_t appends = faulty().appends();
  auto r = ch().PublishWithReceipt(Env("b"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->offset, 3u);
  EXPECT_EQ(faulty().appends(), appends + 2);
  EXPECT_EQ(ch().NextExpectedSequence(0), 3u);
  auto events = ReadAll("orders:0");
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(DecodeEnvelope(events[1].payload)->publisher_id, "other-writer");
  EXPECT_EQ(DecodeEnvelope(events[2].payload)->payload, "b");
}

TEST_P(ChannelFaultsTest, S2_SecondConflictReachesTheCallerWithExpectedAndActual) {
  OpenChannel();
  faulty().InjectAppendFault(Fault::kForeignWriterFirst, 2);
  const uint64_t appends = faulty().appends();
  auto r = ch().Publish(Env("mine", "mine-key"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kConflict);
  EXPECT_EQ(r.status().message().rfind("SequenceConflict: ", 0), 0u);
  // The retry expected offset 2 (after the first foreign row); a second one had taken it.
  EXPECT_EQ(r.status().conflict_expected(), 2u);
  EXPECT_EQ(r.status().conflict_actual(), 3u);
  ASSERT_TRUE(ch().LastError().has_value());
  EXPECT_EQ(ch().LastError()->kind, ChannelError::Kind::kSequenceConflict);
  EXPECT_EQ(ch().LastError()->expected, 2u);
  EXPECT_EQ(ch().LastError()->actual, 3u);
  EXPECT_EQ(faulty().appends(), appends + 2) << "retried more than once";
  EXPECT_FALSE(ch().PendingAppend().has_value());
  auto events = ReadAll("orders:0");
  ASSERT_EQ(events.size(), 2u);
  for (const auto& e : events) EXPECT_EQ(DecodeEnvelope(e.payload)->publisher_id, "other-writer");
  auto lookup = ch().FindIdempotencyKey("mine-key");
  ASSERT_TRUE(lookup.ok());
  EXPECT_FALSE(lookup->committed());
  // The tail was adopted, so the next publish lands without a conflict.
  auto next = ch().Publish(Env("mine", "mine-key"));
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(*next, 3u);
}

TEST_P(ChannelFaultsTest, S2_AKeyLearnedFromTheConflictGapIsADuplicate) {
  OpenChannel();
  faulty().SetForeignEnvelope(Env("same message", "shared-key"));
  faulty().InjectAppendFault(Fault::kForeignWriterFirst);
  auto r = ch().PublishWithReceipt(Env("same message", "shared-key"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->duplicate);
  EXPECT_EQ(r->offset, 1u);
  EXPECT_EQ(ReadAll("orders:0").size(), 1u);
}

TEST_P(ChannelFaultsTest, V7_UndecodableRowInTheConflictGapIsReportedByName) {
  OpenChannel();
  ASSERT_EQ(AppendRaw("orders:0", "garbage"), 1u);
  const uint64_t appends = faulty().appends();
  auto r = ch().Publish(Env("mine"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kCorruption);
  EXPECT_EQ(r.status().message().rfind("EnvelopeError: stream orders:0 sequence 0 (offset 1)", 0),
            0u)
      << r.status().ToString();
  EXPECT_EQ(faulty().appends(), appends + 1) << "retried past a row it could not read";
  EXPECT_FALSE(ch().PendingAppend().has_value());
  ASSERT_TRUE(ch().LastError().has_value());
  EXPECT_EQ(ch().LastError()->kind, ChannelError::Kind::kEnvelopeError);
}

TEST_P(ChannelFaultsTest, U4_KeyedAppendLostToAForeignRowLandsAfterItWhenPublishedAgain) {
  OpenChannel();
  faulty().InjectAppendFault(Fault::kForeignInSlotThenUnknown);
  ASSERT_FALSE(ch().Publish(Env("mine", "k")).ok());
  auto r = ch().ResolvePending();
  ASSERT_TRUE(r.ok() && r->has_value());
  EXPECT_FALSE((*r)->committed());
  EXPECT_EQ(ch().NextExpectedSequence(0), 1u);
  auto again = ch().PublishWithReceipt(Env("mine", "k"));
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(again->duplicate);
  EXPECT_EQ(again->offset, 2u);
}

TEST_P(ChannelFaultsTest, S4_AnUnknownOutcomeNeverTakesTheConflictPath) {
  OpenChannel();
  faulty().InjectAppendFault(Fault::kForeignInSlotThenUnknown);
  const uint64_t appends = faulty().appends();
  const uint64_t reads = faulty().reads();
  auto r = ch().Publish(Env("mine"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kOutcomeUnknown);
  EXPECT_FALSE(r.status().conflict_expected().has_value());
  EXPECT_EQ(faulty().appends(), appends + 1) << "an unknown outcome was retried";
  EXPECT_EQ(faulty().reads(), reads) << "an unknown outcome read the tail like a conflict";
  EXPECT_EQ(ch().NextExpectedSequence(0), 0u);
  EXPECT_TRUE(ch().PendingAppend().has_value());
}

TEST_P(ChannelFaultsTest, V2_StoreOverflowRefusalIsDefiniteAndLeavesNothingPending) {
  OpenChannel();
  faulty().InjectAppendFault(Fault::kOutOfRange);
  auto r = ch().Publish(Env("m"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(r.status().message().rfind("Overflow: ", 0), 0u);
  EXPECT_FALSE(ch().PendingAppend().has_value());
  EXPECT_EQ(ch().NextExpectedSequence(0), 0u);
}

RUNNEL_CHANNEL_SUITE_INSTANCES(ChannelFaultsTest);

}  // namespace
}  // namespace runnel::testing
