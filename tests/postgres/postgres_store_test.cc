// The shared suites on the PostgreSQL store, plus what only a shared database has: several
// nodes on one schema, the unsigned offset mapping, migrations, and uncertain commits.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <limits>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/protocol_streams_suite.h"
#include "core/registry_suites.h"
#include "core/state_compaction_suite.h"
#include "postgres/postgres_harness.h"
#include "store/postgres/postgres_store.h"
#include "store/store_contract.h"

namespace runnel::testing {

INSTANTIATE_TEST_SUITE_P(Postgres, StoreContractTest, ::testing::Values(PostgresStoreParam()),
                         StoreParamName);
INSTANTIATE_TEST_SUITE_P(Postgres, PersistentStoreTest, ::testing::Values(PostgresStoreParam()),
                         StoreParamName);
INSTANTIATE_TEST_SUITE_P(Postgres, RegistryRulesTest, ::testing::Values(PostgresStoreParam()),
                         StoreParamName);
INSTANTIATE_TEST_SUITE_P(Postgres, RegistryGroupsTest, ::testing::Values(PostgresStoreParam()),
                         StoreParamName);
INSTANTIATE_TEST_SUITE_P(Postgres, StateCompactionTest, ::testing::Values(PostgresStoreParam()),
                         StoreParamName);
INSTANTIATE_TEST_SUITE_P(Postgres, ProtocolStreamsTest, ::testing::Values(PostgresStoreParam()),
                         StoreParamName);

namespace {

constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
constexpr uint64_t kSignBit = uint64_t{1} << 63;

// The highest tail `node`'s listener reported for `id`, while this lives.
class LatestTail {
 public:
  LatestTail(Store& node, StreamId id) : node_(node) {
    node.SetTailListener([this, id](StreamId s, uint64_t next) {
      std::lock_guard lock(mu_);
      if (s == id) latest_ = std::max(latest_, next);
      cv_.notify_all();
    });
  }
  ~LatestTail() { node_.SetTailListener(nullptr); }
  uint64_t Get() {
    std::lock_guard lock(mu_);
    return latest_;
  }
  // The latest tail once it reached `at_least`, or after a bounded wait (not a performance
  // assertion).
  uint64_t WaitFor(uint64_t at_least) {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, std::chrono::seconds(30), [&] { return latest_ >= at_least; });
    return latest_;
  }

 private:
  Store& node_;
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t latest_ = 0;  // GUARDED_BY(mu_)
};

// A fresh schema dropped at the end of the test.
class PostgresTest : public ::testing::Test {
 protected:
  void TearDown() override {
    SideConn side;
    if (side.ok()) side.Query("DROP SCHEMA IF EXISTS \"" + schema_ + "\" CASCADE");
  }

  std::unique_ptr<Store> OpenNode(PostgresStoreOptions options) {
    auto store = OpenPostgresStore(options);
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    return store.ok() ? std::move(*store) : nullptr;
  }
  std::unique_ptr<Store> OpenNode() { return OpenNode(PgOptions(schema_)); }

  static StreamId MustCreate(Store& store, const std::string& name, uint64_t first_offset = 1) {
    StreamSpec spec;
    spec.ns = "global";
    spec.name = name;
    spec.first_offset = first_offset;
    auto info = store.CreateStream(spec);
    EXPECT_TRUE(info.ok()) << info.status().ToString();
    return info.ok() ? info->id : 0;
  }

  static Result<AppendResult> AppendOne(Store& store, StreamId id, std::string payload,
                                        std::optional<uint64_t> expected = std::nullopt) {
    AppendRequest req;
    req.stream = id;
    req.now_ms = 1;
    req.expected_offset = expected;
    req.records.push_back(AppendRecord{std::nullopt, std::move(payload)});
    return AppendSync(store, std::move(req));
  }

  // Makes `reader` a node with a reader waiting on `ids`, and waits (bounded) until `writer`
  // has heard it: only then does `writer` send its tail notifications.
  static void WatchFrom(Store& reader, Store& writer, std::vector<StreamId> ids) {
    reader.SetWatchedStreams([ids] { return ids; });
    for (StreamId id : ids) reader.ReaderWaiting(id);
    auto& w = dynamic_cast<store::PostgresStore&>(writer);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!w.OtherNodesReading() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    EXPECT_TRUE(w.OtherNodesReading()) << "the reader's announcement was not heard";
  }

  const std::string schema_ = FreshSchemaName();
};

TEST(PostgresStoreBasics, DeclaresItselfAndOpensThroughTheRegistry) {
  const std::string schema = FreshSchemaName();
  RegistryOptions options;
  options.store = PgUrl();
  options.postgres_schema = schema;
  ASSERT_TRUE(options.store.starts_with("postgresql://"));
  {
    auto reg = StreamRegistry::Open(options);
    ASSERT_TRUE(reg.ok()) << reg.status().ToString();
    EXPECT_EQ(reg->store().Name(), "postgres");
    EXPECT_NE(reg->store().Durability().find("commit"), std::string::npos);
    ASSERT_TRUE(reg->CreateStream(StreamScope::Global(), "s", StreamRetention{}).ok());
  }
  options.store = "postgres://" + PgUrl().substr(std::string("postgresql://").size());
  auto again = StreamRegistry::Open(options);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE(again->store().GetStream("global", "s").ok());
  SideConn side;
  side.Query("DROP SCHEMA \"" + schema + "\" CASCADE");
}

TEST(PostgresStoreBasics, BadOptionsAndUnreachableServersAreRefused) {
  PostgresStoreOptions bad = PgOptions("no spaces; allowed");
  EXPECT_EQ(OpenPostgresStore(bad).status().code(), StatusCode::kInvalidArgument);
  PostgresStoreOptions none = PgOptions("ok");
  none.conninfo.clear();
  EXPECT_EQ(OpenPostgresStore(none).status().code(), StatusCode::kInvalidArgument);
  // Port 1 on loopback: nothing listens there.
  PostgresStoreOptions down = PgOptions("ok");
  down.conninfo = "postgresql://postgres@127.0.0.1:1/runnel_test?sslmode=disable";
  EXPECT_EQ(OpenPostgresStore(down).status().code(), StatusCode::kUnavailable);
}

// The registry caches name -> id for appends on this store. Another node deleting the stream
// and creating it again under the same name must not strand the cache: the append lands in the
// new stream (S3: never in the deleted one), and an append after a plain delete is kNotFound.
TEST(PostgresStoreBasics, TwoInstancesRegistryIdCacheFollowsDeleteAndRecreateOnAnotherNode) {
  const std::string schema = FreshSchemaName();
  RegistryOptions options;
  options.store = PgUrl();
  options.postgres_schema = schema;
  auto a = StreamRegistry::Open(options);
  auto b = StreamRegistry::Open(options);
  ASSERT_TRUE(a.ok() && b.ok());
  const StreamScope g = StreamScope::Global();
  ASSERT_TRUE(a->CreateStream(g, "s", StreamRetention{}).ok());
  auto one = [](StreamRegistry& r, const std::string& payload) {
    std::vector<AppendRecord> recs;
    recs.push_back(AppendRecord{std::nullopt, payload});
    return r.AppendBatch(StreamScope::Global(), "s", std::move(recs), AppendOptions{});
  };
  ASSERT_TRUE(one(*a, "first").ok());
  ASSERT_TRUE(one(*a, "second").ok());  // served from the cache
  const StreamId old_id = a->store().GetStream("global", "s")->id;
  ASSERT_TRUE(b->DeleteStream(g, "s").ok());
  ASSERT_TRUE(b->CreateStream(g, "s", StreamRetention{}).ok());
  auto third = one(*a, "third");
  ASSERT_TRUE(third.ok()) << third.status().ToString();
  EXPECT_EQ(third->first_offset, 1u);
  auto now = b->store().GetStream("global", "s");
  ASSERT_TRUE(now.ok());
  EXPECT_NE(now->id, old_id);
  EXPECT_EQ(now->event_count, 1u);
  auto rec = b->store().ReadAt(now->id, 1);
  ASSERT_TRUE(rec.ok() && rec->has_value());
  EXPECT_EQ((*rec)->payload, "third");
  ASSERT_TRUE(b->DeleteStream(g, "s").ok());
  EXPECT_EQ(one(*a, "fourth").status().code(), StatusCode::kNotFound);
  SideConn side;
  side.Query("DROP SCHEMA \"" + schema + "\" CASCADE");
}

TEST_F(PostgresTest, MigrationsRunOnceEvenWhenNodesStartTogether) {
  std::vector<std::unique_ptr<Store>> nodes(4);
  std::vector<std::thread> starters;
  for (auto& node : nodes) {
    starters.emplace_back([&] {
      auto s = OpenPostgresStore(PgOptions(schema_));
      ASSERT_TRUE(s.ok()) << s.status().ToString();
      node = std::move(*s);
    });
  }
  for (auto& t : starters) t.join();
  SideConn side;
  EXPECT_EQ(side.Query("SELECT count(*) FROM \"" + schema_ + "\".schema_migrations"), "2");
  nodes.clear();
  auto reopened = OpenNode();
  ASSERT_NE(reopened, nullptr);
  EXPECT_EQ(side.Query("SELECT count(*) FROM \"" + schema_ + "\".schema_migrations"), "2");
}

TEST_F(PostgresTest, NewerSchemaThanTheBinaryIsRefused) {
  { ASSERT_NE(OpenNode(), nullptr); }
  SideConn side;
  side.Query("INSERT INTO \"" + schema_ + "\".schema_migrations (version) VALUES (999)");
  auto refused = OpenPostgresStore(PgOptions(schema_));
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
}

// Offsets are stored with the sign bit flipped; order must survive across 2^63.
TEST_F(PostgresTest, OffsetsKeepTheirOrderAcrossTheSignBoundary) {
  auto store = OpenNode();
  ASSERT_NE(store, nullptr);
  const StreamId id = MustCreate(*store, "wide", kSignBit - 2);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(AppendOne(*store, id, "r" + std::to_string(i)).ok());
  auto recs = store->Read(id, 0, 10, kMax);
  ASSERT_TRUE(recs.ok()) << recs.status().ToString();
  ASSERT_EQ(recs->size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ((*recs)[i].offset, kSignBit - 2 + i);
  auto from_boundary = store->Read(id, kSignBit, 10, kMax);
  ASSERT_TRUE(from_boundary.ok());
  ASSERT_EQ(from_boundary->size(), 2u);
  EXPECT_EQ((*from_boundary)[0].payload, "r2");
  EXPECT_EQ(*store->CommitCursor(id, "c", kSignBit - 1, 1), kSignBit - 1);
  EXPECT_EQ(*store->CommitCursor(id, "c", kSignBit + 5, 2), kSignBit + 5);
  EXPECT_EQ(*store->CommitCursor(id, "c", 3, 3), kSignBit + 5);
  EXPECT_EQ(*store->TruncatePrefix(id, kSignBit - 1, false), 2u);
  auto info = store->GetStreamById(id);
  EXPECT_EQ(info->head_offset, kSignBit);
  EXPECT_EQ(info->tail_offset, kSignBit + 1);
  EXPECT_EQ(info->next_offset, kSignBit + 2);
  EXPECT_EQ(info->event_count, 2u);
}

// /metrics' group-commit figures: one committed append transaction is one "sync"; refused
// appends commit nothing and count nothing.
TEST_F(PostgresTest, CommitStatsCountCommittedTransactionsAndTheirRecords) {
  auto store = OpenNode();
  ASSERT_NE(store, nullptr);
  const StreamId id = MustCreate(*store, "counted");
  const StoreCommitStats empty = store->CommitStats();
  EXPECT_TRUE(empty.available);
  EXPECT_EQ(empty.syncs, 0u);
  ASSERT_TRUE(AppendOne(*store, id, "12345").ok());
  AppendRequest batch;
  batch.stream = id;
  batch.now_ms = 1;
  batch.records.push_back(AppendRecord{std::string("k"), "ab"});
  batch.records.push_back(AppendRecord{std::nullopt, "cd"});
  batch.records.push_back(AppendRecord{std::nullopt, "ef"});
  ASSERT_TRUE(AppendSync(*store, std::move(batch)).ok());
  EXPECT_EQ(AppendOne(*store, id, "late", /*expected=*/1).status().code(), StatusCode::kConflict);
  const StoreCommitStats stats = store->CommitStats();
  EXPECT_EQ(stats.syncs, 2u);
  EXPECT_EQ(stats.records, 4u);
  EXPECT_EQ(stats.bytes, 5u + 1u + 6u);
  EXPECT_EQ(stats.records_per_sync[0], 1u);  // the single record
  EXPECT_EQ(stats.records_per_sync[2], 1u);  // the batch of three: (2, 4]
}

TEST_F(PostgresTest, RetentionInsideOneGroupCutsLikeOneAppendAtATime) {
  // Many appends queued at once are committed in few transactions; retention must still cut
  // where it would after each append in turn.
  PostgresStoreOptions o = PgOptions(schema_);
  o.append_workers = 1;
  auto store = OpenNode(o);
  ASSERT_NE(store, nullptr);
  StreamSpec spec;
  spec.ns = "global";
  spec.name = "capped";
  spec.retention.max_events = 5;
  spec.retention.max_bytes = 12;
  auto info = store->CreateStream(spec);
  ASSERT_TRUE(info.ok());
  std::mutex mu;
  std::condition_variable cv;
  int done = 0;
  int failed = 0;
  constexpr int kAppends = 40;
  for (int i = 0; i < kAppends; ++i) {
    AppendRequest req;
    req.stream = info->id;
    req.now_ms = 10;
    req.records.push_back(AppendRecord{std::nullopt, std::string(1 + i % 4, 'x')});
    store->Append(std::move(req), [&](Result<AppendResult> r) {
      std::lock_guard lock(mu);
      if (!r.ok()) ++failed;
      ++done;
      cv.notify_all();
    });
  }
  {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return done == kAppends; });
  }
  EXPECT_EQ(failed, 0);
  // Reference: the memory store given the same appends one at a time.
  auto memory = NewMemoryStore();
  auto minfo = memory->CreateStream(spec);
  ASSERT_TRUE(minfo.ok());
  for (int i = 0; i < kAppends; ++i) {
    AppendRequest req;
    req.stream = minfo->id;
    req.now_ms = 10;
    req.records.push_back(AppendRecord{std::nullopt, std::string(1 + i % 4, 'x')});
    ASSERT_TRUE(AppendSync(*memory, std::move(req)).ok());
  }
  auto got = store->GetStreamById(info->id);
  auto want = memory->GetStreamById(minfo->id);
  EXPECT_EQ(got->head_offset, want->head_offset);
  EXPECT_EQ(got->tail_offset, want->tail_offset);
  EXPECT_EQ(got->event_count, want->event_count);
  EXPECT_EQ(got->retained_bytes, want->retained_bytes);
  SideConn side;
  EXPECT_EQ(side.Query("SELECT count(*) FROM \"" + schema_ + "\".events"),
            std::to_string(want->event_count));
}

TEST_F(PostgresTest, AnOccupiedSlotIsADefiniteConflictAndSparesTheRestOfTheGroup) {
  // A row at the stream's next offset that the catalog does not know about (written around the
  // store) makes the primary key refuse the insert: a definite conflict for that append only.
  PostgresStoreOptions o = PgOptions(schema_);
  o.append_workers = 1;
  auto store = OpenNode(o);
  ASSERT_NE(store, nullptr);
  const StreamId poisoned = MustCreate(*store, "poisoned");
  const StreamId healthy = MustCreate(*store, "healthy");
  SideConn side;
  side.Query("INSERT INTO \"" + schema_ + "\".events VALUES (" + std::to_string(poisoned) + ", " +
             std::to_string(static_cast<int64_t>(uint64_t{1} ^ kSignBit)) +
             ", 0, NULL, 'foreign')");
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::optional<Result<AppendResult>>> got(6);
  int done = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    AppendRequest req;
    req.stream = i == 2 ? poisoned : healthy;
    req.now_ms = 1;
    req.records.push_back(AppendRecord{std::nullopt, "r" + std::to_string(i)});
    store->Append(std::move(req), [&, i](Result<AppendResult> r) {
      std::lock_guard lock(mu);
      got[i].emplace(std::move(r));
      ++done;
      cv.notify_all();
    });
  }
  std::unique_lock lock(mu);
  cv.wait(lock, [&] { return done == static_cast<int>(got.size()); });
  for (size_t i = 0; i < got.size(); ++i) {
    if (i == 2) {
      ASSERT_EQ(got[i]->status().code(), StatusCode::kConflict) << got[i]->status().ToString();
      EXPECT_EQ(got[i]->status().conflict_actual(), 1u);
    } else {
      EXPECT_TRUE(got[i]->ok()) << got[i]->status().ToString();
    }
  }
  EXPECT_EQ(store->GetStreamById(healthy)->event_count, 5u);
  EXPECT_EQ(store->GetStreamById(poisoned)->next_offset, 1u);
  auto foreign = store->ReadAt(poisoned, 1);
  ASSERT_TRUE(foreign.ok() && foreign->has_value());
  EXPECT_EQ((*foreign)->payload, "foreign");
}

// ---- two nodes on one database -------------------------------------------------------------

TEST_F(PostgresTest, TwoInstancesNeverCommitTheSameOffset) {  // S3
  auto a = OpenNode();
  auto b = OpenNode();
  ASSERT_TRUE(a && b);
  const StreamId id = MustCreate(*a, "shared");
  constexpr int kThreads = 4;
  constexpr int kPerThread = 100;
  std::vector<std::vector<uint64_t>> got(kThreads * 2);
  std::vector<std::thread> writers;
  for (int t = 0; t < kThreads * 2; ++t) {
    writers.emplace_back([&, t] {
      Store& node = t % 2 == 0 ? *a : *b;
      for (int i = 0; i < kPerThread; ++i) {
        auto r = AppendOne(node, id, "n" + std::to_string(t) + "-" + std::to_string(i));
        ASSERT_TRUE(r.ok()) << r.status().ToString();
        got[t].push_back(r->first_offset);
      }
    });
  }
  for (auto& w : writers) w.join();
  std::vector<uint64_t> all;
  for (auto& g : got) all.insert(all.end(), g.begin(), g.end());
  std::sort(all.begin(), all.end());
  ASSERT_EQ(all.size(), static_cast<size_t>(kThreads * 2 * kPerThread));
  for (size_t i = 0; i < all.size(); ++i) ASSERT_EQ(all[i], i + 1);
  // Both nodes read the same rows in the same order.
  auto ra = a->Read(id, 1, 10000, kMax);
  auto rb = b->Read(id, 1, 10000, kMax);
  ASSERT_TRUE(ra.ok() && rb.ok());
  ASSERT_EQ(ra->size(), all.size());
  ASSERT_EQ(rb->size(), all.size());
  for (size_t i = 0; i < ra->size(); ++i) EXPECT_EQ((*ra)[i].payload, (*rb)[i].payload);
}

TEST_F(PostgresTest, TwoInstancesConditionalAppendsConflictDefinitely) {  // S1, seed-003
  auto a = OpenNode();
  auto b = OpenNode();
  ASSERT_TRUE(a && b);
  const StreamId id = MustCreate(*a, "race");
  constexpr int kRounds = 50;
  for (int round = 0; round < kRounds; ++round) {
    const uint64_t slot = static_cast<uint64_t>(round) + 1;
    Result<AppendResult> ra = Status::Internal("unset");
    Result<AppendResult> rb = Status::Internal("unset");
    std::thread ta([&] { ra = AppendOne(*a, id, "a" + std::to_string(round), slot); });
    std::thread tb([&] { rb = AppendOne(*b, id, "b" + std::to_string(round), slot); });
    ta.join();
    tb.join();
    // Exactly one wins the slot; the other is refused definitely with the new tail.
    ASSERT_NE(ra.ok(), rb.ok()) << ra.status().ToString() << " / " << rb.status().ToString();
    const Result<AppendResult>& loser = ra.ok() ? rb : ra;
    const Result<AppendResult>& winner = ra.ok() ? ra : rb;
    EXPECT_EQ(winner->first_offset, slot);
    ASSERT_EQ(loser.status().code(), StatusCode::kConflict) << loser.status().ToString();
    EXPECT_EQ(loser.status().conflict_expected(), slot);
    EXPECT_EQ(loser.status().conflict_actual(), slot + 1);
    auto row = b->ReadAt(id, slot);
    ASSERT_TRUE(row.ok() && row->has_value());
    EXPECT_EQ((*row)->payload[0], ra.ok() ? 'a' : 'b');
  }
  EXPECT_EQ(a->GetStreamById(id)->event_count, static_cast<uint64_t>(kRounds));
}

// A node knows when other nodes append (their notifications reach its listener); its own
// appends do not count. Only then do its workers wait for fuller groups.
TEST_F(PostgresTest, TwoInstancesNoticeEachOthersAppendsButNotTheirOwn) {
  auto a = OpenNode();
  auto b = OpenNode();
  ASSERT_TRUE(a && b);
  auto& node_a = dynamic_cast<store::PostgresStore&>(*a);
  const StreamId id = MustCreate(*a, "busy");
  EXPECT_FALSE(node_a.OtherNodesAppending());
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(AppendOne(*a, id, "own").ok());
  // A's own notifications arrive within milliseconds; give them ample time to be (wrongly)
  // counted.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_FALSE(node_a.OtherNodesAppending()) << "its own appends count as another node's";
  ASSERT_TRUE(AppendOne(*b, id, "other").ok());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!node_a.OtherNodesAppending() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(node_a.OtherNodesAppending()) << "B's append was not heard";
  // The appends still commit exactly once, in order, with the wait in play.
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(AppendOne(*(i % 2 ? a : b), id, std::to_string(i)).ok());
  }
  EXPECT_EQ(a->GetStreamById(id)->event_count, 26u);
}

// While another node appends, a worker locks its streams' rows before taking its group
// (prelock_max_streams), so what queues during the lock wait joins the transaction. The
// appends still commit once each, densely, and a refusal found under the prelock (a stream
// another node closed) is decided on the locking path as usual.
TEST_F(PostgresTest, TwoInstancesPrelockedGroupsCommitEachAppendOnce) {  // S3
  auto a = OpenNode();
  auto b = OpenNode();
  ASSERT_TRUE(a && b);
  auto& node_a = dynamic_cast<store::PostgresStore&>(*a);
  constexpr int kStreams = 4;
  std::vector<StreamId> ids;
  for (int i = 0; i < kStreams; ++i) ids.push_back(MustCreate(*a, "pre" + std::to_string(i)));
  // A remembers each stream (its first append takes the locking path) and hears B append.
  for (StreamId id : ids) ASSERT_TRUE(AppendOne(*a, id, "warm").ok());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!node_a.OtherNodesAppending() && std::chrono::steady_clock::now() < deadline) {
    ASSERT_TRUE(AppendOne(*b, ids[0], "b-warm").ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(node_a.OtherNodesAppending());
  const uint64_t before = node_a.PrelockedGroups();

  constexpr int kThreads = 8;
  constexpr int kPerThread = 60;
  std::vector<std::thread> writers;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    writers.emplace_back([&, t] {
      Store& node = t % 2 == 0 ? *a : *b;
      for (int i = 0; i < kPerThread; ++i) {
        const StreamId id = ids[static_cast<size_t>(i + t) % kStreams];
        if (!AppendOne(node, id, "t" + std::to_string(t) + "-" + std::to_string(i)).ok()) {
          ++failures;
        }
      }
    });
  }
  for (auto& w : writers) w.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_GT(node_a.PrelockedGroups(), before) << "A never took the prelocked path";
  // Every payload once, offsets dense from 1, and both nodes read the same order.
  std::multiset<std::string> payloads;
  size_t total = 0;
  for (StreamId id : ids) {
    auto ra = a->Read(id, 1, 100000, kMax);
    auto rb = b->Read(id, 1, 100000, kMax);
    ASSERT_TRUE(ra.ok() && rb.ok());
    ASSERT_EQ(ra->size(), rb->size());
    for (size_t i = 0; i < ra->size(); ++i) {
      EXPECT_EQ((*ra)[i].offset, i + 1);
      EXPECT_EQ((*ra)[i].payload, (*rb)[i].payload);
      payloads.insert((*ra)[i].payload);
    }
    total += ra->size();
  }
  EXPECT_EQ(total,
            static_cast<size_t>(kStreams + kThreads * kPerThread) + payloads.count("b-warm"));
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kPerThread; ++i) {
      EXPECT_EQ(payloads.count("t" + std::to_string(t) + "-" + std::to_string(i)), 1u);
    }
  }

  // B closes a stream A still remembers as open: A's next append there is refused
  // definitely, and A's other streams go on.
  AppendRequest close;
  close.stream = ids[1];
  close.now_ms = 1;
  close.close = true;
  ASSERT_TRUE(AppendSync(*b, std::move(close)).ok());
  ASSERT_TRUE(AppendOne(*b, ids[0], "keep-shared").ok());  // A keeps hearing B
  auto refused = AppendOne(*a, ids[1], "late");
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition)
      << refused.status().ToString();
  auto fine = AppendOne(*a, ids[2], "after");
  ASSERT_TRUE(fine.ok()) << fine.status().ToString();
  EXPECT_EQ(a->GetStreamById(ids[1])->next_offset, b->GetStreamById(ids[1])->next_offset);
}

// Each node's notifier sends at most one NOTIFY per notify_interval, carrying every tail
// committed meanwhile (several streams in one payload); other nodes still hear every stream's
// final tail.
TEST_F(PostgresTest, TwoInstancesNotificationsAreCoalescedAndEndAtTheTails) {
  PostgresStoreOptions slow = PgOptions(schema_);
  slow.notify_interval = std::chrono::milliseconds(300);
  PostgresStoreOptions quiet = PgOptions(schema_);
  quiet.safety_poll = std::chrono::milliseconds(0);  // every call below is a notification
  auto a = OpenNode(slow);
  auto b = OpenNode(quiet);
  ASSERT_TRUE(a && b);
  std::vector<StreamId> ids;
  for (int i = 0; i < 3; ++i) ids.push_back(MustCreate(*a, "co" + std::to_string(i)));
  std::mutex mu;
  std::condition_variable cv;
  std::map<StreamId, std::vector<uint64_t>> heard;
  size_t calls = 0;
  b->SetTailListener([&](StreamId s, uint64_t next) {
    std::lock_guard lock(mu);
    heard[s].push_back(next);
    ++calls;
    cv.notify_all();
  });
  WatchFrom(*b, *a, ids);
  // The first append opens A's notifier session; B hears it, then the counting starts.
  ASSERT_TRUE(AppendOne(*a, ids[0], "first").ok());
  {
    std::unique_lock lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(30), [&] { return calls > 0; }));
    heard.clear();
    calls = 0;
  }
  constexpr int kPerStream = 20;
  const auto started = std::chrono::steady_clock::now();
  for (int i = 0; i < kPerStream; ++i) {
    for (StreamId id : ids) ASSERT_TRUE(AppendOne(*a, id, std::to_string(i)).ok());
  }
  // A sends at most one notification transaction per 300 ms, from the first append until one
  // interval after the last; each carries at most one entry per stream.
  const auto spent = std::chrono::steady_clock::now() - started;
  const size_t max_sends = static_cast<size_t>(spent / std::chrono::milliseconds(300)) + 2;
  {
    std::unique_lock lock(mu);
    cv.wait_for(lock, std::chrono::seconds(30), [&] {
      for (StreamId id : ids) {
        if (heard[id].empty() || heard[id].back() != kPerStream + 1 + (id == ids[0])) {
          return false;
        }
      }
      return true;
    });
    for (StreamId id : ids) {
      ASSERT_FALSE(heard[id].empty());
      EXPECT_EQ(heard[id].back(), static_cast<uint64_t>(kPerStream + 1 + (id == ids[0])));
      EXPECT_TRUE(std::is_sorted(heard[id].begin(), heard[id].end()));
    }
    // 60 appends, one notification each without coalescing.
    EXPECT_LE(calls, 3 * max_sends);
  }
  b->SetTailListener(nullptr);
}

// Tail notifications are sent only while another node has waiting readers (it announces them
// every announce_interval, and at once when a reader starts waiting); tails committed just
// before a reader appeared are sent when it does, so that reader still wakes.
TEST_F(PostgresTest, TwoInstancesNotifyOnlyWhileAnotherNodeHasReaders) {
  PostgresStoreOptions fast = PgOptions(schema_);
  fast.announce_interval = std::chrono::milliseconds(100);
  fast.safety_poll = std::chrono::milliseconds(0);  // every wake-up below is a notification
  auto a = OpenNode(fast);
  auto b = OpenNode(fast);
  ASSERT_TRUE(a && b);
  auto& node_a = dynamic_cast<store::PostgresStore&>(*a);
  const StreamId id = MustCreate(*a, "gated");
  LatestTail heard_by_b(*b, id);
  // No readers on B: A appends and notifies no one.
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(AppendOne(*a, id, "quiet").ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_FALSE(node_a.OtherNodesReading());
  EXPECT_EQ(node_a.NotificationsSent(), 0u);
  EXPECT_EQ(heard_by_b.Get(), 0u) << "B heard a tail although it had no readers";
  // A reader starts waiting on B: A hears of it and sends the tail it skipped (11).
  b->SetWatchedStreams([id] { return std::vector<StreamId>{id}; });
  b->ReaderWaiting(id);
  EXPECT_EQ(heard_by_b.WaitFor(11), 11u)
      << "the skipped tail was not sent when the reader appeared";
  EXPECT_TRUE(node_a.OtherNodesReading());
  // While the reader waits, every append is notified.
  ASSERT_TRUE(AppendOne(*a, id, "heard").ok());
  EXPECT_EQ(heard_by_b.WaitFor(12), 12u);
  // The reader leaves; after three silent intervals A stops notifying.
  b->SetWatchedStreams(nullptr);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (node_a.OtherNodesReading() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_FALSE(node_a.OtherNodesReading());
  const uint64_t sent = node_a.NotificationsSent();
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(AppendOne(*a, id, "quiet-again").ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(node_a.NotificationsSent(), sent);
}

TEST_F(PostgresTest, TwoInstancesListenersWakeForTheOtherNodesAppends) {
  auto a = OpenNode();
  auto b = OpenNode();
  ASSERT_TRUE(a && b);
  const StreamId id = MustCreate(*a, "wake");
  std::mutex mu;
  std::condition_variable cv;
  std::vector<uint64_t> seen_by_b;
  int local_calls_on_b = 0;
  b->SetTailListener([&](StreamId s, uint64_t next) {
    std::lock_guard lock(mu);
    if (s == id) seen_by_b.push_back(next);
    cv.notify_all();
  });
  std::vector<uint64_t> seen_by_a;
  a->SetTailListener([&](StreamId s, uint64_t next) {
    std::lock_guard lock(mu);
    if (s == id) seen_by_a.push_back(next);
  });
  WatchFrom(*b, *a, {id});
  ASSERT_TRUE(AppendOne(*a, id, "x").ok());
  ASSERT_TRUE(AppendOne(*a, id, "y").ok());
  {
    std::unique_lock lock(mu);
    // Bounded wait for the notification to cross nodes; not a performance assertion.
    cv.wait_for(lock, std::chrono::seconds(30),
                [&] { return !seen_by_b.empty() && seen_by_b.back() == 3; });
    // Notifications are hints that A's notifier may coalesce: B hears the tail rise to 3,
    // possibly skipping 2, never going back.
    ASSERT_FALSE(seen_by_b.empty());
    EXPECT_EQ(seen_by_b.back(), 3u);
    EXPECT_TRUE(std::is_sorted(seen_by_b.begin(), seen_by_b.end()));
    EXPECT_GE(seen_by_b.front(), 2u);
    // Node A heard each of its own appends exactly once (directly, not again via NOTIFY).
    EXPECT_EQ(seen_by_a, (std::vector<uint64_t>{2, 3}));
    local_calls_on_b = static_cast<int>(seen_by_b.size());
  }
  EXPECT_LE(local_calls_on_b, 2);
  a->SetTailListener(nullptr);
  b->SetTailListener(nullptr);
  b->SetWatchedStreams(nullptr);
}

TEST_F(PostgresTest, TwoInstancesListenerComesBackAfterItsConnectionIsKilled) {
  PostgresStoreOptions o = PgOptions(schema_);
  o.listener_poll = std::chrono::milliseconds(50);
  auto a = OpenNode();
  auto b = OpenNode(o);
  ASSERT_TRUE(a && b);
  const StreamId id = MustCreate(*a, "wake");
  LatestTail heard_by_b(*b, id);
  WatchFrom(*b, *a, {id});
  SideConn side;
  // Kill every session of this schema's listeners (node A's too), then append on A. (A
  // listener's last statement is its LISTEN or an announcement of its node's readers.)
  EXPECT_EQ(side.Query("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                       "WHERE query IN ('LISTEN \"" +
                       schema_ + "_tail\"', 'SELECT pg_notify($1, $2)')"),
            "2");
  ASSERT_TRUE(AppendOne(*a, id, "after-the-kill").ok());
  // Either the notification reaches B's new listening session, or B's reconnect wakes every
  // stream; both report the new tail.
  EXPECT_EQ(heard_by_b.WaitFor(2), 2u);
}

// A row written behind the store's back (no NOTIFY at all, as when a notification is lost while
// the listener reconnects) still wakes a reader: the safety-net poll re-reads the tails of the
// watched streams (SEMANTICS N1: an append wakes its waiting readers).
TEST_F(PostgresTest, N1_SafetyPollWakesAWatchedStreamWhoseNotificationWasLost) {
  PostgresStoreOptions o = PgOptions(schema_);
  o.safety_poll = std::chrono::milliseconds(200);
  auto store = OpenNode(o);
  ASSERT_TRUE(store);
  const StreamId watched = MustCreate(*store, "watched");
  const StreamId other = MustCreate(*store, "other");
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::pair<StreamId, uint64_t>> calls;
  store->SetTailListener([&](StreamId s, uint64_t next) {
    std::lock_guard lock(mu);
    calls.emplace_back(s, next);
    cv.notify_all();
  });
  store->SetWatchedStreams([watched] { return std::vector<StreamId>{watched}; });
  // The first poll may wake the newly watched stream once, at its current tail (1).
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  {
    std::lock_guard lock(mu);
    for (const auto& c : calls) EXPECT_EQ(c, (std::pair<StreamId, uint64_t>{watched, 1}));
    calls.clear();
  }
  SideConn side;
  ASSERT_TRUE(side.ok());
  for (StreamId id : {watched, other}) {
    // What an append commits, minus the NOTIFY: a record at offset 1 and the tail moved to 2.
    side.Query("INSERT INTO \"" + schema_ +
               "\".events (stream_id, off, appended_at_ms, key, payload) VALUES (" +
               std::to_string(id) + ", " + std::to_string(static_cast<int64_t>(1 ^ kSignBit)) +
               ", 1, NULL, 'behind-the-back')");
    side.Query("UPDATE \"" + schema_ + "\".streams SET next_offset = " +
               std::to_string(static_cast<int64_t>(2 ^ kSignBit)) +
               ", retained_bytes = 15 WHERE id = " + std::to_string(id));
  }
  std::unique_lock lock(mu);
  // Bounded wait (a few poll periods), not a performance assertion.
  cv.wait_for(lock, std::chrono::seconds(10), [&] { return !calls.empty(); });
  ASSERT_FALSE(calls.empty());
  EXPECT_EQ(calls.front(), (std::pair<StreamId, uint64_t>{watched, 2}));
  lock.unlock();
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  lock.lock();
  // Only the watched stream is polled; the unwatched one is never woken by the safety net, and
  // an unchanged tail is not woken again.
  for (const auto& c : calls) EXPECT_EQ(c, (std::pair<StreamId, uint64_t>{watched, 2}));
  EXPECT_EQ(calls.size(), 1u);
  lock.unlock();
  auto rec = store->ReadAt(watched, 1);
  ASSERT_TRUE(rec.ok() && rec->has_value());
  EXPECT_EQ((*rec)->payload, "behind-the-back");
  store->SetWatchedStreams(nullptr);
  store->SetTailListener(nullptr);
}

// A delete through another node sends no notification: the safety-net poll wakes the readers of
// a watched stream that is gone, so they end (404) within a poll period, not at their timeout.
TEST_F(PostgresTest, SafetyPollWakesTheReadersOfAStreamDeletedElsewhere) {
  PostgresStoreOptions o = PgOptions(schema_);
  o.safety_poll = std::chrono::milliseconds(200);
  auto reader_node = OpenNode(o);
  auto writer_node = OpenNode(o);
  ASSERT_TRUE(reader_node && writer_node);
  const StreamId watched = MustCreate(*writer_node, "doomed");
  std::mutex mu;
  std::condition_variable cv;
  bool woken_after_delete = false;
  bool deleted = false;
  reader_node->SetTailListener([&](StreamId s, uint64_t) {
    std::lock_guard lock(mu);
    if (s == watched && deleted) woken_after_delete = true;
    cv.notify_all();
  });
  reader_node->SetWatchedStreams([watched] { return std::vector<StreamId>{watched}; });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // the first poll's wake is over
  {
    std::lock_guard lock(mu);
    deleted = true;
  }
  ASSERT_TRUE(writer_node->DeleteStream(watched).ok());
  std::unique_lock lock(mu);
  // Bounded wait (many poll periods), not a performance assertion.
  cv.wait_for(lock, std::chrono::seconds(10), [&] { return woken_after_delete; });
  EXPECT_TRUE(woken_after_delete);
  lock.unlock();
  reader_node->SetWatchedStreams(nullptr);
  reader_node->SetTailListener(nullptr);
}

// Sessions the server closed while they sat idle in the pool (a database restart terminates
// them all) are replaced before use: the next calls succeed instead of failing once per stale
// connection.
TEST_F(PostgresTest, PooledSessionsTheServerClosedAreReplacedBeforeUse) {
  PostgresStoreOptions o = PgOptions(schema_);
  o.query_connections = 3;
  o.append_workers = 2;
  auto store = OpenNode(o);
  ASSERT_TRUE(store);
  const StreamId id = MustCreate(*store, "s");
  ASSERT_TRUE(AppendOne(*store, id, "before").ok());
  // Fill the pool with several idle sessions.
  {
    std::vector<std::thread> readers;
    for (int i = 0; i < 3; ++i) {
      readers.emplace_back([&] { EXPECT_TRUE(store->GetStreamById(id).ok()); });
    }
    for (auto& t : readers) t.join();
  }
  SideConn side;
  ASSERT_TRUE(side.ok());
  // Terminate every session of this store but the listener (which reconnects on its own).
  const auto killed = side.Query(
      "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE "
      "application_name = 'runnel' AND pid <> pg_backend_pid() AND query NOT LIKE 'LISTEN%' "
      "AND query NOT LIKE 'SELECT id, next_offset FROM streams WHERE id = ANY%' "
      "AND query <> 'SELECT pg_notify($1, $2)'");
  ASSERT_TRUE(killed.has_value());
  EXPECT_GE(std::stoi(*killed), 2);
  // Bounded wait until the server has closed them.
  for (int i = 0; i < 300; ++i) {
    const auto left = side.Query(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'runnel' "
        "AND pid <> pg_backend_pid()");
    if (left && std::stoi(*left) <= 1) break;  // only the listener is left
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  for (int i = 0; i < 4; ++i) {
    auto info = store->GetStreamById(id);
    ASSERT_TRUE(info.ok()) << "call " << i << ": " << info.status().ToString();
  }
  auto appended = AppendOne(*store, id, "after");
  ASSERT_TRUE(appended.ok()) << appended.status().ToString();
  EXPECT_EQ(appended->first_offset, 2u);
}

Result<AppendResult> ProducerAppend(Store& store, StreamId id, uint64_t epoch, uint64_t seq) {
  AppendRequest req;
  req.stream = id;
  req.now_ms = 1;
  req.records.push_back(
      AppendRecord{std::nullopt, "e" + std::to_string(epoch) + "s" + std::to_string(seq)});
  req.producer = ProducerState{"prod", epoch, seq, 0};
  return AppendSync(store, std::move(req));
}

// Idempotent producers across nodes: each node checks (epoch, seq) before it queues the append,
// and the store re-checks it under the stream's row lock, so the same (epoch, seq) sent through
// two nodes commits once (the other is kAlreadyExists, nothing written) and an older epoch is
// refused.
TEST_F(PostgresTest, TwoInstancesProducerStateIsCompareAndSetUnderTheRowLock) {
  auto a = OpenNode();
  auto b = OpenNode();
  ASSERT_TRUE(a && b);
  const StreamId id = MustCreate(*a, "p");
  ASSERT_TRUE(ProducerAppend(*a, id, 0, 0).ok());
  EXPECT_EQ(ProducerAppend(*b, id, 0, 0).status().code(), StatusCode::kAlreadyExists);
  ASSERT_TRUE(ProducerAppend(*b, id, 0, 1).ok());
  EXPECT_EQ(ProducerAppend(*a, id, 0, 1).status().code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(ProducerAppend(*a, id, 0, 0).status().code(), StatusCode::kAlreadyExists);
  ASSERT_TRUE(ProducerAppend(*a, id, 1, 0).ok());
  EXPECT_EQ(ProducerAppend(*b, id, 0, 2).status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(a->GetStreamById(id)->event_count, 3u);
  auto state = b->GetProducer(id, "prod");
  ASSERT_TRUE(state.ok() && state->has_value());
  EXPECT_EQ((*state)->epoch, 1u);
  EXPECT_EQ((*state)->seq, 0u);
  EXPECT_EQ((*state)->last_offset, 3u);
}

TEST_F(PostgresTest, TwoInstancesConcurrentResendsOfOneProducerCommitEachSeqOnce) {
  auto a = OpenNode();
  auto b = OpenNode();
  ASSERT_TRUE(a && b);
  const StreamId id = MustCreate(*a, "p");
  constexpr uint64_t kSeqs = 60;
  std::atomic<int> committed{0};
  std::atomic<int> duplicates{0};
  std::atomic<int> other{0};
  // Both "nodes" send every seq, in order, at the same time: for each seq exactly one commits.
  auto run = [&](Store& store) {
    for (uint64_t seq = 0; seq < kSeqs; ++seq) {
      auto r = ProducerAppend(store, id, 0, seq);
      if (r.ok()) {
        ++committed;
      } else if (r.status().code() == StatusCode::kAlreadyExists) {
        ++duplicates;
      } else {
        ++other;
      }
    }
  };
  std::thread ta([&] { run(*a); });
  std::thread tb([&] { run(*b); });
  ta.join();
  tb.join();
  EXPECT_EQ(other.load(), 0);
  EXPECT_EQ(committed.load(), static_cast<int>(kSeqs));
  EXPECT_EQ(duplicates.load(), static_cast<int>(kSeqs));
  auto records = a->Read(id, 1, 1000, 1 << 20);
  ASSERT_TRUE(records.ok());
  ASSERT_EQ(records->size(), kSeqs);
  for (uint64_t i = 0; i < kSeqs; ++i) {
    EXPECT_EQ((*records)[i].payload, "e0s" + std::to_string(i));
  }
}

// ---- uncertain outcomes ----------------------------------------------------------------------

// Waits (bounded) until `pid` is gone from pg_stat_activity, or idle when `idle` is set.
bool WaitForBackend(SideConn& side, int pid, bool idle) {
  const std::string q = "SELECT count(*) FROM pg_stat_activity WHERE pid = " + std::to_string(pid) +
                        (idle ? " AND state = 'idle'" : "");
  for (int i = 0; i < 3000; ++i) {
    const auto n = side.Query(q);
    if (n == (idle ? "1" : "0")) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

TEST_F(PostgresTest, BackendKilledBeforeCommitIsUnknownAndTheSlotSettlesAbsent) {
  SideConn side;
  ASSERT_TRUE(side.ok());
  std::atomic<bool> armed{false};
  std::atomic<bool> killed{false};
  PostgresStoreOptions o = PgOptions(schema_);
  o.append_workers = 1;
  o.fault_hook = [&](PostgresFaultPoint point, int pid) {
    if (point != PostgresFaultPoint::kBeforeCommit || !armed.exchange(false)) return false;
    side.Query("SELECT pg_terminate_backend(" + std::to_string(pid) + ")");
    killed = WaitForBackend(side, pid, /*idle=*/false);
    return false;  // the store does not know: it sends COMMIT into a dead session
  };
  auto store = OpenNode(o);
  ASSERT_NE(store, nullptr);
  const StreamId id = MustCreate(*store, "s");
  ASSERT_TRUE(AppendOne(*store, id, "first").ok());
  armed = true;
  auto lost = AppendOne(*store, id, "mine", 2);
  ASSERT_TRUE(killed.load());
  ASSERT_EQ(lost.status().code(), StatusCode::kOutcomeUnknown) << lost.status().ToString();
  // Settle by reading the exact slot: the session died before COMMIT, so nothing is there.
  auto slot = store->ReadAt(id, 2);
  ASSERT_TRUE(slot.ok()) << slot.status().ToString();
  EXPECT_FALSE(slot->has_value());
  EXPECT_EQ(store->GetStreamById(id)->next_offset, 2u);
  // The worker reconnects; the slot is still free for the resend.
  auto resent = AppendOne(*store, id, "mine", 2);
  ASSERT_TRUE(resent.ok()) << resent.status().ToString();
  EXPECT_EQ(resent->first_offset, 2u);
}

TEST_F(PostgresTest, ConnectionLostAfterCommitIsUnknownAndTheSlotSettlesCommitted) {
  SideConn side;
  ASSERT_TRUE(side.ok());
  std::atomic<bool> armed{false};
  std::atomic<bool> committed{false};
  PostgresStoreOptions o = PgOptions(schema_);
  o.append_workers = 1;
  o.fault_hook = [&](PostgresFaultPoint point, int pid) {
    if (point != PostgresFaultPoint::kAfterCommitSent || !armed.exchange(false)) return false;
    // Let the server finish the COMMIT, then cut the wire before its reply is read.
    committed = WaitForBackend(side, pid, /*idle=*/true);
    return true;
  };
  auto store = OpenNode(o);
  ASSERT_NE(store, nullptr);
  const StreamId id = MustCreate(*store, "s");
  armed = true;
  auto lost = AppendOne(*store, id, "mine", 1);
  ASSERT_TRUE(committed.load());
  ASSERT_EQ(lost.status().code(), StatusCode::kOutcomeUnknown) << lost.status().ToString();
  auto slot = store->ReadAt(id, 1);
  ASSERT_TRUE(slot.ok()) << slot.status().ToString();
  ASSERT_TRUE(slot->has_value());
  EXPECT_EQ((*slot)->payload, "mine");
  // A resend would be refused: the slot is occupied (never a duplicate row).
  auto resent = AppendOne(*store, id, "mine", 1);
  ASSERT_EQ(resent.status().code(), StatusCode::kConflict);
  EXPECT_EQ(resent.status().conflict_actual(), 2u);
  EXPECT_EQ(store->GetStreamById(id)->event_count, 1u);
}

// Appending threads while sessions die at random: at commit time (before COMMIT is sent, or
// after it was sent and before its reply is read) and at arbitrary moments (a side session
// terminates a random backend of the store). Every append answered OK is stored exactly once
// at the offset it was given; every append refused definitely (anything but kOutcomeUnknown)
// is not stored at all; an unknown one is stored at most once; nothing else is stored, and
// offsets have no gaps.
TEST_F(PostgresTest, ConcurrentAppendsWhileSessionsDieNeverLoseDuplicateOrInventOne) {
  constexpr int kThreads = 4;
  constexpr int kPerThread = 120;
  std::mutex hook_mu;
  std::mt19937 hook_rng(7);
  SideConn hook_side;
  ASSERT_TRUE(hook_side.ok());
  std::atomic<int> commit_faults{0};
  PostgresStoreOptions o = PgOptions(schema_);
  o.append_workers = 2;
  o.fault_hook = [&](PostgresFaultPoint point, int pid) {
    std::lock_guard lock(hook_mu);
    if (hook_rng() % 12 != 0) return false;
    ++commit_faults;
    // Until the backend is gone, or (after COMMIT) idle or gone: the killer may end it first.
    auto settle = [&](const char* state) {
      for (int i = 0; i < 500; ++i) {
        if (hook_side.Query("SELECT count(*) FROM pg_stat_activity WHERE pid = " +
                            std::to_string(pid) + state) == "0") {
          return;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
    };
    if (point == PostgresFaultPoint::kBeforeCommit) {
      hook_side.Query("SELECT pg_terminate_backend(" + std::to_string(pid) + ")");
      settle("");
      return false;  // COMMIT goes into a dead session
    }
    settle(" AND state <> 'idle'");  // committed; the reply is never read
    return true;
  };
  auto store = OpenNode(o);
  ASSERT_NE(store, nullptr);
  const StreamId ids[2] = {MustCreate(*store, "s0"), MustCreate(*store, "s1")};

  struct Outcome {
    StreamId stream;
    std::string payload;
    Result<AppendResult> result;
  };
  std::vector<Outcome> outcomes[kThreads];
  std::atomic<bool> appending{true};
  std::atomic<int> random_kills{0};
  std::thread killer([&] {
    SideConn side;
    std::mt19937 rng(11);
    while (appending.load() && random_kills.load() < 40) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5 + rng() % 20));
      const auto killed = side.Query(
          "SELECT count(pg_terminate_backend(pid)) FROM (SELECT pid FROM pg_stat_activity WHERE "
          "datname = current_database() AND application_name = 'runnel' ORDER BY random() "
          "LIMIT 1) victims");
      if (killed == "1") ++random_kills;
    }
  });
  std::vector<std::thread> writers;
  for (int t = 0; t < kThreads; ++t) {
    writers.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        const StreamId id = ids[(t + i) % 2];
        std::string payload = "t" + std::to_string(t) + "-" + std::to_string(i);
        AppendRequest req;
        req.stream = id;
        req.now_ms = 1;
        req.records.push_back(AppendRecord{std::nullopt, payload});
        auto r = AppendSync(*store, std::move(req));
        // A session being replaced answers kUnavailable (definite): wait a little, go on.
        if (!r.ok() && r.status().code() == StatusCode::kUnavailable) {
          std::this_thread::sleep_for(std::chrono::milliseconds(2));
        }
        outcomes[t].push_back(Outcome{id, std::move(payload), std::move(r)});
      }
    });
  }
  for (auto& w : writers) w.join();
  appending = false;
  killer.join();

  ASSERT_FALSE(::testing::Test::HasFailure());
  // What is stored, through a fresh node (nothing cached).
  store.reset();
  auto fresh = OpenNode();
  ASSERT_NE(fresh, nullptr);
  std::map<std::string, std::pair<StreamId, uint64_t>> stored;
  for (StreamId id : ids) {
    auto info = fresh->GetStreamById(id);
    ASSERT_TRUE(info.ok()) << info.status().ToString();
    auto rows = fresh->Read(id, 1, 100000, std::numeric_limits<size_t>::max());
    ASSERT_TRUE(rows.ok()) << rows.status().ToString();
    ASSERT_EQ(rows->size(), info->next_offset - 1) << "a gap in stream " << id;
    for (size_t k = 0; k < rows->size(); ++k) {
      ASSERT_EQ((*rows)[k].offset, k + 1);
      EXPECT_TRUE(stored.emplace((*rows)[k].payload, std::make_pair(id, (*rows)[k].offset)).second)
          << (*rows)[k].payload << " stored twice";
    }
  }
  int ok = 0, unknown = 0, refused = 0;
  size_t accounted = 0;
  for (const auto& thread : outcomes) {
    for (const Outcome& out : thread) {
      auto it = stored.find(out.payload);
      if (out.result.ok()) {
        ++ok;
        ASSERT_NE(it, stored.end()) << out.payload << " was acknowledged but is not stored";
        EXPECT_EQ(it->second, std::make_pair(out.stream, out.result->first_offset)) << out.payload;
        ++accounted;
      } else if (out.result.status().code() == StatusCode::kOutcomeUnknown) {
        ++unknown;
        if (it != stored.end()) ++accounted;
      } else {
        ++refused;
        EXPECT_TRUE(it == stored.end()) << out.payload << " was refused ("
                                        << out.result.status().ToString() << ") but is stored";
      }
    }
  }
  EXPECT_EQ(stored.size(), accounted) << "rows no append accounts for";
  RecordProperty("acknowledged", ok);
  RecordProperty("unknown", unknown);
  RecordProperty("refused", refused);
  // The faults happened (the hook and the killer each acted), and appends got through: each
  // fault or kill touches at most one group of appends, so even a slow (sanitized) run
  // acknowledges far more than a quarter of them (about three quarters in a release build).
  EXPECT_GT(commit_faults.load(), 0);
  EXPECT_GT(random_kills.load(), 0);
  EXPECT_GT(unknown, 0);
  EXPECT_GT(ok, kThreads * kPerThread / 4);
}

// An append is acknowledged only once its commit record is in the flushed WAL (read from the
// WAL itself with pg_walinspect), whatever else the server does with its flushes.
TEST_F(PostgresTest, AnAcknowledgedAppendsCommitRecordIsFlushed) {
  SideConn side;
  ASSERT_TRUE(side.ok());
  side.Query("CREATE EXTENSION IF NOT EXISTS pg_walinspect");
  auto store = OpenNode();
  ASSERT_NE(store, nullptr);
  const StreamId id = MustCreate(*store, "s");
  for (int i = 1; i <= 3; ++i) {
    const auto before = side.Query("SELECT pg_current_wal_insert_lsn()");
    ASSERT_TRUE(before.has_value());
    auto appended = AppendOne(*store, id, "r" + std::to_string(i));
    ASSERT_TRUE(appended.ok()) << appended.status().ToString();
    const auto flushed = side.Query("SELECT pg_current_wal_flush_lsn()");
    ASSERT_TRUE(flushed.has_value());
    const auto xid = side.Query(
        "SELECT xmin FROM \"" + schema_ + "\".events WHERE stream_id = " + std::to_string(id) +
        " AND off = " + std::to_string(static_cast<int64_t>(appended->first_offset - kSignBit)));
    ASSERT_TRUE(xid.has_value());
    ASSERT_EQ(side.Query("SELECT '" + *flushed + "'::pg_lsn >= '" + *before + "'::pg_lsn"), "t")
        << "append " << i << " acknowledged while the WAL was flushed only up to before it";
    EXPECT_EQ(
        side.Query("SELECT count(*) FROM pg_get_wal_records_info('" + *before + "', '" + *flushed +
                   "') WHERE resource_manager = 'Transaction' AND "
                   "record_type = 'COMMIT' AND xid = '" +
                   *xid + "'::xid"),
        "1")
        << "append " << i << " (xid " << *xid << ") acknowledged before its commit was flushed";
  }
}

}  // namespace
}  // namespace runnel::testing
