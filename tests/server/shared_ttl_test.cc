// A sliding Stream-TTL on a store shared by several nodes (PostgreSQL): each node sees only the
// accesses made through it, so the accesses are recorded in the stream's metadata (at most once
// per TTL/4 per node) and expiry is judged on every node's accesses. Two StreamServices over one
// store are two nodes. Real time: TTL 2 s, no grace, about 7 s per run.
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "runnel/registry.h"
#include "server/stream_service.h"
#include "support/forwarding_store.h"
#include "support/write_sync.h"

namespace runnel::server {
namespace {

// A memory store that says it is shared with other nodes, as the PostgreSQL store does.
class SharedMemoryStore : public testing::ForwardingStore {
 public:
  bool SharedWithOtherNodes() const override { return true; }
};

HttpRequest Request(const std::string& method, std::map<std::string, std::string> headers = {}) {
  HttpRequest request;
  request.method = method;
  request.path = "/v1/stream/ttl";
  request.headers.insert(headers.begin(), headers.end());
  return request;
}

int Head(StreamService& node) {
  HttpRequest request = Request("HEAD");
  return node.HandleHead(ParseRoute(request.path), request).status;
}

// A catch-up read: an access that renews the TTL.
bool Read(StreamService& node) {
  HttpRequest request = Request("GET");
  HttpResponse error;
  return node.BeginRead(ParseRoute(request.path), request, &error).has_value();
}

TEST(SharedTtlTest, AStreamReadThroughOneNodeDoesNotExpireOnAnother) {
  StreamRegistry registry(std::make_unique<SharedMemoryStore>());
  StreamServiceOptions options;
  options.ttl_grace_ms = 0;
  StreamService a(registry, options, nullptr);
  StreamService b(registry, options, nullptr);
  HttpRequest create = Request("PUT", {{"content-type", "text/plain"}, {"stream-ttl", "2"}});
  ASSERT_EQ(testing::WriteSync(a, std::move(create)).status, 201);
  ASSERT_EQ(Head(b), 200);

  // Reads through B only, for well past the TTL: A, which saw no access since the create, must
  // still find the stream alive (a HEAD renews nothing).
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(3500);
  while (std::chrono::steady_clock::now() < until) {
    ASSERT_TRUE(Read(b));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(Head(a), 200) << "node A expired a stream that node B kept reading";

  // Idle through every node: gone within TTL + TTL/4 (+ grace, here 0), on both.
  std::this_thread::sleep_for(std::chrono::milliseconds(3000));
  EXPECT_EQ(Head(a), 404);
  EXPECT_EQ(Head(b), 404);
}

}  // namespace
}  // namespace runnel::server
