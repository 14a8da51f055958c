// Retention arithmetic shared by every store, so all of them cut at exactly the same place.
#ifndef RUNNEL_STORE_RETENTION_H_
#define RUNNEL_STORE_RETENTION_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string_view>

#include "runnel/status.h"
#include "runnel/types.h"

namespace runnel::store {

// kInvalidArgument when a cap is zero (SEMANTICS P6: a zero cap would drop the event just
// appended, contradicting A4). max_age_ms = 0 is allowed: it keeps only events stamped `now`.
Status ValidateRetention(const StreamRetention& retention);

// kInvalidArgument for an empty name (SEMANTICS R8).
Status ValidateStreamName(std::string_view name);

// The stored size of a record for byte retention.
inline uint64_t RecordBytes(size_t key_size, size_t payload_size) {
  return static_cast<uint64_t>(key_size) + static_cast<uint64_t>(payload_size);
}

// Describes the retained records, oldest first, to the retention pass.
struct RetainedView {
  size_t count = 0;
  uint64_t total_bytes = 0;
  // appended_at_ms of the i-th oldest record, i < count.
  std::function<uint64_t(size_t)> timestamp_at;
  // RecordBytes of the i-th oldest record, i < count.
  std::function<uint64_t(size_t)> bytes_at;
};

// How many of the oldest records retention drops after an append at `now_ms` (SEMANTICS P1-P3):
// count cap first, then byte cap, then the leading run older than now - max_age_ms (strict,
// saturating at 0). The newest record is never dropped (A4).
size_t RetentionDropCount(const StreamRetention& retention, uint64_t now_ms,
                          const RetainedView& view);

}  // namespace runnel::store

#endif  // RUNNEL_STORE_RETENTION_H_
