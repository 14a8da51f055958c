#include "postgres/postgres_harness.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>

namespace runnel::testing {

const std::string& PgUrl() {
  static const std::string url = [] {
    const char* v = std::getenv("RUNNEL_TEST_PG_URL");
    if (v == nullptr || *v == '\0') {
      std::fprintf(stderr,
                   "runnel_postgres_tests: RUNNEL_TEST_PG_URL is not set. Run the tests through "
                   "ctest, or: scripts/pg-test-cluster --run <this binary>\n");
      std::exit(2);
    }
    return std::string(v);
  }();
  return url;
}

namespace {
// Checked before any test runs, so a missing URL fails the binary loudly even when a filter
// selects no PostgreSQL test.
const bool kUrlChecked = !PgUrl().empty();
}  // namespace

std::string FreshSchemaName() {
  static std::atomic<int> counter{0};
  return "t" + std::to_string(::getpid()) + "_" + std::to_string(counter.fetch_add(1));
}

PostgresStoreOptions PgOptions(const std::string& schema) {
  PostgresStoreOptions o;
  o.conninfo = PgUrl();
  o.schema = schema;
  return o;
}

SideConn::SideConn() : conn_(PQconnectdb(PgUrl().c_str())) {
  PQsetNoticeProcessor(
      conn_, [](void*, const char*) {}, nullptr);
}

SideConn::~SideConn() {
  PQfinish(conn_);
}

std::optional<std::string> SideConn::Query(const std::string& sql) {
  PGresult* r = PQexec(conn_, sql.c_str());
  const ExecStatusType st = PQresultStatus(r);
  std::optional<std::string> out;
  if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
    ADD_FAILURE() << "side SQL failed: " << sql << ": " << PQresultErrorMessage(r);
  } else if (st == PGRES_TUPLES_OK && PQntuples(r) > 0) {
    out = PQgetvalue(r, 0, 0);
  }
  PQclear(r);
  return out;
}

namespace {

class PostgresHarness final : public StoreHarness {
 public:
  PostgresHarness() : schema_(FreshSchemaName()) {}
  ~PostgresHarness() override {
    SideConn side;
    if (side.ok()) side.Query("DROP SCHEMA IF EXISTS \"" + schema_ + "\" CASCADE");
  }
  Result<std::unique_ptr<Store>> Open(Clock* clock) override {
    PostgresStoreOptions o = PgOptions(schema_);
    o.clock = clock;
    return OpenPostgresStore(o);
  }

 private:
  std::string schema_;
};

}  // namespace

StoreParam PostgresStoreParam() {
  (void)kUrlChecked;
  return {"Postgres", [] { return std::make_unique<PostgresHarness>(); }};
}

}  // namespace runnel::testing
