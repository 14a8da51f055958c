// UTF-8 validation.
//
// Thread-safety: pure functions.
#ifndef RUNNEL_BASE_UTF8_H_
#define RUNNEL_BASE_UTF8_H_

#include <string_view>

namespace runnel {

// True when `s` is well-formed UTF-8: shortest-form sequences of scalar values (no surrogates,
// nothing past U+10FFFF). Text that reaches JSON output (names, headers, text payloads) must
// pass, or nlohmann::json would have to replace bytes (changing the text) or throw.
bool IsValidUtf8(std::string_view s);

}  // namespace runnel

#endif  // RUNNEL_BASE_UTF8_H_
