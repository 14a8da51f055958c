// LogStore: reads, from the tail cache or by pread, and the errors of unreadable records.
#include "store/log/log_store_internal.h"

namespace runnel::log {

// Long on purpose: the plan made under the lock (which records, which frames, which dropped)
// feeds the decoding and filtering done after it without the lock, as locals.
Result<std::vector<StoredRecord>> LogStore::Read(StreamId id, uint64_t from, size_t limit,
                                                 size_t max_bytes) {
  // A run of adjacent frames to pread, or to take from a cached group (`cached` holds the
  // group's bytes, which start at `cached_pos` of the segment).
  struct Run {
    std::shared_ptr<env::File> file;
    uint64_t segment;
    uint64_t pos;
    uint64_t len;
    std::shared_ptr<const std::string> cached;
    uint64_t cached_pos = 0;
  };
  std::vector<Run> runs;
  uint64_t start = 0;
  size_t count = 0;  // the offsets [start, start + count) the read covers
  // The stream holds records DropRecords removed: within the frames the read decodes, those are
  // `dropped` (ascending), decoded with the others and then left out of the answer.
  bool has_dropped = false;
  std::vector<uint64_t> dropped;
  {
    ReaderLock lock(state_mu_);
    StreamState* s = FindLocked(id);
    if (s == nullptr) return StreamNotFound(id);
    if (limit == 0 || s->head >= s->next) return std::vector<StoredRecord>{};
    start = std::max(from, s->head);
    if (start >= s->next) return std::vector<StoredRecord>{};
    // Decide exactly which records the read returns, from the in-memory sizes.
    size_t bytes = 0;
    if (s->Dropped() == 0) {
      for (uint64_t o = start; o < s->next && count < limit; ++o) {
        const size_t size = s->sizes[s->size_begin + (o - s->head)];
        if (count > 0 && bytes + size > max_bytes) break;
        bytes += size;
        ++count;
      }
    } else {
      // Dropped records are skipped: they count toward neither the limit nor the bytes, and
      // the read starts at the first record not dropped.
      size_t returned = 0;
      uint64_t o = start;
      while (o < s->next && s->DroppedAt(s->size_begin + (o - s->head))) ++o;
      start = o;
      uint64_t last = start;  // one past the last record returned
      for (; o < s->next && returned < limit; ++o) {
        const size_t i = s->size_begin + (o - s->head);
        if (s->DroppedAt(i)) continue;
        const size_t size = s->sizes[i];
        if (returned > 0 && bytes + size > max_bytes) break;
        bytes += size;
        ++returned;
        last = o + 1;
      }
      if (returned == 0) return std::vector<StoredRecord>{};
      count = static_cast<size_t>(last - start);
      has_dropped = true;
    }
    const uint64_t end = start + count;
    auto it = std::upper_bound(s->batches.begin() + static_cast<std::ptrdiff_t>(s->batch_begin),
                               s->batches.end(), start,
                               [](uint64_t o, const BatchRef& b) { return o < b.first_offset; });
    for (--it; it != s->batches.end() && it->first_offset < end; ++it) {
      if (has_dropped) {
        const uint64_t lo = std::max(it->first_offset, start);
        const uint64_t hi = std::min(RefEnd(*s, static_cast<size_t>(it - s->batches.begin())), end);
        if (it->lost()) {
          // A dead reference (its records all dropped) is not read; a hole is, below.
          bool all = true;
          for (uint64_t o = lo; o < hi && all; ++o)
            all = s->DroppedAt(s->size_begin + (o - s->head));
          if (all) continue;
        } else {
          for (uint64_t o = lo; o < hi; ++o) {
            if (s->DroppedAt(s->size_begin + (o - s->head))) dropped.push_back(o);
          }
        }
      }
      if (it->lost()) {
        // A hole salvage left: the read stops before it, or fails when it starts there.
        const auto after = std::next(it);
        const uint64_t lost_end = after == s->batches.end() ? s->next : after->first_offset;
        if (it->first_offset > start) {
          count = static_cast<size_t>(it->first_offset - start);
          break;
        }
        unreadable_reads_.fetch_add(1, std::memory_order_relaxed);
        return Status::Unreadable("records " + std::to_string(start) + " to " +
                                      std::to_string(lost_end - 1) + " of stream '" +
                                      s->name.str() +
                                      "' were lost to damage (salvage skipped them); reading "
                                      "goes on from record " +
                                      std::to_string(lost_end),
                                  start, lost_end);
      }
      if (const TailCache::CachedGroup* hit = cache_.Find(it->segment, it->pos, it->len)) {
        cache_hits_.fetch_add(1, std::memory_order_relaxed);
        if (!runs.empty() && runs.back().cached == hit->bytes &&
            runs.back().pos + runs.back().len == it->pos) {
          runs.back().len += it->len;
        } else {
          runs.push_back(
              Run{nullptr, it->segment, it->pos, it->len, hit->bytes, hit->key & 0xffffffffu});
        }
        continue;
      }
      cache_misses_.fetch_add(1, std::memory_order_relaxed);
      if (!runs.empty() && !runs.back().cached && runs.back().segment == it->segment &&
          runs.back().pos + runs.back().len == it->pos) {
        runs.back().len += it->len;
        continue;
      }
      auto seg = segments_.find(it->segment);
      if (seg == segments_.end()) {
        return Status::Internal("stream #" + std::to_string(id) + " refers to missing segment " +
                                SegmentName(it->segment));
      }
      runs.push_back(Run{seg->second.file, it->segment, it->pos, it->len, nullptr});
    }
  }
  std::vector<StoredRecord> out;
  out.reserve(count);
  std::string buf;
  for (const Run& run : runs) {
    std::string_view data;
    if (run.cached) {
      data = std::string_view(*run.cached).substr(run.pos - run.cached_pos, run.len);
    } else {
      buf.resize(run.len);
      RUNNEL_ASSIGN_OR_RETURN(size_t got, run.file->ReadAt(run.pos, run.len, buf.data()));
      data = std::string_view(buf.data(), got);
    }
    uint64_t at = 0;
    while (at < run.len && out.size() < count) {
      FrameView f;
      // Cached frames are the bytes this process framed at append time; only file bytes can
      // have rotted, so only they pay for the checksum.
      FrameCheck c = ParseFrame(data.substr(at), &f, /*verify_crc=*/!run.cached);
      AppendBatchHeader h;
      const size_t decoded = out.size();
      if (c != FrameCheck::kOk ||
          (f.type != FrameType::kAppendBatch && f.type != FrameType::kRelocatedBatch) ||
          !DecodeAppendBatch(f.body, &h, nullptr, &out, start, count) || h.stream != id) {
        out.resize(decoded);
        // The records read before the damage are answered; a read that starts at it learns
        // which offsets cannot be read, and where reading goes on.
        if (!out.empty()) return out;
        return UnreadableAt(id, start + decoded, run.segment, run.pos + at,
                            c == FrameCheck::kOk ? "unexpected frame" : FrameCheckName(c));
      }
      at += f.size;
    }
  }
  if (has_dropped) {
    // Leave out the dropped records, and the records past the read that the frame after a
    // skipped dead reference brought (one pass, both lists ascending).
    auto d = dropped.begin();
    const uint64_t end = start + count;
    std::erase_if(out, [&](const StoredRecord& r) {
      while (d != dropped.end() && *d < r.offset) ++d;
      return r.offset >= end || (d != dropped.end() && *d == r.offset);
    });
  }
  return out;
}

Status LogStore::UnreadableAt(StreamId id, uint64_t first, uint64_t segment, uint64_t pos,
                              std::string_view why) {
  unreadable_reads_.fetch_add(1, std::memory_order_relaxed);
  uint64_t end = first + 1;
  std::string name = "#" + std::to_string(id);
  {
    ReaderLock lock(state_mu_);
    if (const StreamState* s = FindLocked(id)) {
      name = "'" + s->name.str() + "'";
      // The damage reaches as far as the reference holding it: the next reference starts
      // where reading can go on.
      auto it = std::upper_bound(s->batches.begin() + static_cast<std::ptrdiff_t>(s->batch_begin),
                                 s->batches.end(), first,
                                 [](uint64_t o, const BatchRef& b) { return o < b.first_offset; });
      end = it == s->batches.end() ? s->next : it->first_offset;
      end = std::max(end, first + 1);
    }
  }
  return Status::Unreadable(
      "records " + std::to_string(first) + " to " + std::to_string(end - 1) + " of stream " + name +
          " cannot be read (segment " + SegmentName(segment) + " at byte " + std::to_string(pos) +
          ": " + std::string(why) + "); reading goes on from record " + std::to_string(end),
      first, end);
}

Result<std::optional<StoredRecord>> LogStore::ReadAt(StreamId id, uint64_t offset) {
  RUNNEL_ASSIGN_OR_RETURN(auto recs, Read(id, offset, 1, std::numeric_limits<size_t>::max()));
  if (recs.empty() || recs.front().offset != offset) return std::optional<StoredRecord>();
  return std::optional<StoredRecord>(std::move(recs.front()));
}

}  // namespace runnel::log
