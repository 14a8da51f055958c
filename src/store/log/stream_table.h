// The log store's per-stream state and its table of streams by id.
//
// StreamState is what the log store knows of one stream: its spec (in parts), offsets, the
// index of its retained records (BatchRefs and per-record sizes) and its rarer extras
// (retention, attributes, cursors, producers, key sizes). StreamTable owns the StreamStates and
// finds them by id.
//
// Thread-safety: none of its own. LogStore keeps its StreamTable and every StreamState under
// its state_mu_ (readers share it, the writer thread takes it exclusively to apply frames);
// the fields marked writer-only are touched by the writer thread alone.
#ifndef RUNNEL_STORE_LOG_STREAM_TABLE_H_
#define RUNNEL_STORE_LOG_STREAM_TABLE_H_

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "runnel/store.h"
#include "store/retention.h"

namespace runnel::log {

// The segment of a reference that points at no bytes (a hole, or records all dropped).
inline constexpr uint32_t kLostSegment = 0;  // segment files are numbered from 1
// Where a stream's records [first_offset, the next reference's first_offset) are: one append
// frame, or several adjacent append frames of the stream with the same timestamp (merged at
// apply time, up to LogStore::kMaxMergedBatchBytes), so a hot stream of small appends costs one
// reference per run of frames instead of one per append. Frame boundaries stay known only on
// disk: readers and the cleaner walk the frames of a reference.
//
// A reference in segment kLostSegment (with pos and len 0) is a hole: records that salvage
// found lost to damage. They keep their offsets and sizes (0), so the records before and after
// them stay readable; a read of them fails with Status::Unreadable. A reference whose records
// DropRecords all removed becomes one too (its bytes are dead); reads skip its records, which
// are all marked dropped (kDroppedBit), instead of failing.
struct BatchRef {
  uint64_t first_offset = 0;
  uint64_t timestamp = 0;
  uint32_t segment = 0;
  uint32_t pos = 0;
  uint32_t len = 0;
  bool lost() const { return segment == kLostSegment; }
};
// Set in StreamState::sizes on a record DropRecords removed (keyed compaction): the payload
// size stays in the low bits (payloads are at most kMaxBodySize, below this bit), so the
// record's bytes in its frame stay known for the segment's live bytes.
inline constexpr uint32_t kDroppedBit = 1u << 31;
// The rarely set parts of a stream: retention, attributes, cursors, producers and the key
// sizes of records with keys, allocated only for streams that have any (most have none).
struct StreamExtras {
  // The offset of the stream's first record as created (StreamSpec::first_offset): here, not
  // in StreamState, because almost every stream starts at 1 (StreamState::FirstOffset).
  uint64_t first_offset = 1;
  StreamRetention retention;
  std::string attributes;
  std::map<std::string, CursorState, std::less<>> cursors;
  std::map<std::string, ProducerState, std::less<>> producers;
  // Empty until the stream holds a record with a key; then parallel to StreamState::sizes
  // (same indices), key_sizes[i] the key size of the record whose payload size is sizes[i].
  std::vector<uint32_t> key_sizes;
  // How many records in [head, next) DropRecords removed (marked kDroppedBit in sizes). The
  // head is never one of them: it moves past them as they reach it.
  uint64_t dropped = 0;
};
// A string held by one pointer: a length prefix (1 byte below 255 bytes, else 0xff and 4
// bytes) and its bytes in one allocation, where a std::string takes 32 bytes in place. The
// name is the one string every stream has.
class PackedName {
 public:
  PackedName& operator=(std::string_view s) {
    if (s.empty()) {
      data_.reset();
      return *this;
    }
    const size_t prefix = s.size() < kLong ? 1 : 1 + sizeof(uint32_t);
    data_.reset(new char[prefix + s.size()]);
    if (prefix == 1) {
      data_[0] = static_cast<char>(s.size());
    } else {
      const auto n = static_cast<uint32_t>(s.size());
      data_[0] = static_cast<char>(kLong);
      std::memcpy(data_.get() + 1, &n, sizeof(n));
    }
    std::memcpy(data_.get() + prefix, s.data(), s.size());
    return *this;
  }
  std::string_view view() const {
    if (!data_) return {};
    const auto first = static_cast<unsigned char>(data_[0]);
    if (first < kLong) return {data_.get() + 1, first};
    uint32_t n;
    std::memcpy(&n, data_.get() + 1, sizeof(n));
    return {data_.get() + 1 + sizeof(n), n};
  }
  std::string str() const { return std::string(view()); }

 private:
  static constexpr unsigned kLong = 0xff;
  std::unique_ptr<char[]> data_;
};
// Kept small (136 bytes, a 144-byte allocation, plus the name's allocation and a 48-byte
// name-set node): a data directory may hold millions of idle streams. The StreamSpec is stored
// in parts: the namespace and content type point at shared strings (names_ keys and
// content_types_), the rest (a first offset other than 1 included) lives in extras. What
// queued, not yet committed appends reserve (the next offset, a close) is the writer's, kept
// for the current group only (LogStore::reserved_).
struct StreamState {
  StreamId id = 0;
  PackedName name;
  const std::string* ns = nullptr;            // a key of names_, which outlives the stream
  const std::string* content_type = nullptr;  // a key of content_types_ (reference counted)
  uint64_t created_at_ms = 0;
  uint64_t head = 1;  // first retained offset; equals next when nothing is retained
  uint64_t next = 1;
  uint64_t bytes = 0;  // RecordBytes of the retained records
  // Live entries are [batch_begin, batches.size()) and [size_begin, sizes.size()); the
  // prefixes are compacted away lazily. Invariant: sizes[size_begin + (o - head)] is the
  // payload size of offset o (its key size is KeySize of the same index: keys are rare, so
  // they cost nothing until a stream has one); batches cover [head, next) in order.
  std::vector<BatchRef> batches;
  std::vector<uint32_t> sizes;
  uint32_t batch_begin = 0;
  uint32_t size_begin = 0;
  bool closed = false;
  std::unique_ptr<StreamExtras> extras;

  StreamExtras& mut() {
    if (!extras) extras = std::make_unique<StreamExtras>();
    return *extras;
  }
  // The key size of the record at index i of sizes.
  uint32_t KeySize(size_t i) const {
    return extras && !extras->key_sizes.empty() ? extras->key_sizes[i] : 0;
  }
  // store::RecordBytes of the record at index i of sizes (0 for a dropped record).
  uint64_t RecordBytesAt(size_t i) const;
  bool DroppedAt(size_t i) const { return (sizes[i] & kDroppedBit) != 0; }
  uint64_t Dropped() const { return extras ? extras->dropped : 0; }
  uint64_t FirstOffset() const { return extras ? extras->first_offset : 1; }
  // Allocates the extras only for a first offset other than 1.
  void SetFirstOffset(uint64_t offset) {
    if (offset != 1 || extras) mut().first_offset = offset;
  }
  // Appends the sizes of the next record and counts it in `bytes` (DropHead takes it out);
  // a payload size with kDroppedBit is a dropped record (a checkpoint's index), not counted.
  void PushSize(uint32_t payload, uint32_t key);
  const StreamExtras& view() const {
    static const StreamExtras kEmpty;
    return extras ? *extras : kEmpty;
  }
  // The spec as given at create (or changed by updates).
  StreamSpec Spec() const;
};

// Defined here, not in stream_table.cc: they run once per record when frames are applied.
inline uint64_t StreamState::RecordBytesAt(size_t i) const {
  return DroppedAt(i) ? 0 : store::RecordBytes(KeySize(i), sizes[i]);
}

inline void StreamState::PushSize(uint32_t payload, uint32_t key) {
  if ((payload & kDroppedBit) != 0) {
    ++mut().dropped;
  } else {
    bytes += store::RecordBytes(key, payload);
  }
  sizes.push_back(payload);
  if (extras && !extras->key_sizes.empty()) {
    extras->key_sizes.push_back(key);
  } else if (key != 0) {
    // The stream's first record with a key: the records before it have none.
    std::vector<uint32_t>& keys = mut().key_sizes;
    keys.assign(sizes.size(), 0);
    keys.back() = key;
  }
}

#if defined(__x86_64__) && defined(__GLIBCXX__)
// Every stream pays for one: keep it within the 144-byte allocation size class (glibc's
// malloc adds 8 bytes and rounds up to 16).
static_assert(sizeof(StreamState) <= 136, "StreamState grew past 136 bytes");
#endif
// Streams by id: an open-addressing table of owning pointers (linear probing, at most 3/4
// full, shrunk when mostly empty), so memory follows the live streams. Not a vector indexed
// by id: ids are never reused, so a long-running store that creates and deletes streams
// would pay for every id it ever handed out, and an id read from a damaged checkpoint could
// ask for any size.
class StreamTable {
 public:
  StreamState* Find(StreamId id) const {
    if (slots_.empty()) return nullptr;
    for (size_t i = Home(id);; i = (i + 1) & mask()) {
      StreamState* s = slots_[i].get();
      if (s == nullptr || s->id == id) return s;
    }
  }
  // Adds `s` and returns it; null (and `s` dropped) when its id is taken already.
  StreamState* Insert(std::unique_ptr<StreamState> s);
  // Room for `n` streams without growing.
  void Reserve(size_t n);
  void Erase(StreamId id);
  size_t size() const { return count_; }
  void clear() {
    slots_.clear();
    count_ = 0;
  }
  // Calls f(StreamState&) for every stream, in no particular order.
  template <typename F>
  void ForEach(F&& f) const {
    for (const auto& p : slots_) {
      if (p) f(*p);
    }
  }

 private:
  size_t mask() const { return slots_.size() - 1; }
  size_t Home(StreamId id) const {
    // Fibonacci hashing spreads the sequential ids over the table.
    return static_cast<size_t>((id * 0x9e3779b97f4a7c15ull) >> (64 - bits_));
  }
  void Rehash(size_t capacity);

  std::vector<std::unique_ptr<StreamState>> slots_;  // size 0 or a power of two
  unsigned bits_ = 0;                                // log2(slots_.size())
  size_t count_ = 0;
};

}  // namespace runnel::log

#endif  // RUNNEL_STORE_LOG_STREAM_TABLE_H_
