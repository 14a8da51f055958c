// Helpers shared by the PostgreSQL store's files (postgres_store.cc: the catalog, reads,
// cursors; postgres_append.cc: the group-commit append path; postgres_notify.cc: tail
// notification across nodes). Internal to the store.
#ifndef RUNNEL_STORE_POSTGRES_POSTGRES_INTERNAL_H_
#define RUNNEL_STORE_POSTGRES_POSTGRES_INTERNAL_H_

#include <chrono>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>

#include "runnel/status.h"
#include "runnel/store.h"
#include "store/postgres/pg_conn.h"

namespace runnel::store::pg_internal {

constexpr uint64_t kMaxOffset = std::numeric_limits<uint64_t>::max();

// steady_clock nanoseconds, for the atomics that remember when something last happened.
inline int64_t SteadyNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
inline int64_t Ns(std::chrono::nanoseconds d) {
  return d.count();
}

inline Status StreamNotFound(StreamId id) {
  return Status::NotFound("stream #" + std::to_string(id) + " does not exist");
}

inline pg::Params& OptInt8(pg::Params& p, const std::optional<uint64_t>& v) {
  return v ? p.Int8(pg::BitsToDb(*v)) : p.Null(20);
}

}  // namespace runnel::store::pg_internal

#endif  // RUNNEL_STORE_POSTGRES_POSTGRES_INTERNAL_H_
