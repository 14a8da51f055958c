#include "cli/terminal_text.h"

#include <time.h>

#include <cstddef>
#include <cstdint>
#include <ctime>
#include <string>

namespace runnel::cli {
namespace {

// The length of the well-formed UTF-8 sequence at the start of `s` (1 to 4) and its scalar
// value in *cp; 0 when `s` does not start with one (shortest form, no surrogates, at most
// U+10FFFF).
size_t DecodeUtf8(std::string_view s, uint32_t* cp) {
  const auto c = static_cast<unsigned char>(s[0]);
  if (c < 0x80) {
    *cp = c;
    return 1;
  }
  size_t len = 0;
  uint32_t value = 0;
  uint32_t min = 0;
  if ((c & 0xE0) == 0xC0) {
    len = 2, value = c & 0x1F, min = 0x80;
  } else if ((c & 0xF0) == 0xE0) {
    len = 3, value = c & 0x0F, min = 0x800;
  } else if ((c & 0xF8) == 0xF0) {
    len = 4, value = c & 0x07, min = 0x10000;
  } else {
    return 0;
  }
  if (s.size() < len) return 0;
  for (size_t k = 1; k < len; ++k) {
    const auto b = static_cast<unsigned char>(s[k]);
    if ((b & 0xC0) != 0x80) return 0;
    value = (value << 6) | (b & 0x3F);
  }
  if (value < min || value > 0x10FFFF || (value >= 0xD800 && value <= 0xDFFF)) return 0;
  *cp = value;
  return len;
}

void AppendHex2(std::string* out, uint32_t v) {
  constexpr char kHex[] = "0123456789abcdef";
  out->push_back(kHex[(v >> 4) & 0xF]);
  out->push_back(kHex[v & 0xF]);
}

}  // namespace

std::string TerminalSafe(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    uint32_t cp = 0;
    const size_t len = DecodeUtf8(text.substr(i), &cp);
    if (len == 0) {
      out += "\\x";
      AppendHex2(&out, static_cast<unsigned char>(text[i]));
      ++i;
      continue;
    }
    if (cp < 0x20 || cp == 0x7F) {
      out += "\\x";
      AppendHex2(&out, cp);
    } else if (cp >= 0x80 && cp <= 0x9F) {
      out += "\\u00";
      AppendHex2(&out, cp);
    } else if (cp == '\\') {
      out += "\\\\";
    } else {
      out.append(text.substr(i, len));
    }
    i += len;
  }
  return out;
}

std::string HumanTime(uint64_t unix_ms) {
  const std::time_t seconds = static_cast<std::time_t>(unix_ms / 1000);
  std::tm utc{};
  if (::gmtime_r(&seconds, &utc) == nullptr) return std::to_string(unix_ms) + " ms";
  char text[64];
  const size_t n = std::strftime(text, sizeof text, "%Y-%m-%d %H:%M:%SZ", &utc);
  return n == 0 ? std::to_string(unix_ms) + " ms" : std::string(text, n);
}

}  // namespace runnel::cli
