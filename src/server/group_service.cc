#include "server/group_service.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>

#include "base/utf8.h"
#include "core/attributes.h"
#include "runnel/channel.h"
#include "server/access_gate.h"
#include "server/http_errors.h"
#include "server/offset_token.h"
#include "server/sse_format.h"
#include "server/subscription_service.h"

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

std::string LowerMediaType(std::string_view content_type) {
  std::string media(content_type.substr(0, content_type.find(';')));
  while (!media.empty() && media.back() == ' ') media.pop_back();
  for (char& c : media) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return media;
}

// One event as JSON text, keys in order: JSON-mode records embedded as stored (the client's own
// text, core/protocol/json_messages.h: never parsed and serialized again, which would round large
// integers and sort keys), text as strings, other bytes as base64.
std::string EventText(const StreamEvent& event, const std::string& media) {
  std::string out = "{\"appended_at_ms\":" + std::to_string(event.appended_at_ms);
  // accept() validates without building a value or recursing, so depth needs no check here.
  if (media == "application/json" && event.payload.find('\0') == std::string::npos &&
      json::accept(event.payload)) {
    out += ",\"data\":";
    out += event.payload;
  } else if ((media.starts_with("text/") || media == "application/json") &&
             IsValidUtf8(event.payload)) {
    // JSON strings hold text only: bytes that are not UTF-8 travel as base64, unchanged.
    out += ",\"data\":" + json(event.payload).dump();
  } else {
    out += ",\"data_base64\":\"" + Base64Encode(event.payload) + "\"";
  }
  out += ",\"offset\":" + std::to_string(event.offset) + "}";
  return out;
}

Status ValidateGroup(std::string_view group) {
  if (group.empty() || group.size() > kMaxGroupName) {
    return Status::InvalidArgument("group must be 1-256 bytes");
  }
  if (!IsValidUtf8(group)) return Status::InvalidArgument("group must be valid UTF-8");
  // Control characters (NUL above all) cut names short in C strings and terminals.
  for (char c : group) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      return Status::InvalidArgument("group must not contain control characters");
    }
  }
  return Status::OK();
}

// An ack value: a registry offset, or an offset token (offset_token.h) whose position is one.
std::optional<uint64_t> ParseAck(std::string_view text) {
  if (auto plain = ParseUint(text)) return plain;
  auto token = ParseOffset(text);
  if (!token.ok() || token->kind != OffsetQuery::Kind::kPosition) return std::nullopt;
  return token->position;
}

}  // namespace

bool GroupService::Matches(std::string_view path) {
  return path.starts_with(kGroupsPrefix);
}

Route GroupService::StreamRouteOf(std::string_view path) {
  if (!Matches(path)) return Route{};
  std::string stream_path = "/v1/" + std::string(path.substr(kGroupsPrefix.size()));
  Route route = ParseRoute(stream_path, /*allow_tenants=*/true);
  // The reserved __ds streams (subscription state) are not streams a client reads or prunes.
  if (route.kind != Route::Kind::kStream || SubscriptionService::Matches(route)) return Route{};
  route.label = "groups";
  return route;
}

GroupService::GroupService(StreamService* streams, BlockingExecutor blocking,
                           size_t max_groups_per_stream)
    : streams_(streams),
      max_groups_per_stream_(max_groups_per_stream),
      blocking_(std::move(blocking)) {}

net::awaitable<GroupAnswer> GroupService::Handle(const Principal& who, const HttpRequest& request) {
  // Locals, not `this` or the parameters, in the lambda: GCC 12 mishandles lambda captures of
  // coroutine parameters.
  GroupService* self = this;
  const Principal* principal = &who;
  const HttpRequest* rq = &request;
  const std::function<GroupAnswer()> handle = [self, principal, rq] {
    return self->HandleNow(*principal, *rq);
  };
  co_return co_await OnPool(blocking_, handle);
}

GroupAnswer GroupService::LiveReader(const Route& route, const HttpRequest& request, LiveMode mode,
                                     uint64_t acked) {
  // The stream read's own validation and positioning, from the beginning (a group offset below
  // the retained head reads from the head, D3), then moved to the group's offset. An offset
  // past the tail (skip-ahead, C9) waits until the stream grows beyond it.
  HttpRequest read;
  read.method = "GET";
  read.path = request.path;
  read.query["offset"] = "-1";
  read.query["live"] = mode == LiveMode::kSse ? "sse" : "long-poll";
  if (auto cursor = request.Query("cursor")) read.query["cursor"] = std::string(*cursor);
  GroupAnswer answer;
  auto state = streams_->BeginRead(route, read, &answer.response);
  if (state) {
    state->position = acked;
    answer.live = std::move(state);
  }
  return answer;
}

GroupAnswer GroupService::HandleNow(const Principal& who, const HttpRequest& request) {
  GroupAnswer answer;
  answer.response = HandleRequest(who, request, &answer);
  return answer;
}

// Long on purpose: the group API's routing in one place, each branch short (authorization and
// the group name first, then DELETE, prune, ack, read-next and info by method and query), so
// the order of the checks every endpoint shares reads top to bottom.
HttpResponse GroupService::HandleRequest(const Principal& who, const HttpRequest& request,
                                         GroupAnswer* answer) {
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
  const bool del = request.method == "DELETE";
  if (!get && !post && !del) {
    HttpResponse r = StreamService::ErrorResponse(
        Status::InvalidArgument("method " + request.method + " is not allowed on groups"));
    r.status = 405;
    r.Set("Allow", "GET, POST, DELETE");
    return r;
  }
  if (del && !group) {
    return StreamService::ErrorResponse(Status::InvalidArgument("DELETE needs ?group=G"));
  }
  if (post && !group && !request.Query("prune")) {
    return StreamService::ErrorResponse(
        Status::InvalidArgument("POST needs ?group=G&ack=N or ?prune=N"));
  }
  if (post && group && !request.Query("ack")) {
    return StreamService::ErrorResponse(Status::InvalidArgument("POST ?group=G needs &ack=N"));
  }

  auto info = streams_->LookupLive(route.scope, route.name);
  if (!info.ok()) {
    // P9: pruning a stream that does not exist removes nothing; it is not an error.
    if (post && !group && info.status().code() == StatusCode::kNotFound &&
        ParseUint(*request.Query("prune"))) {
      return JsonResponse(200, {{"removed", 0}});
    }
    return StreamService::ErrorResponse(info.status());
  }
  const uint64_t tail = info->next_offset - 1;

  if (del) {
    Status deleted = registry.DeleteGroup(route.scope, route.name, *group);
    if (!deleted.ok()) return StreamService::ErrorResponse(deleted);
    HttpResponse r;
    r.status = 204;
    return r;
  }
  if (post && group) {
    auto offset = ParseAck(*request.Query("ack"));
    if (!offset) {
      return StreamService::ErrorResponse(
          Status::InvalidArgument("ack must be a non-negative integer or an offset token"));
    }
    // A new group (or one still at 0) is counted against the stream's limit first; the list
    // is read only then, never for the acks of a group that has moved.
    auto current = registry.GetOffset(route.scope, route.name, *group);
    if (!current.ok()) return StreamService::ErrorResponse(current.status());
    if (*current == 0) {
      auto groups = registry.ConsumerGroupInfo(route.scope, route.name);
      if (!groups.ok()) return StreamService::ErrorResponse(groups.status());
      const bool known =
          std::any_of(groups->begin(), groups->end(),
                      [&](const ConsumerGroupStatus& g) { return g.group == *group; });
      if (!known && groups->size() >= max_groups_per_stream_) {
        return StreamService::ErrorResponse(
            Status::ResourceExhausted("stream '" + route.name + "' has reached its limit of " +
                                      std::to_string(max_groups_per_stream_) + " consumer groups"));
      }
    }
    // SaveOffset is Ack with the stored value returned (C2, C4).
    auto stored = registry.SaveOffset(route.scope, route.name, *group, *offset);
    if (!stored.ok()) return StreamService::ErrorResponse(stored.status());
    return JsonResponse(200, {{"group", std::string(*group)}, {"last_acked", *stored}});
  }
  if (post) {
    auto through = ParseUint(*request.Query("prune"));
    if (!through) {
      return StreamService::ErrorResponse(
          Status::InvalidArgument("prune must be a non-negative integer"));
    }
    // A channel's partitions are not trimmed from outside: its idempotency index would then
    // disagree with a scan of what is left (SEMANTICS choice 11).
    auto owner = attributes::Get(info->spec.attributes, DurableChannel::kAttributeKey);
    if (owner.ok() && owner->has_value()) return StreamService::ChannelOwned(route.name);
    auto removed = registry.Prune(route.scope, route.name, *through);
    if (!removed.ok()) return StreamService::ErrorResponse(removed.status());
    return JsonResponse(200, {{"removed", *removed}});
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
    LiveMode mode = LiveMode::kNone;
    if (auto live = request.Query("live")) {
      if (*live == "long-poll") {
        mode = LiveMode::kLongPoll;
      } else if (*live == "sse") {
        mode = LiveMode::kSse;
      } else {
        return StreamService::ErrorResponse(
            Status::InvalidArgument("live must be 'long-poll' or 'sse' for a group read"));
      }
      if (request.method != "GET") {
        return StreamService::ErrorResponse(Status::InvalidArgument("live group reads need GET"));
      }
    }
    auto acked = registry.GetOffset(route.scope, route.name, *group);
    if (!acked.ok()) return StreamService::ErrorResponse(acked.status());
    if (mode == LiveMode::kSse) {
      GroupAnswer live = LiveReader(route, request, mode, *acked);
      answer->live = std::move(live.live);
      return live.response;
    }
    auto events = registry.ReadAfter(route.scope, route.name, *acked, limit);
    if (!events.ok()) return StreamService::ErrorResponse(events.status());
    if (events->empty() && mode == LiveMode::kLongPoll) {
      GroupAnswer live = LiveReader(route, request, mode, *acked);
      answer->live = std::move(live.live);
      return live.response;
    }
    const std::string media = LowerMediaType(info->spec.content_type);
    uint64_t next_ack = *acked;
    HttpResponse r = JsonResponse(200, json::object());
    r.body = "{\"events\":[";
    for (const StreamEvent& event : *events) {
      if (&event != &events->front()) r.body += ',';
      r.body += EventText(event, media);
      next_ack = event.offset;
    }
    r.body += "],\"group\":" + json(std::string(*group)).dump() +
              ",\"last_acked\":" + std::to_string(*acked) +
              ",\"next_ack\":" + std::to_string(next_ack) + "}";
    return r;
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
  return JsonResponse(200, {{"stream", route.name}, {"tail", tail}, {"groups", std::move(list)}});
}

}  // namespace runnel::server
