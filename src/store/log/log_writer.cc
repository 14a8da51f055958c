// LogStore: the writer thread. The queue, group commit, validating ops against the reserved
// view, encoding their frames and committing each group.
#include "base/thread_slice.h"
#include "store/log/log_store_internal.h"

namespace runnel::log {

namespace {

// The writer's time slice (base/thread_slice.h). A round of the writer (encode, write, sync,
// apply, answer a group) takes tens of microseconds of CPU; every acknowledgement waits for
// this thread to run again after its fdatasync returns.
constexpr std::chrono::microseconds kWriterSlice{200};

}  // namespace

// ------------------------------------------------------------------------------------------
// The writer

void LogStore::Enqueue(std::shared_ptr<Op> op) {
  {
    MutexLock lock(queue_mu_);
    if (!stopping_) {
      // The writer only waits when the queue is empty, so only the first op needs to wake it.
      const bool was_empty = queue_.empty();
      queue_.push_back(std::move(op));
      if (was_empty || queue_.size() == group_target_) queue_cv_.notify_one();
      return;
    }
  }
  op->status = Status::Unavailable("the log store is closing");
  op->refused = true;
  FinishOp(*op);
}

Status LogStore::Submit(const std::shared_ptr<Op>& op) {
  Enqueue(op);
  MutexLock lock(op->mu);
  while (!op->finished) lock.Wait(op->cv);
  return op->status;
}

std::shared_ptr<const TailListener> LogStore::Listener() const {
  MutexLock lock(listener_mu_);
  return listener_;
}

void LogStore::FinishOp(Op& op) {
  FinishOp(op, op.kind == OpKind::kAppend ? Listener() : nullptr);
}

void LogStore::FinishOp(Op& op, const std::shared_ptr<const TailListener>& listener) {
  if (op.kind == OpKind::kAppend) {
    if (op.status.ok()) {
      if (listener && *listener) (*listener)(op.append.stream, op.append_result.next_offset);
      op.append_done(op.append_result);
    } else {
      op.append_done(op.status);
    }
    return;
  }
  MutexLock lock(op.mu);
  op.finished = true;
  op.cv.notify_all();
}

void LogStore::WriterLoop() {
  // The group-commit wait is tens of microseconds: the default 50 us timer slack would double it.
  ::prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL);
  RequestShortSlice(kWriterSlice);
  std::vector<std::shared_ptr<Op>> ops;
  for (;;) {
    bool stop = false;
    {
      MutexLock lock(queue_mu_);
      if (queue_.empty() && !stopping_) {
        if (unsynced_ && options_.durability.mode == LogDurability::kInterval) {
          lock.WaitUntil(queue_cv_,
                         last_sync_ + std::chrono::milliseconds(options_.durability.interval_ms));
        } else {
          while (queue_.empty() && !stopping_ && !checkpoint_written_) lock.Wait(queue_cv_);
        }
      }
      checkpoint_written_ = false;
      WaitForFullerGroup(lock);
      ops.swap(queue_);
      stop = stopping_ && ops.empty();
    }
    if (stop) break;
    const size_t taken = ops.size();
    queued_at_ack_ = 0;
    std::vector<std::shared_ptr<Op>> group;
    uint64_t group_bytes = 0;
    for (auto& op : ops) {
      if (op->kind == OpKind::kAppend || op->kind == OpKind::kCursor ||
          op->kind == OpKind::kCursorDelete || op->kind == OpKind::kCreate) {
        Prepare(*op);
        group_bytes += op->frame_len;
        group.push_back(std::move(op));
        // Bounded groups keep frame positions within a segment's 32-bit range.
        if (group_bytes >= kMaxGroupBytes) {
          CommitGroup(group, false);
          group.clear();
          group_bytes = 0;
        }
        continue;
      }
      group_bytes = 0;
      CommitGroup(group, false);
      group.clear();
      if (op->kind == OpKind::kCheckpoint) {
        if (op->clean) {
          PollBackgroundCheckpoint(true);  // the cleaner runs with no checkpoint under way
          op->status = Clean();
        }
        if (op->status.ok()) op->status = WriteCheckpoint();
        FinishOp(*op);
        continue;
      }
      Prepare(*op);
      const bool force = op->kind == OpKind::kFlush;
      group.push_back(std::move(op));
      CommitGroup(group, force);
      group.clear();
    }
    CommitGroup(group, false);
    ops.clear();
    last_group_ops_ = taken + queued_at_ack_;
    AfterRound();
  }
  // Clean shutdown: make everything durable and checkpoint so the next open replays nothing
  // (after the checkpoint being written in the background, if any, is done). A store opened on
  // a new directory that wrote nothing leaves nothing (UndoCreation): no checkpoint either.
  PollBackgroundCheckpoint(true);
  if (fresh_ && !wrote_) return;
  Status s = SyncActive();
  if (s.ok()) s = WriteCheckpoint();
  if (!s.ok()) {
    // Nothing is lost (the log holds it all); the next open replays more.
    LogF(LogLevel::kWarn, "log store %s: closing checkpoint not written (%s)", options_.dir.c_str(),
         s.ToString().c_str());
  }
}

void LogStore::AfterRound() {
  if (unsynced_ && options_.durability.mode == LogDurability::kInterval &&
      std::chrono::steady_clock::now() - last_sync_ >=
          std::chrono::milliseconds(options_.durability.interval_ms)) {
    Status s = SyncActive();
    (void)s;  // a failure leaves unsynced_ set; the next group or Flush retries and reports
  }
  auto now = std::chrono::steady_clock::now();
  // A full disk gives space back as soon as something in an old segment died (a delete, a
  // truncation, retention), without waiting for appends or the checkpoint interval.
  if (disk_full_ && reclaim_due_ && now >= reclaim_retry_at_) {
    ReclaimSpace();
    now = std::chrono::steady_clock::now();
  }
  const bool freeing = segment_freed_ && bytes_since_checkpoint_ > 0 &&
                       now - last_freeing_checkpoint_ >= std::chrono::seconds(10);
  // A checkpoint written in the background is finished first; none starts while it is not.
  // Appends that outrun it (kMaxCheckpointBacklog intervals logged since the last durable
  // one) wait for it here: otherwise what a restart replays, and the dead segments only a
  // checkpoint can delete, would grow without bound while its file is slow to land.
  if (background_checkpoint_ != nullptr && bytes_since_checkpoint_ >= checkpoint_backlog_bytes_) {
    WaitForBackgroundCheckpoint();
  }
  const bool checkpoint_idle = PollBackgroundCheckpoint(false);
  // Records that died in old segments count toward the interval as appended bytes do: under
  // churn, the space they leave is reclaimed (by the cleaner, then the checkpoint) at the pace
  // it appears, not one whole interval of appends later.
  const bool periodic =
      bytes_since_checkpoint_ > 0 &&
      bytes_since_checkpoint_ + freed_since_checkpoint_ >= options_.checkpoint_interval_bytes;
  if ((periodic || freeing) && now >= checkpoint_retry_at_ && checkpoint_idle) {
    if (freeing) last_freeing_checkpoint_ = now;
    segment_freed_ = false;
    if (periodic) freed_since_checkpoint_ = 0;
    // The cleaner copies live records forward: not for a checkpoint that only frees space.
    Status s = periodic ? Clean() : Status::OK();
    if (s.ok()) {
      StartBackgroundCheckpoint();
    } else {
      CheckpointFailed(s);
    }
  }
}

void LogStore::WaitForFullerGroup(MutexLock& lock) {
  if (options_.durability.mode != LogDurability::kFsync || options_.group_commit_wait_us == 0 ||
      stopping_ || queue_.empty() || queue_.size() >= last_group_ops_) {
    return;
  }
  const uint64_t bound = std::min<uint64_t>(options_.group_commit_wait_us, sync_mean_us_ / 2);
  if (bound == 0) return;
  store::WaitForFullerGroup(
      queue_cv_, lock, last_group_ops_, std::chrono::microseconds(bound),
      std::chrono::microseconds(options_.group_arrival_gap_us), &group_target_,
      [&] {
        queue_mu_.AssertHeld();  // called by WaitForFullerGroup under `lock`
        return queue_.size();
      },
      [&] {
        queue_mu_.AssertHeld();
        return stopping_;
      });
}

std::optional<uint64_t> LogStore::PendingCursor(const StreamState& s,
                                                const std::pair<StreamId, std::string>& key) const {
  if (auto pit = pending_cursors_.find(key); pit != pending_cursors_.end()) return pit->second;
  if (auto it = s.view().cursors.find(key.second); it != s.view().cursors.end()) {
    return it->second.offset;
  }
  return std::nullopt;
}

uint64_t LogStore::ReservedNext(const StreamState& s) const {
  auto it = reserved_.find(s.id);
  return it != reserved_.end() ? it->second.next : s.next;
}

void LogStore::Prepare(Op& op) {
  op.frame_at = group_buf_.size();
  EncodeOp(op);
  op.frame_len = group_buf_.size() - op.frame_at;
}

// Long on purpose: one case per op kind, each holding that op's checks against the reserved
// view next to the frame it encodes; only the append case is long.
void LogStore::EncodeOp(Op& op) {
  auto refuse = [&](Status s) {
    op.status = std::move(s);
    op.refused = true;
  };
  switch (op.kind) {
    case OpKind::kAppend: {
      AppendRequest& req = op.append;
      StreamState* s = FindLocked(req.stream);
      if (s == nullptr) return refuse(StreamNotFound(req.stream));
      // The stream as the appends before this one in the group leave it.
      Reservation& reserved =
          reserved_.try_emplace(req.stream, Reservation{s->next, s->closed}).first->second;
      // An append earlier in this group may have set them (not applied before the write).
      auto attributes = [&]() -> const std::string& {
        auto pending = pending_attributes_.find(req.stream);
        return pending != pending_attributes_.end() ? pending->second : s->view().attributes;
      };
      // Against an append earlier in this group first, then the applied state.
      std::optional<std::pair<uint64_t, uint64_t>> producer;
      if (req.producer) {
        const auto key = std::make_pair(req.stream, req.producer->producer_id);
        if (auto p = pending_producers_.find(key); p != pending_producers_.end()) {
          producer = p->second;
        } else if (auto v = s->view().producers.find(req.producer->producer_id);
                   v != s->view().producers.end()) {
          producer.emplace(v->second.epoch, v->second.seq);
        }
      }
      if (req.guard != nullptr) {
        AppendState state;
        state.next_offset = reserved.next;
        state.closed = reserved.closed;
        state.attributes = attributes();
        state.producer = producer;
        if (Status admitted = req.guard->Admit(state, &req); !admitted.ok()) {
          return refuse(std::move(admitted));
        }
      }
      if (reserved.closed) {
        return refuse(Status::FailedPrecondition("stream '" + s->name.str() + "' is closed"));
      }
      if (req.records.empty() && !req.close) {
        return refuse(Status::InvalidArgument("an append needs at least one record"));
      }
      if (req.expected_offset && *req.expected_offset != reserved.next) {
        return refuse(Status::Conflict("expected offset " + std::to_string(*req.expected_offset) +
                                           " but the stream's next offset is " +
                                           std::to_string(reserved.next),
                                       *req.expected_offset, reserved.next));
      }
      if (req.expected_attributes && *req.expected_attributes != attributes()) {
        return refuse(store::AttributesChanged(s->name.str()));
      }
      if (req.producer) {
        if (Status checked = store::CheckProducer(producer, *req.producer); !checked.ok()) {
          return refuse(std::move(checked));
        }
      }
      const uint64_t n = req.records.size();
      if (n > std::numeric_limits<uint64_t>::max() - reserved.next) {
        return refuse(
            Status::OutOfRange("stream '" + s->name.str() + "' would pass the largest offset"));
      }
      size_t estimate = 64;
      for (const auto& r : req.records)
        estimate += 9 + r.payload.size() + (r.key ? r.key->size() : 0);
      if (req.producer) estimate += 24 + req.producer->producer_id.size();
      if (req.attributes) estimate += 4 + req.attributes->size();
      if (estimate > kMaxBodySize) {
        return refuse(Status::InvalidArgument("append batch of " + std::to_string(estimate) +
                                              " bytes is larger than the 1 GiB limit"));
      }
      group_buf_.reserve(group_buf_.size() + kFrameHeaderSize + estimate);
      const size_t frame = BeginFrame(&group_buf_, FrameType::kAppendBatch);
      EncodeAppendBatch(&group_buf_, req.stream, reserved.next, req.now_ms, req.records, req.close,
                        req.producer, req.attributes);
      FinishFrame(&group_buf_, frame);
      op.append_result.first_offset = n ? reserved.next : 0;
      op.append_result.last_offset = n ? reserved.next + n - 1 : 0;
      reserved.next += n;
      op.append_result.next_offset = reserved.next;
      if (req.close) reserved.closed = true;
      if (req.attributes) pending_attributes_[req.stream] = *req.attributes;
      if (req.producer) {
        pending_producers_[{req.stream, req.producer->producer_id}] = {req.producer->epoch,
                                                                       req.producer->seq};
      }
      return;
    }
    case OpKind::kCursor: {
      StreamState* s = FindLocked(op.stream);
      if (s == nullptr) return refuse(StreamNotFound(op.stream));
      auto key = std::make_pair(op.stream, op.consumer);
      const std::optional<uint64_t> current = PendingCursor(*s, key);
      if (current && *current >= op.offset) {
        op.u64_result = *current;
        return;  // nothing changes, nothing to write
      }
      op.u64_result = op.offset;
      pending_cursors_[key] = op.offset;
      AppendFrame(&group_buf_, FrameType::kCursorCommit,
                  EncodeCursorCommit(op.stream, op.consumer, op.offset, op.now_ms));
      return;
    }
    case OpKind::kCursorDelete: {
      StreamState* s = FindLocked(op.stream);
      if (s == nullptr) return refuse(StreamNotFound(op.stream));
      auto key = std::make_pair(op.stream, op.consumer);
      if (!PendingCursor(*s, key)) {
        op.u64_result = 0;
        return;  // there is none: nothing to write
      }
      op.u64_result = 1;
      pending_cursors_[key] = std::nullopt;
      AppendFrame(&group_buf_, FrameType::kCursorDelete,
                  EncodeCursorDelete(op.stream, op.consumer));
      return;
    }
    case OpKind::kCreate: {
      if (FindByNameLocked(op.spec.ns, op.spec.name) != nullptr ||
          !pending_names_.emplace(op.spec.ns, op.spec.name).second) {
        return refuse(
            Status::AlreadyExists("stream '" + op.spec.name + "' already exists in " + op.spec.ns));
      }
      op.stream = reserved_next_id_++;
      AppendFrame(&group_buf_, FrameType::kCreateStream, EncodeCreateStream(op.stream, op.spec));
      return;
    }
    case OpKind::kUpdate: {
      StreamState* s = FindLocked(op.stream);
      if (s == nullptr) return refuse(StreamNotFound(op.stream));
      // Committed alone: every earlier write of the stream is applied (view()).
      if (op.append.expected_attributes && *op.append.expected_attributes != s->view().attributes) {
        return refuse(store::AttributesChanged(s->name.str()));
      }
      if (op.append.expected_offset && *op.append.expected_offset != ReservedNext(*s)) {
        return refuse(
            store::NextOffsetChanged(s->name.str(), *op.append.expected_offset, ReservedNext(*s)));
      }
      // Committed alone, so view() is the stream as this frame replaces it.
      if (op.keep_retention) op.retention = s->view().retention;
      AppendFrame(&group_buf_, FrameType::kUpdateStream,
                  EncodeUpdateStream(op.stream, op.retention, op.attributes));
      return;
    }
    case OpKind::kDelete: {
      if (FindLocked(op.stream) == nullptr) return refuse(StreamNotFound(op.stream));
      AppendFrame(&group_buf_, FrameType::kDeleteStream, EncodeDeleteStream(op.stream));
      return;
    }
    case OpKind::kTruncate: {
      StreamState* s = FindLocked(op.stream);
      if (s == nullptr) return refuse(StreamNotFound(op.stream));
      uint64_t cut = op.offset;
      if (op.respect_cursors) {
        for (const auto& [name, c] : s->view().cursors) cut = std::min(cut, c.offset);
      }
      const uint64_t new_head = cut >= s->next ? s->next : std::max(s->head, cut + 1);
      // The records removed: dropped ones are gone already.
      op.u64_result = new_head - s->head;
      if (s->Dropped() > 0) {
        for (uint64_t o = s->head; o < new_head; ++o) {
          if (s->DroppedAt(s->size_begin + (o - s->head))) --op.u64_result;
        }
      }
      if (new_head > s->head) {
        AppendFrame(&group_buf_, FrameType::kTruncateHead, EncodeTruncateHead(op.stream, new_head));
      }
      return;
    }
    case OpKind::kDropRecords: {
      StreamState* s = FindLocked(op.stream);
      if (s == nullptr) return refuse(StreamNotFound(op.stream));
      // Committed alone: every earlier write of the stream is applied. The frame names only the
      // records there are, so its count is the call's answer.
      std::vector<uint64_t> present;
      present.reserve(op.offsets.size());
      for (uint64_t o : op.offsets) {
        if (o < s->head || o >= s->next || (!present.empty() && present.back() == o)) continue;
        if (s->DroppedAt(s->size_begin + (o - s->head))) continue;
        present.push_back(o);
      }
      op.u64_result = present.size();
      if (!present.empty()) {
        AppendFrame(&group_buf_, FrameType::kDropRecords, EncodeDropRecords(op.stream, present));
      }
      return;
    }
    case OpKind::kFlush:
    case OpKind::kCheckpoint: return;
  }
}

Status LogStore::ApplyEncodedAppend(Op& op, uint32_t segment, uint32_t pos, uint32_t len) {
  AppendRequest& req = op.append;
  StreamState* s = FindLocked(req.stream);
  if (s == nullptr) return Status::Internal("the stream of a committed append is gone");
  // Exactly what EncodeOp wrote into the frame.
  AppendBatchHeader h;
  h.stream = req.stream;
  h.count = static_cast<uint32_t>(req.records.size());
  h.first_offset = op.append_result.next_offset - h.count;
  h.timestamp = req.now_ms;
  h.close = req.close;
  h.producer = std::move(req.producer);
  if (h.producer) h.producer->last_offset = 0;
  h.attributes = std::move(req.attributes);
  std::vector<std::pair<uint32_t, uint32_t>>& sizes = apply_sizes_;
  sizes.clear();
  for (const AppendRecord& r : req.records) {
    sizes.emplace_back(static_cast<uint32_t>(r.payload.size()),
                       static_cast<uint32_t>(r.key ? r.key->size() : 0));
  }
  return ApplyAppendBatch(s, std::move(h), sizes, segment, pos, len, false);
}

// Long on purpose: the steps of one commit (write, sync or repair, apply, cache, complete) in
// order, sharing the group's position and outcome.
void LogStore::CommitGroup(std::vector<std::shared_ptr<Op>>& group, bool force_sync) {
  if (group.empty()) return;
  uint64_t records = 0;
  bool appended = false;
  for (const auto& op : group) {
    if (op->kind == OpKind::kAppend && op->frame_len > 0) {
      records += op->append.records.size();
      appended = appended || !op->append.records.empty();
    }
  }
  const uint64_t total = group_buf_.size();
  uint64_t pos = 0;
  Status written;
  if (total > 0 || force_sync) {
    const bool sync = force_sync || options_.durability.mode == LogDurability::kFsync;
    std::vector<std::string_view> pieces;
    if (total > 0) pieces.push_back(group_buf_);
    written = WriteFrames(pieces, total, records, sync, records > 0, &pos);
    if (written.no_space()) {
      // Nothing of the group was written. Space dead records left behind comes back first,
      // then the group gets one more try.
      disk_full_ = true;
      if (reclaim_due_ && std::chrono::steady_clock::now() >= reclaim_retry_at_ && ReclaimSpace()) {
        written = WriteFrames(pieces, total, records, sync, records > 0, &pos);
      }
    }
  }
  if (!written.ok()) {
    if (written.no_space()) {
      written = Status::NoSpace("disk full: nothing was written to the log (" +
                                std::string(written.message()) +
                                "); deleting or trimming streams gives space back");
    }
    for (auto& op : group) {
      if (!op->refused) op->status = written;
    }
    // What the failed group reserved is forgotten below, with the rest of its pending state.
  } else if (total > 0) {
    WriterLock lock(state_mu_);
    merge_floor_pos_ = static_cast<uint32_t>(pos);
    for (auto& op : group) {
      if (op->frame_len == 0) continue;
      // The writer encoded this frame itself: no CRC check, and an append's effect is taken
      // from the append rather than decoded from the frame again.
      const std::string_view frame(group_buf_.data() + op->frame_at, op->frame_len);
      const auto segment = static_cast<uint32_t>(active_segment_);
      const auto at = static_cast<uint32_t>(pos + op->frame_at);
      const auto len = static_cast<uint32_t>(frame.size());
      Status s;
      if (op->kind == OpKind::kAppend) {
        s = ApplyEncodedAppend(*op, segment, at, len);
      } else {
        s = ApplyFrame(static_cast<FrameType>(frame[8]), frame.substr(kFrameHeaderSize), segment,
                       at, len, false);
      }
      if (!s.ok()) {
        op->status = Status::Internal("applying a committed frame failed: " + s.ToString());
        continue;
      }
      if (op->kind == OpKind::kCreate || op->kind == OpKind::kUpdate ||
          op->kind == OpKind::kTruncate) {
        if (StreamState* st = FindLocked(op->stream)) op->info = Snapshot(*st);
      }
    }
    if (appended && options_.tail_cache_bytes > 0) {
      // The whole group is cached as written: one allocation per group, not per batch. A copy
      // of exactly its size, not the buffer itself: the buffer grew by doubling, so its
      // capacity can be twice its size, memory the cache's bound would not count; and the
      // writer keeps reusing its capacity.
      cache_.Add(active_segment_, pos, std::make_shared<const std::string>(group_buf_),
                 options_.tail_cache_bytes);
    }
    bytes_since_checkpoint_ += total;
    if (!reserve_requested_) RequestReserve();
  }
  // Keep the buffer's capacity for the next group, unless one huge group grew it.
  group_buf_.clear();
  if (group_buf_.capacity() > kKeptGroupBufferBytes) group_buf_.shrink_to_fit();
  pending_cursors_.clear();
  pending_names_.clear();
  pending_attributes_.clear();
  pending_producers_.clear();
  reserved_.clear();
  reserved_next_id_ = next_stream_id_;
  if (options_.durability.mode == LogDurability::kFsync && options_.group_commit_wait_us > 0) {
    MutexLock lock(queue_mu_);  // only WaitForFullerGroup reads it
    queued_at_ack_ = queue_.size();
  }
  const std::shared_ptr<const TailListener> listener = Listener();
  for (auto& op : group) {
    if (op->kind == OpKind::kCreate && op->status.ok() && op->info.id == 0) {
      ReaderLock lock(state_mu_);
      if (StreamState* st = FindLocked(op->stream)) op->info = Snapshot(*st);
    }
    FinishOp(*op, listener);
  }
}

}  // namespace runnel::log
