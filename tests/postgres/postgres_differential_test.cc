// The same random operations against the memory store (the reference implementation) and two
// PostgreSQL store instances on one schema (two nodes), each operation through either node, a
// node now and then closed and opened again: every status, offset, record, catalog row, cursor
// and producer state must be what the memory store says. Then the same over HTTP requests to
// two stream services, one per store instance. Streams are deleted and created again
// under the same names, so a node's cached name → id mapping is exercised against the other
// node's changes. RUNNEL_PG_DIFFERENTIAL_STEPS raises the default 300 steps per seed.
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "postgres/postgres_harness.h"
#include "runnel/clock.h"
#include "runnel/postgres_store.h"
#include "runnel/registry.h"
#include "server/group_service.h"
#include "server/stream_service.h"
#include "support/protocol_differential.h"
#include "support/store_differential.h"

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
  auto mem = NewMemoryStore();
  OpenNode(0);
  OpenNode(1);
  DifferentialSubject subject;
  subject.store = [this](uint64_t pick) -> Store& { return *nodes_[pick % 2]; };
  subject.all = [this] { return std::vector<Store*>{nodes_[0].get(), nodes_[1].get()}; };
  subject.reopen = [this](uint64_t pick) { OpenNode(static_cast<int>(pick % 2)); };
  DifferentialOptions run;
  run.seed = static_cast<uint64_t>(GetParam()) + 100;
  run.steps = steps_env != nullptr ? std::atoi(steps_env) : 300;
  run.clock = &clock_;
  RunDifferential(*mem, subject, run);
}

// The protocol over two nodes on one database against one node on the memory store
// (support/protocol_differential.h): each node's stream service keeps its own caches over its
// own store instance, as two `runnel serve --store postgres://...` processes do.
TEST_P(PostgresDifferentialTest, TwoServingNodesAnswerLikeOneNode) {
  const char* steps_env = std::getenv("RUNNEL_PG_DIFFERENTIAL_STEPS");
  OpenNode(0);
  OpenNode(1);
  server::StreamServiceOptions options;
  options.long_poll_timeout_ms = 10;
  options.max_read_bytes = 2048;
  server::StreamService single(StreamRegistry(NewMemoryStore(), &clock_), options, nullptr);
  server::StreamService node_a(StreamRegistry(std::move(nodes_[0]), &clock_), options, nullptr);
  server::StreamService node_b(StreamRegistry(std::move(nodes_[1]), &clock_), options, nullptr);
  server::GroupService single_groups(&single, nullptr);
  server::GroupService groups_a(&node_a, nullptr);
  server::GroupService groups_b(&node_b, nullptr);
  RunProtocolDifferential({&single, &single_groups}, {{&node_a, &groups_a}, {&node_b, &groups_b}},
                          static_cast<uint32_t>(GetParam()),
                          steps_env != nullptr ? std::atoi(steps_env) : 300);
}

INSTANTIATE_TEST_SUITE_P(Seeds, PostgresDifferentialTest, ::testing::Range(0, 3));

}  // namespace
}  // namespace runnel::testing
