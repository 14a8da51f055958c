// WriteSync: a StreamService write (HandleWrite) waited for on the calling thread, for tests.
#ifndef RUNNEL_TESTS_SUPPORT_WRITE_SYNC_H_
#define RUNNEL_TESTS_SUPPORT_WRITE_SYNC_H_

#include <utility>

#include "server/stream_service.h"
#include "support/run_awaitable.h"

namespace runnel::testing {

inline server::HttpResponse WriteSync(server::StreamService& node, server::HttpRequest request) {
  const server::Route route = server::ParseRoute(request.path);
  return RunAwaitable(node.HandleWrite(route, std::move(request)));
}

}  // namespace runnel::testing

#endif  // RUNNEL_TESTS_SUPPORT_WRITE_SYNC_H_
