// The PostgreSQL store: several stateless runnel nodes share one PostgreSQL database.
//
// Records live in a table keyed by (stream id, offset); that primary key is the seed-003
// "occupied sequence" rule, enforced by the database across nodes. Every node may append to
// every stream: an append locks its stream's catalog row, so appends to one stream are
// linearizable across nodes, and two nodes never commit the same offset.
//
// Durability: an append's callback reports success only after PostgreSQL acknowledged the
// COMMIT of the transaction holding the records, the producer state, the tail movement and the
// retention cut; the records then survive whatever the server's own settings make a committed
// transaction survive (with the default synchronous_commit=on and fsync=on: a crash of the
// database host). Cursor commits, truncations and catalog changes are durable when they return.
// A connection lost after COMMIT was sent is reported as kOutcomeUnknown and never retried;
// settle it by reading the exact slot with Store::ReadAt.
//
// Offsets: the API's offsets are unsigned 64-bit, PostgreSQL's bigint is signed. Every offset
// column (events.off, streams.next_offset, streams.head_offset, cursors.off,
// producers.last_offset) stores `offset - 2^63` (the sign bit flipped), which keeps the order, so
// the whole range 1 .. 2^64-1 round-trips and SQL comparisons (GREATEST, <) stay correct.
// Timestamps, epochs, sequence numbers and retention caps are stored as the same 64 bits
// reinterpreted as bigint (they are only stored and compared in C++).
//
// Tail notification: right after each append transaction commits, the same connection sends
// NOTIFY on one channel per schema (`<schema>_tail`) with payload "<stream id>:<next offset>",
// in a separate small transaction (so notifying never serializes the append commits). A
// dedicated listening connection on every node calls the store's TailListener for appends made
// by other nodes; appends made by this store call the listener directly, before their callback.
// Notifications are hints: one can be lost when a connection dies between the two commits, and
// a listener that lost its connection wakes every stream once it is back. Under them runs a slow
// safety-net poll (PostgresStoreOptions::safety_poll) over the tails of the streams readers wait
// on, so no lost notification strands a reader.
//
// Connections: an idle pooled connection (or a worker's) that the server closed meanwhile (a
// restart, an idle timeout) is noticed before use and replaced, so after a database restart the
// first requests do not fail on stale sessions. While the database is unreachable every call
// fails fast with kUnavailable.
//
// Thread-safety: every method may be called from any thread. Append never blocks on the
// database: it queues the request for a pool of worker threads, each with its own connection,
// which commit many queued appends per transaction (group commit) and then run the callbacks.
// The other methods run on the calling thread with a connection from a small pool.
#ifndef RUNNEL_POSTGRES_STORE_H_
#define RUNNEL_POSTGRES_STORE_H_

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "runnel/clock.h"
#include "runnel/status.h"
#include "runnel/store.h"

namespace runnel {

// Where a fault-injection hook runs in an append transaction (tests only).
enum class PostgresFaultPoint {
  // The group's transaction is about to be committed: its write and COMMIT are about to be
  // sent (on the optimistic path, BEGIN and the write travel in the same round trip).
  kBeforeCommit,
  // COMMIT was sent; its reply has not been read yet.
  kAfterCommitSent,
};

struct PostgresStoreOptions {
  // A libpq connection string or URL: "postgresql://user@127.0.0.1:5432/db?sslmode=disable".
  std::string conninfo;
  // The schema that holds runnel's tables; created on first use. Letters, digits and '_' only,
  // at most 40 characters. Nodes that share a database and a schema share their streams.
  std::string schema = "runnel";
  // Worker threads (one connection each) that commit appends; a stream's appends always go to
  // the same one. The database's cost is mostly per transaction, so fewer workers build larger
  // groups: with 64 clients over 16 streams, 1 worker committed 65k rows/s, 2 workers 60k, 4
  // 44k and 8 31k (bench/pg_append_bench, side by side on a 2-core host). More workers only
  // help when single transactions are slow (large batches, a distant database).
  size_t append_workers = 1;
  // Connections shared by the synchronous calls (reads, catalog, cursors).
  size_t query_connections = 4;
  // Most appends and most records committed in one transaction.
  size_t max_group_appends = 512;
  size_t max_group_records = 10000;
  // While other nodes append to the same schema (this node heard their notifications within the
  // last second), a worker waits up to this many microseconds (at most half its recent mean
  // commit round trip) before taking its next group, until as many appends are queued as were
  // in flight during its previous transaction; the wait ends early after group_arrival_gap_us
  // without a new arrival. Sharing the database, each node holds fewer clients, and this keeps
  // its transactions from splitting into two half-size groups (three nodes over 16 shared
  // streams, bench/pg_bench.sh: 20.9k-22.5k -> 24.4k-25.3k appends/s). A single node never
  // waits: there the split groups let HTTP work overlap the database's, and the wait cost 20%.
  // 0 disables the wait.
  uint32_t group_wait_us = 1000;
  uint32_t group_arrival_gap_us = 50;
  // While other nodes append (as above), a worker whose queued appends can take the
  // one-round-trip path first locks their streams' catalog rows, with those of its previous
  // groups (at most prelock_max_streams), and only takes its group once the locks are granted.
  // Nodes sharing streams queue on those row locks anyway; this way the appends that arrive
  // during the wait join the transaction instead of waiting for the next one. Costs one round
  // trip per transaction; 0 turns it off.
  size_t prelock_max_streams = 64;
  // Other nodes learn of new tails by NOTIFY, sent by one notifier per node in a transaction of
  // its own: at most one per notify_interval, carrying every tail committed meanwhile (one per
  // append group cost the database a third of its CPU per append). Readers on other nodes see
  // an append up to this much later; readers on this node are woken at once.
  std::chrono::microseconds notify_interval{2000};
  // Tail notifications only matter to nodes with waiting readers. Each node announces on the
  // channel, this often, whether it has any (Store::SetWatchedStreams is not empty) and whether
  // it appends; at once when a reader starts waiting (Store::ReaderWaiting) or it starts
  // appending. A node sends tail notifications only while another node announced readers within
  // the last three intervals; when one appears, it sends the tails it skipped in the last two
  // seconds, so a reader that started waiting meanwhile still wakes. Without readers elsewhere a
  // node sends no notifying transactions at all (they cost the database about a third of its
  // CPU per append: 36 vs 24 us, one node, 64 HTTP clients).
  std::chrono::milliseconds announce_interval{500};
  // Bound on establishing a connection, and on any one statement (server-side
  // statement_timeout; a statement cut by it fails definitely, before COMMIT).
  std::chrono::milliseconds connect_timeout{5000};
  std::chrono::milliseconds statement_timeout{30000};
  // The longest a node waits for any reply of the database before it gives the session up
  // (kUnavailable; an append's COMMIT then reads kOutcomeUnknown): a database host that stops
  // answering without closing connections (stopped, frozen, partitioned without a reset) is
  // not waited for forever. Longer than statement_timeout, so the database's own timeout
  // normally ends a slow statement first. 0 waits without a bound.
  std::chrono::milliseconds reply_timeout{35000};
  // How often the listener connection is checked and re-established when lost; a lost listener
  // also wakes every stream once it is back (notifications may have been missed meanwhile).
  std::chrono::milliseconds listener_poll{500};
  // The safety net under LISTEN/NOTIFY: this often the listener re-reads the tails of the
  // streams readers wait on (Store::SetWatchedStreams) and wakes those that moved, so a lost
  // notification delays a reader by at most about this long. 0 turns the poll off.
  std::chrono::milliseconds safety_poll{1500};
  // Not owned; null means Clock::Real(). Used for nothing that affects stored data (appends carry
  // their own now_ms); reserved for expiry.
  Clock* clock = nullptr;
  // Tests only: called on an append worker at `point` with the backend's process id. Returning
  // true severs the worker's connection right there (as a network failure would).
  std::function<bool(PostgresFaultPoint point, int backend_pid)> fault_hook;
};

// Connects, applies the schema migrations (under a transaction-scoped advisory lock, so nodes
// starting together do not race) and starts the worker and listener threads. kUnavailable when
// the database cannot be reached, kInvalidArgument for bad options.
Result<std::unique_ptr<Store>> OpenPostgresStore(const PostgresStoreOptions& options);

}  // namespace runnel

#endif  // RUNNEL_POSTGRES_STORE_H_
