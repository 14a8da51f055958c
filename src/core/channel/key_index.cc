#include "core/channel/key_index.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <type_traits>
#include <utility>

namespace runnel::channel {

static_assert(std::is_trivially_copyable_v<KeyIndex::Entry>, "entries are moved by memcpy");

uint64_t KeyIndex::Hash(std::string_view key) {
  // FNV-1a 64, then a final avalanche (splitmix64's finaliser) so the low bits used for the
  // table position depend on every byte.
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : key) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  h ^= h >> 31;
  return h;
}

bool KeyIndex::Insert(uint64_t hash, size_t partition, uint64_t sequence) {
  if (full()) return false;
  if ((size_ + 1) * 2 > table_.size()) Grow();
  if (size_ == entries_.size()) GrowEntries();
  hash = Normalize(hash);
  const size_t mask = table_.size() - 1;
  size_t i = hash & mask;
  while (table_[i] != 0) i = (i + 1) & mask;
  entries_[size_] = Entry{sequence, hash, static_cast<uint32_t>(partition)};
  ++size_;
  table_[i] = TagOf(hash) | static_cast<uint64_t>(size_);
  return true;
}

namespace {
constexpr size_t kHugePage = size_t{2} << 20;
}  // namespace

void* KeyIndex::Allocate(size_t bytes, void** mapping, size_t* mapped_bytes) {
  *mapping = nullptr;
  *mapped_bytes = 0;
  if (bytes < kHugePage) {
    void* data = std::calloc(1, bytes);
    if (data == nullptr) throw std::bad_alloc();
    return data;
  }
  // Anonymous memory is zero-filled. Over-map by one huge page to align the data to one.
  const size_t length = bytes + kHugePage;
  void* base = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) throw std::bad_alloc();
  *mapping = base;
  *mapped_bytes = length;
  const auto at = reinterpret_cast<uintptr_t>(base);
  void* data = reinterpret_cast<void*>((at + kHugePage - 1) & ~(uintptr_t{kHugePage} - 1));
  const size_t rounded = (bytes + kHugePage - 1) & ~(kHugePage - 1);
  // Both only hints: without them the index works the same, slower.
#ifdef MADV_HUGEPAGE
  (void)madvise(data, rounded, MADV_HUGEPAGE);
#endif
#ifdef MADV_POPULATE_WRITE
  (void)madvise(data, rounded, MADV_POPULATE_WRITE);
#endif
  return data;
}

void KeyIndex::Release(void* data, void* mapping, size_t mapped_bytes) {
  if (mapping != nullptr) {
    munmap(mapping, mapped_bytes);
  } else {
    std::free(data);
  }
}

void KeyIndex::Grow() {
  Zeroed<uint64_t> grown(table_.empty() ? 64 : table_.size() * 2);
  const size_t mask = grown.size() - 1;
  // Re-inserting in insertion order keeps the candidates of one hash in that order.
  for (size_t n = 0; n < size_; ++n) {
    const uint64_t hash = entries_[n].hash;
    size_t i = hash & mask;
    while (grown[i] != 0) i = (i + 1) & mask;
    grown[i] = TagOf(hash) | static_cast<uint64_t>(n + 1);
  }
  table_ = std::move(grown);
}

void KeyIndex::GrowEntries() {
  const size_t capacity = std::min(max_entries_, entries_.empty() ? 32 : entries_.size() * 2);
  Zeroed<Entry> grown(capacity);
  if (size_ != 0) std::memcpy(grown.data(), entries_.data(), size_ * sizeof(Entry));
  entries_ = std::move(grown);
}

}  // namespace runnel::channel
