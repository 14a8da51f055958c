#include "store/memory/memory_store.h"

#include <algorithm>
#include <limits>
#include <string>

#include "store/retention.h"
#include "store/store_status.h"

namespace runnel {

std::unique_ptr<Store> NewMemoryStore() {
  return std::make_unique<store::MemoryStore>();
}

namespace store {
namespace {

Status StreamNotFound(StreamId id) {
  return Status::NotFound("stream #" + std::to_string(id) + " does not exist");
}

}  // namespace

std::shared_ptr<MemoryStore::Stream> MemoryStore::Find(StreamId id) {
  ReaderLock lock(catalog_mu_);
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : it->second;
}

StreamInfo MemoryStore::Snapshot(const Stream& s) {
  StreamInfo info;
  info.id = s.id;
  info.spec = s.spec;
  info.next_offset = s.next_offset;
  info.event_count = s.records.size();
  info.retained_bytes = s.bytes;
  info.closed = s.closed;
  if (!s.records.empty()) {
    info.head_offset = s.records.front().offset;
    info.tail_offset = s.records.back().offset;
  }
  return info;
}

void MemoryStore::DropOldest(Stream& s, size_t n) {
  for (size_t i = 0; i < n && !s.records.empty(); ++i) {
    const StoredRecord& r = s.records.front();
    s.bytes -= RecordBytes(r.key ? r.key->size() : 0, r.payload.size());
    s.records.pop_front();
  }
}

void MemoryStore::ApplyRetention(Stream& s, uint64_t now_ms) {
  RetainedView view;
  view.count = s.records.size();
  view.total_bytes = s.bytes;
  // The view's functions run inside RetentionDropCount below, under this function's s.mu.
  view.timestamp_at = [&s](size_t i) {
    s.mu.AssertHeld();
    return s.records[i].appended_at_ms;
  };
  view.bytes_at = [&s](size_t i) {
    s.mu.AssertHeld();
    const StoredRecord& r = s.records[i];
    return RecordBytes(r.key ? r.key->size() : 0, r.payload.size());
  };
  DropOldest(s, RetentionDropCount(s.spec.retention, now_ms, view));
}

Result<StreamInfo> MemoryStore::CreateStream(const StreamSpec& spec) {
  RUNNEL_RETURN_IF_ERROR(ValidateStreamName(spec.name));
  RUNNEL_RETURN_IF_ERROR(ValidateRetention(spec.retention));
  if (spec.first_offset == 0 || spec.first_offset == std::numeric_limits<uint64_t>::max()) {
    return Status::InvalidArgument("first_offset must be between 1 and 2^64-2");
  }
  WriterLock lock(catalog_mu_);
  auto& names = by_name_[spec.ns];
  if (names.find(spec.name) != names.end()) {
    return Status::AlreadyExists("stream '" + spec.name + "' already exists in " + spec.ns);
  }
  auto s = std::make_shared<Stream>(next_id_++, spec.ns, spec.name);
  MutexLock stream_lock(s->mu);
  s->spec = spec;
  s->next_offset = spec.first_offset;
  names.emplace(spec.name, s);
  by_id_.emplace(s->id, s);
  natural_.Add(spec.ns, s);
  return Snapshot(*s);
}

Result<StreamInfo> MemoryStore::GetStream(std::string_view ns, std::string_view name) {
  std::shared_ptr<Stream> s;
  {
    ReaderLock lock(catalog_mu_);
    auto ns_it = by_name_.find(ns);
    if (ns_it != by_name_.end()) {
      auto it = ns_it->second.find(name);
      if (it != ns_it->second.end()) s = it->second;
    }
  }
  if (!s) {
    return Status::NotFound("stream '" + std::string(name) + "' does not exist in " +
                            std::string(ns));
  }
  MutexLock lock(s->mu);
  return Snapshot(*s);
}

Result<StreamInfo> MemoryStore::GetStreamById(StreamId id) {
  auto s = Find(id);
  if (!s) return StreamNotFound(id);
  MutexLock lock(s->mu);
  return Snapshot(*s);
}

Result<std::vector<StreamInfo>> MemoryStore::ListStreams(std::string_view ns,
                                                         std::string_view start_after,
                                                         size_t limit) {
  std::vector<std::shared_ptr<Stream>> found;
  {
    ReaderLock lock(catalog_mu_);
    auto ns_it = by_name_.find(ns);
    if (ns_it == by_name_.end()) return std::vector<StreamInfo>{};
    for (auto it = ns_it->second.upper_bound(start_after);
         it != ns_it->second.end() && found.size() < limit; ++it) {
      found.push_back(it->second);
    }
  }
  std::vector<StreamInfo> out;
  out.reserve(found.size());
  for (const auto& s : found) {
    MutexLock lock(s->mu);
    if (!s->deleted) out.push_back(Snapshot(*s));
  }
  return out;
}

Result<std::vector<StreamInfo>> MemoryStore::ListStreamsByNaturalKey(std::string_view ns,
                                                                     std::string_view from_key,
                                                                     size_t limit) {
  std::vector<std::shared_ptr<Stream>> found;
  {
    ReaderLock lock(catalog_mu_);
    natural_.Scan(ns, from_key, limit, [&](const std::shared_ptr<Stream>& s) {
      found.push_back(s);
      return true;
    });
  }
  std::vector<StreamInfo> out;
  out.reserve(found.size());
  for (const auto& s : found) {
    MutexLock lock(s->mu);
    if (!s->deleted) out.push_back(Snapshot(*s));
  }
  return out;
}

Status MemoryStore::UpdateStream(StreamId id, const std::optional<StreamRetention>& retention,
                                 std::string_view attributes,
                                 std::optional<std::string_view> expected_attributes,
                                 std::optional<uint64_t> expected_next_offset) {
  if (retention) RUNNEL_RETURN_IF_ERROR(ValidateRetention(*retention));
  auto s = Find(id);
  if (!s) return StreamNotFound(id);
  MutexLock lock(s->mu);
  if (s->deleted) return StreamNotFound(id);
  if (expected_attributes && *expected_attributes != s->spec.attributes) {
    return AttributesChanged(s->spec.name);
  }
  if (expected_next_offset && *expected_next_offset != s->next_offset) {
    return NextOffsetChanged(s->spec.name, *expected_next_offset, s->next_offset);
  }
  if (retention) s->spec.retention = *retention;
  s->spec.attributes = std::string(attributes);
  return Status::OK();
}

Status MemoryStore::DeleteStream(StreamId id) {
  std::shared_ptr<Stream> s;
  {
    WriterLock lock(catalog_mu_);
    auto it = by_id_.find(id);
    if (it == by_id_.end()) return StreamNotFound(id);
    s = it->second;
    by_id_.erase(it);
    auto ns_it = by_name_.find(s->ns);
    if (ns_it != by_name_.end()) {
      ns_it->second.erase(s->name);
      if (ns_it->second.empty()) by_name_.erase(ns_it);
    }
    natural_.Remove(s->ns, s);
  }
  MutexLock lock(s->mu);
  s->deleted = true;
  s->records.clear();
  s->cursors.clear();
  s->producers.clear();
  s->bytes = 0;
  return Status::OK();
}

// Long on purpose: one critical section under the stream's lock holds the append's conditions
// in the contract's order (the caller's guard first, then closed, empty, expected offset,
// expected attributes, producer, overflow) next to the write they allow; the listener and the
// callback run after it.
void MemoryStore::Append(AppendRequest request, AppendCallback done) {
  auto s = Find(request.stream);
  if (!s) {
    done(StreamNotFound(request.stream));
    return;
  }
  // Decided under the stream's lock; `done` runs after it is released, so a callback may call
  // back into the store.
  Status refused;
  AppendResult result;
  uint64_t next = 0;
  [&] {
    MutexLock lock(s->mu);
    if (s->deleted) {
      refused = StreamNotFound(request.stream);
      return;
    }
    if (request.guard != nullptr) {
      AppendState state;
      state.next_offset = s->next_offset;
      state.closed = s->closed;
      state.attributes = s->spec.attributes;
      if (request.producer) {
        if (auto p = s->producers.find(request.producer->producer_id); p != s->producers.end()) {
          state.producer.emplace(p->second.epoch, p->second.seq);
        }
      }
      if (Status admitted = request.guard->Admit(state, &request); !admitted.ok()) {
        refused = std::move(admitted);
        return;
      }
    }
    if (s->closed) {
      refused = Status::FailedPrecondition("stream '" + s->spec.name + "' is closed");
      return;
    }
    if (request.records.empty() && !request.close) {
      refused = Status::InvalidArgument("an append needs at least one record");
      return;
    }
    if (request.expected_offset && *request.expected_offset != s->next_offset) {
      refused =
          Status::Conflict("expected offset " + std::to_string(*request.expected_offset) +
                               " but the stream's next offset is " + std::to_string(s->next_offset),
                           *request.expected_offset, s->next_offset);
      return;
    }
    if (request.expected_attributes && *request.expected_attributes != s->spec.attributes) {
      refused = AttributesChanged(s->spec.name);
      return;
    }
    if (request.producer) {
      auto stored = s->producers.find(request.producer->producer_id);
      Status checked = CheckProducer(
          stored == s->producers.end()
              ? std::nullopt
              : std::optional(std::make_pair(stored->second.epoch, stored->second.seq)),
          *request.producer);
      if (!checked.ok()) {
        refused = std::move(checked);
        return;
      }
    }
    const uint64_t n = request.records.size();
    // next_offset itself must stay representable, so the last usable offset is 2^64-2.
    if (n > std::numeric_limits<uint64_t>::max() - s->next_offset) {
      refused = Status::OutOfRange("stream '" + s->spec.name + "' would pass the largest offset");
      return;
    }
    result.first_offset = n ? s->next_offset : 0;
    for (AppendRecord& r : request.records) {
      s->bytes += RecordBytes(r.key ? r.key->size() : 0, r.payload.size());
      s->records.push_back(
          StoredRecord{s->next_offset++, request.now_ms, std::move(r.key), std::move(r.payload)});
    }
    result.last_offset = n ? s->next_offset - 1 : 0;
    result.next_offset = s->next_offset;
    if (request.producer) {
      ProducerState p = std::move(*request.producer);
      p.last_offset = result.last_offset;
      s->producers[p.producer_id] = std::move(p);
    }
    if (request.close) s->closed = true;
    if (request.attributes) s->spec.attributes = std::move(*request.attributes);
    ApplyRetention(*s, request.now_ms);
    next = s->next_offset;
  }();
  if (!refused.ok()) {
    done(std::move(refused));
    return;
  }
  std::shared_ptr<const TailListener> listener;
  {
    MutexLock lock(listener_mu_);
    listener = listener_;
  }
  if (listener && *listener) (*listener)(request.stream, next);
  done(result);
}

Result<std::vector<StoredRecord>> MemoryStore::Read(StreamId id, uint64_t from, size_t limit,
                                                    size_t max_bytes) {
  auto s = Find(id);
  if (!s) return StreamNotFound(id);
  MutexLock lock(s->mu);
  if (s->deleted) return StreamNotFound(id);
  std::vector<StoredRecord> out;
  if (limit == 0 || s->records.empty()) return out;
  if (from >= s->next_offset) return out;
  auto it =
      std::lower_bound(s->records.begin(), s->records.end(), from,
                       [](const StoredRecord& r, uint64_t offset) { return r.offset < offset; });
  size_t bytes = 0;
  for (; it != s->records.end() && out.size() < limit; ++it) {
    const StoredRecord& r = *it;
    const size_t size = r.payload.size();
    if (!out.empty() && bytes + size > max_bytes) break;
    bytes += size;
    out.push_back(r);
  }
  return out;
}

Result<std::optional<StoredRecord>> MemoryStore::ReadAt(StreamId id, uint64_t offset) {
  auto s = Find(id);
  if (!s) return StreamNotFound(id);
  MutexLock lock(s->mu);
  if (s->deleted) return StreamNotFound(id);
  auto it = std::lower_bound(s->records.begin(), s->records.end(), offset,
                             [](const StoredRecord& r, uint64_t o) { return r.offset < o; });
  if (it == s->records.end() || it->offset != offset) return std::optional<StoredRecord>();
  return std::optional<StoredRecord>(*it);
}

Result<uint64_t> MemoryStore::DropRecords(StreamId id, const std::vector<uint64_t>& offsets) {
  auto s = Find(id);
  if (!s) return StreamNotFound(id);
  MutexLock lock(s->mu);
  if (s->deleted) return StreamNotFound(id);
  if (offsets.empty()) return uint64_t{0};
  // One stable in-place pass over the records from the first named one to the last: the
  // records not named move down over the removed ones, then the gap left at the end of that
  // span is erased, which moves the shorter side of the deque. A compaction drops in ascending
  // batches, so the side before the span (the survivors of earlier batches) is the short one,
  // and a batch costs its span, not the whole stream.
  auto by_offset = [](const StoredRecord& r, uint64_t o) { return r.offset < o; };
  auto begin = std::lower_bound(s->records.begin(), s->records.end(), offsets.front(), by_offset);
  auto end = std::lower_bound(begin, s->records.end(), offsets.back(), by_offset);
  if (end != s->records.end() && end->offset == offsets.back()) ++end;
  uint64_t removed = 0;
  auto drop = offsets.begin();
  auto out = begin;
  for (auto it = begin; it != end; ++it) {
    while (drop != offsets.end() && *drop < it->offset) ++drop;
    if (drop != offsets.end() && *drop == it->offset) {
      s->bytes -= RecordBytes(it->key ? it->key->size() : 0, it->payload.size());
      ++removed;
      continue;
    }
    if (out != it) *out = std::move(*it);
    ++out;
  }
  s->records.erase(out, end);
  return removed;
}

Result<uint64_t> MemoryStore::TruncatePrefix(StreamId id, uint64_t through, bool respect_cursors) {
  auto s = Find(id);
  if (!s) return StreamNotFound(id);
  MutexLock lock(s->mu);
  if (s->deleted) return StreamNotFound(id);
  uint64_t cut = through;
  if (respect_cursors) {
    for (const auto& [name, cursor] : s->cursors) cut = std::min(cut, cursor.offset);
  }
  uint64_t removed = 0;
  while (!s->records.empty() && s->records.front().offset <= cut) {
    DropOldest(*s, 1);
    ++removed;
  }
  return removed;
}

Result<uint64_t> MemoryStore::CommitCursor(StreamId id, std::string_view consumer, uint64_t offset,
                                           uint64_t now_ms) {
  auto s = Find(id);
  if (!s) return StreamNotFound(id);
  MutexLock lock(s->mu);
  if (s->deleted) return StreamNotFound(id);
  auto it = s->cursors.find(consumer);
  if (it == s->cursors.end()) {
    it = s->cursors
             .emplace(std::string(consumer), CursorState{std::string(consumer), offset, now_ms})
             .first;
    return it->second.offset;
  }
  if (offset > it->second.offset) {
    it->second.offset = offset;
    it->second.updated_at_ms = now_ms;
  }
  return it->second.offset;
}

Result<std::optional<CursorState>> MemoryStore::GetCursor(StreamId id, std::string_view consumer) {
  auto s = Find(id);
  if (!s) return StreamNotFound(id);
  MutexLock lock(s->mu);
  if (s->deleted) return StreamNotFound(id);
  auto it = s->cursors.find(consumer);
  if (it == s->cursors.end()) return std::optional<CursorState>();
  return std::optional<CursorState>(it->second);
}

Result<std::vector<CursorState>> MemoryStore::ListCursors(StreamId id) {
  auto s = Find(id);
  if (!s) return StreamNotFound(id);
  MutexLock lock(s->mu);
  if (s->deleted) return StreamNotFound(id);
  std::vector<CursorState> out;
  out.reserve(s->cursors.size());
  for (const auto& [name, cursor] : s->cursors) out.push_back(cursor);
  return out;
}

Result<bool> MemoryStore::DeleteCursor(StreamId id, std::string_view consumer) {
  auto s = Find(id);
  if (!s) return StreamNotFound(id);
  MutexLock lock(s->mu);
  if (s->deleted) return StreamNotFound(id);
  auto it = s->cursors.find(consumer);
  if (it == s->cursors.end()) return false;
  s->cursors.erase(it);
  return true;
}

Result<std::optional<ProducerState>> MemoryStore::GetProducer(StreamId id,
                                                              std::string_view producer_id) {
  auto s = Find(id);
  if (!s) return StreamNotFound(id);
  MutexLock lock(s->mu);
  if (s->deleted) return StreamNotFound(id);
  auto it = s->producers.find(producer_id);
  if (it == s->producers.end()) return std::optional<ProducerState>();
  return std::optional<ProducerState>(it->second);
}

void MemoryStore::SetTailListener(TailListener listener) {
  auto shared = listener ? std::make_shared<const TailListener>(std::move(listener)) : nullptr;
  MutexLock lock(listener_mu_);
  listener_ = std::move(shared);
}

}  // namespace store
}  // namespace runnel
