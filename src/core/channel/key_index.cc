#include "core/channel/key_index.h"

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
  if ((size_ + 1) * 2 > table_.size()) Grow();
  hash = Normalize(hash);
  const size_t mask = table_.size() - 1;
  size_t i = hash & mask;
  while (table_[i].hash != 0) i = (i + 1) & mask;
  table_[i] = Entry{hash, sequence, static_cast<uint64_t>(partition)};
  ++size_;
}

void KeyIndex::Grow() {
  std::vector<Entry> old = std::move(table_);
  table_.assign(old.empty() ? 64 : old.size() * 2, Entry{});
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
