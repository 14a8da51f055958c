// The store of runnel_channel_postgres_tests: PostgreSQL, a fresh schema per test on the
// cluster scripts/pg-test-cluster starts (RUNNEL_TEST_PG_URL).
#include "channel/channel_suites.h"
#include "postgres/postgres_harness.h"

namespace runnel::testing {

std::vector<StoreParam> ChannelStoreParams() {
  return {PostgresStoreParam()};
}

}  // namespace runnel::testing
