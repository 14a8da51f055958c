// Keyed compaction of State Protocol streams (the Durable Streams State Protocol: change
// messages {type, key, value, headers: {operation: insert|update|delete}} and control messages
// {headers: {control: snapshot-start|snapshot-end|reset}}).
//
// A stream opts in when it is created (the "compaction" key of its attributes, see
// core/attributes.h). Such a stream holds only State Protocol messages, one JSON value per
// record. Compaction keeps, for each (type, key), only its latest change message, at its
// original offset; offsets never change and the stream gets gaps. It also drops:
// - deletes (tombstones) that are the latest message of their key once they are older than the
//   stream's tombstone time (default 24 hours);
// - every record before the latest `reset` control message (the reset itself is kept);
// and it keeps every other control message. Records appended after the compaction point (the
// tail when a compaction starts) are not looked at.
//
// The horizon: a reader that has folded the stream through position p (every record with
// offset <= p) and then reads the survivors after p reaches the same state as one that folded
// the full history, unless a tombstone with an offset > p was dropped (it would miss that
// delete). So the horizon is the largest offset of a dropped tombstone; a read from a position
// p with 0 < p < horizon is refused with 410 Gone (the reader starts over from the beginning,
// -1), and any other read returns the survivors in offset order. A read from the beginning
// always folds to the same state as the full history.
//
// Crash safety: a compaction first commits the new horizon (a compare-and-set of the stream's
// attributes), then removes the records (Store::DropRecords). A crash between the two leaves a
// horizon covering records still present, which refuses nothing a reader needs and is redone by
// the next compaction.
//
// Thread-safety: the free functions are pure; Compact may run concurrently with appends and
// reads of the same stream (it never blocks them for longer than one DropRecords call). A server
// runs one compaction of a stream at a time; compactions through several nodes sharing a store
// may overlap: each drops only records its own prefix of the stream shows superseded (so never
// the latest of a row in any longer prefix), and the horizon and compaction point are merged by
// maximum under the attributes' compare-and-set.
#ifndef RUNNEL_CORE_STATE_COMPACTION_H_
#define RUNNEL_CORE_STATE_COMPACTION_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "runnel/status.h"
#include "runnel/store.h"

namespace runnel::compaction {

// The attributes key (core/attributes.h) that holds a stream's compaction settings and state.
inline constexpr std::string_view kAttributeKey = "compaction";
// The only mode there is: State Protocol keyed compaction.
inline constexpr std::string_view kModeState = "state";
// How long a delete is kept as a tombstone by default: 24 hours.
inline constexpr uint64_t kDefaultTombstoneMs = 24ull * 60 * 60 * 1000;
// The longest tombstone time accepted: 10 years.
inline constexpr uint64_t kMaxTombstoneMs = 10ull * 365 * 24 * 60 * 60 * 1000;
// The most records one DropRecords call removes; a compaction of more issues several, so
// appends to the stream never wait behind one long removal.
inline constexpr size_t kDropBatch = 4096;
// The records one compaction reads per Store::Read call.
inline constexpr size_t kReadBatch = 8192;

// A stream's compaction settings and state, as kept under kAttributeKey.
struct Config {
  uint64_t tombstone_ms = kDefaultTombstoneMs;
  // The largest offset of a dropped tombstone (0: none). Reads below it answer 410.
  uint64_t horizon = 0;
  // The compaction point of the last compaction that finished (0: none).
  uint64_t compacted_through = 0;

  std::string Serialize() const;
  // kCorruption when `json_text` is not a settings object.
  static Result<Config> Parse(std::string_view json_text);
};

// The stream's settings, or nullopt when the stream does not use compaction. kCorruption when
// the attributes or the settings cannot be read.
Result<std::optional<Config>> ConfigOf(std::string_view attributes);
// `attributes` with the settings replaced (compaction turned on when it was off).
Result<std::string> WithConfig(std::string_view attributes, const Config& config);

// What a message of a compacted stream is.
struct Message {
  enum class Kind { kInsert, kUpdate, kDelete, kSnapshotStart, kSnapshotEnd, kReset };
  Kind kind = Kind::kInsert;
  // For change messages: the (type, key) identity, as "<type length>:<type><key>".
  std::string identity;
  bool change() const { return kind <= Kind::kDelete; }
};

// Parses one record of a compacted stream. kInvalidArgument with a sentence naming what is
// wrong when `json_text` is not a State Protocol message: not a JSON object, a change message
// without a string `type` and `key` or with an operation other than insert, update or delete,
// an insert or update without `value`, a control other than snapshot-start, snapshot-end or
// reset, or neither headers.operation nor headers.control.
Result<Message> ParseMessage(std::string_view json_text);

// What one compaction found and did.
struct Report {
  uint64_t compacted_through = 0;  // the compaction point (the tail when it started)
  uint64_t scanned_records = 0;
  uint64_t scanned_bytes = 0;
  uint64_t dropped_records = 0;  // superseded, expired tombstones and records before a reset
  uint64_t dropped_bytes = 0;    // their payload bytes
  uint64_t dropped_tombstones = 0;
  uint64_t kept_records = 0;
  uint64_t horizon = 0;  // the horizon after it
};

// Decides what a compaction drops from records seen in offset order. Memory: one entry per
// distinct (type, key) seen (its identity and latest offset) and one per record to drop.
class Planner {
 public:
  Planner(uint64_t now_ms, uint64_t tombstone_ms) : now_ms_(now_ms), tombstone_ms_(tombstone_ms) {}
  // Records must come in ascending offset order. A record that is not a State Protocol message
  // (written before the stream opted in, say) is kept and otherwise ignored.
  void Add(const StoredRecord& record);
  // The offsets to drop, ascending, and the horizon they imply (at least `old_horizon`).
  struct Plan {
    std::vector<uint64_t> drop;
    uint64_t dropped_bytes = 0;
    uint64_t dropped_tombstones = 0;
    uint64_t kept = 0;
    uint64_t horizon = 0;
  };
  Plan Finish(uint64_t old_horizon);

 private:
  struct Latest {
    uint64_t offset = 0;
    uint64_t bytes = 0;
    uint64_t appended_at_ms = 0;
    bool deleted = false;
  };
  uint64_t now_ms_;
  uint64_t tombstone_ms_;
  uint64_t reset_offset_ = 0;
  std::unordered_map<std::string, Latest> latest_;
  // Every record seen: its offset, payload bytes and, for a change message, its key's entry in
  // latest_ (node pointers of an unordered_map are stable), else null.
  struct Seen {
    uint64_t offset;
    uint64_t bytes;
    const Latest* latest;
  };
  std::vector<Seen> seen_records_;
};

// Compacts stream `id` of `store` through its current tail: plans from the survivors, commits the
// new horizon to the attributes, then drops the records. kFailedPrecondition when the stream does
// not use compaction.
Result<Report> Compact(Store& store, StreamId id, uint64_t now_ms);

}  // namespace runnel::compaction

#endif  // RUNNEL_CORE_STATE_COMPACTION_H_
