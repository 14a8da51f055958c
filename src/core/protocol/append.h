// One append under the protocol's rules (SEMANTICS E4–E11), decided in one place for both doors:
// runnel::Streams::Append (the library) and a POST to a stream (the HTTP server). A door turns
// its input into an AppendSpec, asks Catalog::PrepareAppend for either an answer or a write,
// hands the write to the store (blocking or not, as suits it), and gives the store's result to
// Catalog::FinishAppend. The door then maps the AppendOutcome to its own answer (a status, or an
// HTTP response with headers); it decides nothing itself.
//
// Thread-safety: plain values; DecideAppend is a pure function.
#ifndef RUNNEL_CORE_PROTOCOL_APPEND_H_
#define RUNNEL_CORE_PROTOCOL_APPEND_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "core/protocol/meta.h"
#include "runnel/status.h"
#include "runnel/store.h"

namespace runnel::protocol {

// A stream as the protocol sees it: the store's descriptor and the protocol metadata.
struct Found {
  StreamInfo info;
  Meta meta;
};

// An append as a client states it.
struct AppendSpec {
  // The body's media type as sent (empty: none). Only read during PrepareAppend.
  std::string_view content_type;
  // One record, or for a JSON-mode stream one JSON value (a top-level array flattened by one
  // level, SEMANTICS E6). May be empty only with `close`.
  std::string body;
  // Close the stream with (or, with an empty body, without) this append.
  bool close = false;
  // Stream-Seq: greater than the last one accepted (SEMANTICS E4).
  std::optional<std::string> stream_seq;
  // An idempotent producer's id, epoch and seq (SEMANTICS E9); last_offset unused.
  std::optional<ProducerState> producer;
  // Conditional append: the stream's tail position must be this (SEMANTICS E11).
  std::optional<uint64_t> expected_position;

  // Whether nothing but records is asked: no Stream-Seq, producer, close or expected position.
  // Only such an append may be decided from a remembered lookup (Catalog's append cache).
  bool Plain() const { return !close && !stream_seq && !producer && !expected_position; }
};

// The answer to an append, whichever door asked.
struct AppendOutcome {
  enum class Kind {
    kAppended,   // committed: records, a close, or both
    kDuplicate,  // the producer's (epoch, seq) was already accepted: success, nothing written
    kNoop,       // a close without records of a stream already closed: success
    kRefused,    // nothing written; `status` says why
    kRetry,      // decided from a stale view: run the append again from a fresh lookup
  };
  // What kind of refusal, where a door answers it in its own way.
  enum class Refusal {
    kNone,
    kSoftDeleted,  // the stream was deleted while forks still read it (HTTP: 410)
    kChannel,      // the stream belongs to a channel (HTTP: 409 naming the channel API)
    kPayload,      // the body itself is too large (too many JSON messages; HTTP: 413)
  };
  Kind kind = Kind::kRefused;
  Refusal refusal = Refusal::kNone;
  Status status;
  // The tail position to report (Stream-Next-Offset), when known.
  std::optional<uint64_t> tail_position;
  // The stream is closed (by this append or before it).
  bool closed = false;
  // Records were written (a producer's append of records answers 200, anything else 204).
  bool wrote_records = false;
  // The producer position to report: the accepted (epoch, seq), or for a duplicate the highest
  // accepted in that epoch, or for a stale epoch the current epoch alone.
  std::optional<uint64_t> producer_epoch;
  std::optional<uint64_t> producer_seq;
  // For a producer sequence gap: the sequence expected and the one received.
  std::optional<uint64_t> expected_seq;
  std::optional<uint64_t> received_seq;
  // For kRetry: the store refused the write because the stream's attributes changed after they
  // were read (a race with another writer); such a retry is taken once.
  bool race = false;

  bool ok() const { return kind != Kind::kRefused && kind != Kind::kRetry; }
};

// What PrepareAppend decided: an answer now, or a write for the store.
struct PreparedAppend {
  // Set: the append is answered without a write (a refusal, a duplicate, a retry).
  std::optional<AppendOutcome> answer;
  // The write to hand Store::Append when there is no answer.
  AppendRequest request;
  // The stream as the decision saw it.
  std::shared_ptr<const Found> found;
  // Payload bytes the write carries.
  uint64_t bytes = 0;
  // For FinishAppend.
  std::string cache_key;            // the stream-cache entry decided from; empty: a fresh lookup
  bool meta_in_flight = false;      // Catalog::BeginMetaAppend was called (a Stream-Seq)
  bool expects_attributes = false;  // the write is a compare-and-set on the attributes
  bool retry_race = true;
  bool close = false;
  bool wrote_records = false;
  std::optional<ProducerState> producer;

  bool from_cache() const { return !cache_key.empty(); }
};

// The decision itself, from the stream as found and the producer's stored state (when the
// append names a producer): every rule of E4–E11 in the protocol's order. Answers, or fills
// `write` (records split for JSON mode, producer, close, expected offset) and returns nothing.
// Stream-Seq's attributes are the caller's (they need the catalog). `max_messages` bounds a
// JSON-mode body.
std::optional<AppendOutcome> DecideAppend(const Found& found,
                                          const std::optional<ProducerState>& stored,
                                          AppendSpec spec, size_t max_messages,
                                          AppendRequest* write);

}  // namespace runnel::protocol

#endif  // RUNNEL_CORE_PROTOCOL_APPEND_H_
