#include <future>
#include <string>
#include <vector>

#include "runnel/store.h"
#include "store/natural_key.h"

namespace runnel {

Result<std::vector<StreamInfo>> Store::ListStreamsWithPrefix(std::string_view ns,
                                                             std::string_view prefix,
                                                             std::string_view start_after,
                                                             size_t limit) {
  std::vector<StreamInfo> out;
  if (limit == 0) return out;
  // Names with the prefix are contiguous and all sort after the prefix itself.
  std::string after(start_after);
  if (!prefix.empty() && after < prefix) {
    auto exact = GetStream(ns, prefix);
    if (exact.ok()) {
      out.push_back(std::move(*exact));
    } else if (exact.status().code() != StatusCode::kNotFound) {
      return exact.status();
    }
    after = prefix;
  }
  while (out.size() < limit) {
    RUNNEL_ASSIGN_OR_RETURN(auto page, ListStreams(ns, after, limit - out.size()));
    if (page.empty()) break;
    for (StreamInfo& info : page) {
      if (!info.spec.name.starts_with(prefix)) return out;
      out.push_back(std::move(info));
    }
    after = out.back().spec.name;
  }
  return out;
}

Result<std::vector<StreamInfo>> Store::ListStreamsNatural(std::string_view ns,
                                                          std::string_view prefix,
                                                          std::string_view start_after,
                                                          size_t limit) {
  std::vector<StreamInfo> out;
  if (limit == 0) return out;
  const store::NaturalPrefix range(prefix);
  // The smallest key after the cursor's: its key followed by a zero byte.
  std::string from;
  if (!start_after.empty()) {
    from = store::NaturalKey(start_after);
    from.push_back('\0');
  }
  while (out.size() < limit) {
    auto next = range.NextCandidate(from);
    if (!next) break;
    from = std::move(*next);
    const size_t want = limit - out.size();
    RUNNEL_ASSIGN_OR_RETURN(auto page, ListStreamsByNaturalKey(ns, from, want));
    bool jumped = false;
    for (StreamInfo& info : page) {
      std::string key = store::NaturalKey(info.spec.name);
      if (!range.InRange(key)) {
        // Past the stem: no later key matches. Otherwise past one digit count's range: go on
        // from the next range that can match.
        if (!key.starts_with(range.stem)) return out;
        from = std::move(key);
        jumped = true;
        break;
      }
      from = key;
      from.push_back('\0');
      if (!info.spec.name.starts_with(prefix)) continue;  // a leading zero elsewhere
      out.push_back(std::move(info));
      if (out.size() == limit) return out;
    }
    if (!jumped && page.size() < want) break;
  }
  return out;
}

Result<AppendResult> Store::AppendAndWait(AppendRequest request) {
  std::promise<Result<AppendResult>> promise;
  auto future = promise.get_future();
  Append(std::move(request),
         [&promise](Result<AppendResult> r) { promise.set_value(std::move(r)); });
  return future.get();
}

}  // namespace runnel
