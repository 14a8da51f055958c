// protocol::Catalog: the Durable Streams protocol's per-stream state over a StreamRegistry —
// lookups that apply expiry and hide streams being created, this node's access times for
// sliding TTLs, fork references with soft deletion, and compare-and-set writes of the
// metadata (core/protocol/meta.h). The HTTP server (StreamService) and the library's typed
// API (runnel/streams.h) both keep the protocol's rules through one Catalog; neither decides
// them itself.
//
// Thread-safety: every method may be called from any thread concurrently. Methods that write
// (Create, Remove, SoftDelete, UpdateMeta*, ForgetDeadForks) wait for the store's commit, so they
// belong on a thread that may block.
#ifndef RUNNEL_CORE_PROTOCOL_CATALOG_H_
#define RUNNEL_CORE_PROTOCOL_CATALOG_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "base/mutex.h"
#include "core/protocol/append.h"
#include "core/protocol/meta.h"
#include "runnel/registry.h"

namespace runnel::protocol {

struct CatalogOptions {
  // A stream with a sliding TTL expires once it has been idle for TTL seconds plus this grace
  // (SEMANTICS E2). Whole-second TTLs renewed "just in time" by a client would otherwise race
  // with request scheduling delays; the grace makes the guarantee "alive for at least TTL
  // seconds after the last access, gone within TTL + grace". On a store shared with other nodes
  // (Store::SharedWithOtherNodes) each node records an access in the stream's metadata at most
  // once per TTL/4 (`touched_ms`, written through `background`), and a stream expires once no
  // node recorded or saw an access for TTL + TTL/4 + grace.
  uint64_t ttl_grace_ms = 1000;
  // The most live forks one stream may have: a source lists its forks' ids in its metadata,
  // which every fork created or removed rewrites. One more is kFailedPrecondition.
  size_t max_forks_per_stream = 1000;
  // The most record bytes (payloads and keys) a fork may copy from its source: the copy is one
  // batch in memory until it commits. A larger fork is kResourceExhausted before it is created.
  size_t max_fork_bytes = 64u << 20;
  // The most messages a JSON-mode initial body may carry (kResourceExhausted beyond).
  size_t max_append_messages = 100000;
  // Runs the metadata write that records an access (Touch) off the caller's thread. Null runs it
  // inline.
  std::function<void(std::function<void()>)> background;
  // The wall clock expiry and access times use, in unix ms. Null: the system clock.
  std::function<uint64_t()> now_ms;
  // The most streams the registry's stream cache remembers (core/stream_cache.h; cleared when
  // full), which appends take streams from (see Catalog::Cached); 0: appends do not use it.
  size_t append_cache_streams = 65536;
};

// Where a fork starts (SEMANTICS E13).
struct ForkSpec {
  // The source stream; any scope (whoever asks has checked the caller's access to it).
  StreamScope scope;
  std::string name;
  // The position the fork inherits through; nothing: the source's tail.
  std::optional<uint64_t> position;
  // Also inherit this much of what follows `position`: for a JSON-mode source that many
  // messages, for any other the first that many bytes of the next record.
  uint64_t sub_offset = 0;
};

// A stream to create, as PUT describes it.
struct CreateSpec {
  // Nothing: application/octet-stream, or for a fork its source's.
  std::optional<std::string> content_type;
  // Stream-TTL in seconds, or Stream-Expires-At in RFC 3339 (SEMANTICS E1, E2): at most one. A
  // fork that sets neither inherits its source's.
  std::optional<uint64_t> ttl_s;
  std::optional<std::string> expires_at;
  // Created closed (after its initial records).
  bool closed = false;
  StreamRetention retention;
  // The initial records: one record, or for a JSON-mode stream the messages of one JSON value
  // (a top-level array flattened by one level; an empty array is no message).
  std::string body;
  std::optional<ForkSpec> fork;
  // Keyed compaction (core/state_compaction.h): a JSON stream only, no fork, no retention caps.
  std::optional<compaction::Config> compaction;
};

// What Create did.
struct Created {
  // False: the stream already existed with the same configuration (an idempotent re-create).
  bool created = false;
  // The stream as created (before its initial records) or as found.
  StreamInfo info;
  // Where the next record goes (Stream-Next-Offset), and whether the stream is closed, as of
  // the create's commit or the lookup.
  uint64_t tail_position = 0;
  bool closed = false;
};

class Catalog {
 public:
  // A stream still being created this long after its creation began was left so by a stopped
  // node (Meta::creating): the next lookup removes it.
  static constexpr uint64_t kStaleCreationMs = 10'000;

  Catalog(StreamRegistry registry, CatalogOptions options);
  Catalog(const Catalog&) = delete;
  Catalog& operator=(const Catalog&) = delete;

  const CatalogOptions& options() const { return options_; }
  StreamRegistry& registry() { return registry_; }

  // Looks a stream up, applying expiry (SEMANTICS E1–E3): kNotFound when absent, expired (then
  // removed) or still being created by another request. A soft-deleted stream is found, with
  // meta.soft_deleted set (the HTTP door answers 410 for it). Renews nothing: see Touch.
  Result<Found> Lookup(const StreamScope& scope, std::string_view name);
  // The stream if it exists and is live (not expired, not soft-deleted), else kNotFound.
  Result<StreamInfo> LookupLive(const StreamScope& scope, std::string_view name);
  // Renews a TTL stream's idle clock (SEMANTICS E2); a stream without a TTL records nothing. On
  // a store shared with other nodes, also records the access in the stream's metadata when the
  // recorded one is TTL/4 old (through options().background).
  void Touch(const StreamInfo& info, const Meta& meta);
  // Whether the stream has expired now, by this node's access times and the metadata's.
  bool Expired(const StreamInfo& info, const Meta& meta);

  // Removes a stream, or soft-deletes it while forks reference it; collects soft-deleted fork
  // sources left without forks (SEMANTICS E10).
  Status Remove(const StreamInfo& info, const Meta& meta);
  // Marks a stream soft-deleted and closes it in the store, in one append (so a writer that
  // validated against an older lookup is refused by the store).
  Status SoftDelete(StreamId id);
  // Drops from source `id`'s fork list the forks that no longer exist; `*meta` becomes the
  // source's metadata as written (or as read, when every listed fork lives).
  Status ForgetDeadForks(StreamId id, Meta* meta);
  // A compare-and-set of stream `id`'s metadata: reads, applies `change`, writes; reads again
  // when another writer (another node) changed the attributes in between.
  Status UpdateMeta(StreamId id, const std::function<void(Meta*)>& change);
  // As UpdateMeta, but `change` may refuse (with any code but kConflict, which means "read
  // again"): its error is returned and nothing is written.
  Status UpdateMetaIf(StreamId id, const std::function<Status(Meta*)>& change);
  // The answer to one fork too many of `source_name`.
  Status TooManyForks(std::string_view source_name) const;
  // Why Create refused: kPayload when the initial body or the records a fork would copy are the
  // problem (bad or too many JSON messages, more than max_fork_bytes), which the HTTP door
  // answers as a request body's (413 for kResourceExhausted).
  enum class CreateRefusal { kNone, kPayload };
  // Creates stream `name` (PUT) under the rules of docs/semantics.md E1, E2, E12 and E13: validates
  // the spec (kInvalidArgument), answers an existing live stream with the same configuration as
  // not created, and one with another configuration, or a soft-deleted one with live forks, as
  // kAlreadyExists. A fork's source must be live (kNotFound, or kFailedPrecondition when
  // soft-deleted), have room for one more fork (kFailedPrecondition) and hold the fork's
  // position (kInvalidArgument past its tail or before its last compaction point). Initial
  // records (inherited and the body) and a close commit atomically with the stream becoming
  // visible (Meta::creating). Losing a race for the name to another creator waits up to
  // kCreateRaceWaitMs for the winner's commit, then answers as a re-create. Blocks until the
  // store has committed.
  Result<Created> Create(const StreamScope& scope, std::string_view name, const CreateSpec& spec,
                         CreateRefusal* refusal = nullptr);
  // How long a create that lost the race for its name waits for the winner's initial records.
  static constexpr uint64_t kCreateRaceWaitMs = 5'000;
  // Why Delete refused a stream that exists.
  enum class Refusal { kNone, kSoftDeleted, kChannel };
  // The refusal of any write to a stream that exists but takes none: soft-deleted (kNotFound,
  // `*refusal` kSoftDeleted) or a channel's (kFailedPrecondition, kChannel); OK otherwise.
  static Status RefuseWrite(const Meta& meta, std::string_view name, Refusal* refusal);
  static Status RefuseWrite(const Found& found, std::string_view name, Refusal* refusal) {
    return RefuseWrite(found.meta, name, refusal);
  }
  // Deletes a live stream (DELETE): kNotFound when it does not exist, expired or was already
  // soft-deleted (`*refusal` kSoftDeleted), kFailedPrecondition for a channel's stream, written
  // only by its channel (kChannel); soft-deleted (SEMANTICS E10) while forks reference it.
  Status Delete(const StreamScope& scope, std::string_view name, Refusal* refusal = nullptr);
  // Replaces a live stream's retention caps (PATCH; an empty StreamRetention clears them all)
  // and answers the stream as it is after. Refused as Delete refuses, and kInvalidArgument for a
  // stream with keyed compaction, which decides alone which records go.
  Result<StreamInfo> UpdateRetention(const StreamScope& scope, std::string_view name,
                                     const StreamRetention& retention, Refusal* refusal = nullptr);

  // Appends (core/protocol/append.h). PrepareAppend looks the stream up (from the append
  // cache unless `fresh`), checks the body and makes the write, whose rules the store
  // applies inside its atomic step (AppendRules); it may call the store, except when
  // AppendIsCached says the append is decided from the cache. The caller hands `request` to
  // Store::Append, then the result to FinishAppend, off the store's thread when
  // FinishCallsStore says that may call the store.
  PreparedAppend PrepareAppend(const StreamScope& scope, std::string_view name, AppendSpec spec,
                               bool fresh = false);
  AppendOutcome FinishAppend(const PreparedAppend& prepared, Result<AppendResult> result);
  static bool FinishCallsStore(const PreparedAppend& prepared, const Result<AppendResult>& result) {
    return !result.ok() && prepared.rules->AnswerFor(result) == nullptr;
  }
  // Whether an append to the stream would take it from the cache (no store call to prepare).
  bool AppendIsCached(const StreamScope& scope, std::string_view name);
  // Drops the stream's append cache entry (a write that changes what an append uses of it).
  void ForgetCached(const StreamScope& scope, std::string_view name);

 private:
  // Appends take the stream from a lookup remembered in the registry's stream cache
  // (core/stream_cache.h), so the hot path costs no catalog read. What they use of an entry
  // never changes for a stream id: the id itself, the content type, keyed compaction, TTL and
  // Expires-At; everything that does change (closed, soft-deleted, a channel's, the producers,
  // the last Stream-Seq, the tail) the store shows the append's rules inside its atomic step.
  // Only live, open streams that have held a record are remembered. A stream deleted since it
  // was remembered is refused by the store (kNotFound): the entry is dropped and the append
  // runs again from a fresh lookup. Creates, deletes and retention changes drop their stream's
  // entry. Null when options_.append_cache_streams is 0.
  std::shared_ptr<const Found> Cached(const std::string& key);
  void Remember(const std::string& key, std::shared_ptr<const Found> found);
  void Forget(const std::string& key);

  uint64_t Now() const;
  // One attempt of Create; `after_race`: a previous attempt lost the name to another creator.
  Result<Created> CreateOnce(const StreamScope& scope, std::string_view name,
                             const CreateSpec& spec, bool after_race, CreateRefusal* refusal);

  StreamRegistry registry_;
  CatalogOptions options_;

  // Serialises this node's read-modify-writes of stream metadata (each a compare-and-set
  // against the store, which other nodes and Stream-Seq appends may change meanwhile).
  Mutex meta_mu_;

  Mutex access_mu_;
  std::unordered_map<StreamId, uint64_t> last_access_ms_ RUNNEL_GUARDED_BY(access_mu_);
  // The newest access time recorded in the store's metadata (touched_ms) known here, per TTL
  // stream; only on a store shared with other nodes.
  std::unordered_map<StreamId, uint64_t> recorded_access_ms_ RUNNEL_GUARDED_BY(access_mu_);
};

}  // namespace runnel::protocol

#endif  // RUNNEL_CORE_PROTOCOL_CATALOG_H_
