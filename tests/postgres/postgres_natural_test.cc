// The PostgreSQL store's natural keys: schema version 2 adds the column and its index, and a
// database made by an older build gets the keys of its streams at open (in bounded batches).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "postgres/postgres_harness.h"
#include "runnel/postgres_store.h"
#include "store/natural_key.h"
#include "store/postgres/pg_schema.h"

namespace runnel::testing {
namespace {

std::string Hex(std::string_view bytes) {
  static const char* kDigits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out.push_back(kDigits[c >> 4]);
    out.push_back(kDigits[c & 15]);
  }
  return out;
}

// A database at schema version 1 (no natural keys) with more streams than one backfill batch:
// opening it migrates to version 2 and fills every live stream's key, and the natural listing
// then pages through all of them in order.
TEST(PostgresNaturalKeys, AnOlderSchemaIsUpgradedAndItsStreamsGetTheirKeys) {
  const std::string schema = FreshSchemaName();
  const std::string q = "\"" + schema + "\".";
  {
    auto store = OpenPostgresStore(PgOptions(schema));
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    StreamSpec spec;
    spec.ns = "global";
    spec.name = "s-1";
    ASSERT_TRUE((*store)->CreateStream(spec).ok());
    spec.name = "gone";
    auto gone = (*store)->CreateStream(spec);
    ASSERT_TRUE(gone.ok());
    ASSERT_TRUE((*store)->DeleteStream(gone->id).ok());
  }
  const int streams = store::pg::kBackfillBatch * 2 + 345;
  SideConn side;
  // Back to version 1: the column (and its index) gone, the migration not recorded.
  side.Query("ALTER TABLE " + q + "streams DROP COLUMN nkey");
  side.Query("DELETE FROM " + q + "schema_migrations WHERE version = 2");
  side.Query("INSERT INTO " + q +
             "streams (ns, name, content_type, attributes, first_offset, created_at_ms, "
             "next_offset, head_offset) SELECT ns, convert_to('s-' || g, 'UTF8'), content_type, "
             "attributes, first_offset, created_at_ms, next_offset, head_offset FROM " +
             q + "streams, generate_series(2, " + std::to_string(streams) +
             ") g WHERE name = 's-1'::bytea");
  EXPECT_EQ(side.Query("SELECT count(*) FROM " + q + "streams WHERE NOT deleted"),
            std::to_string(streams));

  auto store = OpenPostgresStore(PgOptions(schema));
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_EQ(side.Query("SELECT max(version) FROM " + q + "schema_migrations"), "2");
  EXPECT_EQ(side.Query("SELECT count(*) FROM " + q + "streams WHERE nkey IS NULL AND NOT deleted"),
            "0");
  EXPECT_EQ(side.Query("SELECT encode(nkey, 'hex') FROM " + q + "streams WHERE name = 's-77'"),
            Hex(store::NaturalKey("s-77")));
  std::vector<std::string> got;
  std::string after;
  for (int pages = 0; pages < 100; ++pages) {
    auto page = (*store)->ListStreamsNatural("global", "s-", after, 500);
    ASSERT_TRUE(page.ok()) << page.status().ToString();
    for (const auto& info : *page) got.push_back(info.spec.name);
    if (page->size() < 500) break;
    after = page->back().spec.name;
  }
  ASSERT_EQ(got.size(), static_cast<size_t>(streams));
  for (int i = 0; i < streams; ++i)
    ASSERT_EQ(got[static_cast<size_t>(i)], "s-" + std::to_string(i + 1));
  // New streams get their key from CreateStream.
  StreamSpec spec;
  spec.ns = "global";
  spec.name = "s-0";
  ASSERT_TRUE((*store)->CreateStream(spec).ok());
  auto first = (*store)->ListStreamsNatural("global", "s-", "", 1);
  ASSERT_TRUE(first.ok());
  ASSERT_EQ(first->size(), 1u);
  EXPECT_EQ((*first)[0].spec.name, "s-0");
  store->reset();
  side.Query("DROP SCHEMA " + std::string(q.substr(0, q.size() - 1)) + " CASCADE");
}

}  // namespace
}  // namespace runnel::testing
