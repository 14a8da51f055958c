#include "server/group_service.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>

#include "server/access_gate.h"
#include "server/http_errors.h"
#include "server/sse_format.h"

namespace runnel::server {

namespace {

using json = nlohmann::json;

constexpr std::string_view kGroupsPrefix = "/v1/groups/";
constexpr size_t kMaxGroupName = 256;
constexpr uint64_t kDefaultReadLimit = 100;

std::optional<uint64_t> ParseUint(std::string_view text) {
  if (text.empty() || text.size() > 20) return std::nullopt;
  uint64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    uint64_t digit = static_cast<uint64_t>(c - '0');
    if (value > (UINT64_MAX - digit) / 10) return std::nullopt;
    value = value * 10 + digit;
  }
  return value;
}

HttpResponse JsonResponse(const json& body) {
  HttpResponse r;
  r.Set("Content-Type", "application/json");
  r.Set("Cache-Control", "no-store");
  r.body = body.dump(-1, ' ', false, json::error_handler_t::replace);
  return r;
}

std::string LowerMediaType(std::string_view content_type) {
  std::string media(content_type.substr(0, content_type.find(';')));
  while (!media.empty() && media.back() == ' ') media.pop_back();
  for (char& c : media) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return media;
}

// One event as JSON: JSON-mode records as JSON values, text as strings, other bytes as base64.
json EventJson(const StreamEvent& event, const std::string& media) {
  json e = {{"offset", event.offset}, {"appended_at_ms", event.appended_at_ms}};
  if (media == "application/json") {
    json parsed = json::parse(event.payload, nullptr, /*allow_exceptions=*/false);
    if (!parsed.is_discarded()) {
      e["data"] = std::move(parsed);
      return e;
    }
  }
  if (media.starts_with("text/") || media == "application/json") {
    e["data"] = event.payload;
  } else {
    e["data_base64"] = Base64Encode(event.payload);
  }
  return e;
}

Status ValidateGroup(std::string_view group) {
  if (group.empty() || group.size() > kMaxGroupName) {
    return Status::InvalidArgument("group must be 1-256 bytes");
  }
  return Status::OK();
}

}  // namespace

bool GroupService::Matches(std::string_view path) {
  return path.starts_with(kGroupsPrefix);
}

Route GroupService::StreamRouteOf(std::string_view path) {
  if (!Matches(path)) return Route{};
  std::string stream_path = "/v1/" + std::string(path.substr(kGroupsPrefix.size()));
  Route route = ParseRoute(stream_path, /*allow_tenants=*/true);
  if (route.kind != Route::Kind::kStream) return Route{};
  route.label = "groups";
  return route;
}

bool GroupService::WantsLongPoll(const HttpRequest& request) {
  return request.method == "GET" && request.Query("group") &&
         request.Query("live") == std::optional<std::string_view>("long-poll");
}

HttpResponse GroupService::Handle(const Principal& who, const HttpRequest& request,
                                  bool* empty_read) {
  if (empty_read) *empty_read = false;
  Route route = StreamRouteOf(request.path);
  if (route.kind != Route::Kind::kStream) {
    return StreamService::ErrorResponse(Status::NotFound("no such route"));
  }
  // Authorization before existence (Z4).
  Status allowed = AccessGate::Authorize(who, route, request);
  if (!allowed.ok()) return AccessGate::Denied(allowed);

  const auto group = request.Query("group");
  if (group) {
    Status valid = ValidateGroup(*group);
    if (!valid.ok()) return StreamService::ErrorResponse(valid);
  }
  StreamRegistry& registry = streams_->registry();
  const bool get = request.method == "GET" || request.method == "HEAD";
  const bool post = request.method == "POST";
  if (!get && !post) {
    HttpResponse r = StreamService::ErrorResponse(
        Status::InvalidArgument("method " + request.method + " is not allowed on groups"));
    r.status = 405;
    r.Set("Allow", "GET, POST");
    return r;
  }
  if (post && !group && !request.Query("prune")) {
    return StreamService::ErrorResponse(
        Status::InvalidArgument("POST needs ?group=G&ack=N or ?prune=N"));
  }
  if (post && group && !request.Query("ack")) {
    return StreamService::ErrorResponse(Status::InvalidArgument("POST ?group=G needs &ack=N"));
  }

  auto info = streams_->LookupLive(route.scope, route.name);
  if (!info.ok()) return StreamService::ErrorResponse(info.status());
  const uint64_t tail = info->next_offset - 1;

  if (post && group) {
    auto offset = ParseUint(*request.Query("ack"));
    if (!offset) {
      return StreamService::ErrorResponse(
          Status::InvalidArgument("ack must be a non-negative integer"));
    }
    // SaveOffset is Ack with the stored value returned (C2, C4).
    auto stored = registry.SaveOffset(route.scope, route.name, *group, *offset);
    if (!stored.ok()) return StreamService::ErrorResponse(stored.status());
    return JsonResponse({{"group", std::string(*group)}, {"last_acked", *stored}});
  }
  if (post) {
    auto through = ParseUint(*request.Query("prune"));
    if (!through) {
      return StreamService::ErrorResponse(
          Status::InvalidArgument("prune must be a non-negative integer"));
    }
    auto removed = registry.Prune(route.scope, route.name, *through);
    if (!removed.ok()) return StreamService::ErrorResponse(removed.status());
    return JsonResponse({{"removed", *removed}});
  }
  if (group) {
    uint64_t limit = kDefaultReadLimit;
    if (auto l = request.Query("limit")) {
      auto parsed = ParseUint(*l);
      if (!parsed || *parsed == 0 || *parsed > StreamRegistry::kMaxReadLimit) {
        return StreamService::ErrorResponse(
            Status::InvalidArgument("limit must be an integer in 1..1000"));
      }
      limit = *parsed;
    }
    auto acked = registry.GetOffset(route.scope, route.name, *group);
    if (!acked.ok()) return StreamService::ErrorResponse(acked.status());
    auto events = registry.ReadAfter(route.scope, route.name, *acked, limit);
    if (!events.ok()) return StreamService::ErrorResponse(events.status());
    if (auto live = request.Query("live"); live && *live != "long-poll") {
      return StreamService::ErrorResponse(
          Status::InvalidArgument("live must be 'long-poll' for a group read"));
    }
    if (empty_read) *empty_read = events->empty();
    const std::string media = LowerMediaType(info->spec.content_type);
    json list = json::array();
    uint64_t next_ack = *acked;
    for (const StreamEvent& event : *events) {
      list.push_back(EventJson(event, media));
      next_ack = event.offset;
    }
    return JsonResponse({{"group", std::string(*group)},
                         {"last_acked", *acked},
                         {"events", std::move(list)},
                         {"next_ack", next_ack}});
  }
  auto groups = registry.ConsumerGroupInfo(route.scope, route.name);
  if (!groups.ok()) return StreamService::ErrorResponse(groups.status());
  json list = json::array();
  for (const ConsumerGroupStatus& g : *groups) {
    list.push_back({{"group", g.group},
                    {"last_acked", g.last_acked},
                    {"lag", tail > g.last_acked ? tail - g.last_acked : 0},
                    {"updated_at_ms", g.updated_at_ms}});
  }
  return JsonResponse({{"stream", route.name}, {"tail", tail}, {"groups", std::move(list)}});
}

}  // namespace runnel::server
