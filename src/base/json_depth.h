// The nesting depth of JSON text, measured without parsing it.
//
// nlohmann::json parses iteratively but serializes (dump) recursively, one stack frame per
// level: a body of a few hundred thousand '[' parses fine and then overflows the stack of the
// thread that writes it back out. Every place that builds a value from JSON it did not write
// itself checks the depth first and treats deeper text as invalid; validation alone
// (nlohmann::json::accept) does not recurse and needs no check.
//
// Thread-safety: pure functions.
#ifndef RUNNEL_BASE_JSON_DEPTH_H_
#define RUNNEL_BASE_JSON_DEPTH_H_

#include <cstddef>
#include <string_view>

namespace runnel {

// The deepest nesting of arrays and objects runnel accepts in JSON from outside (message bodies,
// request bodies, attribute values). Real messages nest a few levels; 512 keeps serialization's
// recursion under a few hundred KiB of stack.
inline constexpr size_t kMaxJsonDepth = 512;

// True when no '[' or '{' outside a string opens a level deeper than `max_depth`. Exact for
// valid JSON; for invalid JSON it answers something and the parser then refuses the text.
inline bool JsonDepthWithin(std::string_view text, size_t max_depth = kMaxJsonDepth) {
  size_t depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return false;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return true;
}

}  // namespace runnel

#endif  // RUNNEL_BASE_JSON_DEPTH_H_
