// SEMANTICS section 2: registry, append, retention and read rules, one test per rule id at least.
#include <algorithm>
#include <atomic>
#include <future>
#include <limits>
#include <mutex>
#include <thread>

#include <gtest/gtest.h>

#include "core/registry_suites.h"

namespace runnel::testing {
namespace {

constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();

// ---- Registry & scopes ----

TEST_P(RegistryRulesTest, R1_CreateSucceedsOnceAndARepeatLeavesTheStreamUnchanged) {
  MustCreate(acme_, "orders", StreamRetention{3, std::nullopt, std::nullopt});
  MustAppend(acme_, "orders");
  Status again = reg().CreateStream(acme_, "orders", StreamRetention{});
  EXPECT_EQ(again.code(), StatusCode::kAlreadyExists);
  EXPECT_NE(again.message().find("orders"), std::string_view::npos);
  EXPECT_NE(again.message().find("tenant:acme"), std::string_view::npos);
  auto d = reg().Describe(acme_, "orders");
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->retention.max_events, 3u);
  EXPECT_EQ(d->event_count, 1u);
}

TEST_P(RegistryRulesTest, R2_SameNameInTwoScopesIsTwoStreams) {
  MustCreate(acme_, "orders");
  MustCreate(globex_, "orders");
  EXPECT_EQ(MustAppend(acme_, "orders"), 1u);
  EXPECT_TRUE(reg().ReadSince(globex_, "orders", 0, 10)->empty());
  EXPECT_EQ(reg().Describe(globex_, "orders")->event_count, 0u);
  EXPECT_EQ(MustAppend(globex_, "orders"), 1u);
}

TEST_P(RegistryRulesTest, R3_ListStreamsReturnsOnlyTheScopesStreamsSortedByName) {
  MustCreate(acme_, "b");
  MustCreate(acme_, "a");
  MustCreate(globex_, "c");
  MustCreate(global_, "d");
  auto list = reg().ListStreams(acme_);
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].name, "a");
  EXPECT_EQ(list[1].name, "b");
  EXPECT_EQ(list[0].scope, acme_);
  EXPECT_EQ(list[0].event_count, 0u);
  EXPECT_EQ(list[0].head_offset, 0u);
  EXPECT_EQ(list[0].tail_offset, 0u);
  EXPECT_EQ(reg().ListStreams(global_).size(), 1u);
  EXPECT_TRUE(reg().ListStreams(StreamScope::Tenant("nobody")).empty());
}

TEST_P(RegistryRulesTest, R3_ListStreamsPagesPastTheReadLimit) {
  const size_t n = StreamRegistry::kMaxReadLimit + 5;
  for (size_t i = 0; i < n; ++i) {
    char name[16];
    std::snprintf(name, sizeof(name), "s%05zu", i);
    MustCreate(acme_, name);
  }
  auto list = reg().ListStreams(acme_);
  ASSERT_EQ(list.size(), n);
  EXPECT_EQ(list.back().name, "s01004");
}

TEST_P(RegistryRulesTest, R3_ListStreamsPageFiltersByPrefixAndResumesAfterAName) {
  for (const char* n : {"or", "ord", "order-1", "order-2", "order-3", "ordinal", "os", "zz"}) {
    MustCreate(acme_, n);
  }
  MustCreate(globex_, "order-9");
  auto names = [](const Result<std::vector<StreamDescriptor>>& page) {
    EXPECT_TRUE(page.ok()) << page.status().ToString();
    std::vector<std::string> out;
    if (page.ok()) {
      for (const auto& d : *page) out.push_back(d.name);
    }
    return out;
  };
  ListStreamsOptions o;
  o.prefix = "ord";
  EXPECT_EQ(names(reg().ListStreamsPage(acme_, o)),
            (std::vector<std::string>{"ord", "order-1", "order-2", "order-3", "ordinal"}));
  o.prefix = "order-";
  o.limit = 2;
  EXPECT_EQ(names(reg().ListStreamsPage(acme_, o)),
            (std::vector<std::string>{"order-1", "order-2"}));
  o.start_after = "order-2";
  EXPECT_EQ(names(reg().ListStreamsPage(acme_, o)), (std::vector<std::string>{"order-3"}));
  o = {};
  o.start_after = "os";
  EXPECT_EQ(names(reg().ListStreamsPage(acme_, o)), (std::vector<std::string>{"zz"}));
  o = {};
  o.prefix = "nothing";
  EXPECT_TRUE(names(reg().ListStreamsPage(acme_, o)).empty());
  o = {};
  o.limit = 0;  // clamped to 1
  EXPECT_EQ(names(reg().ListStreamsPage(acme_, o)), (std::vector<std::string>{"or"}));
}

TEST_P(RegistryRulesTest, R4_ExistsAndDescribeOfUnknownStreamAreFalseAndNone) {
  EXPECT_FALSE(reg().Exists(acme_, "nope"));
  EXPECT_FALSE(reg().Describe(acme_, "nope").has_value());
  MustCreate(acme_, "yes");
  EXPECT_TRUE(reg().Exists(acme_, "yes"));
  EXPECT_FALSE(reg().Exists(globex_, "yes"));
}

TEST_P(RegistryRulesTest, R5_DescriptorReportsRetainedCountHeadAndTail) {
  MustCreate(acme_, "s", StreamRetention{3, std::nullopt, std::nullopt});
  for (int i = 0; i < 5; ++i) MustAppend(acme_, "s");
  auto d = reg().Describe(acme_, "s");
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->event_count, 3u);
  EXPECT_EQ(d->head_offset, 3u);
  EXPECT_EQ(d->tail_offset, 5u);
  EXPECT_EQ(d->next_offset, 6u);
  EXPECT_EQ(d->name, "s");
  EXPECT_EQ(d->scope, acme_);
}

TEST_P(RegistryRulesTest, R6_OperationsOnUnknownStreamAreNotFoundWithScopeAndName) {
  auto a = reg().Append(acme_, "ghost", std::nullopt, "x", 1);
  EXPECT_EQ(a.status().code(), StatusCode::kNotFound);
  EXPECT_NE(a.status().message().find("ghost"), std::string_view::npos);
  EXPECT_NE(a.status().message().find("tenant:acme"), std::string_view::npos);
  EXPECT_EQ(reg().ReadSince(acme_, "ghost", 0, 10).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(reg().ReadSince(acme_, "ghost", 0, 0).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(reg().SaveOffset(acme_, "ghost", "c", 1).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(reg().GetOffset(acme_, "ghost", "c").status().code(), StatusCode::kNotFound);
}

TEST_P(RegistryRulesTest, R7_CopiesOfARegistryShareState) {
  StreamRegistry copy = reg();
  ASSERT_TRUE(copy.CreateStream(acme_, "shared", StreamRetention{}).ok());
  EXPECT_TRUE(reg().Exists(acme_, "shared"));
  EXPECT_EQ(MustAppend(acme_, "shared"), 1u);
  EXPECT_EQ(copy.Describe(acme_, "shared")->event_count, 1u);
}

TEST_P(RegistryRulesTest, R8_NamesAreOpaqueBytesButNotEmpty) {
  EXPECT_EQ(reg().CreateStream(acme_, "", StreamRetention{}).code(), StatusCode::kInvalidArgument);
  const std::string odd("a/b c:\xe2\x98\x83\0z", 11);
  MustCreate(acme_, odd);
  EXPECT_TRUE(reg().Exists(acme_, odd));
  EXPECT_FALSE(reg().Exists(acme_, "a/b c:"));
}

// ---- Append & offsets ----

TEST_P(RegistryRulesTest, A1_AppendsReturnDenseOffsetsFromOne) {
  MustCreate(global_, "s");
  for (uint64_t i = 1; i <= 50; ++i) EXPECT_EQ(MustAppend(global_, "s"), i);
}

TEST_P(RegistryRulesTest, A2_OffsetsAreNeverReusedAfterRetentionEmptiesTheStream) {
  MustCreate(global_, "s", StreamRetention{std::nullopt, 10, std::nullopt});
  MustAppend(global_, "s", "a", 0);
  MustAppend(global_, "s", "b", 0);
  ASSERT_EQ(*reg().Prune(global_, "s", 2), 2u);
  auto d = reg().Describe(global_, "s");
  EXPECT_EQ(d->event_count, 0u);
  EXPECT_EQ(d->tail_offset, 0u);
  EXPECT_EQ(d->next_offset, 3u);
  EXPECT_EQ(MustAppend(global_, "s", "c", 100), 3u);
}

TEST_P(RegistryRulesTest, A3_KeyAndPayloadAreStoredUnchangedWithTheCallersTime) {
  MustCreate(global_, "s");
  auto off = reg().Append(global_, "s", std::string("row:42"), "{\"not\": parsed", 123456789);
  ASSERT_TRUE(off.ok());
  auto events = reg().ReadSince(global_, "s", 1, 1);
  ASSERT_TRUE(events.ok());
  ASSERT_EQ(events->size(), 1u);
  const StreamEvent& e = (*events)[0];
  EXPECT_EQ(e.key, "row:42");
  EXPECT_EQ(e.payload, "{\"not\": parsed");
  EXPECT_EQ(e.appended_at_ms, 123456789u);
  EXPECT_EQ(e.stream, "s");
  EXPECT_EQ(e.scope, global_);
}

TEST_P(RegistryRulesTest, A4_TheNewEventSurvivesRetention) {
  MustCreate(global_, "s", StreamRetention{1, 0, 1});
  for (uint64_t i = 1; i <= 3; ++i) {
    EXPECT_EQ(MustAppend(global_, "s", "payload-bigger-than-cap", 1000 * i), i);
    auto events = reg().ReadSince(global_, "s", 0, 10);
    EXPECT_EQ(OffsetsOf(events), std::vector<uint64_t>{i});
  }
}

TEST_P(RegistryRulesTest, A5_OffsetsArePerStream) {
  MustCreate(global_, "x");
  MustCreate(global_, "y");
  EXPECT_EQ(MustAppend(global_, "x"), 1u);
  EXPECT_EQ(MustAppend(global_, "x"), 2u);
  EXPECT_EQ(MustAppend(global_, "y"), 1u);
}

TEST_P(RegistryRulesTest, A6_NextOffsetIsNotRetainedCountPlusOne) {
  MustCreate(global_, "s");
  for (int i = 0; i < 10; ++i) MustAppend(global_, "s");
  ASSERT_EQ(*reg().Prune(global_, "s", 3), 3u);
  EXPECT_EQ(MustAppend(global_, "s"), 11u);
}

TEST_P(RegistryRulesTest, A7_AppendAtTheLargestOffsetFailsInsteadOfWrapping) {
  CreateStreamOptions options;
  options.first_offset = kMax - 1;
  ASSERT_TRUE(reg().CreateStream(global_, "edge", options).ok());
  EXPECT_EQ(MustAppend(global_, "edge"), kMax - 1);
  auto over = reg().Append(global_, "edge", std::nullopt, "x", 1);
  EXPECT_EQ(over.status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(reg().Describe(global_, "edge")->tail_offset, kMax - 1);
}

TEST_P(RegistryRulesTest, A8_ConcurrentAppendsGetExactlyOneToN) {
  MustCreate(global_, "s");
  constexpr int kThreads = 6;
  constexpr int kEach = 100;
  std::vector<std::thread> threads;
  std::mutex mu;
  std::vector<uint64_t> all;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      std::vector<uint64_t> mine;
      for (int i = 0; i < kEach; ++i) {
        auto r = reg().Append(global_, "s", std::nullopt, "p", 1);
        if (r.ok()) mine.push_back(*r);
      }
      std::lock_guard lock(mu);
      all.insert(all.end(), mine.begin(), mine.end());
    });
  }
  for (auto& t : threads) t.join();
  std::sort(all.begin(), all.end());
  EXPECT_EQ(all, Range(1, kThreads * kEach));
}

// ---- Retention ----

TEST_P(RegistryRulesTest, P1_CountCapKeepsTheNewest) {
  MustCreate(global_, "s", StreamRetention{3, std::nullopt, std::nullopt});
  for (int i = 0; i < 5; ++i) MustAppend(global_, "s");
  EXPECT_EQ(OffsetsOf(reg().ReadSince(global_, "s", 0, 10)), (std::vector<uint64_t>{3, 4, 5}));
  auto d = reg().Describe(global_, "s");
  EXPECT_EQ(d->head_offset, 3u);
  EXPECT_EQ(d->tail_offset, 5u);
}

TEST_P(RegistryRulesTest, P2_AgeCapIsStrictAndUsesTheAppendsNow) {
  MustCreate(global_, "s", StreamRetention{std::nullopt, 1000, std::nullopt});
  MustAppend(global_, "s", "a", 0);
  MustAppend(global_, "s", "b", 500);
  MustAppend(global_, "s", "c", 10000);
  EXPECT_EQ(OffsetsOf(reg().ReadSince(global_, "s", 0, 10)), std::vector<uint64_t>{3});
  // Exactly at the cutoff stays.
  MustCreate(global_, "edge", StreamRetention{std::nullopt, 1000, std::nullopt});
  MustAppend(global_, "edge", "a", 1000);
  MustAppend(global_, "edge", "b", 2000);
  EXPECT_EQ(OffsetsOf(reg().ReadSince(global_, "edge", 0, 10)), (std::vector<uint64_t>{1, 2}));
  // The subtraction saturates at zero instead of wrapping.
  MustCreate(global_, "early", StreamRetention{std::nullopt, 5000, std::nullopt});
  MustAppend(global_, "early", "a", 0);
  MustAppend(global_, "early", "b", 10);
  EXPECT_EQ(OffsetsOf(reg().ReadSince(global_, "early", 0, 10)), (std::vector<uint64_t>{1, 2}));
}

TEST_P(RegistryRulesTest, P3_AgeRemovesOnlyTheLeadingRunOfOldEvents) {
  MustCreate(global_, "s", StreamRetention{std::nullopt, 1000, std::nullopt});
  MustAppend(global_, "s", "fresh", 9500);  // 1
  MustAppend(global_, "s", "old", 100);     // 2: old, but behind a fresh one
  MustAppend(global_, "s", "now", 10000);   // 3: cutoff 9000 stops at offset 1
  EXPECT_EQ(OffsetsOf(reg().ReadSince(global_, "s", 0, 10)), (std::vector<uint64_t>{1, 2, 3}));
}

TEST_P(RegistryRulesTest, P3_CountCapRunsFirstThenAge) {
  MustCreate(global_, "s", StreamRetention{4, 1000, std::nullopt});
  MustAppend(global_, "s", "fresh", 9500);  // 1
  MustAppend(global_, "s", "old", 100);     // 2
  MustAppend(global_, "s", "x", 10000);     // 3
  MustAppend(global_, "s", "x", 10000);     // 4
  EXPECT_EQ(OffsetsOf(reg().ReadSince(global_, "s", 0, 10)), (std::vector<uint64_t>{1, 2, 3, 4}));
  // Count drops 1; that exposes 2 at the front, which age then drops; 3 is fresh and stops it.
  MustAppend(global_, "s", "x", 10000);  // 5
  EXPECT_EQ(OffsetsOf(reg().ReadSince(global_, "s", 0, 10)), (std::vector<uint64_t>{3, 4, 5}));
}

TEST_P(RegistryRulesTest, P4_ReadsAndTimeAloneNeverPrune) {
  MustCreate(global_, "s", StreamRetention{std::nullopt, 10, std::nullopt});
  MustAppend(global_, "s", "a", 0);
  MustAppend(global_, "s", "b", 1);
  clock_.Advance(1'000'000);
  EXPECT_EQ(OffsetsOf(reg().ReadSince(global_, "s", 0, 10)), (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(reg().Describe(global_, "s")->event_count, 2u);
}

TEST_P(RegistryRulesTest, P5_RetentionIgnoresConsumersWhoseLagIsObservable) {
  MustCreate(global_, "s", StreamRetention{2, std::nullopt, std::nullopt});
  ASSERT_TRUE(reg().SaveOffset(global_, "s", "slow", 1).ok());
  for (int i = 0; i < 6; ++i) MustAppend(global_, "s");
  auto d = reg().Describe(global_, "s");
  EXPECT_EQ(d->head_offset, 5u);
  EXPECT_EQ(d->head_offset - *reg().GetOffset(global_, "s", "slow"), 4u);
  EXPECT_EQ(OffsetsOf(reg().ReadNext(global_, "s", "slow", 10)), (std::vector<uint64_t>{5, 6}));
}

TEST_P(RegistryRulesTest, P6_ZeroCapsAreRefusedAtCreate) {
  EXPECT_EQ(reg().CreateStream(global_, "s", StreamRetention{0, std::nullopt, std::nullopt}).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(reg().CreateStream(global_, "s", StreamRetention{std::nullopt, std::nullopt, 0}).code(),
            StatusCode::kInvalidArgument);
  EXPECT_FALSE(reg().Exists(global_, "s"));
  MustCreate(global_, "s");
  EXPECT_EQ(reg().SetRetention(global_, "s", StreamRetention{0, std::nullopt, std::nullopt}).code(),
            StatusCode::kInvalidArgument);
}

TEST_P(RegistryRulesTest, P10_RetentionChangesApplyAtTheNextAppend) {
  MustCreate(global_, "s");
  for (int i = 0; i < 5; ++i) MustAppend(global_, "s");
  ASSERT_TRUE(
      reg().SetRetention(global_, "s", StreamRetention{2, std::nullopt, std::nullopt}).ok());
  EXPECT_EQ(reg().Describe(global_, "s")->event_count, 5u);
  MustAppend(global_, "s");
  EXPECT_EQ(OffsetsOf(reg().ReadSince(global_, "s", 0, 10)), (std::vector<uint64_t>{5, 6}));
  EXPECT_EQ(reg().Describe(global_, "s")->retention.max_events, 2u);
}

// ---- Reads ----

TEST_P(RegistryRulesTest, D1_ReadSinceIsInclusiveAndLimited) {
  MustCreate(global_, "s");
  for (int i = 0; i < 4; ++i) MustAppend(global_, "s");
  EXPECT_EQ(OffsetsOf(reg().ReadSince(global_, "s", 3, 10)), (std::vector<uint64_t>{3, 4}));
  EXPECT_EQ(OffsetsOf(reg().ReadSince(global_, "s", 0, 2)), (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(OffsetsOf(reg().ReadSince(global_, "s", 1, 2)), (std::vector<uint64_t>{1, 2}));
}

TEST_P(RegistryRulesTest, D2_ReadAfterIsExclusiveAndEqualsReadSinceOfNext) {
  MustCreate(global_, "s");
  for (int i = 0; i < 5200; ++i) MustAppend(global_, "s");
  EXPECT_EQ(OffsetsOf(reg().ReadAfter(global_, "s", 5000, 100)), Range(5001, 5100));
  for (uint64_t f : {0u, 1u, 7u, 5199u, 5200u, 9000u}) {
    EXPECT_EQ(OffsetsOf(reg().ReadAfter(global_, "s", f, 3)),
              OffsetsOf(reg().ReadSince(global_, "s", f + 1, 3)))
        << "after " << f;
  }
  EXPECT_TRUE(reg().ReadAfter(global_, "s", kMax, 10)->empty());
}

TEST_P(RegistryRulesTest, D3_BelowHeadStartsAtHeadAndBeyondTailIsEmpty) {
  MustCreate(global_, "s", StreamRetention{2, std::nullopt, std::nullopt});
  for (int i = 0; i < 5; ++i) MustAppend(global_, "s");
  EXPECT_EQ(OffsetsOf(reg().ReadSince(global_, "s", 1, 10)), (std::vector<uint64_t>{4, 5}));
  auto beyond = reg().ReadSince(global_, "s", 6, 10);
  ASSERT_TRUE(beyond.ok());
  EXPECT_TRUE(beyond->empty());
  EXPECT_TRUE(reg().ReadSince(global_, "s", kMax, 10)->empty());
}

TEST_P(RegistryRulesTest, D4_ReadsArePureAndRepeatable) {
  MustCreate(global_, "s");
  for (int i = 0; i < 5; ++i) MustAppend(global_, "s", "e" + std::to_string(i));
  ASSERT_TRUE(reg().Ack(global_, "s", "g", 2).ok());
  auto first = reg().ReadSince(global_, "s", 0, 10);
  auto second = reg().ReadSince(global_, "s", 0, 10);
  auto next1 = reg().ReadNext(global_, "s", "g", 10);
  auto next2 = reg().ReadNext(global_, "s", "g", 10);
  ASSERT_TRUE(first.ok() && second.ok());
  ASSERT_EQ(first->size(), second->size());
  for (size_t i = 0; i < first->size(); ++i) {
    EXPECT_EQ((*first)[i].offset, (*second)[i].offset);
    EXPECT_EQ((*first)[i].payload, (*second)[i].payload);
  }
  EXPECT_EQ(OffsetsOf(next1), OffsetsOf(next2));
  EXPECT_EQ(*reg().GetOffset(global_, "s", "g"), 2u);
  EXPECT_EQ(*reg().GetOffset(global_, "s", "never"), 0u);
  EXPECT_EQ(reg().ConsumerGroupInfo(global_, "s")->size(), 1u);  // reads registered nobody
}

TEST_P(RegistryRulesTest, D5_LimitZeroIsEmptyAndLargeLimitsAreClamped) {
  MustCreate(global_, "s");
  const size_t n = StreamRegistry::kMaxReadLimit + 10;
  std::vector<AppendRecord> batch(n, AppendRecord{std::nullopt, "x"});
  ASSERT_TRUE(reg().AppendBatch(global_, "s", std::move(batch)).ok());
  EXPECT_TRUE(reg().ReadSince(global_, "s", 0, 0)->empty());
  EXPECT_EQ(reg().ReadSince(global_, "s", 0, n)->size(), StreamRegistry::kMaxReadLimit);
}

TEST_P(RegistryRulesTest, D6_ConcurrentReadsSeeAGapFreePrefix) {
  MustCreate(global_, "s");
  std::atomic<bool> done{false};
  std::atomic<int> bad{0};
  std::thread reader([&] {
    while (!done.load()) {
      auto events = reg().ReadSince(global_, "s", 0, StreamRegistry::kMaxReadLimit);
      if (!events.ok()) {
        bad.fetch_add(1);
        continue;
      }
      for (size_t i = 0; i < events->size(); ++i) {
        if ((*events)[i].offset != i + 1) bad.fetch_add(1);
      }
    }
  });
  std::vector<std::thread> writers;
  for (int t = 0; t < 4; ++t) {
    writers.emplace_back([&] {
      for (int i = 0; i < 200; ++i)
        ASSERT_TRUE(reg().Append(global_, "s", std::nullopt, "p", 1).ok());
    });
  }
  for (auto& w : writers) w.join();
  done = true;
  reader.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(reg().Describe(global_, "s")->tail_offset, 800u);
}

// ---- Consumer offsets ----

TEST_P(RegistryRulesTest, C1_UnsavedConsumerReadsZero) {
  MustCreate(global_, "s");
  EXPECT_EQ(*reg().GetOffset(global_, "s", "fresh"), 0u);
}

// C10: the public API never raises CursorRegression; a lower save is a silent no-op.
TEST_P(RegistryRulesTest, C2_C10_SaveOffsetIsMonotonicAndALowerSaveIsNotAnError) {
  MustCreate(global_, "s");
  EXPECT_EQ(*reg().SaveOffset(global_, "s", "c", 3), 3u);
  EXPECT_EQ(*reg().SaveOffset(global_, "s", "c", 1), 3u);
  EXPECT_EQ(*reg().SaveOffset(global_, "s", "c", 3), 3u);
  EXPECT_EQ(*reg().SaveOffset(global_, "s", "c", 5), 5u);
  EXPECT_EQ(*reg().GetOffset(global_, "s", "c"), 5u);
}

TEST_P(RegistryRulesTest, C3_OffsetsArePerStreamAndConsumer) {
  MustCreate(global_, "s");
  MustCreate(global_, "t");
  ASSERT_TRUE(reg().SaveOffset(global_, "s", "c1", 1).ok());
  EXPECT_EQ(*reg().GetOffset(global_, "s", "c2"), 0u);
  EXPECT_EQ(*reg().GetOffset(global_, "t", "c1"), 0u);
  EXPECT_EQ(*reg().GetOffset(global_, "s", "c1"), 1u);
}

TEST_P(RegistryRulesTest, C9_SavingBeyondTheTailIsAcceptedAsSkipAhead) {
  MustCreate(global_, "s");
  for (int i = 0; i < 5; ++i) MustAppend(global_, "s");
  EXPECT_EQ(*reg().SaveOffset(global_, "s", "c", 999), 999u);
  EXPECT_TRUE(reg().ReadNext(global_, "s", "c", 10)->empty());
}

TEST_P(RegistryRulesTest, EmptyConsumerNameIsRefused) {
  MustCreate(global_, "s");
  EXPECT_EQ(reg().SaveOffset(global_, "s", "", 1).status().code(), StatusCode::kInvalidArgument);
}

TEST_P(RegistryRulesTest, ConditionalAppendRefusesAnOccupiedPosition) {  // S1 on the registry
  MustCreate(global_, "s");
  AppendOptions at1;
  at1.expected_offset = 1;
  ASSERT_TRUE(reg().AppendBatch(global_, "s", {AppendRecord{std::nullopt, "a"}}, at1).ok());
  auto again = reg().AppendBatch(global_, "s", {AppendRecord{std::nullopt, "b"}}, at1);
  ASSERT_EQ(again.status().code(), StatusCode::kConflict);
  EXPECT_EQ(again.status().conflict_actual(), 2u);
  EXPECT_EQ(reg().Describe(global_, "s")->event_count, 1u);
}

TEST_P(RegistryRulesTest, DeleteRemovesTheStreamAndFreesItsName) {
  MustCreate(global_, "s");
  MustAppend(global_, "s");
  ASSERT_TRUE(reg().DeleteStream(global_, "s").ok());
  EXPECT_FALSE(reg().Exists(global_, "s"));
  EXPECT_EQ(reg().DeleteStream(global_, "s").code(), StatusCode::kNotFound);
  MustCreate(global_, "s");
  EXPECT_EQ(MustAppend(global_, "s"), 1u);
}

TEST_P(RegistryRulesTest, AsyncAppendCompletesExactlyOnce) {
  MustCreate(global_, "s");
  std::promise<Result<AppendResult>> done;
  std::atomic<int> calls{0};
  reg().AppendBatchAsync(global_, "s", {AppendRecord{std::nullopt, "a"}, AppendRecord{"k", "b"}},
                         AppendOptions{}, [&](Result<AppendResult> r) {
                           calls.fetch_add(1);
                           done.set_value(std::move(r));
                         });
  auto r = done.get_future().get();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->first_offset, 1u);
  EXPECT_EQ(r->last_offset, 2u);
  EXPECT_EQ(calls.load(), 1);
  std::promise<Result<AppendResult>> missing;
  reg().AppendBatchAsync(global_, "ghost", {AppendRecord{std::nullopt, "a"}}, AppendOptions{},
                         [&](Result<AppendResult> r2) { missing.set_value(std::move(r2)); });
  EXPECT_EQ(missing.get_future().get().status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace runnel::testing
