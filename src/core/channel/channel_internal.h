// Declarations shared by DurableChannel's files (channel.cc: configuration, accessors and
// EphemeralChannel; channel_open.cc: construction, opening and recovery; channel_publish.cc: the
// publish path; channel_head.cc: the head checkpoint; channel_keys.cc: pending appends and
// idempotency keys). Internal to the channel.
#ifndef RUNNEL_CORE_CHANNEL_CHANNEL_INTERNAL_H_
#define RUNNEL_CORE_CHANNEL_CHANNEL_INTERNAL_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "runnel/channel.h"
#include "runnel/status.h"

namespace runnel::channel_internal {

// The partition tag lives under this key of the stream's attributes (see core/attributes.h).
constexpr std::string_view kAttributeKey = DurableChannel::kAttributeKey;

// The tag of the companion stream holding the head checkpoint (V3).
std::string CheckpointTag(size_t partition_count);

Status ConfigError(std::string_view what);

// "stream <key> sequence <n> (offset <n + 1>)", for error messages.
std::string Where(std::string_view stream_key, uint64_t sequence);

// The Corruption status of a record at `sequence` that does not decode as an envelope.
Status EnvelopeErrorAt(std::string_view stream_key, uint64_t sequence, const Status& decode);

}  // namespace runnel::channel_internal

#endif  // RUNNEL_CORE_CHANNEL_CHANNEL_INTERNAL_H_
