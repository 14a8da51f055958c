#include "core/stream_cache.h"

#include <utility>

namespace runnel::internal {

std::string StreamCache::Key(const StreamScope& scope, std::string_view name) {
  std::string key = scope.Label();
  key.push_back('\0');
  key.append(name);
  return key;
}

StreamCache::Entry StreamCache::Get(const std::string& key) {
  MutexLock lock(mu_);
  auto it = entries_.find(key);
  return it == entries_.end() ? nullptr : it->second;
}

void StreamCache::Put(const std::string& key, Entry entry) {
  MutexLock lock(mu_);
  if (capacity_ == 0) return;
  if (entries_.size() >= capacity_) entries_.clear();  // bounded: start over rather than grow
  entries_[key] = std::move(entry);
}

void StreamCache::Erase(const std::string& key) {
  MutexLock lock(mu_);
  entries_.erase(key);
}

void StreamCache::SetCapacity(size_t capacity) {
  MutexLock lock(mu_);
  capacity_ = capacity;
  if (entries_.size() > capacity_) entries_.clear();
}

size_t StreamCache::capacity() {
  MutexLock lock(mu_);
  return capacity_;
}

}  // namespace runnel::internal
