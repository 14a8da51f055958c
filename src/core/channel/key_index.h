// KeyIndex: the in-memory idempotency-key index of a DurableChannel.
//
// Maps a 64-bit hash of an idempotency key to the positions (partition, slot) of the rows that
// carried a key with that hash. It stores no key bytes: a flat open-addressing table of
// 24-byte entries, so indexing a row costs no allocation and a lookup usually one cache line.
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
      if (e.hash == hash && visit(static_cast<size_t>(e.partition), e.sequence)) return true;
    }
  }

  // A hint that `hash` will be looked up soon: starts loading its home slot.
  void Prefetch(uint64_t hash) const {
    if (!table_.empty()) __builtin_prefetch(&table_[Normalize(hash) & (table_.size() - 1)]);
  }

  // Calls visit(hash, partition, sequence) for every entry, in table order. The hash given is
  // the one stored: Hash(key), except that a hash of 0 is stored as 1 (see Normalize).
  template <typename Visit>
  void ForEach(Visit&& visit) const {
    for (const Entry& e : table_) {
      if (e.hash != 0) visit(e.hash, static_cast<size_t>(e.partition), e.sequence);
    }
  }

  size_t size() const { return size_; }

 private:
  struct Entry {
    uint64_t hash = 0;  // 0 = empty slot
    uint64_t sequence = 0;
    uint64_t partition = 0;
  };
  static uint64_t Normalize(uint64_t hash) { return hash == 0 ? 1 : hash; }
  void Grow();

  // Invariant: size is a power of two (or zero) and at most half full.
  std::vector<Entry> table_;
  size_t size_ = 0;
};

}  // namespace runnel::channel

#endif  // RUNNEL_CORE_CHANNEL_KEY_INDEX_H_
