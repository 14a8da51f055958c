// Helpers shared by the PostgreSQL store's files (postgres_store.cc: the catalog, reads,
// cursors; postgres_append.cc: the group-commit append path; postgres_group.cc: one group
// transaction; postgres_notify.cc: tail notification across nodes). Internal to the store.
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

namespace runnel::store {

// The names the store's files use unqualified. This header is included by those files only, so
// the declarations reach no other code.
using pg::BitsFromDb;
using pg::BitsToDb;
using pg::OffsetFromDb;
using pg::OffsetToDb;
using pg::Params;
using pg::Rows;
using pg_internal::kMaxOffset;
using pg_internal::Ns;
using pg_internal::OptInt8;
using pg_internal::SteadyNs;
using pg_internal::StreamNotFound;

}  // namespace runnel::store

#endif  // RUNNEL_STORE_POSTGRES_POSTGRES_INTERNAL_H_
