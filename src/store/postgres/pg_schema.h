// The PostgreSQL store's schema and its versioned migrations.
//
// Tables (all in the store's schema; offsets use pg::OffsetToDb, see postgres_store.h):
//   schema_migrations(version, applied_at)         one row per applied migration
//   streams(id bigserial, ns, name, content_type, attributes, max_events, max_age_ms,
//           max_bytes, first_offset, created_at_ms, next_offset, head_offset, retained_bytes,
//           closed, deleted, nkey)                  the catalog; unique (ns, name) among live rows;
//                                                   nkey: the name's natural key, index (ns, nkey)
//   events(stream_id, off, appended_at_ms, key, payload)      PRIMARY KEY (stream_id, off)
//   cursors(stream_id, consumer, off, updated_at_ms)           PRIMARY KEY (stream_id, consumer)
//   producers(stream_id, producer_id, epoch, seq, last_offset) PRIMARY KEY (stream_id, producer_id)
//
// Invariant: a stream's retained events are exactly the offsets [head_offset, next_offset), so
// its event count is next_offset - head_offset (retention and truncation only cut prefixes, and
// the newest record is always kept).
#ifndef RUNNEL_STORE_POSTGRES_PG_SCHEMA_H_
#define RUNNEL_STORE_POSTGRES_PG_SCHEMA_H_

#include <string>

#include "runnel/status.h"
#include "store/postgres/pg_conn.h"

namespace runnel::store::pg {

// The newest schema version this build knows.
int LatestSchemaVersion();

// Creates `schema` if needed and applies every migration newer than the stored version, in one
// transaction under pg_advisory_xact_lock, so nodes starting together apply each exactly once.
// kFailedPrecondition when the database holds a newer schema than this build knows.
Status Migrate(Conn& conn, const std::string& schema);

// Rows one statement of BackfillNaturalKeys updates.
inline constexpr int kBackfillBatch = 1000;

// Writes the natural key of every live stream that has none (streams created before schema
// version 2, or by a node running an older build since), kBackfillBatch rows per statement, each
// statement its own transaction. Run at open, after Migrate.
Status BackfillNaturalKeys(Conn& conn, const std::string& schema);

}  // namespace runnel::store::pg

#endif  // RUNNEL_STORE_POSTGRES_PG_SCHEMA_H_
