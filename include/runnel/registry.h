// StreamRegistry: named streams in tenant or global scopes, with retention, pure reads,
// monotonic consumer offsets, consumer groups, explicit prune, wake-up subscriptions and tenant
// authorization. This header includes everything a caller needs.
//
// Lifecycle: a registry is a cheap handle; copies share the same streams (SEMANTICS R7). The
// default constructor gives an in-memory registry; Open() gives one over a configured store.
// The underlying store lives until the last copy is destroyed.
//
// Thread-safety: every method may be called from any thread, concurrently.
//
// Authorization (SEMANTICS Z1-Z7): the plain methods do not check anything and are meant for
// trusted callers. The *Authorized methods check the caller's principal against the target
// scope before they look at the stream, so a denied caller cannot learn whether it exists. The
// registry evaluates no policy itself: the transport says whether the caller holds the
// cross-tenant capability.
#ifndef RUNNEL_REGISTRY_H_
#define RUNNEL_REGISTRY_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runnel/clock.h"
#include "runnel/status.h"
#include "runnel/store.h"
#include "runnel/types.h"

namespace runnel {

namespace internal {
class RegistryCore;
class StreamCache;
class Subscriber;
}  // namespace internal

// Who is calling: a tenant, or the platform (no tenant), with or without the capability to act
// in other scopes (the `stream:cross-tenant` action).
struct Principal {
  std::optional<std::string> tenant;
  bool cross_tenant = false;

  static Principal Platform(bool cross_tenant = false) { return {std::nullopt, cross_tenant}; }
  static Principal OfTenant(std::string id, bool cross_tenant = false) {
    return {std::move(id), cross_tenant};
  }
};

// Z1-Z4 as a pure function: OK, or kPermissionDenied naming the principal, target and stream.
Status CheckStreamAccess(const Principal& principal, const StreamScope& target,
                         std::string_view stream);

struct CreateStreamOptions {
  StreamRetention retention;
  std::string content_type;
  // Opaque bytes for the layer above; see StreamSpec::attributes.
  std::string attributes;
  // The offset of the first append (1 unless importing or forking).
  uint64_t first_offset = 1;
};

// One page of a scope's streams, ascending by name.
struct ListStreamsOptions {
  // Only names starting with this (bytewise).
  std::string prefix;
  // Only names after this one (the last name of the previous page); empty = from the start.
  std::string start_after;
  // At most this many; clamped to [1, StreamRegistry::kMaxReadLimit].
  size_t limit = 100;
};

struct AppendOptions {
  // Timestamp of the batch; the registry's clock when unset (SEMANTICS choice 8).
  std::optional<uint64_t> now_ms;
  // Conditional append: the batch must start at this offset, else kConflict carrying
  // (expected, actual next offset) and nothing is written.
  std::optional<uint64_t> expected_offset;
  // Idempotent producer state committed with the batch.
  std::optional<ProducerState> producer;
  // Close the stream after this batch.
  bool close = false;
  // Replaces the stream's attributes atomically with the batch (AppendRequest::attributes).
  std::optional<std::string> attributes;
};

// A wake-up subscription (SEMANTICS N1-N4). A hint says only "the stream may have moved":
// hints coalesce, can be lost or spurious, and carry no data. Re-read after every hint and also
// poll. Unsubscribes when destroyed. Movable, not copyable.
class Subscription {
 public:
  Subscription(Subscription&&) noexcept;
  Subscription& operator=(Subscription&&) noexcept;
  Subscription(const Subscription&) = delete;
  Subscription& operator=(const Subscription&) = delete;
  ~Subscription();

  // Waits up to `timeout` for a hint. Returns true and consumes the pending hint if one arrived.
  bool WaitFor(std::chrono::milliseconds timeout);
  // Consumes a pending hint without waiting.
  bool TryConsume();

 private:
  friend class internal::RegistryCore;
  explicit Subscription(std::shared_ptr<internal::Subscriber> subscriber);
  std::shared_ptr<internal::Subscriber> subscriber_;
};

struct RegistryOptions {
  // "memory" (process-local, for tests), "log" (the embedded durable log in data_dir; the
  // default for durable use, see runnel/log_store.h), or a PostgreSQL URL ("postgres://..." or
  // "postgresql://...", see runnel/postgres_store.h).
  std::string store = "memory";
  // For a PostgreSQL store: the schema holding runnel's tables (empty means "runnel").
  std::string postgres_schema;
  // For a PostgreSQL store: PostgresStoreOptions::reply_timeout in milliseconds (0: its default).
  uint64_t postgres_reply_timeout_ms = 0;
  // Data directory for stores that keep files (required for "log").
  std::string data_dir;
  // For "log": "fsync" (an acknowledged append is on disk), "interval:<ms>" or "none".
  std::string durability = "fsync";
  // For "log": LogStoreOptions::group_commit_wait_us (fsync mode; 0 disables the wait).
  uint32_t group_commit_wait_us = 200;
  // For "log": open a directory with corruption before the tail, skipping the corrupt bytes.
  bool salvage = false;
  // For "log": LogStoreOptions::scrub_bytes_per_sec (0 turns the background scrub off) and
  // LogStoreOptions::on_damage (called with each damaged frame the scrub finds).
  uint64_t scrub_bytes_per_sec = 16ull << 20;
  std::function<void(const std::string&)> on_damage;
  // For "log": LogStoreOptions::segment_size; 0 keeps its default (64 MiB).
  uint64_t log_segment_size = 0;
  // Not owned; must outlive the registry. Null means Clock::Real().
  Clock* clock = nullptr;
};

class StreamRegistry {
 public:
  // The largest page a read returns; larger limits are clamped (SEMANTICS D5).
  static constexpr size_t kMaxReadLimit = 1000;
  // The most payload bytes one read returns (at least one event is always returned).
  static constexpr size_t kMaxReadBytes = 16u << 20;

  // An in-memory registry on the real clock.
  StreamRegistry();
  // A registry over `store`. `clock` is not owned; null means Clock::Real().
  explicit StreamRegistry(std::unique_ptr<Store> store, Clock* clock = nullptr);
  static Result<StreamRegistry> Open(const RegistryOptions& options);

  // --- Registry (seed 000) ---

  // kAlreadyExists if (scope, name) exists, leaving it unchanged (R1); kInvalidArgument for an
  // empty name (R8) or a zero retention cap (P6).
  Status CreateStream(const StreamScope& scope, std::string_view name,
                      const StreamRetention& retention);
  Status CreateStream(const StreamScope& scope, std::string_view name,
                      const CreateStreamOptions& options);
  // Never fails: an unknown stream (or an unreadable catalog) is simply absent (R4).
  bool Exists(const StreamScope& scope, std::string_view name) const;
  // Every stream of `scope`, ascending by name (R3).
  std::vector<StreamDescriptor> ListStreams(const StreamScope& scope) const;
  std::optional<StreamDescriptor> Describe(const StreamScope& scope, std::string_view name) const;
  // One page of ListStreams, filtered by name prefix. Unlike ListStreams it reports store
  // failures. The page is shorter than the limit only when it is the last one.
  Result<std::vector<StreamDescriptor>> ListStreamsPage(const StreamScope& scope,
                                                        const ListStreamsOptions& options) const;

  // Appends one event and returns its offset. `now_ms` is stored as appended_at_ms and drives
  // age retention (A3, P2).
  Result<uint64_t> Append(const StreamScope& scope, std::string_view name,
                          std::optional<std::string> key, std::string payload, uint64_t now_ms);
  Result<uint64_t> AppendAuthorized(const std::optional<std::string>& principal_tenant,
                                    const StreamScope& target, std::string_view name,
                                    std::optional<std::string> key, std::string payload,
                                    bool has_cross_tenant_cap, uint64_t now_ms);
  // Appends a batch atomically at consecutive offsets.
  Result<AppendResult> AppendBatch(const StreamScope& scope, std::string_view name,
                                   std::vector<AppendRecord> records,
                                   const AppendOptions& options = {});
  // The asynchronous form: `done` runs exactly once, when the batch is durable (or refused),
  // possibly on a store thread and possibly before this call returns.
  void AppendBatchAsync(const StreamScope& scope, std::string_view name,
                        std::vector<AppendRecord> records, const AppendOptions& options,
                        AppendCallback done);

  // Up to `limit` events with offset >= from (D1). Pure (D4).
  Result<std::vector<StreamEvent>> ReadSince(const StreamScope& scope, std::string_view name,
                                             uint64_t from, size_t limit) const;
  Result<std::vector<StreamEvent>> ReadSinceAuthorized(
      const std::optional<std::string>& principal_tenant, const StreamScope& target,
      std::string_view name, uint64_t from, size_t limit, bool has_cross_tenant_cap) const;
  // Up to `limit` events with offset > after (D2).
  Result<std::vector<StreamEvent>> ReadAfter(const StreamScope& scope, std::string_view name,
                                             uint64_t after, size_t limit) const;

  // Monotonic: stores max(saved, offset) and returns the stored value (C2).
  Result<uint64_t> SaveOffset(const StreamScope& scope, std::string_view name,
                              std::string_view consumer, uint64_t offset);
  // 0 for a consumer that never saved (C1).
  Result<uint64_t> GetOffset(const StreamScope& scope, std::string_view name,
                             std::string_view consumer) const;

  // --- Consumer groups (seed 001) ---
  //
  // A group's acknowledged offset and a consumer's saved offset are the same thing: a named,
  // monotonic cursor on the stream. Ack(g, n) == SaveOffset(g, n).

  Status Ack(const StreamScope& scope, std::string_view name, std::string_view group,
             uint64_t offset);
  // ReadAfter(last acked or 0, limit) (C5).
  Result<std::vector<StreamEvent>> ReadNext(const StreamScope& scope, std::string_view name,
                                            std::string_view group, size_t limit) const;
  // Deletes events with offset <= min(through, smallest group offset); returns how many (P7-P9).
  Result<uint64_t> Prune(const StreamScope& scope, std::string_view name, uint64_t through);
  Result<std::vector<ConsumerGroupStatus>> ConsumerGroupInfo(const StreamScope& scope,
                                                             std::string_view name) const;
  // Forgets a group (an extension: the seeds have no delete). kNotFound when the stream has no
  // such group. It no longer pins Prune (P8) or counts in ConsumerGroupInfo; a later Ack of
  // the name registers a new group at that offset, however small (C4).
  Status DeleteGroup(const StreamScope& scope, std::string_view name, std::string_view group);
  // Wake-up hints for appends to this stream only (N4). `group` is accepted for the seed's
  // signature and ignored (N3). If last_seq is below the tail, one hint is pending at once.
  Result<Subscription> Subscribe(const StreamScope& scope, std::string_view name,
                                 std::string_view group, std::optional<uint64_t> last_seq);
  // The same, with `on_hint` called (from an appending thread, outside registry locks) for every
  // hint in addition to the pending flag. Used by servers to wake their event loops.
  Result<Subscription> Subscribe(const StreamScope& scope, std::string_view name,
                                 std::string_view group, std::optional<uint64_t> last_seq,
                                 std::function<void()> on_hint);

  // --- Lifecycle extensions ---

  // Wakes the stream's waiting readers at once (they re-read and find it gone).
  Status DeleteStream(const StreamScope& scope, std::string_view name);
  // Hints every subscriber of the stream, as an append would: for a layer that changed the
  // stream through store() directly (deleted it, say), so waiting readers notice now rather
  // than at their timeout.
  void WakeReaders(StreamId id);
  Status SetRetention(const StreamScope& scope, std::string_view name,
                      const StreamRetention& retention);
  Status Flush();

  // --- Authorized variants (Z6): checked by CheckStreamAccess before existence (Z4) ---

  Status CreateStreamAuthorized(const Principal& who, const StreamScope& target,
                                std::string_view name, const CreateStreamOptions& options);
  Result<bool> ExistsAuthorized(const Principal& who, const StreamScope& target,
                                std::string_view name) const;
  Result<std::vector<StreamDescriptor>> ListStreamsAuthorized(const Principal& who,
                                                              const StreamScope& target) const;
  Result<std::vector<StreamDescriptor>> ListStreamsPageAuthorized(
      const Principal& who, const StreamScope& target, const ListStreamsOptions& options) const;
  Result<std::optional<StreamDescriptor>> DescribeAuthorized(const Principal& who,
                                                             const StreamScope& target,
                                                             std::string_view name) const;
  Result<AppendResult> AppendBatchAuthorized(const Principal& who, const StreamScope& target,
                                             std::string_view name,
                                             std::vector<AppendRecord> records,
                                             const AppendOptions& options = {});
  Result<std::vector<StreamEvent>> ReadAfterAuthorized(const Principal& who,
                                                       const StreamScope& target,
                                                       std::string_view name, uint64_t after,
                                                       size_t limit) const;
  Result<uint64_t> SaveOffsetAuthorized(const Principal& who, const StreamScope& target,
                                        std::string_view name, std::string_view consumer,
                                        uint64_t offset);
  Result<uint64_t> GetOffsetAuthorized(const Principal& who, const StreamScope& target,
                                       std::string_view name, std::string_view consumer) const;
  Status AckAuthorized(const Principal& who, const StreamScope& target, std::string_view name,
                       std::string_view group, uint64_t offset);
  Result<std::vector<StreamEvent>> ReadNextAuthorized(const Principal& who,
                                                      const StreamScope& target,
                                                      std::string_view name, std::string_view group,
                                                      size_t limit) const;
  Result<uint64_t> PruneAuthorized(const Principal& who, const StreamScope& target,
                                   std::string_view name, uint64_t through);
  Result<std::vector<ConsumerGroupStatus>> ConsumerGroupInfoAuthorized(const Principal& who,
                                                                       const StreamScope& target,
                                                                       std::string_view name) const;
  Status DeleteGroupAuthorized(const Principal& who, const StreamScope& target,
                               std::string_view name, std::string_view group);
  Result<Subscription> SubscribeAuthorized(const Principal& who, const StreamScope& target,
                                           std::string_view name, std::string_view group,
                                           std::optional<uint64_t> last_seq);
  Status DeleteStreamAuthorized(const Principal& who, const StreamScope& target,
                                std::string_view name);

  // --- Introspection ---

  // The store under this registry (borrowed; lives as long as any copy of the registry). For
  // layers that need store features the registry does not wrap, such as producer state.
  Store& store() const;
  Clock& clock() const;
  // Streams remembered by scope and name for writes by name (src/core/stream_cache.h): shared
  // with the protocol layer over this registry, so the process keeps one such cache.
  internal::StreamCache& stream_cache() const;

 private:
  explicit StreamRegistry(std::shared_ptr<internal::RegistryCore> core);
  std::shared_ptr<internal::RegistryCore> core_;
};

}  // namespace runnel

#endif  // RUNNEL_REGISTRY_H_
