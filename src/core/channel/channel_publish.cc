// DurableChannel: the publish path.
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

using channel_internal::Where;

namespace {

Status ValidateEnvelope(const MessageEnvelope& e) {
  auto check = [](std::string_view field, std::string_view value) -> Status {
    if (value.size() > channel::kMaxFieldLength) {
      return Status::InvalidArgument(std::string(field) + " is longer than 2^32-1 bytes");
    }
    if (!channel::IsValidUtf8(value)) {
      return Status::InvalidArgument(std::string(field) + " is not valid UTF-8");
    }
    return Status::OK();
  };
  RUNNEL_RETURN_IF_ERROR(check("publisher_id", e.publisher_id));
  if (e.idempotency_key) RUNNEL_RETURN_IF_ERROR(check("idempotency_key", *e.idempotency_key));
  if (e.key) RUNNEL_RETURN_IF_ERROR(check("key", *e.key));
  if (e.causal_context && e.causal_context->parent_id) {
    RUNNEL_RETURN_IF_ERROR(check("parent_id", *e.causal_context->parent_id));
  }
  if (e.payload.size() > channel::kMaxFieldLength) {
    return Status::InvalidArgument("payload is longer than 2^32-1 bytes");
  }
  return Status::OK();
}

}  // namespace

// ---- Publish ----

AppendRequest DurableChannel::RowRequest(size_t p, const std::string& bytes,
                                         const std::optional<std::string>& record_key) const {
  AppendRequest request;
  request.stream = stream_ids_[p];
  request.records.push_back(AppendRecord{record_key, bytes});
  request.now_ms = registry_->clock().NowMs();
  return request;
}

Result<AppendResult> DurableChannel::AppendAt(uint64_t sequence, AppendRequest&& request) {
  request.expected_offset = sequence + 1;
  std::promise<Result<AppendResult>> promise;
  auto future = promise.get_future();
  registry_->store().Append(
      std::move(request), [&promise](Result<AppendResult> r) { promise.set_value(std::move(r)); });
  return future.get();
}

Result<uint64_t> DurableChannel::Publish(const MessageEnvelope& envelope) {
  RUNNEL_ASSIGN_OR_RETURN(PublishReceipt receipt, PublishWithReceipt(envelope));
  return receipt.offset;
}

// Long because it is the hot publish path: the key's index prefetch, the first attempt's
// evidence and the one conflict retry share one frame; its steps are marked by rule ids.
Result<PublishReceipt> DurableChannel::PublishWithReceipt(const MessageEnvelope& envelope) {
  last_error_.reset();
  // U6: settle an earlier uncertain append first, with one read of its slot.
  if (pending_) {
    auto settled = ResolveImpl();
    if (!settled.ok()) return settled.status();
  }
  const std::optional<std::string>& key = envelope.idempotency_key;
  // Start loading the key's index slot now; validation and encoding hide the memory latency.
  const uint64_t key_hash = key ? channel::KeyIndex::Hash(*key) : 0;
  if (key) index_->Prefetch(key_hash);
  if (Status valid = ValidateEnvelope(envelope); !valid.ok()) {
    return Fail({ChannelError::Kind::kEnvelopeError,
                 Status::InvalidArgument("EnvelopeError: " + std::string(valid.message()))});
  }
  const size_t p = PartitionFor(envelope);
  const std::string bytes = EncodeEnvelope(envelope);
  auto duplicate = [](const AppendResolution& r) {
    return PublishReceipt{r.partition, r.sequence, r.offset, true};
  };
  auto fail_read = [&](const Status& s) {
    return Fail({s.code() == StatusCode::kCorruption ? ChannelError::Kind::kEnvelopeError
                                                     : ChannelError::Kind::kStoreError,
                 s, stream_keys_[p]});
  };
  // The evidence and the request of the first attempt (their sequence is set below). Built
  // before the key lookup: their copies overlap the load of the key's index slot.
  auto make_evidence = [&] {
    UnresolvedAppend evidence;
    evidence.channel = channel_id_;
    evidence.stream_key = stream_keys_[p];
    evidence.partition = p;
    evidence.payload = bytes;
    evidence.idempotency_key = key;
    return evidence;
  };
  UnresolvedAppend evidence = make_evidence();
  AppendRequest request = RowRequest(p, bytes, envelope.key);
  if (key) {
    // The index must cover every slot below the one this append reserves (see header).
    if (scanned_[p] < next_[p]) {
      if (Status s = CatchUp(p); !s.ok()) return fail_read(s);
    }
    if (check_all_partitions_) {
      for (size_t q = 0; q < stream_keys_.size(); ++q) {
        if (q == p) continue;
        if (Status s = CatchUp(q); !s.ok()) {
          return Fail({s.code() == StatusCode::kCorruption ? ChannelError::Kind::kEnvelopeError
                                                           : ChannelError::Kind::kStoreError,
                       s, stream_keys_[q]});
        }
      }
    }
    std::optional<AppendResolution> hit;
    if (Status s = IndexLookup(*key, key_hash, &hit); !s.ok()) return fail_read(s);
    if (hit) return duplicate(*hit);  // I4
    // The row this append writes must be indexable once it commits.
    if (index_->full()) {
      return Fail({ChannelError::Kind::kOverflow, IndexFull(), stream_keys_[p]});
    }
  }
  for (int attempt = 0;; ++attempt) {
    const uint64_t sequence = next_[p];
    if (sequence > kMaxSequence) {
      ChannelError e{ChannelError::Kind::kOverflow,
                     Status::OutOfRange("Overflow: " + Where(stream_keys_[p], sequence) +
                                        ": the partition has no slot left below 2^64-1"),
                     stream_keys_[p], sequence};
      return Fail(std::move(e));
    }
    // The evidence exists before the append is sent (seed: retained before the cancellable
    // append), so no outcome can leave the channel without it.
    if (attempt > 0) {
      evidence = make_evidence();
      request = RowRequest(p, bytes, envelope.key);
    }
    evidence.sequence = sequence;
    pending_ = std::move(evidence);

    auto appended = AppendAt(sequence, std::move(request));
    if (appended.ok()) {
      pending_.reset();
      if (appended->first_offset != sequence + 1) {
        return Fail({ChannelError::Kind::kStoreError,
                     Status::Internal("StoreError: " + Where(stream_keys_[p], sequence) +
                                      ": the store placed the guarded append at offset " +
                                      std::to_string(appended->first_offset)),
                     stream_keys_[p], sequence});
      }
      next_[p] = sequence + 1;
      if (scanned_[p] == sequence) {
        // Cannot fail: the index had room before the append and nothing else ran since.
        if (!key || index_->Insert(key_hash, p, sequence)) {
          scanned_[p] = sequence + 1;
          last_fp_[p] = channel::RowFingerprint(bytes);
        }
      }
      PublishReceipt receipt{p, sequence, sequence + 1, false};
      if (Status s = AfterCommit(); !s.ok()) {
        return Fail({ChannelError::Kind::kStoreError,
                     s.Annotate("StoreError: flush after the publish committed at " +
                                Where(stream_keys_[p], sequence)),
                     stream_keys_[p], sequence});
      }
      return receipt;
    }
    Status status = std::move(appended).status();
    if (status.code() == StatusCode::kOutcomeUnknown) {
      // U1: keep the evidence, never resend. S4: this is not a conflict.
      pending_->append_error = status;
      if (!status.message().empty()) pending_->cause = std::string(status.message());
      ChannelError e{
          ChannelError::Kind::kAppendUnresolved,
          Status::OutcomeUnknown("AppendUnresolved: " + Where(stream_keys_[p], sequence) + ": " +
                                 pending_->cause),
          stream_keys_[p], sequence};
      e.append_error = status;
      return Fail(std::move(e));
    }
    pending_.reset();  // a definite refusal: nothing was written
    if (status.code() == StatusCode::kConflict) {
      // S2: learn the rows we have not seen, adopt the tail, retry once.
      if (Status s = CatchUp(p); !s.ok()) return fail_read(s);
      const uint64_t actual = status.conflict_actual().value_or(1);
      next_[p] = std::max(scanned_[p], actual == 0 ? 0 : actual - 1);
      if (key) {
        std::optional<AppendResolution> hit;
        if (Status s = IndexLookup(*key, key_hash, &hit); !s.ok()) return fail_read(s);
        if (hit) return duplicate(*hit);
        if (index_->full()) {
          return Fail({ChannelError::Kind::kOverflow, IndexFull(), stream_keys_[p]});
        }
      }
      if (attempt == 0) continue;
      ChannelError e{
          ChannelError::Kind::kSequenceConflict,
          Status::Conflict(
              "SequenceConflict: " + Where(stream_keys_[p], sequence) + ": expected offset " +
                  std::to_string(status.conflict_expected().value_or(0)) + ", actual " +
                  std::to_string(actual) + " (second conflict; not retried)",
              status.conflict_expected().value_or(sequence + 1), actual),
          stream_keys_[p], sequence};
      e.expected = e.status.conflict_expected();
      e.actual = e.status.conflict_actual();
      return Fail(std::move(e));
    }
    if (status.code() == StatusCode::kOutOfRange) {
      return Fail({ChannelError::Kind::kOverflow,
                   Status::OutOfRange("Overflow: " + Where(stream_keys_[p], sequence) + ": " +
                                      std::string(status.message())),
                   stream_keys_[p], sequence});
    }
    return Fail({ChannelError::Kind::kStoreError,
                 status.Annotate("StoreError: " + Where(stream_keys_[p], sequence)),
                 stream_keys_[p], sequence});
  }
}

Status DurableChannel::AfterCommit() {
  ++since_flush_;
  if (++since_checkpoint_ >= channel::kCheckpointInterval) {
    // V3: a failed record costs only a longer restart; the publish stands.
    if (Status s = RecordCheckpoint(); !s.ok()) {
      Warn("head checkpoint not recorded: " + s.ToString());
      since_checkpoint_ = 0;
    }
  }
  const bool due =
      policy_.kind == CheckpointPolicy::Kind::kPerMessage ||
      (policy_.kind == CheckpointPolicy::Kind::kPerBatch && since_flush_ >= policy_.batch);
  if (!due) return Status::OK();
  return FlushOnly();
}

Status DurableChannel::FlushStore() {
  RUNNEL_RETURN_IF_ERROR(RecordCheckpoint());
  return FlushOnly();
}

Status DurableChannel::FlushOnly() {
  Status s = registry_->store().Flush();
  if (!s.ok()) return s;
  since_flush_ = 0;
  ++flush_count_;
  return Status::OK();
}

}  // namespace runnel
