#include "store/retention.h"

namespace runnel::store {

Status ValidateRetention(const StreamRetention& retention) {
  if (retention.max_events && *retention.max_events == 0) {
    return Status::InvalidArgument("retention max_events must be at least 1");
  }
  if (retention.max_bytes && *retention.max_bytes == 0) {
    return Status::InvalidArgument("retention max_bytes must be at least 1");
  }
  return Status::OK();
}

Status ValidateStreamName(std::string_view name) {
  if (name.empty()) return Status::InvalidArgument("stream name must not be empty");
  return Status::OK();
}

size_t RetentionDropCount(const StreamRetention& retention, uint64_t now_ms,
                          const RetainedView& view) {
  if (view.count <= 1) return 0;
  const size_t keep_at_least = 1;
  size_t drop = 0;
  if (retention.max_events && view.count > *retention.max_events) {
    drop = view.count - static_cast<size_t>(*retention.max_events);
  }
  if (retention.max_bytes) {
    uint64_t remaining = view.total_bytes;
    for (size_t i = 0; i < drop; ++i) remaining -= view.bytes_at(i);
    while (remaining > *retention.max_bytes && view.count - drop > keep_at_least) {
      remaining -= view.bytes_at(drop);
      ++drop;
    }
  }
  if (retention.max_age_ms) {
    const uint64_t cutoff = now_ms > *retention.max_age_ms ? now_ms - *retention.max_age_ms : 0;
    while (view.count - drop > keep_at_least && view.timestamp_at(drop) < cutoff) ++drop;
  }
  return drop;
}

}  // namespace runnel::store
