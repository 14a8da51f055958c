// The same random operations against the memory store (the reference implementation) and two
// PostgreSQL store instances on one schema (two nodes), each operation through either node, a
// node now and then closed and opened again: every status, offset, record, catalog row, cursor
// and producer state must be what the memory store says. Streams are deleted and created again
// under the same names, so a node's cached name → id mapping is exercised against the other
// node's changes. RUNNEL_PG_DIFFERENTIAL_STEPS raises the default 300 steps per seed.
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "postgres/postgres_harness.h"
#include "runnel/clock.h"
#include "runnel/postgres_store.h"
#include "store/store_contract.h"
#include "support/store_show.h"

namespace runnel::testing {
namespace {

class PostgresDifferentialTest : public ::testing::TestWithParam<int> {
 protected:
  void TearDown() override {
    nodes_[0].reset();
    nodes_[1].reset();
    SideConn side;
    if (side.ok()) side.Query("DROP SCHEMA IF EXISTS \"" + schema_ + "\" CASCADE");
  }

  void OpenNode(int n) {
    nodes_[n].reset();
    PostgresStoreOptions options = PgOptions(schema_);
    options.clock = &clock_;
    auto opened = OpenPostgresStore(options);
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    nodes_[n] = std::move(*opened);
  }

  const std::string schema_ = FreshSchemaName();
  ManualClock clock_{10'000};
  std::unique_ptr<Store> nodes_[2];
};

TEST_P(PostgresDifferentialTest, TwoNodesMatchTheMemoryStore) {
  const char* steps_env = std::getenv("RUNNEL_PG_DIFFERENTIAL_STEPS");
  const int steps = steps_env != nullptr ? std::atoi(steps_env) : 300;
  auto mem = NewMemoryStore();
  OpenNode(0);
  OpenNode(1);
  std::mt19937_64 rng(static_cast<uint64_t>(GetParam()) * 7919 + 3);
  auto pick = [&](uint64_t n) { return rng() % n; };
  const std::vector<std::string> names = {"a", "b", "c"};
  for (int step = 0; step < steps; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    clock_.Advance(pick(50));
    const uint64_t now = clock_.NowMs();
    Store& pg = *nodes_[pick(2)];
    const std::string name = names[pick(names.size())];
    auto mem_info = mem->GetStream("global", name);
    auto pg_info = pg.GetStream("global", name);
    ASSERT_EQ(Show(mem_info, /*with_id=*/false), Show(pg_info, /*with_id=*/false));
    const StreamId mid = mem_info.ok() ? mem_info->id : 999'999;
    const StreamId pid = pg_info.ok() ? pg_info->id : 999'999;
    const uint64_t dice = pick(100);
    if (dice < 8) {
      StreamSpec spec;
      spec.ns = "global";
      spec.name = name;
      spec.content_type = "text/plain";
      spec.attributes = "attr" + std::to_string(step);
      if (pick(3) == 0) spec.retention.max_events = 1 + pick(6);
      if (pick(4) == 0) spec.retention.max_bytes = 1 + pick(40);
      if (pick(4) == 0) spec.retention.max_age_ms = pick(200);
      if (pick(5) == 0) spec.first_offset = 1 + pick(1000);
      ASSERT_EQ(Show(mem->CreateStream(spec), /*with_id=*/false),
                Show(pg.CreateStream(spec), /*with_id=*/false));
    } else if (dice < 55) {
      AppendRequest req;
      req.now_ms = now;
      const uint64_t n = pick(5);
      for (uint64_t i = 0; i < n; ++i) {
        AppendRecord r;
        if (pick(3) == 0) r.key = "k" + std::to_string(pick(10));
        r.payload = std::string(pick(300), static_cast<char>('a' + pick(26)));
        req.records.push_back(std::move(r));
      }
      if (pick(4) == 0 && mem_info.ok()) req.expected_offset = mem_info->next_offset + pick(2);
      if (pick(5) == 0) {
        req.producer = ProducerState{"p" + std::to_string(pick(2)), pick(3), pick(100), 0};
      }
      req.close = pick(90) == 0;
      AppendRequest copy = req;
      req.stream = mid;
      copy.stream = pid;
      ASSERT_EQ(Show(AppendSync(*mem, std::move(req))), Show(AppendSync(pg, std::move(copy))));
      ASSERT_EQ(ShowProducer(*mem, mid, "p0"), ShowProducer(pg, pid, "p0"));
      ASSERT_EQ(ShowProducer(*mem, mid, "p1"), ShowProducer(*nodes_[0], pid, "p1"));
    } else if (dice < 68) {
      const uint64_t from = pick(mem_info.ok() ? mem_info->next_offset + 2 : 5);
      const size_t limit = pick(12);
      const size_t max_bytes = pick(3) == 0 ? pick(800) : (1u << 20);
      ASSERT_EQ(Show(mem->Read(mid, from, limit, max_bytes)),
                Show(pg.Read(pid, from, limit, max_bytes)));
      auto a = mem->ReadAt(mid, from);
      auto b = pg.ReadAt(pid, from);
      ASSERT_EQ(a.ok(), b.ok());
      if (a.ok()) {
        ASSERT_EQ(a->has_value(), b->has_value());
        if (a->has_value()) {
          ASSERT_EQ((*a)->payload, (*b)->payload);
        }
      }
    } else if (dice < 74) {
      const uint64_t through = pick(mem_info.ok() ? mem_info->next_offset + 2 : 5);
      const bool respect = pick(2) == 0;
      ASSERT_EQ(Show(mem->TruncatePrefix(mid, through, respect)),
                Show(pg.TruncatePrefix(pid, through, respect)));
    } else if (dice < 84) {
      const std::string consumer = "g" + std::to_string(pick(3));
      const uint64_t offset = pick(mem_info.ok() ? mem_info->next_offset + 1 : 5);
      ASSERT_EQ(Show(mem->CommitCursor(mid, consumer, offset, now)),
                Show(pg.CommitCursor(pid, consumer, offset, now)));
    } else if (dice < 89) {
      StreamRetention r;
      if (pick(2) == 0) r.max_events = 1 + pick(8);
      if (pick(3) == 0) r.max_bytes = 1 + pick(100);
      ASSERT_EQ(mem->UpdateStream(mid, r, "upd" + std::to_string(step), std::nullopt).code(),
                pg.UpdateStream(pid, r, "upd" + std::to_string(step), std::nullopt).code());
    } else if (dice < 95) {
      ASSERT_EQ(mem->DeleteStream(mid).code(), pg.DeleteStream(pid).code());
    } else {
      OpenNode(static_cast<int>(pick(2)));
    }
    // Both nodes see the same stream, its records and its cursors.
    auto after = mem->GetStream("global", name);
    for (auto& node : nodes_) {
      auto seen = node->GetStream("global", name);
      ASSERT_EQ(Show(after, /*with_id=*/false), Show(seen, /*with_id=*/false));
      if (after.ok() && seen.ok()) {
        ASSERT_EQ(Show(mem->Read(after->id, 0, 1000, 1 << 30)),
                  Show(node->Read(seen->id, 0, 1000, 1 << 30)));
        ASSERT_EQ(ShowCursors(*mem, after->id), ShowCursors(*node, seen->id));
      }
    }
  }
  auto ml = mem->ListStreams("global", "", 100);
  auto pl = nodes_[1]->ListStreams("global", "", 100);
  ASSERT_TRUE(ml.ok() && pl.ok());
  ASSERT_EQ(ml->size(), pl->size());
  for (size_t i = 0; i < ml->size(); ++i) {
    EXPECT_EQ((*ml)[i].spec.name, (*pl)[i].spec.name);
    EXPECT_EQ(Show((*ml)[i], /*with_id=*/false), Show((*pl)[i], /*with_id=*/false));
  }
}

INSTANTIATE_TEST_SUITE_P(Seeds, PostgresDifferentialTest, ::testing::Range(0, 3));

}  // namespace
}  // namespace runnel::testing
