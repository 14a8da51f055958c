#include "core/protocol/meta.h"

#include <nlohmann/json.hpp>

#include "core/attributes.h"
#include "runnel/channel.h"

namespace runnel::protocol {

namespace {

using json = nlohmann::json;

// Throws json::exception on a field of the wrong type (Parse turns that into "no metadata").
void ParseFields(json& j, Meta* out) {
  Meta& m = *out;
  if (j.contains("ttl_s")) m.ttl_s = j["ttl_s"].get<uint64_t>();
  if (j.contains("expires_at")) m.expires_at = j["expires_at"].get<std::string>();
  if (j.contains("expires_at_ms")) m.expires_at_ms = j["expires_at_ms"].get<int64_t>();
  if (j.contains("stream_seq")) m.stream_seq = j["stream_seq"].get<std::string>();
  if (j.contains("fork_ns")) m.fork_ns = j["fork_ns"].get<std::string>();
  if (j.contains("fork_name")) m.fork_name = j["fork_name"].get<std::string>();
  m.fork_position = j.value("fork_position", uint64_t{0});
  m.fork_sub_offset = j.value("fork_sub_offset", uint64_t{0});
  if (j.contains("fork_source")) m.fork_source_id = j["fork_source"].get<StreamId>();
  if (j.contains("forks")) m.fork_ids = j["forks"].get<std::vector<StreamId>>();
  m.fork_refs = j.value("fork_refs", uint64_t{0});
  m.soft_deleted = j.value("soft_deleted", false);
  m.creating = j.value("creating", false);
  m.touched_ms = j.value("touched_ms", uint64_t{0});
}

}  // namespace

Meta Meta::Parse(std::string_view attrs) {
  Meta m;
  auto values = attributes::GetEach(
      attrs, {DurableChannel::kAttributeKey, kAttributeKey, compaction::kAttributeKey});
  if (!values.ok()) return m;
  m.channel = (*values)[0].has_value();
  if ((*values)[2]) {
    if (auto c = compaction::Config::Parse(*(*values)[2]); c.ok()) m.compaction = *c;
  }
  if (!(*values)[1]) return m;
  const std::string& text = *(*values)[1];
  json j = json::parse(text.begin(), text.end(), nullptr, false);
  if (!j.is_object()) return m;
  try {
    ParseFields(j, &m);
  } catch (const json::exception&) {
    Meta none;
    none.channel = m.channel;
    none.compaction = m.compaction;
    return none;
  }
  return m;
}

std::string Meta::Serialize() const {
  json j = json::object();
  if (ttl_s) j["ttl_s"] = *ttl_s;
  if (expires_at) j["expires_at"] = *expires_at;
  if (expires_at_ms) j["expires_at_ms"] = *expires_at_ms;
  if (stream_seq) j["stream_seq"] = *stream_seq;
  if (fork_ns) j["fork_ns"] = *fork_ns;
  if (fork_name) j["fork_name"] = *fork_name;
  if (fork_ns) j["fork_position"] = fork_position;
  if (fork_sub_offset) j["fork_sub_offset"] = fork_sub_offset;
  if (fork_source_id) j["fork_source"] = *fork_source_id;
  if (!fork_ids.empty()) j["forks"] = fork_ids;
  if (fork_refs) j["fork_refs"] = fork_refs;
  if (soft_deleted) j["soft_deleted"] = true;
  if (creating) j["creating"] = true;
  if (touched_ms) j["touched_ms"] = touched_ms;
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::optional<std::string> Meta::Stored() const {
  std::string text = Serialize();
  if (text == "{}") return std::nullopt;
  return text;
}

}  // namespace runnel::protocol
