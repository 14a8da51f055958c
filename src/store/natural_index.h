// NaturalIndex: the streams of each namespace in natural order (store/natural_key.h), for
// Store::ListStreamsByNaturalKey. It holds the caller's handle of each stream (a pointer) in an
// ordered set compared through the stream's name (NaturalCompare, no key stored): about 48 bytes
// a stream. `NameOf` gives a handle's name. Not thread-safe: its owner guards it with the lock
// that guards its stream table, and keeps it in step with that table (Add when a stream enters
// it, Remove before it leaves).
#ifndef RUNNEL_STORE_NATURAL_INDEX_H_
#define RUNNEL_STORE_NATURAL_INDEX_H_

#include <cstddef>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <utility>

#include "store/natural_key.h"

namespace runnel::store {

template <typename T, typename NameOf>
class NaturalIndex {
 public:
  void Add(std::string_view ns, T value) {
    auto ns_it = keys_.find(ns);
    if (ns_it == keys_.end()) ns_it = keys_.emplace(std::string(ns), Set{}).first;
    ns_it->second.insert(std::move(value));
  }

  // Removes the stream with `value`'s name (names are unique in a namespace).
  void Remove(std::string_view ns, const T& value) {
    auto ns_it = keys_.find(ns);
    if (ns_it == keys_.end()) return;
    ns_it->second.erase(value);
    if (ns_it->second.empty()) keys_.erase(ns_it);
  }

  void Clear() { keys_.clear(); }

  // Calls visit(value) for the streams of `ns` whose natural key is >= from_key, ascending, until
  // it returns false or `limit` calls were made. The seek builds the keys of the names it passes
  // on its way down the tree (about log2 of the namespace's size).
  template <typename Visit>
  void Scan(std::string_view ns, std::string_view from_key, size_t limit, Visit&& visit) const {
    auto ns_it = keys_.find(ns);
    if (ns_it == keys_.end()) return;
    size_t n = 0;
    for (auto it = ns_it->second.lower_bound(Key{from_key}); it != ns_it->second.end() && n < limit;
         ++it, ++n) {
      if (!visit(*it)) return;
    }
  }

 private:
  // A natural key to seek to.
  struct Key {
    std::string_view bytes;
  };
  struct Less {
    using is_transparent = void;
    bool operator()(const T& a, const T& b) const {
      return NaturalCompare(NameOf{}(a), NameOf{}(b)) < 0;
    }
    bool operator()(const T& a, const Key& k) const {
      return std::string_view(NaturalKey(NameOf{}(a))) < k.bytes;
    }
    bool operator()(const Key& k, const T& a) const {
      return k.bytes < std::string_view(NaturalKey(NameOf{}(a)));
    }
  };
  using Set = std::set<T, Less>;
  std::map<std::string, Set, std::less<>> keys_;
};

}  // namespace runnel::store

#endif  // RUNNEL_STORE_NATURAL_INDEX_H_
