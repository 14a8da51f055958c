// runnel::Streams on every store, by rule id (docs/semantics.md, family E).
#include <algorithm>
#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "core/protocol_streams_suite.h"
#include "runnel/streams.h"

namespace runnel::testing {

// HTTP: conformance "should return 404 on GET after Expires-At passes" (and on HEAD, POST).
TEST_P(ProtocolStreamsTest, E1_ExpiresAtHidesAndRemovesTheStream) {
  Door door(*registry_, clock_);
  const auto g = StreamScope::Global();
  ProtocolCreate create;
  create.content_type = "text/plain";
  create.expires_at = Rfc3339(clock_.NowMs() + 5'000);
  ASSERT_TRUE(door.streams.Create(g, "e1", create).ok());
  auto found = door.streams.Lookup(g, "e1");
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(found->expires_at, create.expires_at);
  EXPECT_EQ(found->info.spec.content_type, "text/plain");
  ASSERT_TRUE(door.streams.Append(g, "e1", Text("x")).ok());
  clock_.Advance(4'999);
  ASSERT_TRUE(door.streams.Lookup(g, "e1").ok());
  clock_.Advance(1);
  EXPECT_EQ(door.streams.Lookup(g, "e1").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(door.streams.Append(g, "e1", Text("y")).status().code(), StatusCode::kNotFound);
  // Found expired, it was removed from the store.
  EXPECT_EQ(registry_->store().GetStream(g.Label(), "e1").status().code(), StatusCode::kNotFound);
}

// HTTP: conformance "should extend TTL on write (sliding window)", "should extend TTL on read
// (sliding window)", "should return 404 on GET after TTL expires (idle)"; across nodes,
// tests/server/shared_ttl_test.cc.
TEST_P(ProtocolStreamsTest, E2_ATtlSlidesWithEveryAccess) {
  Door door(*registry_, clock_);
  const auto g = StreamScope::Global();
  ProtocolCreate create;
  create.content_type = "text/plain";
  create.ttl_s = 10;
  ASSERT_TRUE(door.streams.Create(g, "e2", create).ok());
  ASSERT_TRUE(door.streams.Lookup(g, "e2").ok());
  clock_.Advance(8'000);
  ASSERT_TRUE(door.streams.Append(g, "e2", Text("a")).ok());  // renews
  clock_.Advance(8'000);
  ASSERT_TRUE(door.streams.Read(g, "e2", 0).ok());  // 16 s old, 8 s idle: renews
  clock_.Advance(9'999);
  auto alive = door.streams.Lookup(g, "e2");
  ASSERT_TRUE(alive.ok());
  EXPECT_EQ(alive->ttl_s, 10u);
  // On a store shared with other nodes, accesses are recorded a quarter TTL apart, so the stream
  // lives that much longer (E2).
  const uint64_t unrecorded = registry_->store().SharedWithOtherNodes() ? 2'500 : 0;
  clock_.Advance(9'999 + unrecorded);
  ASSERT_TRUE(door.streams.Lookup(g, "e2").ok());
  clock_.Advance(10'000 + unrecorded);
  EXPECT_EQ(door.streams.Lookup(g, "e2").status().code(), StatusCode::kNotFound);
}

// HTTP: StreamSeqTest.ARefusedAppendLeavesTheStreamSeqUnchanged (tests/server/stream_seq_test.cc)
// and the conformance suite's Stream-Seq cases.
TEST_P(ProtocolStreamsTest, E4_AStreamSeqThatDoesNotIncreaseAppendsNothing) {
  Door door(*registry_, clock_);
  Make(door, "e4", "text/plain");
  const auto g = StreamScope::Global();
  ProtocolAppend first = Text("one");
  first.stream_seq = "b";
  ASSERT_TRUE(door.streams.Append(g, "e4", first).ok());
  ProtocolAppend back = Text("two");
  back.stream_seq = "a";
  EXPECT_EQ(door.streams.Append(g, "e4", back).status().code(), StatusCode::kConflict);
  back.stream_seq = "b";
  EXPECT_EQ(door.streams.Append(g, "e4", back).status().code(), StatusCode::kConflict);
  back.stream_seq = "c";
  ASSERT_TRUE(door.streams.Append(g, "e4", back).ok());
  auto read = door.streams.Read(g, "e4", 0);
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(read->records, (std::vector<std::string>{"one", "two"}));
  EXPECT_EQ(door.streams.Lookup(g, "e4")->stream_seq, "c");
}

TEST_P(ProtocolStreamsTest, E9_ProducerDuplicatesFencingAndGaps) {
  Door door(*registry_, clock_);
  Make(door, "e9", "text/plain");
  const auto g = StreamScope::Global();
  auto send = [&](uint64_t epoch, uint64_t seq) {
    ProtocolAppend a = Text("e" + std::to_string(epoch) + "s" + std::to_string(seq));
    a.producer = ProducerId{"p", epoch, seq};
    return door.streams.Append(g, "e9", a);
  };
  auto first = send(0, 0);
  ASSERT_TRUE(first.ok());
  EXPECT_FALSE(first->duplicate);
  auto again = send(0, 0);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->duplicate);
  EXPECT_EQ(again->tail_position, 1u);
  EXPECT_EQ(send(0, 2).status().code(), StatusCode::kConflict);  // gap: 1 expected
  EXPECT_EQ(send(0, 2).status().conflict_expected(), 1u);
  ASSERT_TRUE(send(0, 1).ok());
  ASSERT_TRUE(send(1, 0).ok());                                          // a new epoch
  EXPECT_EQ(send(0, 2).status().code(), StatusCode::kPermissionDenied);  // fenced
  EXPECT_EQ(send(2, 3).status().code(), StatusCode::kInvalidArgument);   // must start at 0
  auto read = door.streams.Read(g, "e9", 0);
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(read->records, (std::vector<std::string>{"e0s0", "e0s1", "e1s0"}));
}

// The rules run inside the store's atomic step (AppendGuard), not ahead of it: appends sent at
// once from many threads, with no lane ordering them, are each decided against the state the
// ones before them left. Every (epoch, seq) is written exactly once whatever its copies race,
// and of appends naming the same next Stream-Seq exactly one is taken.
TEST_P(ProtocolStreamsTest, E4_E9_RacingAppendsAreDecidedInsideTheStoresAtomicStep) {
  Door door(*registry_, clock_);
  Make(door, "race", "text/plain");
  const auto g = StreamScope::Global();
  constexpr int kThreads = 4;
  constexpr uint64_t kSeqs = 12;
  std::atomic<int> appended{0}, duplicates{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      // Each thread sends every seq in order, the next once the last was answered: its copies
      // race the other threads' copies of the same seq.
      for (uint64_t seq = 0; seq < kSeqs; ++seq) {
        ProtocolAppend a = Text("s" + std::to_string(seq));
        a.producer = ProducerId{"p", 0, seq};
        auto r = door.streams.Append(g, "race", a);
        ASSERT_TRUE(r.ok()) << seq << ": " << r.status().ToString();
        (r->duplicate ? duplicates : appended)++;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(appended.load(), static_cast<int>(kSeqs));
  EXPECT_EQ(duplicates.load(), static_cast<int>(kSeqs) * (kThreads - 1));
  auto read = door.streams.Read(g, "race", 0, 100);
  ASSERT_TRUE(read.ok());
  ASSERT_EQ(read->records.size(), kSeqs);
  for (uint64_t seq = 0; seq < kSeqs; ++seq)
    EXPECT_EQ(read->records[seq], "s" + std::to_string(seq));

  // Stream-Seq: threads race to append with the same next value; one wins each round.
  threads.clear();
  std::atomic<int> taken{0}, behind{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 8; ++round) {
        ProtocolAppend a = Text("r" + std::to_string(round) + "t" + std::to_string(t));
        a.stream_seq = "seq-" + std::to_string(round);
        auto r = door.streams.Append(g, "race", a);
        if (r.ok()) {
          taken++;
        } else {
          behind++;
          ASSERT_EQ(r.status().code(), StatusCode::kConflict) << r.status().ToString();
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(taken.load() + behind.load(), kThreads * 8);
  auto all = door.streams.Read(g, "race", kSeqs, 100);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->records.size(), static_cast<size_t>(taken.load()));
  // Each round's value was taken at most once, in increasing order.
  std::vector<std::string> rounds;
  for (const std::string& r : all->records) rounds.push_back(r.substr(0, r.find('t')));
  EXPECT_TRUE(std::is_sorted(rounds.begin(), rounds.end()));
  EXPECT_EQ(std::adjacent_find(rounds.begin(), rounds.end()), rounds.end());
  EXPECT_EQ(door.streams.Lookup(g, "race")->stream_seq, "seq-" + rounds.back().substr(1));
}

TEST_P(ProtocolStreamsTest, E9_CloseThenAppendIsRefusedButAProducerRetryIsADuplicate) {
  Door door(*registry_, clock_);
  Make(door, "closed", "text/plain");
  const auto g = StreamScope::Global();
  ProtocolAppend a = Text("last");
  a.producer = ProducerId{"p", 0, 0};
  a.close = true;
  auto closed = door.streams.Append(g, "closed", a);
  ASSERT_TRUE(closed.ok());
  EXPECT_TRUE(closed->closed);
  EXPECT_EQ(door.streams.Append(g, "closed", Text("more")).status().code(),
            StatusCode::kFailedPrecondition);
  auto retry = door.streams.Append(g, "closed", a);
  ASSERT_TRUE(retry.ok());
  EXPECT_TRUE(retry->duplicate);
  EXPECT_TRUE(door.streams.Close(g, "closed").ok());  // closing again succeeds
  auto read = door.streams.Read(g, "closed", 0);
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(read->records, std::vector<std::string>{"last"});
  EXPECT_TRUE(read->up_to_date);
  EXPECT_TRUE(read->closed);
}

TEST_P(ProtocolStreamsTest, E11_AConditionalAppendMustStartAtTheTail) {
  Door door(*registry_, clock_);
  Make(door, "e11", "text/plain");
  const auto g = StreamScope::Global();
  ProtocolAppend a = Text("x");
  a.expected_position = 0;
  ASSERT_TRUE(door.streams.Append(g, "e11", a).ok());
  auto stale = door.streams.Append(g, "e11", a);
  EXPECT_EQ(stale.status().code(), StatusCode::kConflict);
  EXPECT_EQ(stale.status().conflict_actual(), 1u);
  a.expected_position = 1;
  ASSERT_TRUE(door.streams.Append(g, "e11", a).ok());
  EXPECT_EQ(door.streams.Lookup(g, "e11")->tail_position, 2u);
}

TEST_P(ProtocolStreamsTest, E5_E6_ContentTypeAndJsonMode) {
  Door door(*registry_, clock_);
  Make(door, "json", "application/json");
  const auto g = StreamScope::Global();
  ProtocolAppend a;
  a.content_type = "text/plain";
  a.body = "[1]";
  EXPECT_EQ(door.streams.Append(g, "json", a).status().code(), StatusCode::kConflict);
  a.content_type = "Application/JSON; charset=utf-8";
  a.body = R"([1, {"a": 2}])";
  auto two = door.streams.Append(g, "json", a);
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(two->tail_position, 2u);
  a.body = "[]";
  EXPECT_EQ(door.streams.Append(g, "json", a).status().code(), StatusCode::kInvalidArgument);
  a.body = "{bad";
  EXPECT_EQ(door.streams.Append(g, "json", a).status().code(), StatusCode::kInvalidArgument);
  auto read = door.streams.Read(g, "json", 0);
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(read->records, (std::vector<std::string>{"1", R"({"a":2})"}));
}

// HTTP: conformance "should expire source with living forks (source goes 410)" and the fork
// deletion cases.
TEST_P(ProtocolStreamsTest, E10_DeletingAForkedSourceSoftDeletesItUntilItsLastForkGoes) {
  Door door(*registry_, clock_);
  const auto g = StreamScope::Global();
  Make(door, "source", "text/plain");
  ASSERT_TRUE(door.streams.Append(g, "source", Text("s1")).ok());
  ProtocolCreate create;
  create.fork = ProtocolFork{.scope = g, .name = "source", .position = 1};
  ASSERT_TRUE(door.streams.Create(g, "fork", create).ok());
  const StreamId source = door.streams.Lookup(g, "source")->info.id;
  const StreamId fork = door.streams.Lookup(g, "fork")->info.id;

  ASSERT_TRUE(door.streams.Delete(g, "source").ok());
  EXPECT_EQ(door.streams.Lookup(g, "source").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(door.streams.Append(g, "source", Text("no")).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(door.streams.Delete(g, "source").code(), StatusCode::kNotFound);
  // Soft-deleted: still stored (the fork references it), and the fork reads on.
  EXPECT_TRUE(registry_->store().GetStreamById(source).ok());
  auto read = door.streams.Read(g, "fork", 0);
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(read->records, std::vector<std::string>{"s1"});
  // Its last fork gone, the source is collected.
  ASSERT_TRUE(door.streams.Delete(g, "fork").ok());
  EXPECT_EQ(registry_->store().GetStreamById(source).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(registry_->store().GetStreamById(fork).status().code(), StatusCode::kNotFound);
}

TEST_P(ProtocolStreamsTest, P1_RetentionCapsChangeThroughTheProtocolDoor) {
  Door door(*registry_, clock_);
  Make(door, "capped", "text/plain");
  const auto g = StreamScope::Global();
  StreamRetention two;
  two.max_events = 2;
  ASSERT_TRUE(door.streams.UpdateRetention(g, "capped", two).ok());
  for (const char* body : {"a", "b", "c"})
    ASSERT_TRUE(door.streams.Append(g, "capped", Text(body)).ok());
  auto read = door.streams.Read(g, "capped", 0);
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(read->records, (std::vector<std::string>{"b", "c"}));
  EXPECT_EQ(door.streams.Lookup(g, "capped")->info.spec.retention.max_events, 2u);
  EXPECT_EQ(door.streams.UpdateRetention(g, "absent", two).code(), StatusCode::kNotFound);
}

}  // namespace runnel::testing
