// Keyed compaction over the protocol (core/state_compaction.h through StreamService): the
// Stream-Compaction headers, refusal of messages that are not State Protocol messages, POST
// ?compact, 410 below the horizon, and compaction in the background.
#include <gtest/gtest.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "runnel/registry.h"
#include "runnel/store.h"
#include "server/http_types.h"
#include "server/stream_service.h"
#include "support/forwarding_store.h"
#include "support/protocol_differential.h"

namespace runnel::server {
namespace {

using json = nlohmann::json;
using testing::Serve;

// A store that cannot remove records from the middle of a stream.
class NoDropStore final : public testing::ForwardingStore {
 public:
  bool SupportsDropRecords() const override { return false; }
};

// The value of response header `name` (as the service sets it), or "" when absent.
std::string HeaderOf(const HttpResponse& r, const std::string& name) {
  for (const auto& [k, v] : r.headers) {
    if (k == name) return v;
  }
  return "";
}

std::string Change(const std::string& key, const std::string& op, int value) {
  json m = {{"type", "row"}, {"key", key}, {"headers", {{"operation", op}}}};
  if (op != "delete") m["value"] = value;
  return m.dump();
}

HttpRequest Put(const std::string& name, bool compaction, const std::string& tombstone_ms = "") {
  HttpRequest r;
  r.method = "PUT";
  r.path = "/v1/stream/" + name;
  r.headers["content-type"] = "application/json";
  if (compaction) r.headers["stream-compaction"] = "state";
  if (!tombstone_ms.empty()) r.headers["stream-compaction-tombstone-ms"] = tombstone_ms;
  return r;
}

HttpRequest Post(const std::string& name, const std::string& body) {
  HttpRequest r;
  r.method = "POST";
  r.path = "/v1/stream/" + name;
  r.headers["content-type"] = "application/json";
  r.body = body;
  return r;
}

HttpRequest Get(const std::string& name, const std::string& offset) {
  HttpRequest r;
  r.method = "GET";
  r.path = "/v1/stream/" + name;
  EXPECT_TRUE(ParseQuery("offset=" + offset, &r.query));
  return r;
}

HttpRequest Compact(const std::string& name) {
  HttpRequest r;
  r.method = "POST";
  r.path = "/v1/stream/" + name;
  EXPECT_TRUE(ParseQuery("compact", &r.query));
  return r;
}

class StateCompactionHttpTest : public ::testing::Test {
 protected:
  static StreamServiceOptions Options(double share) {
    StreamServiceOptions o;
    o.compaction_share = share;
    o.compaction_min_bytes = 1000;
    // Background compactions run inline, so the test sees them done when an append returns.
    o.blocking_executor = [](std::function<void()> fn) { fn(); };
    return o;
  }
  StreamService service_{StreamRegistry(NewMemoryStore()), Options(0), nullptr};
};

TEST_F(StateCompactionHttpTest, OptInIsReportedAndOnlyStateProtocolMessagesAreAccepted) {
  ASSERT_EQ(Serve(service_, Put("s", true, "5000")).status, 201);
  HttpRequest head;
  head.method = "HEAD";
  head.path = "/v1/stream/s";
  HttpResponse h = Serve(service_, head);
  EXPECT_EQ(HeaderOf(h, "Stream-Compaction"), "state");
  EXPECT_EQ(HeaderOf(h, "Stream-Compaction-Tombstone-Ms"), "5000");
  // The same configuration again is 200, another one 409.
  EXPECT_EQ(Serve(service_, Put("s", true, "5000")).status, 200);
  EXPECT_EQ(Serve(service_, Put("s", true)).status, 409);
  EXPECT_EQ(Serve(service_, Put("s", false)).status, 409);

  EXPECT_EQ(Serve(service_, Post("s", "[" + Change("a", "insert", 1) + "]")).status, 204);
  HttpResponse bad = Serve(service_, Post("s", "[" + Change("a", "update", 2) + R"(,{"n":1}])"));
  EXPECT_EQ(bad.status, 400);
  EXPECT_NE(bad.body.find("invalid_argument"), std::string::npos);
  EXPECT_NE(bad.body.find("message 2 is not a State Protocol message"), std::string::npos)
      << bad.body;
  // Nothing of the refused batch was written.
  EXPECT_EQ(Serve(service_, Get("s", "-1")).body, "[" + Change("a", "insert", 1) + "]");

  // Only JSON streams, only the value "state", and the tombstone time only with it.
  HttpRequest text = Put("t", true);
  text.headers["content-type"] = "text/plain";
  EXPECT_EQ(Serve(service_, text).status, 400);
  HttpRequest other = Put("u", false);
  other.headers["stream-compaction"] = "latest";
  EXPECT_EQ(Serve(service_, other).status, 400);
  EXPECT_EQ(Serve(service_, Put("v", false, "10")).status, 400);
  HttpRequest capped = Put("w", true);
  capped.headers["stream-retention-max-events"] = "10";
  EXPECT_EQ(Serve(service_, capped).status, 400);
  // A stream without compaction takes any JSON and cannot be compacted.
  ASSERT_EQ(Serve(service_, Put("plain", false)).status, 201);
  EXPECT_EQ(Serve(service_, Post("plain", R"({"n":1})")).status, 204);
  EXPECT_EQ(Serve(service_, Compact("plain")).status, 409);
}

TEST_F(StateCompactionHttpTest, ReadsBelowTheHorizonAreGoneAndFromTheBeginningFoldTheSame) {
  ASSERT_EQ(Serve(service_, Put("s", true, "0")).status, 201);
  HttpResponse first = Serve(service_, Post("s", "[" + Change("a", "insert", 1) + "]"));
  const std::string saved = HeaderOf(first, "Stream-Next-Offset");  // a reader stood here
  ASSERT_EQ(
      Serve(service_, Post("s", "[" + Change("b", "insert", 2) + "," + Change("b", "delete", 0) +
                                    "," + Change("a", "update", 3) + "]"))
          .status,
      204);
  HttpResponse compacted = Serve(service_, Compact("s"));
  ASSERT_EQ(compacted.status, 200) << compacted.body;
  json report = json::parse(compacted.body);
  EXPECT_EQ(report["dropped_records"], 3);
  EXPECT_EQ(report["dropped_tombstones"], 1);
  EXPECT_EQ(report["kept_records"], 1);

  // The reader at offset 1 would miss the delete of b at offset 3: 410.
  HttpResponse gone = Serve(service_, Get("s", saved));
  EXPECT_EQ(gone.status, 410);
  EXPECT_NE(gone.body.find("compaction horizon"), std::string::npos);
  // From the beginning: the one survivor, at its offset, and the reader stands at the tail.
  HttpResponse all = Serve(service_, Get("s", "-1"));
  EXPECT_EQ(all.status, 200);
  EXPECT_EQ(all.body, "[" + Change("a", "update", 3) + "]");
  EXPECT_EQ(HeaderOf(all, "Stream-Up-To-Date"), "true");
  EXPECT_EQ(HeaderOf(all, "Stream-Next-Offset"), FormatOffset(4));
  HttpRequest head;
  head.method = "HEAD";
  head.path = "/v1/stream/s";
  EXPECT_EQ(HeaderOf(Serve(service_, head), "Stream-Compaction-Horizon"), FormatOffset(3));
  // From the horizon on, reads work.
  EXPECT_EQ(Serve(service_, Get("s", FormatOffset(3))).status, 200);
  // A fork below the compaction point would not hold the state there; at the tail it does.
  HttpRequest fork = Put("f", false);
  fork.headers["stream-forked-from"] = "/v1/stream/s";
  fork.headers["stream-fork-offset"] = saved;
  EXPECT_EQ(Serve(service_, fork).status, 400);
  fork.headers.erase("stream-fork-offset");
  EXPECT_EQ(Serve(service_, fork).status, 201);
  EXPECT_EQ(Serve(service_, Get("f", "-1")).body, "[" + Change("a", "update", 3) + "]");
}

TEST_F(StateCompactionHttpTest, AStoreThatCannotDropRecordsRefusesCompactedStreams) {
  StreamService service(StreamRegistry(std::make_unique<NoDropStore>()), Options(0), nullptr);
  HttpResponse r = Serve(service, Put("s", true));
  EXPECT_EQ(r.status, 409);
  EXPECT_NE(r.body.find("not supported"), std::string::npos) << r.body;
}

TEST(StateCompactionBackgroundTest, StreamsAreCompactedOnceAppendsPassTheShare) {
  StreamServiceOptions o;
  o.compaction_share = 0.5;
  o.compaction_min_bytes = 1000;
  o.blocking_executor = [](std::function<void()> fn) { fn(); };
  StreamService service(StreamRegistry(NewMemoryStore()), o, nullptr);
  ASSERT_EQ(Serve(service, Put("s", true)).status, 201);
  // 500 updates of 5 rows: without compaction the stream would hold all 500.
  for (int i = 0; i < 500; ++i) {
    ASSERT_EQ(Serve(service, Post("s", Change("k" + std::to_string(i % 5), "update", i))).status,
              204);
  }
  auto info = service.registry().store().GetStream(StreamScope::Global().Label(), "s");
  ASSERT_TRUE(info.ok());
  EXPECT_LT(info->event_count, 100u);
  EXPECT_GE(info->event_count, 5u);
  // And with background compaction off, nothing is dropped.
  o.compaction_share = 0;
  StreamService off(StreamRegistry(NewMemoryStore()), o, nullptr);
  ASSERT_EQ(Serve(off, Put("s", true)).status, 201);
  for (int i = 0; i < 500; ++i) {
    ASSERT_EQ(Serve(off, Post("s", Change("k" + std::to_string(i % 5), "update", i))).status, 204);
  }
  EXPECT_EQ(off.registry().store().GetStream(StreamScope::Global().Label(), "s")->event_count,
            500u);
}

}  // namespace
}  // namespace runnel::server
