// Parsing JSON from outside with its depth bounded (see json_depth.h for why).
//
// Thread-safety: pure functions.
#ifndef RUNNEL_BASE_JSON_BOUNDED_H_
#define RUNNEL_BASE_JSON_BOUNDED_H_

#include <nlohmann/json.hpp>
#include <string_view>

#include "base/json_depth.h"

namespace runnel {

// The value of `text`, or a discarded value when it is not valid JSON or nests deeper than
// kMaxJsonDepth (a value that deep would overflow the stack once serialized). A NUL byte is never
// valid JSON (inside a string it must be escaped); the parser would take one for the end of the
// input and accept whatever precedes it.
inline nlohmann::json ParseJsonBounded(std::string_view text) {
  if (text.find('\0') != std::string_view::npos || !JsonDepthWithin(text)) {
    return nlohmann::json(nlohmann::json::value_t::discarded);
  }
  return nlohmann::json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
}

}  // namespace runnel

#endif  // RUNNEL_BASE_JSON_BOUNDED_H_
