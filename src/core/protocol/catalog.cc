#include "core/protocol/catalog.h"

#include <algorithm>
#include <chrono>

#include "base/log.h"
#include "base/retry.h"
#include "core/attributes.h"
#include "core/protocol/rules.h"
#include "core/stream_cache.h"

namespace runnel::protocol {

namespace {

uint64_t NowMs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

}  // namespace

Catalog::Catalog(StreamRegistry registry, CatalogOptions options)
    : registry_(std::move(registry)), options_(std::move(options)) {
  if (options_.append_cache_streams > 0) {
    registry_.stream_cache().SetCapacity(options_.append_cache_streams);
  }
}

uint64_t Catalog::Now() const {
  return options_.now_ms ? options_.now_ms() : NowMs();
}

// The refusal of a write to a stream that exists but takes none: soft-deleted, or a channel's.
Status Catalog::RefuseWrite(const Meta& meta, std::string_view name, Refusal* refusal) {
  if (meta.soft_deleted) {
    if (refusal) *refusal = Refusal::kSoftDeleted;
    return Status::NotFound("stream '" + std::string(name) + "' was deleted");
  }
  if (meta.channel) {
    if (refusal) *refusal = Refusal::kChannel;
    return Status::FailedPrecondition(
        "stream '" + std::string(name) +
        "' belongs to a runnel channel: its records can be read but not appended to, trimmed or "
        "deleted");
  }
  return Status::OK();
}

Status Catalog::Delete(const StreamScope& scope, std::string_view name, Refusal* refusal) {
  if (refusal) *refusal = Refusal::kNone;
  ForgetCached(scope, name);
  RUNNEL_ASSIGN_OR_RETURN(Found found, Lookup(scope, name));
  RUNNEL_RETURN_IF_ERROR(RefuseWrite(found, name, refusal));
  return Remove(found.info, found.meta);
}

Result<StreamInfo> Catalog::UpdateRetention(const StreamScope& scope, std::string_view name,
                                            const StreamRetention& retention, Refusal* refusal) {
  if (refusal) *refusal = Refusal::kNone;
  ForgetCached(scope, name);
  RUNNEL_ASSIGN_OR_RETURN(Found found, Lookup(scope, name));
  RUNNEL_RETURN_IF_ERROR(RefuseWrite(found, name, refusal));
  if (found.meta.compaction) {
    return Status::InvalidArgument("stream '" + std::string(name) +
                                   "' uses Stream-Compaction, which takes no retention caps");
  }
  RUNNEL_RETURN_IF_ERROR(registry_.SetRetention(scope, name, retention));
  return registry_.store().GetStreamById(found.info.id);
}

void Catalog::Touch(const StreamInfo& info, const Meta& meta) {
  if (!meta.ttl_s) return;  // only a TTL is renewed by access
  const uint64_t now = Now();
  bool record = false;
  {
    MutexLock lock(access_mu_);
    last_access_ms_[info.id] = now;
    if (!registry_.store().SharedWithOtherNodes()) return;
    // Other nodes see this node's accesses only through the metadata: record one when the
    // newest recorded access (or the creation) is a quarter of the TTL old.
    uint64_t& recorded = recorded_access_ms_[info.id];
    recorded = std::max({recorded, meta.touched_ms, info.spec.created_at_ms});
    if (protocol::RecordAccessDue(meta, recorded, now)) {
      recorded = now;
      record = true;
    }
  }
  if (!record) return;
  const StreamId id = info.id;
  std::function<void()> write = [this, id, now] {
    Status written =
        UpdateMeta(id, [now](Meta* m) { m->touched_ms = std::max(m->touched_ms, now); });
    if (!written.ok() && written.code() != StatusCode::kNotFound) {
      LogF(LogLevel::kWarn, "cannot record an access of stream %llu: %s",
           static_cast<unsigned long long>(id), written.ToString().c_str());
    }
  };
  if (options_.background) {
    options_.background(std::move(write));
  } else {
    write();
  }
}

bool Catalog::Expired(const StreamInfo& info, const Meta& meta) {
  // The rule is core's (SEMANTICS E1-E3); this node's access times are kept here.
  protocol::ExpiryClock clock;
  clock.now_ms = Now();
  clock.grace_ms = options_.ttl_grace_ms;
  clock.shared_with_other_nodes = registry_.store().SharedWithOtherNodes();
  if (meta.ttl_s) {
    MutexLock lock(access_mu_);
    auto [it, inserted] = last_access_ms_.emplace(info.id, clock.now_ms);
    clock.last_access_ms = it->second;
  }
  return protocol::Expired(meta, clock);
}

Result<Found> Catalog::Lookup(const StreamScope& scope, std::string_view name) {
  auto info = registry_.store().GetStream(scope.Label(), name);
  if (!info.ok()) {
    if (info.status().code() == StatusCode::kNotFound) {
      return Status::NotFound("stream '" + std::string(name) + "' does not exist");
    }
    return info.status();
  }
  Meta meta = Meta::Parse(info->spec.attributes);
  Found found{std::move(*info), std::move(meta)};
  if (found.meta.creating) {
    // Another request is committing this stream's initial records: no one else may see it (an
    // append would land before them). One still unfinished after kStaleCreationMs was
    // interrupted (its node stopped): it is removed, and the name is free again.
    const uint64_t now = registry_.clock().NowMs();
    if (now >= found.info.spec.created_at_ms + kStaleCreationMs) {
      Status removed = Remove(found.info, found.meta);
      (void)removed;
    }
    return Status::NotFound("stream '" + std::string(name) + "' does not exist (yet)");
  }
  if (!found.meta.soft_deleted && Expired(found.info, found.meta)) {
    Status removed = Remove(found.info, found.meta);
    (void)removed;
    return Status::NotFound("stream '" + std::string(name) + "' has expired");
  }
  return found;
}

Result<StreamInfo> Catalog::LookupLive(const StreamScope& scope, std::string_view name) {
  RUNNEL_ASSIGN_OR_RETURN(Found found, Lookup(scope, name));
  if (found.meta.soft_deleted) {
    return Status::NotFound("stream '" + std::string(name) + "' does not exist");
  }
  return std::move(found.info);
}

Status Catalog::UpdateMeta(StreamId id, const std::function<void(Meta*)>& change) {
  return UpdateMetaIf(id, [&](Meta* m) {
    change(m);
    return Status::OK();
  });
}

Status Catalog::UpdateMetaIf(StreamId id, const std::function<Status(Meta*)>& change) {
  MutexLock lock(meta_mu_);
  // A compare-and-set of the attributes: another node sharing the store, or an append with a
  // Stream-Seq, may change them between the read and the write; then read again.
  return RetryOnConflict([&]() -> Status {
    RUNNEL_ASSIGN_OR_RETURN(StreamInfo info, registry_.store().GetStreamById(id));
    Meta meta = Meta::Parse(info.spec.attributes);
    RUNNEL_RETURN_IF_ERROR(change(&meta));
    RUNNEL_ASSIGN_OR_RETURN(std::string attrs, attributes::Set(info.spec.attributes,
                                                               Meta::kAttributeKey, meta.Stored()));
    // The retention is left as stored: a PATCH racing this write must not be undone by it.
    return registry_.store().UpdateStream(id, std::nullopt, attrs, info.spec.attributes,
                                          std::nullopt);
  });
}

Status Catalog::SoftDelete(StreamId id) {
  MutexLock lock(meta_mu_);
  return RetryOnConflict([&]() -> Status {  // a compare-and-set, as in UpdateMeta
    RUNNEL_ASSIGN_OR_RETURN(StreamInfo info, registry_.store().GetStreamById(id));
    Meta meta = Meta::Parse(info.spec.attributes);
    meta.soft_deleted = true;
    RUNNEL_ASSIGN_OR_RETURN(std::string attrs, attributes::Set(info.spec.attributes,
                                                               Meta::kAttributeKey, meta.Stored()));
    Status s;
    if (!info.closed) {
      // Closing in the same commit makes the store refuse every later append, including one a
      // node decided from a remembered lookup (append_cache_).
      AppendRequest request;
      request.stream = id;
      request.now_ms = registry_.clock().NowMs();
      request.close = true;
      request.attributes = attrs;
      request.expected_attributes = info.spec.attributes;
      s = registry_.store().AppendAndWait(std::move(request)).status();
    }
    // Closed (by someone else meanwhile): the store already refuses appends; set the mark alone.
    if (info.closed || s.code() == StatusCode::kFailedPrecondition) {
      s = registry_.store().UpdateStream(id, std::nullopt, attrs, info.spec.attributes,
                                         std::nullopt);
    }
    return s;
  });
}

// A source lists its forks by id, and a fork names its source by id: adding a fork to the list
// and removing it are idempotent, so a node that stops anywhere between a fork's creation and
// its listing, or between a fork's removal and its unlisting, leaves nothing that miscounts. A
// fork created but never listed unlists nothing when it is removed (a count would have been
// decremented for it, releasing a source that other forks still hold); a fork removed but left
// listed is found dead (ForgetDeadForks) when the source itself is acted on: its DELETE, or a
// PUT of its name while it is soft-deleted. Not at every removal of another of its forks: that
// would read every remaining fork each time, quadratic in the forks of one source.
Status Catalog::Remove(const StreamInfo& first, const Meta& first_meta) {
  // A loop, not recursion: removing the last fork of a chain of soft-deleted forks collects the
  // whole chain, however long.
  StreamInfo info = first;
  Meta meta = first_meta;
  for (;;) {
    if (meta.HasForks()) {
      RUNNEL_RETURN_IF_ERROR(ForgetDeadForks(info.id, &meta));
      if (meta.HasForks()) return meta.soft_deleted ? Status::OK() : SoftDelete(info.id);
    }
    RUNNEL_RETURN_IF_ERROR(registry_.store().DeleteStream(info.id));
    registry_.WakeReaders(info.id);  // live readers end now, not at their timeout
    {
      MutexLock lock(access_mu_);
      last_access_ms_.erase(info.id);
      recorded_access_ms_.erase(info.id);
    }
    // Drop this fork from its source; collect a soft-deleted source with no forks left.
    Result<StreamInfo> source = Status::NotFound("");
    if (meta.fork_source_id) {
      source = registry_.store().GetStreamById(*meta.fork_source_id);
    } else if (meta.fork_ns && meta.fork_name) {  // a fork from before the list: by name
      source = registry_.store().GetStream(*meta.fork_ns, *meta.fork_name);
    }
    if (!source.ok()) return Status::OK();
    const StreamId fork = info.id;
    const bool listed = meta.fork_source_id.has_value();
    Meta after;
    RUNNEL_RETURN_IF_ERROR(UpdateMeta(source->id, [&](Meta* m) {
      if (listed) {
        std::erase(m->fork_ids, fork);
      } else if (m->fork_refs > 0) {
        --m->fork_refs;
      }
      after = *m;
    }));
    if (!after.soft_deleted || after.HasForks()) return Status::OK();
    auto again = registry_.store().GetStreamById(source->id);
    if (!again.ok()) return Status::OK();
    info = *again;
    meta = Meta::Parse(again->spec.attributes);
  }
}

Status Catalog::TooManyForks(std::string_view source_name) const {
  return Status::FailedPrecondition("stream '" + std::string(source_name) + "' already has " +
                                    std::to_string(options_.max_forks_per_stream) +
                                    " forks, the most a stream may have");
}

Status Catalog::ForgetDeadForks(StreamId id, Meta* meta) {
  std::vector<StreamId> dead;
  for (StreamId fork : meta->fork_ids) {
    auto found = registry_.store().GetStreamById(fork);
    if (found.ok()) {
      if (Meta::Parse(found->spec.attributes).fork_source_id == id) continue;
    } else if (found.status().code() != StatusCode::kNotFound) {
      return found.status();
    }
    dead.push_back(fork);
  }
  if (dead.empty()) return Status::OK();
  return UpdateMeta(id, [&](Meta* m) {
    std::erase_if(m->fork_ids,
                  [&](StreamId f) { return std::find(dead.begin(), dead.end(), f) != dead.end(); });
    *meta = *m;
  });
}

}  // namespace runnel::protocol
