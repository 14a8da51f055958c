// The Durable Streams protocol's per-stream metadata (TTL, Expires-At, the last Stream-Seq, fork
// origin and references, soft deletion, creation in progress), kept as JSON under the "ds" key
// of a stream's opaque attributes (core/attributes.h). The HTTP server and the library's typed
// protocol layer read and write it only through this type.
//
// Thread-safety: a value type; Parse and the accessors are pure.
#ifndef RUNNEL_CORE_PROTOCOL_META_H_
#define RUNNEL_CORE_PROTOCOL_META_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/state_compaction.h"
#include "runnel/store.h"

namespace runnel::protocol {

struct Meta {
  // The key of the stream's attributes that holds this metadata.
  static constexpr std::string_view kAttributeKey = "ds";

  // Stream-TTL, in seconds: the stream expires once idle this long (SEMANTICS E2).
  std::optional<uint64_t> ttl_s;
  // Stream-Expires-At as the client sent it, and as unix milliseconds (SEMANTICS E1).
  std::optional<std::string> expires_at;
  std::optional<int64_t> expires_at_ms;
  // The last Stream-Seq accepted (SEMANTICS E4).
  std::optional<std::string> stream_seq;
  // On a fork: its source's scope label and name, and where it forked (SEMANTICS E10).
  std::optional<std::string> fork_ns;
  std::optional<std::string> fork_name;
  uint64_t fork_position = 0;
  uint64_t fork_sub_offset = 0;
  // On a fork: its source's id. Forks created before sources listed their forks lack it; those
  // find their source by name and count themselves in its fork_refs.
  std::optional<StreamId> fork_source_id;
  // On a source: its live forks' ids, ascending, and how many forks from before the list count
  // themselves here instead.
  std::vector<StreamId> fork_ids;
  uint64_t fork_refs = 0;
  // Deleted while forks still reference it: it answers 410 and takes no writes until its last
  // fork is removed, which removes it too.
  bool soft_deleted = false;
  // Created, its initial records (body, fork inheritance) or close not yet committed: it does
  // not exist yet for any request but its creator's. Cleared by that commit.
  bool creating = false;
  // The stream is a channel's partition or checkpoint (DurableChannel::kAttributeKey): readable,
  // written only by the channel, never expired (SEMANTICS E3).
  bool channel = false;
  // The newest access recorded by any node sharing the store, unix ms; 0: none (SEMANTICS E2).
  uint64_t touched_ms = 0;
  // Keyed compaction (core/state_compaction.h), kept under its own attributes key.
  std::optional<compaction::Config> compaction;

  // Reads the protocol's key ("ds") of the stream's attributes; of other layers' keys, only
  // whether the channel's is present and the compaction configuration. Unreadable metadata
  // reads as none (keeping `channel` and `compaction`).
  static Meta Parse(std::string_view attributes);
  // The "ds" value as JSON text ("{}" when nothing is set).
  std::string Serialize() const;
  // What the "ds" key holds: nothing for a stream without metadata (most streams), so the store
  // keeps no attributes for it at all.
  std::optional<std::string> Stored() const;

  // Forks that hold this source: listed ones and, from before the list, counted ones.
  uint64_t Forks() const { return fork_refs + fork_ids.size(); }
  bool HasForks() const { return Forks() > 0; }
};

}  // namespace runnel::protocol

#endif  // RUNNEL_CORE_PROTOCOL_META_H_
