// StreamCache: streams looked up by scope and name, remembered so that a write by name costs no
// catalog read (on a shared database, a round trip). One per registry, shared by every copy of
// it and by the protocol catalog over it (core/protocol/catalog.h): the registry's appends by
// name use an entry's id, the protocol's appends its descriptor and metadata.
//
// Stream ids are never reused, so an entry can only be stale by naming a stream that was
// deleted (perhaps re-created under the same name on another node) or whose state moved on;
// every user of an entry relies only on what the store checks again inside the write, so a
// stale entry causes a definite refusal, after which the user forgets the entry and looks the
// name up again. Bounded: cleared when full.
//
// Thread-safety: every method may be called from any thread.
#ifndef RUNNEL_CORE_STREAM_CACHE_H_
#define RUNNEL_CORE_STREAM_CACHE_H_

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

#include "base/mutex.h"
#include "core/protocol/append.h"
#include "runnel/types.h"

namespace runnel::internal {

class StreamCache {
 public:
  using Entry = std::shared_ptr<const protocol::Found>;

  static constexpr size_t kDefaultCapacity = 65536;

  static std::string Key(const StreamScope& scope, std::string_view name);

  // The entry for `key`, or null.
  Entry Get(const std::string& key);
  void Put(const std::string& key, Entry entry);
  void Erase(const std::string& key);
  // The most entries kept (0: none are kept).
  void SetCapacity(size_t capacity);
  size_t capacity();

 private:
  Mutex mu_;
  size_t capacity_ RUNNEL_GUARDED_BY(mu_) = kDefaultCapacity;
  std::unordered_map<std::string, Entry> entries_ RUNNEL_GUARDED_BY(mu_);
};

}  // namespace runnel::internal

#endif  // RUNNEL_CORE_STREAM_CACHE_H_
