// SEMANTICS section 2: consumer groups (C4-C8), consumer-aware prune (P7-P9) and wake-up
// subscriptions (N1-N4), run against every store.
#include <chrono>
#include <thread>

#include <gtest/gtest.h>

#include "core/registry_suites.h"

namespace runnel::testing {
namespace {

using std::chrono::milliseconds;

TEST_P(RegistryGroupsTest, C4_AckIsAMaxMergeThatRegistersTheGroup) {
  MustCreate(global_, "s");
  for (int i = 0; i < 5; ++i) MustAppend(global_, "s");
  EXPECT_TRUE(reg().ConsumerGroupInfo(global_, "s")->empty());
  ASSERT_TRUE(reg().Ack(global_, "s", "g", 3).ok());
  ASSERT_TRUE(reg().Ack(global_, "s", "g", 2).ok());
  auto info = reg().ConsumerGroupInfo(global_, "s");
  ASSERT_TRUE(info.ok());
  ASSERT_EQ(info->size(), 1u);
  EXPECT_EQ((*info)[0].group, "g");
  EXPECT_EQ((*info)[0].stream, "s");
  EXPECT_EQ((*info)[0].last_acked, 3u);
  // Ack and SaveOffset are one cursor.
  EXPECT_EQ(*reg().GetOffset(global_, "s", "g"), 3u);
  ASSERT_TRUE(reg().Ack(global_, "s", "zero", 0).ok());
  EXPECT_EQ(reg().ConsumerGroupInfo(global_, "s")->size(), 2u);
}

TEST_P(RegistryGroupsTest, C4_AckOnUnknownStreamIsNotFound) {
  EXPECT_EQ(reg().Ack(global_, "ghost", "g", 1).code(), StatusCode::kNotFound);
  EXPECT_EQ(reg().ReadNext(global_, "ghost", "g", 1).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(reg().ConsumerGroupInfo(global_, "ghost").status().code(), StatusCode::kNotFound);
}

TEST_P(RegistryGroupsTest, C5_ReadNextReadsAfterTheGroupsAck) {
  MustCreate(global_, "s");
  for (int i = 0; i < 5; ++i) MustAppend(global_, "s");
  ASSERT_TRUE(reg().Ack(global_, "s", "A", 3).ok());
  ASSERT_TRUE(reg().Ack(global_, "s", "B", 1).ok());
  EXPECT_EQ(OffsetsOf(reg().ReadNext(global_, "s", "A", 10)), (std::vector<uint64_t>{4, 5}));
  EXPECT_EQ(OffsetsOf(reg().ReadNext(global_, "s", "B", 10)), Range(2, 5));
  EXPECT_EQ(OffsetsOf(reg().ReadNext(global_, "s", "C", 10)), Range(1, 5));
  ASSERT_TRUE(reg().Ack(global_, "s", "A", 2).ok());
  EXPECT_EQ(OffsetsOf(reg().ReadNext(global_, "s", "A", 10)), (std::vector<uint64_t>{4, 5}));
  EXPECT_EQ(OffsetsOf(reg().ReadNext(global_, "s", "B", 2)), (std::vector<uint64_t>{2, 3}));
}

TEST_P(RegistryGroupsTest, C6_UnackedEventsComeAgainAndANewHandleResumes) {
  MustCreate(global_, "s");
  for (int i = 0; i < 3; ++i) MustAppend(global_, "s");
  EXPECT_EQ(OffsetsOf(reg().ReadNext(global_, "s", "g", 2)), (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(OffsetsOf(reg().ReadNext(global_, "s", "g", 2)), (std::vector<uint64_t>{1, 2}));
  ASSERT_TRUE(reg().Ack(global_, "s", "g", 2).ok());
  StreamRegistry other_handle = reg();
  EXPECT_EQ(OffsetsOf(other_handle.ReadNext(global_, "s", "g", 2)), std::vector<uint64_t>{3});
}

TEST_P(RegistryGroupsTest, C7_GroupInfoListsEveryGroupAndUpdatedAtMovesOnAdvanceOnly) {
  MustCreate(global_, "s");
  for (int i = 0; i < 5; ++i) MustAppend(global_, "s");
  clock_.Set(5000);
  ASSERT_TRUE(reg().Ack(global_, "s", "a", 2).ok());
  ASSERT_TRUE(reg().Ack(global_, "s", "b", 4).ok());
  clock_.Set(6000);
  ASSERT_TRUE(reg().Ack(global_, "s", "a", 1).ok());  // no advance
  clock_.Set(7000);
  ASSERT_TRUE(reg().Ack(global_, "s", "b", 5).ok());  // advance
  auto info = reg().ConsumerGroupInfo(global_, "s");
  ASSERT_TRUE(info.ok());
  ASSERT_EQ(info->size(), 2u);
  std::sort(info->begin(), info->end(),
            [](const auto& x, const auto& y) { return x.group < y.group; });
  EXPECT_EQ((*info)[0].last_acked, 2u);
  EXPECT_EQ((*info)[0].updated_at_ms, 5000u);
  EXPECT_EQ((*info)[1].last_acked, 5u);
  EXPECT_EQ((*info)[1].updated_at_ms, 7000u);
}

TEST_P(RegistryGroupsTest, C8_ConcurrentGroupsStayIndependent) {
  MustCreate(global_, "s");
  std::vector<AppendRecord> batch(100, AppendRecord{std::nullopt, "e"});
  ASSERT_TRUE(reg().AppendBatch(global_, "s", std::move(batch)).ok());
  std::vector<std::thread> threads;
  const std::vector<std::pair<std::string, uint64_t>> acks = {{"x", 100}, {"y", 40}, {"z", 75}};
  for (const auto& [group, upto] : acks) {
    threads.emplace_back([&, group = group, upto = upto] {
      for (uint64_t i = 1; i <= upto; ++i) ASSERT_TRUE(reg().Ack(global_, "s", group, i).ok());
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_TRUE(reg().ReadNext(global_, "s", "x", 10)->empty());
  EXPECT_EQ(OffsetsOf(reg().ReadNext(global_, "s", "y", 3)), (std::vector<uint64_t>{41, 42, 43}));
  EXPECT_EQ(OffsetsOf(reg().ReadNext(global_, "s", "z", 3)), (std::vector<uint64_t>{76, 77, 78}));
}

TEST_P(RegistryGroupsTest, P7_PruneNeverPassesTheSlowestGroup) {
  MustCreate(global_, "s");
  for (int i = 0; i < 10; ++i) MustAppend(global_, "s");
  ASSERT_TRUE(reg().Ack(global_, "s", "fast", 8).ok());
  ASSERT_TRUE(reg().Ack(global_, "s", "slow", 3).ok());
  EXPECT_EQ(*reg().Prune(global_, "s", 8), 3u);
  EXPECT_EQ(OffsetsOf(reg().ReadSince(global_, "s", 0, 100)), Range(4, 10));
  EXPECT_EQ(OffsetsOf(reg().ReadNext(global_, "s", "slow", 100)), Range(4, 10));
  EXPECT_EQ(OffsetsOf(reg().ReadNext(global_, "s", "fast", 100)), (std::vector<uint64_t>{9, 10}));
}

TEST_P(RegistryGroupsTest, P8_WithoutGroupsThroughIsTheCutoffAndAGroupAtZeroPins) {
  MustCreate(global_, "free");
  for (int i = 0; i < 5; ++i) MustAppend(global_, "free");
  EXPECT_EQ(*reg().Prune(global_, "free", 2), 2u);
  EXPECT_EQ(reg().Describe(global_, "free")->head_offset, 3u);
  MustCreate(global_, "pinned");
  for (int i = 0; i < 5; ++i) MustAppend(global_, "pinned");
  ASSERT_TRUE(reg().Ack(global_, "pinned", "idle", 0).ok());
  EXPECT_EQ(*reg().Prune(global_, "pinned", 5), 0u);
  EXPECT_EQ(reg().Describe(global_, "pinned")->event_count, 5u);
}

// An extension past the seeds (which have no delete): a retired group is deleted, so it stops
// pinning prune (P8) and leaves the group list (C7); an ack of its name registers it afresh.
TEST_P(RegistryGroupsTest, P8_ADeletedGroupNoLongerPins) {
  MustCreate(global_, "s");
  for (int i = 0; i < 5; ++i) MustAppend(global_, "s");
  ASSERT_TRUE(reg().Ack(global_, "s", "idle", 0).ok());
  ASSERT_TRUE(reg().Ack(global_, "s", "busy", 4).ok());
  EXPECT_EQ(*reg().Prune(global_, "s", 5), 0u);
  ASSERT_TRUE(reg().DeleteGroup(global_, "s", "idle").ok());
  EXPECT_EQ(reg().DeleteGroup(global_, "s", "idle").code(), StatusCode::kNotFound);
  EXPECT_EQ(reg().DeleteGroup(global_, "s", "").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(reg().DeleteGroup(global_, "ghost", "busy").code(), StatusCode::kNotFound);
  auto groups = reg().ConsumerGroupInfo(global_, "s");
  ASSERT_TRUE(groups.ok());
  ASSERT_EQ(groups->size(), 1u);
  EXPECT_EQ((*groups)[0].group, "busy");
  EXPECT_EQ(*reg().Prune(global_, "s", 5), 4u);
  EXPECT_EQ(*reg().GetOffset(global_, "s", "idle"), 0u);  // C1 again: never saved
  ASSERT_TRUE(reg().Ack(global_, "s", "idle", 1).ok());
  EXPECT_EQ(*reg().GetOffset(global_, "s", "idle"), 1u);
}

TEST_P(RegistryGroupsTest, P9_PruneNeverMovesGroupsAndIsZeroOnUnknownEmptyOrRepeat) {
  MustCreate(global_, "s");
  for (int i = 0; i < 6; ++i) MustAppend(global_, "s");
  ASSERT_TRUE(reg().Ack(global_, "s", "g", 4).ok());
  EXPECT_EQ(*reg().Prune(global_, "s", 6), 4u);
  EXPECT_EQ(*reg().Prune(global_, "s", 6), 0u);
  EXPECT_EQ(*reg().GetOffset(global_, "s", "g"), 4u);
  auto unknown = reg().Prune(global_, "ghost", 10);
  ASSERT_TRUE(unknown.ok());
  EXPECT_EQ(*unknown, 0u);
  MustCreate(global_, "empty");
  EXPECT_EQ(*reg().Prune(global_, "empty", 10), 0u);
}

TEST_P(RegistryGroupsTest, N1_AnAppendWakesTheSubscriberAndReadNextReturnsIt) {
  MustCreate(global_, "s");
  auto sub = reg().Subscribe(global_, "s", "g", 0);
  ASSERT_TRUE(sub.ok());
  EXPECT_FALSE(sub->TryConsume());
  std::thread publisher([&] {
    std::this_thread::sleep_for(milliseconds(20));
    MustAppend(global_, "s", "hello");
  });
  EXPECT_TRUE(sub->WaitFor(milliseconds(5000)));
  publisher.join();
  auto next = reg().ReadNext(global_, "s", "g", 10);
  ASSERT_TRUE(next.ok());
  ASSERT_EQ(next->size(), 1u);
  EXPECT_EQ((*next)[0].payload, "hello");
}

TEST_P(RegistryGroupsTest, N2_HintsCoalesceAndConsumersMustReread) {
  MustCreate(global_, "s");
  auto sub = reg().Subscribe(global_, "s", "g", 0);
  ASSERT_TRUE(sub.ok());
  for (int i = 0; i < 300; ++i) MustAppend(global_, "s");
  EXPECT_TRUE(sub->WaitFor(milliseconds(5000)));
  // 300 appends leave one pending hint, not 300 (a slow subscriber costs no memory).
  EXPECT_FALSE(sub->TryConsume());
  EXPECT_EQ(reg().ReadNext(global_, "s", "g", 1000)->size(), 300u);
}

TEST_P(RegistryGroupsTest, N3_SubscribingBehindTheTailGivesOneImmediateHint) {
  MustCreate(global_, "s");
  for (int i = 0; i < 3; ++i) MustAppend(global_, "s");
  auto behind = reg().Subscribe(global_, "s", "g", 1);
  ASSERT_TRUE(behind.ok());
  EXPECT_TRUE(behind->TryConsume());
  EXPECT_FALSE(behind->TryConsume());
  auto caught_up = reg().Subscribe(global_, "s", "g", 3);
  ASSERT_TRUE(caught_up.ok());
  EXPECT_FALSE(caught_up->TryConsume());
  EXPECT_EQ(reg().Subscribe(global_, "ghost", "g", 0).status().code(), StatusCode::kNotFound);
}

TEST_P(RegistryGroupsTest, N3_GroupIsIgnoredAndCallbacksFire) {
  MustCreate(global_, "s");
  std::atomic<int> calls{0};
  auto sub = reg().Subscribe(global_, "s", "any-group", std::nullopt, [&] { calls.fetch_add(1); });
  ASSERT_TRUE(sub.ok());
  MustAppend(global_, "s");
  EXPECT_TRUE(sub->WaitFor(milliseconds(5000)));
  for (int i = 0; i < 200 && calls.load() == 0; ++i) std::this_thread::sleep_for(milliseconds(5));
  EXPECT_GE(calls.load(), 1);
}

TEST_P(RegistryGroupsTest, N4_PublishingToXNeverWakesY) {
  // Names that a sanitising scheme (lower-case, non-alphanumerics to '_') would collide.
  MustCreate(global_, "Orders.EU");
  MustCreate(global_, "orders_eu");
  MustCreate(acme_, "Orders.EU");
  auto y = reg().Subscribe(global_, "orders_eu", "g", 0);
  auto other_scope = reg().Subscribe(acme_, "Orders.EU", "g", 0);
  auto x = reg().Subscribe(global_, "Orders.EU", "g", 0);
  ASSERT_TRUE(y.ok() && x.ok() && other_scope.ok());
  MustAppend(global_, "Orders.EU");
  EXPECT_TRUE(x->WaitFor(milliseconds(5000)));
  // A wake-up for Y could only come from the append above, which has already been delivered.
  EXPECT_FALSE(y->TryConsume());
  EXPECT_FALSE(other_scope->TryConsume());
}

TEST_P(RegistryGroupsTest, DestroyedSubscriptionsStopReceivingHints) {
  MustCreate(global_, "s");
  std::atomic<int> calls{0};
  {
    auto sub = reg().Subscribe(global_, "s", "g", std::nullopt, [&] { calls.fetch_add(1); });
    ASSERT_TRUE(sub.ok());
  }
  MustAppend(global_, "s");
  ASSERT_TRUE(reg().Flush().ok());
  EXPECT_EQ(calls.load(), 0);
}

}  // namespace
}  // namespace runnel::testing
