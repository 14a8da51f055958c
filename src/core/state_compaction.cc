#include "core/state_compaction.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "base/json_bounded.h"
#include "core/attributes.h"

namespace runnel::compaction {
namespace {

using json = nlohmann::json;

// The most times Compact re-reads the attributes when another writer changed them between its
// read and its compare-and-set.
constexpr int kMaxAttributeRetries = 16;
// The most payload bytes one Store::Read call of a compaction returns.
constexpr size_t kReadBytes = 64u << 20;

}  // namespace

std::string Config::Serialize() const {
  json j = json::object();
  j["mode"] = kModeState;
  j["tombstone_ms"] = tombstone_ms;
  if (horizon) j["horizon"] = horizon;
  if (compacted_through) j["compacted_through"] = compacted_through;
  return j.dump();
}

Result<Config> Config::Parse(std::string_view json_text) {
  json j = ParseJsonBounded(json_text);
  if (!j.is_object() || j.value("mode", std::string()) != kModeState) {
    return Status::Corruption("the stream's compaction settings are not readable");
  }
  Config c;
  try {
    c.tombstone_ms = j.value("tombstone_ms", kDefaultTombstoneMs);
    c.horizon = j.value("horizon", uint64_t{0});
    c.compacted_through = j.value("compacted_through", uint64_t{0});
  } catch (const json::exception&) {
    return Status::Corruption("the stream's compaction settings are not readable");
  }
  return c;
}

Result<std::optional<Config>> ConfigOf(std::string_view attributes) {
  RUNNEL_ASSIGN_OR_RETURN(auto text, attributes::Get(attributes, kAttributeKey));
  if (!text) return std::optional<Config>();
  RUNNEL_ASSIGN_OR_RETURN(Config c, Config::Parse(*text));
  return std::optional<Config>(c);
}

Result<std::string> WithConfig(std::string_view attributes, const Config& config) {
  return attributes::Set(attributes, kAttributeKey, config.Serialize());
}

Result<Message> ParseMessage(std::string_view json_text) {
  json j = ParseJsonBounded(json_text);
  if (!j.is_object()) return Status::InvalidArgument("a State Protocol message is a JSON object");
  auto headers = j.find("headers");
  if (headers == j.end() || !headers->is_object()) {
    return Status::InvalidArgument("a State Protocol message needs a headers object");
  }
  Message m;
  auto control = headers->find("control");
  auto operation = headers->find("operation");
  if (control != headers->end()) {
    if (operation != headers->end()) {
      return Status::InvalidArgument(
          "a State Protocol message has headers.operation or headers.control, not both");
    }
    const std::string name = control->is_string() ? control->get<std::string>() : std::string();
    if (name == "snapshot-start") {
      m.kind = Message::Kind::kSnapshotStart;
    } else if (name == "snapshot-end") {
      m.kind = Message::Kind::kSnapshotEnd;
    } else if (name == "reset") {
      m.kind = Message::Kind::kReset;
    } else {
      return Status::InvalidArgument(
          "headers.control must be \"snapshot-start\", \"snapshot-end\" or \"reset\"");
    }
    return m;
  }
  if (operation == headers->end()) {
    return Status::InvalidArgument(
        "a State Protocol message needs headers.operation (a change) or headers.control");
  }
  const std::string op = operation->is_string() ? operation->get<std::string>() : std::string();
  if (op == "insert") {
    m.kind = Message::Kind::kInsert;
  } else if (op == "update") {
    m.kind = Message::Kind::kUpdate;
  } else if (op == "delete") {
    m.kind = Message::Kind::kDelete;
  } else {
    return Status::InvalidArgument(
        "headers.operation must be \"insert\", \"update\" or \"delete\"");
  }
  auto type = j.find("type");
  auto key = j.find("key");
  if (type == j.end() || !type->is_string() || key == j.end() || !key->is_string()) {
    return Status::InvalidArgument("a change message needs a string type and a string key");
  }
  if (m.kind != Message::Kind::kDelete && !j.contains("value")) {
    return Status::InvalidArgument("an insert or update change message needs a value");
  }
  const auto& t = type->get_ref<const std::string&>();
  const auto& k = key->get_ref<const std::string&>();
  m.identity.reserve(t.size() + k.size() + 8);
  m.identity += std::to_string(t.size());
  m.identity += ':';
  m.identity += t;
  m.identity += k;
  return m;
}

void Planner::Add(const StoredRecord& record) {
  Seen seen{record.offset, record.payload.size(), nullptr};
  auto message = ParseMessage(record.payload);
  if (message.ok()) {
    if (message->kind == Message::Kind::kReset) reset_offset_ = record.offset;
    if (message->change()) {
      Latest& latest = latest_[message->identity];
      latest.offset = record.offset;
      latest.bytes = record.payload.size();
      latest.appended_at_ms = record.appended_at_ms;
      latest.deleted = message->kind == Message::Kind::kDelete;
      seen.latest = &latest;
    }
  }
  seen_records_.push_back(seen);
}

Planner::Plan Planner::Finish(uint64_t old_horizon) {
  Plan plan;
  plan.horizon = old_horizon;
  for (const Seen& s : seen_records_) {
    bool drop = false;
    if (s.offset < reset_offset_) {
      // Everything before the latest reset: a reader from before it reads the reset and starts
      // its state over; one from after it never needed these.
      drop = true;
    } else if (s.latest != nullptr) {
      if (s.latest->offset != s.offset) {
        drop = true;  // superseded by a later change message of the same (type, key)
      } else if (s.latest->deleted && s.latest->appended_at_ms + tombstone_ms_ <= now_ms_) {
        drop = true;  // an expired tombstone: readers from before it must start over
        ++plan.dropped_tombstones;
        plan.horizon = std::max(plan.horizon, s.offset);
      }
    }
    if (drop) {
      plan.drop.push_back(s.offset);
      plan.dropped_bytes += s.bytes;
    } else {
      ++plan.kept;
    }
  }
  return plan;
}

Result<Report> Compact(Store& store, StreamId id, uint64_t now_ms) {
  RUNNEL_ASSIGN_OR_RETURN(StreamInfo info, store.GetStreamById(id));
  RUNNEL_ASSIGN_OR_RETURN(auto config, ConfigOf(info.spec.attributes));
  if (!config) {
    return Status::FailedPrecondition("stream '" + info.spec.name +
                                      "' was not created with compaction");
  }
  if (!store.SupportsDropRecords()) {
    return Status::FailedPrecondition("the " + std::string(store.Name()) +
                                      " store does not support keyed compaction yet");
  }
  Report report;
  report.compacted_through = info.next_offset - 1;
  Planner planner(now_ms, config->tombstone_ms);
  uint64_t from = info.head_offset ? info.head_offset : info.next_offset;
  while (from <= report.compacted_through) {
    RUNNEL_ASSIGN_OR_RETURN(auto page, store.Read(id, from, kReadBatch, kReadBytes));
    if (page.empty()) break;
    for (const StoredRecord& r : page) {
      if (r.offset > report.compacted_through) break;
      ++report.scanned_records;
      report.scanned_bytes += r.payload.size();
      planner.Add(r);
    }
    from = page.back().offset + 1;
  }
  Planner::Plan plan = planner.Finish(config->horizon);

  // The horizon first: once it is committed, no reader below it is served, so no reader can
  // see the state with a tombstone gone that it needed.
  Config updated = *config;
  updated.horizon = plan.horizon;
  updated.compacted_through = report.compacted_through;
  std::string expected = info.spec.attributes;
  for (int attempt = 0;; ++attempt) {
    RUNNEL_ASSIGN_OR_RETURN(std::string attrs, WithConfig(expected, updated));
    Status s = store.UpdateStream(id, std::nullopt, attrs, expected, std::nullopt);
    if (s.ok()) break;
    if (s.code() != StatusCode::kConflict || attempt + 1 >= kMaxAttributeRetries) return s;
    RUNNEL_ASSIGN_OR_RETURN(StreamInfo fresh, store.GetStreamById(id));
    expected = fresh.spec.attributes;
    RUNNEL_ASSIGN_OR_RETURN(auto fresh_config, ConfigOf(expected));
    if (!fresh_config) return Status::FailedPrecondition("the stream's compaction was removed");
    updated.horizon = std::max(updated.horizon, fresh_config->horizon);
    updated.compacted_through =
        std::max(updated.compacted_through, fresh_config->compacted_through);
  }

  for (size_t i = 0; i < plan.drop.size(); i += kDropBatch) {
    const size_t end = std::min(plan.drop.size(), i + kDropBatch);
    std::vector<uint64_t> batch(plan.drop.begin() + static_cast<std::ptrdiff_t>(i),
                                plan.drop.begin() + static_cast<std::ptrdiff_t>(end));
    RUNNEL_ASSIGN_OR_RETURN(uint64_t removed, store.DropRecords(id, batch));
    report.dropped_records += removed;
  }
  report.dropped_bytes = plan.dropped_bytes;
  report.dropped_tombstones = plan.dropped_tombstones;
  report.kept_records = plan.kept;
  report.horizon = updated.horizon;
  return report;
}

}  // namespace runnel::compaction
