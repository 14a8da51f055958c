// WriteSync: a StreamService write (HandleWrite) waited for on the calling thread, for tests.
#ifndef RUNNEL_TESTS_SUPPORT_WRITE_SYNC_H_
#define RUNNEL_TESTS_SUPPORT_WRITE_SYNC_H_

#include <future>
#include <utility>

#include "server/stream_service.h"

namespace runnel::testing {

inline server::HttpResponse WriteSync(server::StreamService& node, server::HttpRequest request) {
  std::promise<server::HttpResponse> answered;
  auto future = answered.get_future();
  const server::Route route = server::ParseRoute(request.path);
  node.HandleWrite(route, std::move(request),
                   [&answered](server::HttpResponse r) { answered.set_value(std::move(r)); });
  return future.get();
}

}  // namespace runnel::testing

#endif  // RUNNEL_TESTS_SUPPORT_WRITE_SYNC_H_
