// LogStore: recovery, run by Open before any other thread exists: the checkpoint is loaded,
// then the segments written after it are replayed (ApplyFrame, log_apply.cc).
#include "store/log/log_store_internal.h"

namespace runnel::log {

// ------------------------------------------------------------------------------------------
// Recovery

void LogStore::SalvageNote(std::string note) {
  salvaged_ = true;
  recovery_notes_.push_back(std::move(note));
}

// Long on purpose: recovery's steps in the order they must run (list, pick the checkpoint,
// check the segments, replay, free), sharing the file lists and the replay point.
Status LogStore::Recover() {
  RUNNEL_ASSIGN_OR_RETURN(auto names, env_->ListDir(options_.dir));
  std::vector<uint64_t> segs, ckpts;
  for (const std::string& name : names) {
    uint64_t n;
    if (ParseNumbered(name, "", ".log", &n)) {
      segs.push_back(n);
    } else if (ParseNumbered(name, "checkpoint-", ".ckpt", &n)) {
      ckpts.push_back(n);
    } else if ((name.size() > 4 && name.substr(name.size() - 4) == ".tmp") ||
               (name.size() > 5 && name.substr(name.size() - 5) == ".prep")) {
      RUNNEL_RETURN_IF_ERROR(env_->RemoveFile(env::JoinPath(options_.dir, name)));
    }
  }
  std::sort(segs.begin(), segs.end());
  std::sort(ckpts.rbegin(), ckpts.rend());

  uint64_t replay_seg = segs.empty() ? 1 : segs.front();
  uint64_t replay_pos = kSegmentHeaderSize;
  bool have_checkpoint = false;
  for (uint64_t seq : ckpts) {
    bool segment_short = false;
    Status s = LoadCheckpoint(seq, &replay_seg, &replay_pos, &segment_short);
    if (s.ok()) {
      have_checkpoint = true;
      checkpoint_seq_ = seq;
      break;
    }
    if (segment_short) {
      if (!options_.salvage) {
        return Status::Corruption(
            std::string(s.message()) +
            ": a segment is shorter than data the checkpoint recorded as durable; open with "
            "salvage to replay the log without this checkpoint");
      }
      salvaged_ = true;
    }
    recovery_notes_.push_back("ignored checkpoint: " + s.ToString());
    streams_.clear();
    names_.clear();
    natural_.Clear();
    content_types_.clear();
    next_stream_id_ = 1;
  }
  if (have_checkpoint) {
    // Older checkpoints are removed once a newer one is in place; a crash between the two
    // leaves them. They are of no use (the segments they would replay from may be gone), and on
    // a full disk their bytes are part of what lets the store write again.
    for (uint64_t seq : ckpts) {
      if (seq < checkpoint_seq_) {
        Status removed = env_->RemoveFile(env::JoinPath(options_.dir, CheckpointName(seq)));
        (void)removed;  // tried again at the next open
      }
    }
  }
  if (!ckpts.empty() && !have_checkpoint) {
    // Without a checkpoint the whole history must still be there (segment 1 on).
    if (segs.empty() || segs.front() != 1) {
      return Status::Corruption("no valid checkpoint, and older segments are gone (" +
                                recovery_notes_.back() + ")");
    }
    recovery_notes_.push_back("no valid checkpoint: replaying the whole log");
    replay_seg = 1;
    replay_pos = kSegmentHeaderSize;
  }

  // Every segment from the replay point on must be present and consecutive.
  std::vector<uint64_t> replay;
  for (uint64_t n : segs) {
    if (n >= replay_seg) replay.push_back(n);
  }
  if (have_checkpoint && !replay.empty() && replay.front() != replay_seg) {
    return Status::Corruption("segment " + SegmentName(replay_seg) +
                              " named by the checkpoint is missing");
  }
  for (size_t i = 1; i < replay.size(); ++i) {
    if (replay[i] != replay[i - 1] + 1) {
      return Status::Corruption("segment " + SegmentName(replay[i - 1] + 1) +
                                " is missing between " + SegmentName(replay[i - 1]) + " and " +
                                SegmentName(replay[i]));
    }
  }
  // Old segments the checkpoint's index names: replay can only take records out of them.
  std::set<uint64_t> named;
  streams_.ForEach([&](const StreamState& s) {
    for (size_t i = s.batch_begin; i < s.batches.size(); ++i) named.insert(s.batches[i].segment);
  });
  // Older segments are kept open for reads of the records they still hold.
  for (uint64_t n : segs) {
    if (n >= replay_seg) break;
    RUNNEL_ASSIGN_OR_RETURN(auto file, env_->OpenFile(SegmentPath(n), false));
    Segment& seg = segments_[n];
    seg.number = n;
    seg.file = std::move(file);
  }
  for (size_t i = 0; i < replay.size(); ++i) {
    RUNNEL_RETURN_IF_ERROR(ReplaySegment(replay[i],
                                         replay[i] == replay_seg ? replay_pos : kSegmentHeaderSize,
                                         i + 1 == replay.size()));
  }
  segment_freed_ = false;  // replay's own head moves free nothing new
  freed_since_checkpoint_ = 0;
  // Live bytes per segment, from the index.
  for (auto& [n, seg] : segments_) seg.live_bytes = seg.dropped_bytes = 0;
  Status missing;
  streams_.ForEach([&](StreamState& s) {
    state_mu_.AssertHeld();  // recovery: no other thread exists yet
    for (size_t i = s.batch_begin; i < s.batches.size(); ++i) {
      if (s.batches[i].lost()) continue;
      auto it = segments_.find(s.batches[i].segment);
      if (it == segments_.end()) {
        missing = Status::Corruption("stream '" + s.name.str() + "' (#" + std::to_string(s.id) +
                                     ") has records in missing segment " +
                                     SegmentName(s.batches[i].segment));
        return;
      }
      it->second.live_bytes += s.batches[i].len;
      it->second.dropped_bytes += DroppedBytesIn(s, s.batches[i].first_offset, RefEnd(s, i));
    }
  });
  RUNNEL_RETURN_IF_ERROR(missing);
  if (auto reserve = env_->FileSize(ReservePath()); reserve.ok()) reserve_size_ = *reserve;
  if (replay.empty()) {
    if (have_checkpoint) {
      return Status::Corruption("segment " + SegmentName(replay_seg) +
                                " named by the checkpoint is missing");
    }
    fresh_ = true;
    RUNNEL_RETURN_IF_ERROR(RollSegment(0));
  } else {
    active_segment_ = replay.back();
    Segment& seg = segments_[active_segment_];
    active_pos_ = seg.end;
    RUNNEL_ASSIGN_OR_RETURN(uint64_t size, seg.file->Size());
    active_capacity_ =
        options_.prezero_segments ? std::max(size, active_pos_) : options_.segment_size;
    dirty_end_ = active_pos_;
  }
  // Segments before the replay point that the checkpoint just loaded does not name were freed
  // by it, and a crash came before they were deleted: delete them now (on a full disk they are
  // the space that lets the store write again). No open from that checkpoint reads them.
  std::vector<uint64_t> leftovers;
  for (const auto& [n, seg] : segments_) {
    if (n < replay_seg && seg.live_bytes == 0 && named.count(n) == 0) leftovers.push_back(n);
  }
  DeleteDeadSegments(leftovers);
  return Status::OK();
}

// Long on purpose: one pass over the checkpoint body in the order of its fields
// (docs/formats/log.md), each field checked as it is read.
Status LogStore::LoadCheckpoint(uint64_t file_seq, uint64_t* replay_segment, uint64_t* replay_pos,
                                bool* segment_short) {
  const std::string name = CheckpointName(file_seq);
  RUNNEL_ASSIGN_OR_RETURN(auto file, env_->OpenFile(env::JoinPath(options_.dir, name), false));
  RUNNEL_ASSIGN_OR_RETURN(uint64_t size, file->Size());
  const auto bytes = NewReadBuffer(static_cast<size_t>(size));
  RUNNEL_ASSIGN_OR_RETURN(size_t got, file->ReadAt(0, size, bytes.get()));
  const std::string_view buf(bytes.get(), got);
  auto bad = [&](std::string_view why) {
    return Status::Corruption("checkpoint '" + name + "': " + std::string(why));
  };
  if (got != size || size < kCheckpointHeaderSize) return bad("shorter than its header");
  if (std::string_view(buf).substr(0, 8) != kCheckpointMagic) return bad("wrong magic");
  const uint32_t version = LoadU32(buf.data() + 8);
  if (version < kOldestCheckpointVersion || version > kCheckpointVersion) {
    return bad("unsupported version " + std::to_string(version));
  }
  const uint64_t body_len = LoadU64(buf.data() + 16);
  if (body_len != size - kCheckpointHeaderSize) return bad("length mismatch");
  std::string_view body = std::string_view(buf).substr(kCheckpointHeaderSize);
  if (UnmaskCrc(LoadU32(buf.data() + 24)) != Crc32c(body)) return bad("checksum mismatch");
  checkpoint_body_bytes_ = body.size();

  Reader r(body);
  uint64_t seq, nstreams, next_id;
  if (!r.U64(&seq) || !r.U64(replay_segment) || !r.U64(replay_pos) || !r.U64(&next_id) ||
      !r.U64(&nstreams)) {
    return bad("truncated body");
  }
  if (*replay_segment == 0 || *replay_pos < kSegmentHeaderSize) {
    return bad("replay point inside a segment header");
  }
  next_stream_id_ = next_id;
  // Segment file sizes, for checking batch entries; most entries of a stream name one segment.
  std::map<uint32_t, uint64_t> segment_sizes;
  std::pair<uint32_t, uint64_t> last_size{0, 0};  // a cache of one segment_sizes entry
  auto segment_size = [&](uint32_t segment) {
    if (segment != last_size.first) {
      auto it = segment_sizes.find(segment);
      if (it == segment_sizes.end()) {
        // A missing segment is reported once recovery is done.
        auto got = env_->FileSize(SegmentPath(segment));
        it = segment_sizes.emplace(segment, got.ok() ? *got : UINT64_MAX).first;
      }
      last_size = *it;
    }
    return last_size.second;
  };
  if (*replay_segment <= UINT32_MAX) {
    const uint64_t replay_size = segment_size(static_cast<uint32_t>(*replay_segment));
    if (replay_size != UINT64_MAX && *replay_pos > replay_size) {
      *segment_short = true;
      return bad("replay point past its segment's end");
    }
  }
  // Sized once: a checkpoint may hold millions of streams.
  if (nstreams <= r.remaining()) streams_.Reserve(static_cast<size_t>(nstreams));
  for (uint64_t i = 0; i < nstreams; ++i) {
    auto s = std::make_unique<StreamState>();
    StreamSpec spec;
    uint8_t closed;
    uint64_t nbatches, nrecords;
    if (!r.U64(&s->id) || !r.String(&spec.ns) || !r.String(&spec.name) ||
        !r.String(&spec.content_type) || !r.Retention(&spec.retention) ||
        !r.U64(&spec.first_offset) || !r.U64(&spec.created_at_ms) || !r.String(&spec.attributes) ||
        !r.U64(&s->head) || !r.U64(&s->next) || !r.U8(&closed) || !r.U64(&nbatches) ||
        nbatches > r.remaining() / 20) {
      return bad("truncated stream entry");
    }
    s->closed = closed != 0;
    s->batches.resize(nbatches);
    for (auto& b : s->batches) {
      if (!r.U64(&b.first_offset) || !r.U64(&b.timestamp) || !r.U32(&b.segment) || !r.U32(&b.pos) ||
          !r.U32(&b.len)) {
        return bad("truncated batch entry");
      }
    }
    // The index must cover [head, next) in order, so that every read finds its records.
    if (s->head > s->next || s->head < spec.first_offset) return bad("bad head or next offset");
    if (s->head < s->next && (s->batches.empty() || s->batches.front().first_offset > s->head ||
                              s->batches.back().first_offset >= s->next)) {
      return bad("batch entries do not cover the stream's records");
    }
    for (size_t i = 0; i < s->batches.size(); ++i) {
      const BatchRef& b = s->batches[i];
      if (b.lost()) {  // a hole salvage left (version 3), or records all dropped (version 4)
        if (version < 3 || b.pos != 0 || b.len != 0 ||
            (i > 0 && b.first_offset <= s->batches[i - 1].first_offset)) {
          return bad("bad batch entry");
        }
        continue;
      }
      if ((i > 0 && b.first_offset <= s->batches[i - 1].first_offset) ||
          b.pos < kSegmentHeaderSize || b.len < kFrameHeaderSize + kMinBodySize ||
          b.len > kFrameHeaderSize + kMaxBodySize) {
        return bad("bad batch entry");
      }
      if (uint64_t{b.pos} + b.len > segment_size(b.segment)) {
        *segment_short = true;
        return bad("batch entry past its segment's end");
      }
      // Everything a checkpoint indexes was written before its replay point.
      if (b.segment > *replay_segment ||
          (b.segment == *replay_segment && uint64_t{b.pos} + b.len > *replay_pos)) {
        return bad("batch entry past the checkpoint's replay point");
      }
    }
    if (!r.U64(&nrecords) || nrecords != s->next - s->head || nrecords > r.remaining() / 8) {
      return bad("bad record count");
    }
    s->sizes.reserve(nrecords);
    for (uint64_t i = 0; i < nrecords; ++i) {
      uint32_t payload, key;
      if (!r.U32(&payload) || !r.U32(&key)) return bad("truncated sizes");
      // A dropped record (version 4) is never the head.
      if ((payload & kDroppedBit) != 0 && (version < kCheckpointVersionWithDrops || i == 0 ||
                                           (payload & ~kDroppedBit) > kMaxBodySize)) {
        return bad("bad dropped record");
      }
      s->PushSize(payload, key);
    }
    uint32_t ncursors, nproducers;
    if (!r.U32(&ncursors)) return bad("truncated cursors");
    for (uint32_t c = 0; c < ncursors; ++c) {
      CursorState cs;
      if (!r.String(&cs.consumer) || !r.U64(&cs.offset) || !r.U64(&cs.updated_at_ms)) {
        return bad("truncated cursor");
      }
      s->mut().cursors.emplace(cs.consumer, cs);
    }
    if (!r.U32(&nproducers)) return bad("truncated producers");
    for (uint32_t p = 0; p < nproducers; ++p) {
      ProducerState ps;
      if (!r.String(&ps.producer_id) || !r.U64(&ps.epoch) || !r.U64(&ps.seq) ||
          !r.U64(&ps.last_offset)) {
        return bad("truncated producer");
      }
      s->mut().producers.emplace(ps.producer_id, ps);
    }
    if (s->id == 0 || s->id >= next_stream_id_) return bad("bad stream id");
    // One probe each for the id and the name: the table and the name index refuse a duplicate.
    StreamState* added = streams_.Insert(std::move(s));
    if (added == nullptr) return bad("duplicate stream id");
    if (!Adopt(*added, std::move(spec))) return bad("duplicate stream name");
  }
  if (!r.done()) return bad("trailing bytes");
  return Status::OK();
}

// Long on purpose: one loop over the frames of a segment, whose end cases (torn tail, damage,
// salvage) share its position and must be judged in place.
Status LogStore::ReplaySegment(uint64_t number, uint64_t from, bool last) {
  // Messages and notes name the file relative to the data directory.
  const std::string name = SegmentName(number);
  RUNNEL_ASSIGN_OR_RETURN(auto file, env_->OpenFile(SegmentPath(number), false));
  RUNNEL_ASSIGN_OR_RETURN(uint64_t size, file->Size());
  // The header (and the first frame header after it), then frames from `from` on: the frames
  // before `from` were replayed before the checkpoint was taken, so restart reads at most one
  // checkpoint interval of log, however large the segment.
  std::string head(std::min<uint64_t>(size, kSegmentHeaderSize + kFrameHeaderSize), '\0');
  RUNNEL_ASSIGN_OR_RETURN(size_t got, file->ReadAt(0, head.size(), head.data()));
  head.resize(got);
  Segment& seg = segments_[number];
  seg.number = number;
  seg.file = std::move(file);
  seg.end = kSegmentHeaderSize;
  auto untouched = [&] {
    for (size_t i = kSegmentHeaderSize; i < head.size(); ++i) {
      if (head[i] != 0) return false;
    }
    return true;
  };
  if (last && (head.size() < kSegmentHeaderSize ||
               (!CheckSegmentHeader(head, number, name).ok() && untouched()))) {
    // A crash while creating the segment: its header never became durable, and no frame can
    // have been written after it (frames follow only once the header is synced).
    recovery_notes_.push_back(name + ": incomplete header, segment reinitialised");
    std::string header = EncodeSegmentHeader(number);
    RUNNEL_RETURN_IF_ERROR(seg.file->WriteAt(0, header));
    return ScrubTail(seg, kSegmentHeaderSize);
  }
  RUNNEL_RETURN_IF_ERROR(CheckSegmentHeader(head, number, name));
  SegmentWindow window(*seg.file, size);
  uint64_t pos = std::max<uint64_t>(from, kSegmentHeaderSize);
  while (pos <= size) {
    FrameView f;
    RUNNEL_ASSIGN_OR_RETURN(FrameCheck c, window.ParseAt(pos, &f));
    if (c == FrameCheck::kEnd) {
      // Past the end of the log there must be nothing but zeros. In the last segment, bytes
      // there are a group write that landed in part (a later sector reached the disk, an
      // earlier one did not, so the zeros run to a sector's end): never acknowledged, and left
      // in place they could parse as frames once new writes end next to them. Zero them, as for
      // a torn tail. Anything else (a zeroed header amid written bytes, bytes after the end of
      // a sealed segment) is damage to written data.
      RUNNEL_ASSIGN_OR_RETURN(bool zero, window.ZeroFrom(pos));
      if (!zero) {
        RUNNEL_ASSIGN_OR_RETURN(std::string_view sector, window.View(pos, kTornSectorSize));
        if (!last || !ZeroToSectorEnd(sector, pos)) {
          Status corrupt = Status::Corruption(
              "segment " + name + " at byte " + std::to_string(pos) +
              ": zero frame header followed by written bytes; open with salvage to skip them");
          if (!options_.salvage) return corrupt;
          SalvageNote("salvage dropped the rest of the segment: " + corrupt.ToString());
          seg.end = pos;
          if (last) return ScrubTail(seg, pos);
          return Status::OK();
        }
        recovery_notes_.push_back(name + ": bytes after the end of the log at byte " +
                                  std::to_string(pos) + " (a write that landed in part), zeroed");
        seg.end = pos;
        return ScrubTail(seg, pos);
      }
      break;
    }
    if (c == FrameCheck::kOk) {
      Status s = ApplyFrame(f.type, f.body, static_cast<uint32_t>(number),
                            static_cast<uint32_t>(pos), static_cast<uint32_t>(f.size), true);
      if (!s.ok()) {
        s = Status::Corruption(name + " at byte " + std::to_string(pos) + ": " +
                               std::string(s.message()));
        if (!options_.salvage) return s;
        SalvageNote("salvage skipped a frame: " + s.ToString());
      }
      pos += f.size;
      continue;
    }
    // A bad frame. At the tail of the last segment it is a torn write: truncate it away.
    RUNNEL_ASSIGN_OR_RETURN(std::string_view at, window.View(pos, kFrameHeaderSize + kMinBodySize));
    std::string who;
    if (at.size() == kFrameHeaderSize + kMinBodySize) {
      who = ", stream #" + std::to_string(LoadU64(at.data() + kFrameHeaderSize)) + " (unverified)";
    }
    // A torn write leaves no valid frame after it; a damaged frame among written ones does
    // (log_codec.h, ValidFrameAfter).
    RUNNEL_ASSIGN_OR_RETURN(
        std::optional<uint64_t> next,
        ValidFrameAfter([&](uint64_t a, uint64_t n) { return window.View(a, n); }, pos, size));
    if (last && !next) {
      recovery_notes_.push_back(name + ": torn tail at byte " + std::to_string(pos) + " (" +
                                std::string(FrameCheckName(c)) + "), truncated");
      seg.end = pos;
      return ScrubTail(seg, pos);
    }
    Status corrupt =
        Status::Corruption("segment " + name + " at byte " + std::to_string(pos) + ": " +
                           std::string(FrameCheckName(c)) + who + "; open with salvage to skip it");
    if (!options_.salvage) return corrupt;
    if (next) {
      // Salvage keeps what is intact: replay goes on at the next frame that verifies.
      SalvageNote("salvage skipped bytes " + std::to_string(pos) + " to " + std::to_string(*next) +
                  ": " + corrupt.ToString());
      pos = *next;
      continue;
    }
    SalvageNote("salvage dropped the rest of the segment: " + corrupt.ToString());
    seg.end = pos;
    return Status::OK();
  }
  seg.end = pos;
  return Status::OK();
}

Status LogStore::ScrubTail(Segment& seg, uint64_t from) {
  RUNNEL_ASSIGN_OR_RETURN(uint64_t size, seg.file->Size());
  if (!options_.prezero_segments) {
    RUNNEL_RETURN_IF_ERROR(seg.file->Truncate(from));
    return seg.file->Sync();
  }
  std::string chunk;
  for (uint64_t pos = from; pos < size; pos += kZeroChunk) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(kZeroChunk, size - pos));
    chunk.resize(n);
    RUNNEL_ASSIGN_OR_RETURN(size_t got, seg.file->ReadAt(pos, n, chunk.data()));
    if (!AllZero(std::string_view(chunk.data(), got))) {
      RUNNEL_RETURN_IF_ERROR(seg.file->WriteAt(pos, std::string_view(Zeros()).substr(0, got)));
    }
  }
  return seg.file->Sync();
}

}  // namespace runnel::log
