// The append decision (core/protocol/append.h, PlanAppend and DecideAppend): each rule it
// applies, by rule id (docs/semantics.md, family E), from values alone. The same decision through
// both doors is ProtocolStreamsTest (the C++ API, every store) and the conformance suite (HTTP).
#include "core/protocol/append.h"

#include <gtest/gtest.h>

#include <string>

namespace runnel::protocol {
namespace {

using Kind = AppendOutcome::Kind;
using Refusal = AppendOutcome::Refusal;

// An open text stream with records 1..5 (tail position 5).
Found TextStream() {
  Found f;
  f.info.id = 7;
  f.info.spec.name = "s";
  f.info.spec.content_type = "text/plain";
  f.info.head_offset = 1;
  f.info.tail_offset = 5;
  f.info.next_offset = 6;
  return f;
}

AppendSpec Body(std::string body, std::string_view content_type = "text/plain") {
  AppendSpec spec;
  spec.body = std::move(body);
  spec.content_type = content_type;
  return spec;
}

ProducerState Producer(uint64_t epoch, uint64_t seq) {
  return ProducerState{"p", epoch, seq, 0};
}

std::optional<AppendOutcome> Decide(const Found& f, AppendSpec spec,
                                    const std::optional<ProducerState>& stored = std::nullopt,
                                    AppendRequest* write = nullptr) {
  AppendRequest ignored;
  AppendRequest* w = write ? write : &ignored;
  const AppendPlan plan = PlanAppend(f, std::move(spec), 100, w);
  // The stream as the store's atomic step would show it.
  AppendState now;
  now.next_offset = f.info.next_offset;
  now.closed = f.info.closed;
  now.attributes = f.info.spec.attributes;
  if (stored) now.producer.emplace(stored->epoch, stored->seq);
  return DecideAppend(f, now, plan, w);
}

TEST(AppendDecisionTest, APlainAppendBecomesOneRecordForTheStream) {
  AppendRequest write;
  EXPECT_FALSE(Decide(TextStream(), Body("hello"), std::nullopt, &write).has_value());
  EXPECT_EQ(write.stream, 7u);
  ASSERT_EQ(write.records.size(), 1u);
  EXPECT_EQ(write.records[0].payload, "hello");
  EXPECT_FALSE(write.close);
  EXPECT_FALSE(write.expected_offset.has_value());
}

TEST(AppendDecisionTest, E6_AJsonArrayIsFlattenedOneLevel) {
  Found f = TextStream();
  f.info.spec.content_type = "application/json";
  AppendRequest write;
  EXPECT_FALSE(Decide(f, Body(R"([{"a":1},[2]])", "application/json"), std::nullopt, &write));
  ASSERT_EQ(write.records.size(), 2u);
  EXPECT_EQ(write.records[0].payload, R"({"a":1})");
  EXPECT_EQ(write.records[1].payload, "[2]");
  // More messages than the limit is the body's fault: a payload refusal.
  std::string many = "[";
  for (int i = 0; i < 101; ++i) many += (i ? ",1" : "1");
  many += "]";
  auto refused = Decide(f, Body(many, "application/json"));
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->refusal, Refusal::kPayload);
  EXPECT_EQ(refused->status.code(), StatusCode::kResourceExhausted);
  // Malformed JSON is a plain refusal.
  auto bad = Decide(f, Body("{", "application/json"));
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->refusal, Refusal::kNone);
  EXPECT_EQ(bad->status.code(), StatusCode::kInvalidArgument);
}

TEST(AppendDecisionTest, E5_TheBodyNeedsTheStreamsContentType) {
  auto missing = Decide(TextStream(), Body("x", ""));
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status.code(), StatusCode::kInvalidArgument);
  auto other = Decide(TextStream(), Body("x", "application/json"));
  ASSERT_TRUE(other);
  EXPECT_EQ(other->status.code(), StatusCode::kConflict);
  // Parameters and case do not matter.
  EXPECT_FALSE(Decide(TextStream(), Body("x", "Text/Plain; charset=utf-8")));
  auto empty = Decide(TextStream(), Body(""));
  ASSERT_TRUE(empty);
  EXPECT_EQ(empty->status.code(), StatusCode::kInvalidArgument);
}

TEST(AppendDecisionTest, E10_AClosedStreamTakesNothingButARetriedClose) {
  Found f = TextStream();
  f.info.closed = true;
  auto refused = Decide(f, Body("x"));
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->kind, Kind::kRefused);
  EXPECT_EQ(refused->status.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(refused->tail_position, 5u);
  EXPECT_TRUE(refused->closed);
  AppendSpec close;
  close.close = true;
  auto noop = Decide(f, close);
  ASSERT_TRUE(noop);
  EXPECT_EQ(noop->kind, Kind::kNoop);
  EXPECT_TRUE(noop->ok());
  EXPECT_TRUE(noop->closed);
  // A producer's duplicate still succeeds on a closed stream.
  AppendSpec dup = Body("x");
  dup.producer = Producer(1, 3);
  auto duplicate = Decide(f, dup, Producer(1, 4));
  ASSERT_TRUE(duplicate);
  EXPECT_EQ(duplicate->kind, Kind::kDuplicate);
  EXPECT_EQ(duplicate->producer_seq, 4u);
  EXPECT_TRUE(duplicate->closed);
}

TEST(AppendDecisionTest, E9_ProducerVerdictsBecomeOutcomes) {
  AppendSpec spec = Body("x");
  spec.producer = Producer(2, 5);
  AppendRequest write;
  EXPECT_FALSE(Decide(TextStream(), spec, Producer(2, 4), &write));
  ASSERT_TRUE(write.producer);
  EXPECT_EQ(write.producer->seq, 5u);

  auto duplicate = Decide(TextStream(), spec, Producer(2, 7));
  ASSERT_TRUE(duplicate);
  EXPECT_EQ(duplicate->kind, Kind::kDuplicate);
  EXPECT_EQ(duplicate->producer_epoch, 2u);
  EXPECT_EQ(duplicate->producer_seq, 7u);
  EXPECT_EQ(duplicate->tail_position, 5u);
  EXPECT_FALSE(duplicate->closed);

  auto stale = Decide(TextStream(), spec, Producer(3, 0));
  ASSERT_TRUE(stale);
  EXPECT_EQ(stale->status.code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(stale->producer_epoch, 3u);
  EXPECT_FALSE(stale->producer_seq);

  auto gap = Decide(TextStream(), spec, Producer(2, 2));
  ASSERT_TRUE(gap);
  EXPECT_EQ(gap->status.code(), StatusCode::kConflict);
  EXPECT_EQ(gap->expected_seq, 3u);
  EXPECT_EQ(gap->received_seq, 5u);

  auto bad_epoch = Decide(TextStream(), spec, Producer(1, 9));
  ASSERT_TRUE(bad_epoch);
  EXPECT_EQ(bad_epoch->status.code(), StatusCode::kInvalidArgument);
}

TEST(AppendDecisionTest, E4_StreamSeqMustGrowAndBeText) {
  Found f = TextStream();
  f.meta.stream_seq = "b";
  AppendSpec spec = Body("x");
  spec.stream_seq = "a";
  auto behind = Decide(f, spec);
  ASSERT_TRUE(behind);
  EXPECT_EQ(behind->status.code(), StatusCode::kConflict);
  spec.stream_seq = std::string("\xff", 1);
  auto binary = Decide(f, spec);
  ASSERT_TRUE(binary);
  EXPECT_EQ(binary->status.code(), StatusCode::kInvalidArgument);
  spec.stream_seq = "c";
  EXPECT_FALSE(Decide(f, spec));
}

TEST(AppendDecisionTest, E11_AConditionalAppendStartsAtTheTail) {
  AppendSpec spec = Body("x");
  spec.expected_position = 4;
  auto moved = Decide(TextStream(), spec);
  ASSERT_TRUE(moved);
  EXPECT_EQ(moved->status.code(), StatusCode::kConflict);
  EXPECT_EQ(moved->tail_position, 5u);
  spec.expected_position = 5;
  AppendRequest write;
  EXPECT_FALSE(Decide(TextStream(), spec, std::nullopt, &write));
  EXPECT_EQ(write.expected_offset, 6u);  // the store checks it again inside its atomic step
}

TEST(AppendDecisionTest, SoftDeletedAndChannelStreamsAreRefusedByKind) {
  Found deleted = TextStream();
  deleted.meta.soft_deleted = true;
  auto gone = Decide(deleted, Body("x"));
  ASSERT_TRUE(gone);
  EXPECT_EQ(gone->refusal, Refusal::kSoftDeleted);
  EXPECT_EQ(gone->status.code(), StatusCode::kNotFound);
  Found channel = TextStream();
  channel.meta.channel = true;
  auto owned = Decide(channel, Body("x"));
  ASSERT_TRUE(owned);
  EXPECT_EQ(owned->refusal, Refusal::kChannel);
  EXPECT_EQ(owned->status.code(), StatusCode::kFailedPrecondition);
}

TEST(AppendDecisionTest, ACompactedStreamTakesOnlyStateProtocolMessages) {
  Found f = TextStream();
  f.info.spec.content_type = "application/json";
  f.meta.compaction = compaction::Config{};
  auto refused = Decide(f, Body(R"({"not":"a change"})", "application/json"));
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status.code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(
      Decide(f, Body(R"({"type":"t","key":"k","value":1,"headers":{"operation":"insert"}})",
                     "application/json")));
}

// A store that retries its atomic step may end the append with its own status after an earlier
// Admit answered (the stream deleted between the two): the door must give the store's status,
// not the stale answer.
TEST(AppendDecisionTest, TheRulesAnswerOnlyWhenTheAppendEndedWithTheirRefusal) {
  AppendRequest write;
  AppendSpec spec = Body("x");
  spec.expected_position = 2;  // the stream's tail is 5
  const Found f = TextStream();
  AppendRules rules(std::make_shared<const Found>(f), PlanAppend(f, std::move(spec), 100, &write));
  AppendState now;
  now.next_offset = 6;
  const Status refused = rules.Admit(now, &write);
  ASSERT_EQ(refused.code(), StatusCode::kConflict);
  const AppendOutcome* answer = rules.AnswerFor(Result<AppendResult>(refused));
  ASSERT_NE(answer, nullptr);
  EXPECT_EQ(answer->tail_position, 5u);
  EXPECT_EQ(rules.AnswerFor(Result<AppendResult>(Status::NotFound("stream #7 does not exist"))),
            nullptr);
  // Admitted by a later call: the write's own result stands.
  now.next_offset = 3;
  EXPECT_TRUE(rules.Admit(now, &write).ok());
  EXPECT_EQ(rules.AnswerFor(Result<AppendResult>(refused)), nullptr);
  EXPECT_EQ(rules.AnswerFor(Result<AppendResult>(AppendResult{3, 3, 4})), nullptr);
}

}  // namespace
}  // namespace runnel::protocol
