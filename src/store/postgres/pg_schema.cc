#include "store/postgres/pg_schema.h"

#include <optional>
#include <string_view>
#include <vector>

#include "store/natural_key.h"

namespace runnel::store::pg {
namespace {

// Migration i (1-based) is kMigrations[i - 1]. Never edit a released migration; append one.
constexpr std::string_view kMigrations[] = {
    // 1: the initial schema.
    R"sql(
CREATE TABLE streams (
  id             bigserial PRIMARY KEY,
  ns             bytea   NOT NULL,
  name           bytea   NOT NULL,
  content_type   bytea   NOT NULL,
  attributes     bytea   NOT NULL,
  max_events     bigint,
  max_age_ms     bigint,
  max_bytes      bigint,
  first_offset   bigint  NOT NULL,
  created_at_ms  bigint  NOT NULL,
  next_offset    bigint  NOT NULL,
  head_offset    bigint  NOT NULL,
  retained_bytes bigint  NOT NULL DEFAULT 0,
  closed         boolean NOT NULL DEFAULT false,
  deleted        boolean NOT NULL DEFAULT false
);
CREATE UNIQUE INDEX streams_live_name ON streams (ns, name) WHERE NOT deleted;
CREATE TABLE events (
  stream_id      bigint NOT NULL,
  off            bigint NOT NULL,
  appended_at_ms bigint NOT NULL,
  key            bytea,
  payload        bytea  NOT NULL,
  PRIMARY KEY (stream_id, off)
);
CREATE TABLE cursors (
  stream_id     bigint NOT NULL,
  consumer      bytea  NOT NULL,
  off           bigint NOT NULL,
  updated_at_ms bigint NOT NULL,
  PRIMARY KEY (stream_id, consumer)
);
CREATE TABLE producers (
  stream_id   bigint NOT NULL,
  producer_id bytea  NOT NULL,
  epoch       bigint NOT NULL,
  seq         bigint NOT NULL,
  last_offset bigint NOT NULL,
  PRIMARY KEY (stream_id, producer_id)
);
)sql",
    // 2: the natural key of each live stream's name (store/natural_key.h), for listing in natural
    // order. CreateStream writes it; BackfillNaturalKeys fills it for rows made before.
    R"sql(
ALTER TABLE streams ADD COLUMN nkey bytea;
CREATE INDEX streams_live_nkey ON streams (ns, nkey) WHERE NOT deleted;
)sql",
};

}  // namespace

int LatestSchemaVersion() {
  return static_cast<int>(std::size(kMigrations));
}

Status Migrate(Conn& conn, const std::string& schema) {
  const std::string q = QuoteIdent(schema);
  auto run = [&]() -> Status {
    RUNNEL_RETURN_IF_ERROR(conn.Exec("BEGIN").status());
    RUNNEL_RETURN_IF_ERROR(conn.Exec("SELECT pg_advisory_xact_lock(hashtext($1))",
                                     Params().Text("runnel.migrate." + schema))
                               .status());
    RUNNEL_RETURN_IF_ERROR(conn.Exec("CREATE SCHEMA IF NOT EXISTS " + q +
                                     "; CREATE TABLE IF NOT EXISTS " + q +
                                     ".schema_migrations (version integer PRIMARY KEY, "
                                     "applied_at timestamptz NOT NULL DEFAULT now())")
                               .status());
    RUNNEL_ASSIGN_OR_RETURN(Rows v, conn.Exec("SELECT coalesce(max(version), 0)::bigint FROM " + q +
                                              ".schema_migrations"));
    const int64_t current = v.Int8(0, 0);
    if (current > LatestSchemaVersion()) {
      return Status::FailedPrecondition("postgres: schema '" + schema + "' is at version " +
                                        std::to_string(current) + ", newer than this runnel (" +
                                        std::to_string(LatestSchemaVersion()) + ")");
    }
    for (int64_t next = current + 1; next <= LatestSchemaVersion(); ++next) {
      RUNNEL_RETURN_IF_ERROR(conn.Exec("SET LOCAL search_path = " + q + ";" +
                                       std::string(kMigrations[static_cast<size_t>(next - 1)]))
                                 .status());
      RUNNEL_RETURN_IF_ERROR(
          conn.Exec("INSERT INTO " + q + ".schema_migrations (version) VALUES ($1::bigint)",
                    Params().Int8(next))
              .status());
    }
    return conn.Exec("COMMIT").status();
  };
  Status s = run();
  if (!s.ok() && !conn.broken()) {
    (void)conn.Exec("ROLLBACK");
  }
  return s.ok() ? s : s.Annotate("migrating schema '" + schema + "'");
}

Status BackfillNaturalKeys(Conn& conn, const std::string& schema) {
  const std::string q = QuoteIdent(schema);
  for (;;) {
    RUNNEL_ASSIGN_OR_RETURN(
        Rows rows, conn.Exec("SELECT id, name FROM " + q +
                                 ".streams WHERE nkey IS NULL AND NOT deleted LIMIT $1::bigint",
                             Params().Int8(kBackfillBatch)));
    if (rows.size() == 0) return Status::OK();
    std::vector<int64_t> ids;
    std::vector<std::string> keys;
    for (int r = 0; r < rows.size(); ++r) {
      ids.push_back(rows.Int8(r, 0));
      keys.push_back(NaturalKey(rows.Bytes(r, 1)));
    }
    std::vector<std::optional<std::string_view>> key_views(keys.begin(), keys.end());
    RUNNEL_RETURN_IF_ERROR(
        conn.Exec("UPDATE " + q +
                      ".streams s SET nkey = v.nkey FROM unnest($1::bigint[], $2::bytea[]) "
                      "AS v(id, nkey) WHERE s.id = v.id",
                  Params().Int8Array(ids).ByteaArray(key_views))
            .status()
            .Annotate("filling natural keys of schema '" + schema + "'"));
    if (rows.size() < kBackfillBatch) return Status::OK();
  }
}

}  // namespace runnel::store::pg
