// GroupService: consumer groups over HTTP (a runnel extension; SEMANTICS C1-C9, P7-P9).
//
// URL design: the group endpoint of the stream at `/v1/<X>` is `/v1/groups/<X>`, e.g.
//   /v1/stream/orders            -> /v1/groups/stream/orders
//   /v1/tenants/acme/stream/a/b  -> /v1/groups/tenants/acme/stream/a/b
// so it never collides with a protocol stream name, and the scope is parsed exactly as for the
// stream itself. The operation is chosen by method and query:
//   GET  ...                      list groups: {"stream","tail","groups":[{"group","last_acked",
//                                 "lag","updated_at_ms"}]}, lag = max(0, tail - last_acked)
//   GET  ...?group=G[&limit=N]    read-next (catch-up): events after G's last acked offset
//                                 {"group","last_acked","events":[{"offset","appended_at_ms",
//                                 "data" | "data_base64"}],"next_ack"}
//   GET  ...?group=G&live=long-poll  "wait for work": the catch-up answer when there are events;
//                                 otherwise the server waits (its long-poll timeout) for an
//                                 append beyond the group's offset, then answers 200 with the
//                                 events, or 204 on timeout with the protocol's long-poll headers
//                                 (Stream-Next-Offset = the group's offset as a token,
//                                 Stream-Up-To-Date, Stream-Cursor; Stream-Closed instead of the
//                                 cursor on a closed stream). `cursor` is echoed as for streams.
//   GET  ...?group=G&live=sse     the protocol's SSE read (PROTOCOL.md 5.8) starting at the
//                                 group's offset: `data` events with the records after it,
//                                 `control` events with streamNextOffset, and so on.
// The waiting of both live forms lives in http_live.cc and is the stream reads' own machinery
// (the service answers with a ReadState positioned at the group's offset).
//   POST ...?group=G&ack=N        ack through N (monotonic): {"group","last_acked"} (stored value);
//                                 N may also be an offset token (a streamNextOffset of the SSE
//                                 form), meaning its position
//   POST ...?prune=N              consumer-aware prune through N: {"removed"}
//   DELETE ...?group=G            forgets the group: 204, or 404 when the stream has no such
//                                 group. It no longer pins prune or counts against the limit;
//                                 a later ack registers the name afresh at that offset
// Offsets are registry offsets: the k-th record ever appended has offset k, which is also the
// protocol position just after it, so "ack N" means "the first N records are done".
//
// Authorization: the caller's principal is checked against the stream's scope (Z1-Z4) before
// the stream is looked up, exactly as for the stream URL.
//
// Threads: Handle runs the request on the blocking pool the service is given, whose threads
// block on the store (the HTTP server's one pool for blocking store calls, server/await_call.h),
// and resumes the awaiting coroutine on its own executor; the io threads never call the
// registry's synchronous group functions. HandleNow runs on the caller's thread. Both may be
// called from any thread concurrently.
#ifndef RUNNEL_SERVER_GROUP_SERVICE_H_
#define RUNNEL_SERVER_GROUP_SERVICE_H_

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string_view>

#include "runnel/registry.h"
#include "server/await_call.h"
#include "server/http_types.h"
#include "server/stream_service.h"

namespace runnel::server {

// What a group request answers: a response, or for a live read-next that has to wait, where
// the wait starts.
struct GroupAnswer {
  HttpResponse response;
  // Set for live=sse, and for live=long-poll when there was nothing to read: a reader at the
  // group's offset (mode kLongPoll or kSse). `response` is then unused.
  std::optional<ReadState> live;
};

class GroupService {
 public:
  // The default of the most consumer groups one stream may have: an ack that would add one
  // more answers 429 resource_exhausted (each group is kept, and listed, until it is deleted
  // or the stream is).
  static constexpr size_t kDefaultMaxGroupsPerStream = 10000;

  // `streams` is not owned and must outlive this. Handle's work runs on `blocking`, whose pool
  // must outlive this and finish its queued jobs before this goes; null runs it on the awaiting
  // coroutine's thread.
  GroupService(StreamService* streams, BlockingExecutor blocking,
               size_t max_groups_per_stream = kDefaultMaxGroupsPerStream);
  GroupService(const GroupService&) = delete;
  GroupService& operator=(const GroupService&) = delete;

  // True for paths under /v1/groups/.
  static bool Matches(std::string_view path);
  // The stream route a group path addresses (kNotFound if none).
  static Route StreamRouteOf(std::string_view path);

  // Serves one request for `who` (already authenticated) on the blocking pool. Both must
  // outlive the awaitable (the awaiting coroutine's frame holds them).
  net::awaitable<GroupAnswer> Handle(const Principal& who, const HttpRequest& request);
  // The same on the caller's thread.
  GroupAnswer HandleNow(const Principal& who, const HttpRequest& request);

 private:
  // The response; sets answer->live for a live read-next that has to wait.
  HttpResponse HandleRequest(const Principal& who, const HttpRequest& request, GroupAnswer* answer);
  // A reader of the group's stream at registry offset `acked` (== protocol position).
  GroupAnswer LiveReader(const Route& route, const HttpRequest& request, LiveMode mode,
                         uint64_t acked);

  StreamService* const streams_;
  const size_t max_groups_per_stream_;
  const BlockingExecutor blocking_;
};

}  // namespace runnel::server

#endif  // RUNNEL_SERVER_GROUP_SERVICE_H_
