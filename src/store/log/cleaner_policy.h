// Which segments the cleaner copies forward, and which a full-disk reclamation empties: the
// emptiest first, within a byte budget. Apart from the store's state, so the rule can be read
// and tested on its own: LogStore gathers the candidates from its segments under its lock.
//
// Thread-safety: pure functions, no state.
#ifndef RUNNEL_STORE_LOG_CLEANER_POLICY_H_
#define RUNNEL_STORE_LOG_CLEANER_POLICY_H_

#include <cstdint>
#include <utility>
#include <vector>

namespace runnel::log {

// From `candidates` (bytes a copy of the segment's live frames takes, segment number), the
// emptiest first for as long as their bytes sum to at most `budget`; with `at_least_one`, the
// emptiest is taken even when it alone is over the budget. Returns their segment numbers,
// ascending.
std::vector<uint64_t> PickEmptiest(std::vector<std::pair<uint64_t, uint64_t>> candidates,
                                   uint64_t budget, bool at_least_one);

}  // namespace runnel::log

#endif  // RUNNEL_STORE_LOG_CLEANER_POLICY_H_
