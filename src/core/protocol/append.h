// One append under the protocol's rules (SEMANTICS E4–E11), decided in one place for both doors:
// runnel::Streams::Append (the library) and a POST to a stream (the HTTP server). A door turns
// its input into an AppendSpec, asks Catalog::PrepareAppend for either an answer or a write,
// hands the write to the store (blocking or not, as suits it), and gives the store's result to
// Catalog::FinishAppend. The door then maps the AppendOutcome to its own answer (a status, or an
// HTTP response with headers); it decides nothing itself.
//
// The rules that depend on the stream's state (closed, soft-deleted, a channel's, the producer's
// last (epoch, seq), the last Stream-Seq, the tail) are applied by the store inside the append's
// atomic step, through the write's AppendGuard (AppendRules): nothing checks them ahead of it.
//
// Thread-safety: PlanAppend and DecideAppend are pure; an AppendRules is used by one append at a
// time (its store calls Admit, then the door reads AnswerFor after the callback).
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
};

// The answer to an append, whichever door asked.
struct AppendOutcome {
  enum class Kind {
    kAppended,   // committed: records, a close, or both
    kDuplicate,  // the producer's (epoch, seq) was already accepted: success, nothing written
    kNoop,       // a close without records of a stream already closed: success
    kRefused,    // nothing written; `status` says why
    kRetry,      // the stream remembered is gone: run the append again from a fresh lookup
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

  bool ok() const { return kind != Kind::kRefused && kind != Kind::kRetry; }
};

// An append as PrepareAppend leaves it for the store's atomic step: the client's conditions,
// and what the checks of the body found (SEMANTICS E5, E6: they depend only on the stream's
// fixed content type, so they run ahead; their refusals are reported in the rules' order).
struct AppendPlan {
  bool close = false;
  bool has_body = false;
  std::optional<std::string> stream_seq;
  std::optional<ProducerState> producer;
  std::optional<uint64_t> expected_position;
  // A body missing, without a content type or with another one (reported after E10). Held by
  // pointer, as the answer below: every append carries its plan to the store, and a plain one
  // has none of them.
  std::shared_ptr<const AppendOutcome> body_refusal;
  // A body that is not the stream's records: bad JSON, too many messages, not State Protocol
  // messages on a compacted stream (reported last).
  std::shared_ptr<const AppendOutcome> records_refusal;
};

// Checks the body against the stream as found and turns it into `write->records` (one record,
// or for a JSON-mode stream its messages); fills the rest of `write` but the attributes. Pure.
AppendPlan PlanAppend(const Found& found, AppendSpec spec, size_t max_messages,
                      AppendRequest* write);

// The decision itself, from the stream as the store's atomic step finds it (`now`: its tail,
// whether it is closed, its attributes and the producer's stored state): every rule of E4–E11 in
// the protocol's order. Answers, or completes `write` (for a Stream-Seq, the attributes that
// record it) and returns nothing. Pure.
std::optional<AppendOutcome> DecideAppend(const Found& found, const AppendState& now,
                                          const AppendPlan& plan, AppendRequest* write);

// The protocol's rules as the store applies them (runnel::AppendGuard): DecideAppend inside the
// append's atomic step. An answer (a refusal, a duplicate, a no-op close) writes nothing and is
// kept for FinishAppend.
class AppendRules final : public AppendGuard {
 public:
  AppendRules(std::shared_ptr<const Found> found, AppendPlan plan)
      : found_(std::move(found)), plan_(std::move(plan)) {}

  Status Admit(const AppendState& state, AppendRequest* request) override;

  // The answer of the last Admit, when the append ended with it: `result` (the store's) is the
  // status that Admit returned. A store that retries its atomic step may end it without calling
  // Admit again (the stream is gone meanwhile); then the store's own status is the answer.
  // Read after the append's callback ran.
  const AppendOutcome* AnswerFor(const Result<AppendResult>& result) const {
    if (!answer_ || result.ok()) return nullptr;
    const Status& s = result.status();
    return s.code() == returned_.code() && s.message() == returned_.message() ? answer_.get()
                                                                              : nullptr;
  }
  const AppendPlan& plan() const { return plan_; }

 private:
  const std::shared_ptr<const Found> found_;
  const AppendPlan plan_;
  std::unique_ptr<const AppendOutcome> answer_;
  Status returned_;  // what the last Admit returned
};

// What PrepareAppend made: an answer now, or a write for the store.
struct PreparedAppend {
  // Set: the append is answered without a write (the stream is not there, a retry).
  std::optional<AppendOutcome> answer;
  // The write to hand Store::Append when there is no answer; its guard is `rules`.
  AppendRequest request;
  // The stream as looked up (or remembered).
  std::shared_ptr<const Found> found;
  // The rules the store applies; this (or a copy) must live until the store's callback ran.
  std::shared_ptr<AppendRules> rules;
  // Payload bytes the write carries.
  uint64_t bytes = 0;
  // The stream-cache entry the lookup came from; empty: a fresh lookup.
  std::string cache_key;

  bool from_cache() const { return !cache_key.empty(); }
};

}  // namespace runnel::protocol

#endif  // RUNNEL_CORE_PROTOCOL_APPEND_H_
