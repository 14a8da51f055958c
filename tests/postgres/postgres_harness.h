// Test support for the PostgreSQL store: a StoreParam whose harness gives every test a fresh
// schema on the cluster named by RUNNEL_TEST_PG_URL, and a small libpq helper for tests that
// inspect or disturb the database from the side.
#ifndef RUNNEL_TESTS_POSTGRES_POSTGRES_HARNESS_H_
#define RUNNEL_TESTS_POSTGRES_POSTGRES_HARNESS_H_

#include <libpq-fe.h>

#include <memory>
#include <optional>
#include <string>

#include "runnel/postgres_store.h"
#include "support/store_harness.h"

namespace runnel::testing {

// The cluster URL from RUNNEL_TEST_PG_URL. Exits the process with a message when it is unset:
// these tests never skip.
const std::string& PgUrl();

// A schema name no other test in this process (or another process) uses.
std::string FreshSchemaName();

// Options for a store on `schema` of the test cluster.
PostgresStoreOptions PgOptions(const std::string& schema);

// Fresh schema per harness; the schema is dropped when the harness is destroyed.
StoreParam PostgresStoreParam();

// A plain libpq connection for side-channel SQL in tests.
class SideConn {
 public:
  SideConn();
  ~SideConn();
  bool ok() const { return PQstatus(conn_) == CONNECTION_OK; }
  // Runs `sql` (text protocol). Returns the first column of the first row, or nullopt when the
  // statement returned no rows; an error fails the current test.
  std::optional<std::string> Query(const std::string& sql);

 private:
  PGconn* conn_;
};

}  // namespace runnel::testing

#endif  // RUNNEL_TESTS_POSTGRES_POSTGRES_HARNESS_H_
