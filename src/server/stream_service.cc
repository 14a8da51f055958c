#include "server/stream_service.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <ctime>
#include <nlohmann/json.hpp>
#include <random>
#include <utility>

#include "core/protocol/json_messages.h"
#include "core/protocol/meta.h"
#include "core/protocol/rules.h"
#include "core/state_compaction.h"
#include "server/http_errors.h"
#include "server/sse_format.h"
#include "server/subscription_service.h"

namespace runnel::server {

namespace {

using json = nlohmann::json;
using protocol::IsJsonContentType;
using protocol::JoinJsonMessages;
using protocol::kMaxSafeInteger;
using protocol::NormalizeContentType;
using protocol::PastTrimmed;
using protocol::SameContentType;
using protocol::SplitJsonMessages;
using protocol::TailPosition;

constexpr uint64_t kCursorEpochMs = 1728432000000ULL;  // 2024-10-09T00:00:00Z
constexpr uint64_t kCursorIntervalMs = 20000;

// If-None-Match (RFC 9110 13.1.2): "*", or a comma-separated list of entity tags compared
// weakly (a W/ prefix on either side is ignored).
bool NoneMatchHits(std::string_view header, std::string_view etag) {
  auto opaque = [](std::string_view tag) { return tag.starts_with("W/") ? tag.substr(2) : tag; };
  if (TrimBlanks(header) == "*") return true;
  // Our tags hold no commas, so a list splits on them.
  while (!header.empty()) {
    const size_t comma = header.find(',');
    if (opaque(TrimBlanks(header.substr(0, comma))) == opaque(etag)) return true;
    if (comma == std::string_view::npos) break;
    header.remove_prefix(comma + 1);
  }
  return false;
}

bool IsTrue(std::optional<std::string_view> value) {
  return value && EqualsIgnoreCase(*value, "true");
}

// A non-negative decimal integer without sign, leading zeros, point or exponent.
std::optional<uint64_t> ParseCanonicalUint(std::string_view text, uint64_t max) {
  if (text.empty() || text.size() > 16) return std::nullopt;
  if (text.size() > 1 && text[0] == '0') return std::nullopt;
  uint64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + static_cast<uint64_t>(c - '0');
  }
  if (value > max) return std::nullopt;
  return value;
}

// Like ParseCanonicalUint but tolerates leading zeros (producer headers are integers).
std::optional<uint64_t> ParseUint(std::string_view text, uint64_t max) {
  if (text.empty() || text.size() > 19) return std::nullopt;
  uint64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + static_cast<uint64_t>(c - '0');
  }
  if (value > max) return std::nullopt;
  return value;
}

uint64_t NowMs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

bool IsBase64ContentType(std::string_view content_type) {
  std::string normalized = NormalizeContentType(content_type);
  return !(normalized.starts_with("text/") || normalized == "application/json");
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

// Whether a reader at `position` could miss a delete that compaction dropped (see
// core/state_compaction.h): position 0 (the beginning) never can.
bool BelowHorizon(const std::optional<compaction::Config>& c, uint64_t position) {
  return c && position > 0 && position < c->horizon;
}

HttpResponse HorizonGone() {
  HttpResponse r = StreamService::ErrorResponse(
      Status::NotFound("offset is before the stream's compaction horizon (a delete after it was "
                       "compacted away); read again from -1"));
  r.status = 410;
  return r;
}

HttpResponse Gone() {
  HttpResponse r = StreamService::ErrorResponse(Status::NotFound("stream was deleted"));
  r.status = 410;
  return r;
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

void StreamService::Defer(std::function<void()> fn) {
  DeferTo(options_.executor, std::move(fn));
}

StreamService::Executor StreamService::Home() const {
  if (options_.current_executor) {
    if (Executor here = options_.current_executor()) return here;
  }
  return options_.executor;
}

void StreamService::DeferTo(const Executor& ex, std::function<void()> fn) {
  if (ex) {
    ex(std::move(fn));
  } else {
    fn();
  }
}

void StreamService::RunInLane(const std::string& key, std::function<void(Release)> op) {
  {
    MutexLock lock(lanes_mu_);
    auto& queue = lanes_[key];
    queue.push_back(std::move(op));
    if (queue.size() > 1) return;  // the op ahead of it starts it on release
  }
  StartLaneHead(key);
}

void StreamService::StartLaneHead(const std::string& key) {
  std::function<void(Release)> op;
  {
    MutexLock lock(lanes_mu_);
    op = lanes_[key].front();
  }
  op([this, key]() {
    bool more = false;
    {
      MutexLock lock(lanes_mu_);
      auto it = lanes_.find(key);
      it->second.pop_front();
      more = !it->second.empty();
      if (!more) lanes_.erase(it);
    }
    if (more) StartLaneHead(key);
  });
}

void StreamService::DeferStoreWork(const Executor& home, bool calls_store,
                                   std::function<void()> fn) {
  if (calls_store && options_.offload_store_calls && options_.blocking_executor) {
    options_.blocking_executor(std::move(fn));
  } else {
    DeferTo(home, std::move(fn));
  }
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

void StreamService::HandleWrite(const Route& route, HttpRequest request, Done done) {
  // Any other value would read as "not closed": a client that meant to close would be told its
  // append succeeded and the stream stay open.
  if (auto closed = request.Header("stream-closed");
      closed && !EqualsIgnoreCase(*closed, "true") && !EqualsIgnoreCase(*closed, "false")) {
    done(ErrorResponse(Status::InvalidArgument("Stream-Closed must be true or false")));
    return;
  }
  if (request.method == "POST" && request.Query("compact")) {
    if (options_.blocking_executor) {
      options_.blocking_executor(
          [this, route, done = std::move(done)]() mutable { CompactNow(route, std::move(done)); });
    } else {
      CompactNow(route, std::move(done));
    }
    return;
  }
  auto shared = std::make_shared<const HttpRequest>(std::move(request));
  std::string key = LaneKey(route.scope, route.name);
  if (shared->method == "POST") {
    // Only validation that reads state it then changes needs the lane: Stream-Seq, closing and
    // idempotent producers. A plain append relies on the store's own atomicity, so plain
    // appends to one stream can share a group commit.
    const bool needs_lane =
        shared->Header("stream-seq").has_value() || IsTrue(shared->Header("stream-closed")) ||
        shared->Header("producer-id").has_value() || shared->Header("producer-epoch").has_value() ||
        shared->Header("producer-seq").has_value();
    if (!needs_lane) {
      const bool plain = !shared->Header("stream-expected-offset").has_value();
      if (options_.offload_store_calls && options_.blocking_executor &&
          !catalog_.AppendIsCached(route.scope, route.name, plain)) {
        // The lookup is a store call that may block: not on this (event-loop) thread.
        options_.blocking_executor([this, route, shared, done = std::move(done)]() mutable {
          Append(
              route, shared, [] {}, std::move(done));
        });
        return;
      }
      Append(
          route, shared, [] {}, std::move(done));
      return;
    }
  }
  RunInLane(key, [this, route, shared, done = std::move(done)](Release release) mutable {
    auto run = [this, route, shared, release = std::move(release),
                done = std::move(done)]() mutable {
      if (shared->method == "POST") {
        Append(route, shared, std::move(release), std::move(done));
      } else {
        RunCatalogWrite(route, *shared, std::move(release), std::move(done));
      }
    };
    if ((shared->method != "POST" || options_.offload_store_calls) && options_.blocking_executor) {
      options_.blocking_executor(std::move(run));
      return;
    }
    run();
  });
}

void StreamService::RunCatalogWrite(const Route& route, const HttpRequest& request, Release release,
                                    Done done) {
  if (request.method == "PUT") {
    Create(route, request, std::move(release), std::move(done));
  } else if (request.method == "PATCH") {
    UpdateRetention(route, request, std::move(release), std::move(done));
  } else {
    Delete(route, std::move(release), std::move(done));
  }
}

void StreamService::Delete(const Route& route, Release release, Done done) {
  protocol::Catalog::Refusal refusal = protocol::Catalog::Refusal::kNone;
  Status removed = catalog_.Delete(route.scope, route.name, &refusal);
  HttpResponse response;
  if (removed.ok()) {
    response.status = 204;
  } else if (refusal == protocol::Catalog::Refusal::kSoftDeleted) {
    response = Gone();
  } else if (refusal == protocol::Catalog::Refusal::kChannel) {
    response = ChannelOwned(route.name);
  } else {
    response = ErrorResponse(removed);
  }
  release();
  done(std::move(response));
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

void SetRetentionHeaders(const StreamRetention& retention, HttpResponse* r) {
  if (retention.max_events) {
    r->Set("Stream-Retention-Max-Events", std::to_string(*retention.max_events));
  }
  if (retention.max_age_ms) {
    r->Set("Stream-Retention-Max-Age-Ms", std::to_string(*retention.max_age_ms));
  }
  if (retention.max_bytes) {
    r->Set("Stream-Retention-Max-Bytes", std::to_string(*retention.max_bytes));
  }
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

void SetCompactionHeaders(const std::optional<compaction::Config>& c, HttpResponse* r) {
  if (!c) return;
  r->Set("Stream-Compaction", std::string(compaction::kModeState));
  r->Set("Stream-Compaction-Tombstone-Ms", std::to_string(c->tombstone_ms));
  if (c->horizon) r->Set("Stream-Compaction-Horizon", FormatOffset(c->horizon));
}

}  // namespace

void StreamService::Create(const Route& route, const HttpRequest& request, Release release,
                           Done done) {
  auto finish = [&](HttpResponse r) {
    release();
    done(std::move(r));
  };
  auto spec = ParseCreateSpec(request);
  if (!spec.ok()) return finish(ErrorResponse(spec.status()));
  protocol::Catalog::CreateRefusal refusal = protocol::Catalog::CreateRefusal::kNone;
  auto created = catalog_.Create(route.scope, route.name, *spec, &refusal);
  if (!created.ok()) {
    return finish(refusal == protocol::Catalog::CreateRefusal::kPayload
                      ? PayloadErrorResponse(created.status())
                      : ErrorResponse(created.status()));
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
  finish(std::move(r));
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

void StreamService::Append(const Route& route, std::shared_ptr<const HttpRequest> shared,
                           Release release, Done done, bool fresh, bool retry_race) {
  auto spec = ParseAppendSpec(*shared);
  if (!spec.ok()) {
    release();
    done(ErrorResponse(spec.status()));
    return;
  }
  protocol::PreparedAppend prepared =
      catalog_.PrepareAppend(route.scope, route.name, std::move(*spec), fresh, retry_race);
  if (prepared.answer) {
    return Conclude(route, std::move(shared), *prepared.answer, std::move(release), std::move(done),
                    retry_race);
  }
  if (prepared.found->meta.compaction) {
    NoteCompactedAppend(route.scope, prepared.found->info, prepared.bytes);
  }
  AppendRequest write = std::move(prepared.request);
  registry_.store().Append(
      std::move(write), [this, home = Home(), started = std::chrono::steady_clock::now(),
                         prepared = std::move(prepared), route, shared = std::move(shared),
                         release = std::move(release), done = std::move(done),
                         retry_race](Result<AppendResult> result) mutable {
        // Only a refusal (or Stream-Seq's bookkeeping, which may wait for a metadata write)
        // calls the store on the way to the answer.
        const bool calls_store = protocol::Catalog::FinishCallsStore(prepared, result);
        DeferStoreWork(
            home, calls_store,
            [this, started, prepared = std::move(prepared), route = std::move(route),
             shared = std::move(shared), release = std::move(release), done = std::move(done),
             retry_race, result = std::move(result)]() mutable {
              protocol::AppendOutcome outcome = catalog_.FinishAppend(prepared, std::move(result));
              if (metrics_ && outcome.kind == protocol::AppendOutcome::Kind::kAppended) {
                metrics_->ObserveAppendLatency(
                    static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                              std::chrono::steady_clock::now() - started)
                                              .count()));
              }
              Conclude(route, std::move(shared), outcome, std::move(release), std::move(done),
                       retry_race);
            });
      });
}

void StreamService::Conclude(const Route& route, std::shared_ptr<const HttpRequest> shared,
                             const protocol::AppendOutcome& outcome, Release release, Done done,
                             bool retry_race) {
  if (outcome.kind == protocol::AppendOutcome::Kind::kRetry) {
    // Decided from a stale view (a remembered lookup, or attributes changed by a racing
    // writer): decide again from a fresh lookup, a store call, so on the blocking executor when
    // store calls are offloaded. A race is retried once.
    auto again = [this, route, shared = std::move(shared), release = std::move(release),
                  done = std::move(done), retry_race = retry_race && !outcome.race]() mutable {
      Append(route, shared, std::move(release), std::move(done), /*fresh=*/true, retry_race);
    };
    if (options_.offload_store_calls && options_.blocking_executor) {
      options_.blocking_executor(std::move(again));
    } else {
      again();
    }
    return;
  }
  release();
  done(AppendResponse(route, outcome));
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

void StreamService::CompactNow(const Route& route, Done done) {
  auto found = catalog_.Lookup(route.scope, route.name);
  if (!found.ok()) return done(ErrorResponse(found.status()));
  if (found->meta.soft_deleted) return done(Gone());
  if (!found->meta.compaction) {
    return done(ErrorResponse(Status::FailedPrecondition(
        "stream '" + route.name + "' was not created with Stream-Compaction: state")));
  }
  auto report = RunCompaction(found->info.id, route.scope, route.name);
  if (!report.ok()) return done(ErrorResponse(report.status()));
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
  done(std::move(r));
}

void StreamService::UpdateRetention(const Route& route, const HttpRequest& request, Release release,
                                    Done done) {
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
  release();
  done(std::move(response));
}

HttpResponse StreamService::HandleList(const Route& route, const HttpRequest& request) {
  std::string prefix(request.Query("prefix").value_or(""));
  std::string after(request.Query("after").value_or(""));
  size_t limit = 1000;
  if (auto l = request.Query("limit")) {
    auto parsed = ParseCanonicalUint(*l, 10000);
    if (!parsed || *parsed == 0) {
      return ErrorResponse(Status::InvalidArgument("limit must be an integer in 1..10000"));
    }
    limit = *parsed;
  }
  // order=name (the default: byte order of the names) or order=natural (numbers by value,
  // "s-2" before "s-10": src/store/natural_key.h); `after` is a name in either.
  bool natural = false;
  if (auto order = request.Query("order")) {
    if (*order == "natural") {
      natural = true;
    } else if (*order != "name") {
      return ErrorResponse(Status::InvalidArgument("order must be 'name' or 'natural'"));
    }
  }
  json streams = json::array();
  bool more = false;
  // Adds `info` to the page unless it is hidden; false once the page is full (`more` set).
  auto add = [&](const StreamInfo& info) {
    Meta meta = Meta::Parse(info.spec.attributes);
    if (meta.soft_deleted || meta.creating || catalog_.Expired(info, meta)) return true;
    if (streams.size() == limit) {
      more = true;
      return false;
    }
    streams.push_back({{"name", info.spec.name},
                       {"content_type", info.spec.content_type},
                       {"next_offset", FormatOffset(TailPosition(info))},
                       {"closed", info.closed},
                       {"event_count", info.event_count},
                       {"retained_bytes", info.retained_bytes}});
    // A channel's partitions and head checkpoint are listed too, marked, so that a viewer can
    // tell them from the streams clients write.
    if (meta.channel) streams.back()["channel"] = true;
    if (meta.compaction) streams.back()["compaction"] = compaction::kModeState;
    return true;
  };
  // From the prefix on (Store::ListStreamsWithPrefix, Store::ListStreamsNatural): a listing
  // costs the streams it matches, not every name before them. One more than the page, so that
  // `more` is known.
  std::string cursor = after;
  while (!more) {
    const size_t want = std::min<size_t>(limit + 1, 1000);
    auto page =
        natural
            ? registry_.store().ListStreamsNatural(route.scope.Label(), prefix, cursor, want)
            : registry_.store().ListStreamsWithPrefix(route.scope.Label(), prefix, cursor, want);
    if (!page.ok()) return ErrorResponse(page.status());
    for (const StreamInfo& info : *page) {
      cursor = info.spec.name;
      if (!add(info)) break;
    }
    if (page->size() < want) break;
  }
  json body = {{"streams", streams}};
  if (more && !streams.empty()) body["next_after"] = streams.back()["name"];
  HttpResponse r;
  r.Set("Content-Type", "application/json");
  r.Set("Cache-Control", "no-store");
  r.body = body.dump(-1, ' ', false, json::error_handler_t::replace);
  return r;
}

HttpResponse StreamService::HandleHead(const Route& route, const HttpRequest&) {
  // Errors keep their body: the server sends only its length, which is the GET's.
  auto found = catalog_.Lookup(route.scope, route.name);
  if (!found.ok()) return ErrorResponse(found.status());
  if (found->meta.soft_deleted) return Gone();
  HttpResponse r;
  r.status = 200;
  r.length_unknown = true;
  // A channel's streams have no content type: no empty header for them.
  if (!found->info.spec.content_type.empty()) r.Set("Content-Type", found->info.spec.content_type);
  r.Set("Stream-Next-Offset", FormatOffset(TailPosition(found->info)));
  if (found->meta.ttl_s) r.Set("Stream-TTL", std::to_string(*found->meta.ttl_s));
  if (found->meta.expires_at) r.Set("Stream-Expires-At", *found->meta.expires_at);
  if (found->info.closed) r.Set("Stream-Closed", "true");
  SetRetentionHeaders(found->info.spec.retention, &r);
  SetCompactionHeaders(found->meta.compaction, &r);
  r.Set("Cache-Control", "no-store");
  return r;
}

std::optional<ReadState> StreamService::BeginRead(const Route& route, const HttpRequest& request,
                                                  HttpResponse* error) {
  ReadState state;
  auto live = request.Query("live");
  if (live) {
    if (*live == "long-poll") {
      state.mode = LiveMode::kLongPoll;
    } else if (*live == "sse") {
      state.mode = LiveMode::kSse;
    } else {
      *error = ErrorResponse(Status::InvalidArgument("live must be 'long-poll' or 'sse'"));
      return std::nullopt;
    }
  }
  OffsetQuery query;
  auto offset = request.Query("offset");
  if (offset) {
    auto parsed = ParseOffset(*offset);
    if (!parsed.ok()) {
      *error = ErrorResponse(parsed.status());
      return std::nullopt;
    }
    query = *parsed;
  } else if (state.mode != LiveMode::kNone) {
    *error = ErrorResponse(Status::InvalidArgument("live reads need an offset"));
    return std::nullopt;
  }
  auto found = catalog_.Lookup(route.scope, route.name);
  if (!found.ok()) {
    *error = ErrorResponse(found.status());
    return std::nullopt;
  }
  if (found->meta.soft_deleted) {
    *error = Gone();
    return std::nullopt;
  }
  const StreamInfo& info = found->info;
  catalog_.Touch(info, found->meta);
  state.scope = route.scope;
  state.name = route.name;
  state.id = info.id;
  state.content_type = info.spec.content_type;
  state.json = IsJsonContentType(info.spec.content_type);
  state.base64 = IsBase64ContentType(info.spec.content_type);
  switch (query.kind) {
    case OffsetQuery::Kind::kBeginning: state.position = 0; break;
    case OffsetQuery::Kind::kNow:
      state.position = TailPosition(info);
      state.offset_now = true;
      break;
    case OffsetQuery::Kind::kPosition:
      if (query.position > TailPosition(info)) {
        *error = ErrorResponse(Status::InvalidArgument("offset is beyond the stream's tail"));
        return std::nullopt;
      }
      if (BelowHorizon(found->meta.compaction, query.position)) {
        *error = HorizonGone();
        return std::nullopt;
      }
      if (const uint64_t first_kept = info.head_offset ? info.head_offset : info.next_offset;
          !found->meta.compaction && query.position + 1 < first_kept) {
        // Records at this position were trimmed by retention or prune (PROTOCOL.md reserves
        // 410 for an offset before the retention window). "-1" still reads from the head.
        *error = ErrorResponse(Status::NotFound("offset is before the oldest retained record"));
        error->status = 410;
        return std::nullopt;
      }
      state.position = query.position;
      break;
  }
  if (found->meta.compaction) state.horizon_seen = found->meta.compaction->horizon;
  if (auto cursor = request.Query("cursor")) state.client_cursor = std::string(*cursor);
  if (auto inm = request.Header("if-none-match")) state.if_none_match = std::string(*inm);
  // SSE is never compressed (content_coding.h).
  if (options_.compression.enabled && state.mode != LiveMode::kSse) {
    state.coding = NegotiateCoding(request.Header("accept-encoding"));
  }
  return state;
}

ReadChunk StreamService::Read(const ReadState& state) {
  ReadChunk chunk;
  chunk.start = state.position;
  chunk.next = state.position;
  auto records = registry_.store().Read(state.id, state.position + 1, options_.max_read_records,
                                        options_.max_read_bytes);
  auto info = registry_.store().GetStreamById(state.id);
  if (!info.ok() || !records.ok()) {
    chunk.gone = true;
    // Only a stream the store says is gone was deleted; any other failure (a store that cannot
    // be reached, damaged records) is answered as what it is, never as a deletion.
    const Status& failed = !info.ok() ? info.status() : records.status();
    if (failed.code() != StatusCode::kNotFound) chunk.error = failed;
    return chunk;
  }
  if (info->spec.attributes.find(compaction::kAttributeKey) != std::string::npos) {
    auto c = compaction::ConfigOf(info->spec.attributes);
    if (c.ok() && BelowHorizon(*c, state.position)) {
      // A compaction moved the horizon past this reader since it began.
      chunk.gone = true;
      chunk.below_horizon = true;
      return chunk;
    }
    // A read from the beginning returns every survivor up to the horizon in this one response,
    // past max_read_bytes if need be: a position below the horizon is never handed out, so no
    // reader of the compacted stream is refused later for standing there.
    while (c.ok() && *c && !records->empty() && records->back().offset < (*c)->horizon) {
      auto more = registry_.store().Read(state.id, records->back().offset + 1,
                                         options_.max_read_records, options_.max_read_bytes);
      if (!more.ok()) {
        chunk.gone = true;
        if (more.status().code() != StatusCode::kNotFound) chunk.error = more.status();
        return chunk;
      }
      if (more->empty()) break;
      for (StoredRecord& r : *more) records->push_back(std::move(r));
    }
  }
  if (state.offset_now && state.mode == LiveMode::kNone) records->clear();
  for (StoredRecord& rec : *records) {
    chunk.next = rec.offset;
    chunk.records.push_back(std::move(rec.payload));
  }
  if (chunk.records.empty() && !state.offset_now) chunk.next = PastTrimmed(*info, state.position);
  // The last record read is the last one stored: the offsets after it up to the tail were
  // removed by compaction, so the reader stands past them (and is up to date).
  if (!chunk.records.empty() && chunk.next == info->tail_offset) {
    chunk.next = std::max(chunk.next, TailPosition(*info));
  }
  chunk.up_to_date = chunk.next >= TailPosition(*info);
  chunk.closed = info->closed && chunk.up_to_date;
  return chunk;
}

namespace {
std::string ReadBody(const ReadState& state, const ReadChunk& chunk) {
  if (state.json) {
    std::vector<std::string_view> views(chunk.records.begin(), chunk.records.end());
    return JoinJsonMessages(views);
  }
  size_t total = 0;
  for (const auto& r : chunk.records) total += r.size();
  std::string body;
  body.reserve(total);
  for (const auto& r : chunk.records) body += r;
  return body;
}

HttpResponse GoneOrFailed(const ReadChunk& chunk) {
  if (chunk.below_horizon) return HorizonGone();
  if (!chunk.error.ok()) return StreamService::ErrorResponse(chunk.error);
  return StreamService::ErrorResponse(Status::NotFound("stream was deleted"));
}

}  // namespace

HttpResponse StreamService::ReadResponse(const ReadState& state, const ReadChunk& chunk) {
  HttpResponse r;
  if (chunk.gone) return GoneOrFailed(chunk);
  r.status = 200;
  // A channel's streams have no content type: no empty header for them.
  if (!state.content_type.empty()) r.Set("Content-Type", state.content_type);
  r.Set("Stream-Next-Offset", FormatOffset(chunk.next));
  if (chunk.up_to_date) r.Set("Stream-Up-To-Date", "true");
  if (chunk.closed) r.Set("Stream-Closed", "true");
  if (state.mode != LiveMode::kNone && !chunk.closed) {
    r.Set("Stream-Cursor", NextCursor(state.client_cursor, NowMs()));
  }
  std::string body = ReadBody(state, chunk);
  // The coding is chosen before the validators: each coding is a representation of its own,
  // with its own entity tag (content_coding.h).
  ContentCoding coding =
      body.size() >= options_.compression.min_bytes ? state.coding : ContentCoding::kIdentity;
  auto etag_for = [&](ContentCoding c) {
    return "\"" + std::to_string(state.id) + ":" + std::to_string(chunk.start) + ":" +
           std::to_string(chunk.next) + (chunk.closed ? ":c" : "") +
           (c == ContentCoding::kIdentity ? "" : ":" + std::string(CodingName(c))) + "\"";
  };
  // Whatever the coding, the answer depends on Accept-Encoding while compression is on.
  std::string vary = options_.compression.enabled ? "Accept-Encoding" : "";
  std::optional<std::string> etag;
  if (state.offset_now) {
    r.Set("Cache-Control", "no-store");
  } else {
    etag = etag_for(coding);
    if (state.shared_cache) {
      r.Set("Cache-Control", "public, max-age=60, stale-while-revalidate=300");
    } else {
      r.Set("Cache-Control", "private, max-age=60, stale-while-revalidate=300");
      vary = vary.empty() ? "Authorization" : MergeVary("Authorization", vary);
    }
  }
  if (!vary.empty()) r.Set("Vary", vary);
  if (etag && state.if_none_match && NoneMatchHits(*state.if_none_match, *etag)) {
    r.Set("ETag", std::move(*etag));
    r.status = 304;
    return r;
  }
  if (coding != ContentCoding::kIdentity) {
    if (auto encoded = Compress(coding, body, options_.compression)) {
      body = std::move(*encoded);
      r.Set("Content-Encoding", std::string(CodingName(coding)));
    } else if (etag) {
      etag = etag_for(ContentCoding::kIdentity);  // the compressor failed: sent as it is
    }
  }
  if (etag) r.Set("ETag", std::move(*etag));
  r.body = std::move(body);
  return r;
}

HttpResponse StreamService::LongPollEmptyResponse(const ReadState& state, const ReadChunk& chunk) {
  if (chunk.gone) return GoneOrFailed(chunk);
  HttpResponse r;
  r.status = 204;
  r.Set("Stream-Next-Offset", FormatOffset(chunk.next));
  r.Set("Stream-Up-To-Date", "true");
  if (chunk.closed) {
    r.Set("Stream-Closed", "true");
  } else {
    r.Set("Stream-Cursor", NextCursor(state.client_cursor, NowMs()));
  }
  r.Set("Cache-Control", "no-store");
  return r;
}

HttpResponse StreamService::SseHeaders(const ReadState& state) {
  HttpResponse r;
  r.status = 200;
  r.Set("Content-Type", "text/event-stream");
  r.Set("Cache-Control", "no-cache");
  if (state.base64) r.Set("Stream-SSE-Data-Encoding", "base64");
  return r;
}

std::string StreamService::SseEvents(const ReadState& state, const ReadChunk& chunk) {
  std::string out;
  if (!chunk.records.empty()) {
    std::string body = ReadBody(state, chunk);
    AppendSseDataEvent(state.base64 ? Base64Encode(body) : body, &out);
  }
  json control = json::object();
  control["streamNextOffset"] = FormatOffset(chunk.next);
  if (!chunk.closed) control["streamCursor"] = NextCursor(state.client_cursor, NowMs());
  if (chunk.up_to_date) control["upToDate"] = true;
  if (chunk.closed) control["streamClosed"] = true;
  AppendSseEvent("control", control.dump(), &out);
  return out;
}

SseStep StreamService::ReadSse(const ReadState& state) {
  SseStep step;
  step.start = state.position;
  step.next = state.position;
  auto info = registry_.store().GetStreamById(state.id);
  if (!info.ok()) {
    step.gone = true;
    if (info.status().code() != StatusCode::kNotFound) step.error = info.status();
    return step;
  }
  if (state.position > 0 &&
      info->spec.attributes.find(compaction::kAttributeKey) != std::string::npos) {
    // A compaction moved the horizon past this reader since it began: it could miss a delete,
    // so it is told to start over, as a new read there would be (410). Below a horizon that has
    // not moved it has read survivors only, which is safe.
    auto c = compaction::ConfigOf(info->spec.attributes);
    if (c.ok() && BelowHorizon(*c, state.position) && (*c)->horizon != state.horizon_seen) {
      step.gone = true;
      step.error = Status::NotFound(
          "offset is before the stream's compaction horizon (a delete after it was compacted "
          "away); read again from -1");
      return step;
    }
  }
  const uint64_t tail = TailPosition(*info);
  if (state.position < tail) {
    const size_t limit = options_.sse_shared_frame_bytes;
    if (limit > 0) {
      MutexLock lock(sse_mu_);
      auto it = sse_frames_.find(state.id);
      if (it != sse_frames_.end() && it->second.start == state.position &&
          it->second.base64 == state.base64) {
        step.next = it->second.next;
        step.data = it->second.data;
      }
    }
    if (!step.data) {
      auto records = registry_.store().Read(state.id, state.position + 1, options_.max_read_records,
                                            options_.max_read_bytes);
      if (!records.ok()) {
        step.gone = true;
        if (records.status().code() != StatusCode::kNotFound) step.error = records.status();
        return step;
      }
      if (!records->empty()) {
        ReadChunk chunk;
        chunk.records.reserve(records->size());
        for (StoredRecord& rec : *records) {
          step.next = rec.offset;
          chunk.records.push_back(std::move(rec.payload));
        }
        std::string body = ReadBody(state, chunk);
        auto frame = std::make_shared<std::string>();
        frame->reserve(body.size() + body.size() / 2 + 64);
        AppendSseDataEvent(state.base64 ? Base64Encode(body) : body, frame.get());
        step.data = std::move(frame);
        if (limit > 0 && step.data->size() <= limit) {
          MutexLock lock(sse_mu_);
          auto [it, added] = sse_frames_.try_emplace(state.id);
          // Keep the frame at the furthest position: that is where the live readers gather.
          if (added || it->second.start <= state.position) {
            if (!added) sse_frame_bytes_ -= it->second.data->size();
            if (sse_frame_bytes_ + step.data->size() > limit) {
              // Over the bound: start over (readers keep the frames they hold).
              sse_frames_.clear();
              sse_frame_bytes_ = 0;
              it = sse_frames_.try_emplace(state.id).first;
            }
            it->second = SharedSseFrame{state.position, step.next, state.base64, step.data};
            sse_frame_bytes_ += step.data->size();
          }
        }
      }
    }
  }
  // Nothing readable below the tail (retention removed it all): stand past what was removed
  // and wait here for new records rather than read the same nothing again at once.
  if (!step.data) step.next = PastTrimmed(*info, state.position);
  step.up_to_date = step.next >= tail || !step.data;
  step.closed = info->closed && step.next >= tail;
  return step;
}

std::string StreamService::SseControl(const ReadState& state, const SseStep& step) {
  // Built by hand (every value is digits, '_' or a literal) in nlohmann's key order.
  std::string out = "event: control\ndata:{";
  if (step.closed) out += "\"streamClosed\":true,";
  if (!step.closed) {
    out += "\"streamCursor\":\"";
    out += NextCursor(state.client_cursor, NowMs());
    out += "\",";
  }
  out += "\"streamNextOffset\":\"";
  out += FormatOffset(step.next);
  out += '"';
  if (step.up_to_date) out += ",\"upToDate\":true";
  out += "}\n\n";
  return out;
}

std::string StreamService::SseError(const Status& error) {
  return "event: error\ndata:" + ErrorBody(error) + "\n\n";
}

Result<Subscription> StreamService::Watch(const ReadState& state, std::function<void()> on_hint) {
  return registry_.Subscribe(state.scope, state.name, "", std::nullopt, std::move(on_hint));
}

}  // namespace runnel::server
