// JSON mode (PROTOCOL.md section 9.1, SEMANTICS E6): splitting an append body into messages and
// joining stored messages into a response array.
//
// Thread-safety: pure functions.
#ifndef RUNNEL_CORE_PROTOCOL_JSON_MESSAGES_H_
#define RUNNEL_CORE_PROTOCOL_JSON_MESSAGES_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "runnel/status.h"

namespace runnel::protocol {

// Validates `body` as one JSON value. A top-level array is flattened by exactly one level (each
// element becomes one message); any other value is one message. Each message is the client's
// own text with only the whitespace between tokens removed: numbers keep every digit, objects
// their key order, strings their escapes (parsing into a JSON library and serializing back would
// round large integers to doubles and sort keys). An empty array is kInvalidArgument unless
// `allow_empty_array` (PUT may create an empty stream with `[]`). Invalid JSON, JSON nested past
// kMaxJsonDepth and numbers outside the range of a double are kInvalidArgument. An array of more
// than `max_messages` elements is kResourceExhausted, found before any message is made.
//
// Memory: besides the result (the compacted text of the messages, each a std::string), a
// transient copy of the compacted body and 4 bytes per message; no DOM of the body is built.
Result<std::vector<std::string>> SplitJsonMessages(std::string_view body, bool allow_empty_array,
                                                   size_t max_messages = SIZE_MAX);

// "[m1,m2,...]" from stored messages (each already a serialized JSON value).
std::string JoinJsonMessages(const std::vector<std::string_view>& messages);

// True when `content_type` selects JSON mode (application/json, any case, parameters ignored).
bool IsJsonContentType(std::string_view content_type);

// The media type lower-cased with parameters and spaces removed, for comparisons.
std::string NormalizeContentType(std::string_view content_type);
// NormalizeContentType(a) == NormalizeContentType(b), without building either string.
bool SameContentType(std::string_view a, std::string_view b);

}  // namespace runnel::protocol

#endif  // RUNNEL_CORE_PROTOCOL_JSON_MESSAGES_H_
