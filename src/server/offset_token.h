// Durable Streams offset tokens.
//
// The protocol's offsets are opaque, lexicographically sortable strings. runnel mints them as
// "%016u_%016u" from the stream position, the number of records before it (so position p is
// followed by record offset p + 1): the second field is the position modulo 10^16, the first the
// rest, so every 64-bit position has exactly one token (the first field is zero below 10^16,
// which is every stream that starts at offset 1 in practice). Zero padding keeps lexicographic
// order equal to numeric order.
//
// Thread-safety: pure functions.
#ifndef RUNNEL_SERVER_OFFSET_TOKEN_H_
#define RUNNEL_SERVER_OFFSET_TOKEN_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "runnel/status.h"

namespace runnel::server {

// What the `offset` query parameter asked for.
struct OffsetQuery {
  enum class Kind { kBeginning, kNow, kPosition };
  Kind kind = Kind::kBeginning;
  uint64_t position = 0;  // for kPosition
};

// "0000000000000000_0000000000000042" for position 42.
std::string FormatOffset(uint64_t position);

// Parses a token minted by FormatOffset, or the sentinels "-1" and "now". Anything else
// (commas, spaces, wrong length, non-digits, a position past 2^64-1) is kInvalidArgument.
Result<OffsetQuery> ParseOffset(std::string_view text);

}  // namespace runnel::server

#endif  // RUNNEL_SERVER_OFFSET_TOKEN_H_
