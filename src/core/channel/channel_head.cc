// DurableChannel: the head checkpoint (V3), loaded on open and appended after publishes.
#include "runnel/channel.h"

#include <algorithm>
#include <cstdio>
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

using channel_internal::CheckpointTag;
using channel_internal::ConfigError;
using channel_internal::kAttributeKey;
using channel_internal::Where;

// ---- Head checkpoint (V3) ----

// Long because it reads the chain, verifies its last claim against the partitions and seeds the
// index in one pass over state that only holds together between those steps.
Result<bool> DurableChannel::LoadCheckpoint() {
  Store& store = registry_->store();
  const size_t n = stream_keys_.size();
  auto info = store.GetStream(scope_.Label(), checkpoint_key_);
  if (!info.ok()) {
    if (info.status().code() == StatusCode::kNotFound) return false;  // missing: full walk
    return info.status().Annotate("StoreError: opening " + checkpoint_key_);
  }
  auto tag = attributes::Get(info->spec.attributes, kAttributeKey);
  if (!tag.ok() || !tag->has_value() || **tag != CheckpointTag(n)) {
    return ConfigError("stream " + checkpoint_key_ +
                       " exists and is not the head checkpoint of a channel with " +
                       std::to_string(n) + " partitions");
  }
  checkpoint_id_ = info->id;
  checkpoint_next_ = info->next_offset;
  // The chain is the last base record and every record after it; a refused record before
  // that base does not matter.
  std::vector<channel::CheckpointRecord> chain;
  std::string problem;
  bool any = false;
  uint64_t from = 1;
  for (;;) {
    auto rows = store.Read(*checkpoint_id_, from, kReadBatchSize, StreamRegistry::kMaxReadBytes);
    if (!rows.ok()) return rows.status().Annotate("StoreError: reading " + checkpoint_key_);
    if (rows->empty()) break;
    for (StoredRecord& r : *rows) {
      any = true;
      from = r.offset + 1;
      checkpoint_next_ = std::max(checkpoint_next_, r.offset + 1);
      const std::string at = "the record at offset " + std::to_string(r.offset);
      auto record = channel::DecodeCheckpoint(r.payload);
      if (!record.ok()) {
        problem = at + " is corrupt: " + std::string(record.status().message());
        continue;
      }
      if (record->head.size() != n) {
        problem = at + " covers " + std::to_string(record->head.size()) + " partitions, not " +
                  std::to_string(n);
        continue;
      }
      if (record->IsBase()) {
        chain.clear();
        problem.clear();
        chain.push_back(std::move(*record));
        continue;
      }
      if (!problem.empty()) continue;
      if (chain.empty()) {
        problem = at + " continues no base record";
      } else if (record->from != chain.back().head) {
        problem = at + " does not start where the record before it ended";
      } else {
        chain.push_back(std::move(*record));
      }
    }
  }
  if (!any) return false;  // missing
  if (problem.empty() && chain.empty()) problem = "no base record";
  if (problem.empty()) {
    // Verify the claim of the last record against the partitions (read after the chain, so
    // rows a record covers are committed before the partition's extent is read).
    const channel::CheckpointRecord& last = chain.back();
    for (size_t p = 0; p < n && problem.empty(); ++p) {
      auto part = store.GetStreamById(stream_ids_[p]);
      if (!part.ok()) return part.status().Annotate("StoreError: reading " + stream_keys_[p]);
      const uint64_t end = part->next_offset - 1;
      const std::string claim =
          "partition " + stream_keys_[p] + " head " + std::to_string(last.head[p]);
      if (last.head[p] > end) {
        problem =
            "it overclaims: " + claim + ", but the partition ends at slot " + std::to_string(end);
        break;
      }
      if (last.head[p] == 0 || last.fingerprint[p] == 0) continue;
      auto row = store.ReadAt(stream_ids_[p], last.head[p]);
      if (!row.ok()) {
        return row.status().Annotate("StoreError: verifying the head checkpoint at " +
                                     Where(stream_keys_[p], last.head[p] - 1));
      }
      // An absent row was removed by retention: nothing left to compare with.
      if (row->has_value() && channel::RowFingerprint((*row)->payload) != last.fingerprint[p]) {
        problem = "it disagrees with the rows: " + claim + ", but the row at slot " +
                  std::to_string(last.head[p] - 1) + " is not the one it recorded";
      }
    }
  }
  if (!problem.empty()) {
    Warn("head checkpoint in " + checkpoint_key_ + " refused (" + problem +
         "); walking every partition");
    return false;
  }
  for (const channel::CheckpointRecord& record : chain) {
    for (const channel::CheckpointEntry& e : record.entries) {
      if (!index_->Insert(e.hash, e.partition, e.slot)) return IndexFull();
    }
  }
  recorded_ = index_->size();
  const channel::CheckpointRecord& last = chain.back();
  scanned_ = last.head;
  ck_head_ = last.head;
  ck_fp_ = last.fingerprint;
  last_fp_ = last.fingerprint;
  need_base_ = false;
  return true;
}

Status DurableChannel::FollowCheckpoints() {
  Store& store = registry_->store();
  if (!checkpoint_id_) {
    auto info = store.GetStream(scope_.Label(), checkpoint_key_);
    if (!info.ok()) return info.status().Annotate("StoreError: opening " + checkpoint_key_);
    checkpoint_id_ = info->id;
  }
  const size_t n = stream_keys_.size();
  for (;;) {
    auto rows = store.Read(*checkpoint_id_, checkpoint_next_, kReadBatchSize,
                           StreamRegistry::kMaxReadBytes);
    if (!rows.ok()) return rows.status().Annotate("StoreError: reading " + checkpoint_key_);
    if (rows->empty()) return Status::OK();
    for (const StoredRecord& r : *rows) {
      checkpoint_next_ = r.offset + 1;
      auto record = channel::DecodeCheckpoint(r.payload);
      if (!record.ok() || record->head.size() != n) {
        need_base_ = true;  // the chain is broken: the next record restarts it
        continue;
      }
      // A record that does not continue the chain as known, or that lowers a head (a base
      // written by an instance that knows less), leaves rows this instance no longer holds
      // as unrecorded: restart the chain.
      if (!record->IsBase() && record->from != ck_head_) need_base_ = true;
      for (size_t p = 0; p < n; ++p) {
        if (record->head[p] < ck_head_[p]) need_base_ = true;
      }
      ck_head_ = record->head;
      ck_fp_ = record->fingerprint;
    }
  }
}

Status DurableChannel::RecordCheckpoint() {
  for (int attempt = 0;; ++attempt) {
    Status s = AppendCheckpoint();
    if (s.ok() || s.code() != StatusCode::kConflict || attempt == 1) return s;
    RUNNEL_RETURN_IF_ERROR(FollowCheckpoints());
  }
}

// Long because the heads, the entries and the records of one checkpoint are built from one
// consistent view of the index and appended as one atomic batch.
Status DurableChannel::AppendCheckpoint() {
  const size_t n = stream_keys_.size();
  const bool base = need_base_;
  std::vector<uint64_t> from = base ? std::vector<uint64_t>(n, 0) : ck_head_;
  std::vector<uint64_t> head(n);
  std::vector<uint64_t> fp(n);
  bool changed = base;
  for (size_t p = 0; p < n; ++p) {
    // A base holds exactly this instance's index; a delta never lowers a head.
    head[p] = base ? scanned_[p] : std::max(ck_head_[p], scanned_[p]);
    fp[p] = head[p] == scanned_[p] ? last_fp_[p] : ck_fp_[p];
    changed = changed || head[p] != ck_head_[p];
  }
  if (!changed) {
    since_checkpoint_ = 0;
    return Status::OK();
  }
  // The entries in (partition, slot) order, in a buffer kept from one record to the next: a
  // fresh one each time would often come from untouched heap pages.
  std::vector<channel::CheckpointEntry>& entries = checkpoint_entries_;
  entries.clear();
  if (base) {
    entries.reserve(index_->size());
    for (size_t k = 0; k < index_->size(); ++k) {
      const channel::KeyIndex::Entry& e = index_->at(k);
      entries.push_back({e.partition, e.slot, e.hash});
    }
    std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) {
      return a.partition != b.partition ? a.partition < b.partition : a.slot < b.slot;
    });
  } else {
    // The index entries from recorded_ on are in slot order within each partition (rows are
    // indexed in slot order), so a stable bucketing by partition sorts them.
    std::vector<size_t> start(n + 1, 0);
    size_t kept = 0;
    const size_t end = index_->size();
    for (size_t k = recorded_; k < end; ++k) {
      const channel::KeyIndex::Entry& e = index_->at(k);
      if (e.slot >= from[e.partition] && e.slot < head[e.partition]) {
        ++start[e.partition + 1];
        ++kept;
      }
    }
    for (size_t p = 0; p < n; ++p) start[p + 1] += start[p];
    entries.resize(kept);
    for (size_t k = recorded_; k < end; ++k) {
      const channel::KeyIndex::Entry& e = index_->at(k);
      if (e.slot >= from[e.partition] && e.slot < head[e.partition]) {
        entries[start[e.partition]++] = {e.partition, e.slot, e.hash};
      }
    }
  }
  // Split into records of at most kMaxCheckpointEntries, each continuing the previous one;
  // only the last carries the fingerprints. They are appended in one atomic batch.
  AppendRequest request;
  request.now_ms = registry_->clock().NowMs();
  request.expected_offset = checkpoint_next_;
  const size_t total = entries.size();
  const std::vector<uint64_t> no_claim(n, 0);
  size_t i = 0;
  do {
    const size_t take = std::min<size_t>(total - i, channel::kMaxCheckpointEntries);
    const std::span<const channel::CheckpointEntry> slice(entries.data() + i, take);
    i += take;
    if (i == total) {
      request.records.push_back(
          AppendRecord{std::nullopt, channel::EncodeCheckpoint(from, head, fp, slice)});
      break;
    }
    const channel::CheckpointEntry& next = entries[i];
    std::vector<uint64_t> upto = from;
    for (size_t p = 0; p < next.partition; ++p) upto[p] = head[p];
    upto[next.partition] = next.slot;
    request.records.push_back(
        AppendRecord{std::nullopt, channel::EncodeCheckpoint(from, upto, no_claim, slice)});
    from = std::move(upto);
  } while (i < total);
  // Keep the buffer for the next delta, but not the size of a whole base.
  if (entries.capacity() > 4 * channel::kCheckpointInterval) {
    std::vector<channel::CheckpointEntry>().swap(entries);
  }

  Store& store = registry_->store();
  if (!checkpoint_id_) {
    CreateStreamOptions create;
    RUNNEL_ASSIGN_OR_RETURN(create.attributes,
                            attributes::Set("", kAttributeKey, CheckpointTag(n)));
    Status created = registry_->CreateStream(scope_, checkpoint_key_, create);
    if (!created.ok() && created.code() != StatusCode::kAlreadyExists) {
      return created.Annotate("StoreError: creating " + checkpoint_key_);
    }
    auto info = store.GetStream(scope_.Label(), checkpoint_key_);
    if (!info.ok()) return info.status().Annotate("StoreError: opening " + checkpoint_key_);
    auto tag = attributes::Get(info->spec.attributes, kAttributeKey);
    if (!tag.ok() || !tag->has_value() || **tag != CheckpointTag(n)) {
      return ConfigError("stream " + checkpoint_key_ + " is not a channel head checkpoint");
    }
    checkpoint_id_ = info->id;
    request.expected_offset = checkpoint_next_ = std::max(checkpoint_next_, info->next_offset);
  }
  request.stream = *checkpoint_id_;
  auto appended = store.AppendAndWait(std::move(request));
  if (!appended.ok()) {
    return appended.status().Annotate("StoreError: recording the head checkpoint in " +
                                      checkpoint_key_);
  }
  ck_head_ = std::move(head);
  ck_fp_ = std::move(fp);
  checkpoint_next_ = appended->next_offset;
  recorded_ = index_->size();
  need_base_ = false;
  since_checkpoint_ = 0;
  ++checkpoint_count_;
  if (base && appended->first_offset > 1) {
    // The records before the new base are no longer part of the chain.
    auto cut = store.TruncatePrefix(*checkpoint_id_, appended->first_offset - 1, false);
    if (!cut.ok()) Warn("old head checkpoint records not removed: " + cut.status().ToString());
  }
  return Status::OK();
}

}  // namespace runnel
