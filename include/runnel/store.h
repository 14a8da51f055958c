// The store contract: the one narrow interface under the registry where durability lives.
//
// Three implementations keep it (memory, the embedded log, PostgreSQL) and all of them pass the
// shared contract suite in tests/store/store_contract_test.cc. Nothing here knows about tenants,
// authorization, consumer groups or HTTP: a stream is named by an opaque namespace string plus
// a name, and a cursor is a named monotonic offset.
//
// Offsets are public and 1-based. next_offset starts at 1 (or StreamSpec::first_offset) and
// never decreases, not even when retention or a truncate removes every record.
//
// Durability: when an Append's callback reports success, the records, the producer state and the
// tail movement are durable to the degree the store declares in Durability(). They become
// visible to Read at the same moment, never before. A store reports an append either as
// committed (OK), definitely refused (kConflict, kFailedPrecondition, kInvalidArgument,
// kOutOfRange, kNotFound, ...) or as kOutcomeUnknown when it cannot tell; kOutcomeUnknown is
// never used for a definite refusal.
//
// Thread-safety: every method may be called concurrently from any thread. Appends to one stream
// are linearizable (SEMANTICS A8). Callbacks may run on the calling thread (before Append
// returns) or on a store thread; they must not block for long.
#ifndef RUNNEL_STORE_H_
#define RUNNEL_STORE_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runnel/clock.h"
#include "runnel/status.h"
#include "runnel/types.h"

namespace runnel {

using StreamId = uint64_t;

// The catalog row of a stream, as given at create.
struct StreamSpec {
  // Opaque namespace; the registry passes StreamScope::Label().
  std::string ns;
  // Opaque, non-empty byte string.
  std::string name;
  StreamRetention retention;
  std::string content_type;
  // The offset the first append gets. Normally 1; higher for imports and forks.
  uint64_t first_offset = 1;
  uint64_t created_at_ms = 0;
  // Opaque bytes owned by the layer above (protocol metadata such as TTL or fork origin).
  // Stored and returned unchanged.
  std::string attributes;
};

// A snapshot of one stream's catalog row and extent.
struct StreamInfo {
  StreamId id = 0;
  StreamSpec spec;
  uint64_t head_offset = 0;  // 0 when empty
  uint64_t tail_offset = 0;  // 0 when empty
  uint64_t next_offset = 1;
  uint64_t event_count = 0;
  uint64_t retained_bytes = 0;
  bool closed = false;

  // Whether a record was ever appended (retention may have removed it since). A channel adopts
  // only a stream that never held one.
  bool EverHeldARecord() const { return head_offset != 0 || next_offset > spec.first_offset; }
};

struct AppendRecord {
  std::optional<std::string> key;
  std::string payload;
};

// An idempotent producer's state on one stream (Durable Streams Producer-Id/Epoch/Seq). Written
// in the same atomic commit as the records it describes.
struct ProducerState {
  std::string producer_id;
  uint64_t epoch = 0;
  uint64_t seq = 0;
  // The last offset written by this producer's last accepted append.
  uint64_t last_offset = 0;
};

struct AppendRequest;

// The stream as an append finds it inside the store's atomic step, for an AppendGuard: after the
// appends committed or queued before it, as the append itself would see them.
struct AppendState {
  uint64_t next_offset = 1;
  bool closed = false;
  std::string_view attributes;
  // The stored (epoch, seq) of the request's producer, when the request names one and the
  // stream holds a state for it.
  std::optional<std::pair<uint64_t, uint64_t>> producer;
};

// Rules of the layer above that decide an append from the stream's current state, applied by
// the store inside the append's atomic step (the memory store's stream lock, the log writer's
// view of the group being built, PostgreSQL's row lock): whatever the guard checks cannot change
// before the append commits, so no caller checks anything ahead of the store.
//
// Admit is called once the store has found the stream, before the store's own conditions. It
// returns OK to go on (having completed `request` as it needs: the attributes to store, say), or
// a refusal: nothing is written and the append ends with that status. It may be called more than
// once for one append (a store that retries its atomic step calls it again, and only the last
// call counts; a retry that finds the stream gone ends with kNotFound without calling it), so
// its answer must depend only on `state` and on what the guard was made with. A refusal is
// reported as the append's result unchanged.
// It runs with the store's locks held, on any thread: it must be quick and must not call the
// store.
class AppendGuard {
 public:
  virtual ~AppendGuard() = default;
  virtual Status Admit(const AppendState& state, AppendRequest* request) = 0;
};

struct AppendRequest {
  StreamId stream = 0;
  // The batch, committed atomically at consecutive offsets. May be empty only when close is set.
  std::vector<AppendRecord> records;
  // The timestamp stored with every record, and the "now" that age retention uses.
  uint64_t now_ms = 0;
  // When set, the batch must start at exactly this offset; otherwise the append is refused with
  // kConflict carrying (expected, actual next offset) and nothing is written.
  std::optional<uint64_t> expected_offset;
  // When set, stored atomically with the records (last_offset filled in by the store), and
  // compared-and-set: an (epoch, seq) not newer than the stored one is refused, nothing
  // written, with kAlreadyExists (same epoch) or kPermissionDenied (an older epoch).
  std::optional<ProducerState> producer;
  // Close the stream after these records, atomically with them.
  bool close = false;
  // When set, replaces the stream's attributes atomically with the records (the layer above
  // keeps per-append protocol state there, such as the last Stream-Seq).
  std::optional<std::string> attributes;
  // When set, the append is refused with kConflict (nothing written) unless the stream's
  // attributes are exactly these when it commits: the compare half of the layer above's
  // read-modify-write of `attributes`, which processes sharing a store would otherwise race.
  std::optional<std::string> expected_attributes;
  // When set, decides the append inside the store's atomic step (see AppendGuard). Owned by the
  // caller, and kept alive until the append's callback has run.
  AppendGuard* guard = nullptr;
};

struct AppendResult {
  // Offsets of the first and last appended record; both 0 for an empty (close-only) batch.
  uint64_t first_offset = 0;
  uint64_t last_offset = 0;
  // The stream's next offset after the append.
  uint64_t next_offset = 0;
};

struct StoredRecord {
  uint64_t offset = 0;
  uint64_t appended_at_ms = 0;
  std::optional<std::string> key;
  std::string payload;
};

struct CursorState {
  std::string consumer;
  uint64_t offset = 0;
  uint64_t updated_at_ms = 0;
};

// How a store commits writes, for monitoring (/metrics). A "sync" is one durable commit of a
// group of writes, before any of the group is acknowledged: for the log store one fdatasync of
// the log (in fsync mode, one per group commit), for the PostgreSQL store one committed append
// transaction. Stores without group commits leave `available` false.
struct StoreCommitStats {
  // Upper bounds (inclusive) of the records-per-sync histogram buckets.
  static constexpr std::array<uint64_t, 11> kRecordBuckets = {1,  2,   4,   8,   16,  32,
                                                              64, 128, 256, 512, 1024};
  bool available = false;
  uint64_t syncs = 0;        // log syncs that made writes durable
  uint64_t records = 0;      // appended records those syncs made durable
  uint64_t bytes = 0;        // log bytes those syncs made durable
  uint64_t sync_micros = 0;  // time spent inside those syncs
  // records_per_sync[i]: syncs that made more than kRecordBuckets[i-1] and at most
  // kRecordBuckets[i] records durable; the extra last entry counts the syncs above the last
  // bound. (Not cumulative.)
  std::array<uint64_t, kRecordBuckets.size() + 1> records_per_sync{};
  // Log store: times the writer held commits back for a checkpoint still being written in the
  // background (appends had outrun it by four checkpoint intervals), and how long in all.
  uint64_t checkpoint_waits = 0;
  uint64_t checkpoint_wait_micros = 0;
  // Log store: checkpoints whose contents the writer built, and the time those builds took in
  // all. Commits wait while the writer builds (80-130 ms for a million idle streams).
  uint64_t checkpoints = 0;
  uint64_t checkpoint_build_micros = 0;
  // Log store: segments the writer moved to (the first one at open included), those it had to
  // create and zero itself because the preparer thread had not finished one ahead of it, and the
  // time all rolls took. Commits wait while the writer rolls.
  uint64_t segment_rolls = 0;
  uint64_t segment_rolls_unprepared = 0;
  uint64_t segment_roll_micros = 0;
  // Log store: bytes of sealed segments the background scrub verified, the passes it finished
  // over all of them, the damaged frames it found (each counted once), and reads that failed on
  // damaged records.
  uint64_t scrubbed_bytes = 0;
  uint64_t scrub_passes = 0;
  uint64_t damaged_frames = 0;
  uint64_t unreadable_reads = 0;
  // Log store: bytes of live frames the cleaner copied out of old segments (its cost in log
  // writes), reclamations of a full disk that deleted segments, and the times the space
  // reserve was given up for one.
  uint64_t cleaner_bytes = 0;
  uint64_t space_reclaims = 0;
  uint64_t reserve_draws = 0;

  // Counts one sync that made `synced_records` records (`synced_bytes` bytes) durable in
  // `micros` microseconds.
  void CountSync(uint64_t synced_records, uint64_t synced_bytes, uint64_t micros) {
    ++syncs;
    records += synced_records;
    bytes += synced_bytes;
    sync_micros += micros;
    size_t b = 0;
    while (b < kRecordBuckets.size() && synced_records > kRecordBuckets[b]) ++b;
    ++records_per_sync[b];
  }
};

using AppendCallback = std::function<void(Result<AppendResult>)>;
// Called after records become visible and before the append's callback runs: (stream, new
// next_offset). So once an append is acknowledged, its wake-up has been delivered. May run on any
// thread; must not block, and must not call back into the store while holding locks of its own
// that an appender could need.
using TailListener = std::function<void(StreamId, uint64_t)>;
// Lists the streams that have waiting readers right now (the tail listener's audience).
using WatchedStreams = std::function<std::vector<StreamId>()>;

class Store {
 public:
  virtual ~Store() = default;

  // "memory", "log", "postgres".
  virtual std::string_view Name() const = 0;
  // What an acknowledged append survives, in one sentence, e.g. "process-local: lost on exit".
  virtual std::string Durability() const = 0;

  // Catalog. CreateStream refuses an existing (ns, name) with kAlreadyExists and leaves it
  // unchanged; a zero retention cap or an empty name gives kInvalidArgument.
  virtual Result<StreamInfo> CreateStream(const StreamSpec& spec) = 0;
  // kNotFound when absent (deleted streams are absent).
  virtual Result<StreamInfo> GetStream(std::string_view ns, std::string_view name) = 0;
  virtual Result<StreamInfo> GetStreamById(StreamId id) = 0;
  // Streams of `ns` with name > start_after, ascending by name, at most `limit` of them.
  virtual Result<std::vector<StreamInfo>> ListStreams(std::string_view ns,
                                                      std::string_view start_after,
                                                      size_t limit) = 0;
  // Streams of `ns` whose names start with `prefix` and sort after `start_after`, ascending,
  // at most `limit`; shorter only when no more match. Starts at the prefix (the exact name
  // first: a listing after it cannot return it), so it costs the matches, not every name
  // before them. Built on GetStream and ListStreams.
  Result<std::vector<StreamInfo>> ListStreamsWithPrefix(std::string_view ns,
                                                        std::string_view prefix,
                                                        std::string_view start_after, size_t limit);
  // Streams of `ns` whose natural key (src/store/natural_key.h: a byte string whose byte order
  // is the names' natural order, "s-2" before "s-10") is >= `from_key`, ascending by that key,
  // at most `limit`. The ordered index behind ListStreamsNatural: it costs the streams returned.
  virtual Result<std::vector<StreamInfo>> ListStreamsByNaturalKey(std::string_view ns,
                                                                  std::string_view from_key,
                                                                  size_t limit) = 0;
  // Streams of `ns` whose names start with `prefix` and come after `start_after` (a name; empty:
  // from the first) in natural order, in that order, at most `limit`; shorter only when no more
  // match. Built on ListStreamsByNaturalKey: it visits the matching keys' ranges only (one per
  // digit count when the prefix ends in a digit), and costs the matches plus the names in those
  // ranges that differ from the prefix in leading zeros (see natural_key.h). A prefix whose last
  // digits are all zeros ("s-0") has no such ranges: it walks every name with a number there.
  Result<std::vector<StreamInfo>> ListStreamsNatural(std::string_view ns, std::string_view prefix,
                                                     std::string_view start_after, size_t limit);
  // Replaces retention and attributes; a `retention` of nullopt keeps the stream's own (an update
  // of the attributes alone, which then cannot undo a retention change that raced it). Retention
  // takes effect at the next append. When
  // `expected_attributes` is set, nothing changes and the answer is kConflict unless the
  // stream's attributes are exactly those (the compare-and-set of a read-modify-write that
  // processes sharing a store would otherwise race). When `expected_next_offset` is set, nothing
  // changes and the answer is kConflict unless the stream's next offset is exactly that: no
  // record was appended since the caller read it (a channel adopting an empty stream relies on
  // it, so a plain append racing the adoption cannot slip a foreign record in first).
  virtual Status UpdateStream(StreamId id, const std::optional<StreamRetention>& retention,
                              std::string_view attributes,
                              std::optional<std::string_view> expected_attributes,
                              std::optional<uint64_t> expected_next_offset) = 0;
  // Removes the stream, its records, cursors and producer state. Its name can be created again
  // as a new stream.
  virtual Status DeleteStream(StreamId id) = 0;

  // Appends a batch and applies the stream's retention after it (the new records always
  // survive). `done` runs exactly once.
  virtual void Append(AppendRequest request, AppendCallback done) = 0;
  // Append, waiting for its answer: for callers on a thread that may block (never a store
  // callback's thread, which would wait on itself).
  Result<AppendResult> AppendAndWait(AppendRequest request);

  // Up to `limit` records with offset >= from, ascending and gap-free (except where DropRecords
  // removed records: those offsets are skipped), stopping before the
  // total payload bytes would pass max_bytes (but always returning at least one record if any
  // is available and limit > 0). A from below the head starts at the head.
  virtual Result<std::vector<StoredRecord>> Read(StreamId id, uint64_t from, size_t limit,
                                                 size_t max_bytes) = 0;
  // The record at exactly `offset`, or nullopt if that slot is empty or was truncated.
  virtual Result<std::optional<StoredRecord>> ReadAt(StreamId id, uint64_t offset) = 0;

  // Removes records with offset <= through. With respect_cursors, the cut is lowered to the
  // smallest cursor on the stream, atomically with respect to CommitCursor (SEMANTICS P7/P8).
  // Returns the number of records removed; never moves next_offset or any cursor.
  virtual Result<uint64_t> TruncatePrefix(StreamId id, uint64_t through, bool respect_cursors) = 0;

  // Removes the records at `offsets` (ascending) from the middle of the stream, as keyed
  // compaction does (core/state_compaction.h): the other records keep their offsets, reads skip
  // the removed ones, and next_offset never moves. Offsets that hold no record (never written,
  // trimmed or dropped already) are ignored. Atomic: after a crash either all of the call's
  // records are gone or none is. Returns the number of records removed. A store may bound the
  // offsets of one call (the log store takes 65536; kInvalidArgument beyond; a compaction sends
  // at most compaction::kDropBatch). The default answers kFailedPrecondition (a store that
  // cannot remove records from the middle).
  virtual Result<uint64_t> DropRecords(StreamId id, const std::vector<uint64_t>& offsets) {
    (void)id;
    (void)offsets;
    return Status::FailedPrecondition(std::string("the ") + std::string(Name()) +
                                      " store cannot remove records from the middle of a stream");
  }

  // Whether DropRecords removes records (the memory, log and PostgreSQL stores) rather than
  // refusing. Keyed compaction is offered only on such a store.
  virtual bool SupportsDropRecords() const { return false; }

  // Atomic max-merge of a named cursor; registers the cursor if absent. Returns the stored
  // value after the merge. updated_at_ms changes only when the value advances.
  virtual Result<uint64_t> CommitCursor(StreamId id, std::string_view consumer, uint64_t offset,
                                        uint64_t now_ms) = 0;
  // nullopt when the cursor was never committed.
  virtual Result<std::optional<CursorState>> GetCursor(StreamId id, std::string_view consumer) = 0;
  // Every cursor of the stream, ascending by name.
  virtual Result<std::vector<CursorState>> ListCursors(StreamId id) = 0;
  // Removes a named cursor: true if it existed, false if there was none (nothing changes).
  // Atomic with respect to CommitCursor and to TruncatePrefix(respect_cursors): a commit after
  // the removal registers the cursor afresh, from its own offset.
  virtual Result<bool> DeleteCursor(StreamId id, std::string_view consumer) = 0;

  virtual Result<std::optional<ProducerState>> GetProducer(StreamId id,
                                                           std::string_view producer_id) = 0;

  // Returns once every append acknowledged so far is durable to the store's strongest level.
  virtual Status Flush() = 0;

  // Installs the single tail listener (replacing any earlier one). Pass nullptr to remove.
  virtual void SetTailListener(TailListener listener) = 0;
  // Installs the source of the streams readers wait on (nullptr removes it). A store whose tail
  // notifications can be lost (several processes over one database) re-reads those streams'
  // tails now and then and calls the tail listener when one moved; the others ignore it.
  virtual void SetWatchedStreams(WatchedStreams watched) { (void)watched; }
  // Called when a reader starts waiting on `id` (after it is among the watched streams). A store
  // shared by several processes may tell the others at once that this one has readers; the
  // others ignore it.
  virtual void ReaderWaiting(StreamId id) { (void)id; }

  // Counters of the commit path; the default reports nothing (available = false).
  virtual StoreCommitStats CommitStats() const { return {}; }

  // Whether catalog and read calls wait on I/O outside this process (a database round trip)
  // rather than on local memory and page cache. A server keeps such calls off its event-loop
  // threads. The default is false.
  virtual bool CallsMayBlock() const { return false; }
  // Whether other processes (other runnel nodes) use the same streams at the same time, so what
  // one process sees of the traffic is not all of it. The default is false.
  virtual bool SharedWithOtherNodes() const { return false; }
};

// A store that keeps everything in process memory. Acknowledged appends are lost on exit.
std::unique_ptr<Store> NewMemoryStore();

}  // namespace runnel

#endif  // RUNNEL_STORE_H_
