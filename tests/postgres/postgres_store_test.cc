// The shared suites on the PostgreSQL store, plus what only a shared database has: several
// nodes on one schema, the unsigned offset mapping, migrations, and uncertain commits.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <limits>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "core/registry_suites.h"
#include "postgres/postgres_harness.h"
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

namespace {

constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
constexpr uint64_t kSignBit = uint64_t{1} << 63;

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
  EXPECT_EQ(side.Query("SELECT count(*) FROM \"" + schema_ + "\".schema_migrations"), "1");
  nodes.clear();
  auto reopened = OpenNode();
  ASSERT_NE(reopened, nullptr);
  EXPECT_EQ(side.Query("SELECT count(*) FROM \"" + schema_ + "\".schema_migrations"), "1");
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
  ASSERT_TRUE(AppendOne(*a, id, "x").ok());
  ASSERT_TRUE(AppendOne(*a, id, "y").ok());
  {
    std::unique_lock lock(mu);
    // Bounded wait for the notification to cross nodes; not a performance assertion.
    cv.wait_for(lock, std::chrono::seconds(30), [&] { return seen_by_b.size() >= 2; });
    EXPECT_EQ(seen_by_b, (std::vector<uint64_t>{2, 3}));
    // Node A heard each of its own appends exactly once (directly, not again via NOTIFY).
    EXPECT_EQ(seen_by_a, (std::vector<uint64_t>{2, 3}));
    local_calls_on_b = static_cast<int>(seen_by_b.size());
  }
  EXPECT_EQ(local_calls_on_b, 2);
  a->SetTailListener(nullptr);
  b->SetTailListener(nullptr);
}

TEST_F(PostgresTest, TwoInstancesListenerComesBackAfterItsConnectionIsKilled) {
  PostgresStoreOptions o = PgOptions(schema_);
  o.listener_poll = std::chrono::milliseconds(50);
  auto a = OpenNode();
  auto b = OpenNode(o);
  ASSERT_TRUE(a && b);
  const StreamId id = MustCreate(*a, "wake");
  std::mutex mu;
  std::condition_variable cv;
  uint64_t latest = 0;
  b->SetTailListener([&](StreamId s, uint64_t next) {
    std::lock_guard lock(mu);
    if (s == id) latest = std::max(latest, next);
    cv.notify_all();
  });
  SideConn side;
  // Kill every session of this schema's listeners (node A's too), then append on A.
  EXPECT_EQ(side.Query("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                       "WHERE query = 'LISTEN \"" +
                       schema_ + "_tail\"'"),
            "2");
  ASSERT_TRUE(AppendOne(*a, id, "after-the-kill").ok());
  std::unique_lock lock(mu);
  // Either the notification reaches B's new listening session, or B's reconnect wakes every
  // stream; both report the new tail. Bounded wait, not a performance assertion.
  cv.wait_for(lock, std::chrono::seconds(30), [&] { return latest >= 2; });
  EXPECT_EQ(latest, 2u);
  lock.unlock();
  b->SetTailListener(nullptr);
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

}  // namespace
}  // namespace runnel::testing
