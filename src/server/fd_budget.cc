#include "server/fd_budget.h"

#include <fcntl.h>
#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

namespace runnel::server {

FdLimit RaiseFdLimit() {
  FdLimit out;
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) {
    out.error = std::string("getrlimit(RLIMIT_NOFILE): ") + std::strerror(errno);
    return out;
  }
  out.soft = out.soft_before = limit.rlim_cur;
  out.hard = limit.rlim_max;
  if (limit.rlim_cur >= limit.rlim_max) return out;
  rlimit raised = limit;
  raised.rlim_cur = limit.rlim_max;
  if (::setrlimit(RLIMIT_NOFILE, &raised) != 0) {
    out.error = std::string("setrlimit(RLIMIT_NOFILE, ") + std::to_string(limit.rlim_max) +
                "): " + std::strerror(errno);
    return out;
  }
  out.soft = raised.rlim_cur;
  return out;
}

uint64_t CountOpenFds() {
  std::error_code ec;
  uint64_t count = 0;
  // The iterator's own descriptor is counted too: one more than the caller holds, on the safe
  // side.
  for (std::filesystem::directory_iterator it("/proc/self/fd", ec), end; !ec && it != end;
       it.increment(ec)) {
    ++count;
  }
  if (!ec && count > 0) return count;
  rlimit limit{};
  uint64_t probe_below = 1u << 16;
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0) {
    probe_below = std::min<uint64_t>(limit.rlim_cur, 1u << 20);
  }
  count = 0;
  for (uint64_t fd = 0; fd < probe_below; ++fd) {
    if (::fcntl(static_cast<int>(fd), F_GETFD) != -1) ++count;
  }
  return count;
}

FdBudget PlanFdBudget(uint64_t soft_limit, uint64_t in_use, size_t configured) {
  FdBudget budget;
  budget.store_reserve = kStoreReserveFixed + soft_limit / kStoreReserveDivisor;
  const uint64_t taken = in_use + budget.store_reserve + budget.reject_slots;
  budget.fitting_connections = soft_limit > taken ? soft_limit - taken : 0;
  budget.max_connections =
      static_cast<size_t>(std::min<uint64_t>(configured, budget.fitting_connections));
  budget.lowered = budget.max_connections < configured;
  return budget;
}

uint64_t FdLimitNeeded(uint64_t in_use, uint64_t connections) {
  // No limit below in_use + fixed reserve + slots + connections fits; each step up gives
  // connections one more descriptor except every eighth (the reserve's share), so this takes
  // about limit / 7 steps.
  uint64_t limit = in_use + kStoreReserveFixed + kRejectSlots + connections;
  while (PlanFdBudget(limit, in_use, connections).fitting_connections < connections) ++limit;
  return limit;
}

}  // namespace runnel::server
