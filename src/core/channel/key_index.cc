#include "core/channel/key_index.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

namespace runnel::channel {

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
  if (entries_.size() >= kMaxEntries) return false;
  if ((entries_.size() + 1) * 2 > table_.size()) Grow();
  hash = Normalize(hash);
  const size_t mask = table_.size() - 1;
  size_t i = hash & mask;
  while (table_[i] != 0) i = (i + 1) & mask;
  entries_.push_back(Entry{sequence, hash, static_cast<uint32_t>(partition)});
  table_[i] = TagOf(hash) | static_cast<uint64_t>(entries_.size());
  return true;
}

namespace {
constexpr size_t kHugePage = size_t{2} << 20;
}  // namespace

KeyIndex::Slots::Slots(size_t count) : size_(count) {
  const size_t bytes = count * sizeof(uint64_t);
  if (bytes < kHugePage) {
    data_ = static_cast<uint64_t*>(std::calloc(count, sizeof(uint64_t)));
    if (data_ == nullptr) throw std::bad_alloc();
    return;
  }
  // Anonymous memory is zero-filled. Over-map by one huge page to align the table to one.
  mapped_bytes_ = bytes + kHugePage;
  mapping_ =
      mmap(nullptr, mapped_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapping_ == MAP_FAILED) {
    mapping_ = nullptr;
    throw std::bad_alloc();
  }
  const auto base = reinterpret_cast<uintptr_t>(mapping_);
  const uintptr_t aligned = (base + kHugePage - 1) & ~(uintptr_t{kHugePage} - 1);
  data_ = reinterpret_cast<uint64_t*>(aligned);
#ifdef MADV_HUGEPAGE
  // Only a hint: without huge pages the table works the same, slower.
  (void)madvise(data_, (bytes + kHugePage - 1) & ~(kHugePage - 1), MADV_HUGEPAGE);
#endif
}

KeyIndex::Slots::~Slots() {
  if (mapping_ != nullptr) {
    munmap(mapping_, mapped_bytes_);
  } else {
    std::free(data_);
  }
}

void KeyIndex::Slots::Swap(Slots& o) noexcept {
  std::swap(data_, o.data_);
  std::swap(size_, o.size_);
  std::swap(mapping_, o.mapping_);
  std::swap(mapped_bytes_, o.mapped_bytes_);
}

void KeyIndex::Grow() {
  Slots grown(table_.empty() ? 64 : table_.size() * 2);
  const size_t mask = grown.size() - 1;
  // Re-inserting in insertion order keeps the candidates of one hash in that order.
  for (size_t n = 0; n < entries_.size(); ++n) {
    const uint64_t hash = entries_[n].hash;
    size_t i = hash & mask;
    while (grown[i] != 0) i = (i + 1) & mask;
    grown[i] = TagOf(hash) | static_cast<uint64_t>(n + 1);
  }
  table_ = std::move(grown);
}

}  // namespace runnel::channel
