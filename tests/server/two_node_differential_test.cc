// Two StreamService nodes over one store against one node over its own: the same random
// protocol requests (creates with content types, initial bodies, closure and forks; appends with
// JSON bodies, Stream-Seq, idempotent producers, expected offsets and closes; deletes; catch-up
// reads; HEAD), each sent to either of the two nodes, must get the same answers as from the
// single node. Each node keeps its own caches (lookups, lanes, protocol metadata), which must
// never make a node answer from a state another node has changed. The store is shared as a
// database is (see support/forwarding_store.h). RUNNEL_HTTP_DIFFERENTIAL_STEPS raises the
// default 400 requests per seed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "runnel/registry.h"
#include "runnel/store.h"
#include "server/offset_token.h"
#include "server/stream_service.h"
#include "support/forwarding_store.h"
#include "support/write_sync.h"

namespace runnel::server {
namespace {

// The answer as a client sees it, minus what depends on the moment (cursors).
std::string Show(const HttpResponse& r) {
  std::vector<std::string> headers;
  for (const auto& [name, value] : r.headers) {
    std::string lower = name;
    std::transform(lower.begin(), lower.end(), lower.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (lower == "stream-cursor") continue;
    headers.push_back(lower + ": " + value);
  }
  std::sort(headers.begin(), headers.end());
  std::string out = std::to_string(r.status) + "\n";
  for (const auto& h : headers) out += h + "\n";
  return out + r.body;
}

HttpResponse Serve(StreamService& node, HttpRequest request) {
  const Route route = ParseRoute(request.path);
  if (request.method == "HEAD") return node.HandleHead(route, request);
  if (request.method == "GET") {
    HttpResponse error;
    auto state = node.BeginRead(route, request, &error);
    if (!state) return error;
    return node.ReadResponse(*state, node.Read(*state));
  }
  return testing::WriteSync(node, std::move(request));
}

class TwoNodeDifferentialTest : public ::testing::TestWithParam<int> {};

TEST_P(TwoNodeDifferentialTest, TwoNodesOverOneStoreAnswerLikeOneNode) {
  const char* steps_env = std::getenv("RUNNEL_HTTP_DIFFERENTIAL_STEPS");
  const int steps = steps_env != nullptr ? std::atoi(steps_env) : 400;
  StreamServiceOptions options;
  options.long_poll_timeout_ms = 10;
  options.max_read_bytes = 2048;
  StreamService single(StreamRegistry(NewMemoryStore()), options, nullptr);
  std::shared_ptr<Store> shared = NewMemoryStore();
  StreamService node_a(StreamRegistry(std::make_unique<testing::ForwardingStore>(shared)), options,
                       nullptr);
  StreamService node_b(StreamRegistry(std::make_unique<testing::ForwardingStore>(shared)), options,
                       nullptr);

  std::mt19937 rng(static_cast<uint32_t>(GetParam()) + 17);
  auto pick = [&rng](uint32_t n) { return rng() % n; };
  const std::vector<std::string> names = {"a", "b", "c"};
  const std::vector<std::string> types = {"text/plain", "application/json",
                                          "application/octet-stream"};
  const std::vector<std::string> json_bodies = {R"({"n":1})", "[1,2,3]", R"([{"a":[1]},"x"])",
                                                "[]",         "{oops",   "7"};
  for (int step = 0; step < steps; ++step) {
    SCOPED_TRACE("seed " + std::to_string(GetParam()) + " step " + std::to_string(step));
    const size_t which = pick(names.size());
    const std::string& name = names[which];
    // Mostly the stream's own content type (names[i] goes with types[i]), now and then another.
    const std::string& type = types[pick(10) == 0 ? pick(types.size()) : which];
    HttpRequest request;
    request.path = "/v1/stream/" + name;
    const uint32_t dice = pick(100);
    if (dice < 20) {
      request.method = "PUT";
      request.headers["content-type"] = type;
      if (pick(8) == 0) request.headers["stream-closed"] = "true";
      if (pick(3) == 0) request.body = type == "application/json" ? "[1]" : "first";
      if (pick(4) == 0) {
        request.headers["stream-forked-from"] = "/v1/stream/" + names[pick(names.size())];
        if (pick(2) == 0) request.headers["stream-fork-offset"] = FormatOffset(pick(6));
      }
    } else if (dice < 70) {
      request.method = "POST";
      request.headers["content-type"] = type;
      request.body = type == "application/json" ? json_bodies[pick(json_bodies.size())]
                                                : "r" + std::to_string(step);
      if (pick(4) == 0) request.headers["stream-seq"] = "00" + std::to_string(pick(8));
      if (pick(4) == 0) {
        request.headers["producer-id"] = "p" + std::to_string(pick(2));
        request.headers["producer-epoch"] = std::to_string(pick(3));
        request.headers["producer-seq"] = std::to_string(pick(5));
      }
      if (pick(5) == 0) request.headers["stream-expected-offset"] = FormatOffset(pick(10));
      if (pick(40) == 0) request.headers["stream-closed"] = "true";
    } else if (dice < 73) {
      request.method = "DELETE";
    } else if (dice < 92) {
      request.method = "GET";
      const uint32_t from = pick(4);
      request.query.emplace("offset", from == 0   ? "-1"
                                      : from == 1 ? "now"
                                                  : FormatOffset(pick(10)));
    } else {
      request.method = "HEAD";
    }
    StreamService& node = pick(2) == 0 ? node_a : node_b;
    const HttpRequest copy = request;
    const std::string want = Show(Serve(single, std::move(request)));
    ASSERT_EQ(want, Show(Serve(node, copy))) << copy.method << " " << copy.path;
  }
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
