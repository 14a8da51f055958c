// KeyIndex: the in-memory idempotency-key index of a DurableChannel.
//
// Maps a 64-bit hash of an idempotency key to the positions (partition, slot) of the rows that
// carried a key with that hash. It stores no key bytes: a flat open-addressing table of 16-byte
// entries (hash, position number) over a dense array of positions in insertion order. A lookup
// that misses (every new key) touches one table cache line and never the positions; indexing a
// row writes one table entry and appends to the positions array, so neither allocates except
// when an array doubles. A large table is mapped 2 MiB-aligned and, on Linux, the kernel is
// asked to back it with huge pages (madvise MADV_HUGEPAGE): a random probe into a table of
// many megabytes otherwise pays a TLB miss before its cache miss.
// Because different keys may share a hash, a hit is only a candidate: the channel confirms it by
// reading that row and comparing the key (see DurableChannel::IndexLookup), so answers stay
// exact.
//
// Candidates for one hash are visited in insertion order (linear probing keeps later inserts of
// the same hash further along the probe sequence, and nothing is ever deleted).
//
// Thread-safety: none; owned by one DurableChannel.
#ifndef RUNNEL_CORE_CHANNEL_KEY_INDEX_H_
#define RUNNEL_CORE_CHANNEL_KEY_INDEX_H_

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace runnel::channel {

class KeyIndex {
 public:
  static uint64_t Hash(std::string_view key);

  void Insert(uint64_t hash, size_t partition, uint64_t sequence);

  // Calls visit(partition, sequence) for every entry with `hash`, in insertion order, until
  // visit returns true. Returns whether it did.
  template <typename Visit>
  bool ForEachCandidate(uint64_t hash, Visit&& visit) const {
    if (table_.empty()) return false;
    hash = Normalize(hash);
    const size_t mask = table_.size() - 1;
    for (size_t i = hash & mask;; i = (i + 1) & mask) {
      const Entry& e = table_[i];
      if (e.hash == 0) return false;
      if (e.hash == hash) {
        const Position& at = positions_[e.position];
        if (visit(static_cast<size_t>(at.partition), at.sequence)) return true;
      }
    }
  }

  // A hint that `hash` will be looked up and then inserted soon: starts loading its home slot
  // for writing.
  void Prefetch(uint64_t hash) const {
    if (!table_.empty()) __builtin_prefetch(&table_[Normalize(hash) & (table_.size() - 1)], 1);
  }

  // Calls visit(hash, partition, sequence) for every entry, in table order. The hash given is
  // the one stored: Hash(key), except that a hash of 0 is stored as 1 (see Normalize).
  template <typename Visit>
  void ForEach(Visit&& visit) const {
    for (const Entry& e : table_) {
      if (e.hash == 0) continue;
      const Position& at = positions_[e.position];
      visit(e.hash, static_cast<size_t>(at.partition), at.sequence);
    }
  }

  size_t size() const { return positions_.size(); }

 private:
  struct Entry {
    uint64_t hash = 0;      // 0 = empty slot
    uint64_t position = 0;  // index into positions_
  };
  struct Position {
    uint64_t sequence = 0;
    uint64_t partition = 0;
  };
  static uint64_t Normalize(uint64_t hash) { return hash == 0 ? 1 : hash; }
  void Grow();

  // Zero-filled storage for the table; see the file comment.
  class Slots {
   public:
    Slots() = default;
    explicit Slots(size_t count);
    Slots(Slots&& o) noexcept { Swap(o); }
    Slots& operator=(Slots&& o) noexcept {
      Slots gone(std::move(o));
      Swap(gone);
      return *this;
    }
    ~Slots();
    size_t size() const { return size_; }
    bool empty() const { return size_ == 0; }
    Entry& operator[](size_t i) { return data_[i]; }
    const Entry& operator[](size_t i) const { return data_[i]; }
    const Entry* begin() const { return data_; }
    const Entry* end() const { return data_ + size_; }

   private:
    void Swap(Slots& o) noexcept;
    Entry* data_ = nullptr;
    size_t size_ = 0;
    void* mapping_ = nullptr;
    size_t mapped_bytes_ = 0;
  };

  // Invariant: table_'s size is a power of two (or zero) and at most half full; every
  // non-empty entry's position is < positions_.size().
  Slots table_;
  std::vector<Position> positions_;
};

}  // namespace runnel::channel

#endif  // RUNNEL_CORE_CHANNEL_KEY_INDEX_H_
