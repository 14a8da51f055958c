// The PostgreSQL store applies an append's guard (runnel::AppendGuard) on both of its paths:
// under the row lock, and on the optimistic one-round-trip path from the row it remembers, whose
// write then requires the attributes the guard was shown. The shared contract suite checks what
// the guard sees; these tests check that guarded appends keep the optimistic path and that a
// change made through another node sends them back under the lock, where the guard sees it.
#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>

#include "postgres/postgres_harness.h"
#include "runnel/postgres_store.h"
#include "store/postgres/postgres_store.h"
#include "store/store_contract.h"  // AppendSync

namespace runnel::testing {
namespace {

// Admits every append and keeps the attributes and tail the last call was shown.
class SeeingGuard : public AppendGuard {
 public:
  Status Admit(const AppendState& state, AppendRequest*) override {
    attributes = std::string(state.attributes);
    next_offset = state.next_offset;
    return Status::OK();
  }
  std::string attributes;
  uint64_t next_offset = 0;
};

class PostgresGuardTest : public ::testing::Test {
 protected:
  void TearDown() override {
    SideConn side;
    if (side.ok()) side.Query("DROP SCHEMA IF EXISTS \"" + schema_ + "\" CASCADE");
  }
  std::unique_ptr<Store> Open() {
    auto store = OpenPostgresStore(PgOptions(schema_));
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    return store.ok() ? std::move(*store) : nullptr;
  }
  static Result<AppendResult> Guarded(Store& store, StreamId id, SeeingGuard* guard) {
    AppendRequest req;
    req.stream = id;
    req.now_ms = 1;
    req.records.push_back(AppendRecord{std::nullopt, "r"});
    req.guard = guard;
    return AppendSync(store, std::move(req));
  }

  const std::string schema_ = FreshSchemaName();
};

TEST_F(PostgresGuardTest, GuardedAppendsKeepTheOptimisticPathUntilAnotherNodeChangesTheRow) {
  auto a = Open();
  auto b = Open();
  ASSERT_TRUE(a && b);
  auto& node_a = dynamic_cast<store::PostgresStore&>(*a);
  StreamSpec spec;
  spec.ns = "global";
  spec.name = "s";
  auto info = a->CreateStream(spec);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  const StreamId id = info->id;
  SeeingGuard guard;
  ASSERT_TRUE(Guarded(*a, id, &guard).ok());  // the locking path; the row is remembered

  const uint64_t optimistic = node_a.OptimisticGroups();
  const uint64_t stale = node_a.StaleGroups();
  for (int i = 0; i < 5; ++i) {
    auto r = Guarded(*a, id, &guard);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->first_offset, static_cast<uint64_t>(i + 2));
    EXPECT_EQ(guard.next_offset, static_cast<uint64_t>(i + 2));  // the remembered tail
  }
  EXPECT_EQ(node_a.OptimisticGroups(), optimistic + 5);
  EXPECT_EQ(node_a.StaleGroups(), stale);

  // Another node changes the attributes: A's next optimistic write finds them changed, and the
  // append is decided again under the row lock, where its guard sees the new ones.
  ASSERT_TRUE(
      b->UpdateStream(id, std::nullopt, "changed", std::string_view(""), std::nullopt).ok());
  auto r = Guarded(*a, id, &guard);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->first_offset, 7u);
  EXPECT_EQ(guard.attributes, "changed");
  EXPECT_EQ(node_a.StaleGroups(), stale + 1);
  EXPECT_EQ(node_a.OptimisticGroups(), optimistic + 5);
  EXPECT_EQ(a->GetStreamById(id)->event_count, 7u);
}

}  // namespace
}  // namespace runnel::testing
