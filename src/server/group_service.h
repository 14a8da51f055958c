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
//   GET  ...?group=G&live=long-poll  the same, but with nothing to read it waits (the server's
//                                 long-poll timeout) for an append, then answers 200 with the
//                                 events or 204 on timeout (the wait lives in http_server.cc)
//   POST ...?group=G&ack=N        ack through N (monotonic): {"group","last_acked"} (stored value)
//   POST ...?prune=N              consumer-aware prune through N: {"removed"}
// Offsets are registry offsets: the k-th record ever appended has offset k, which is also the
// protocol position just after it, so "ack N" means "the first N records are done".
//
// Authorization: the caller's principal is checked against the stream's scope (Z1-Z4) before
// the stream is looked up, exactly as for the stream URL.
//
// Thread-safety: Handle may be called from any thread concurrently. Handle blocks on the store.
#ifndef RUNNEL_SERVER_GROUP_SERVICE_H_
#define RUNNEL_SERVER_GROUP_SERVICE_H_

#include <string_view>

#include "runnel/registry.h"
#include "server/http_types.h"
#include "server/stream_service.h"

namespace runnel::server {

class GroupService {
 public:
  // `streams` is not owned and must outlive this.
  explicit GroupService(StreamService* streams) : streams_(streams) {}

  // True for paths under /v1/groups/.
  static bool Matches(std::string_view path);
  // The stream route a group path addresses (kNotFound if none).
  static Route StreamRouteOf(std::string_view path);

  // Serves one request for `who` (already authenticated). `*empty_read` (optional) is set to
  // whether the answer is a successful read-next that found no events.
  HttpResponse Handle(const Principal& who, const HttpRequest& request, bool* empty_read = nullptr);
  // True for a read-next that asks to wait for work (`live=long-poll`).
  static bool WantsLongPoll(const HttpRequest& request);

 private:
  StreamService* const streams_;
};

}  // namespace runnel::server

#endif  // RUNNEL_SERVER_GROUP_SERVICE_H_
