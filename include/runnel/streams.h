// runnel::Streams: Durable Streams protocol streams over a StreamRegistry, for a program that
// embeds runnel and wants the protocol's per-stream rules (docs/semantics.md, family E) without
// HTTP. The HTTP server keeps the same rules through the same core code (src/core/protocol), so
// both doors give the same answers.
//
// Contracts:
// - An expired stream (Expires-At passed, or a TTL stream idle past TTL + grace), a
//   soft-deleted one (deleted while forks reference it) and one still being created by another
//   caller are kNotFound for every method; an expired one is removed when it is found so.
// - Every successful Lookup, Append and Read renews a TTL stream's idle clock (sliding TTL);
//   over HTTP, a HEAD does not.
// - Methods block until the store has answered (an append until its commit is durable, as the
//   store defines it); call them from threads that may wait.
//
// Not yet here (the HTTP server does these): creating streams and forks with protocol metadata
// (PUT), live reads (long-poll, SSE), keyed compaction.
//
// Thread-safety: every method may be called from any thread concurrently; copies of a Streams
// share one state (access times, metadata in flight).
#ifndef RUNNEL_STREAMS_H_
#define RUNNEL_STREAMS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runnel/registry.h"
#include "runnel/status.h"

namespace runnel {

namespace protocol {
class Catalog;
}

struct StreamsOptions {
  // A TTL stream lives at least TTL seconds after its last access and is gone within TTL plus
  // this grace (SEMANTICS E2).
  uint64_t ttl_grace_ms = 1000;
  // The most live forks one stream may have.
  size_t max_forks_per_stream = 1000;
  // The most messages one JSON-mode append may carry (kResourceExhausted beyond).
  size_t max_append_messages = 100000;
  // The wall clock of expiry, in unix ms. Null: the system clock.
  std::function<uint64_t()> now_ms;
};

// A live protocol stream.
struct ProtocolStreamInfo {
  StreamInfo info;
  // Where the next record goes, as Stream-Next-Offset counts: records ever appended.
  uint64_t tail_position = 0;
  std::optional<uint64_t> ttl_s;
  std::optional<std::string> expires_at;
  std::optional<std::string> stream_seq;
  bool closed = false;
};

// An idempotent producer's identity and position (SEMANTICS E9).
struct ProducerId {
  std::string id;
  uint64_t epoch = 0;
  uint64_t seq = 0;
};

struct ProtocolAppend {
  // The body's media type; must match the stream's (SEMANTICS E5). Required with a body.
  std::string content_type;
  // One record, or for a JSON-mode stream one JSON value (a top-level array flattened by one
  // level, SEMANTICS E6). May be empty only with `close`.
  std::string body;
  // Close the stream with (or, with an empty body, without) this append.
  bool close = false;
  // Stream-Seq: must be greater than the last one (SEMANTICS E4).
  std::optional<std::string> stream_seq;
  // Idempotent producer: committed atomically with the records.
  std::optional<ProducerId> producer;
  // Conditional append: the stream's tail position must be this (SEMANTICS E11).
  std::optional<uint64_t> expected_position;
};

struct ProtocolAppendResult {
  // The tail position after the append.
  uint64_t tail_position = 0;
  // A producer's (epoch, seq) already accepted: nothing was appended.
  bool duplicate = false;
  bool closed = false;
};

struct ProtocolRead {
  std::vector<std::string> records;  // each as stored (a JSON message or a slice of bytes)
  uint64_t next_position = 0;        // where the next read starts
  bool up_to_date = false;           // next_position is the tail
  bool closed = false;               // closed, and this read reached the end
};

class Streams {
 public:
  explicit Streams(StreamRegistry registry, StreamsOptions options = {});

  // The live stream; renews a TTL. kNotFound as in the contracts above.
  Result<ProtocolStreamInfo> Lookup(const StreamScope& scope, std::string_view name);
  // Appends under the protocol's rules. Refusals: kFailedPrecondition (closed, or a channel's
  // stream), kConflict (content type, Stream-Seq, producer gap, expected position; nothing
  // appended), kPermissionDenied (stale producer epoch), kInvalidArgument (no body, a bad new
  // epoch, bad JSON), kResourceExhausted (too many JSON messages).
  Result<ProtocolAppendResult> Append(const StreamScope& scope, std::string_view name,
                                      const ProtocolAppend& append);
  // Closes the stream (idempotent: closing a closed stream succeeds).
  Result<ProtocolAppendResult> Close(const StreamScope& scope, std::string_view name);
  // Up to `max_records` records after `position` (0: from the beginning). A position beyond the
  // tail is kInvalidArgument.
  Result<ProtocolRead> Read(const StreamScope& scope, std::string_view name, uint64_t position,
                            size_t max_records = StreamRegistry::kMaxReadLimit);
  // Deletes the stream; soft-deletes it while forks reference it (they stay readable), and
  // collects soft-deleted sources left without forks. A channel's stream is kFailedPrecondition.
  Status Delete(const StreamScope& scope, std::string_view name);
  // Replaces the stream's retention caps (an empty StreamRetention clears them); refused as
  // Delete is, and kInvalidArgument for a stream with keyed compaction.
  Status UpdateRetention(const StreamScope& scope, std::string_view name,
                         const StreamRetention& retention);

 private:
  // `retry_race`: decide once more from a fresh lookup when the store refused the append
  // because the stream's attributes changed after they were read.
  Result<ProtocolAppendResult> AppendOnce(const StreamScope& scope, std::string_view name,
                                          const ProtocolAppend& append, bool retry_race);

  std::shared_ptr<protocol::Catalog> catalog_;
  StreamsOptions options_;
};

}  // namespace runnel

#endif  // RUNNEL_STREAMS_H_
