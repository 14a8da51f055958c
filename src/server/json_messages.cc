#include "server/json_messages.h"

#include <nlohmann/json.hpp>

#include "base/json_depth.h"

namespace runnel::server {

namespace {

// `text` (valid JSON) without the whitespace between tokens; strings are copied as they are.
std::string Compact(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      out.push_back(c);
      if (c == '\\' && i + 1 < text.size()) {
        out.push_back(text[++i]);
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
      out.push_back(c);
    } else if (c != ' ' && c != '\t' && c != '\n' && c != '\r') {
      out.push_back(c);
    }
  }
  return out;
}

}  // namespace

Result<std::vector<std::string>> SplitJsonMessages(std::string_view body, bool allow_empty_array) {
  if (!JsonDepthWithin(body)) {
    return Status::InvalidArgument("body nests arrays or objects deeper than " +
                                   std::to_string(kMaxJsonDepth) + " levels");
  }
  // The parser skips a UTF-8 byte order mark; so does the copy.
  if (body.starts_with("\xEF\xBB\xBF")) body.remove_prefix(3);
  if (!nlohmann::json::accept(body.begin(), body.end())) {
    return Status::InvalidArgument("body is not valid JSON");
  }
  std::string compact = Compact(body);
  std::vector<std::string> messages;
  if (compact.front() != '[') {
    messages.push_back(std::move(compact));
    return messages;
  }
  if (compact == "[]") {
    if (!allow_empty_array) return Status::InvalidArgument("an empty JSON array appends nothing");
    return messages;
  }
  // The elements of the outer array: split at its own commas, outside strings and nested values.
  size_t depth = 0;
  bool in_string = false;
  size_t start = 1;
  for (size_t i = 1; i + 1 < compact.size(); ++i) {
    const char c = compact[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      ++depth;
    } else if (c == ']' || c == '}') {
      --depth;
    } else if (c == ',' && depth == 0) {
      messages.emplace_back(compact, start, i - start);
      start = i + 1;
    }
  }
  messages.emplace_back(compact, start, compact.size() - 1 - start);
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

bool IsJsonContentType(std::string_view content_type) {
  return NormalizeContentType(content_type) == "application/json";
}

}  // namespace runnel::server
