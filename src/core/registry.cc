#include "runnel/registry.h"
#include "base/mutex.h"

#include <algorithm>
#include <future>
#include <limits>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "base/retry.h"
#include "core/protocol/meta.h"
#include "core/stream_cache.h"
#include "core/subscription_hub.h"
#include "runnel/log_store.h"
#include "runnel/postgres_store.h"
#include "store/retention.h"

namespace runnel {
namespace internal {

// The shared state behind every copy of a StreamRegistry.
class RegistryCore {
 public:
  RegistryCore(std::unique_ptr<Store> store, Clock* clock)
      : clock_(clock ? clock : Clock::Real()), store_(std::move(store)) {
    id_cache_enabled_ = store_->Name() == "postgres";
    store_->SetTailListener([this](StreamId id, uint64_t) { hub_.Notify(id); });
    store_->SetWatchedStreams([this] { return hub_.Watched(); });
  }
  ~RegistryCore() {
    store_->SetWatchedStreams(nullptr);
    store_->SetTailListener(nullptr);
  }

  Store& store() { return *store_; }
  Clock& clock() { return *clock_; }

  // Name -> stream for writes by name (core/stream_cache.h). The registry remembers what it
  // looks up only where every lookup is a database round trip (postgres): in-process stores
  // look names up in memory. The protocol catalog over this registry shares the cache.
  bool id_cache_enabled() const { return id_cache_enabled_; }
  StreamCache& cache() { return cache_; }
  std::optional<StreamId> CachedId(const std::string& key) {
    StreamCache::Entry entry = cache_.Get(key);
    if (entry == nullptr) return std::nullopt;
    return entry->info.id;
  }
  void WakeReaders(StreamId id) { hub_.Notify(id); }

  void ForgetId(const std::string& key) { cache_.Erase(key); }
  static std::string CacheKey(const StreamScope& scope, std::string_view name) {
    return StreamCache::Key(scope, name);
  }

  Result<StreamInfo> Lookup(const StreamScope& scope, std::string_view name) {
    auto info = store_->GetStream(scope.Label(), name);
    if (id_cache_enabled_) {
      if (info.ok()) {
        cache_.Put(CacheKey(scope, name),
                   std::make_shared<const protocol::Found>(
                       protocol::Found{*info, protocol::Meta::Parse(info->spec.attributes)}));
      } else if (info.status().code() == StatusCode::kNotFound) {
        ForgetId(CacheKey(scope, name));
      }
    }
    if (!info.ok() && info.status().code() == StatusCode::kNotFound) {
      return Status::NotFound("stream '" + std::string(name) + "' does not exist in " +
                              scope.Label());
    }
    return info;
  }

  Result<Subscription> Subscribe(const StreamScope& scope, std::string_view name,
                                 std::optional<uint64_t> last_seq, std::function<void()> on_hint) {
    RUNNEL_ASSIGN_OR_RETURN(StreamInfo info, Lookup(scope, name));
    auto subscriber = std::make_shared<Subscriber>(std::move(on_hint));
    hub_.Add(info.id, subscriber);
    store_->ReaderWaiting(info.id);
    // N3: close the read/subscribe race. Re-read the tail after registering, so an append that
    // landed in between is seen either here or by the hub.
    RUNNEL_ASSIGN_OR_RETURN(StreamInfo now, store_->GetStreamById(info.id));
    if (last_seq && *last_seq < now.tail_offset) subscriber->Hint();
    return Subscription(std::move(subscriber));
  }

 private:
  Clock* const clock_;
  SubscriptionHub hub_;
  StreamCache cache_;
  bool id_cache_enabled_ = false;
  // Declared last so it is destroyed first, while the hub its listener points at still lives.
  std::unique_ptr<Store> store_;
};

}  // namespace internal

namespace {

StreamDescriptor ToDescriptor(const StreamScope& scope, const StreamInfo& info) {
  StreamDescriptor d;
  d.scope = scope;
  d.name = info.spec.name;
  d.retention = info.spec.retention;
  d.head_offset = info.head_offset;
  d.tail_offset = info.tail_offset;
  d.event_count = info.event_count;
  d.next_offset = info.next_offset;
  d.retained_bytes = info.retained_bytes;
  d.closed = info.closed;
  d.content_type = info.spec.content_type;
  return d;
}

std::vector<StreamEvent> ToEvents(const StreamScope& scope, std::string_view name,
                                  std::vector<StoredRecord> records) {
  std::vector<StreamEvent> out;
  out.reserve(records.size());
  for (StoredRecord& r : records) {
    out.push_back(StreamEvent{scope, std::string(name), r.offset, r.appended_at_ms,
                              std::move(r.key), std::move(r.payload)});
  }
  return out;
}

}  // namespace

// ---- Subscription ----

Subscription::Subscription(std::shared_ptr<internal::Subscriber> subscriber)
    : subscriber_(std::move(subscriber)) {}
Subscription::Subscription(Subscription&&) noexcept = default;
Subscription& Subscription::operator=(Subscription&&) noexcept = default;
Subscription::~Subscription() = default;

bool Subscription::WaitFor(std::chrono::milliseconds timeout) {
  return subscriber_ && subscriber_->WaitFor(timeout);
}
bool Subscription::TryConsume() {
  return subscriber_ && subscriber_->TryConsume();
}

// ---- StreamRegistry ----

StreamRegistry::StreamRegistry() : StreamRegistry(NewMemoryStore()) {}

StreamRegistry::StreamRegistry(std::unique_ptr<Store> store, Clock* clock)
    : core_(std::make_shared<internal::RegistryCore>(std::move(store), clock)) {}

StreamRegistry::StreamRegistry(std::shared_ptr<internal::RegistryCore> core)
    : core_(std::move(core)) {}

Result<StreamRegistry> StreamRegistry::Open(const RegistryOptions& options) {
  if (options.store == "memory") return StreamRegistry(NewMemoryStore(), options.clock);
  if (options.store == "log") {
    LogStoreOptions log_options;
    log_options.dir = options.data_dir;
    RUNNEL_ASSIGN_OR_RETURN(log_options.durability, ParseLogDurability(options.durability));
    log_options.clock = options.clock;
    log_options.salvage = options.salvage;
    log_options.group_commit_wait_us = options.group_commit_wait_us;
    log_options.scrub_bytes_per_sec = options.scrub_bytes_per_sec;
    log_options.on_damage = options.on_damage;
    if (options.log_segment_size != 0) log_options.segment_size = options.log_segment_size;
    RUNNEL_ASSIGN_OR_RETURN(auto store, OpenLogStore(log_options));
    return StreamRegistry(std::move(store), options.clock);
  }
  if (options.store.starts_with("postgres://") || options.store.starts_with("postgresql://")) {
    PostgresStoreOptions pg;
    pg.conninfo = options.store;
    if (!options.postgres_schema.empty()) pg.schema = options.postgres_schema;
    if (options.postgres_reply_timeout_ms > 0) {
      pg.reply_timeout = std::chrono::milliseconds(options.postgres_reply_timeout_ms);
    }
    pg.clock = options.clock;
    RUNNEL_ASSIGN_OR_RETURN(auto store, OpenPostgresStore(pg));
    return StreamRegistry(std::move(store), options.clock);
  }
  return Status::InvalidArgument("unknown store '" + options.store +
                                 "' (known: memory, log, postgres://..., postgresql://...)");
}

Store& StreamRegistry::store() const {
  return core_->store();
}
Clock& StreamRegistry::clock() const {
  return core_->clock();
}
internal::StreamCache& StreamRegistry::stream_cache() const {
  return core_->cache();
}

Status StreamRegistry::CreateStream(const StreamScope& scope, std::string_view name,
                                    const StreamRetention& retention) {
  CreateStreamOptions options;
  options.retention = retention;
  return CreateStream(scope, name, options);
}

Status StreamRegistry::CreateStream(const StreamScope& scope, std::string_view name,
                                    const CreateStreamOptions& options) {
  RUNNEL_RETURN_IF_ERROR(store::ValidateStreamName(name));
  RUNNEL_RETURN_IF_ERROR(store::ValidateRetention(options.retention));
  StreamSpec spec;
  spec.ns = scope.Label();
  spec.name = std::string(name);
  spec.retention = options.retention;
  spec.content_type = options.content_type;
  spec.attributes = options.attributes;
  spec.first_offset = options.first_offset;
  spec.created_at_ms = core_->clock().NowMs();
  auto created = core_->store().CreateStream(spec);
  if (!created.ok() && created.status().code() == StatusCode::kAlreadyExists) {
    return Status::AlreadyExists("stream '" + std::string(name) + "' already exists in " +
                                 scope.Label());
  }
  return created.status();
}

bool StreamRegistry::Exists(const StreamScope& scope, std::string_view name) const {
  return core_->Lookup(scope, name).ok();
}

std::vector<StreamDescriptor> StreamRegistry::ListStreams(const StreamScope& scope) const {
  std::vector<StreamDescriptor> out;
  std::string after;
  const std::string ns = scope.Label();
  for (;;) {
    auto page = core_->store().ListStreams(ns, after, kMaxReadLimit);
    if (!page.ok() || page->empty()) break;
    for (const StreamInfo& info : *page) out.push_back(ToDescriptor(scope, info));
    after = page->back().spec.name;
  }
  return out;
}

Result<std::vector<StreamDescriptor>> StreamRegistry::ListStreamsPage(
    const StreamScope& scope, const ListStreamsOptions& options) const {
  const size_t limit = std::clamp<size_t>(options.limit, 1, kMaxReadLimit);
  RUNNEL_ASSIGN_OR_RETURN(auto page,
                          core_->store().ListStreamsWithPrefix(scope.Label(), options.prefix,
                                                               options.start_after, limit));
  std::vector<StreamDescriptor> out;
  out.reserve(page.size());
  for (const StreamInfo& info : page) out.push_back(ToDescriptor(scope, info));
  return out;
}

std::optional<StreamDescriptor> StreamRegistry::Describe(const StreamScope& scope,
                                                         std::string_view name) const {
  auto info = core_->Lookup(scope, name);
  if (!info.ok()) return std::nullopt;
  return ToDescriptor(scope, *info);
}

Result<uint64_t> StreamRegistry::Append(const StreamScope& scope, std::string_view name,
                                        std::optional<std::string> key, std::string payload,
                                        uint64_t now_ms) {
  std::vector<AppendRecord> records;
  records.push_back(AppendRecord{std::move(key), std::move(payload)});
  AppendOptions options;
  options.now_ms = now_ms;
  RUNNEL_ASSIGN_OR_RETURN(AppendResult result,
                          AppendBatch(scope, name, std::move(records), options));
  return result.first_offset;
}

Result<uint64_t> StreamRegistry::AppendAuthorized(
    const std::optional<std::string>& principal_tenant, const StreamScope& target,
    std::string_view name, std::optional<std::string> key, std::string payload,
    bool has_cross_tenant_cap, uint64_t now_ms) {
  RUNNEL_RETURN_IF_ERROR(
      CheckStreamAccess(Principal{principal_tenant, has_cross_tenant_cap}, target, name));
  return Append(target, name, std::move(key), std::move(payload), now_ms);
}

Result<AppendResult> StreamRegistry::AppendBatch(const StreamScope& scope, std::string_view name,
                                                 std::vector<AppendRecord> records,
                                                 const AppendOptions& options) {
  std::promise<Result<AppendResult>> promise;
  auto future = promise.get_future();
  AppendBatchAsync(scope, name, std::move(records), options,
                   [&promise](Result<AppendResult> r) { promise.set_value(std::move(r)); });
  return future.get();
}

void StreamRegistry::AppendBatchAsync(const StreamScope& scope, std::string_view name,
                                      std::vector<AppendRecord> records,
                                      const AppendOptions& options, AppendCallback done) {
  AppendRequest request;
  request.records = std::move(records);
  request.now_ms = options.now_ms ? *options.now_ms : core_->clock().NowMs();
  request.expected_offset = options.expected_offset;
  request.producer = options.producer;
  request.attributes = options.attributes;
  request.close = options.close;
  std::optional<StreamId> cached;
  std::string key;
  if (core_->id_cache_enabled()) {
    key = internal::RegistryCore::CacheKey(scope, name);
    cached = core_->CachedId(key);
  }
  if (!cached) {
    auto info = core_->Lookup(scope, name);
    if (!info.ok()) {
      done(info.status());
      return;
    }
    request.stream = info->id;
    core_->store().Append(std::move(request), std::move(done));
    return;
  }
  // A cached id may name a stream deleted meanwhile (perhaps recreated under the same name on
  // another node). The store refuses such an append definitely, so it is safe to look the name
  // up again and append once more; keep a copy of the request for that.
  request.stream = *cached;
  auto retry = std::make_shared<AppendRequest>(request);
  std::weak_ptr<internal::RegistryCore> weak = core_;
  core_->store().Append(std::move(request),
                        [weak, retry, scope, name = std::string(name), key = std::move(key),
                         done = std::move(done)](Result<AppendResult> r) mutable {
                          if (r.ok() || r.status().code() != StatusCode::kNotFound) {
                            done(std::move(r));
                            return;
                          }
                          // `done` runs only after the core is let go: the caller may drop the last
                          // registry handle as soon as it has its answer, and the core (which joins
                          // this store thread) must not be destroyed on this thread.
                          std::optional<Result<AppendResult>> answer;
                          {
                            auto core = weak.lock();
                            if (core == nullptr) {
                              answer.emplace(std::move(r));
                            } else {
                              core->ForgetId(key);
                              auto info = core->Lookup(scope, name);
                              if (!info.ok()) {
                                answer.emplace(info.status());
                              } else if (info->id == retry->stream) {
                                answer.emplace(std::move(r));
                              } else {
                                retry->stream = info->id;
                                core->store().Append(std::move(*retry), std::move(done));
                                return;
                              }
                            }
                          }
                          done(std::move(*answer));
                        });
}

Result<std::vector<StreamEvent>> StreamRegistry::ReadSince(const StreamScope& scope,
                                                           std::string_view name, uint64_t from,
                                                           size_t limit) const {
  RUNNEL_ASSIGN_OR_RETURN(StreamInfo info, core_->Lookup(scope, name));
  if (limit == 0) return std::vector<StreamEvent>{};
  limit = std::min(limit, kMaxReadLimit);
  RUNNEL_ASSIGN_OR_RETURN(auto records, core_->store().Read(info.id, std::max<uint64_t>(from, 1),
                                                            limit, kMaxReadBytes));
  return ToEvents(scope, name, std::move(records));
}

Result<std::vector<StreamEvent>> StreamRegistry::ReadSinceAuthorized(
    const std::optional<std::string>& principal_tenant, const StreamScope& target,
    std::string_view name, uint64_t from, size_t limit, bool has_cross_tenant_cap) const {
  RUNNEL_RETURN_IF_ERROR(
      CheckStreamAccess(Principal{principal_tenant, has_cross_tenant_cap}, target, name));
  return ReadSince(target, name, from, limit);
}

Result<std::vector<StreamEvent>> StreamRegistry::ReadAfter(const StreamScope& scope,
                                                           std::string_view name, uint64_t after,
                                                           size_t limit) const {
  if (after == std::numeric_limits<uint64_t>::max()) {
    RUNNEL_RETURN_IF_ERROR(core_->Lookup(scope, name).status());
    return std::vector<StreamEvent>{};
  }
  return ReadSince(scope, name, after + 1, limit);
}

Result<uint64_t> StreamRegistry::SaveOffset(const StreamScope& scope, std::string_view name,
                                            std::string_view consumer, uint64_t offset) {
  if (consumer.empty()) return Status::InvalidArgument("consumer name must not be empty");
  RUNNEL_ASSIGN_OR_RETURN(StreamInfo info, core_->Lookup(scope, name));
  return core_->store().CommitCursor(info.id, consumer, offset, core_->clock().NowMs());
}

Result<uint64_t> StreamRegistry::GetOffset(const StreamScope& scope, std::string_view name,
                                           std::string_view consumer) const {
  RUNNEL_ASSIGN_OR_RETURN(StreamInfo info, core_->Lookup(scope, name));
  RUNNEL_ASSIGN_OR_RETURN(auto cursor, core_->store().GetCursor(info.id, consumer));
  return cursor ? cursor->offset : 0;
}

Status StreamRegistry::Ack(const StreamScope& scope, std::string_view name, std::string_view group,
                           uint64_t offset) {
  return SaveOffset(scope, name, group, offset).status();
}

Result<std::vector<StreamEvent>> StreamRegistry::ReadNext(const StreamScope& scope,
                                                          std::string_view name,
                                                          std::string_view group,
                                                          size_t limit) const {
  RUNNEL_ASSIGN_OR_RETURN(uint64_t acked, GetOffset(scope, name, group));
  return ReadAfter(scope, name, acked, limit);
}

Result<uint64_t> StreamRegistry::Prune(const StreamScope& scope, std::string_view name,
                                       uint64_t through) {
  auto info = core_->Lookup(scope, name);
  // P9: pruning an unknown stream removes nothing.
  if (!info.ok() && info.status().code() == StatusCode::kNotFound) return uint64_t{0};
  RUNNEL_RETURN_IF_ERROR(info.status());
  return core_->store().TruncatePrefix(info->id, through, /*respect_cursors=*/true);
}

Status StreamRegistry::DeleteGroup(const StreamScope& scope, std::string_view name,
                                   std::string_view group) {
  if (group.empty()) return Status::InvalidArgument("group name must not be empty");
  RUNNEL_ASSIGN_OR_RETURN(StreamInfo info, core_->Lookup(scope, name));
  RUNNEL_ASSIGN_OR_RETURN(bool existed, core_->store().DeleteCursor(info.id, group));
  if (!existed) {
    return Status::NotFound("stream '" + std::string(name) + "' has no group '" +
                            std::string(group) + "'");
  }
  return Status::OK();
}

Result<std::vector<ConsumerGroupStatus>> StreamRegistry::ConsumerGroupInfo(
    const StreamScope& scope, std::string_view name) const {
  RUNNEL_ASSIGN_OR_RETURN(StreamInfo info, core_->Lookup(scope, name));
  RUNNEL_ASSIGN_OR_RETURN(auto cursors, core_->store().ListCursors(info.id));
  std::vector<ConsumerGroupStatus> out;
  out.reserve(cursors.size());
  for (CursorState& c : cursors) {
    out.push_back(
        ConsumerGroupStatus{std::move(c.consumer), std::string(name), c.offset, c.updated_at_ms});
  }
  return out;
}

Result<Subscription> StreamRegistry::Subscribe(const StreamScope& scope, std::string_view name,
                                               std::string_view /*group*/,
                                               std::optional<uint64_t> last_seq) {
  return core_->Subscribe(scope, name, last_seq, nullptr);
}

Result<Subscription> StreamRegistry::Subscribe(const StreamScope& scope, std::string_view name,
                                               std::string_view /*group*/,
                                               std::optional<uint64_t> last_seq,
                                               std::function<void()> on_hint) {
  return core_->Subscribe(scope, name, last_seq, std::move(on_hint));
}

Status StreamRegistry::DeleteStream(const StreamScope& scope, std::string_view name) {
  RUNNEL_ASSIGN_OR_RETURN(StreamInfo info, core_->Lookup(scope, name));
  Status deleted = core_->store().DeleteStream(info.id);
  if (core_->id_cache_enabled()) core_->ForgetId(internal::RegistryCore::CacheKey(scope, name));
  if (deleted.ok()) core_->WakeReaders(info.id);
  return deleted;
}

void StreamRegistry::WakeReaders(StreamId id) {
  core_->WakeReaders(id);
}

Status StreamRegistry::SetRetention(const StreamScope& scope, std::string_view name,
                                    const StreamRetention& retention) {
  RUNNEL_RETURN_IF_ERROR(store::ValidateRetention(retention));
  // The attributes are written back as read, on the condition that they are still those: a
  // change made meanwhile by another writer of a shared store (a Stream-Seq append) is not
  // undone, and the update is tried again over it.
  return RetryOnConflict([&]() -> Status {
    RUNNEL_ASSIGN_OR_RETURN(StreamInfo info, core_->Lookup(scope, name));
    return core_->store().UpdateStream(info.id, retention, info.spec.attributes,
                                       info.spec.attributes,
                                       /*expected_next_offset=*/std::nullopt);
  });
}

Status StreamRegistry::Flush() {
  return core_->store().Flush();
}

// ---- Authorized variants: access first, existence second (Z4) ----

Status StreamRegistry::CreateStreamAuthorized(const Principal& who, const StreamScope& target,
                                              std::string_view name,
                                              const CreateStreamOptions& options) {
  RUNNEL_RETURN_IF_ERROR(CheckStreamAccess(who, target, name));
  return CreateStream(target, name, options);
}

Result<bool> StreamRegistry::ExistsAuthorized(const Principal& who, const StreamScope& target,
                                              std::string_view name) const {
  RUNNEL_RETURN_IF_ERROR(CheckStreamAccess(who, target, name));
  return Exists(target, name);
}

Result<std::vector<StreamDescriptor>> StreamRegistry::ListStreamsAuthorized(
    const Principal& who, const StreamScope& target) const {
  RUNNEL_RETURN_IF_ERROR(CheckStreamAccess(who, target, "*"));
  return ListStreams(target);
}

Result<std::vector<StreamDescriptor>> StreamRegistry::ListStreamsPageAuthorized(
    const Principal& who, const StreamScope& target, const ListStreamsOptions& options) const {
  RUNNEL_RETURN_IF_ERROR(CheckStreamAccess(who, target, "*"));
  return ListStreamsPage(target, options);
}

Result<std::optional<StreamDescriptor>> StreamRegistry::DescribeAuthorized(
    const Principal& who, const StreamScope& target, std::string_view name) const {
  RUNNEL_RETURN_IF_ERROR(CheckStreamAccess(who, target, name));
  return Describe(target, name);
}

Result<AppendResult> StreamRegistry::AppendBatchAuthorized(const Principal& who,
                                                           const StreamScope& target,
                                                           std::string_view name,
                                                           std::vector<AppendRecord> records,
                                                           const AppendOptions& options) {
  RUNNEL_RETURN_IF_ERROR(CheckStreamAccess(who, target, name));
  return AppendBatch(target, name, std::move(records), options);
}

Result<std::vector<StreamEvent>> StreamRegistry::ReadAfterAuthorized(const Principal& who,
                                                                     const StreamScope& target,
                                                                     std::string_view name,
                                                                     uint64_t after,
                                                                     size_t limit) const {
  RUNNEL_RETURN_IF_ERROR(CheckStreamAccess(who, target, name));
  return ReadAfter(target, name, after, limit);
}

Result<uint64_t> StreamRegistry::SaveOffsetAuthorized(const Principal& who,
                                                      const StreamScope& target,
                                                      std::string_view name,
                                                      std::string_view consumer, uint64_t offset) {
  RUNNEL_RETURN_IF_ERROR(CheckStreamAccess(who, target, name));
  return SaveOffset(target, name, consumer, offset);
}

Result<uint64_t> StreamRegistry::GetOffsetAuthorized(const Principal& who,
                                                     const StreamScope& target,
                                                     std::string_view name,
                                                     std::string_view consumer) const {
  RUNNEL_RETURN_IF_ERROR(CheckStreamAccess(who, target, name));
  return GetOffset(target, name, consumer);
}

Status StreamRegistry::AckAuthorized(const Principal& who, const StreamScope& target,
                                     std::string_view name, std::string_view group,
                                     uint64_t offset) {
  RUNNEL_RETURN_IF_ERROR(CheckStreamAccess(who, target, name));
  return Ack(target, name, group, offset);
}

Result<std::vector<StreamEvent>> StreamRegistry::ReadNextAuthorized(const Principal& who,
                                                                    const StreamScope& target,
                                                                    std::string_view name,
                                                                    std::string_view group,
                                                                    size_t limit) const {
  RUNNEL_RETURN_IF_ERROR(CheckStreamAccess(who, target, name));
  return ReadNext(target, name, group, limit);
}

Result<uint64_t> StreamRegistry::PruneAuthorized(const Principal& who, const StreamScope& target,
                                                 std::string_view name, uint64_t through) {
  RUNNEL_RETURN_IF_ERROR(CheckStreamAccess(who, target, name));
  return Prune(target, name, through);
}

Result<std::vector<ConsumerGroupStatus>> StreamRegistry::ConsumerGroupInfoAuthorized(
    const Principal& who, const StreamScope& target, std::string_view name) const {
  RUNNEL_RETURN_IF_ERROR(CheckStreamAccess(who, target, name));
  return ConsumerGroupInfo(target, name);
}

Status StreamRegistry::DeleteGroupAuthorized(const Principal& who, const StreamScope& target,
                                             std::string_view name, std::string_view group) {
  RUNNEL_RETURN_IF_ERROR(CheckStreamAccess(who, target, name));
  return DeleteGroup(target, name, group);
}

Result<Subscription> StreamRegistry::SubscribeAuthorized(const Principal& who,
                                                         const StreamScope& target,
                                                         std::string_view name,
                                                         std::string_view group,
                                                         std::optional<uint64_t> last_seq) {
  RUNNEL_RETURN_IF_ERROR(CheckStreamAccess(who, target, name));
  return Subscribe(target, name, group, last_seq);
}

Status StreamRegistry::DeleteStreamAuthorized(const Principal& who, const StreamScope& target,
                                              std::string_view name) {
  RUNNEL_RETURN_IF_ERROR(CheckStreamAccess(who, target, name));
  return DeleteStream(target, name);
}

}  // namespace runnel
