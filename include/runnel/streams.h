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
// - Create is idempotent: creating a stream that exists with the same configuration answers it
//   as not created; another configuration is kAlreadyExists (SEMANTICS E12). A fork (E13)
//   starts with its source's records through its position, at the same offsets, and holds the
//   source: the source, deleted, is soft-deleted until its last fork goes (E10).
//
// Not yet here (the HTTP server does these): live reads (long-poll, SSE), keyed compaction.
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
  // The most messages one JSON-mode append or initial body may carry (kResourceExhausted
  // beyond).
  size_t max_append_messages = 100000;
  // The most record bytes (payloads and keys) a fork may copy from its source
  // (kResourceExhausted beyond, before anything is created).
  size_t max_fork_bytes = 64u << 20;
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

// Where a fork starts (SEMANTICS E13).
struct ProtocolFork {
  // The source stream, in any scope (the caller decides who may fork what).
  StreamScope scope;
  std::string name;
  // The position the fork inherits through (0: nothing); nothing: the source's tail. Beyond the
  // tail, or before a compacted source's last compaction point, is kInvalidArgument.
  std::optional<uint64_t> position;
  // Also inherit this much of what follows `position`: for a JSON-mode source that many
  // messages, for any other the first that many bytes of the next record (kInvalidArgument
  // past what is there).
  uint64_t sub_offset = 0;
};

struct ProtocolCreate {
  // The stream's media type; empty: application/octet-stream, or for a fork its source's (a
  // fork naming another is kAlreadyExists).
  std::string content_type;
  // A sliding TTL in seconds (SEMANTICS E2) or an RFC 3339 expiry time (E1, E7); not both
  // (kInvalidArgument). A fork that sets neither inherits its source's.
  std::optional<uint64_t> ttl_s;
  std::optional<std::string> expires_at;
  // Create the stream closed, after its initial records.
  bool closed = false;
  StreamRetention retention;
  // Initial records, committed with the creation: one record, or for a JSON-mode stream the
  // messages of one JSON value (a top-level array flattened by one level; an empty one is none).
  std::string body;
  std::optional<ProtocolFork> fork;
};

struct ProtocolCreateResult {
  // False: the stream already existed with the same configuration.
  bool created = false;
  // The tail position after the create (or as found), and whether the stream is closed.
  uint64_t tail_position = 0;
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

  // Creates a stream, or a fork, as the contracts above say. Refusals: kInvalidArgument (TTL
  // and expiry both, a bad expiry time, a fork position or sub-offset past the source's data),
  // kAlreadyExists (exists with another configuration, or a deleted stream with live forks
  // holds the name), kNotFound (no live fork source), kFailedPrecondition (the source was
  // deleted, or has max_forks_per_stream forks), kResourceExhausted (too many initial JSON
  // messages, a fork copying more than max_fork_bytes).
  Result<ProtocolCreateResult> Create(const StreamScope& scope, std::string_view name,
                                      const ProtocolCreate& create);
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
  std::shared_ptr<protocol::Catalog> catalog_;
  StreamsOptions options_;
};

}  // namespace runnel

#endif  // RUNNEL_STREAMS_H_
