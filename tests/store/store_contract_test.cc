// The store contract (include/runnel/store.h), run against every store implementation.
// Instantiated per store; see tests/support/store_harness.h.
#include <algorithm>
#include <atomic>
#include <future>
#include <limits>
#include <set>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "store/store_contract.h"

namespace runnel::testing {

namespace {

using ::runnel::testing::AppendSync;
constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();

TEST_P(StoreContractTest, CreateGivesEmptyStreamAtFirstOffset) {
  StreamInfo info = Create("orders");
  EXPECT_NE(info.id, 0u);
  EXPECT_EQ(info.spec.name, "orders");
  EXPECT_EQ(info.head_offset, 0u);
  EXPECT_EQ(info.tail_offset, 0u);
  EXPECT_EQ(info.event_count, 0u);
  EXPECT_EQ(info.next_offset, 1u);
  EXPECT_FALSE(info.closed);
}

TEST_P(StoreContractTest, DuplicateCreateIsRefusedAndLeavesStreamUnchanged) {  // R1
  StreamInfo first = Create("orders", StreamRetention{3, std::nullopt, std::nullopt});
  ASSERT_TRUE(Append(first.id, {"a"}).ok());
  StreamSpec again;
  again.ns = "global";
  again.name = "orders";
  again.retention.max_events = 99;
  auto dup = store_->CreateStream(again);
  EXPECT_EQ(dup.status().code(), StatusCode::kAlreadyExists);
  auto now = store_->GetStream("global", "orders");
  ASSERT_TRUE(now.ok());
  EXPECT_EQ(now->id, first.id);
  EXPECT_EQ(now->spec.retention.max_events, 3u);
  EXPECT_EQ(now->event_count, 1u);
}

TEST_P(StoreContractTest, InvalidSpecsAreRefused) {  // R8, P6
  StreamSpec empty;
  empty.ns = "global";
  EXPECT_EQ(store_->CreateStream(empty).status().code(), StatusCode::kInvalidArgument);
  StreamSpec zero;
  zero.ns = "global";
  zero.name = "z";
  zero.retention.max_events = 0;
  EXPECT_EQ(store_->CreateStream(zero).status().code(), StatusCode::kInvalidArgument);
  zero.retention = {};
  zero.retention.max_bytes = 0;
  EXPECT_EQ(store_->CreateStream(zero).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->GetStream("global", "z").status().code(), StatusCode::kNotFound);
}

TEST_P(StoreContractTest, LookupsOfUnknownStreamsAreNotFound) {
  EXPECT_EQ(store_->GetStream("global", "nope").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store_->GetStreamById(987654).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(Append(987654, {"x"}).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store_->Read(987654, 1, 10, kMax).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store_->ReadAt(987654, 1).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store_->CommitCursor(987654, "c", 1, 1).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store_->ListCursors(987654).status().code(), StatusCode::kNotFound);
}

TEST_P(StoreContractTest, NamespacesSeparateStreamsWithTheSameName) {  // R2
  StreamInfo a = Create("orders", {}, "tenant:acme");
  StreamInfo b = Create("orders", {}, "tenant:globex");
  EXPECT_NE(a.id, b.id);
  ASSERT_TRUE(Append(a.id, {"x"}).ok());
  EXPECT_EQ(store_->GetStream("tenant:globex", "orders")->event_count, 0u);
  EXPECT_EQ(store_->GetStream("tenant:acme", "orders")->event_count, 1u);
}

TEST_P(StoreContractTest, ListStreamsIsSortedPagedAndScopedToNamespace) {  // R3
  for (const char* n : {"c", "a", "b", "d"}) Create(n, {}, "ns1");
  Create("zz", {}, "ns2");
  auto all = store_->ListStreams("ns1", "", 100);
  ASSERT_TRUE(all.ok());
  std::vector<std::string> names;
  for (const auto& s : *all) names.push_back(s.spec.name);
  EXPECT_EQ(names, (std::vector<std::string>{"a", "b", "c", "d"}));
  auto page = store_->ListStreams("ns1", "b", 1);
  ASSERT_TRUE(page.ok());
  ASSERT_EQ(page->size(), 1u);
  EXPECT_EQ((*page)[0].spec.name, "c");
  EXPECT_TRUE(store_->ListStreams("empty-ns", "", 10)->empty());
}

TEST_P(StoreContractTest, BatchTakesConsecutiveOffsets) {  // A1
  StreamInfo s = Create("s");
  auto r1 = Append(s.id, {"a", "b", "c"});
  ASSERT_TRUE(r1.ok());
  EXPECT_EQ(r1->first_offset, 1u);
  EXPECT_EQ(r1->last_offset, 3u);
  EXPECT_EQ(r1->next_offset, 4u);
  auto r2 = Append(s.id, {"d"});
  ASSERT_TRUE(r2.ok());
  EXPECT_EQ(r2->first_offset, 4u);
  EXPECT_EQ(Offsets(s.id), (std::vector<uint64_t>{1, 2, 3, 4}));
  auto info = store_->GetStreamById(s.id);
  EXPECT_EQ(info->head_offset, 1u);
  EXPECT_EQ(info->tail_offset, 4u);
  EXPECT_EQ(info->event_count, 4u);
  EXPECT_EQ(info->retained_bytes, 4u);
}

TEST_P(StoreContractTest, KeyPayloadAndTimestampAreStoredUnchanged) {  // A3
  StreamInfo s = Create("s");
  const std::string binary("\0\xff\x01 bytes\r\n", 11);
  AppendRequest req;
  req.stream = s.id;
  req.now_ms = 424242;
  req.records.push_back(AppendRecord{std::string("k\0ey", 4), binary});
  req.records.push_back(AppendRecord{std::nullopt, ""});
  ASSERT_TRUE(AppendSync(*store_, std::move(req)).ok());
  auto recs = store_->Read(s.id, 1, 10, kMax);
  ASSERT_TRUE(recs.ok());
  ASSERT_EQ(recs->size(), 2u);
  EXPECT_EQ((*recs)[0].key, std::string("k\0ey", 4));
  EXPECT_EQ((*recs)[0].payload, binary);
  EXPECT_EQ((*recs)[0].appended_at_ms, 424242u);
  EXPECT_FALSE((*recs)[1].key.has_value());
  EXPECT_EQ((*recs)[1].payload, "");
}

TEST_P(StoreContractTest, EmptyBatchWithoutCloseIsRefused) {
  StreamInfo s = Create("s");
  EXPECT_EQ(Append(s.id, {}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->GetStreamById(s.id)->next_offset, 1u);
}

TEST_P(StoreContractTest, ExpectedOffsetGuardsThePosition) {  // S1, seed-003 occupied sequence
  StreamInfo s = Create("s");
  ASSERT_TRUE(Append(s.id, {"a"}, 1000, 1).ok());
  auto taken = Append(s.id, {"b"}, 1000, 1);
  ASSERT_EQ(taken.status().code(), StatusCode::kConflict);
  EXPECT_EQ(taken.status().conflict_expected(), 1u);
  EXPECT_EQ(taken.status().conflict_actual(), 2u);
  auto ahead = Append(s.id, {"b"}, 1000, 5);
  ASSERT_EQ(ahead.status().code(), StatusCode::kConflict);
  EXPECT_EQ(ahead.status().conflict_actual(), 2u);
  EXPECT_EQ(Offsets(s.id), (std::vector<uint64_t>{1}));
  auto ok = Append(s.id, {"b", "c"}, 1000, 2);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->first_offset, 2u);
}

TEST_P(StoreContractTest, CloseIsAtomicWithTheLastBatchAndRefusesLaterAppends) {
  StreamInfo s = Create("s");
  AppendRequest req;
  req.stream = s.id;
  req.now_ms = 1;
  req.records.push_back(AppendRecord{std::nullopt, "last"});
  req.close = true;
  auto r = AppendSync(*store_, std::move(req));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->first_offset, 1u);
  EXPECT_TRUE(store_->GetStreamById(s.id)->closed);
  EXPECT_EQ(Append(s.id, {"more"}).status().code(), StatusCode::kFailedPrecondition);
  StreamInfo t = Create("t");
  AppendRequest close_only;
  close_only.stream = t.id;
  close_only.close = true;
  auto c = AppendSync(*store_, std::move(close_only));
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->first_offset, 0u);
  EXPECT_TRUE(store_->GetStreamById(t.id)->closed);
}

TEST_P(StoreContractTest, OffsetsStopBeforeOverflow) {  // A7
  StreamInfo s = Create("s", {}, "global", kMax - 2);
  auto a = Append(s.id, {"a"});
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->first_offset, kMax - 2);
  auto b = Append(s.id, {"b"});
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->first_offset, kMax - 1);
  EXPECT_EQ(b->next_offset, kMax);
  auto c = Append(s.id, {"c"});
  EXPECT_EQ(c.status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(store_->GetStreamById(s.id)->tail_offset, kMax - 1);
}

TEST_P(StoreContractTest, ReadsClampToHeadRespectLimitsAndStayPure) {  // D1, D3, D4
  StreamInfo s = Create("s", StreamRetention{3, std::nullopt, std::nullopt});
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(Append(s.id, {"x"}).ok());
  EXPECT_EQ(Offsets(s.id, 1), (std::vector<uint64_t>{3, 4, 5}));
  EXPECT_EQ(Offsets(s.id, 4), (std::vector<uint64_t>{4, 5}));
  EXPECT_EQ(Offsets(s.id, 3, 2), (std::vector<uint64_t>{3, 4}));
  EXPECT_TRUE(Offsets(s.id, 6).empty());
  EXPECT_TRUE(Offsets(s.id, kMax).empty());
  EXPECT_TRUE(store_->Read(s.id, 1, 0, kMax)->empty());
  EXPECT_EQ(Offsets(s.id, 1), (std::vector<uint64_t>{3, 4, 5}));
}

TEST_P(StoreContractTest, MaxBytesCutsThePageButReturnsAtLeastOneRecord) {
  StreamInfo s = Create("s");
  ASSERT_TRUE(Append(s.id, {std::string(100, 'a'), std::string(100, 'b'), "c"}).ok());
  auto one = store_->Read(s.id, 1, 10, 10);
  ASSERT_TRUE(one.ok());
  ASSERT_EQ(one->size(), 1u);
  EXPECT_EQ((*one)[0].offset, 1u);
  auto two = store_->Read(s.id, 1, 10, 200);
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(two->size(), 2u);
}

TEST_P(StoreContractTest, ReadAtReturnsExactlyTheSlot) {  // U4 building block
  StreamInfo s = Create("s");
  ASSERT_TRUE(Append(s.id, {"a", "b"}).ok());
  auto at2 = store_->ReadAt(s.id, 2);
  ASSERT_TRUE(at2.ok());
  ASSERT_TRUE(at2->has_value());
  EXPECT_EQ((*at2)->payload, "b");
  EXPECT_EQ((*at2)->offset, 2u);
  EXPECT_FALSE(store_->ReadAt(s.id, 3)->has_value());
  EXPECT_FALSE(store_->ReadAt(s.id, 0)->has_value());
  ASSERT_TRUE(store_->TruncatePrefix(s.id, 1, false).ok());
  EXPECT_FALSE(store_->ReadAt(s.id, 1)->has_value());
}

TEST_P(StoreContractTest, CountRetentionKeepsNewest) {  // P1, A4
  StreamInfo s = Create("s", StreamRetention{3, std::nullopt, std::nullopt});
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(Append(s.id, {"x"}).ok());
  auto info = store_->GetStreamById(s.id);
  EXPECT_EQ(info->head_offset, 3u);
  EXPECT_EQ(info->tail_offset, 5u);
  EXPECT_EQ(info->event_count, 3u);
  EXPECT_EQ(info->next_offset, 6u);
}

TEST_P(StoreContractTest, AgeRetentionIsStrictAndUsesTheAppendsNow) {  // P2
  StreamInfo s = Create("s", StreamRetention{std::nullopt, 1000, std::nullopt});
  ASSERT_TRUE(Append(s.id, {"a"}, 0).ok());
  ASSERT_TRUE(Append(s.id, {"b"}, 500).ok());
  ASSERT_TRUE(Append(s.id, {"c"}, 1500).ok());  // cutoff 500: offset 2 is exactly at it, stays
  EXPECT_EQ(Offsets(s.id), (std::vector<uint64_t>{2, 3}));
  ASSERT_TRUE(Append(s.id, {"d"}, 10000).ok());
  EXPECT_EQ(Offsets(s.id), (std::vector<uint64_t>{4}));
}

TEST_P(StoreContractTest, ByteRetentionKeepsTheNewestThatFit) {
  StreamInfo s = Create("s", StreamRetention{std::nullopt, std::nullopt, 10});
  ASSERT_TRUE(Append(s.id, {"aaaa", "bbbb", "cccc"}).ok());
  EXPECT_EQ(Offsets(s.id), (std::vector<uint64_t>{2, 3}));
  EXPECT_EQ(store_->GetStreamById(s.id)->retained_bytes, 8u);
  ASSERT_TRUE(Append(s.id, {std::string(50, 'z')}).ok());  // alone over the cap: still kept
  EXPECT_EQ(Offsets(s.id), (std::vector<uint64_t>{4}));
}

TEST_P(StoreContractTest, TruncatePrefixRemovesButNeverMovesNextOffset) {  // A2, A6
  StreamInfo s = Create("s");
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(Append(s.id, {"x"}).ok());
  auto removed = store_->TruncatePrefix(s.id, 3, false);
  ASSERT_TRUE(removed.ok());
  EXPECT_EQ(*removed, 3u);
  EXPECT_EQ(store_->GetStreamById(s.id)->head_offset, 4u);
  auto again = Append(s.id, {"y"});
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->first_offset, 11u);
  EXPECT_EQ(*store_->TruncatePrefix(s.id, 100, false), 8u);
  auto info = store_->GetStreamById(s.id);
  EXPECT_EQ(info->event_count, 0u);
  EXPECT_EQ(info->head_offset, 0u);
  EXPECT_EQ(info->next_offset, 12u);
  EXPECT_EQ(Append(s.id, {"z"})->first_offset, 12u);
}

TEST_P(StoreContractTest, TruncateRespectingCursorsStopsAtTheSlowest) {  // P7, P8
  StreamInfo s = Create("s");
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(Append(s.id, {"x"}).ok());
  ASSERT_TRUE(store_->CommitCursor(s.id, "fast", 8, 1).ok());
  ASSERT_TRUE(store_->CommitCursor(s.id, "slow", 3, 1).ok());
  EXPECT_EQ(*store_->TruncatePrefix(s.id, 8, true), 3u);
  EXPECT_EQ(Offsets(s.id).front(), 4u);
  ASSERT_TRUE(store_->CommitCursor(s.id, "zero", 0, 1).ok());
  EXPECT_EQ(*store_->TruncatePrefix(s.id, 10, true), 0u);
  // P9: truncation never moves a cursor.
  EXPECT_EQ((*store_->GetCursor(s.id, "slow"))->offset, 3u);
  EXPECT_EQ((*store_->GetCursor(s.id, "fast"))->offset, 8u);
}

TEST_P(StoreContractTest, CursorsAreMonotonicMaxMerges) {  // C1, C2, C3, S5
  StreamInfo s = Create("s");
  EXPECT_FALSE(store_->GetCursor(s.id, "c1")->has_value());
  EXPECT_EQ(*store_->CommitCursor(s.id, "c1", 3, 10), 3u);
  EXPECT_EQ(*store_->CommitCursor(s.id, "c1", 1, 20), 3u);
  EXPECT_EQ(*store_->CommitCursor(s.id, "c1", 3, 30), 3u);
  EXPECT_EQ((*store_->GetCursor(s.id, "c1"))->updated_at_ms, 10u);  // unchanged: no advance
  EXPECT_EQ(*store_->CommitCursor(s.id, "c1", 5, 40), 5u);
  EXPECT_EQ((*store_->GetCursor(s.id, "c1"))->updated_at_ms, 40u);
  EXPECT_FALSE(store_->GetCursor(s.id, "c2")->has_value());
  ASSERT_TRUE(store_->CommitCursor(s.id, "a-group", 999, 50).ok());  // C9 skip-ahead accepted
  auto list = store_->ListCursors(s.id);
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ((*list)[0].consumer, "a-group");
  EXPECT_EQ((*list)[0].offset, 999u);
  EXPECT_EQ((*list)[1].consumer, "c1");
}

// Deleting a group (an extension; the seeds have none): it stops pinning a consumer-aware
// truncation (P8), and a later commit registers it afresh from its own offset (C4).
TEST_P(StoreContractTest, DeletedCursorsAreGoneAndRegisterAfresh) {
  StreamInfo s = Create("s");
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(Append(s.id, {"x"}).ok());
  ASSERT_TRUE(store_->CommitCursor(s.id, "stuck", 0, 1).ok());
  ASSERT_TRUE(store_->CommitCursor(s.id, "live", 5, 1).ok());
  EXPECT_EQ(*store_->TruncatePrefix(s.id, 4, true), 0u);  // P8: a cursor at 0 pins
  EXPECT_EQ(*store_->DeleteCursor(s.id, "stuck"), true);
  EXPECT_EQ(*store_->DeleteCursor(s.id, "stuck"), false);
  EXPECT_EQ(*store_->DeleteCursor(s.id, "never"), false);
  EXPECT_FALSE(store_->GetCursor(s.id, "stuck")->has_value());
  auto list = store_->ListCursors(s.id);
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].consumer, "live");
  EXPECT_EQ(*store_->TruncatePrefix(s.id, 4, true), 4u);
  // Registered again: from the new commit, not the maximum of before.
  ASSERT_TRUE(store_->CommitCursor(s.id, "live", 5, 1).ok());
  EXPECT_TRUE(*store_->DeleteCursor(s.id, "live"));
  EXPECT_EQ(*store_->CommitCursor(s.id, "live", 2, 7), 2u);
  EXPECT_EQ((*store_->GetCursor(s.id, "live"))->updated_at_ms, 7u);
  EXPECT_EQ(store_->DeleteCursor(s.id + 1000, "live").status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(store_->DeleteStream(s.id).ok());
  EXPECT_EQ(store_->DeleteCursor(s.id, "live").status().code(), StatusCode::kNotFound);
}

TEST_P(StoreContractTest, ConcurrentCursorCommitsKeepTheMaximum) {  // S5
  StreamInfo s = Create("s");
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (uint64_t i = 0; i < 200; ++i) {
        auto r = store_->CommitCursor(s.id, "g", i * 4 + static_cast<uint64_t>(t), 1);
        ASSERT_TRUE(r.ok());
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ((*store_->GetCursor(s.id, "g"))->offset, 199u * 4 + 3);
}

TEST_P(StoreContractTest, ProducerStateCommitsWithTheBatch) {
  StreamInfo s = Create("s");
  EXPECT_FALSE(store_->GetProducer(s.id, "p1")->has_value());
  AppendRequest req;
  req.stream = s.id;
  req.now_ms = 1;
  req.records = {AppendRecord{std::nullopt, "a"}, AppendRecord{std::nullopt, "b"}};
  req.producer = ProducerState{"p1", 2, 7, 0};
  ASSERT_TRUE(AppendSync(*store_, std::move(req)).ok());
  auto p = store_->GetProducer(s.id, "p1");
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE(p->has_value());
  EXPECT_EQ((*p)->epoch, 2u);
  EXPECT_EQ((*p)->seq, 7u);
  EXPECT_EQ((*p)->last_offset, 2u);
  // A refused batch leaves the producer state alone.
  AppendRequest refused;
  refused.stream = s.id;
  refused.records = {AppendRecord{std::nullopt, "c"}};
  refused.expected_offset = 1;
  refused.producer = ProducerState{"p1", 2, 8, 0};
  EXPECT_EQ(AppendSync(*store_, std::move(refused)).status().code(), StatusCode::kConflict);
  EXPECT_EQ((*store_->GetProducer(s.id, "p1"))->seq, 7u);
}

// The protocol layer keeps per-append state (the last Stream-Seq) in the attributes; it must
// commit with the records or a crash between the two would forget it and accept a retry twice.
TEST_P(StoreContractTest, AttributesCommitWithTheBatch) {
  StreamInfo s = Create("s");
  AppendRequest req;
  req.stream = s.id;
  req.now_ms = 1;
  req.records = {AppendRecord{std::nullopt, "a"}};
  req.attributes = "seq=1";
  ASSERT_TRUE(AppendSync(*store_, std::move(req)).ok());
  EXPECT_EQ(store_->GetStreamById(s.id)->spec.attributes, "seq=1");
  // An append without attributes leaves them alone.
  ASSERT_TRUE(Append(s.id, {"b"}).ok());
  EXPECT_EQ(store_->GetStreamById(s.id)->spec.attributes, "seq=1");
  // A refused batch changes nothing.
  AppendRequest refused;
  refused.stream = s.id;
  refused.records = {AppendRecord{std::nullopt, "c"}};
  refused.expected_offset = 1;
  refused.attributes = "seq=2";
  EXPECT_EQ(AppendSync(*store_, std::move(refused)).status().code(), StatusCode::kConflict);
  EXPECT_EQ(store_->GetStreamById(s.id)->spec.attributes, "seq=1");
  // A close-only batch can carry them too.
  AppendRequest close;
  close.stream = s.id;
  close.close = true;
  close.attributes = "seq=3";
  ASSERT_TRUE(AppendSync(*store_, std::move(close)).ok());
  auto info = store_->GetStreamById(s.id);
  EXPECT_TRUE(info->closed);
  EXPECT_EQ(info->spec.attributes, "seq=3");
  EXPECT_EQ(info->next_offset, 3u);
}

TEST_P(StoreContractTest, UpdateStreamChangesRetentionAtNextAppendAndAttributes) {
  StreamSpec spec;
  spec.ns = "global";
  spec.name = "s";
  spec.content_type = "application/json";
  spec.attributes = "attr-v1";
  auto s = store_->CreateStream(spec);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->spec.content_type, "application/json");
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(Append(s->id, {"x"}).ok());
  ASSERT_TRUE(store_
                  ->UpdateStream(s->id, StreamRetention{2, std::nullopt, std::nullopt}, "attr-v2",
                                 std::nullopt, std::nullopt)
                  .ok());
  EXPECT_EQ(store_->GetStreamById(s->id)->event_count, 5u);  // P4: nothing until an append
  ASSERT_TRUE(Append(s->id, {"y"}).ok());
  auto info = store_->GetStreamById(s->id);
  EXPECT_EQ(info->event_count, 2u);
  EXPECT_EQ(info->spec.attributes, "attr-v2");
  EXPECT_EQ(info->spec.content_type, "application/json");
  EXPECT_EQ(store_
                ->UpdateStream(s->id, StreamRetention{0, std::nullopt, std::nullopt}, "",
                               std::nullopt, std::nullopt)
                .code(),
            StatusCode::kInvalidArgument);
}

TEST_P(StoreContractTest, DeletedStreamIsGoneAndItsNameIsFree) {
  StreamInfo s = Create("s");
  ASSERT_TRUE(Append(s.id, {"a", "b"}).ok());
  ASSERT_TRUE(store_->CommitCursor(s.id, "g", 1, 1).ok());
  ASSERT_TRUE(store_->DeleteStream(s.id).ok());
  EXPECT_EQ(store_->GetStream("global", "s").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store_->GetStreamById(s.id).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(Append(s.id, {"c"}).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store_->DeleteStream(s.id).code(), StatusCode::kNotFound);
  StreamInfo again = Create("s");
  EXPECT_NE(again.id, s.id);
  EXPECT_EQ(again.next_offset, 1u);
  EXPECT_TRUE(store_->ListCursors(again.id)->empty());
  EXPECT_EQ(Append(again.id, {"new"})->first_offset, 1u);
}

TEST_P(StoreContractTest, TailListenerSeesEveryAppend) {
  StreamInfo s = Create("s");
  std::mutex mu;
  std::vector<std::pair<StreamId, uint64_t>> seen;
  store_->SetTailListener([&](StreamId id, uint64_t next) {
    std::lock_guard lock(mu);
    seen.emplace_back(id, next);
  });
  ASSERT_TRUE(Append(s.id, {"a", "b"}).ok());
  ASSERT_TRUE(Append(s.id, {"c"}).ok());
  store_->SetTailListener(nullptr);
  ASSERT_TRUE(Append(s.id, {"d"}).ok());
  std::lock_guard lock(mu);
  EXPECT_EQ(seen, (std::vector<std::pair<StreamId, uint64_t>>{{s.id, 3}, {s.id, 4}}));
}

TEST_P(StoreContractTest, ConcurrentAppendsGetDenseUniqueOffsets) {  // A8, D6
  StreamInfo s = Create("s");
  constexpr int kThreads = 8;
  constexpr int kPerThread = 150;
  std::atomic<bool> stop{false};
  std::atomic<int> holes{0};
  std::thread reader([&] {
    while (!stop.load()) {
      auto recs = store_->Read(s.id, 1, 100000, kMax);
      if (!recs.ok()) continue;
      for (size_t i = 0; i < recs->size(); ++i) {
        if ((*recs)[i].offset != i + 1) holes.fetch_add(1);
      }
    }
  });
  std::vector<std::vector<uint64_t>> got(kThreads);
  std::vector<std::thread> writers;
  for (int t = 0; t < kThreads; ++t) {
    writers.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        auto r = Append(s.id, {"p"});
        ASSERT_TRUE(r.ok()) << r.status().ToString();
        got[t].push_back(r->first_offset);
      }
    });
  }
  for (auto& w : writers) w.join();
  stop = true;
  reader.join();
  std::vector<uint64_t> all;
  for (auto& g : got) {
    EXPECT_TRUE(std::is_sorted(g.begin(), g.end()));
    all.insert(all.end(), g.begin(), g.end());
  }
  std::sort(all.begin(), all.end());
  ASSERT_EQ(all.size(), static_cast<size_t>(kThreads * kPerThread));
  for (size_t i = 0; i < all.size(); ++i) ASSERT_EQ(all[i], i + 1);
  EXPECT_EQ(holes.load(), 0);
}

TEST_P(StoreContractTest, FlushSucceedsAndDurabilityIsDeclared) {  // F5
  StreamInfo s = Create("s");
  ASSERT_TRUE(Append(s.id, {"a"}).ok());
  EXPECT_TRUE(store_->Flush().ok());
  EXPECT_FALSE(store_->Durability().empty());
  EXPECT_FALSE(store_->Name().empty());
}

// ---- Restart semantics: persistent stores only ----

TEST_P(PersistentStoreTest, EverythingAcknowledgedSurvivesAReopen) {  // F3, V5
  StreamSpec spec;
  spec.ns = "tenant:acme";
  spec.name = "orders";
  spec.content_type = "text/plain";
  spec.attributes = "a1";
  spec.retention.max_events = 100;
  auto s = store_->CreateStream(spec);
  ASSERT_TRUE(s.ok());
  AppendRequest req;
  req.stream = s->id;
  req.now_ms = 77;
  req.records = {AppendRecord{"k1", "one"}, AppendRecord{std::nullopt, "two"}};
  req.producer = ProducerState{"prod", 1, 5, 0};
  ASSERT_TRUE(AppendSync(*store_, std::move(req)).ok());
  ASSERT_TRUE(store_->CommitCursor(s->id, "g", 2, 99).ok());
  ASSERT_TRUE(store_->Flush().ok());
  Reopen();
  auto info = store_->GetStream("tenant:acme", "orders");
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->spec.content_type, "text/plain");
  EXPECT_EQ(info->spec.attributes, "a1");
  EXPECT_EQ(info->spec.retention.max_events, 100u);
  EXPECT_EQ(info->next_offset, 3u);
  auto recs = store_->Read(info->id, 1, 10, kMax);
  ASSERT_TRUE(recs.ok());
  ASSERT_EQ(recs->size(), 2u);
  EXPECT_EQ((*recs)[0].key, "k1");
  EXPECT_EQ((*recs)[0].payload, "one");
  EXPECT_EQ((*recs)[0].appended_at_ms, 77u);
  EXPECT_EQ((*recs)[1].payload, "two");
  auto cursor = store_->GetCursor(info->id, "g");
  ASSERT_TRUE(cursor.ok() && cursor->has_value());
  EXPECT_EQ((*cursor)->offset, 2u);
  EXPECT_EQ((*cursor)->updated_at_ms, 99u);
  auto producer = store_->GetProducer(info->id, "prod");
  ASSERT_TRUE(producer.ok() && producer->has_value());
  EXPECT_EQ((*producer)->seq, 5u);
  EXPECT_EQ((*producer)->last_offset, 2u);
  EXPECT_EQ(Append(info->id, {"three"})->first_offset, 3u);
}

TEST_P(PersistentStoreTest, NextOffsetSurvivesWhenTheStreamWasEmptied) {  // V4, A2
  StreamInfo s = Create("s");
  for (int i = 0; i < 7; ++i) ASSERT_TRUE(Append(s.id, {"x"}).ok());
  ASSERT_EQ(*store_->TruncatePrefix(s.id, 7, false), 7u);
  ASSERT_TRUE(store_->Flush().ok());
  Reopen();
  auto info = store_->GetStream("global", "s");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->event_count, 0u);
  EXPECT_EQ(info->next_offset, 8u);
  EXPECT_EQ(Append(info->id, {"y"})->first_offset, 8u);
}

// expected_attributes is the compare half of the layer above's read-modify-write of the
// attributes (the last Stream-Seq): an append that read them before another writer changed
// them is refused with kConflict and writes nothing, also when the change is an earlier append
// of the same commit group.
TEST_P(StoreContractTest, ExpectedAttributesMakeAnAppendACompareAndSet) {
  StreamInfo s = Create("s");
  auto conditional = [&](std::string expected, std::string next, std::string payload) {
    AppendRequest req;
    req.stream = s.id;
    req.now_ms = 1;
    req.records = {AppendRecord{std::nullopt, std::move(payload)}};
    req.expected_attributes = std::move(expected);
    req.attributes = std::move(next);
    return req;
  };
  ASSERT_TRUE(AppendSync(*store_, conditional("", "seq=1", "a")).ok());
  auto stale = AppendSync(*store_, conditional("", "seq=2", "b"));
  ASSERT_FALSE(stale.ok());
  EXPECT_EQ(stale.status().code(), StatusCode::kConflict);
  auto info = store_->GetStreamById(s.id);
  EXPECT_EQ(info->spec.attributes, "seq=1");
  EXPECT_EQ(info->next_offset, 2u);
  ASSERT_TRUE(AppendSync(*store_, conditional("seq=1", "seq=2", "c")).ok());

  // Two conditional appends that read the same attributes, queued together: one wins.
  std::promise<Result<AppendResult>> first, second;
  store_->Append(conditional("seq=2", "seq=3", "d"),
                 [&](Result<AppendResult> r) { first.set_value(std::move(r)); });
  store_->Append(conditional("seq=2", "seq=3", "e"),
                 [&](Result<AppendResult> r) { second.set_value(std::move(r)); });
  const Result<AppendResult> r1 = first.get_future().get();
  const Result<AppendResult> r2 = second.get_future().get();
  EXPECT_NE(r1.ok(), r2.ok());
  const Result<AppendResult>& lost = r1.ok() ? r2 : r1;
  EXPECT_EQ(lost.status().code(), StatusCode::kConflict);
  info = store_->GetStreamById(s.id);
  EXPECT_EQ(info->spec.attributes, "seq=3");
  EXPECT_EQ(info->next_offset, 4u);
}

// The producer state of an append is compared-and-set in the store: only a strictly newer
// (epoch, seq) is written, so a resend that raced the original (through another process
// sharing the store) commits once; an older epoch is fenced. Also within one commit group.
TEST_P(StoreContractTest, ProducerStateIsACompareAndSet) {
  StreamInfo s = Create("s");
  auto producer_append = [&](uint64_t epoch, uint64_t seq) {
    AppendRequest req;
    req.stream = s.id;
    req.now_ms = 1;
    req.records = {
        AppendRecord{std::nullopt, "e" + std::to_string(epoch) + "s" + std::to_string(seq)}};
    req.producer = ProducerState{"w", epoch, seq, 0};
    return req;
  };
  ASSERT_TRUE(AppendSync(*store_, producer_append(1, 0)).ok());
  EXPECT_EQ(AppendSync(*store_, producer_append(1, 0)).status().code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(AppendSync(*store_, producer_append(0, 5)).status().code(),
            StatusCode::kPermissionDenied);
  std::promise<Result<AppendResult>> first, second;
  store_->Append(producer_append(1, 1),
                 [&](Result<AppendResult> r) { first.set_value(std::move(r)); });
  store_->Append(producer_append(1, 1),
                 [&](Result<AppendResult> r) { second.set_value(std::move(r)); });
  const Result<AppendResult> r1 = first.get_future().get();
  const Result<AppendResult> r2 = second.get_future().get();
  EXPECT_NE(r1.ok(), r2.ok());
  EXPECT_EQ((r1.ok() ? r2 : r1).status().code(), StatusCode::kAlreadyExists);
  ASSERT_TRUE(AppendSync(*store_, producer_append(2, 0)).ok());  // a new epoch
  auto info = store_->GetStreamById(s.id);
  EXPECT_EQ(info->next_offset, 4u);
  auto stored = store_->GetProducer(s.id, "w");
  ASSERT_TRUE(stored.ok() && stored->has_value());
  EXPECT_EQ((*stored)->epoch, 2u);
  EXPECT_EQ((*stored)->seq, 0u);
}

// UpdateStream's expected_attributes: a compare-and-set of the attributes.
TEST_P(StoreContractTest, ExpectedAttributesMakeAnUpdateACompareAndSet) {
  StreamInfo s = Create("s");
  const StreamRetention none;
  ASSERT_TRUE(store_->UpdateStream(s.id, none, "v1", std::nullopt, std::nullopt).ok());
  EXPECT_EQ(store_
                ->UpdateStream(s.id, StreamRetention{3, std::nullopt, std::nullopt}, "v2", "v0",
                               std::nullopt)
                .code(),
            StatusCode::kConflict);
  auto info = store_->GetStreamById(s.id);
  EXPECT_EQ(info->spec.attributes, "v1");
  EXPECT_FALSE(info->spec.retention.max_events.has_value());
  ASSERT_TRUE(store_->UpdateStream(s.id, none, "v2", "v1", std::nullopt).ok());
  EXPECT_EQ(store_->GetStreamById(s.id)->spec.attributes, "v2");
  ASSERT_TRUE(store_->DeleteStream(s.id).ok());
  EXPECT_EQ(store_->UpdateStream(s.id, none, "v3", "v2", std::nullopt).code(),
            StatusCode::kNotFound);
}

// UpdateStream's expected_next_offset: the update holds only while no record was appended since
// the caller read the stream (a channel adopting an empty stream races plain appends with it).
TEST_P(StoreContractTest, ExpectedNextOffsetMakesAnUpdateACompareAndSet) {
  StreamInfo s = Create("s");
  const StreamRetention none;
  ASSERT_EQ(s.next_offset, 1u);
  ASSERT_TRUE(store_->UpdateStream(s.id, none, "v1", std::nullopt, 1).ok());
  EXPECT_EQ(store_->GetStreamById(s.id)->spec.attributes, "v1");
  ASSERT_TRUE(Append(s.id, {"x"}).ok());
  Status moved = store_->UpdateStream(s.id, StreamRetention{3, std::nullopt, std::nullopt}, "v2",
                                      std::nullopt, 1);
  EXPECT_EQ(moved.code(), StatusCode::kConflict) << moved.ToString();
  auto info = store_->GetStreamById(s.id);
  EXPECT_EQ(info->spec.attributes, "v1");
  EXPECT_FALSE(info->spec.retention.max_events.has_value());
  // Both conditions must hold: the right tail with stale attributes is refused too.
  EXPECT_EQ(store_->UpdateStream(s.id, none, "v2", "v0", 2).code(), StatusCode::kConflict);
  EXPECT_EQ(store_->GetStreamById(s.id)->spec.attributes, "v1");
  ASSERT_TRUE(store_->UpdateStream(s.id, none, "v2", "v1", 2).ok());
  EXPECT_EQ(store_->GetStreamById(s.id)->spec.attributes, "v2");
  // A close moves nothing: the tail stays 2.
  AppendRequest close;
  close.stream = s.id;
  close.close = true;
  ASSERT_TRUE(AppendSync(*store_, std::move(close)).ok());
  EXPECT_TRUE(store_->UpdateStream(s.id, none, "v3", std::nullopt, 2).ok());
  ASSERT_TRUE(store_->DeleteStream(s.id).ok());
  EXPECT_EQ(store_->UpdateStream(s.id, none, "v4", std::nullopt, 2).code(), StatusCode::kNotFound);
}

// UpdateStream without a retention changes the attributes alone.
TEST_P(StoreContractTest, AnUpdateWithoutRetentionKeepsTheStoredRetention) {
  StreamInfo s = Create("s");
  const StreamRetention two{2, std::nullopt, std::nullopt};
  ASSERT_TRUE(store_->UpdateStream(s.id, two, "v1", std::nullopt, std::nullopt).ok());
  ASSERT_TRUE(store_->UpdateStream(s.id, std::nullopt, "v2", "v1", std::nullopt).ok());
  auto info = store_->GetStreamById(s.id);
  EXPECT_EQ(info->spec.attributes, "v2");
  EXPECT_EQ(info->spec.retention.max_events, std::optional<uint64_t>(2));
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(Append(s.id, {"x"}).ok());
  EXPECT_EQ(store_->GetStreamById(s.id)->event_count, 2u);  // the cap still applies
  ASSERT_TRUE(store_->UpdateStream(s.id, StreamRetention{}, "v3", "v2", std::nullopt).ok());
  EXPECT_FALSE(store_->GetStreamById(s.id)->spec.retention.max_events.has_value());
}

TEST_P(PersistentStoreTest, AttributesWrittenWithABatchSurviveAReopen) {
  StreamInfo s = Create("s");
  for (int i = 1; i <= 3; ++i) {
    AppendRequest req;
    req.stream = s.id;
    req.now_ms = 1;
    req.records = {AppendRecord{std::nullopt, "x"}};
    req.attributes = "seq=" + std::to_string(i);
    ASSERT_TRUE(AppendSync(*store_, std::move(req)).ok());
  }
  Reopen();
  auto info = store_->GetStream("global", "s");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->spec.attributes, "seq=3");
  EXPECT_EQ(info->next_offset, 4u);
}

TEST_P(PersistentStoreTest, DeletesClosesAndRetentionChangesSurviveAReopen) {
  StreamInfo gone = Create("gone");
  ASSERT_TRUE(Append(gone.id, {"x"}).ok());
  ASSERT_TRUE(store_->DeleteStream(gone.id).ok());
  StreamInfo closed = Create("closed");
  AppendRequest close;
  close.stream = closed.id;
  close.close = true;
  ASSERT_TRUE(AppendSync(*store_, std::move(close)).ok());
  StreamInfo kept = Create("kept");
  ASSERT_TRUE(store_
                  ->UpdateStream(kept.id, StreamRetention{1, std::nullopt, std::nullopt}, "v2",
                                 std::nullopt, std::nullopt)
                  .ok());
  ASSERT_TRUE(store_->Flush().ok());
  Reopen();
  EXPECT_EQ(store_->GetStream("global", "gone").status().code(), StatusCode::kNotFound);
  auto c = store_->GetStream("global", "closed");
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->closed);
  EXPECT_EQ(Append(c->id, {"z"}).status().code(), StatusCode::kFailedPrecondition);
  auto k = store_->GetStream("global", "kept");
  ASSERT_TRUE(k.ok());
  EXPECT_EQ(k->spec.retention.max_events, 1u);
  EXPECT_EQ(k->spec.attributes, "v2");
}

TEST_P(PersistentStoreTest, RegistryConsumerOffsetsSurviveARestart) {  // V5, C6
  ASSERT_TRUE(registry_->CreateStream(StreamScope::Global(), "jobs", StreamRetention{}).ok());
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(registry_->Append(StreamScope::Global(), "jobs", std::nullopt, "j", 1).ok());
  }
  ASSERT_TRUE(registry_->Ack(StreamScope::Global(), "jobs", "workers", 3).ok());
  ASSERT_TRUE(registry_->Flush().ok());
  Reopen();
  auto next = registry_->ReadNext(StreamScope::Global(), "jobs", "workers", 10);
  ASSERT_TRUE(next.ok());
  ASSERT_EQ(next->size(), 2u);
  EXPECT_EQ((*next)[0].offset, 4u);
}

TEST_P(PersistentStoreTest, DeletedCursorsStayDeletedAfterAReopen) {
  StreamInfo s = Create("s");
  ASSERT_TRUE(store_->CommitCursor(s.id, "gone", 3, 1).ok());
  ASSERT_TRUE(store_->CommitCursor(s.id, "kept", 4, 1).ok());
  ASSERT_TRUE(*store_->DeleteCursor(s.id, "gone"));
  ASSERT_TRUE(store_->CommitCursor(s.id, "again", 2, 1).ok());
  ASSERT_TRUE(*store_->DeleteCursor(s.id, "again"));
  ASSERT_TRUE(store_->CommitCursor(s.id, "again", 1, 2).ok());
  ASSERT_TRUE(store_->Flush().ok());
  Reopen();
  auto list = store_->ListCursors(s.id);
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ((*list)[0].consumer, "again");
  EXPECT_EQ((*list)[0].offset, 1u);
  EXPECT_EQ((*list)[1].consumer, "kept");
}

}  // namespace
}  // namespace runnel::testing
