// The convention for StreamSpec::attributes, the opaque bytes the store keeps for the layers
// above it: a JSON object whose top-level keys each belong to one layer ("runnel.channel" for
// channel partitions, "ds" for the HTTP protocol's metadata). A layer reads and replaces only
// its own key and keeps every other key as it found it, so layers never clobber each other.
// Empty attributes are an empty object.
#ifndef RUNNEL_CORE_ATTRIBUTES_H_
#define RUNNEL_CORE_ATTRIBUTES_H_

#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runnel/status.h"

namespace runnel::attributes {

// The JSON text of `key`'s value, or nullopt when the key is absent. kCorruption when the
// attributes are neither empty nor a JSON object.
Result<std::optional<std::string>> Get(std::string_view attributes, std::string_view key);

// Get of several keys with one parse of the attributes: one entry per key, in order.
Result<std::vector<std::optional<std::string>>> GetEach(
    std::string_view attributes, std::initializer_list<std::string_view> keys);

// The attributes with `key` set to `json_value` (JSON text), or removed when json_value is
// nullopt; empty (not "{}") when no key is left. kCorruption as for Get; kInvalidArgument when
// json_value is not valid JSON.
Result<std::string> Set(std::string_view attributes, std::string_view key,
                        const std::optional<std::string>& json_value);

}  // namespace runnel::attributes

#endif  // RUNNEL_CORE_ATTRIBUTES_H_
