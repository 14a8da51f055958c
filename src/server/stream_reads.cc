// The stream service's reads: HEAD, the stream list, catch-up and long-poll reads, and SSE
// (see stream_service.h). Writes are in stream_service.cc.
#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "core/protocol/json_messages.h"
#include "core/protocol/meta.h"
#include "core/protocol/rules.h"
#include "core/state_compaction.h"
#include "server/http_errors.h"
#include "server/sse_format.h"
#include "server/stream_service.h"
#include "server/stream_service_internal.h"
#include "server/subscription_service.h"

namespace runnel::server {

namespace {

using json = nlohmann::json;
using protocol::IsJsonContentType;
using protocol::JoinJsonMessages;
using protocol::NormalizeContentType;
using protocol::PastTrimmed;
using protocol::TailPosition;
using stream_internal::Gone;
using stream_internal::NowMs;
using stream_internal::ParseCanonicalUint;
using stream_internal::SetCompactionHeaders;
using stream_internal::SetRetentionHeaders;

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

bool IsBase64ContentType(std::string_view content_type) {
  std::string normalized = NormalizeContentType(content_type);
  return !(normalized.starts_with("text/") || normalized == "application/json");
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

}  // namespace

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

// About 80 lines: the shared frame's lookup, the read, and framing with the frame's refresh are
// one sequence over one step; split, each part would need the step's whole state.
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
