#include "store/log/tail_cache.h"

#include <algorithm>
#include <utility>

namespace runnel::log {

void TailCache::Add(uint64_t segment, uint64_t pos, std::shared_ptr<const std::string> bytes,
                    uint64_t limit) {
  bytes_ += bytes->size();
  groups_.push_back(CachedGroup{(segment << 32) | pos, std::move(bytes)});
  while (bytes_ > limit && !groups_.empty()) {
    bytes_ -= groups_.front().bytes->size();
    groups_.pop_front();
  }
}

const TailCache::CachedGroup* TailCache::Find(uint64_t segment, uint64_t pos, uint64_t len) const {
  if (groups_.empty()) return nullptr;
  const uint64_t key = (segment << 32) | pos;
  // The last group starting at or before `key`.
  auto it = std::upper_bound(groups_.begin(), groups_.end(), key,
                             [](uint64_t k, const CachedGroup& g) { return k < g.key; });
  if (it == groups_.begin()) return nullptr;
  --it;
  if ((it->key >> 32) != segment || pos + len > (it->key & 0xffffffffu) + it->bytes->size()) {
    return nullptr;
  }
  return &*it;
}

}  // namespace runnel::log
