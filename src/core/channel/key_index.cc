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

void KeyIndex::Insert(uint64_t hash, size_t partition, uint64_t sequence) {
  if ((positions_.size() + 1) * 2 > table_.size()) Grow();
  hash = Normalize(hash);
  const size_t mask = table_.size() - 1;
  size_t i = hash & mask;
  while (table_[i].hash != 0) i = (i + 1) & mask;
  table_[i] = Entry{hash, positions_.size()};
  positions_.push_back(Position{sequence, static_cast<uint64_t>(partition)});
}

namespace {
constexpr size_t kHugePage = size_t{2} << 20;
}  // namespace

KeyIndex::Slots::Slots(size_t count) : size_(count) {
  const size_t bytes = count * sizeof(Entry);
  if (bytes < kHugePage) {
    data_ = static_cast<Entry*>(std::calloc(count, sizeof(Entry)));
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
  data_ = reinterpret_cast<Entry*>(aligned);
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
  Slots old = std::move(table_);
  table_ = Slots(old.empty() ? 64 : old.size() * 2);
  const size_t mask = table_.size() - 1;
  // Re-inserting in the old table's order would not preserve insertion order within a probe
  // run that wrapped around; walk each run from its start instead: start at an empty slot.
  size_t start = 0;
  while (start < old.size() && old[start].hash != 0) ++start;
  for (size_t k = 0; k < old.size(); ++k) {
    const Entry& e = old[(start + k) % (old.empty() ? 1 : old.size())];
    if (e.hash == 0) continue;
    size_t i = e.hash & mask;
    while (table_[i].hash != 0) i = (i + 1) & mask;
    table_[i] = e;
  }
}

}  // namespace runnel::channel
