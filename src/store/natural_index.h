// NaturalIndex: the streams of each namespace ordered by natural key (store/natural_key.h), for
// Store::ListStreamsByNaturalKey. Holds one key per stream (about twice the name's bytes plus a
// map node). Not thread-safe: its owner guards it with the lock that guards its stream table,
// and keeps it in step with that table (Add when a stream enters it, Remove when it leaves).
#ifndef RUNNEL_STORE_NATURAL_INDEX_H_
#define RUNNEL_STORE_NATURAL_INDEX_H_

#include <cstddef>
#include <functional>
#include <map>
#include <string>
#include <string_view>

#include "store/natural_key.h"

namespace runnel::store {

template <typename T>
class NaturalIndex {
 public:
  void Add(std::string_view ns, std::string_view name, T value) {
    auto ns_it = keys_.find(ns);
    if (ns_it == keys_.end()) ns_it = keys_.emplace(std::string(ns), Keys{}).first;
    ns_it->second.insert_or_assign(NaturalKey(name), std::move(value));
  }

  void Remove(std::string_view ns, std::string_view name) {
    auto ns_it = keys_.find(ns);
    if (ns_it == keys_.end()) return;
    ns_it->second.erase(NaturalKey(name));
    if (ns_it->second.empty()) keys_.erase(ns_it);
  }

  void Clear() { keys_.clear(); }

  // Calls visit(value) for the entries of `ns` whose key is >= from_key, ascending by key, until
  // it returns false or `limit` calls were made.
  template <typename Visit>
  void Scan(std::string_view ns, std::string_view from_key, size_t limit, Visit&& visit) const {
    auto ns_it = keys_.find(ns);
    if (ns_it == keys_.end()) return;
    size_t n = 0;
    for (auto it = ns_it->second.lower_bound(from_key); it != ns_it->second.end() && n < limit;
         ++it, ++n) {
      if (!visit(it->second)) return;
    }
  }

 private:
  using Keys = std::map<std::string, T, std::less<>>;
  std::map<std::string, Keys, std::less<>> keys_;
};

}  // namespace runnel::store

#endif  // RUNNEL_STORE_NATURAL_INDEX_H_
