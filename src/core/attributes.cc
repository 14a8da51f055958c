#include "core/attributes.h"

#include <nlohmann/json.hpp>

#include "base/json_bounded.h"

namespace runnel::attributes {
namespace {

using json = nlohmann::json;

Result<json> ParseObject(std::string_view attributes) {
  if (attributes.empty()) return json::object();
  if (!JsonDepthWithin(attributes)) return Status::Corruption("stream attributes nest too deeply");
  json j = json::parse(attributes.begin(), attributes.end(), nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) {
    return Status::Corruption("stream attributes are not a JSON object");
  }
  return j;
}

}  // namespace

Result<std::optional<std::string>> Get(std::string_view attributes, std::string_view key) {
  RUNNEL_ASSIGN_OR_RETURN(auto values, GetEach(attributes, {key}));
  return std::move(values.front());
}

Result<std::vector<std::optional<std::string>>> GetEach(
    std::string_view attributes, std::initializer_list<std::string_view> keys) {
  std::vector<std::optional<std::string>> values(keys.size());
  // Most streams have no attributes; every request reads them.
  if (attributes.empty()) return values;
  RUNNEL_ASSIGN_OR_RETURN(json j, ParseObject(attributes));
  size_t i = 0;
  for (std::string_view key : keys) {
    auto it = j.find(std::string(key));
    if (it != j.end()) values[i] = it->dump();
    ++i;
  }
  return values;
}

Result<std::string> Set(std::string_view attributes, std::string_view key,
                        const std::optional<std::string>& json_value) {
  RUNNEL_ASSIGN_OR_RETURN(json j, ParseObject(attributes));
  if (json_value) {
    json value = ParseJsonBounded(*json_value);
    if (value.is_discarded()) {
      return Status::InvalidArgument("attribute '" + std::string(key) + "' is not valid JSON");
    }
    j[std::string(key)] = std::move(value);
  } else {
    j.erase(std::string(key));
  }
  if (j.empty()) return std::string();
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace runnel::attributes
