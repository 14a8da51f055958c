#include "server/json_messages.h"

#include <nlohmann/json.hpp>

#include "base/json_depth.h"

namespace runnel::server {

Result<std::vector<std::string>> SplitJsonMessages(std::string_view body,
                                                   bool allow_empty_array) {
  if (!JsonDepthWithin(body)) {
    return Status::InvalidArgument("body nests arrays or objects deeper than " +
                                   std::to_string(kMaxJsonDepth) + " levels");
  }
  nlohmann::json value = nlohmann::json::parse(body.begin(), body.end(), nullptr,
                                               /*allow_exceptions=*/false);
  if (value.is_discarded()) return Status::InvalidArgument("body is not valid JSON");
  std::vector<std::string> messages;
  if (value.is_array()) {
    if (value.empty() && !allow_empty_array) {
      return Status::InvalidArgument("an empty JSON array appends nothing");
    }
    messages.reserve(value.size());
    for (const auto& element : value) {
      messages.push_back(element.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    }
  } else {
    messages.push_back(value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
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

bool IsJsonContentType(std::string_view content_type) {
  return NormalizeContentType(content_type) == "application/json";
}

}  // namespace runnel::server
