#include "store/log/cleaner_policy.h"

#include <algorithm>

namespace runnel::log {

std::vector<uint64_t> PickEmptiest(std::vector<std::pair<uint64_t, uint64_t>> candidates,
                                   uint64_t budget, bool at_least_one) {
  std::sort(candidates.begin(), candidates.end());
  std::vector<uint64_t> victims;
  uint64_t total = 0;
  for (const auto& [live, n] : candidates) {
    if ((!at_least_one || !victims.empty()) && total + live > budget) break;
    total += live;
    victims.push_back(n);
  }
  std::sort(victims.begin(), victims.end());
  return victims;
}

}  // namespace runnel::log
