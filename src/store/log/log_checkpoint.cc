// LogStore: checkpoints (begin, write the file, finish; in the background for periodic ones)
// and deleting the segments they make dead.
#include "store/log/log_store_internal.h"

namespace runnel::log {

// Long on purpose: the body is encoded in the order of its fields (docs/formats/log.md), from
// the state as of the marker, in one pass.
Status LogStore::BeginCheckpoint(CheckpointJob* job) {
  // The marker frame closes the replayed range; the checkpoint replays from just after it.
  const uint64_t seq = checkpoint_seq_ + 1;
  job->seq = seq;
  job->log_bytes = bytes_since_checkpoint_;
  std::string marker;
  AppendFrame(&marker, FrameType::kCheckpointMarker, EncodeCheckpointMarker(seq));
  std::vector<std::string_view> pieces{marker};
  uint64_t pos;
  RUNNEL_RETURN_IF_ERROR(WriteFrames(pieces, marker.size(), 0, true, false, &pos));
  const uint64_t replay_segment = active_segment_;
  const uint64_t replay_pos = active_pos_;

  const auto build_started = std::chrono::steady_clock::now();
  std::string& body = job->body;
  body.clear();
  // Grown once instead of doubling through a 100+ MB body (a copy and fresh pages each time).
  body.reserve(static_cast<size_t>(checkpoint_body_bytes_ + checkpoint_body_bytes_ / 8));
  bool has_holes = false;    // a version 3 checkpoint is needed
  bool has_dropped = false;  // a version 4 checkpoint is needed
  OfferHugePages(body.data(), body.capacity());
  {
    ReaderLock lock(state_mu_);
    PutU64(&body, seq);
    PutU64(&body, replay_segment);
    PutU64(&body, replay_pos);
    PutU64(&body, next_stream_id_);
    PutU64(&body, streams_.size());
    // In (ns, name) order, as the name index holds them: not the id table's order, which
    // depends on its history, and the order in which loading indexes names fastest.
    uint64_t written = 0;
    for (const auto& [ns, named] : names_) {
      for (const StreamState* s : named) {
        ++written;
        has_dropped = has_dropped || s->Dropped() > 0;
        if (s->batch_begin < s->batches.size()) {
          has_holes =
              has_holes || std::any_of(s->batches.begin() + s->batch_begin, s->batches.end(),
                                       [](const BatchRef& b) { return b.lost(); });
        }
        PutU64(&body, s->id);
        PutString(&body, *s->ns);
        PutString(&body, s->name.view());
        PutString(&body, *s->content_type);
        PutRetention(&body, s->view().retention);
        PutU64(&body, s->FirstOffset());
        PutU64(&body, s->created_at_ms);
        PutString(&body, s->view().attributes);
        PutU64(&body, s->head);
        PutU64(&body, s->next);
        PutU8(&body, s->closed ? 1 : 0);
        PutU64(&body, s->batches.size() - s->batch_begin);
        for (size_t i = s->batch_begin; i < s->batches.size(); ++i) {
          const BatchRef& b = s->batches[i];
          PutU64(&body, b.first_offset);
          PutU64(&body, b.timestamp);
          PutU32(&body, b.segment);
          PutU32(&body, b.pos);
          PutU32(&body, b.len);
        }
        PutU64(&body, s->sizes.size() - s->size_begin);
        for (size_t i = s->size_begin; i < s->sizes.size(); ++i) {
          PutU32(&body, s->sizes[i]);
          PutU32(&body, s->KeySize(i));
        }
        PutU32(&body, static_cast<uint32_t>(s->view().cursors.size()));
        for (const auto& [name, c] : s->view().cursors) {
          PutString(&body, c.consumer);
          PutU64(&body, c.offset);
          PutU64(&body, c.updated_at_ms);
        }
        PutU32(&body, static_cast<uint32_t>(s->view().producers.size()));
        for (const auto& [name, p] : s->view().producers) {
          PutString(&body, p.producer_id);
          PutU64(&body, p.epoch);
          PutU64(&body, p.seq);
          PutU64(&body, p.last_offset);
        }
      }
    }
    // Every stream has a name: a count that disagrees would make a checkpoint that cannot load.
    if (written != streams_.size()) {
      return Status::Internal("checkpoint not written: " + std::to_string(streams_.size()) +
                              " streams but " + std::to_string(written) + " names");
    }
  }
  checkpoint_body_bytes_ = body.size();
  {
    MutexLock lock(stats_mu_);
    ++stats_.checkpoints;
    stats_.checkpoint_build_micros +=
        static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                  std::chrono::steady_clock::now() - build_started)
                                  .count());
  }
  job->header.assign(kCheckpointMagic);
  // Version 2 unless the index holds a hole (which only salvage makes) or a dropped record
  // (keyed compaction): binaries that know neither keep reading every other checkpoint.
  PutU32(&job->header, has_dropped ? kCheckpointVersion
                       : has_holes ? kCheckpointVersionWithHoles
                                   : kCheckpointVersionWithoutHoles);
  PutU32(&job->header, 0);
  PutU64(&job->header, body.size());
  PutU32(&job->header, MaskCrc(Crc32c(body)));
  PutU32(&job->header, 0);
  // Segments before the replay point without live records: deleted once this checkpoint is
  // durable (the ones that die later wait for the next, which no longer names them).
  job->dead_segments.clear();
  ReaderLock lock(state_mu_);
  for (const auto& [n, seg] : segments_) {
    if (n < replay_segment && seg.live_bytes == 0) {
      job->dead_segments.push_back(n);
    }
  }
  return Status::OK();
}

void LogStore::FinishCheckpoint(const CheckpointJob& job) {
  checkpoint_seq_ = job.seq;
  // What was logged while the file was written counts toward the next checkpoint.
  bytes_since_checkpoint_ -= std::min(bytes_since_checkpoint_, job.log_bytes);
  checkpoint_failures_ = 0;
  DeleteDeadSegments(job.dead_segments);
  // The reserve keeps room for a checkpoint like this one.
  if (reserve_requested_) RequestReserve();
}

Status LogStore::WriteCheckpoint() {
  PollBackgroundCheckpoint(true);
  CheckpointJob job;
  RUNNEL_RETURN_IF_ERROR(BeginCheckpoint(&job));
  RUNNEL_RETURN_IF_ERROR(WriteCheckpointFile(env_, options_.dir, job));
  FinishCheckpoint(job);
  return Status::OK();
}

void LogStore::StartBackgroundCheckpoint() {
  auto job = std::make_unique<CheckpointJob>();
  Status s = BeginCheckpoint(job.get());
  if (!s.ok()) return CheckpointFailed(s);
  background_checkpoint_ = std::move(job);
  std::promise<Status> written;
  background_checkpoint_done_ = written.get_future();
  background_checkpoint_thread_ = std::thread([this, written = std::move(written)]() mutable {
    written.set_value(WriteCheckpointFile(env_, options_.dir, *background_checkpoint_));
    {
      // Wakes an idle writer to finish it (the result is set first, so the writer finds it):
      // deleting dead segments must not wait for traffic (on a full disk there may be none
      // until they are gone).
      MutexLock lock(queue_mu_);
      checkpoint_written_ = true;
    }
    queue_cv_.notify_all();
  });
  SetThreadName(background_checkpoint_thread_, "log-checkpoint");
}

bool LogStore::PollBackgroundCheckpoint(bool wait) {
  if (!background_checkpoint_) return true;
  if (!wait &&
      background_checkpoint_done_.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
    return false;
  }
  const Status s = background_checkpoint_done_.get();
  background_checkpoint_thread_.join();
  if (s.ok()) {
    FinishCheckpoint(*background_checkpoint_);
  } else {
    CheckpointFailed(s);
  }
  background_checkpoint_.reset();
  return true;
}

void LogStore::WaitForBackgroundCheckpoint() {
  const auto start = std::chrono::steady_clock::now();
  const uint64_t behind = bytes_since_checkpoint_;  // what a crash now would replay
  PollBackgroundCheckpoint(true);
  const auto now = std::chrono::steady_clock::now();
  const uint64_t waited_us = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(now - start).count());
  {
    MutexLock lock(stats_mu_);
    ++stats_.checkpoint_waits;
    stats_.checkpoint_wait_micros += waited_us;
  }
  // Said at most once a minute: a disk too slow for the checkpoints of this append rate.
  if (now - last_checkpoint_wait_warning_ >= std::chrono::minutes(1)) {
    last_checkpoint_wait_warning_ = now;
    LogF(LogLevel::kWarn,
         "log store %s: appends waited %.1f ms for a checkpoint being "
         "written (%llu bytes had been logged since the last one that landed, which a "
         "restart would have replayed)",
         options_.dir.c_str(), static_cast<double>(waited_us) / 1000.0,
         static_cast<unsigned long long>(behind));
  }
}

void LogStore::CheckpointFailed(const Status& s) {
  if (s.no_space()) {
    // Dead segments may be waiting for this checkpoint: ReclaimSpace can write it on the
    // reserve.
    disk_full_ = true;
    reclaim_due_ = true;
  }
  // Recovery just replays more meanwhile; nothing acknowledged depends on it.
  const auto delay = std::chrono::seconds(1u << std::min<uint32_t>(checkpoint_failures_, 6));
  ++checkpoint_failures_;
  checkpoint_retry_at_ = std::chrono::steady_clock::now() + delay;
  LogF(LogLevel::kWarn, "log store %s: checkpoint failed (%s); retrying in %llds",
       options_.dir.c_str(), s.ToString().c_str(), static_cast<long long>(delay.count()));
}

void LogStore::DeleteDeadSegments(const std::vector<uint64_t>& candidates) {
  std::vector<uint64_t> dead;
  {
    WriterLock lock(state_mu_);
    for (uint64_t n : candidates) {
      auto it = segments_.find(n);
      // Dead segments stay dead: live records are only ever copied forward, never into them.
      if (it != segments_.end() && n != active_segment_ && it->second.live_bytes == 0) {
        dead.push_back(n);
        segments_.erase(it);
      }
    }
  }
  for (uint64_t n : dead) {
    Status s = env_->RemoveFile(SegmentPath(n));
    (void)s;  // a leftover dead segment is removed again at the next open
  }
  segments_deleted_ += dead.size();
  if (!dead.empty()) {
    Status s = env_->SyncDir(options_.dir);
    (void)s;
  }
}

}  // namespace runnel::log
