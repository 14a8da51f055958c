// TailCache: the bytes of recently committed groups holding append batches, exactly as written
// at (segment << 32 | position), oldest first; evicted from the front beyond a byte bound
// (LogStoreOptions::tail_cache_bytes). Reads take frames from it instead of a pread.
//
// Thread-safety: none of its own. LogStore keeps its TailCache under state_mu_: the writer
// thread adds a group holding it exclusively, readers find frames holding it shared. A found
// group's bytes are shared, so a reader may use them after the lock is released and the group
// evicted.
#ifndef RUNNEL_STORE_LOG_TAIL_CACHE_H_
#define RUNNEL_STORE_LOG_TAIL_CACHE_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <string>

namespace runnel::log {

class TailCache {
 public:
  struct CachedGroup {
    uint64_t key;  // segment << 32 | position of the group's first byte
    std::shared_ptr<const std::string> bytes;
  };
  // Adds the group written at `pos` of `segment` (after every group added before it), then
  // evicts the oldest groups while more than `limit` bytes are held.
  void Add(uint64_t segment, uint64_t pos, std::shared_ptr<const std::string> bytes,
           uint64_t limit);
  // Finds the cached group holding [pos, pos + len) of `segment`, or null.
  const CachedGroup* Find(uint64_t segment, uint64_t pos, uint64_t len) const;

 private:
  std::deque<CachedGroup> groups_;  // ascending keys
  uint64_t bytes_ = 0;              // the sizes of groups_' bytes, summed
};

}  // namespace runnel::log

#endif  // RUNNEL_STORE_LOG_TAIL_CACHE_H_
