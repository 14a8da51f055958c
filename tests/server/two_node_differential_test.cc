// Two StreamService nodes over one memory store against one node over its own, through the
// protocol differential driver (support/protocol_differential.h); the store is shared as a
// database is (support/forwarding_store.h). RUNNEL_HTTP_DIFFERENTIAL_STEPS raises the
// default 400 requests per seed.
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "runnel/clock.h"
#include "runnel/registry.h"
#include "runnel/store.h"
#include "server/group_service.h"
#include "server/stream_service.h"
#include "support/forwarding_store.h"
#include "support/protocol_differential.h"

namespace runnel::server {
namespace {

using testing::Serve;

class TwoNodeDifferentialTest : public ::testing::TestWithParam<int> {};

TEST_P(TwoNodeDifferentialTest, TwoNodesOverOneStoreAnswerLikeOneNode) {
  const char* steps_env = std::getenv("RUNNEL_HTTP_DIFFERENTIAL_STEPS");
  StreamServiceOptions options;
  options.long_poll_timeout_ms = 10;
  options.max_read_bytes = 2048;
  ManualClock clock(1'800'000'000'000);
  StreamService single(StreamRegistry(NewMemoryStore(), &clock), options, nullptr);
  std::shared_ptr<Store> shared = NewMemoryStore();
  StreamService node_a(StreamRegistry(std::make_unique<testing::ForwardingStore>(shared), &clock),
                       options, nullptr);
  StreamService node_b(StreamRegistry(std::make_unique<testing::ForwardingStore>(shared), &clock),
                       options, nullptr);
  GroupService single_groups(&single, nullptr);
  GroupService groups_a(&node_a, nullptr);
  GroupService groups_b(&node_b, nullptr);
  testing::RunProtocolDifferential(
      {&single, &single_groups}, {{&node_a, &groups_a}, {&node_b, &groups_b}},
      static_cast<uint32_t>(GetParam()), steps_env != nullptr ? std::atoi(steps_env) : 400);
}

// The sequence the random runs meet only now and then, spelled out: node A remembers its lookup
// of `s` from a plain append; node B deletes `s` and creates it again (a new stream under the
// same name); A's next plain append goes to the new stream, not to the one A remembers.
TEST(TwoNodeStreamsTest, AnAppendAfterAnotherNodeRecreatedTheStreamGoesToTheNewStream) {
  std::shared_ptr<Store> shared = NewMemoryStore();
  StreamService node_a(StreamRegistry(std::make_unique<testing::ForwardingStore>(shared)), {},
                       nullptr);
  StreamService node_b(StreamRegistry(std::make_unique<testing::ForwardingStore>(shared)), {},
                       nullptr);
  auto request = [](const std::string& method, const std::string& body) {
    HttpRequest r;
    r.method = method;
    r.path = "/v1/stream/s";
    r.headers["content-type"] = "text/plain";
    r.body = body;
    return r;
  };
  ASSERT_EQ(Serve(node_a, request("PUT", "")).status, 201);
  // The first append finds a stream that never held a record (not remembered); the second
  // remembers it.
  ASSERT_EQ(Serve(node_a, request("POST", "old")).status, 204);
  ASSERT_EQ(Serve(node_a, request("POST", "old")).status, 204);
  ASSERT_EQ(Serve(node_b, request("DELETE", "")).status, 204);
  ASSERT_EQ(Serve(node_b, request("PUT", "")).status, 201);
  ASSERT_EQ(Serve(node_a, request("POST", "new")).status, 204);
  HttpRequest read = request("GET", "");
  read.query.emplace("offset", "-1");
  EXPECT_EQ(Serve(node_b, read).body, "new");
}

INSTANTIATE_TEST_SUITE_P(Seeds, TwoNodeDifferentialTest, ::testing::Range(0, 4));

}  // namespace
}  // namespace runnel::server
