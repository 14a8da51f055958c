#include <string>
#include <vector>

#include "runnel/store.h"

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

}  // namespace runnel
