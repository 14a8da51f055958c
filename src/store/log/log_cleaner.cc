// LogStore: the cleaner (copying the live batches of old, mostly dead segments to the head
// of the log) and reclaiming space on a full disk.
#include "store/log/cleaner_policy.h"
#include "store/log/log_store_internal.h"

namespace runnel::log {

Status LogStore::Clean() {
  if (options_.cleaner_live_ratio <= 0) return Status::OK();
  // The emptiest old segments below the ratio, as many as one checkpoint interval of live bytes
  // (one segment at least): a pass copies at most about what was appended since the last one,
  // so the cleaner keeps pace with segments that decay as fast as the log grows, and the
  // writer's pause for it stays bounded.
  const double threshold = options_.cleaner_live_ratio * static_cast<double>(options_.segment_size);
  std::vector<std::pair<uint64_t, uint64_t>> candidates;  // (live bytes, segment)
  {
    ReaderLock lock(state_mu_);
    for (const auto& [n, seg] : segments_) {
      if (n >= active_segment_) break;
      // By what its copy would take: records DropRecords removed are not copied.
      if (seg.live_bytes > 0 && static_cast<double>(seg.CleanableBytes()) < threshold) {
        candidates.emplace_back(seg.CleanableBytes(), n);
      }
    }
  }
  const uint64_t budget = std::max(options_.checkpoint_interval_bytes, options_.segment_size);
  const std::vector<uint64_t> victims = PickEmptiest(std::move(candidates), budget, true);
  if (victims.empty()) return Status::OK();
  return Relocate(victims);
}

// Long on purpose: gathers the live references, then copies them frame by frame (compacting
// dropped records) through one flush that writes and applies each group; all share its frames.
Status LogStore::Relocate(const std::vector<uint64_t>& victims) {
  constexpr uint64_t kGroupBytes = 1u << 20;
  struct Item {
    StreamId stream;
    uint64_t first_offset;
    uint32_t segment, pos, len;
    std::shared_ptr<env::File> file;
  };
  std::vector<Item> items;
  {
    ReaderLock lock(state_mu_);
    streams_.ForEach([&](const StreamState& s) {
      state_mu_.AssertReaderHeld();  // a lambda run under `lock`
      const StreamId id = s.id;
      for (size_t i = s.batch_begin; i < s.batches.size(); ++i) {
        const BatchRef& b = s.batches[i];
        if (std::binary_search(victims.begin(), victims.end(), uint64_t{b.segment})) {
          auto seg = segments_.find(b.segment);
          if (seg == segments_.end()) continue;
          items.push_back(Item{id, b.first_offset, b.segment, b.pos, b.len, seg->second.file});
        }
      }
    });
  }
  // Grouped by stream, in offset order, so each stream's history becomes contiguous.
  std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) {
    return a.stream != b.stream ? a.stream < b.stream : a.first_offset < b.first_offset;
  });
  std::vector<std::string> frames;
  uint64_t group_bytes = 0;
  auto flush = [&]() -> Status {
    if (frames.empty()) return Status::OK();
    std::vector<std::string_view> pieces(frames.begin(), frames.end());
    uint64_t pos;
    // Not synced group by group: the segments they come from stay until a checkpoint after
    // them, whose marker is synced after them (a roll syncs the segment it leaves).
    RUNNEL_RETURN_IF_ERROR(WriteFrames(pieces, group_bytes, 0, false, true, &pos));
    {
      MutexLock lock(stats_mu_);
      stats_.cleaner_bytes += group_bytes;
    }
    WriterLock lock(state_mu_);
    for (const std::string& frame : frames) {
      FrameView f;
      if (ParseFrame(frame, &f) == FrameCheck::kOk) {
        Status s = ApplyFrame(f.type, f.body, static_cast<uint32_t>(active_segment_),
                              static_cast<uint32_t>(pos), static_cast<uint32_t>(f.size), false);
        (void)s;  // a relocation of records that are gone by now is a no-op
      }
      pos += frame.size();
    }
    frames.clear();
    group_bytes = 0;
    return Status::OK();
  };
  std::string buf;
  for (const Item& item : items) {
    buf.resize(item.len);
    RUNNEL_ASSIGN_OR_RETURN(size_t got, item.file->ReadAt(item.pos, item.len, buf.data()));
    if (got != item.len) {
      return Status::Corruption("segment " + SegmentName(item.segment) + " at byte " +
                                std::to_string(item.pos) + ", stream #" +
                                std::to_string(item.stream) + ": live batch is cut short");
    }
    // A reference may hold several adjacent frames: each is relocated, in order.
    for (uint64_t at = 0; at < item.len;) {
      FrameView f;
      if (ParseFrame(std::string_view(buf.data() + at, item.len - at), &f) != FrameCheck::kOk ||
          (f.type != FrameType::kAppendBatch && f.type != FrameType::kRelocatedBatch)) {
        return Status::Corruption("segment " + SegmentName(item.segment) + " at byte " +
                                  std::to_string(item.pos + at) + ", stream #" +
                                  std::to_string(item.stream) + ": live batch is unreadable");
      }
      std::string frame;
      // Records that are gone (dropped, or below the head) are not copied: their frame is
      // written compacted, naming its source's length for the carving of its reference.
      AppendBatchHeader h;
      if (!DecodeAppendBatch(f.body, &h, nullptr, nullptr)) {
        return Status::Corruption("segment " + SegmentName(item.segment) + " at byte " +
                                  std::to_string(item.pos + at) + ", stream #" +
                                  std::to_string(item.stream) + ": live batch is unreadable");
      }
      std::vector<bool> gone(h.count, false);
      bool any_gone = false;
      {
        ReaderLock lock(state_mu_);
        if (const StreamState* s = FindLocked(item.stream); s != nullptr && s->Dropped() > 0) {
          for (uint32_t i = 0; i < h.count; ++i) {
            const uint64_t o = h.first_offset + i;
            gone[i] = o < s->head || (o < s->next && s->DroppedAt(s->size_begin + (o - s->head)));
            any_gone = any_gone || gone[i];
          }
        }
      }
      if (any_gone || h.source_len != 0) {
        std::vector<StoredRecord> records;
        DecodeAppendBatch(f.body, &h, nullptr, &records);
        std::vector<AppendRecord> kept;
        kept.reserve(records.size());
        for (size_t i = 0; i < records.size(); ++i) {
          if (gone[i]) {
            kept.push_back(AppendRecord{std::nullopt, std::string()});
          } else {
            kept.push_back(AppendRecord{std::move(records[i].key), std::move(records[i].payload)});
          }
        }
        std::string body;
        EncodeCompactedBatch(&body, h.stream, h.first_offset, h.timestamp,
                             static_cast<uint32_t>(f.size), kept);
        AppendFrame(&frame, FrameType::kRelocatedBatch, body);
      } else {
        AppendFrame(&frame, FrameType::kRelocatedBatch, f.body);
      }
      group_bytes += frame.size();
      frames.push_back(std::move(frame));
      at += f.size;
      if (group_bytes >= kGroupBytes) RUNNEL_RETURN_IF_ERROR(flush());
    }
  }
  RUNNEL_RETURN_IF_ERROR(flush());
  return SyncActive();
}

std::vector<uint64_t> LogStore::ReclaimVictims() const {
  // One segment holds the copies (the last group of them may need a fresh one), so the
  // reclamation needs at most one new segment, which the reserve provides.
  const uint64_t room = options_.segment_size - kSegmentHeaderSize - TailReserve();
  const uint64_t most_live = options_.segment_size - options_.segment_size / 8;
  std::vector<std::pair<uint64_t, uint64_t>> candidates;  // (live bytes, segment)
  {
    ReaderLock lock(state_mu_);
    for (const auto& [n, seg] : segments_) {
      if (n >= active_segment_) break;
      if (seg.live_bytes > 0 && seg.live_bytes <= most_live)
        candidates.emplace_back(seg.live_bytes, n);
    }
  }
  return PickEmptiest(std::move(candidates), room, false);
}

bool LogStore::ReclaimSpace() {
  reclaim_due_ = false;
  PollBackgroundCheckpoint(true);
  const std::vector<uint64_t> victims = ReclaimVictims();
  const uint64_t deleted_before = segments_deleted_;
  bool dead = false;
  {
    ReaderLock lock(state_mu_);
    for (const auto& [n, seg] : segments_) {
      if (n >= active_segment_) break;
      dead = dead || seg.live_bytes == 0;
    }
  }
  if (victims.empty() && !dead) return false;
  PausePreparer();
  bool drew = false;
  // Runs `step`; when the disk has no room for it, again after giving up `give` bytes of the
  // reserve (and, for a checkpoint, once more after giving up all of it).
  auto with_reserve = [&](const std::function<Status()>& step, uint64_t give, bool last) {
    Status s = step();
    if (!s.no_space()) return s;
    if (ShrinkReserve(give)) {
      drew = true;
      s = step();
    }
    if (s.no_space() && last && ShrinkReserve(UINT64_MAX)) {
      drew = true;
      s = step();
    }
    return s;
  };
  auto checkpoint = [&] { return WriteCheckpoint(); };
  Status s;
  // What is wholly dead goes first: it needs only a checkpoint (a segment's worth of room for
  // the copies below must not leave too little for it, as a crash in the middle of an earlier
  // reclamation may have).
  if (dead) s = with_reserve(checkpoint, CheckpointRoom(), true);
  if (s.ok() && !victims.empty()) {
    // The copies may use the reserve but for the room of the checkpoint that must follow them.
    uint64_t reserve;
    {
      MutexLock lock(prep_mu_);
      reserve = reserve_size_;
    }
    const uint64_t keep = CheckpointRoom();
    s = with_reserve([&] { return Relocate(victims); }, reserve > keep ? reserve - keep : 0, false);
    // The checkpoint that no longer needs the emptied segments; FinishCheckpoint deletes them.
    if (s.ok()) s = with_reserve(checkpoint, UINT64_MAX, true);
  }
  if (drew) {
    MutexLock lock(stats_mu_);
    ++stats_.reserve_draws;
  }
  ResumePreparer();
  if (!s.ok()) {
    // Tried again after a delay that doubles up to 64 s (what the disk lacked may come back: a
    // file removed by hand, the reserve made whole), and at once when more records die.
    const auto delay = std::chrono::seconds(1u << std::min<uint32_t>(reclaim_failures_, 6));
    ++reclaim_failures_;
    reclaim_due_ = true;
    reclaim_retry_at_ = std::chrono::steady_clock::now() + delay;
    LogF(LogLevel::kWarn,
         "log store %s: the disk is full and space could not be "
         "reclaimed (%s); retrying in %llds, or once more records die",
         options_.dir.c_str(), s.ToString().c_str(), static_cast<long long>(delay.count()));
  } else {
    reclaim_failures_ = 0;
  }
  if (segments_deleted_ == deleted_before) return false;
  {
    MutexLock lock(stats_mu_);
    ++stats_.space_reclaims;
  }
  disk_full_ = false;
  roll_failure_ = Status::OK();
  return true;
}

}  // namespace runnel::log
