// Refusals that every store words the same way.
//
// Thread-safety: pure functions.
#ifndef RUNNEL_STORE_STORE_STATUS_H_
#define RUNNEL_STORE_STORE_STATUS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "runnel/status.h"
#include "runnel/store.h"

namespace runnel::store {

// An append whose AppendRequest::expected_attributes no longer match the stream's.
inline Status AttributesChanged(std::string_view stream) {
  return Status::Conflict("the attributes of stream '" + std::string(stream) +
                              "' changed since they were read; nothing was written",
                          0, 0);
}

// A catalog update whose expected next offset (UpdateStream) is no longer the stream's.
inline Status NextOffsetChanged(std::string_view stream, uint64_t expected, uint64_t actual) {
  return Status::Conflict("stream '" + std::string(stream) + "' has next offset " +
                              std::to_string(actual) + ", not " + std::to_string(expected) +
                              ": records were appended since it was read; nothing was changed",
                          expected, actual);
}

// The compare-and-set of an append's producer state against the stored (epoch, seq) (none when
// the producer is new): only a strictly newer pair may be written. A stale epoch is
// kPermissionDenied, an (epoch, seq) already committed kAlreadyExists; nothing is written.
// (The layer above checks before it appends; this catches a write that raced it, through
// another process sharing the store.)
inline Status CheckProducer(std::optional<std::pair<uint64_t, uint64_t>> stored,
                            const ProducerState& p) {
  if (stored && stored->first > p.epoch) {
    return Status::PermissionDenied("producer '" + p.producer_id + "' epoch " +
                                    std::to_string(p.epoch) + " is stale (stored epoch " +
                                    std::to_string(stored->first) + ")");
  }
  if (stored && stored->first == p.epoch && stored->second >= p.seq) {
    return Status::AlreadyExists("producer '" + p.producer_id + "' epoch " +
                                 std::to_string(p.epoch) + " seq " + std::to_string(p.seq) +
                                 " is already committed (stored seq " +
                                 std::to_string(stored->second) + ")");
  }
  return Status::OK();
}

}  // namespace runnel::store

#endif  // RUNNEL_STORE_STORE_STATUS_H_
