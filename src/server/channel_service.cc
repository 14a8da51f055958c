#include "server/channel_service.h"

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>

#include "base/utf8.h"
#include "core/token_store.h"
#include "server/http_errors.h"
#include "server/sse_format.h"
#include "server/stream_service.h"

namespace runnel::server {
namespace {

using json = nlohmann::json;

HttpResponse Error(const Status& status) {
  return StreamService::ErrorResponse(status);
}

// Same alphabet as tenant ids: safe in URLs, file names and stream names.
Status ValidateChannelId(const std::string& id) {
  Status s = ValidateTenantId(id);
  if (!s.ok()) {
    return Status::InvalidArgument(
        "channel id must be 1 to 128 characters of letters, digits, '.', '_' and '-'");
  }
  return Status::OK();
}

// Decimal digits within [0, max]; nullopt otherwise.
std::optional<uint64_t> ParseCount(std::string_view text,
                                   uint64_t max = std::numeric_limits<uint64_t>::max()) {
  if (text.empty() || text.size() > 20) return std::nullopt;
  uint64_t n = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    const auto digit = static_cast<uint64_t>(c - '0');
    if (n > (max - digit) / 10) return std::nullopt;
    n = n * 10 + digit;
  }
  return n;
}

std::string StreamOf(const std::string& id, size_t partition) {
  return id + ":" + std::to_string(partition);
}

// Partition-Key first; else the idempotency key, so a retry meets its first attempt.
uint64_t HttpPartitioner(const MessageEnvelope& e) {
  if (e.key) return HashKeyPartitioner(e);
  if (e.idempotency_key) {
    MessageEnvelope by_key;
    by_key.key = e.idempotency_key;
    return HashKeyPartitioner(by_key);
  }
  return 0;
}

}  // namespace

ChannelService::ChannelService(StreamRegistry registry, BlockingExecutor blocking)
    : registry_(std::move(registry)), blocking_(std::move(blocking)) {}

ChannelOptions ChannelService::Options() {
  ChannelOptions options;
  options.partition_key = HttpPartitioner;
  return options;
}

net::awaitable<HttpResponse> ChannelService::Handle(const Route& route, HttpRequest request) {
  // Locals, not `this` or the parameters, in the lambda: GCC 12 mishandles lambda captures of
  // coroutine parameters.
  ChannelService* self = this;
  const Route* rt = &route;
  const HttpRequest* rq = &request;
  const std::function<HttpResponse()> handle = [self, rt, rq] { return self->HandleNow(*rt, *rq); };
  co_return co_await OnPool(blocking_, handle);
}

HttpResponse ChannelService::HandleNow(const Route& route, const HttpRequest& request) {
  Status valid = ValidateChannelId(route.name);
  if (!valid.ok()) return Error(valid);
  const std::string& method = request.method;
  // HEAD answers like GET on every route (the server writes no body for it).
  const bool get = method == "GET" || method == "HEAD";
  if (route.channel_key) {
    if (get) return Resolve(route.name, *route.channel_key);
  } else if (route.channel_partition) {
    if (get) return ReadPartition(route.name, *route.channel_partition, request);
  } else if (method == "PUT") {
    return Create(route.name, request);
  } else if (get) {
    return Describe(route.name);
  } else if (method == "POST") {
    return Publish(route.name, request);
  }
  HttpResponse r = Error(Status::InvalidArgument("method " + method + " is not allowed here"));
  r.status = 405;
  r.Set("Allow",
        route.channel_key || route.channel_partition ? "GET, HEAD" : "GET, HEAD, POST, PUT");
  return r;
}

std::shared_ptr<ChannelService::Entry> ChannelService::EntryFor(const std::string& id) {
  MutexLock lock(mu_);
  auto& slot = channels_[id];
  if (!slot) slot = std::make_shared<Entry>();
  return slot;
}

Result<std::shared_ptr<ChannelService::Entry>> ChannelService::Find(const std::string& id) {
  std::shared_ptr<Entry> entry = EntryFor(id);
  MutexLock lock(entry->mu);
  if (!entry->channel) {
    auto count = DurableChannel::StoredPartitionCount(registry_, StreamScope::Global(), id);
    if (!count.ok()) {
      // kInvalidArgument: `<id>:0` is a plain stream, not a partition: no channel either.
      if (count.status().code() == StatusCode::kNotFound ||
          count.status().code() == StatusCode::kInvalidArgument) {
        // Forget the empty entry, so requests for made-up ids cannot grow the map. (Lock order:
        // an entry's mutex, then mu_; nothing takes them the other way round.)
        MutexLock map_lock(mu_);
        auto it = channels_.find(id);
        if (it != channels_.end() && it->second == entry) channels_.erase(it);
        return Status::NotFound("channel '" + id + "' does not exist");
      }
      return count.status();
    }
    auto opened = DurableChannel::Open(id, *count, registry_, Options());
    if (!opened.ok()) return opened.status();
    entry->channel.emplace(std::move(*opened));
  }
  return entry;
}

HttpResponse ChannelService::Create(const std::string& id, const HttpRequest& request) {
  auto text = request.Query("partitions");
  if (!text) text = request.Header("channel-partitions");
  if (!text) return Error(Status::InvalidArgument("give the partition count as ?partitions=N"));
  auto count = ParseCount(*text, kMaxPartitions);
  if (!count || *count == 0) {
    return Error(Status::InvalidArgument("partitions must be a whole number from 1 to " +
                                         std::to_string(kMaxPartitions)));
  }
  auto exists_with = [&id](size_t partitions) {
    return Error(Status::AlreadyExists("channel '" + id + "' exists with " +
                                       std::to_string(partitions) + " partitions"));
  };
  // Decided under the entry's lock, so two creates racing with different counts cannot both
  // succeed (the second finds the first's channel open here).
  std::shared_ptr<Entry> entry = EntryFor(id);
  MutexLock lock(entry->mu);
  {
    // A failed lookup may have dropped this entry from the map while we waited for it.
    MutexLock map_lock(mu_);
    auto& slot = channels_[id];
    if (!slot) slot = entry;
  }
  int status = 201;
  if (entry->channel) {
    if (entry->channel->PartitionCount() != *count) {
      return exists_with(entry->channel->PartitionCount());
    }
    status = 200;
  } else {
    auto existing = DurableChannel::StoredPartitionCount(registry_, StreamScope::Global(), id);
    if (existing.ok()) {
      if (*existing != *count) return exists_with(*existing);
      status = 200;
    } else if (existing.status().code() != StatusCode::kNotFound &&
               existing.status().code() != StatusCode::kInvalidArgument) {
      // kInvalidArgument: `<id>:0` is a plain stream; Open adopts it if it is empty, or refuses.
      return Error(existing.status());
    }
    auto opened = DurableChannel::Open(id, *count, registry_, Options());
    if (!opened.ok()) {
      // The count was validated above: a refusal of the arguments here is about what the store
      // holds (a partition tagged with another count by another node, a stream of a partition's
      // name that is not one): a conflict with existing state.
      if (opened.status().code() == StatusCode::kInvalidArgument) {
        return Error(Status::AlreadyExists(std::string(opened.status().message())));
      }
      return Error(opened.status());
    }
    entry->channel.emplace(std::move(*opened));
  }
  json body = {{"channel", id}, {"partitions", *count}};
  HttpResponse r = JsonResponse(status, body);
  r.Set("Location", "/v1/channels/" + id);
  return r;
}

HttpResponse ChannelService::Describe(const std::string& id) {
  auto entry = Find(id);
  if (!entry.ok()) return Error(entry.status());
  MutexLock lock((*entry)->mu);
  const DurableChannel& ch = *(*entry)->channel;
  json streams = json::array();
  json next = json::array();
  for (size_t p = 0; p < ch.PartitionCount(); ++p) {
    streams.push_back(ch.StreamKeyFor(p));
    next.push_back(ch.NextSequences()[p] + 1);
  }
  return JsonResponse(200, {{"channel", id},
                            {"partitions", ch.PartitionCount()},
                            {"streams", streams},
                            {"next_offsets", next}});
}

HttpResponse ChannelService::Publish(const std::string& id, const HttpRequest& request) {
  MessageEnvelope e;
  e.payload = request.body;
  e.timestamp_ms = registry_.clock().NowMs();
  if (auto v = request.Header("publisher-id")) e.publisher_id = std::string(*v);
  if (auto v = request.Header("idempotency-key")) {
    if (v->empty()) return Error(Status::InvalidArgument("Idempotency-Key must not be empty"));
    e.idempotency_key = std::string(*v);
  }
  if (auto v = request.Header("partition-key")) e.key = std::string(*v);
  auto entry = Find(id);
  if (!entry.ok()) return Error(entry.status());
  MutexLock lock((*entry)->mu);
  DurableChannel& ch = *(*entry)->channel;
  auto receipt = ch.PublishWithReceipt(e);
  if (!receipt.ok()) {
    // kOutcomeUnknown is a 504: the evidence stays with the channel, and the next publish
    // settles it first (U6).
    return Error(receipt.status());
  }
  json body = {{"partition", receipt->partition},
               {"offset", receipt->offset},
               {"stream", StreamOf(id, receipt->partition)},
               {"duplicate", receipt->duplicate}};
  return JsonResponse(receipt->duplicate ? 200 : 201, body);
}

HttpResponse ChannelService::Resolve(const std::string& id, const std::string& key) {
  if (key.empty()) return Error(Status::InvalidArgument("idempotency key must not be empty"));
  auto entry = Find(id);
  if (!entry.ok()) return Error(entry.status());
  MutexLock lock((*entry)->mu);
  DurableChannel& ch = *(*entry)->channel;
  auto resolution = ch.ResolveIdempotencyKey(key);
  if (!resolution.ok()) {
    // A failed read never establishes absence (I2): the caller learns only that we cannot tell.
    HttpResponse r = Error(Status::Unavailable(
        "cannot tell whether key '" + key + "' was committed: " + resolution.status().ToString()));
    r.Set("Retry-After", "1");
    return r;
  }
  if (!resolution->committed()) return JsonResponse(200, {{"state", "absent"}});
  return JsonResponse(200, {{"state", "committed"},
                            {"partition", resolution->partition},
                            {"offset", resolution->offset},
                            {"stream", StreamOf(id, resolution->partition)}});
}

HttpResponse ChannelService::ReadPartition(const std::string& id, const std::string& partition,
                                           const HttpRequest& request) {
  // Any index is well-formed; one past the channel's partitions is answered below with how
  // many it has.
  auto p = ParseCount(partition);
  if (!p) return Error(Status::InvalidArgument("partition must be a whole number"));
  uint64_t from = 1;
  if (auto v = request.Query("from")) {
    auto n = ParseCount(*v);
    if (!n) return Error(Status::InvalidArgument("from must be an offset (a whole number)"));
    from = std::max<uint64_t>(*n, 1);  // offsets start at 1: 0 reads from the first too
  }
  size_t limit = 100;
  if (auto v = request.Query("limit")) {
    auto n = ParseCount(*v);
    if (!n || *n == 0 || *n > StreamRegistry::kMaxReadLimit) {
      return Error(Status::InvalidArgument("limit must be from 1 to " +
                                           std::to_string(StreamRegistry::kMaxReadLimit)));
    }
    limit = *n;
  }
  auto count = DurableChannel::StoredPartitionCount(registry_, StreamScope::Global(), id);
  if (!count.ok()) {
    if (count.status().code() == StatusCode::kNotFound ||
        count.status().code() == StatusCode::kInvalidArgument) {
      return Error(Status::NotFound("channel '" + id + "' does not exist"));
    }
    return Error(count.status());
  }
  if (*p >= *count) {
    return Error(Status::NotFound("channel '" + id + "' has " + std::to_string(*count) +
                                  " partitions (0 to " + std::to_string(*count - 1) + ")"));
  }
  auto events = registry_.ReadSince(StreamScope::Global(), StreamOf(id, *p), from, limit);
  if (!events.ok()) return Error(events.status());
  json messages = json::array();
  uint64_t next = from;
  for (const StreamEvent& event : *events) {
    auto e = DecodeEnvelope(event.payload);
    if (!e.ok()) {
      return Error(e.status().Annotate("partition " + StreamOf(id, *p) + " offset " +
                                       std::to_string(event.offset)));
    }
    json m = {{"offset", event.offset},
              {"timestamp_ms", e->timestamp_ms},
              {"publisher_id", e->publisher_id}};
    if (e->key) m["key"] = *e->key;
    if (e->idempotency_key) m["idempotency_key"] = *e->idempotency_key;
    // JSON strings must be UTF-8; anything else travels as base64.
    if (IsValidUtf8(e->payload)) {
      m["payload"] = e->payload;
    } else {
      m["payload_base64"] = Base64Encode(e->payload);
    }
    messages.push_back(std::move(m));
    next = event.offset + 1;
  }
  return JsonResponse(200, {{"messages", messages}, {"next", next}});
}

}  // namespace runnel::server
