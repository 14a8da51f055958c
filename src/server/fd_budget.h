// The file-descriptor budget of `runnel serve`: how many client connections fit under
// RLIMIT_NOFILE while the store keeps the descriptors it needs.
//
// Every accepted connection holds one descriptor, and so does everything the store opens: the
// log store keeps one per live segment (64 MiB of log each) and opens more for a short while
// (the next segment prepared in the background, a checkpoint's temporary file, the directory
// for each fsync of it, a directory listing), the token file is re-read when it changes,
// webhook deliveries open a socket each (2 delivery threads) and resolve names, and the
// PostgreSQL store opens up to 6 connections (1 appender, 4 query, 1 listener), lazily and again
// after a reconnect. If clients could take every descriptor, the store's next open would fail
// and appends would fail with it. So the connection cap leaves room for all of that:
//
//   reserve     = kStoreReserveFixed + soft_limit / kStoreReserveDivisor   (the store's growth)
//   cap         = soft_limit - in_use - reserve - kRejectSlots
//   effective   = min(configured max connections, cap)
//
// where `in_use` is what the process holds when it starts serving (measured: stdio, the data
// directory's lock, the segments open at that point, the listener, the io threads' epoll and
// wake-up descriptors, the server's spare descriptor), and kRejectSlots are descriptors for
// answering connections beyond the cap with 503 (HttpServer: ServerOptions::reject_slots).
// The fixed part covers the store's short-lived opens and database and webhook connections; the
// fraction covers segments added as the log grows (1/8 of a 1,024 limit is 128 segments, 8 GiB
// of live log) and keeps a large limit from being given to clients down to the last few.
// The budget is computed once, at start: a log that grows after start by more segments than the
// reserve has room for can still run the store out of descriptors (at a 128 limit, some 40
// segments, 2.5 GiB of new live log), so data that grows large needs a limit to match.
//
// Thread-safety: the functions are reentrant; RaiseFdLimit changes process-wide state and is
// meant for start-up.
#ifndef RUNNEL_SERVER_FD_BUDGET_H_
#define RUNNEL_SERVER_FD_BUDGET_H_

#include <cstddef>
#include <cstdint>
#include <string>

namespace runnel::server {

inline constexpr uint64_t kStoreReserveFixed = 32;
inline constexpr uint64_t kStoreReserveDivisor = 8;
inline constexpr uint64_t kRejectSlots = 16;

struct FdLimit {
  // The soft limit in force after the call, and the hard limit.
  uint64_t soft = 0;
  uint64_t hard = 0;
  // The soft limit before the call (equal to `soft` when nothing was raised).
  uint64_t soft_before = 0;
  // Why the limit could not be read or raised; empty when it was.
  std::string error;
};

// Raises the soft RLIMIT_NOFILE to the hard limit and reports the outcome. Never lowers it; when
// the limit cannot be raised, `error` says why and `soft` is the limit still in force.
FdLimit RaiseFdLimit();

// The number of descriptors the process has open (from /proc/self/fd, else by probing every
// descriptor below the soft limit).
uint64_t CountOpenFds();

struct FdBudget {
  // Descriptors kept for the store beyond what is in use (see the formula above).
  uint64_t store_reserve = 0;
  // Descriptors for answering connections beyond the cap.
  uint64_t reject_slots = kRejectSlots;
  // Connections that fit: soft_limit - in_use - store_reserve - reject_slots (0 when none do).
  uint64_t fitting_connections = 0;
  // min(configured, fitting_connections).
  size_t max_connections = 0;
  // True when max_connections is below the configured cap.
  bool lowered = false;
};

// The budget for `configured` connections under `soft_limit` with `in_use` descriptors already
// open. A `fitting_connections` of 0 means the limit leaves no room for any client.
FdBudget PlanFdBudget(uint64_t soft_limit, uint64_t in_use, size_t configured);

// The smallest soft limit that leaves room for `connections` connections with `in_use`
// descriptors open (the inverse of PlanFdBudget, for error messages).
uint64_t FdLimitNeeded(uint64_t in_use, uint64_t connections);

}  // namespace runnel::server

#endif  // RUNNEL_SERVER_FD_BUDGET_H_
