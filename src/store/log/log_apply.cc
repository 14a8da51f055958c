// LogStore: the visible state. Stream lookups and naming, and applying frames to the index
// (the writer after each group commits, and recovery's replay: the same code).
#include "store/log/log_store_internal.h"

namespace runnel::log {

// ------------------------------------------------------------------------------------------
// Applying frames

LogStore::StreamState* LogStore::FindLocked(StreamId id) const {
  return streams_.Find(id);
}

LogStore::StreamState* LogStore::FindByNameLocked(std::string_view ns,
                                                  std::string_view name) const {
  auto ns_it = names_.find(ns);
  if (ns_it == names_.end()) return nullptr;
  auto it = ns_it->second.find(name);
  return it == ns_it->second.end() ? nullptr : const_cast<StreamState*>(*it);
}

bool LogStore::Adopt(StreamState& s, StreamSpec spec) {
  s.name = spec.name;
  s.SetFirstOffset(spec.first_offset);
  s.created_at_ms = spec.created_at_ms;
  auto ct = content_types_.try_emplace(std::move(spec.content_type), 0).first;
  ++ct->second;
  s.content_type = &ct->first;
  const StreamRetention& ret = spec.retention;
  if (ret.max_events || ret.max_age_ms || ret.max_bytes || !spec.attributes.empty()) {
    s.mut().retention = ret;
    s.mut().attributes = std::move(spec.attributes);
  }
  auto ns = names_.try_emplace(std::move(spec.ns)).first;
  s.ns = &ns->first;
  // Checkpoints list streams in name order, so the end is the right place as a rule (constant
  // time); elsewhere the hint costs one comparison before the usual search.
  const bool added = *ns->second.insert(ns->second.end(), &s) == &s;
  if (added) natural_.Add(ns->first, &s);
  return added;
}

void LogStore::Forget(StreamState& s) {
  natural_.Remove(*s.ns, &s);
  auto ns_it = names_.find(*s.ns);
  if (ns_it != names_.end()) {
    ns_it->second.erase(&s);
    if (ns_it->second.empty()) names_.erase(ns_it);
  }
  s.ns = nullptr;
  auto ct = content_types_.find(*s.content_type);
  if (ct != content_types_.end() && --ct->second == 0) content_types_.erase(ct);
  s.content_type = nullptr;
}

StreamInfo LogStore::Snapshot(const StreamState& s) {
  StreamInfo info;
  info.id = s.id;
  info.spec = s.Spec();
  info.next_offset = s.next;
  info.event_count = s.next - s.head - s.Dropped();
  info.retained_bytes = s.bytes;
  info.closed = s.closed;
  if (s.next > s.head) {
    // The head is never a dropped record; the tail is the last record not dropped.
    info.head_offset = s.head;
    uint64_t tail = s.next - 1;
    if (s.Dropped() > 0) {
      while (tail > s.head && s.DroppedAt(s.size_begin + (tail - s.head))) --tail;
    }
    info.tail_offset = tail;
  }
  return info;
}

void LogStore::Compact(StreamState& s) {
  if (s.batch_begin > 16 && s.batch_begin * 2 > s.batches.size()) {
    s.batches.erase(s.batches.begin(),
                    s.batches.begin() + static_cast<std::ptrdiff_t>(s.batch_begin));
    s.batch_begin = 0;
  }
  std::vector<uint32_t>* key_sizes =
      s.extras && !s.extras->key_sizes.empty() ? &s.extras->key_sizes : nullptr;
  if (s.size_begin > 64 && s.size_begin * 2 > s.sizes.size()) {
    const auto n = static_cast<std::ptrdiff_t>(s.size_begin);
    s.sizes.erase(s.sizes.begin(), s.sizes.begin() + n);
    if (key_sizes != nullptr) key_sizes->erase(key_sizes->begin(), key_sizes->begin() + n);
    s.size_begin = 0;
  }
  if (s.batch_begin == s.batches.size()) {
    std::vector<BatchRef>().swap(s.batches);
    s.batch_begin = 0;
  }
  if (s.size_begin == s.sizes.size()) {
    std::vector<uint32_t>().swap(s.sizes);
    if (key_sizes != nullptr) std::vector<uint32_t>().swap(*key_sizes);
    s.size_begin = 0;
  }
}

void LogStore::DropHead(StreamState& s, uint64_t n) {
  n = std::min(n, s.next - s.head);
  const uint64_t had_dropped = s.Dropped();
  if (had_dropped > 0) {
    // The new head is never a dropped record.
    while (s.head + n < s.next && s.DroppedAt(s.size_begin + n)) ++n;
  }
  if (n == 0) return;
  uint64_t dropped = 0;
  for (uint64_t i = 0; i < n; ++i) {
    s.bytes -= s.RecordBytesAt(s.size_begin + i);
    if (had_dropped > 0 && s.DroppedAt(s.size_begin + i)) ++dropped;
  }
  const uint64_t new_head = s.head + n;
  // Release every batch whose records are all below the new head.
  while (s.batch_begin < s.batches.size()) {
    if (RefEnd(s, s.batch_begin) > new_head) break;
    const BatchRef& b = s.batches[s.batch_begin];
    if (!b.lost()) {
      ReferenceLeft(
          b.segment, b.len,
          had_dropped > 0 ? DroppedBytesIn(s, b.first_offset, RefEnd(s, s.batch_begin)) : 0);
    }
    ++s.batch_begin;
  }
  s.size_begin += static_cast<uint32_t>(n);
  s.head = new_head;
  if (dropped > 0) s.extras->dropped -= dropped;
  Compact(s);
}

uint64_t LogStore::DroppedBytesIn(const StreamState& s, uint64_t lo, uint64_t hi) {
  if (s.Dropped() == 0) return 0;
  uint64_t bytes = 0;
  for (uint64_t o = std::max(lo, s.head); o < std::min(hi, s.next); ++o) {
    const size_t i = s.size_begin + (o - s.head);
    if (s.DroppedAt(i)) bytes += store::RecordBytes(s.KeySize(i), s.sizes[i] & ~kDroppedBit);
  }
  return bytes;
}

void LogStore::ReferenceLeft(uint32_t segment, uint64_t len, uint64_t dropped) {
  auto it = segments_.find(segment);
  if (it == segments_.end()) return;
  Segment& seg = it->second;
  seg.live_bytes -= std::min<uint64_t>(len, seg.live_bytes);
  seg.dropped_bytes -= std::min<uint64_t>(dropped, seg.dropped_bytes);
  if (it->first != active_segment_) {
    reclaim_due_ = true;
    reclaim_retry_at_ = {};  // something new to reclaim: no waiting out an earlier failure
    freed_since_checkpoint_ += len;
    if (seg.live_bytes == 0) segment_freed_ = true;
  }
}

uint64_t LogStore::ApplyDrops(StreamState& s, const std::vector<uint64_t>& offsets) {
  uint64_t removed = 0;
  auto first = std::lower_bound(offsets.begin(), offsets.end(), s.head);
  if (first == offsets.end() || *first >= s.next) return 0;
  // The reference holding *first, then each later one as the offsets reach it.
  size_t ref = static_cast<size_t>(
      std::upper_bound(s.batches.begin() + static_cast<std::ptrdiff_t>(s.batch_begin),
                       s.batches.end(), *first,
                       [](uint64_t o, const BatchRef& b) { return o < b.first_offset; }) -
      s.batches.begin() - 1);
  bool touched = false;  // a record of batches[ref] was dropped by this frame
  // A reference whose records are now all dropped holds nothing live: it becomes a dead one
  // (kLostSegment), its frames' bytes leave the segment's live bytes.
  auto finish = [&]() {
    state_mu_.AssertHeld();  // a lambda of this function, which holds it
    if (!touched) return;
    touched = false;
    BatchRef& b = s.batches[ref];
    if (b.lost()) return;
    const uint64_t begin = std::max(b.first_offset, s.head);
    const uint64_t end = RefEnd(s, ref);
    for (uint64_t o = begin; o < end; ++o) {
      if (!s.DroppedAt(s.size_begin + (o - s.head))) return;
    }
    ReferenceLeft(b.segment, b.len, DroppedBytesIn(s, b.first_offset, end));
    b.segment = kLostSegment;
    b.pos = 0;
    b.len = 0;
  };
  for (auto it = first; it != offsets.end() && *it < s.next; ++it) {
    const uint64_t o = *it;
    const size_t i = s.size_begin + (o - s.head);
    if (s.DroppedAt(i)) continue;
    while (RefEnd(s, ref) <= o) {
      finish();
      ++ref;
    }
    if (!s.batches[ref].lost()) {
      auto seg = segments_.find(s.batches[ref].segment);
      if (seg != segments_.end()) seg->second.dropped_bytes += s.RecordBytesAt(i);
    }
    s.bytes -= s.RecordBytesAt(i);
    s.sizes[i] |= kDroppedBit;
    ++s.mut().dropped;
    ++removed;
    touched = true;
  }
  finish();
  // The head moves past dropped records (DropHead(0) does only that).
  DropHead(s, 0);
  return removed;
}

// An append batch's effect, from its header and its records' (payload, key) sizes: decoded from
// the frame on replay, or taken from the append itself by the writer that just encoded it.
// Long on purpose: the batch's placement (with salvage's holes), then the producer, close and
// attributes it carries, then retention, in the one order every store applies them.
Status LogStore::ApplyAppendBatch(StreamState* s, AppendBatchHeader h,
                                  const std::vector<std::pair<uint32_t, uint32_t>>& sizes,
                                  uint32_t segment, uint32_t pos, uint32_t len, bool replay) {
  const StreamId id = s->id;
  // The writer never passes the largest offset; a frame that would is damage (and salvage,
  // which accepts a batch that skips ahead, must not wrap the stream's offsets around).
  if (h.count > std::numeric_limits<uint64_t>::max() - h.first_offset) {
    return Status::Corruption("append-batch of stream #" + std::to_string(id) + " at " +
                              std::to_string(h.first_offset) + " passes the largest offset");
  }
  if (h.first_offset != s->next) {
    if (!(replay && options_.salvage)) {
      return Status::Corruption("append-batch of stream #" + std::to_string(id) + " starts at " +
                                std::to_string(h.first_offset) +
                                " but the stream's next offset is " + std::to_string(s->next));
    }
    if (h.first_offset < s->next) return Status::OK();  // already present
    // The records between were in the damaged bytes: they become a hole (offsets kept,
    // reads of them fail), and every intact record before and after stays readable.
    SalvageNote("salvage: stream '" + s->name.str() + "' (#" + std::to_string(id) +
                ") lost records " + std::to_string(s->next) + " to " +
                std::to_string(h.first_offset - 1) + " to the damage; the records before " +
                "and after them are kept");
    if (s->head == s->next || h.first_offset - s->next > kMaxHoleRecords) {
      // Nothing retained before (no hole needed), or a gap too wide to index record by
      // record: the stream starts over at the intact frame.
      DropHead(*s, s->next - s->head);
      s->head = s->next = h.first_offset;
    } else {
      s->batches.push_back(BatchRef{s->next, h.timestamp, kLostSegment, 0, 0});
      for (uint64_t o = s->next; o < h.first_offset; ++o) s->PushSize(0, 0);
      s->next = h.first_offset;
    }
  }
  if (h.count > 0) {
    for (const auto& [payload, key] : sizes) {
      s->PushSize(payload, key);
    }
    BatchRef* last = s->batch_begin < s->batches.size() ? &s->batches.back() : nullptr;
    if (last != nullptr && last->segment == segment && last->pos + last->len == pos &&
        last->timestamp == h.timestamp && last->len + len <= kMaxMergedBatchBytes && !replay &&
        last->pos >= merge_floor_pos_) {
      last->len += len;  // the next adjacent frame of this stream: same reference
    } else {
      s->batches.push_back(BatchRef{h.first_offset, h.timestamp, segment, pos, len});
    }
    auto it = segments_.find(segment);
    if (it != segments_.end()) it->second.live_bytes += len;
    s->next += h.count;
  }
  if (h.producer) {
    ProducerState p = std::move(*h.producer);
    p.last_offset = h.count ? s->next - 1 : 0;
    s->mut().producers[p.producer_id] = std::move(p);
  }
  if (h.close) s->closed = true;
  if (h.attributes && (s->extras || !h.attributes->empty())) {
    s->mut().attributes = std::move(*h.attributes);
  }
  // Retention, exactly as every store applies it.
  const StreamRetention& retention = s->view().retention;
  if (retention.max_events || retention.max_bytes || retention.max_age_ms) {
    store::RetainedView view;
    view.count = static_cast<size_t>(s->next - s->head - s->Dropped());
    view.total_bytes = s->bytes;
    // The i-th retained record's offset: the i-th one not dropped. Retention asks for the
    // oldest ones in order, so a walk from the last answer finds it (a stream without
    // dropped records maps i to head + i).
    auto at = std::make_shared<std::pair<size_t, uint64_t>>(0, s->head);
    auto offset_of = [s, at](size_t i) {
      if (s->Dropped() == 0) return s->head + i;
      if (i < at->first) *at = {0, s->head};
      while (at->first < i || s->DroppedAt(s->size_begin + (at->second - s->head))) {
        if (!s->DroppedAt(s->size_begin + (at->second - s->head))) ++at->first;
        ++at->second;
      }
      return at->second;
    };
    view.timestamp_at = [s, offset_of](size_t i) {
      const uint64_t off = offset_of(i);
      auto it = std::upper_bound(s->batches.begin() + static_cast<std::ptrdiff_t>(s->batch_begin),
                                 s->batches.end(), off,
                                 [](uint64_t o, const BatchRef& b) { return o < b.first_offset; });
      return std::prev(it)->timestamp;
    };
    view.bytes_at = [s, offset_of](size_t i) {
      return s->RecordBytesAt(s->size_begin + (offset_of(i) - s->head));
    };
    const size_t cut = store::RetentionDropCount(retention, h.timestamp, view);
    // DropHead counts dropped records too: the cut ends after the cut-th retained record.
    DropHead(*s, cut == 0 ? 0 : offset_of(cut - 1) + 1 - s->head);
  }
  return Status::OK();
}

// Long on purpose: one case per frame type, the same code for live apply and replay; each case
// is short and reads against its frame's encoding in log_codec.h.
Status LogStore::ApplyFrame(FrameType type, std::string_view body, uint32_t segment, uint32_t pos,
                            uint32_t len, bool replay) {
  Reader r(body);
  StreamId id = 0;
  switch (type) {
    case FrameType::kCreateStream: {
      auto s = std::make_unique<StreamState>();
      StreamSpec spec;
      if (!r.U64(&s->id) || !r.String(&spec.ns) || !r.String(&spec.name) ||
          !r.String(&spec.content_type) || !r.Retention(&spec.retention) ||
          !r.U64(&spec.first_offset) || !r.U64(&spec.created_at_ms) ||
          !r.String(&spec.attributes) || !r.done()) {
        return Status::Corruption("malformed create-stream frame");
      }
      if (s->id == 0 || s->id > next_stream_id_ + (1u << 20)) {
        return Status::Corruption("create-stream with implausible id " + std::to_string(s->id));
      }
      if (streams_.Find(s->id) != nullptr) {
        return Status::Corruption("create-stream of existing stream #" + std::to_string(s->id));
      }
      if (FindByNameLocked(spec.ns, spec.name) != nullptr) {
        return Status::Corruption("create-stream of existing name '" + spec.name + "'");
      }
      s->head = s->next = spec.first_offset;
      next_stream_id_ = std::max(next_stream_id_, s->id + 1);
      StreamState* added = streams_.Insert(std::move(s));
      if (added == nullptr || !Adopt(*added, std::move(spec))) {
        return Status::Internal("create-stream replay: the stream's id or name was taken");
      }
      return Status::OK();
    }
    case FrameType::kCheckpointMarker: return Status::OK();
    default: break;
  }
  if (!r.U64(&id)) return Status::Corruption("frame too short for a stream id");
  StreamState* s = FindLocked(id);
  if (s == nullptr) {
    return Status::Corruption("frame for unknown stream #" + std::to_string(id));
  }
  switch (type) {
    case FrameType::kUpdateStream: {
      StreamRetention ret;
      std::string attrs;
      if (!r.Retention(&ret) || !r.String(&attrs) || !r.done()) {
        return Status::Corruption("malformed update-stream frame");
      }
      if (s->extras || ret.max_events || ret.max_age_ms || ret.max_bytes || !attrs.empty()) {
        s->mut().retention = ret;
        s->mut().attributes = std::move(attrs);
      }
      return Status::OK();
    }
    case FrameType::kDeleteStream: {
      if (!r.done()) return Status::Corruption("malformed delete-stream frame");
      DropHead(*s, s->next - s->head);
      Forget(*s);
      streams_.Erase(id);
      return Status::OK();
    }
    case FrameType::kAppendBatch: {
      AppendBatchHeader h;
      std::vector<std::pair<uint32_t, uint32_t>>& sizes = apply_sizes_;
      sizes.clear();
      if (!DecodeAppendBatch(body, &h, &sizes, nullptr) || h.source_len != 0) {
        return Status::Corruption("malformed append-batch frame");
      }
      return ApplyAppendBatch(s, std::move(h), sizes, segment, pos, len, replay);
    }
    case FrameType::kCursorCommit: {
      std::string consumer;
      uint64_t offset, now;
      if (!r.String(&consumer) || !r.U64(&offset) || !r.U64(&now) || !r.done()) {
        return Status::Corruption("malformed cursor-commit frame");
      }
      auto& cursors = s->mut().cursors;
      auto it = cursors.find(consumer);
      if (it == cursors.end()) {
        cursors.emplace(consumer, CursorState{consumer, offset, now});
      } else if (offset > it->second.offset) {
        it->second.offset = offset;
        it->second.updated_at_ms = now;
      }
      return Status::OK();
    }
    case FrameType::kCursorDelete: {
      std::string consumer;
      if (!r.String(&consumer) || !r.done()) {
        return Status::Corruption("malformed cursor-delete frame");
      }
      auto& cursors = s->mut().cursors;
      if (auto it = cursors.find(consumer); it != cursors.end()) cursors.erase(it);
      return Status::OK();
    }
    case FrameType::kRelocatedBatch: {
      AppendBatchHeader h;
      if (!DecodeAppendBatch(body, &h, nullptr, nullptr) ||
          h.count > std::numeric_limits<uint64_t>::max() - h.first_offset) {
        return Status::Corruption("malformed relocated-batch frame");
      }
      auto begin = s->batches.begin() + static_cast<std::ptrdiff_t>(s->batch_begin);
      auto it = std::lower_bound(begin, s->batches.end(), h.first_offset,
                                 [](const BatchRef& b, uint64_t o) { return b.first_offset < o; });
      if (it == s->batches.end() || it->first_offset != h.first_offset) return Status::OK();
      // A reference whose records were all dropped since stays dead.
      if (it->lost()) return Status::OK();
      // The frame is the first of its reference (the cleaner moves a reference's frames in
      // order; a relocated frame is exactly as long as the one it copies, or names that length
      // when it is compacted). When the reference holds more frames, the moved one is carved off
      // the front and the rest stay where they are, so a cleaner cut short by a crash leaves
      // every record reachable.
      const uint32_t source = h.source_len != 0 ? h.source_len : len;
      const uint32_t moved = std::min(source, it->len);
      // The dropped records' payloads stay behind in a compacted copy.
      const uint64_t moved_dropped = DroppedBytesIn(*s, h.first_offset, h.first_offset + h.count);
      auto old_seg = segments_.find(it->segment);
      if (old_seg != segments_.end()) {
        old_seg->second.live_bytes -= std::min<uint64_t>(moved, old_seg->second.live_bytes);
        old_seg->second.dropped_bytes -=
            std::min<uint64_t>(moved_dropped, old_seg->second.dropped_bytes);
      }
      std::optional<BatchRef> rest;
      if (source < it->len && h.count > 0) {
        rest = BatchRef{h.first_offset + h.count, it->timestamp, it->segment, it->pos + source,
                        it->len - source};
      }
      it->segment = segment;
      it->pos = pos;
      it->len = len;
      auto new_seg = segments_.find(segment);
      if (new_seg != segments_.end()) {
        new_seg->second.live_bytes += len;
        if (h.source_len == 0) new_seg->second.dropped_bytes += moved_dropped;
      }
      if (rest) s->batches.insert(std::next(it), *rest);
      return Status::OK();
    }
    case FrameType::kDropRecords: {
      StreamId named;
      std::vector<uint64_t> offsets;
      if (!DecodeDropRecords(body, &named, &offsets)) {
        return Status::Corruption("malformed drop-records frame");
      }
      ApplyDrops(*s, offsets);
      return Status::OK();
    }
    case FrameType::kTruncateHead: {
      uint64_t new_head;
      if (!r.U64(&new_head) || !r.done()) return Status::Corruption("malformed truncate frame");
      if (new_head > s->head) DropHead(*s, std::min(new_head, s->next) - s->head);
      return Status::OK();
    }
    default:
      return Status::Corruption("unknown frame type " + std::to_string(static_cast<int>(type)));
  }
}

}  // namespace runnel::log
