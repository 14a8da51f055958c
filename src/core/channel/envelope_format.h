// The canonical binary form of a MessageEnvelope (one channel record's payload).
// Prose and examples: docs/formats/envelope.md.
//
// All integers little-endian. "str" = u32 byte length + that many bytes of valid UTF-8
// (no overlong forms, no surrogates, nothing above U+10FFFF). "opt<X>" = one presence byte,
// 0 (absent, nothing follows) or 1 (X follows); any other value is corrupt.
//
//   offset  size  field
//   0       4     magic "LME1"
//   4       1     version = kEnvelopeVersion (1)
//   5       8     timestamp_ms u64
//   13      -     publisher_id      str
//           -     idempotency_key   opt<str>
//           -     key               opt<str>
//           -     causal_context    opt< parent_id opt<str>, vector_clock_entry opt<u64> >
//           -     payload           u32 length + opaque bytes
//   end           nothing may follow (trailing bytes are corrupt)
//
// There is no checksum: the store below verifies its records. A reader that meets a version it
// does not know refuses the record (kCorruption) rather than guess.
#ifndef RUNNEL_CORE_CHANNEL_ENVELOPE_FORMAT_H_
#define RUNNEL_CORE_CHANNEL_ENVELOPE_FORMAT_H_

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "base/utf8.h"

namespace runnel::channel {

inline constexpr std::string_view kEnvelopeMagic = "LME1";
inline constexpr uint8_t kEnvelopeVersion = 1;
inline constexpr uint8_t kAbsent = 0;
inline constexpr uint8_t kPresent = 1;
// magic + version + timestamp
inline constexpr size_t kEnvelopeFixedHeaderSize = 4 + 1 + 8;
// The largest length a u32 prefix can carry.
inline constexpr uint64_t kMaxFieldLength = 0xFFFFFFFFu;

// True if `s` is well-formed UTF-8 (base/utf8.h).
using runnel::IsValidUtf8;

}  // namespace runnel::channel

#endif  // RUNNEL_CORE_CHANNEL_ENVELOPE_FORMAT_H_
