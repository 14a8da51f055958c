// The Durable Streams protocol's per-stream rules that decide from values alone: expiry by
// Expires-At and sliding TTL, positions (tail, past trimmed records), RFC 3339 times, Stream-Seq
// ordering, idempotent producer sequencing and conditional appends. Each cites its rule in
// docs/semantics.md (family E). The HTTP server maps headers to these calls and their answers
// to responses; it decides none of these itself.
//
// Thread-safety: pure functions.
#ifndef RUNNEL_CORE_PROTOCOL_RULES_H_
#define RUNNEL_CORE_PROTOCOL_RULES_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/protocol/meta.h"
#include "runnel/status.h"
#include "runnel/store.h"

namespace runnel::protocol {

// The largest integer a protocol header may carry (2^53 - 1, what JSON clients represent).
inline constexpr uint64_t kMaxSafeInteger = (1ULL << 53) - 1;

// The position of the tail: the number of records ever appended, trimmed ones included
// (SEMANTICS E8). Stream-Next-Offset carries it.
uint64_t TailPosition(const StreamInfo& info);

// Where a read at `position` that found no records stands: past every offset retention or a
// prune removed (the head only moves forward, so nothing retained is skipped, even when records
// were appended after the read). Without this, a reader from the beginning of a stream emptied
// by a prune would be told to read from 0 again, forever (SEMANTICS E8).
uint64_t PastTrimmed(const StreamInfo& info, uint64_t position);

// RFC 3339 date-time, YYYY-MM-DDTHH:MM:SS[.frac](Z|+hh:mm|-hh:mm), as unix milliseconds; nothing
// for anything else, including dates that do not exist (2023-02-29) (SEMANTICS E7).
std::optional<int64_t> ParseRfc3339(std::string_view text);

// What expiry needs besides the metadata.
struct ExpiryClock {
  uint64_t now_ms = 0;
  // The newest access this node saw (0: none; the metadata's touched_ms counts too).
  uint64_t last_access_ms = 0;
  // Added to a TTL so a client renewing "just in time" does not race request scheduling.
  uint64_t grace_ms = 0;
  // On a store shared with other nodes, their accesses are recorded in the metadata at most a
  // quarter of the TTL apart (RecordAccessDue), so a TTL stream lives that much longer.
  bool shared_with_other_nodes = false;
};

// Whether a stream has expired (SEMANTICS E1–E3): at or after its Expires-At, or idle for its
// TTL plus grace (plus TTL/4 on a shared store) since the newest access recorded anywhere. A
// channel's stream never expires.
bool Expired(const Meta& meta, const ExpiryClock& clock);

// Whether a node should record an access at `now_ms` in the stream's metadata (touched_ms),
// given the newest recorded access it knows: once that is a quarter of the TTL old (SEMANTICS
// E2). Only TTL streams on a store shared with other nodes record accesses.
bool RecordAccessDue(const Meta& meta, uint64_t recorded_ms, uint64_t now_ms);

// Stream-Seq is stored in the stream's JSON metadata, so it must be text that survives JSON
// unchanged: valid UTF-8, else kInvalidArgument (SEMANTICS E4).
Status ValidateStreamSeq(std::string_view seq);
// A Stream-Seq must be greater than the last one accepted, comparing bytes: kConflict
// otherwise, naming the last one (SEMANTICS E4).
Status CheckStreamSeq(const std::optional<std::string>& last, std::string_view seq);

// What an idempotent producer's (epoch, seq) means against the state stored for its id
// (SEMANTICS E9).
enum class ProducerVerdict {
  kAccept,       // the next sequence of the current epoch, or seq 0 of a new epoch
  kDuplicate,    // an epoch's seq already accepted: answer success, append nothing
  kStaleEpoch,   // an epoch below the stored one: fenced
  kBadNewEpoch,  // a new epoch of a known producer that does not start at 0
  kGap,          // a sequence past the next one (or a first one that is not 0)
};
struct ProducerCheck {
  ProducerVerdict verdict = ProducerVerdict::kAccept;
  // For kGap: the sequence expected next.
  uint64_t expected_seq = 0;
};
ProducerCheck CheckProducer(const std::optional<ProducerState>& stored, uint64_t epoch,
                            uint64_t seq);

// A conditional append (Stream-Expected-Offset) must start at the stream's tail position:
// kConflict(expected, tail) otherwise (SEMANTICS E11). The tail position is next_offset - 1.
Status CheckExpectedPosition(uint64_t expected_position, uint64_t next_offset);
inline Status CheckExpectedPosition(uint64_t expected_position, const StreamInfo& info) {
  return CheckExpectedPosition(expected_position, info.next_offset);
}

// Refuses a batch for a compacted stream (Stream-Compaction: state) unless every message is a
// State Protocol message (core/state_compaction.h): kInvalidArgument naming the first that is not.
Status ValidateStateMessages(const std::vector<AppendRecord>& records);

}  // namespace runnel::protocol

#endif  // RUNNEL_CORE_PROTOCOL_RULES_H_
