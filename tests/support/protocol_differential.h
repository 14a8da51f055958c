// The protocol differential driver: random Durable Streams requests (creates with content
// types, initial bodies, closure and forks; appends with JSON bodies, Stream-Seq, idempotent
// producers, expected offsets and closes; deletes; catch-up reads; HEAD) and consumer-group
// requests (acks, read-next, listings, consumer-aware prunes), each sent to one node (the
// reference) and to one of several nodes that share a store, must get the same answers. The
// registries of all of them should share one manual clock, as answers carry times. Each node keeps
// its own caches (lookups, lanes, protocol metadata), which must never make it answer from a state
// another node has changed.
#ifndef RUNNEL_TESTS_SUPPORT_PROTOCOL_DIFFERENTIAL_H_
#define RUNNEL_TESTS_SUPPORT_PROTOCOL_DIFFERENTIAL_H_

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <random>
#include <string>
#include <vector>

#include "server/group_service.h"
#include "server/offset_token.h"
#include "server/stream_service.h"
#include "support/write_sync.h"

namespace runnel::testing {

using server::FormatOffset;
using server::GroupService;
using server::HttpRequest;
using server::HttpResponse;
using server::Route;
using server::StreamService;

// The answer as a client sees it, minus what depends on the moment (cursors).
inline std::string Show(const HttpResponse& r) {
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

// One node: a stream service and the consumer groups over it.
struct ProtocolNode {
  StreamService* streams;
  GroupService* groups;
};

inline HttpResponse Serve(StreamService& node, HttpRequest request) {
  const Route route = server::ParseRoute(request.path);
  if (request.method == "HEAD") return node.HandleHead(route, request);
  if (request.method == "GET") {
    HttpResponse error;
    auto state = node.BeginRead(route, request, &error);
    if (!state) return error;
    return node.ReadResponse(*state, node.Read(*state));
  }
  return WriteSync(node, std::move(request));
}

inline HttpResponse Serve(const ProtocolNode& node, HttpRequest request) {
  if (GroupService::Matches(request.path)) {
    return node.groups->HandleNow(Principal::Platform(), request).response;
  }
  return Serve(*node.streams, std::move(request));
}

// `steps` random requests from `seed`, each to `reference` and to one of `nodes`.
inline void RunProtocolDifferential(const ProtocolNode& reference,
                                    const std::vector<ProtocolNode>& nodes, uint32_t seed,
                                    int steps) {
  std::mt19937 rng(seed + 17);
  auto pick = [&rng](uint32_t n) { return rng() % n; };
  const std::vector<std::string> names = {"a", "b", "c"};
  const std::vector<std::string> types = {"text/plain", "application/json",
                                          "application/octet-stream"};
  const std::vector<std::string> json_bodies = {R"({"n":1})", "[1,2,3]", R"([{"a":[1]},"x"])",
                                                "[]",         "{oops",   "7"};
  for (int step = 0; step < steps; ++step) {
    SCOPED_TRACE("seed " + std::to_string(seed) + " step " + std::to_string(step));
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
    } else if (dice < 84) {
      // Consumer groups (never live: a live read-next waits in the HTTP server).
      request.path = "/v1/groups/stream/" + name;
      const std::string group = "g" + std::to_string(pick(2));
      const uint32_t op = pick(8);
      request.method = op < 4 ? "POST" : "GET";
      if (op < 3) {
        request.query.emplace("group", group);
        request.query.emplace("ack",
                              pick(3) == 0 ? FormatOffset(pick(12)) : std::to_string(pick(12)));
      } else if (op == 3) {
        request.query.emplace("prune", std::to_string(pick(12)));
      } else if (op < 7) {
        request.query.emplace("group", group);
        if (pick(2) == 0) request.query.emplace("limit", std::to_string(1 + pick(4)));
      }
    } else if (dice < 94) {
      request.method = "GET";
      const uint32_t from = pick(4);
      request.query.emplace("offset", from == 0   ? "-1"
                                      : from == 1 ? "now"
                                                  : FormatOffset(pick(10)));
    } else {
      request.method = "HEAD";
    }
    const ProtocolNode& node = nodes[pick(static_cast<uint32_t>(nodes.size()))];
    const HttpRequest copy = request;
    const std::string want = Show(Serve(reference, std::move(request)));
    ASSERT_EQ(want, Show(Serve(node, copy))) << copy.method << " " << copy.path;
  }
}

}  // namespace runnel::testing

#endif  // RUNNEL_TESTS_SUPPORT_PROTOCOL_DIFFERENTIAL_H_
