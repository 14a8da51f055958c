// ChannelService: partitioned durable channels (runnel/channel.h) over HTTP, a runnel extension.
//
//   PUT  /v1/channels/<id>?partitions=N   create (201), or confirm an existing channel with the
//                                         same count (200); another count is 409
//   GET  /v1/channels/<id> {"channel","partitions","streams":[...],"next_offsets":[...]} POST
//   /v1/channels/<id>                publish the body. Optional headers: Partition-Key (routes
//                                         by FNV-1a of the key; the key is stored as the record
//                                         key), Idempotency-Key, Publisher-Id. Answers
//                                         {"partition","offset","stream","duplicate"}: 201 for a
//                                         new row, 200 for a duplicate of an earlier publish
//   GET  /v1/channels/<id>/partitions/<p>?from=<offset>&limit=<n>
//                                         decoded messages of one partition, oldest first:
//                                         {"messages":[{"offset","key","idempotency_key",
//                                         "publisher_id","timestamp_ms","payload" (UTF-8 text) or
//                                         "payload_base64"}],"next":<offset to read from next>}
//   GET  /v1/channels/<id>/keys/<key>     the resolution of an idempotency key:
//                                         {"state":"committed","partition","offset","stream"} or
//                                         {"state":"absent"}; never "absent" on a failed read
//
// A publish whose outcome is unknown (the store gave no definite answer) is 504
// `outcome_unknown`: the row may or may not exist. Ask for the key's resolution, or publish again
// with the same Idempotency-Key; neither can duplicate it. Partitions are ordinary streams named
// `<id>:<i>`, readable with the protocol at /v1/stream/<id>:<i>; their records are envelopes in
// the format of docs/formats/envelope.md.
//
// Channel ids are 1-128 bytes of [A-Za-z0-9._-]. Without a Partition-Key, a publish with an
// Idempotency-Key is routed by that key (so a retry lands on the partition that holds the first
// attempt) and one with neither goes to partition 0.
//
// Thread-safety: Handle may be called from any thread. Each channel is one DurableChannel behind
// its own mutex: publishes to one channel are serialised, different channels run in parallel on
// the blocking pool the service is given (the HTTP server's one pool for blocking store calls),
// never on an io thread; the awaiting coroutine resumes on its own executor.
#ifndef RUNNEL_SERVER_CHANNEL_SERVICE_H_
#define RUNNEL_SERVER_CHANNEL_SERVICE_H_

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "base/mutex.h"
#include "runnel/channel.h"
#include "runnel/registry.h"
#include "server/await_call.h"
#include "server/http_types.h"

namespace runnel::server {

class ChannelService {
 public:
  // Limits of the API, each answered with a clear 400 when passed.
  static constexpr size_t kMaxPartitions = 1024;
  static constexpr size_t kMaxChannelIdBytes = 128;

  // Handle's work runs on `blocking` (server/await_call.h), whose pool must outlive this and
  // finish its queued jobs before this goes; null runs it on the awaiting coroutine's thread.
  ChannelService(StreamRegistry registry, BlockingExecutor blocking);
  ChannelService(const ChannelService&) = delete;
  ChannelService& operator=(const ChannelService&) = delete;

  // Serves a kChannel route on the blocking pool. `route` must outlive the awaitable (the
  // awaiting coroutine's frame holds it).
  net::awaitable<HttpResponse> Handle(const Route& route, HttpRequest request);

  // The synchronous form (runs on the caller's thread); for tests.
  HttpResponse HandleNow(const Route& route, const HttpRequest& request);

 private:
  struct Entry {
    Mutex mu;
    std::optional<DurableChannel> channel RUNNEL_GUARDED_BY(mu);
  };

  HttpResponse Create(const std::string& id, const HttpRequest& request);
  HttpResponse Describe(const std::string& id);
  HttpResponse Publish(const std::string& id, const HttpRequest& request);
  HttpResponse Resolve(const std::string& id, const std::string& key);
  HttpResponse ReadPartition(const std::string& id, const std::string& partition,
                             const HttpRequest& request);
  // The (possibly not yet opened) entry of `id`, created on first use.
  std::shared_ptr<Entry> EntryFor(const std::string& id);
  // The open channel `id`, opening it from its stored partition count on first use.
  Result<std::shared_ptr<Entry>> Find(const std::string& id);
  static ChannelOptions Options();

  StreamRegistry registry_;
  Mutex mu_;
  std::map<std::string, std::shared_ptr<Entry>> channels_ RUNNEL_GUARDED_BY(mu_);
  const BlockingExecutor blocking_;
};

}  // namespace runnel::server

#endif  // RUNNEL_SERVER_CHANNEL_SERVICE_H_
