// KeyLookup and DurableChannel's pending appends and idempotency keys.
#include "runnel/channel.h"

#include <algorithm>
#include <cstdio>
#include <future>
#include <span>
#include <string>
#include <utility>

#include "base/log.h"
#include "base/retry.h"
#include "core/attributes.h"
#include "core/channel/channel_internal.h"
#include "core/channel/checkpoint_format.h"
#include "core/channel/envelope_format.h"
#include "core/channel/key_index.h"

namespace runnel {

using channel_internal::EnvelopeErrorAt;
using channel_internal::Where;

// ---- KeyLookup ----

KeyLookup::KeyLookup(StreamRegistry registry, StreamScope scope,
                     std::vector<std::string> stream_keys)
    : registry_(std::move(registry)),
      scope_(std::move(scope)),
      stream_keys_(std::move(stream_keys)) {}

Result<AppendResolution> KeyLookup::Find(std::string_view key,
                                         const std::vector<uint64_t>& from) const {
  Store& store = registry_.store();
  for (size_t p = 0; p < stream_keys_.size(); ++p) {
    auto info = store.GetStream(scope_.Label(), stream_keys_[p]);
    if (!info.ok()) return info.status().Annotate("StoreError: " + stream_keys_[p]);
    uint64_t next = (p < from.size() ? from[p] : 0) + 1;
    for (;;) {
      auto rows =
          store.Read(info->id, next, DurableChannel::kReadBatchSize, StreamRegistry::kMaxReadBytes);
      if (!rows.ok()) return rows.status().Annotate("StoreError: " + stream_keys_[p]);
      if (rows->empty()) break;
      for (const StoredRecord& r : *rows) {
        auto env = DecodeEnvelope(r.payload);
        if (!env.ok()) return EnvelopeErrorAt(stream_keys_[p], r.offset - 1, env.status());
        if (env->idempotency_key && *env->idempotency_key == key) {
          return AppendResolution::Committed(p, r.offset - 1);
        }
        next = r.offset + 1;
      }
    }
  }
  return AppendResolution::Absent();
}

// ---- Pending appends ----

Result<std::optional<AppendResolution>> DurableChannel::ResolvePending() {
  last_error_.reset();
  return ResolveImpl();
}

Result<std::optional<AppendResolution>> DurableChannel::ResolveImpl() {
  if (!pending_) return std::optional<AppendResolution>();  // U3
  const size_t p = pending_->partition;
  const uint64_t sequence = pending_->sequence;
  auto unreadable = [&](const Status& read_error) {
    ChannelError e{
        ChannelError::Kind::kPendingAppendUnreadable,
        Status::FailedPrecondition("PendingAppendUnreadable: " + Where(stream_keys_[p], sequence) +
                                   ": append error: " + pending_->append_error.ToString() +
                                   "; read error: " + read_error.ToString()),
        stream_keys_[p], sequence};
    e.append_error = pending_->append_error;
    e.read_error = read_error;
    return Fail(std::move(e));
  };
  Store& store = registry_->store();
  auto slot = store.ReadAt(stream_ids_[p], sequence + 1);
  if (!slot.ok()) return unreadable(slot.status());  // U5: the evidence stays
  if (!slot->has_value()) {
    // Empty means "never written" only if the slot is at or past the stream's end; a slot
    // below it was written and removed by retention, and cannot be told apart.
    auto info = store.GetStreamById(stream_ids_[p]);
    if (!info.ok()) return unreadable(info.status());
    if (info->next_offset > sequence + 1) {
      return unreadable(Status::NotFound("the slot was written and then removed by retention"));
    }
    pending_.reset();
    return std::optional<AppendResolution>(AppendResolution::Absent());
  }
  const StoredRecord& row = **slot;
  const bool own = row.payload == pending_->payload;
  next_[p] = std::max(next_[p], sequence + 1);
  if (scanned_[p] == sequence) {
    auto env = DecodeEnvelope(row.payload);
    // An undecodable foreign row is left for CatchUp to report by name (V7).
    // A full index leaves the row for CatchUp to report too.
    if (env.ok() && IndexRow(p, sequence, *env).ok()) {
      scanned_[p] = sequence + 1;
      last_fp_[p] = channel::RowFingerprint(row.payload);
    }
  }
  pending_.reset();
  if (own) {
    return std::optional<AppendResolution>(AppendResolution::Committed(p, sequence));
  }
  return std::optional<AppendResolution>(AppendResolution::Absent());
}

void DurableChannel::AbandonPending() {
  pending_.reset();
}

// ---- Idempotency keys ----

Result<AppendResolution> DurableChannel::FindIdempotencyKey(std::string_view key,
                                                            const std::vector<uint64_t>& from) {
  last_error_.reset();
  if (pending_ && pending_->idempotency_key && *pending_->idempotency_key == key) {
    ChannelError e{ChannelError::Kind::kAppendUnresolved,
                   Status::FailedPrecondition("AppendUnresolved: key '" + std::string(key) +
                                              "' is held by the unresolved append at " +
                                              Where(pending_->stream_key, pending_->sequence) +
                                              "; resolve it first"),
                   pending_->stream_key, pending_->sequence};
    return Fail(std::move(e));
  }
  for (size_t p = 0; p < stream_keys_.size(); ++p) {
    if (Status s = CatchUp(p); !s.ok()) {
      return Fail({s.code() == StatusCode::kCorruption ? ChannelError::Kind::kEnvelopeError
                                                       : ChannelError::Kind::kStoreError,
                   s, stream_keys_[p]});
    }
  }
  std::optional<AppendResolution> hit;
  if (Status s = IndexLookup(key, channel::KeyIndex::Hash(key), &hit); !s.ok()) {
    return Fail({s.code() == StatusCode::kCorruption ? ChannelError::Kind::kEnvelopeError
                                                     : ChannelError::Kind::kStoreError,
                 s});
  }
  if (!hit) return AppendResolution::Absent();
  const AppendResolution& r = *hit;
  if (r.partition < from.size() && r.sequence < from[r.partition]) {
    return AppendResolution::Absent();
  }
  return r;
}

Result<AppendResolution> DurableChannel::ResolveIdempotencyKey(std::string_view key) {
  if (pending_ && pending_->idempotency_key && *pending_->idempotency_key == key) {
    RUNNEL_ASSIGN_OR_RETURN(std::optional<AppendResolution> settled, ResolvePending());
    if (settled) return *settled;
  }
  return FindIdempotencyKey(key);
}

}  // namespace runnel
