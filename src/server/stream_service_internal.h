// Helpers the stream service's writes (stream_service.cc) and reads (stream_reads.cc) share.
//
// Thread-safety: pure functions.
#ifndef RUNNEL_SERVER_STREAM_SERVICE_INTERNAL_H_
#define RUNNEL_SERVER_STREAM_SERVICE_INTERNAL_H_

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/state_compaction.h"
#include "server/stream_service.h"

namespace runnel::server::stream_internal {

// A non-negative decimal integer of digits alone, leading zeros allowed (producer headers are
// integers), at most `max`.
inline std::optional<uint64_t> ParseUint(std::string_view text, uint64_t max) {
  if (text.empty() || text.size() > 19) return std::nullopt;
  uint64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + static_cast<uint64_t>(c - '0');
  }
  if (value > max) return std::nullopt;
  return value;
}

// As ParseUint, without leading zeros and at most 16 digits: the canonical form.
inline std::optional<uint64_t> ParseCanonicalUint(std::string_view text, uint64_t max) {
  if (text.size() > 16 || (text.size() > 1 && text[0] == '0')) return std::nullopt;
  return ParseUint(text, max);
}

inline uint64_t NowMs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

inline HttpResponse Gone() {
  HttpResponse r = StreamService::ErrorResponse(Status::NotFound("stream was deleted"));
  r.status = 410;
  return r;
}

inline void SetRetentionHeaders(const StreamRetention& retention, HttpResponse* r) {
  if (retention.max_events) {
    r->Set("Stream-Retention-Max-Events", std::to_string(*retention.max_events));
  }
  if (retention.max_age_ms) {
    r->Set("Stream-Retention-Max-Age-Ms", std::to_string(*retention.max_age_ms));
  }
  if (retention.max_bytes) {
    r->Set("Stream-Retention-Max-Bytes", std::to_string(*retention.max_bytes));
  }
}

inline void SetCompactionHeaders(const std::optional<compaction::Config>& c, HttpResponse* r) {
  if (!c) return;
  r->Set("Stream-Compaction", std::string(compaction::kModeState));
  r->Set("Stream-Compaction-Tombstone-Ms", std::to_string(c->tombstone_ms));
  if (c->horizon) r->Set("Stream-Compaction-Horizon", FormatOffset(c->horizon));
}

}  // namespace runnel::server::stream_internal

#endif  // RUNNEL_SERVER_STREAM_SERVICE_INTERNAL_H_
