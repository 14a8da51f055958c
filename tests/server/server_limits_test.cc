// Limits and malformed input against an in-process server on a free loopback port, spoken to
// over plain sockets so the tests do not depend on an HTTP client library.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "server/http_server.h"
#include "server/metrics.h"
#include "support/loopback_socket.h"

namespace runnel::server {
namespace {

// One blocking loopback connection.
class Connection {
 public:
  explicit Connection(uint16_t port)
      : fd_(testing::ConnectLoopback(port, 10)), connected_(fd_ >= 0) {}
  ~Connection() {
    if (fd_ >= 0) ::close(fd_);
  }
  bool connected() const { return connected_; }

  bool Send(const std::string& data) { return testing::SendAll(fd_, data); }

  struct Response {
    int status = 0;
    std::string head;
    std::string body;
  };

  // Reads one response with a Content-Length body (or none for 204/304, or when `head`: the
  // answer to a HEAD request).
  Response Receive(bool head = false) {
    Response r;
    size_t header_end;
    while ((header_end = buffer_.find("\r\n\r\n")) == std::string::npos) {
      if (!Fill()) return r;
    }
    r.head = buffer_.substr(0, header_end);
    buffer_.erase(0, header_end + 4);
    if (r.head.size() > 12) r.status = std::stoi(r.head.substr(9, 3));
    size_t length = 0;
    std::string lower = r.head;
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    size_t cl = lower.find("content-length:");
    if (cl != std::string::npos && !head) length = std::stoul(lower.substr(cl + 15));
    while (buffer_.size() < length) {
      if (!Fill()) break;
    }
    r.body = buffer_.substr(0, length);
    buffer_.erase(0, std::min(length, buffer_.size()));
    return r;
  }

  // True once a read saw end-of-stream from the peer.
  bool PeerClosed() const { return peer_closed_; }

  Response Request(const std::string& data, bool head = false) {
    if (!Send(data)) return {};
    return Receive(head);
  }

 private:
  bool Fill() {
    char chunk[65536];
    ssize_t n = ::recv(fd_, chunk, sizeof(chunk), 0);
    if (n == 0) peer_closed_ = true;
    if (n <= 0) return false;
    buffer_.append(chunk, static_cast<size_t>(n));
    return true;
  }

  int fd_ = -1;
  bool connected_ = false;
  bool peer_closed_ = false;
  std::string buffer_;
};

class ServerLimitsTest : public ::testing::Test {
 protected:
  void StartServer(ServerOptions options) {
    options.host = "127.0.0.1";
    options.port = 0;
    options.threads = 2;
    if (options.service.long_poll_timeout_ms == StreamServiceOptions{}.long_poll_timeout_ms) {
      options.service.long_poll_timeout_ms = 200;
    }
    auto server = HttpServer::Start(StreamRegistry(), options);
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(*server);
    thread_ = std::thread([this] { server_->Run(); });
  }
  void TearDown() override {
    if (server_) {  // tests may stop and reset the server themselves
      server_->Stop();
      thread_.join();
    }
  }
  uint16_t port() const { return server_->port(); }

  // A request with a body: `extra` is more header lines, each ending in \r\n.
  static std::string WithBody(const std::string& method, const std::string& path,
                              const std::string& body, const std::string& extra,
                              const std::string& content_type) {
    return method + " " + path + " HTTP/1.1\r\nHost: x\r\nContent-Type: " + content_type + "\r\n" +
           extra + "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  }
  static std::string Put(const std::string& path, const std::string& body = "",
                         const std::string& extra = "",
                         const std::string& content_type = "text/plain") {
    return WithBody("PUT", path, body, extra, content_type);
  }
  static std::string Post(const std::string& path, const std::string& body,
                          const std::string& extra = "",
                          const std::string& content_type = "text/plain") {
    return WithBody("POST", path, body, extra, content_type);
  }
  static std::string Get(const std::string& target, const std::string& extra = "") {
    return "GET " + target + " HTTP/1.1\r\nHost: x\r\n" + extra + "\r\n";
  }

  std::unique_ptr<HttpServer> server_;
  std::thread thread_;
};

// The value of header `name` (as the server spells it) in a response head; "(none)" if absent.
std::string HeaderOf(const Connection::Response& r, const std::string& name) {
  const size_t at = r.head.find(name + ": ");
  if (at == std::string::npos) return "(none)";
  const size_t from = at + name.size() + 2;
  return r.head.substr(from, r.head.find("\r\n", from) - from);
}

void ExpectJsonError(const Connection::Response& r, std::string_view code) {
  auto body = nlohmann::json::parse(r.body, nullptr, false);
  ASSERT_TRUE(body.is_object()) << r.body;
  EXPECT_EQ(body["error"]["code"], code) << r.body;
  EXPECT_TRUE(body["error"]["message"].is_string());
}

// Polls /metrics (bounded) until the live-reader gauge shows `count`.
bool WaitForLiveReaders(uint16_t port, int count) {
  Connection probe(port);
  const std::string want = "runnel_live_readers " + std::to_string(count) + "\n";
  for (int i = 0; i < 1000; ++i) {
    Connection::Response r = probe.Request("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    if (r.body.find(want) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

TEST_F(ServerLimitsTest, HealthzAnswers200) {
  StartServer({});
  Connection c(port());
  ASSERT_TRUE(c.connected());
  EXPECT_EQ(c.Request(Get("/healthz")).status, 200);
}

// The built-in dashboard (dashboard.h): its three files, with a policy that allows only this
// origin, and clear errors for anything else.
TEST_F(ServerLimitsTest, DashboardServesItsFilesWithAContentSecurityPolicy) {
  StartServer({});
  Connection c(port());
  auto page = c.Request(Get("/"));
  EXPECT_EQ(page.status, 200);
  EXPECT_NE(page.head.find("Content-Type: text/html; charset=utf-8"), std::string::npos);
  EXPECT_NE(page.head.find("Content-Security-Policy: default-src 'none'; script-src 'self'"),
            std::string::npos);
  EXPECT_NE(page.head.find("X-Frame-Options: DENY"), std::string::npos);
  EXPECT_NE(page.body.find("<script src=\"/ui/app.js\"></script>"), std::string::npos);
  auto script = c.Request(Get("/ui/app.js"));
  EXPECT_EQ(script.status, 200);
  EXPECT_NE(script.head.find("Content-Type: text/javascript"), std::string::npos);
  EXPECT_NE(script.body.find("function parseMetrics"), std::string::npos);
  auto style = c.Request(Get("/ui/app.css"));
  EXPECT_EQ(style.status, 200);
  EXPECT_NE(style.head.find("Content-Type: text/css"), std::string::npos);
  // HEAD: the same head, no body.
  auto head = c.Request("HEAD / HTTP/1.1\r\nHost: x\r\n\r\n", /*head=*/true);
  EXPECT_EQ(head.status, 200);
  EXPECT_NE(head.head.find("Content-Length: " + std::to_string(page.body.size())),
            std::string::npos);
  auto missing = c.Request(Get("/ui/nothing.js"));
  EXPECT_EQ(missing.status, 404);
  ExpectJsonError(missing, "not_found");
  auto post = c.Request("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n");
  EXPECT_EQ(post.status, 400);
  EXPECT_NE(post.head.find("Allow: GET, HEAD"), std::string::npos);
  ExpectJsonError(post, "invalid_argument");
}

// A HEAD answer never carries a body, whatever the route or error: on a kept-alive connection
// a body would be read as the start of the next response. Its Content-Length is the GET's.
TEST_F(ServerLimitsTest, HeadAnswersNeverCarryABody) {
  StartServer({});
  Connection c(port());
  for (const char* target : {"/v1/streams", "/nowhere", "/v1/stream/%zz", "/v1/stream/missing",
                             "/healthz", "/ui/nothing.js"}) {
    auto r = c.Request(std::string("HEAD ") + target + " HTTP/1.1\r\nHost: x\r\n\r\n", true);
    EXPECT_NE(r.status, 0) << target;
    EXPECT_TRUE(r.body.empty()) << target;
    auto next = c.Request(Get("/healthz"));
    EXPECT_EQ(next.status, 200) << "after HEAD " << target;
    EXPECT_EQ(next.body, "ok\n") << "after HEAD " << target;
  }
  // HEAD mirrors GET on the listing too; other methods there are 405 with Allow.
  auto list_get = c.Request(Get("/v1/streams"));
  auto list_head = c.Request("HEAD /v1/streams HTTP/1.1\r\nHost: x\r\n\r\n", true);
  EXPECT_EQ(list_head.status, 200);
  EXPECT_NE(list_head.head.find("Content-Length: " + std::to_string(list_get.body.size())),
            std::string::npos)
      << list_head.head;
  auto list_post = c.Request("POST /v1/streams HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n");
  EXPECT_EQ(list_post.status, 405);
  EXPECT_NE(list_post.head.find("Allow: GET, HEAD"), std::string::npos) << list_post.head;
  for (const char* target : {"/ui/nothing.js", "/v1/stream/missing"}) {
    auto get = c.Request(Get(target));
    auto head = c.Request(std::string("HEAD ") + target + " HTTP/1.1\r\nHost: x\r\n\r\n", true);
    EXPECT_EQ(head.status, 404) << target;
    EXPECT_FALSE(get.body.empty()) << target;
    EXPECT_NE(head.head.find("Content-Length: " + std::to_string(get.body.size())),
              std::string::npos)
        << target << ": " << head.head;
  }
  // A stream's HEAD: its GET would carry records, so no Content-Length at all (RFC 9110 8.6).
  ASSERT_EQ(c.Request(Put("/v1/stream/s", "some records")).status, 201);
  auto head = c.Request("HEAD /v1/stream/s HTTP/1.1\r\nHost: x\r\n\r\n", true);
  EXPECT_EQ(head.status, 200);
  EXPECT_EQ(head.head.find("Content-Length"), std::string::npos) << head.head;
  EXPECT_EQ(c.Request(Get("/healthz")).body, "ok\n");
}

// Bad input never crashes the server: a JSON body nested 300,000 levels deep (nlohmann::json
// would overflow the stack writing it back out) is a 400 like any invalid JSON, and the
// server goes on serving; a body just within the limit is appended and read back.
TEST_F(ServerLimitsTest, DeeplyNestedJsonIsRefusedNotACrash) {
  StartServer({});
  Connection c(port());
  ASSERT_EQ(c.Request(Put("/v1/stream/j", "", "", "application/json")).status, 201);
  auto post = [&](const std::string& body) {
    return c.Request(Post("/v1/stream/j", body, "", "application/json"));
  };
  const size_t deep = 300000;
  auto r = post(std::string(deep, '[') + std::string(deep, ']'));
  EXPECT_EQ(r.status, 400);
  ExpectJsonError(r, "invalid_argument");
  EXPECT_NE(r.body.find("deeper than 512 levels"), std::string::npos) << r.body;
  r = post("[" + std::string(deep, '{') + "]");  // not even valid: still refused, not parsed
  EXPECT_EQ(r.status, 400);
  const std::string within = std::string(512, '[') + std::string(512, ']');
  EXPECT_EQ(post(within).status, 204);
  auto read = c.Request(Get("/v1/stream/j?offset=-1"));
  EXPECT_EQ(read.status, 200);
  EXPECT_EQ(read.body, "[" + within.substr(1, within.size() - 2) + "]")
      << "the outer array is flattened one level, the rest is kept";
  EXPECT_EQ(c.Request(Get("/healthz")).body, "ok\n");
}

// A fork copies its inherited records as one batch held in memory until it commits, so its size
// is bounded like a request body: past max_fork_bytes the fork is refused with 413 before the
// new stream exists; a fork at an earlier offset, within the bound, works.
TEST_F(ServerLimitsTest, ForksCopyingMoreThanTheLimitAreRefusedWith413) {
  ServerOptions options;
  options.service.max_fork_bytes = 1000;
  StartServer(options);
  Connection c(port());
  ASSERT_EQ(c.Request(Put("/v1/stream/src")).status, 201);
  for (int i = 0; i < 5; ++i) {
    const std::string body(300, static_cast<char>('a' + i));
    auto r = c.Request(Post("/v1/stream/src", body));
    ASSERT_EQ(r.status, 204);
  }
  auto big = c.Request(Put("/v1/stream/big", "", "Stream-Forked-From: /v1/stream/src\r\n"));
  EXPECT_EQ(big.status, 413);
  ExpectJsonError(big, "resource_exhausted");
  EXPECT_NE(big.body.find("--max-fork-bytes"), std::string::npos) << big.body;
  EXPECT_EQ(c.Request(Get("/v1/stream/big?offset=-1")).status, 404) << "no half-made fork";
  auto small = c.Request(Put("/v1/stream/small", "",
                             "Stream-Forked-From: /v1/stream/src\r\n"
                             "Stream-Fork-Offset: 0000000000000000_0000000000000003\r\n"));
  EXPECT_EQ(small.status, 201) << small.body;
  auto read = c.Request(Get("/v1/stream/small?offset=-1"));
  EXPECT_EQ(read.status, 200);
  EXPECT_EQ(read.body, std::string(300, 'a') + std::string(300, 'b') + std::string(300, 'c'));
}

// Deleting the last fork of a chain of soft-deleted forks collects the whole chain (iteratively:
// a chain may be long): every path is free again afterwards.
TEST_F(ServerLimitsTest, DeletingTheLastForkCollectsAChainOfSoftDeletedSources) {
  StartServer({});
  Connection c(port());
  const int kChain = 50;
  ASSERT_EQ(c.Request(Put("/v1/stream/f0", "base")).status, 201);
  for (int i = 1; i <= kChain; ++i) {
    auto r = c.Request(Put("/v1/stream/f" + std::to_string(i), "",
                           "Stream-Forked-From: /v1/stream/f" + std::to_string(i - 1) + "\r\n"));
    ASSERT_EQ(r.status, 201) << i << r.body;
  }
  auto del = [&](int i) {
    return c.Request("DELETE /v1/stream/f" + std::to_string(i) + " HTTP/1.1\r\nHost: x\r\n\r\n")
        .status;
  };
  for (int i = 0; i < kChain; ++i) ASSERT_EQ(del(i), 204) << i;
  // Soft-deleted sources still hold their paths while a fork needs them.
  EXPECT_EQ(c.Request(Put("/v1/stream/f0")).status, 409);
  EXPECT_EQ(c.Request(Get("/v1/stream/f" + std::to_string(kChain) + "?offset=-1")).body, "base");
  ASSERT_EQ(del(kChain), 204);
  for (int i = 0; i <= kChain; ++i) {
    EXPECT_EQ(c.Request(Put("/v1/stream/f" + std::to_string(i))).status, 201)
        << "f" << i << " was not collected";
  }
}

// Names and query values are text: a path or query that is not UTF-8 once percent-decoded is a
// 400 (it would reach JSON answers and subscription state altered, or make the serializer
// throw); a Stream-Seq that is not UTF-8 is refused rather than stored altered (a repeat would
// then pass the increasing-seq check and append twice).
TEST_F(ServerLimitsTest, BytesThatAreNotUtf8InNamesQueriesAndStreamSeqAreRefused) {
  StartServer({});
  Connection c(port());
  for (const char* target :
       {"/v1/stream/%FF", "/v1/stream/a%C0%AF", "/v1/tenants/t/stream/%ED%A0%80",
        "/v1/groups/stream/s?group=%FF", "/v1/streams?prefix=%FE"}) {
    auto r = c.Request(Put(target));
    EXPECT_EQ(r.status, 400) << target;
    ExpectJsonError(r, "invalid_argument");
    EXPECT_NE(r.body.find("UTF-8"), std::string::npos) << target << ": " << r.body;
  }
  ASSERT_EQ(c.Request(Put("/v1/stream/%E2%98%83")).status, 201) << "UTF-8 names are fine";
  ASSERT_EQ(c.Request(Put("/v1/stream/seq")).status, 201);
  auto post = [&](const std::string& seq) {
    return c.Request(Post("/v1/stream/seq", "A", "Stream-Seq: " + seq + "\r\n"));
  };
  auto bad = post("a\xff");
  EXPECT_EQ(bad.status, 400);
  EXPECT_NE(bad.body.find("Stream-Seq must be valid UTF-8"), std::string::npos) << bad.body;
  EXPECT_EQ(post("a1").status, 204);
  EXPECT_EQ(post("a1").status, 409);
  EXPECT_EQ(c.Request(Get("/v1/stream/seq?offset=-1")).body, "A");
}

// Group reads carry text records as JSON strings only when they are UTF-8; other bytes travel
// as data_base64, unchanged, instead of being replaced by U+FFFD.
TEST_F(ServerLimitsTest, GroupReadsCarryTextThatIsNotUtf8AsBase64) {
  StartServer({});
  Connection c(port());
  ASSERT_EQ(c.Request(Put("/v1/stream/t")).status, 201);
  const std::string bytes(
      "a\xff\xfe"
      "b",
      4);
  ASSERT_EQ(c.Request(Post("/v1/stream/t", bytes)).status, 204);
  ASSERT_EQ(c.Request(Post("/v1/stream/t", "ok")).status, 204);
  auto r = c.Request(Get("/v1/groups/stream/t?group=g"));
  ASSERT_EQ(r.status, 200) << r.body;
  auto body = nlohmann::json::parse(r.body);
  ASSERT_EQ(body["events"].size(), 2u) << r.body;
  EXPECT_EQ(body["events"][0]["data_base64"], "Yf/+Yg==") << r.body;
  EXPECT_FALSE(body["events"][0].contains("data"));
  EXPECT_EQ(body["events"][1]["data"], "ok");
}

// JSON-mode records keep the client's text (only whitespace between tokens goes): a stream read
// and a group read both return every digit of a large integer and the key order as sent.
TEST_F(ServerLimitsTest, JsonRecordsKeepTheClientsNumbersAndKeyOrder) {
  StartServer({});
  Connection c(port());
  ASSERT_EQ(c.Request(Put("/v1/stream/j", "", "", "application/json")).status, 201);
  const std::string body = R"([{"id": 12345678901234567890123, "b": 1, "a": 2}, -0, 1E2])";
  ASSERT_EQ(c.Request(Post("/v1/stream/j", body, "", "application/json")).status, 204);
  EXPECT_EQ(c.Request(Get("/v1/stream/j?offset=-1")).body,
            R"([{"id":12345678901234567890123,"b":1,"a":2},-0,1E2])");
  auto group = c.Request(Get("/v1/groups/stream/j?group=g"));
  ASSERT_EQ(group.status, 200);
  EXPECT_NE(group.body.find(R"("data":{"id":12345678901234567890123,"b":1,"a":2})"),
            std::string::npos)
      << group.body;
  EXPECT_NE(group.body.find(R"("data":-0,)"), std::string::npos) << group.body;
  auto parsed = nlohmann::json::parse(group.body, nullptr, false);
  ASSERT_TRUE(parsed.is_object()) << group.body;
  EXPECT_EQ(parsed["events"].size(), 3u);
  EXPECT_EQ(parsed["next_ack"], 3);
  EXPECT_EQ(parsed["group"], "g");
}

// The reserved __ds/ streams hold subscription state; they cannot be read directly, and so
// cannot be copied out through a fork either.
TEST_F(ServerLimitsTest, ReservedSubscriptionStreamsCannotBeForked) {
  StartServer({});
  Connection c(port());
  auto wake = c.Request(
      "PUT /v1/stream/wakes HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
      "Content-Length: 0\r\n\r\n");
  ASSERT_EQ(wake.status, 201);
  const std::string sub = R"({"type":"pull-wake","pattern":"e/*","wake_stream":"wakes"})";
  auto created = c.Request(
      "PUT /v1/stream/__ds/subscriptions/s1 HTTP/1.1\r\nHost: x\r\n"
      "Content-Type: application/json\r\nContent-Length: " +
      std::to_string(sub.size()) + "\r\n\r\n" + sub);
  ASSERT_EQ(created.status, 201) << created.body;
  for (const char* from : {"/v1/stream/__ds/subscriptions", "/v1/stream/__ds"}) {
    auto r = c.Request(
        "PUT /v1/stream/copy HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        "Stream-Forked-From: " +
        std::string(from) + "\r\nContent-Length: 0\r\n\r\n");
    EXPECT_EQ(r.status, 404) << from << ": " << r.body;
  }
  EXPECT_EQ(c.Request(Get("/v1/stream/copy?offset=-1")).status, 404);
}

// A request Beast cannot parse gets a 400 with the JSON error body before the connection closes,
// never a silent close; the server goes on serving others.
TEST_F(ServerLimitsTest, MalformedRequestsGetA400BeforeTheConnectionCloses) {
  StartServer({});
  for (const std::string& raw :
       {std::string("GET /healthz HTTP/1.1\r\nHost: x\r\nno colon here\r\n\r\n"),
        std::string("POST /v1/stream/s HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n"),
        std::string("POST /v1/stream/s HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n"
                    "Content-Length: 2\r\n\r\nab"),
        std::string("POST /v1/stream/s HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                    "\r\nzz\r\nab\r\n0\r\n\r\n")}) {
    Connection c(port());
    auto r = c.Request(raw);
    EXPECT_EQ(r.status, 400) << raw;
    ExpectJsonError(r, "invalid_argument");
    EXPECT_NE(r.body.find("malformed HTTP request"), std::string::npos) << r.body;
  }
  Connection c(port());
  EXPECT_EQ(c.Request(Get("/healthz")).body, "ok\n");
}

// Stream-Expires-At must name a real instant: days past the end of the month and offsets past
// 23:59 are refused with 400, leap days are dates only in leap years.
TEST_F(ServerLimitsTest, ExpiresAtMustBeARealDate) {
  StartServer({});
  Connection c(port());
  int n = 0;
  auto put = [&](const std::string& when) {
    return c.Request(
        Put("/v1/stream/e" + std::to_string(n++), "", "Stream-Expires-At: " + when + "\r\n"));
  };
  for (const char* bad :
       {"2124-02-30T00:00:00Z", "2127-02-29T00:00:00Z", "2124-04-31T00:00:00Z",
        "2124-01-01T00:00:00+25:00", "2124-01-01T00:00:00+01:60", "2124-13-01T00:00:00Z"}) {
    auto r = put(bad);
    EXPECT_EQ(r.status, 400) << bad;
    ExpectJsonError(r, "invalid_argument");
  }
  for (const char* good :
       {"2128-02-29T00:00:00Z", "2124-12-31T23:59:59.999-23:59", "2124-04-30T00:00:00+05:30"}) {
    EXPECT_EQ(put(good).status, 201) << good;
  }
}

TEST_F(ServerLimitsTest, DashboardCanBeTurnedOff) {
  ServerOptions options;
  options.dashboard = false;
  StartServer(options);
  Connection c(port());
  for (const char* path : {"/", "/ui/app.js"}) {
    auto r = c.Request(Get(path));
    EXPECT_EQ(r.status, 404) << path;
    ExpectJsonError(r, "not_found");
  }
  EXPECT_EQ(c.Request(Get("/healthz")).status, 200);
}

TEST_F(ServerLimitsTest, MetricsCarryTheInfoGaugeWithTheDurabilityMode) {
  ServerOptions options;
  options.info = {{"version", "9.9.9"}, {"store", "memory"}};
  StartServer(options);
  Connection c(port());
  auto r = c.Request(Get("/metrics"));
  EXPECT_EQ(r.status, 200);
  // The memory store's durability sentence starts with its mode, like every store's.
  EXPECT_NE(r.body.find(
                "runnel_info{version=\"9.9.9\",store=\"memory\",durability=\"process-local\"} 1\n"),
            std::string::npos)
      << r.body;
}

TEST(RenderInfoTest, EscapesLabelValuesAndKeepsTheModeOnly) {
  EXPECT_EQ(RenderInfo({{"store", "a\"b\\c\nd"}},
                       "interval:5: acknowledged appends survive a process crash"),
            "# HELP runnel_info The server's version, store and durability mode, as labels.\n"
            "# TYPE runnel_info gauge\n"
            "runnel_info{store=\"a\\\"b\\\\c\\nd\",durability=\"interval:5\"} 1\n");
  EXPECT_NE(RenderInfo({}, "fsync").find("runnel_info{durability=\"fsync\"} 1\n"),
            std::string::npos);
}

TEST_F(ServerLimitsTest, OversizedBodyGets413WithJsonError) {
  ServerOptions options;
  options.max_body_bytes = 1024;
  StartServer(options);
  Connection c(port());
  auto r = c.Request(Put("/v1/stream/big", std::string(4096, 'x')));
  EXPECT_EQ(r.status, 413);
  ExpectJsonError(r, "resource_exhausted");
}

// A JSON array of more messages than one append may carry is refused whole with 413.
TEST_F(ServerLimitsTest, AJsonArrayOfTooManyMessagesGets413) {
  ServerOptions options;
  options.service.max_append_messages = 1000;
  StartServer(options);
  Connection c(port());
  ASSERT_EQ(c.Request(Put("/v1/stream/j", "", "", "application/json")).status, 201);
  auto array_of = [](int n) {
    std::string body = "[";
    for (int i = 0; i < n; ++i) body += (i ? ",1" : "1");
    return body + "]";
  };
  auto r = c.Request(Post("/v1/stream/j", array_of(1001), "", "application/json"));
  EXPECT_EQ(r.status, 413);
  ExpectJsonError(r, "resource_exhausted");
  auto create = c.Request(Put("/v1/stream/k", array_of(1001), "", "application/json"));
  EXPECT_EQ(create.status, 413);
  EXPECT_EQ(c.Request(Get("/v1/stream/k")).status, 404);  // not created
  EXPECT_EQ(c.Request(Post("/v1/stream/j", array_of(1000), "", "application/json")).status, 204);
  auto head = c.Request("HEAD /v1/stream/j HTTP/1.1\r\nHost: x\r\n\r\n", /*head=*/true);
  EXPECT_EQ(HeaderOf(head, "Stream-Next-Offset"), "0000000000000000_0000000000001000");
}

TEST_F(ServerLimitsTest, OversizedChunkedBodyGets413) {
  ServerOptions options;
  options.max_body_bytes = 1024;
  StartServer(options);
  Connection c(port());
  std::string chunk(800, 'y');
  std::string request =
      "POST /v1/stream/s HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\n"
      "Transfer-Encoding: chunked\r\n\r\n";
  for (int i = 0; i < 3; ++i) request += "320\r\n" + chunk + "\r\n";
  request += "0\r\n\r\n";
  EXPECT_EQ(c.Request(request).status, 413);
}

TEST_F(ServerLimitsTest, OversizedHeadersGet431) {
  ServerOptions options;
  options.max_header_bytes = 1024;
  StartServer(options);
  Connection c(port());
  auto r = c.Request(Get("/healthz", "X-Filler: " + std::string(4096, 'h') + "\r\n"));
  EXPECT_EQ(r.status, 431);
}

TEST_F(ServerLimitsTest, OverlongUrlGets414) {
  ServerOptions options;
  options.max_url_bytes = 256;
  StartServer(options);
  Connection c(port());
  EXPECT_EQ(c.Request(Get("/v1/stream/" + std::string(1000, 'u'))).status, 414);
}

// A URL too long for the header block is still a long URL: 414, not 431.
TEST_F(ServerLimitsTest, UrlLongerThanTheHeaderLimitGets414) {
  StartServer({});  // 16 KiB of header, 8 KiB of URL
  Connection c(port());
  auto r = c.Request(Get("/v1/stream/" + std::string(20000, 'u')));
  EXPECT_EQ(r.status, 414);
  ExpectJsonError(r, "resource_exhausted");
  // A short URL followed by one long header field is a header problem.
  Connection d(port());
  EXPECT_EQ(d.Request(Get("/healthz", "X-Big: " + std::string(20000, 'h') + "\r\n")).status, 431);
}

// The head of a chunked POST, for the chunk framing tests.
std::string ChunkedPost(const std::string& path) {
  return "POST " + path +
         " HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\n"
         "Transfer-Encoding: chunked\r\n\r\n";
}

// One chunk-size line with an endless extension: refused once it passes what the read buffer
// holds, long before the request timeout, so a client cannot make the server buffer it.
TEST_F(ServerLimitsTest, AnEndlessChunkExtensionGets431AtOnce) {
  ServerOptions options;
  options.request_timeout_ms = 20000;
  StartServer(options);
  Connection setup(port());
  ASSERT_EQ(setup.Request(Put("/v1/stream/s")).status, 201);
  Connection c(port());
  const auto started = std::chrono::steady_clock::now();
  // 1 MiB of extension and no end of line: the server answers, then drains what follows.
  c.Send(ChunkedPost("/v1/stream/s") + "3;x=" + std::string(1u << 20, 'e'));
  auto r = c.Receive();
  EXPECT_EQ(r.status, 431);
  ExpectJsonError(r, "resource_exhausted");
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(10));
  EXPECT_EQ(setup.Request(Get("/v1/stream/s?offset=-1")).body, "");
}

// Extensions spread over many chunks count together, with the trailer fields, against the
// header limit.
TEST_F(ServerLimitsTest, ChunkExtensionsAndTrailersCountAgainstTheHeaderLimit) {
  ServerOptions options;
  options.max_header_bytes = 4096;
  StartServer(options);
  Connection setup(port());
  ASSERT_EQ(setup.Request(Put("/v1/stream/s")).status, 201);
  {
    Connection c(port());
    std::string request = ChunkedPost("/v1/stream/s");
    for (int i = 0; i < 8; ++i) request += "1;ext=" + std::string(1000, 'e') + "\r\nx\r\n";
    request += "0\r\n\r\n";
    auto r = c.Request(request);
    EXPECT_EQ(r.status, 431);
    ExpectJsonError(r, "resource_exhausted");
  }
  {
    Connection c(port());
    std::string request = ChunkedPost("/v1/stream/s") + "1\r\nx\r\n0\r\n";
    for (int i = 0; i < 8; ++i)
      request += "X-Trailer-" + std::to_string(i) + ": " + std::string(1000, 't') + "\r\n";
    request += "\r\n";
    auto r = c.Request(request);
    EXPECT_EQ(r.status, 431);
  }
  // Nothing of either request was appended.
  EXPECT_EQ(setup.Request(Get("/v1/stream/s?offset=-1")).body, "");
}

// A small trailer is accepted and ignored: a trailer field never acts as a header field.
TEST_F(ServerLimitsTest, TrailerFieldsAreNotTakenAsHeaders) {
  StartServer({});
  Connection c(port());
  ASSERT_EQ(c.Request(Put("/v1/stream/t")).status, 201);
  auto r = c.Request(ChunkedPost("/v1/stream/t") + "2\r\nab\r\n0\r\nStream-Closed: true\r\n\r\n");
  EXPECT_EQ(r.status, 204);
  EXPECT_EQ(HeaderOf(r, "Stream-Closed"), "(none)");
  EXPECT_EQ(c.Request(Post("/v1/stream/t", "cd")).status, 204);  // still open
  EXPECT_EQ(c.Request(Get("/v1/stream/t?offset=-1")).body, "abcd");
}

// Chunks of one byte cost five bytes of framing each: a body made of them passes the framing
// allowance (max_header_bytes + max_body_bytes / 8) long before the body limit.
TEST_F(ServerLimitsTest, TinyChunksPassTheFramingAllowanceAndGet431) {
  ServerOptions options;
  options.max_header_bytes = 1024;
  options.max_body_bytes = 8192;  // allowance: 1024 + 1024 bytes of framing
  StartServer(options);
  Connection setup(port());
  ASSERT_EQ(setup.Request(Put("/v1/stream/s")).status, 201);
  {
    Connection c(port());
    std::string request = ChunkedPost("/v1/stream/s");
    for (int i = 0; i < 600; ++i) request += "1\r\nx\r\n";  // 600 bytes of data, 3000 of framing
    request += "0\r\n\r\n";
    auto r = c.Request(request);
    EXPECT_EQ(r.status, 431);
    ExpectJsonError(r, "resource_exhausted");
  }
  // Chunks of 64 bytes up to the body limit fit the allowance.
  Connection c(port());
  std::string request = ChunkedPost("/v1/stream/s");
  for (int i = 0; i < 128; ++i) request += "40\r\n" + std::string(64, 'y') + "\r\n";
  request += "0\r\n\r\n";
  EXPECT_EQ(c.Request(request).status, 204);
  EXPECT_EQ(c.Request(Get("/v1/stream/s?offset=-1")).body.size(), 8192u);
}

// The request timeout covers the head: a client that sends its header one byte at a time is
// cut off after request_timeout_ms, not after the (longer) idle timeout.
TEST_F(ServerLimitsTest, TheRequestTimeoutCoversTheHead) {
  ServerOptions options;
  options.idle_timeout_ms = 60000;
  options.request_timeout_ms = 500;
  StartServer(options);
  Connection c(port());
  const std::string head = "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ";
  const auto started = std::chrono::steady_clock::now();
  bool cut_off = false;
  for (size_t i = 0; i < 200 && !cut_off; ++i) {  // at most 200 x 50 ms
    cut_off = !c.Send(std::string(1, i < head.size() ? head[i] : 's'));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (!cut_off) c.Receive();  // the server's close shows as end of stream
  EXPECT_TRUE(cut_off || c.PeerClosed());
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(9));
}

TEST_F(ServerLimitsTest, ConnectionsAboveTheCapGet503WithRetryAfter) {
  ServerOptions options;
  options.max_connections = 1;
  StartServer(options);
  Connection first(port());
  ASSERT_EQ(first.Request(Get("/healthz")).status, 200);  // first is now counted
  Connection second(port());
  auto r = second.Receive();
  EXPECT_EQ(r.status, 503);
  EXPECT_NE(r.head.find("Retry-After: 1"), std::string::npos);
  ExpectJsonError(r, "resource_exhausted");
}

// The cap counts sockets from accept: connections that never sent a byte count too.
TEST_F(ServerLimitsTest, IdleConnectionsCountAgainstTheCapFromAccept) {
  ServerOptions options;
  options.max_connections = 3;
  StartServer(options);
  Connection a(port()), b(port()), c(port());
  Connection probe(port());
  EXPECT_EQ(probe.Receive().status, 503);
  EXPECT_EQ(c.Request(Get("/healthz")).status, 200);
  EXPECT_TRUE(a.connected() && b.connected());
}

TEST_F(ServerLimitsTest, SetMaxConnectionsChangesTheCapOfARunningServer) {
  StartServer({});
  Connection first(port());
  ASSERT_EQ(first.Request(Get("/healthz")).status, 200);
  server_->SetMaxConnections(1);
  Connection second(port());
  auto r = second.Receive();
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(HeaderOf(r, "Retry-After"), "1");
  // The refusal is counted once its write has completed, which the client may see first.
  std::string metrics;
  for (int i = 0; i < 250; ++i) {  // at most 5 s
    metrics = first.Request(Get("/metrics")).body;
    if (metrics.find("runnel_connections_refused_total{answer=\"503\"} 1\n") != std::string::npos) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_NE(metrics.find("runnel_connections_refused_total{answer=\"503\"} 1\n"), std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("runnel_max_connections 1\n"), std::string::npos) << metrics;
  server_->SetMaxConnections(2);
  Connection third(port());
  EXPECT_EQ(third.Request(Get("/healthz")).status, 200);
}

// With no reject slot left, a connection beyond the cap is closed at once, unanswered: it holds
// no descriptor while a 503 is written, and its client sees the close instead of waiting.
TEST_F(ServerLimitsTest, BeyondTheRejectSlotsAConnectionIsClosedUnanswered) {
  ServerOptions options;
  options.max_connections = 1;
  options.reject_slots = 0;
  StartServer(options);
  Connection first(port());
  ASSERT_EQ(first.Request(Get("/healthz")).status, 200);
  Connection second(port());
  auto r = second.Receive();
  EXPECT_EQ(r.status, 0);
  EXPECT_TRUE(second.PeerClosed());
  auto metrics = first.Request(Get("/metrics")).body;
  EXPECT_NE(metrics.find("runnel_connections_refused_total{answer=\"none\"} 1\n"),
            std::string::npos)
      << metrics;
}

TEST_F(ServerLimitsTest, MalformedRequestsGet4xxJsonErrors) {
  StartServer({});
  Connection c(port());
  ASSERT_EQ(c.Request(Put("/v1/stream/s", "abc")).status, 201);
  auto bad_offset = c.Request(Get("/v1/stream/s?offset=0,1"));
  EXPECT_EQ(bad_offset.status, 400);
  ExpectJsonError(bad_offset, "invalid_argument");
  auto bad_live = c.Request(Get("/v1/stream/s?offset=-1&live=forever"));
  EXPECT_EQ(bad_live.status, 400);
  auto bad_escape = c.Request(Get("/v1/stream/s?offset=%zz"));
  EXPECT_EQ(bad_escape.status, 400);
  ExpectJsonError(bad_escape, "invalid_argument");
  auto missing = c.Request(Get("/v1/stream/nope"));
  EXPECT_EQ(missing.status, 404);
  ExpectJsonError(missing, "not_found");
  auto no_route = c.Request(Get("/nowhere"));
  EXPECT_EQ(no_route.status, 404);
  auto bad_ttl = c.Request(Put("/v1/stream/t", "", "Stream-TTL: 1.5\r\n"));
  EXPECT_EQ(bad_ttl.status, 400);
  auto method = c.Request("TRACE /v1/stream/s HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n");
  EXPECT_EQ(method.status, 405);
}

TEST_F(ServerLimitsTest, GarbageRequestLineGetsA400AndTheConnectionClosesWithoutCrashing) {
  StartServer({});
  {
    Connection c(port());
    c.Send("\x01\x02 not http at all\r\n\r\n");
    auto r = c.Receive();
    EXPECT_EQ(r.status, 400);
    ExpectJsonError(r, "invalid_argument");
    EXPECT_EQ(c.Receive().status, 0) << "the connection is closed after the 400";
  }
  Connection again(port());
  EXPECT_EQ(again.Request(Get("/healthz")).status, 200);
}

TEST_F(ServerLimitsTest, CatchUpReadReturnsAppendedBytes) {
  StartServer({});
  Connection c(port());
  ASSERT_EQ(c.Request(Put("/v1/stream/data", "hello")).status, 201);
  ASSERT_EQ(c.Request(Post("/v1/stream/data", " world")).status, 204);
  auto r = c.Request(Get("/v1/stream/data"));
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "hello world");
  EXPECT_NE(r.head.find("Stream-Next-Offset: 0000000000000000_0000000000000002"),
            std::string::npos);
}

TEST_F(ServerLimitsTest, ExpectContinueGets100BeforeTheBody) {
  StartServer({});
  Connection c(port());
  ASSERT_TRUE(
      c.Send("PUT /v1/stream/e HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\n"
             "Expect: 100-continue\r\nContent-Length: 5\r\n\r\n"));
  EXPECT_EQ(c.Receive().status, 100);
  ASSERT_TRUE(c.Send("hello"));
  EXPECT_EQ(c.Receive().status, 201);
  EXPECT_EQ(c.Request(Get("/v1/stream/e")).body, "hello");
}

TEST_F(ServerLimitsTest, IdleKeepAliveConnectionIsClosedByTheServer) {
  ServerOptions options;
  options.idle_timeout_ms = 100;
  StartServer(options);
  Connection c(port());
  ASSERT_EQ(c.Request(Get("/healthz")).status, 200);
  // The next read ends with the server closing the connection (EOF), not with our own 10 s
  // receive timeout.
  auto r = c.Receive();
  EXPECT_EQ(r.status, 0);
  EXPECT_TRUE(c.PeerClosed());
}

// The idle timeout counts from the start of each wait between requests, not from the first:
// a connection that keeps asking, each time within the timeout, stays open well past it.
TEST_F(ServerLimitsTest, IdleTimeoutCountsFromTheLastRequest) {
  ServerOptions options;
  options.idle_timeout_ms = 300;
  StartServer(options);
  Connection c(port());
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 8; ++i) {  // about 800 ms in all, 100 ms between requests
    ASSERT_EQ(c.Request(Get("/healthz")).status, 200) << "request " << i;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_GT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(700));
  ASSERT_EQ(c.Request(Get("/healthz")).status, 200);
  // Then idle: the server closes it.
  auto r = c.Receive();
  EXPECT_EQ(r.status, 0);
  EXPECT_TRUE(c.PeerClosed());
}

TEST_F(ServerLimitsTest, StopEndsLiveReadersCleanly) {
  ServerOptions options;
  options.service.long_poll_timeout_ms = 600000;  // only Stop() can end the poll
  StartServer(options);
  Connection setup(port());
  ASSERT_EQ(setup.Request(Put("/v1/stream/live")).status, 201);
  Connection poller(port());
  ASSERT_TRUE(poller.Send(Get("/v1/stream/live?offset=now&live=long-poll")));
  // Stop only once the long-poll is waiting (the live-reader gauge says so); bounded.
  ASSERT_TRUE(WaitForLiveReaders(port(), 1));
  server_->Stop();
  auto r = poller.Receive();
  EXPECT_EQ(r.status, 204);
  EXPECT_NE(r.head.find("Stream-Up-To-Date: true"), std::string::npos);
  thread_.join();
  server_.reset();
}

// Bodies parsed from what arrived with the head, bodies that arrive later in pieces, chunked
// bodies and pipelined requests: each request is answered once, in order, with its whole body.
TEST_F(ServerLimitsTest, PipelinedChunkedAndSplitBodiesAreReadWhole) {
  StartServer({});
  Connection c(port());
  auto post = [](const std::string& framing, const std::string& body) {
    return "POST /v1/stream/p HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\n" + framing +
           "\r\n" + body;
  };
  ASSERT_TRUE(c.Send(Put("/v1/stream/p") +
                     post("Transfer-Encoding: chunked\r\n", "3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n") +
                     post("Content-Length: 3\r\n", "fgh")));
  EXPECT_EQ(c.Receive().status, 201);
  EXPECT_EQ(c.Receive().status, 204);
  EXPECT_EQ(c.Receive().status, 204);
  // A body that arrives after its head, in pieces.
  ASSERT_TRUE(c.Send(post("Content-Length: 6\r\n", "ij")));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_TRUE(c.Send("klm"));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_TRUE(c.Send("n"));
  EXPECT_EQ(c.Receive().status, 204);
  Connection::Response r = c.Request(Get("/v1/stream/p?offset=-1"));
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "abcdefghijklmn");
}

// Location on a 201 is an absolute URL whatever the name holds: the path percent-encoded (a
// decoded '?', '#', '%', space or NUL never reaches the header raw), the host taken from Host
// only when that is a plain host[:port].
TEST_F(ServerLimitsTest, LocationIsAValidUrlForAnyName) {
  StartServer(ServerOptions{});
  Connection c(port());
  const std::pair<std::string, std::string> cases[] = {
      {"/v1/stream/q%3Fx", "http://x/v1/stream/q%3Fx"},
      {"/v1/stream/h%23x", "http://x/v1/stream/h%23x"},
      {"/v1/stream/pct%25x", "http://x/v1/stream/pct%25x"},
      {"/v1/stream/sp%20x/a%00b", "http://x/v1/stream/sp%20x/a%00b"},
      {"/v1/stream/caf%C3%A9", "http://x/v1/stream/caf%C3%A9"},
  };
  for (const auto& [target, want] : cases) {
    Connection::Response r = c.Request(Put(target));
    ASSERT_EQ(r.status, 201) << target;
    EXPECT_EQ(HeaderOf(r, "Location"), want) << target;
  }
  Connection::Response odd = c.Request(
      "PUT /v1/stream/h HTTP/1.1\r\nHost: evil.example/x?\r\nContent-Type: text/plain\r\n"
      "Content-Length: 0\r\n\r\n");
  ASSERT_EQ(odd.status, 201);
  EXPECT_EQ(HeaderOf(odd, "Location"), "http://localhost/v1/stream/h");
  Connection::Response v6 = c.Request(
      "PUT /v1/stream/v6 HTTP/1.1\r\nHost: [::1]:4437\r\nContent-Type: text/plain\r\n"
      "Content-Length: 0\r\n\r\n");
  ASSERT_EQ(v6.status, 201);
  EXPECT_EQ(HeaderOf(v6, "Location"), "http://[::1]:4437/v1/stream/v6");
}

// A plain append's remembered lookup must not outlive a channel adopting the (empty) stream as
// a partition: the next append is refused (409) instead of writing a row that is not an
// envelope into the channel (which then failed every read and publish with a corruption error).
TEST_F(ServerLimitsTest, AStreamAdoptedByAChannelRefusesPlainAppendsAtOnce) {
  StartServer(ServerOptions{});
  Connection c(port());
  ASSERT_EQ(c.Request(Put("/v1/stream/ad:1", "", "", "application/octet-stream")).status, 201);
  // Refused for its empty body, after the stream was looked up.
  EXPECT_EQ(c.Request(Post("/v1/stream/ad:1", "", "", "application/octet-stream")).status, 400);
  ASSERT_EQ(c.Request(Put("/v1/channels/ad?partitions=2")).status, 201);
  EXPECT_EQ(c.Request(Post("/v1/stream/ad:1", "junk", "", "application/octet-stream")).status, 409);
  Connection::Response part = c.Request(Get("/v1/channels/ad/partitions/1"));
  EXPECT_EQ(part.status, 200) << part.body;
  EXPECT_EQ(part.body, R"({"messages":[],"next":1})");
}

// RFC 9112 3.2: an HTTP/1.1 request without Host, or any request with two, is refused (400,
// connection closed) before it touches a stream; HTTP/1.0 may omit Host. An absolute-form
// target ("http://host/path") is accepted, and its authority stands in for Host.
TEST_F(ServerLimitsTest, HostIsRequiredOnceAndAbsoluteTargetsAreAccepted) {
  StartServer(ServerOptions{});
  Connection setup(port());
  ASSERT_EQ(setup.Request(Put("/v1/stream/h")).status, 201);
  const std::string append_no_host =
      "POST /v1/stream/h HTTP/1.1\r\nContent-Type: text/plain\r\nContent-Length: 1\r\n\r\nx";
  const std::string append_two_hosts =
      "POST /v1/stream/h HTTP/1.1\r\nHost: a\r\nHost: b\r\nContent-Type: text/plain\r\n"
      "Content-Length: 1\r\n\r\ny";
  for (const std::string& request : {append_no_host, append_two_hosts}) {
    Connection c(port());
    Connection::Response r = c.Request(request);
    EXPECT_EQ(r.status, 400) << request;
    ExpectJsonError(r, "invalid_argument");
    EXPECT_EQ(c.Receive().status, 0);  // the next read sees the server close the connection
    EXPECT_TRUE(c.PeerClosed()) << request;
  }
  EXPECT_EQ(setup.Request(Get("/v1/stream/h?offset=-1")).body, "");

  Connection c(port());
  EXPECT_EQ(c.Request("GET /healthz HTTP/1.0\r\n\r\n").status, 200);
  Connection absolute(port());
  Connection::Response created = absolute.Request(
      "PUT http://node.example:4437/v1/stream/abs HTTP/1.1\r\nHost: ignored\r\n"
      "Content-Type: text/plain\r\nContent-Length: 0\r\n\r\n");
  ASSERT_EQ(created.status, 201) << created.head;
  EXPECT_EQ(HeaderOf(created, "Location"), "http://node.example:4437/v1/stream/abs");
  EXPECT_EQ(absolute.Request(Post("http://node.example/v1/stream/abs", "z")).status, 204);
  EXPECT_EQ(setup.Request(Get("/v1/stream/abs?offset=-1")).body, "z");
}

// Only the chunked transfer coding is understood: a body in another coding would be stored
// undecoded (501), one whose last coding is not chunked cannot be framed (400); both close the
// connection and append nothing. "Chunked" in any case, with blanks, is fine.
TEST_F(ServerLimitsTest, TransferCodingsOtherThanChunkedAreRefused) {
  StartServer(ServerOptions{});
  Connection setup(port());
  ASSERT_EQ(setup.Request(Put("/v1/stream/t")).status, 201);
  auto post = [](const std::string& te, const std::string& framing) {
    return "POST /v1/stream/t HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\n"
           "Transfer-Encoding: " +
           te + "\r\n" + framing;
  };
  {
    Connection c(port());
    Connection::Response r = c.Request(post("gzip, chunked", "\r\n3\r\nabc\r\n0\r\n\r\n"));
    EXPECT_EQ(r.status, 501) << r.head;
    ExpectJsonError(r, "invalid_argument");
  }
  {
    Connection c(port());
    Connection::Response r = c.Request(post("identity", "Content-Length: 3\r\n\r\nxyz"));
    EXPECT_EQ(r.status, 400) << r.head;
  }
  {
    Connection c(port());
    EXPECT_EQ(c.Request(post(" Chunked ", "\r\n2\r\nok\r\n0\r\n\r\n")).status, 204);
  }
  Connection::Response read = setup.Request(Get("/v1/stream/t?offset=-1"));
  EXPECT_EQ(read.status, 200);
  EXPECT_EQ(read.body, "ok");
}

// /healthz and /metrics answer GET and HEAD; other methods get 405 with Allow.
TEST_F(ServerLimitsTest, HealthAndMetricsAnswerOnlyGetAndHead) {
  StartServer(ServerOptions{});
  Connection c(port());
  for (const std::string path : {"/healthz", "/metrics"}) {
    EXPECT_EQ(c.Request(Get(path)).status, 200) << path;
    for (const std::string method : {"POST", "PUT", "DELETE", "PATCH"}) {
      Connection::Response r = c.Request(WithBody(method, path, "x", "", "text/plain"));
      EXPECT_EQ(r.status, 405) << method << " " << path;
      EXPECT_NE(r.head.find("Allow: GET, HEAD"), std::string::npos) << r.head;
      ExpectJsonError(r, "invalid_argument");
    }
  }
}

// Stream-Closed is true or false (any case); another value is refused, not read as "open".
TEST_F(ServerLimitsTest, StreamClosedMustBeTrueOrFalse) {
  StartServer(ServerOptions{});
  Connection c(port());
  ASSERT_EQ(c.Request(Put("/v1/stream/c")).status, 201);
  for (const std::string value : {"yes", "1", "", "truee"}) {
    Connection::Response r =
        c.Request(Post("/v1/stream/c", "x", "Stream-Closed: " + value + "\r\n"));
    EXPECT_EQ(r.status, 400) << "'" << value << "'";
    ExpectJsonError(r, "invalid_argument");
  }
  EXPECT_EQ(c.Request(Put("/v1/stream/d", "", "Stream-Closed: yes\r\n")).status, 400);
  EXPECT_EQ(c.Request(Post("/v1/stream/c", "a", "Stream-Closed: False\r\n")).status, 204);
  EXPECT_EQ(c.Request(Post("/v1/stream/c", "b", "Stream-Closed: TRUE\r\n")).status, 204);
  Connection::Response read = c.Request(Get("/v1/stream/c?offset=-1"));
  EXPECT_EQ(read.body, "ab");
  EXPECT_NE(read.head.find("Stream-Closed: true"), std::string::npos) << read.head;
}

// If-None-Match matches weakly, in a list, and "*" (RFC 9110 13.1.2).
TEST_F(ServerLimitsTest, IfNoneMatchTakesListsWeakTagsAndStar) {
  StartServer(ServerOptions{});
  Connection c(port());
  ASSERT_EQ(c.Request(Put("/v1/stream/e", "abc")).status, 201);
  Connection::Response first = c.Request(Get("/v1/stream/e?offset=-1"));
  const std::string etag = HeaderOf(first, "ETag");
  ASSERT_NE(etag, "(none)") << first.head;
  for (const std::string& value :
       std::vector<std::string>{etag, "W/" + etag, "\"other\", " + etag, "*", " " + etag + " "}) {
    EXPECT_EQ(c.Request(Get("/v1/stream/e?offset=-1", "If-None-Match: " + value + "\r\n")).status,
              304)
        << value;
  }
  EXPECT_EQ(c.Request(Get("/v1/stream/e?offset=-1", "If-None-Match: \"other\"\r\n")).status, 200);
}

// A live reader that closes its connection is released at once, not at the end of its wait
// (ten minutes here) or at the next append.
TEST_F(ServerLimitsTest, LiveReadersThatHangUpAreReleasedAtOnce) {
  ServerOptions options;
  options.service.long_poll_timeout_ms = 600000;
  options.sse_max_duration_ms = 600000;
  StartServer(options);
  Connection setup(port());
  ASSERT_EQ(setup.Request(Put("/v1/stream/hang")).status, 201);
  auto sse = std::make_unique<Connection>(port());
  ASSERT_TRUE(sse->Send(Get("/v1/stream/hang?offset=now&live=sse")));
  auto poller = std::make_unique<Connection>(port());
  ASSERT_TRUE(poller->Send(Get("/v1/stream/hang?offset=now&live=long-poll")));
  ASSERT_TRUE(WaitForLiveReaders(port(), 2));
  sse.reset();
  poller.reset();
  EXPECT_TRUE(WaitForLiveReaders(port(), 0));
}

// An SSE reader that stops reading fills its socket, and the server waits in a write. When
// the reader then hangs up (here: shuts down its sending half) that write is cancelled at once,
// not left to the (here 60 s) write timeout; and a stop does not wait for such a writer either.
TEST_F(ServerLimitsTest, AnSseReaderStuckOnAFullSocketIsReleasedWhenItHangsUpOrTheServerStops) {
  ServerOptions options;
  options.request_timeout_ms = 60000;
  options.sse_max_duration_ms = 600000;
  StartServer(options);
  Connection setup(port());
  ASSERT_EQ(setup.Request(Put("/v1/stream/full")).status, 201);
  // Readers whose sockets take little and who never read.
  auto stuck_reader = [&] {
    const int fd = testing::ConnectLoopback(port(), 10, /*receive_buffer=*/4096);
    EXPECT_GE(fd, 0);
    EXPECT_TRUE(testing::SendAll(fd, Get("/v1/stream/full?offset=-1&live=sse")));
    return fd;
  };
  const int first = stuck_reader();
  const int second = stuck_reader();
  ASSERT_TRUE(WaitForLiveReaders(port(), 2));
  // 16 MiB of records: far more than the sockets' buffers hold.
  const std::string record(1u << 20, 'r');
  for (int i = 0; i < 16; ++i) {
    ASSERT_EQ(setup.Request(Post("/v1/stream/full", record)).status, 204);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the writes block
  ::shutdown(first, SHUT_WR);
  const auto hung_up = std::chrono::steady_clock::now();
  EXPECT_TRUE(WaitForLiveReaders(port(), 1));  // polls for at most about 5 s
  EXPECT_LT(std::chrono::steady_clock::now() - hung_up, std::chrono::seconds(10));
  const auto stopping = std::chrono::steady_clock::now();
  server_->Stop();
  thread_.join();
  server_.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - stopping, std::chrono::seconds(8));
  ::close(first);
  ::close(second);
}

// The hang-up watch of a long-poll ends with the poll: the keep-alive connection then serves
// its next request normally.
TEST_F(ServerLimitsTest, LongPollThatGetsRecordsKeepsItsConnectionUsable) {
  ServerOptions options;
  options.service.long_poll_timeout_ms = 600000;
  StartServer(options);
  Connection setup(port());
  ASSERT_EQ(setup.Request(Put("/v1/stream/poll")).status, 201);
  Connection poller(port());
  ASSERT_TRUE(poller.Send(Get("/v1/stream/poll?offset=now&live=long-poll")));
  ASSERT_TRUE(WaitForLiveReaders(port(), 1));
  ASSERT_EQ(setup.Request(Post("/v1/stream/poll", "hello")).status, 204);
  Connection::Response r = poller.Receive();
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "hello");
  r = poller.Request(Get("/v1/stream/poll?offset=-1"));
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "hello");
  EXPECT_TRUE(WaitForLiveReaders(port(), 0));
}

}  // namespace
}  // namespace runnel::server
