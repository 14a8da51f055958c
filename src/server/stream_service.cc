#include "server/stream_service.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <ctime>
#include <nlohmann/json.hpp>
#include <random>
#include <utility>

#include "core/protocol/meta.h"
#include "core/protocol/rules.h"
#include "core/state_compaction.h"
#include "server/http_errors.h"
#include "server/stream_service_internal.h"
#include "server/subscription_service.h"

namespace runnel::server {

namespace {

using json = nlohmann::json;
using protocol::kMaxSafeInteger;
using protocol::TailPosition;
using stream_internal::Gone;
using stream_internal::NowMs;
using stream_internal::ParseCanonicalUint;
using stream_internal::ParseUint;
using stream_internal::SetRetentionHeaders;

constexpr uint64_t kCursorEpochMs = 1728432000000ULL;  // 2024-10-09T00:00:00Z
constexpr uint64_t kCursorIntervalMs = 20000;

bool IsTrue(std::optional<std::string_view> value) {
  return value && EqualsIgnoreCase(*value, "true");
}

// The created stream's absolute URL: the Host header when it is a plain host[:port] (or an
// IPv6 literal), else "localhost"; the path percent-encoded, as the decoded name may hold any
// byte ('?', '#', '%', spaces, even NUL), none of which may reach a header raw.
std::string LocationOf(const HttpRequest& request) {
  auto host = request.Header("host");
  const bool plain_host =
      host && !host->empty() && std::all_of(host->begin(), host->end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
               c == '.' || c == '-' || c == ':' || c == '[' || c == ']';
      });
  return "http://" + std::string(plain_host ? *host : "localhost") +
         PercentEncode(request.path, /*keep_slash=*/true);
}

}  // namespace

StreamService::StreamService(StreamRegistry registry, StreamServiceOptions options,
                             Metrics* metrics)
    : registry_(std::move(registry)),
      options_(options),
      metrics_(metrics),
      catalog_(registry_,
               protocol::CatalogOptions{.ttl_grace_ms = options_.ttl_grace_ms,
                                        .max_forks_per_stream = options_.max_forks_per_stream,
                                        .max_fork_bytes = options_.max_fork_bytes,
                                        .max_append_messages = options_.max_append_messages,
                                        .background = options_.blocking_executor,
                                        .append_cache_streams = options_.append_cache_streams}) {}

Result<StreamInfo> StreamService::LookupLive(const StreamScope& scope, std::string_view name) {
  return catalog_.LookupLive(scope, name);
}

std::string StreamService::LaneKey(const StreamScope& scope, std::string_view name) {
  std::string key = scope.Label();
  key.push_back('\n');
  key.append(name);
  return key;
}

// ---------------------------------------------------------------------------------------------
// Headers

namespace {

constexpr std::pair<std::string_view, std::string_view> kCommonHeaders[] = {
    {"Access-Control-Allow-Origin", "*"},
    {"Access-Control-Expose-Headers",
     "Stream-Next-Offset, Stream-Cursor, Stream-Up-To-Date, Stream-Closed, Stream-TTL, "
     "Stream-Expires-At, ETag, Location, Content-Type, Producer-Epoch, Producer-Seq, "
     "Producer-Expected-Seq, Producer-Received-Seq, Stream-SSE-Data-Encoding, "
     "Stream-Retention-Max-Events, Stream-Retention-Max-Age-Ms, Stream-Retention-Max-Bytes, "
     "Stream-Compaction, Stream-Compaction-Tombstone-Ms, Stream-Compaction-Horizon, "
     "WWW-Authenticate"},
    {"X-Content-Type-Options", "nosniff"},
    {"Cross-Origin-Resource-Policy", "cross-origin"},
};

}  // namespace

void StreamService::AddCommonHeaders(HttpResponse* r) {
  for (const auto& [name, value] : kCommonHeaders) r->Set(std::string(name), std::string(value));
}

std::string_view StreamService::CommonHeaderLines() {
  static const std::string* lines = [] {
    auto* out = new std::string;
    for (const auto& [name, value] : kCommonHeaders) {
      out->append(name).append(": ").append(value).append("\r\n");
    }
    return out;
  }();
  return *lines;
}

HttpResponse StreamService::Preflight(const HttpRequest& request) {
  HttpResponse r;
  r.status = 204;
  r.Set("Access-Control-Allow-Methods", "GET, HEAD, POST, PUT, DELETE, PATCH, OPTIONS");
  auto requested = request.Header("access-control-request-headers");
  r.Set("Access-Control-Allow-Headers",
        requested && !requested->empty()
            ? std::string(*requested)
            : std::string("Content-Type, Authorization, If-None-Match, Stream-Seq, Stream-TTL, "
                          "Stream-Expires-At, Stream-Closed, Stream-Forked-From, "
                          "Stream-Fork-Offset, Stream-Fork-Sub-Offset, Producer-Id, "
                          "Producer-Epoch, Producer-Seq, Stream-Expected-Offset, "
                          "Stream-Retention, Stream-Retention-Max-Events, "
                          "Stream-Retention-Max-Age-Ms, Stream-Retention-Max-Bytes"));
  r.Set("Access-Control-Max-Age", "86400");
  return r;
}

HttpResponse StreamService::ChannelOwned(std::string_view name) {
  return ErrorResponse(Status::FailedPrecondition(
      "stream '" + std::string(name) +
      "' belongs to a runnel channel: publish through /v1/channels/<id>; its records can be read "
      "here but not appended to, trimmed or deleted"));
}

HttpResponse StreamService::ErrorResponse(const Status& status) {
  HttpResponse r;
  r.status = HttpStatusFor(status);
  r.Set("Content-Type", "application/json");
  r.Set("Cache-Control", "no-store");
  r.body = ErrorBody(status);
  // The store cannot be reached right now (e.g. its database restarts): worth retrying soon.
  if (r.status == 503) r.Set("Retry-After", "1");
  return r;
}

HttpResponse StreamService::PayloadErrorResponse(const Status& status) {
  HttpResponse r = ErrorResponse(status);
  if (status.code() == StatusCode::kResourceExhausted && !status.no_space()) r.status = 413;
  return r;
}

std::string StreamService::NextCursor(const std::optional<std::string>& client_cursor,
                                      uint64_t now_ms) {
  uint64_t current = now_ms > kCursorEpochMs ? (now_ms - kCursorEpochMs) / kCursorIntervalMs : 0;
  if (client_cursor) {
    auto client = ParseUint(*client_cursor, UINT64_MAX / 2);
    if (client && *client >= current) {
      thread_local std::mt19937_64 rng{std::random_device{}()};
      // 1-3600 s of jitter, in whole intervals (at least one).
      uint64_t jitter = 1 + rng() % (3600 / (kCursorIntervalMs / 1000));
      return std::to_string(*client + jitter);
    }
  }
  return std::to_string(current);
}

// ---------------------------------------------------------------------------------------------
// Writes

net::awaitable<HttpResponse> StreamService::HandleWrite(const Route& route, HttpRequest request) {
  // Any other value would read as "not closed": a client that meant to close would be told its
  // append succeeded and the stream stay open.
  if (auto closed = request.Header("stream-closed");
      closed && !EqualsIgnoreCase(*closed, "true") && !EqualsIgnoreCase(*closed, "false")) {
    co_return ErrorResponse(Status::InvalidArgument("Stream-Closed must be true or false"));
  }
  // Locals, not `this` or the parameters, in the lambdas: GCC 12 mishandles lambda captures of
  // coroutine parameters.
  StreamService* self = this;
  const Route* rt = &route;
  const HttpRequest* rq = &request;
  if (request.method == "POST" && request.Query("compact")) {
    const std::function<HttpResponse()> compact = [self, rt] { return self->CompactNow(*rt); };
    co_return co_await OnPool(options_.blocking_executor, compact);
  }
  // The store decides every append inside its atomic step; the lane keeps the writes whose
  // answer depends on their order (a producer's sequence, Stream-Seq, closing; PUT, PATCH,
  // DELETE) in the order they arrived, which calls on the blocking pool would not. Plain appends
  // to one stream need no order among themselves and can share a group commit.
  const bool post = request.method == "POST";
  const bool needs_lane =
      !post || request.Header("stream-seq").has_value() ||
      IsTrue(request.Header("stream-closed")) || request.Header("producer-id").has_value() ||
      request.Header("producer-epoch").has_value() || request.Header("producer-seq").has_value();
  if (!needs_lane) co_return co_await Append(route, request);
  std::string key = LaneKey(route.scope, route.name);
  KeyedLanes::Turn turn = co_await lanes_.Enter(std::move(key));
  if (post) co_return co_await Append(route, request);
  const std::function<HttpResponse()> write = [self, rt, rq] {
    return self->RunCatalogWrite(*rt, *rq);
  };
  co_return co_await OnPool(options_.blocking_executor, write);
}

HttpResponse StreamService::RunCatalogWrite(const Route& route, const HttpRequest& request) {
  if (request.method == "PUT") return Create(route, request);
  if (request.method == "PATCH") return UpdateRetention(route, request);
  return Delete(route);
}

HttpResponse StreamService::Delete(const Route& route) {
  protocol::Catalog::Refusal refusal = protocol::Catalog::Refusal::kNone;
  Status removed = catalog_.Delete(route.scope, route.name, &refusal);
  if (removed.ok()) {
    HttpResponse response;
    response.status = 204;
    return response;
  }
  if (refusal == protocol::Catalog::Refusal::kSoftDeleted) return Gone();
  if (refusal == protocol::Catalog::Refusal::kChannel) return ChannelOwned(route.name);
  return ErrorResponse(removed);
}

namespace {

// Stream-Retention-Max-Events / -Max-Age-Ms / -Max-Bytes (a runnel extension): positive
// integers; an absent header leaves that cap unset.
Result<StreamRetention> ParseRetentionHeaders(const HttpRequest& request) {
  StreamRetention retention;
  const std::pair<const char*, std::optional<uint64_t> StreamRetention::*> fields[] = {
      {"stream-retention-max-events", &StreamRetention::max_events},
      {"stream-retention-max-age-ms", &StreamRetention::max_age_ms},
      {"stream-retention-max-bytes", &StreamRetention::max_bytes},
  };
  for (const auto& [header, field] : fields) {
    if (auto value = request.Header(header)) {
      auto parsed = ParseCanonicalUint(*value, kMaxSafeInteger);
      if (!parsed || *parsed == 0) {
        return Status::InvalidArgument(std::string(header) + " must be a positive integer");
      }
      retention.*field = *parsed;
    }
  }
  return retention;
}

// The PUT headers as a create's spec. Only what the headers themselves say is checked here
// (numbers, which header needs which); every rule about the spec is protocol::Catalog::Create's.
// The fork source's path is resolved here too: the route syntax and the reserved __ds/ streams
// are the HTTP door's.
Result<protocol::CreateSpec> ParseCreateSpec(const HttpRequest& request) {
  protocol::CreateSpec c;
  if (auto ct = request.Header("content-type"); ct && !ct->empty())
    c.content_type = std::string(*ct);
  if (auto ttl = request.Header("stream-ttl")) {
    c.ttl_s = ParseCanonicalUint(*ttl, kMaxSafeInteger);
    if (!c.ttl_s) return Status::InvalidArgument("Stream-TTL must be a non-negative integer");
  }
  if (auto expires = request.Header("stream-expires-at")) c.expires_at = std::string(*expires);
  c.closed = IsTrue(request.Header("stream-closed"));
  auto from = request.Header("stream-forked-from");
  auto offset = request.Header("stream-fork-offset");
  auto sub = request.Header("stream-fork-sub-offset");
  if (!from && (offset || sub)) {
    return Status::InvalidArgument("fork headers require Stream-Forked-From");
  }
  if (from) {
    auto decoded = PercentDecode(*from, false);
    // Any scope: the caller's access to the source was checked before this (access_gate.h).
    Route src = ParseRoute(decoded ? *decoded : std::string(*from), /*allow_tenants=*/true);
    // The reserved __ds/ streams (subscription state) are not streams a client can read, so
    // none can be forked either.
    if (src.kind != Route::Kind::kStream || SubscriptionService::Matches(src)) {
      return Status::NotFound("fork source does not exist");
    }
    protocol::ForkSpec fork{.scope = src.scope, .name = src.name};
    if (offset) {
      RUNNEL_ASSIGN_OR_RETURN(OffsetQuery q, ParseOffset(*offset));
      if (q.kind == OffsetQuery::Kind::kBeginning) fork.position = 0;
      if (q.kind == OffsetQuery::Kind::kPosition) fork.position = q.position;
    }
    if (sub) {
      auto parsed = ParseUint(*sub, kMaxSafeInteger);
      if (!parsed) {
        return Status::InvalidArgument("Stream-Fork-Sub-Offset must be a non-negative integer");
      }
      fork.sub_offset = *parsed;
    }
    c.fork = std::move(fork);
  }
  RUNNEL_ASSIGN_OR_RETURN(c.retention, ParseRetentionHeaders(request));
  auto mode = request.Header("stream-compaction");
  auto tombstone = request.Header("stream-compaction-tombstone-ms");
  if (mode) {
    if (TrimBlanks(*mode) != compaction::kModeState) {
      return Status::InvalidArgument("Stream-Compaction takes only the value state");
    }
    c.compaction = compaction::Config{};
  }
  if (tombstone) {
    if (!mode) {
      return Status::InvalidArgument("Stream-Compaction-Tombstone-Ms needs Stream-Compaction");
    }
    auto ms = ParseCanonicalUint(*tombstone, compaction::kMaxTombstoneMs);
    if (!ms) {
      return Status::InvalidArgument(
          "Stream-Compaction-Tombstone-Ms must be an integer from 0 to " +
          std::to_string(compaction::kMaxTombstoneMs));
    }
    c.compaction->tombstone_ms = *ms;
  }
  c.body = request.body;
  return c;
}

}  // namespace

HttpResponse StreamService::Create(const Route& route, const HttpRequest& request) {
  auto spec = ParseCreateSpec(request);
  if (!spec.ok()) return ErrorResponse(spec.status());
  protocol::Catalog::CreateRefusal refusal = protocol::Catalog::CreateRefusal::kNone;
  auto created = catalog_.Create(route.scope, route.name, *spec, &refusal);
  if (!created.ok()) {
    return refusal == protocol::Catalog::CreateRefusal::kPayload
               ? PayloadErrorResponse(created.status())
               : ErrorResponse(created.status());
  }
  HttpResponse r;
  r.status = created->created ? 201 : 200;
  if (created->created) r.Set("Location", LocationOf(request));
  // A channel's streams have no content type: no empty header for them.
  if (!created->info.spec.content_type.empty()) {
    r.Set("Content-Type", created->info.spec.content_type);
  }
  r.Set("Stream-Next-Offset", FormatOffset(created->tail_position));
  if (created->closed) r.Set("Stream-Closed", "true");
  return r;
}

namespace {

// The append's headers as a protocol::AppendSpec. Only their syntax is checked here; every rule
// is core/protocol/append.h's. The content type is a view into `request`.
Result<protocol::AppendSpec> ParseAppendSpec(const HttpRequest& request) {
  protocol::AppendSpec spec;
  spec.close = IsTrue(request.Header("stream-closed"));
  auto pid = request.Header("producer-id");
  auto pepoch = request.Header("producer-epoch");
  auto pseq = request.Header("producer-seq");
  if (pid || pepoch || pseq) {
    if (!pid || !pepoch || !pseq) {
      return Status::InvalidArgument(
          "Producer-Id, Producer-Epoch and Producer-Seq must be sent together");
    }
    auto epoch = ParseUint(*pepoch, kMaxSafeInteger);
    auto seq = ParseUint(*pseq, kMaxSafeInteger);
    if (pid->empty() || !epoch || !seq) {
      return Status::InvalidArgument(
          "Producer-Id must be non-empty; Producer-Epoch and Producer-Seq integers <= 2^53-1");
    }
    spec.producer = ProducerState{std::string(*pid), *epoch, *seq, 0};
  }
  if (auto seq = request.Header("stream-seq")) spec.stream_seq = std::string(*seq);
  if (auto expected = request.Header("stream-expected-offset")) {
    auto parsed = ParseOffset(*expected);
    if (!parsed.ok() || parsed->kind != OffsetQuery::Kind::kPosition) {
      return Status::InvalidArgument("Stream-Expected-Offset must be an offset token");
    }
    spec.expected_position = parsed->position;
  }
  if (auto ct = request.Header("content-type")) spec.content_type = *ct;
  spec.body = request.body;
  return spec;
}

// Store::Append of *write, awaited: the coroutine resumes on its own executor, never on the
// store's writer thread. Not a coroutine: see server/await_call.h.
auto AwaitAppend(Store* store, AppendRequest* write) {
  return AwaitCallback<Result<AppendResult>>(
      [store, write](AppendCallback done) { store->Append(std::move(*write), std::move(done)); });
}

}  // namespace

HttpResponse StreamService::AppendResponse(const Route& route,
                                           const protocol::AppendOutcome& outcome) {
  using Kind = protocol::AppendOutcome::Kind;
  using Refusal = protocol::AppendOutcome::Refusal;
  HttpResponse r;
  if (outcome.kind == Kind::kRefused) {
    if (outcome.refusal == Refusal::kSoftDeleted) return Gone();
    if (outcome.refusal == Refusal::kChannel) return ChannelOwned(route.name);
    r = outcome.refusal == Refusal::kPayload ? PayloadErrorResponse(outcome.status)
                                             : ErrorResponse(outcome.status);
  } else {
    // A producer's records answer 200 (PROTOCOL 5.2.1); anything else that succeeds, 204.
    const bool producer_records = outcome.kind == Kind::kAppended && outcome.wrote_records &&
                                  outcome.producer_epoch.has_value();
    r.status = producer_records ? 200 : 204;
  }
  if (outcome.tail_position) r.Set("Stream-Next-Offset", FormatOffset(*outcome.tail_position));
  if (outcome.closed) r.Set("Stream-Closed", "true");
  if (outcome.producer_epoch) r.Set("Producer-Epoch", std::to_string(*outcome.producer_epoch));
  if (outcome.producer_seq) r.Set("Producer-Seq", std::to_string(*outcome.producer_seq));
  if (outcome.expected_seq) {
    r.Set("Producer-Expected-Seq", std::to_string(*outcome.expected_seq));
    r.Set("Producer-Received-Seq", std::to_string(outcome.received_seq.value_or(0)));
  }
  return r;
}

// One coroutine for every round, so a plain append costs one frame here; the lambdas exist only
// for the calls that go to the blocking pool. Their captures are locals, never `this` or the
// parameters: GCC 12 mishandles lambda captures of coroutine parameters.
net::awaitable<HttpResponse> StreamService::Append(const Route& route, const HttpRequest& request) {
  protocol::Catalog* catalog = &catalog_;
  const Route* rt = &route;
  bool fresh = false;
  // A retry is fresh (never from the cache again): at most two rounds.
  for (;;) {
    auto spec = ParseAppendSpec(request);
    if (!spec.ok()) co_return ErrorResponse(spec.status());
    // The lookup is a store call that may block when it is not decided from the cache: not on
    // an event-loop thread then.
    protocol::PreparedAppend prepared;
    if (options_.offload_store_calls && options_.blocking_executor &&
        (fresh || !catalog_.AppendIsCached(route.scope, route.name))) {
      protocol::AppendSpec* taken = &*spec;
      const std::function<protocol::PreparedAppend()> prepare = [catalog, rt, taken, fresh] {
        return catalog->PrepareAppend(rt->scope, rt->name, std::move(*taken), fresh);
      };
      prepared = co_await OnPool(options_.blocking_executor, prepare);
    } else {
      prepared = catalog_.PrepareAppend(route.scope, route.name, std::move(*spec), fresh);
    }
    protocol::AppendOutcome outcome;
    if (prepared.answer) {
      outcome = std::move(*prepared.answer);
    } else {
      if (prepared.found->meta.compaction) {
        NoteCompactedAppend(route.scope, prepared.found->info, prepared.bytes);
      }
      const auto started = std::chrono::steady_clock::now();
      Result<AppendResult> result = co_await AwaitAppend(&registry_.store(), &prepared.request);
      // Only a refusal by the store itself calls the store on the way to the answer.
      if (options_.offload_store_calls && protocol::Catalog::FinishCallsStore(prepared, result)) {
        const protocol::PreparedAppend* ready = &prepared;
        Result<AppendResult>* answered = &result;
        const std::function<protocol::AppendOutcome()> finish = [catalog, ready, answered] {
          return catalog->FinishAppend(*ready, std::move(*answered));
        };
        outcome = co_await OnPool(options_.blocking_executor, finish);
      } else {
        outcome = catalog_.FinishAppend(prepared, std::move(result));
      }
      if (metrics_ && outcome.kind == protocol::AppendOutcome::Kind::kAppended) {
        metrics_->ObserveAppendLatency(
            static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                      std::chrono::steady_clock::now() - started)
                                      .count()));
      }
    }
    if (outcome.kind != protocol::AppendOutcome::Kind::kRetry) {
      co_return AppendResponse(route, outcome);
    }
    fresh = true;
  }
}

// ---------------------------------------------------------------------------------------------
// HEAD, listing and reads

Result<compaction::Report> StreamService::RunCompaction(StreamId id, const StreamScope& scope,
                                                        std::string_view name) {
  {
    MutexLock lock(compacting_mu_);
    if (!compacting_.insert(id).second) {
      return Status::Conflict(
          "a compaction of stream '" + std::string(name) + "' is running; try again when it ends",
          0, 0);
    }
    appended_since_compaction_.erase(id);
  }
  auto report = compaction::Compact(registry_.store(), id, registry_.clock().NowMs());
  {
    MutexLock lock(compacting_mu_);
    compacting_.erase(id);
  }
  catalog_.ForgetCached(scope, name);  // the horizon in the metadata moved
  return report;
}

void StreamService::NoteCompactedAppend(const StreamScope& scope, const StreamInfo& info,
                                        uint64_t bytes) {
  if (options_.compaction_share <= 0 || !options_.blocking_executor) return;
  {
    MutexLock lock(compacting_mu_);
    uint64_t& since = appended_since_compaction_[info.id];
    since += bytes;
    const auto share = static_cast<uint64_t>(options_.compaction_share *
                                             static_cast<double>(info.retained_bytes + since));
    if (since < std::max(options_.compaction_min_bytes, share) || compacting_.count(info.id)) {
      return;
    }
  }
  options_.blocking_executor([this, id = info.id, scope, name = info.spec.name] {
    auto report = RunCompaction(id, scope, name);
    if (!report.ok() && report.status().code() != StatusCode::kConflict &&
        report.status().code() != StatusCode::kNotFound) {
      spdlog::warn("background compaction of stream '{}' failed: {}", name,
                   report.status().ToString());
    }
  });
}

HttpResponse StreamService::CompactNow(const Route& route) {
  auto found = catalog_.Lookup(route.scope, route.name);
  if (!found.ok()) return ErrorResponse(found.status());
  if (found->meta.soft_deleted) return Gone();
  if (!found->meta.compaction) {
    return ErrorResponse(Status::FailedPrecondition(
        "stream '" + route.name + "' was not created with Stream-Compaction: state"));
  }
  auto report = RunCompaction(found->info.id, route.scope, route.name);
  if (!report.ok()) return ErrorResponse(report.status());
  json body = {{"compacted_through", FormatOffset(report->compacted_through)},
               {"scanned_records", report->scanned_records},
               {"scanned_bytes", report->scanned_bytes},
               {"dropped_records", report->dropped_records},
               {"dropped_bytes", report->dropped_bytes},
               {"dropped_tombstones", report->dropped_tombstones},
               {"kept_records", report->kept_records},
               {"horizon", FormatOffset(report->horizon)}};
  HttpResponse r;
  r.status = 200;
  r.Set("Content-Type", "application/json");
  r.Set("Cache-Control", "no-store");
  r.body = body.dump();
  return r;
}

HttpResponse StreamService::UpdateRetention(const Route& route, const HttpRequest& request) {
  HttpResponse response;
  auto retention = ParseRetentionHeaders(request);
  const auto whole = request.Header("stream-retention");
  const bool clear = whole && EqualsIgnoreCase(TrimBlanks(*whole), "none");
  if (whole && !clear) {
    retention = Status::InvalidArgument("Stream-Retention takes only the value none");
  } else if (retention.ok() && *retention == StreamRetention{} && !clear) {
    retention = Status::InvalidArgument(
        "send Stream-Retention-Max-Events, -Max-Age-Ms or -Max-Bytes, or Stream-Retention: none");
  } else if (retention.ok() && !(*retention == StreamRetention{}) && clear) {
    retention = Status::InvalidArgument(
        "Stream-Retention: none clears every cap; send it without Stream-Retention-Max-* headers");
  }
  protocol::Catalog::Refusal refusal = protocol::Catalog::Refusal::kNone;
  if (!retention.ok()) {
    response = ErrorResponse(retention.status());
  } else if (auto after = catalog_.UpdateRetention(route.scope, route.name, *retention, &refusal);
             refusal == protocol::Catalog::Refusal::kSoftDeleted) {
    response = Gone();
  } else if (refusal == protocol::Catalog::Refusal::kChannel) {
    response = ChannelOwned(route.name);
  } else if (!after.ok()) {
    response = ErrorResponse(after.status());
  } else {
    response.status = 204;
    SetRetentionHeaders(*retention, &response);
    response.Set("Stream-Next-Offset", FormatOffset(TailPosition(*after)));
  }
  return response;
}

}  // namespace runnel::server
