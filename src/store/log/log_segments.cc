// LogStore: segment files. The preparer thread that makes the next segment and the space
// reserve ahead of time, and the writer's side of the active segment: writing frames,
// syncing, repairing after a failed write, rolling to the next segment.
#include "store/log/log_store_internal.h"

namespace runnel::log {

std::string LogStore::SegmentPath(uint64_t number) const {
  return env::JoinPath(options_.dir, SegmentName(number));
}

void LogStore::RequestPreparedSegment(uint64_t number) {
  if (!options_.prezero_segments) return;
  uint64_t stale = 0;
  {
    MutexLock lock(prep_mu_);
    // Asked for twice (by the first roll of a new directory and by the open): served once.
    if (number == prep_busy_ || (prep_file_ && number == prep_ready_)) return;
    if (prep_paused_) {
      prep_held_ = number;
    } else {
      prep_wanted_ = number;
    }
    // A segment prepared after the roll that needed it had already created the segment itself
    // is of no use any more: remove it, or it stays behind as a 64 MiB file until the next open
    // (and the next preparation would drop the handle without removing the file).
    if (prep_file_ && prep_ready_ < number) {
      stale = prep_ready_;
      prep_file_.reset();
      prep_ready_ = 0;
    }
  }
  prep_cv_.notify_all();
  if (stale != 0) {
    Status removed = env_->RemoveFile(SegmentPath(stale) + ".prep");
    (void)removed;  // a leftover is removed at the next open
  }
}

std::shared_ptr<env::File> LogStore::TakePreparedSegment(uint64_t number) {
  MutexLock lock(prep_mu_);
  // A preparation of this very segment still under way is waited for: it is further along than
  // a second zeroing of the same segment here would be, and the two would share the disk.
  while (!prep_stop_ && (prep_wanted_ == number || prep_busy_ == number)) lock.Wait(prep_cv_);
  if (prep_ready_ != number || !prep_file_) return nullptr;
  prep_ready_ = 0;
  return std::move(prep_file_);
}

void LogStore::PreparerLoop() {
  for (;;) {
    uint64_t number = 0;
    uint64_t reserve = 0;
    {
      MutexLock lock(prep_mu_);
      while (!prep_stop_ && (prep_paused_ || (!reserve_wanted_ && prep_wanted_ == 0))) {
        lock.Wait(prep_cv_);
      }
      if (prep_stop_) return;
      // The reserve first: on a disk filling up, it is what lets space come back later.
      if (reserve_wanted_) {
        reserve_wanted_ = false;
        reserve_busy_ = true;
        reserve = reserve_target_;
      } else {
        number = prep_wanted_;
        prep_wanted_ = 0;  // served by this preparation, whatever becomes of it
        prep_busy_ = number;
      }
    }
    if (reserve != 0) {
      const uint64_t size = MakeReserve(reserve);
      {
        MutexLock lock(prep_mu_);
        reserve_busy_ = false;
        reserve_size_ = size;
      }
      prep_cv_.notify_all();
      continue;
    }
    const std::string path = SegmentPath(number) + ".prep";
    std::shared_ptr<env::File> file;
    auto opened = env_->OpenFile(path, true);
    Status s = opened.status();
    if (s.ok()) {
      file = std::move(*opened);
      s = file->Truncate(0);
    }
    if (s.ok()) s = file->WriteAt(0, EncodeSegmentHeader(number));
    // In synced steps (kPreparerStep): the writer's syncs share the disk with these zeros.
    for (uint64_t p = kSegmentHeaderSize; s.ok() && p < options_.segment_size; p += kPreparerStep) {
      if (prep_halt_) {
        s = Status::Unavailable("preparation stopped");
        break;
      }
      const size_t n =
          static_cast<size_t>(std::min<uint64_t>(kPreparerStep, options_.segment_size - p));
      s = file->WriteAt(p, std::string_view(Zeros()).substr(0, n));
      if (s.ok()) s = file->Sync();
    }
    if (s.ok()) s = file->Sync();
    bool keep = false;
    {
      MutexLock lock(prep_mu_);
      prep_busy_ = 0;
      // A newer request means the segment was rolled to without it (a roll that creates its
      // own segment): it is of no use any more. A failure leaves the roll to create it itself
      // (and report why).
      if (s.ok() && prep_wanted_ == 0 && prep_held_ == 0 && !prep_stop_) {
        prep_ready_ = number;
        prep_file_ = std::move(file);
        keep = true;
      }
    }
    prep_cv_.notify_all();  // a roll may be waiting for this segment
    if (!keep) {
      file.reset();
      Status removed = env_->RemoveFile(path);
      (void)removed;
    }
  }
}

std::string LogStore::ReservePath() const {
  return env::JoinPath(options_.dir, "RESERVE");
}

void LogStore::RequestReserve() {
  if (!options_.keep_space_reserve) return;
  reserve_requested_ = true;
  const uint64_t checkpoint_file = kCheckpointHeaderSize + checkpoint_body_bytes_;
  const uint64_t need = options_.segment_size + CheckpointRoom();
  const uint64_t target =
      options_.segment_size +
      ((std::max<uint64_t>(checkpoint_file + checkpoint_file / 2, 4096) + 4095) & ~uint64_t{4095});
  {
    MutexLock lock(prep_mu_);
    if (reserve_busy_ || reserve_wanted_) return;
    if (reserve_size_ >= need && reserve_size_ <= 2 * target) return;
    reserve_target_ = target;
    reserve_wanted_ = true;
  }
  prep_cv_.notify_all();
}

uint64_t LogStore::MakeReserve(uint64_t target) {
  const std::string path = ReservePath();
  const bool created = !env_->FileExists(path);
  auto opened = env_->OpenFile(path, true);
  Status s = opened.status();
  uint64_t size = 0;
  if (s.ok()) {
    std::unique_ptr<env::File>& file = *opened;
    size = file->Size().value_or(0);
    if (size > target) {
      s = file->Truncate(target);
    } else {
      // In synced steps, as the segments the preparer makes (kPreparerStep).
      for (uint64_t p = size; s.ok() && p < target && !prep_halt_; p += kPreparerStep) {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(kPreparerStep, target - p));
        s = file->WriteAt(p, std::string_view(Zeros()).substr(0, n));
        if (s.ok()) s = file->Sync();
      }
    }
    // Even a reserve cut short by a full disk keeps what it got.
    Status synced = file->Sync();
    if (s.ok()) s = synced;
    if (s.ok() && created) s = env_->SyncDir(options_.dir);
    size = file->Size().value_or(0);
  }
  if (!s.ok()) {
    LogF(LogLevel::kWarn,
         "log store %s: the space reserve holds %llu of %llu bytes (%s); "
         "until it is whole, a full disk may not be able to give space back",
         options_.dir.c_str(), static_cast<unsigned long long>(size),
         static_cast<unsigned long long>(target), s.ToString().c_str());
  }
  return size;
}

void LogStore::PausePreparer() {
  MutexLock lock(prep_mu_);
  prep_paused_ = true;
  prep_halt_ = true;
  if (prep_wanted_ != 0) {
    prep_held_ = prep_wanted_;
    prep_wanted_ = 0;
  }
  prep_cv_.notify_all();
  while (prep_busy_ != 0 || reserve_busy_) lock.Wait(prep_cv_);
}

void LogStore::ResumePreparer() {
  {
    MutexLock lock(prep_mu_);
    prep_paused_ = false;
    prep_halt_ = false;
    prep_held_ = 0;
  }
  RequestReserve();
  RequestPreparedSegment(active_segment_ + 1);
}

uint64_t LogStore::CheckpointRoom() const {
  const uint64_t checkpoint_file = kCheckpointHeaderSize + checkpoint_body_bytes_;
  return (std::max<uint64_t>(checkpoint_file + checkpoint_file / 8, 4096) + 4095) & ~uint64_t{4095};
}

bool LogStore::ShrinkReserve(uint64_t bytes) {
  uint64_t size;
  {
    MutexLock lock(prep_mu_);
    size = reserve_size_;
  }
  if (size == 0 || bytes == 0) return false;
  const uint64_t keep = bytes >= size ? 0 : size - bytes;
  Status s;
  if (keep == 0) {
    s = env_->RemoveFile(ReservePath());
    if (s.code() == StatusCode::kNotFound) s = Status::OK();
  } else {
    auto file = env_->OpenFile(ReservePath(), false);
    s = file.status();
    if (s.ok()) s = (*file)->Truncate(keep);
    if (s.ok()) s = (*file)->Sync();
  }
  if (!s.ok()) {
    LogF(LogLevel::kWarn, "log store %s: cannot give up the space reserve: %s",
         options_.dir.c_str(), s.ToString().c_str());
    return false;
  }
  {
    MutexLock lock(prep_mu_);
    reserve_size_ = keep;
  }
  roll_failure_ = Status::OK();  // a segment may fit now
  LogF(LogLevel::kWarn,
       "log store %s: the disk is full; gave up %llu bytes of the space "
       "reserve to reclaim the space of dead records",
       options_.dir.c_str(), static_cast<unsigned long long>(size - keep));
  return true;
}

Status LogStore::SyncActive() {
  if (!unsynced_) return Status::OK();
  Segment* seg;
  {
    ReaderLock lock(state_mu_);
    seg = &segments_.at(active_segment_);
  }
  return SyncLog(*seg->file);
}

Status LogStore::SyncLog(env::File& file) {
  const auto t0 = std::chrono::steady_clock::now();
  RUNNEL_RETURN_IF_ERROR(file.Sync());
  last_sync_ = std::chrono::steady_clock::now();
  unsynced_ = false;
  const auto micros =
      std::chrono::duration_cast<std::chrono::microseconds>(last_sync_ - t0).count();
  const auto sync_us = static_cast<uint64_t>(micros);
  sync_mean_us_ = sync_mean_us_ == 0 ? sync_us : (sync_mean_us_ * 7 + sync_us) / 8;
  {
    MutexLock lock(stats_mu_);
    stats_.CountSync(unsynced_records_, unsynced_bytes_, sync_us);
  }
  unsynced_records_ = 0;
  unsynced_bytes_ = 0;
  return Status::OK();
}

Status LogStore::Repair() {
  std::shared_ptr<env::File> file;
  {
    ReaderLock lock(state_mu_);
    file = segments_.at(active_segment_).file;
  }
  if (options_.prezero_segments) {
    for (uint64_t p = active_pos_; p < dirty_end_; p += kZeroChunk) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(kZeroChunk, dirty_end_ - p));
      RUNNEL_RETURN_IF_ERROR(file->WriteAt(p, std::string_view(Zeros()).substr(0, n)));
    }
  } else {
    RUNNEL_RETURN_IF_ERROR(file->Truncate(active_pos_));
  }
  RUNNEL_RETURN_IF_ERROR(file->Sync());
  dirty_end_ = active_pos_;
  repair_needed_ = false;
  return Status::OK();
}

uint64_t LogStore::TailReserve() const {
  return std::min<uint64_t>(4096, options_.segment_size / 16);
}

Status LogStore::WriteFrames(const std::vector<std::string_view>& pieces, uint64_t total,
                             uint64_t records, bool sync, bool leave_tail, uint64_t* pos_out) {
  if (repair_needed_) {
    Status s = Repair();
    if (!s.ok()) {
      return Status::IOError("log is not writable until an earlier failed write is repaired: " +
                             std::string(s.message()));
    }
  }
  // Frames carrying records leave the last bytes of a segment to the others (deletes,
  // truncations, cursor commits, checkpoint markers): on a full disk, where no new segment can
  // be made, a delete still fits, and so does the checkpoint that lets its space go.
  const uint64_t reserve = leave_tail ? TailReserve() : 0;
  if (total > 0 && active_pos_ + total + reserve > active_capacity_ &&
      active_pos_ > kSegmentHeaderSize) {
    RUNNEL_RETURN_IF_ERROR(SyncActive());
    RUNNEL_RETURN_IF_ERROR(RollSegment(total));
  }
  std::shared_ptr<env::File> file;
  {
    ReaderLock lock(state_mu_);
    file = segments_.at(active_segment_).file;
  }
  Status s;
  if (total > 0) {
    s = file->WriteAt(active_pos_, pieces);
    unsynced_ = true;
  }
  const bool written = s.ok();
  if (written) {
    unsynced_bytes_ += total;
    unsynced_records_ += records;
  }
  if (s.ok() && (sync || (unsynced_ && options_.durability.mode == LogDurability::kInterval &&
                          std::chrono::steady_clock::now() - last_sync_ >=
                              std::chrono::milliseconds(options_.durability.interval_ms)))) {
    s = SyncLog(*file);
  }
  if (!s.ok()) {
    // Nothing of this group is acknowledged or counted.
    if (written) {
      unsynced_bytes_ -= std::min(unsynced_bytes_, total);
      unsynced_records_ -= std::min(unsynced_records_, records);
    }
    // The bytes may or may not have reached the disk. Zero them again so that nothing of this
    // group can ever be recovered; if that works the failure is definite.
    dirty_end_ = std::max(dirty_end_, active_pos_ + total);
    repair_needed_ = true;
    Status repaired = Repair();
    if (repaired.ok()) {
      const std::string what = "log write failed, nothing was written: " + std::string(s.message());
      return s.no_space() ? Status::NoSpace(what) : Status::IOError(what);
    }
    return Status::OutcomeUnknown("log write failed (" + std::string(s.message()) +
                                  ") and could not be undone (" + std::string(repaired.message()) +
                                  "); the batch may reappear after a restart");
  }
  *pos_out = active_pos_;
  active_pos_ += total;
  if (total > 0) wrote_ = true;
  dirty_end_ = std::max(dirty_end_, active_pos_);
  {
    WriterLock lock(state_mu_);
    segments_.at(active_segment_).end = active_pos_;
  }
  return Status::OK();
}

Status LogStore::RollSegment(uint64_t min_capacity) {
  const auto started = std::chrono::steady_clock::now();
  const uint64_t number = active_segment_ + 1;
  const std::string path = SegmentPath(number);
  const uint64_t capacity =
      std::max<uint64_t>(options_.segment_size, kSegmentHeaderSize + min_capacity);
  auto install = [&](std::shared_ptr<env::File> file, bool prepared) {
    {
      WriterLock lock(state_mu_);
      Segment& seg = segments_[number];
      seg.number = number;
      seg.file = std::move(file);
      seg.end = kSegmentHeaderSize;
    }
    active_segment_ = number;
    active_pos_ = kSegmentHeaderSize;
    dirty_end_ = active_pos_;
    active_capacity_ = capacity;
    unsynced_ = false;
    disk_full_ = false;
    reclaim_due_ = true;  // the segment just sealed may hold dead records
    RequestPreparedSegment(number + 1);
    MutexLock lock(stats_mu_);
    ++stats_.segment_rolls;
    if (!prepared) ++stats_.segment_rolls_unprepared;
    stats_.segment_roll_micros +=
        static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                  std::chrono::steady_clock::now() - started)
                                  .count());
  };
  if (capacity == options_.segment_size) {
    if (auto prepared = TakePreparedSegment(number)) {
      Status s = env_->RenameFile(path + ".prep", path);
      if (s.ok()) s = env_->SyncDir(options_.dir);
      if (s.ok()) {
        install(std::move(prepared), true);
        return Status::OK();
      }
      Status removed = env_->RemoveFile(env_->FileExists(path) ? path : path + ".prep");
      (void)removed;  // fall back to creating the segment here
    }
  }
  // After a failure (a full disk, say), appends that need a new segment fail fast with the
  // same error for a second, instead of each writing zeros until the disk refuses again.
  const auto now = std::chrono::steady_clock::now();
  if (!roll_failure_.ok() && now - roll_failed_at_ < std::chrono::seconds(1)) {
    return roll_failure_;
  }
  auto fail = [&](Status s) {
    Status removed = env_->RemoveFile(path);
    (void)removed;
    roll_failure_ = s;
    roll_failed_at_ = now;
    return s;
  };
  roll_failure_ = Status::OK();
  RUNNEL_ASSIGN_OR_RETURN(auto file, env_->OpenFile(path, true));
  std::shared_ptr<env::File> shared(std::move(file));
  Status s = shared->WriteAt(0, EncodeSegmentHeader(number));
  if (s.ok() && options_.prezero_segments) {
    for (uint64_t p = kSegmentHeaderSize; p < capacity && s.ok(); p += kZeroChunk) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(kZeroChunk, capacity - p));
      s = shared->WriteAt(p, std::string_view(Zeros()).substr(0, n));
    }
  }
  if (s.ok()) s = shared->Sync();
  if (s.ok()) s = env_->SyncDir(options_.dir);
  if (!s.ok()) return fail(s);
  install(std::move(shared), false);
  return Status::OK();
}

}  // namespace runnel::log
