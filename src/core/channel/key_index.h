// KeyIndex: the in-memory idempotency-key index of a DurableChannel.
//
// Maps a 64-bit hash of an idempotency key to the positions (partition, slot) of the rows that
// carried a key with that hash. It stores no key bytes: a dense array of entries (partition,
// slot, full hash) in insertion order, and over it a flat open-addressing table of 8-byte
// slots, each holding the upper 32 bits of an entry's hash (its tag) and the entry's number
// in the array. A lookup that misses (every new key) touches one table cache line (eight
// slots) and reads the array only when a tag matches, to compare the full hash; indexing a row
// writes one table slot and appends to the array, so neither allocates except when the array
// doubles. A large table or array is mapped 2 MiB-aligned and, on Linux, the kernel is asked
// to back it with huge pages (madvise MADV_HUGEPAGE): a random probe into a table of many
// megabytes otherwise pays a TLB miss before its cache miss. Such a mapping is also populated
// when it is made (MADV_POPULATE_WRITE), so growing costs one bulk allocation instead of a
// page fault every few hundred inserts afterwards; the price is that the array's doubled
// capacity is resident at once (at most twice the entries' size).
// Because different keys may share a hash, a hit is only a candidate: the channel confirms it by
// reading that row and comparing the key (see DurableChannel::IndexLookup), so answers stay
// exact.
//
// Candidates for one hash are visited in insertion order (linear probing keeps later inserts of
// the same hash further along the probe sequence, growth re-inserts in insertion order, and
// nothing is ever deleted). Entries are also readable by their number (insertion order), which
// the channel uses to find the entries added since its last head checkpoint.
//
// Limit: at most kMaxEntries entries (entry numbers are 32-bit), or fewer if constructed so;
// Insert refuses more.
//
// Thread-safety: none; owned by one DurableChannel.
#ifndef RUNNEL_CORE_CHANNEL_KEY_INDEX_H_
#define RUNNEL_CORE_CHANNEL_KEY_INDEX_H_

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <utility>

namespace runnel::channel {

class KeyIndex {
 public:
  // The most entries one index holds: slot values keep entry number + 1 in 32 bits.
  static constexpr size_t kMaxEntries = (size_t{1} << 32) - 1;

  struct Entry {
    uint64_t slot = 0;  // the row's sequence in its partition
    uint64_t hash = 0;  // as stored: Hash(key), except that a hash of 0 is stored as 1
    uint32_t partition = 0;
  };

  // An index that holds at most min(max_entries, kMaxEntries) entries.
  explicit KeyIndex(size_t max_entries = kMaxEntries)
      : max_entries_(max_entries < kMaxEntries ? max_entries : kMaxEntries) {}

  static uint64_t Hash(std::string_view key);

  // Adds an entry; returns false, changing nothing, when the index is full().
  // REQUIRES: partition < 2^32.
  bool Insert(uint64_t hash, size_t partition, uint64_t sequence);

  // Calls visit(partition, sequence) for every entry with `hash`, in insertion order, until
  // visit returns true. Returns whether it did.
  template <typename Visit>
  bool ForEachCandidate(uint64_t hash, Visit&& visit) const {
    if (table_.empty()) return false;
    hash = Normalize(hash);
    const uint64_t tag = TagOf(hash);
    const size_t mask = table_.size() - 1;
    for (size_t i = hash & mask;; i = (i + 1) & mask) {
      const uint64_t s = table_[i];
      if (s == 0) return false;
      if ((s & kTagMask) == tag) {
        const Entry& e = entries_[(s & kNumberMask) - 1];  // a tag match: rare unless a hit
        if (e.hash == hash && visit(static_cast<size_t>(e.partition), e.slot)) return true;
      }
    }
  }

  // A hint that `hash` will be looked up and then inserted soon: starts loading its home slot
  // for writing.
  void Prefetch(uint64_t hash) const {
    if (!table_.empty()) __builtin_prefetch(&table_[Normalize(hash) & (table_.size() - 1)], 1);
  }

  // The entry numbered `i` (insertion order). REQUIRES: i < size().
  const Entry& at(size_t i) const { return entries_[i]; }
  size_t size() const { return size_; }
  bool full() const { return size_ >= max_entries_; }

 private:
  static constexpr uint64_t kTagMask = ~uint64_t{0} << 32;
  static constexpr uint64_t kNumberMask = ~kTagMask;
  static uint64_t Normalize(uint64_t hash) { return hash == 0 ? 1 : hash; }
  // The table position comes from the low bits of the hash, the tag from the high ones.
  static uint64_t TagOf(uint64_t hash) { return hash & kTagMask; }
  void Grow();
  void GrowEntries();

  // Zero-filled storage for `count` objects of an aggregate, trivially copyable T; see the
  // file comment.
  template <typename T>
  class Zeroed {
   public:
    Zeroed() = default;
    explicit Zeroed(size_t count) : size_(count) {
      data_ = static_cast<T*>(Allocate(count * sizeof(T), &mapping_, &mapped_bytes_));
    }
    Zeroed(Zeroed&& o) noexcept { Swap(o); }
    Zeroed& operator=(Zeroed&& o) noexcept {
      Zeroed gone(std::move(o));
      Swap(gone);
      return *this;
    }
    ~Zeroed() { Release(data_, mapping_, mapped_bytes_); }
    size_t size() const { return size_; }
    bool empty() const { return size_ == 0; }
    T* data() { return data_; }
    T& operator[](size_t i) { return data_[i]; }
    const T& operator[](size_t i) const { return data_[i]; }

   private:
    void Swap(Zeroed& o) noexcept {
      std::swap(data_, o.data_);
      std::swap(size_, o.size_);
      std::swap(mapping_, o.mapping_);
      std::swap(mapped_bytes_, o.mapped_bytes_);
    }
    T* data_ = nullptr;
    size_t size_ = 0;
    void* mapping_ = nullptr;
    size_t mapped_bytes_ = 0;
  };
  // Zero-filled memory: calloc below 2 MiB, else an aligned, populated mapping (whose base
  // and length go to *mapping and *mapped_bytes). Throws std::bad_alloc.
  static void* Allocate(size_t bytes, void** mapping, size_t* mapped_bytes);
  static void Release(void* data, void* mapping, size_t mapped_bytes);

  // Invariant: table_'s size is a power of two (or zero) and at most half full; a slot is 0
  // (empty) or TagOf(e.hash) | (n + 1) for the entry e = entries_[n], n < size_, and every
  // entry has exactly one slot. entries_ holds size_ entries, then zeroes.
  Zeroed<uint64_t> table_;
  Zeroed<Entry> entries_;
  size_t size_ = 0;
  size_t max_entries_;
};

}  // namespace runnel::channel

#endif  // RUNNEL_CORE_CHANNEL_KEY_INDEX_H_
