#include "core/protocol/json_messages.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "base/json_depth.h"

namespace runnel::protocol {

namespace {

// One pass over valid JSON text: copies it without the whitespace between tokens, notes where
// each element of a top-level array ends in the copy (at its comma or the closing bracket), and
// measures the deepest nesting.
struct Scanned {
  std::string compact;
  std::vector<uint32_t> element_ends;
  size_t depth = 0;
  bool too_many = false;  // the top-level array has more than max_elements elements
};

// Stops early (too_many) once the top-level array has more than `max_elements` elements.
Scanned Scan(std::string_view text, size_t max_elements) {
  Scanned out;
  // Only the elements of a top-level array are counted (not the members of an object).
  const size_t first = text.find_first_not_of(" \t\n\r");
  const bool array = first != std::string_view::npos && text[first] == '[';
  out.compact.reserve(text.size());
  size_t depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      out.compact.push_back(c);
      if (c == '\\' && i + 1 < text.size()) {
        out.compact.push_back(text[++i]);
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    switch (c) {
      case ' ':
      case '\t':
      case '\n':
      case '\r': continue;
      case '"': in_string = true; break;
      case '[':
      case '{': out.depth = std::max(out.depth, ++depth); break;
      case ']':
      case '}':
        if (depth-- == 1 && array) {
          out.element_ends.push_back(static_cast<uint32_t>(out.compact.size()));
        }
        break;
      case ',':
        if (depth == 1 && array) {
          out.element_ends.push_back(static_cast<uint32_t>(out.compact.size()));
          if (out.element_ends.size() >= max_elements) {
            out.too_many = true;
            return out;
          }
        }
        break;
      default: break;
    }
    out.compact.push_back(c);
  }
  return out;
}

}  // namespace

Result<std::vector<std::string>> SplitJsonMessages(std::string_view body, bool allow_empty_array,
                                                   size_t max_messages) {
  // The parser skips a UTF-8 byte order mark; so does the copy.
  if (body.starts_with("\xEF\xBB\xBF")) body.remove_prefix(3);
  // Positions in the compacted copy are 32-bit.
  if (body.size() > UINT32_MAX) return Status::ResourceExhausted("a JSON body of 4 GiB or more");
  // accept() runs without recursion, so any depth is safe to validate; the depth is then
  // bounded like all JSON from outside (base/json_depth.h).
  // A NUL byte is never valid JSON (a string must escape it), but the parser takes one for the
  // end of the input: `{"a":1}\0` would be accepted and stored with the NUL, and every later
  // read of the stream would be invalid JSON.
  if (body.find('\0') != std::string_view::npos ||
      !nlohmann::json::accept(body.begin(), body.end())) {
    return Status::InvalidArgument("body is not valid JSON");
  }
  Scanned scanned = Scan(body, max_messages);
  if (scanned.too_many) {
    return Status::ResourceExhausted("the JSON array holds more than " +
                                     std::to_string(max_messages) +
                                     " messages, the most one append may carry; send it in parts");
  }
  if (scanned.depth > kMaxJsonDepth) {
    return Status::InvalidArgument("body nests arrays or objects deeper than " +
                                   std::to_string(kMaxJsonDepth) + " levels");
  }
  std::string& compact = scanned.compact;
  std::vector<std::string> messages;
  if (compact.front() != '[') {
    messages.push_back(std::move(compact));
    return messages;
  }
  if (compact == "[]") {
    if (!allow_empty_array) return Status::InvalidArgument("an empty JSON array appends nothing");
    return messages;
  }
  // One level of flattening: each element of the outer array is one message.
  messages.reserve(scanned.element_ends.size());
  size_t start = 1;
  for (uint32_t end : scanned.element_ends) {
    messages.emplace_back(compact, start, end - start);
    start = end + 1;
  }
  return messages;
}

std::string JoinJsonMessages(const std::vector<std::string_view>& messages) {
  size_t total = 2;
  for (auto m : messages) total += m.size() + 1;
  std::string out;
  out.reserve(total);
  out.push_back('[');
  for (size_t i = 0; i < messages.size(); ++i) {
    if (i > 0) out.push_back(',');
    out.append(messages[i]);
  }
  out.push_back(']');
  return out;
}

std::string NormalizeContentType(std::string_view content_type) {
  std::string out;
  for (char c : content_type) {
    if (c == ';') break;
    if (c == ' ' || c == '\t') continue;
    out.push_back(static_cast<char>((c >= 'A' && c <= 'Z') ? c - 'A' + 'a' : c));
  }
  return out;
}

namespace {

// The next character of `content_type`'s normalized form (NormalizeContentType) from *i on,
// or -1 at its end; advances *i past what it read.
int NextNormalized(std::string_view content_type, size_t* i) {
  while (*i < content_type.size()) {
    const char c = content_type[(*i)++];
    if (c == ';') {
      *i = content_type.size();
      return -1;
    }
    if (c == ' ' || c == '\t') continue;
    return static_cast<unsigned char>((c >= 'A' && c <= 'Z') ? c - 'A' + 'a' : c);
  }
  return -1;
}

}  // namespace

bool SameContentType(std::string_view a, std::string_view b) {
  size_t i = 0;
  size_t j = 0;
  for (;;) {
    const int x = NextNormalized(a, &i);
    if (x != NextNormalized(b, &j)) return false;
    if (x < 0) return true;
  }
}

bool IsJsonContentType(std::string_view content_type) {
  return SameContentType(content_type, "application/json");
}

}  // namespace runnel::protocol
