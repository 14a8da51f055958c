// Response compression: Accept-Encoding negotiation, the gzip and zstd codecs, and catch-up,
// long-poll and SSE reads against an in-process server, spoken to over plain sockets; every
// compressed body is decoded and compared with the identity answer.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cctype>
#include <memory>
#include <string>
#include <thread>

#include "server/content_coding.h"
#include "server/http_server.h"
#include "support/loopback_socket.h"

namespace runnel::server {
namespace {

TEST(NegotiateCodingTest, PicksTheBestAcceptedCodingByQValue) {
  EXPECT_EQ(NegotiateCoding(std::nullopt), ContentCoding::kIdentity);
  EXPECT_EQ(NegotiateCoding(""), ContentCoding::kIdentity);
  EXPECT_EQ(NegotiateCoding("gzip"), ContentCoding::kGzip);
  EXPECT_EQ(NegotiateCoding("GZip, deflate"), ContentCoding::kGzip);
  EXPECT_EQ(NegotiateCoding("x-gzip"), ContentCoding::kGzip);
  EXPECT_EQ(NegotiateCoding("deflate, br"), ContentCoding::kIdentity);
  // zstd is preferred on a tie, a higher q-value wins otherwise.
  EXPECT_EQ(NegotiateCoding("gzip, deflate, br, zstd"), ContentCoding::kZstd);
  EXPECT_EQ(NegotiateCoding("gzip;q=1.0, zstd;q=0.5"), ContentCoding::kGzip);
  EXPECT_EQ(NegotiateCoding("gzip;q=0.5, zstd ; q=0.8"), ContentCoding::kZstd);
  // q=0 refuses.
  EXPECT_EQ(NegotiateCoding("gzip;q=0"), ContentCoding::kIdentity);
  EXPECT_EQ(NegotiateCoding("zstd;q=0, gzip;q=0.001"), ContentCoding::kGzip);
  EXPECT_EQ(NegotiateCoding("*;q=0"), ContentCoding::kIdentity);
  EXPECT_EQ(NegotiateCoding("*, zstd;q=0"), ContentCoding::kGzip);
  EXPECT_EQ(NegotiateCoding("*"), ContentCoding::kZstd);
  // Identity preferred over the codings.
  EXPECT_EQ(NegotiateCoding("gzip;q=0.5, identity"), ContentCoding::kIdentity);
  EXPECT_EQ(NegotiateCoding("gzip;q=0.5, identity;q=0.2"), ContentCoding::kGzip);
  // Malformed q-values drop their item only.
  EXPECT_EQ(NegotiateCoding("zstd;q=2, gzip"), ContentCoding::kGzip);
  EXPECT_EQ(NegotiateCoding("zstd;q=abc"), ContentCoding::kIdentity);
  EXPECT_EQ(NegotiateCoding(",,gzip;;q=0.3,"), ContentCoding::kGzip);
}

TEST(MergeVaryTest, AddsANameOnce) {
  EXPECT_EQ(MergeVary("", "Accept-Encoding"), "Accept-Encoding");
  EXPECT_EQ(MergeVary("Authorization", "Accept-Encoding"), "Authorization, Accept-Encoding");
  EXPECT_EQ(MergeVary("authorization, accept-encoding", "Accept-Encoding"),
            "authorization, accept-encoding");
  EXPECT_EQ(MergeVary("*", "Accept-Encoding"), "*");
}

TEST(CompressTest, RoundTripsAndRejectsDamage) {
  std::string text;
  for (int i = 0; i < 2000; ++i) text += R"({"id":)" + std::to_string(i) + R"(,"kind":"order"},)";
  for (ContentCoding coding : {ContentCoding::kGzip, ContentCoding::kZstd}) {
    SCOPED_TRACE(std::string(CodingName(coding)));
    auto packed = Compress(coding, text, CompressionOptions{});
    ASSERT_TRUE(packed.has_value());
    EXPECT_LT(packed->size() * 4, text.size());
    auto back = Decompress(coding, *packed, 1 << 20);
    ASSERT_TRUE(back.has_value());
    EXPECT_EQ(*back, text);
    EXPECT_FALSE(Decompress(coding, packed->substr(0, packed->size() / 2), 1 << 20));
    EXPECT_FALSE(Decompress(coding, *packed, text.size() - 1));
    EXPECT_FALSE(Decompress(coding, "not compressed at all", 1 << 20));
    auto empty = Compress(coding, "", CompressionOptions{});
    ASSERT_TRUE(empty.has_value());
    EXPECT_EQ(Decompress(coding, *empty, 16), "");
  }
  // gzip's magic bytes (RFC 1952).
  auto gz = Compress(ContentCoding::kGzip, text, CompressionOptions{});
  ASSERT_TRUE(gz.has_value());
  EXPECT_EQ(static_cast<unsigned char>((*gz)[0]), 0x1f);
  EXPECT_EQ(static_cast<unsigned char>((*gz)[1]), 0x8b);
}

struct Response {
  int status = 0;
  std::string head;  // lower-cased
  std::string body;

  // The value of a header (name lower-case), or "(none)".
  std::string Header(const std::string& name) const {
    const size_t at = head.find("\r\n" + name + ": ");
    if (at == std::string::npos) return "(none)";
    const size_t from = at + name.size() + 4;
    return head.substr(from, head.find("\r\n", from) - from);
  }
};

// One request on a connection of its own; reads a Content-Length body, or only the head when
// `head_only` (an SSE answer that would go on).
Response Exchange(uint16_t port, const std::string& request, bool head_only = false) {
  Response r;
  const int fd = testing::ConnectLoopback(port, 10);
  if (fd < 0) return r;
  if (!testing::SendAll(fd, request)) {
    ::close(fd);
    return r;
  }
  std::string buffer;
  size_t end;
  char chunk[65536];
  auto fill = [&] {
    const ssize_t n = ::recv(fd, chunk, sizeof(chunk), 0);
    if (n <= 0) return false;
    buffer.append(chunk, static_cast<size_t>(n));
    return true;
  };
  while ((end = buffer.find("\r\n\r\n")) == std::string::npos) {
    if (!fill()) break;
  }
  if (end != std::string::npos) {
    // Values stay as sent (entity tags compare exactly); names are matched lower-case.
    r.head = buffer.substr(0, end + 2);
    for (size_t line = r.head.find("\r\n"); line != std::string::npos;
         line = r.head.find("\r\n", line + 2)) {
      for (size_t i = line + 2; i < r.head.size() && r.head[i] != ':'; ++i) {
        r.head[i] = static_cast<char>(std::tolower(static_cast<unsigned char>(r.head[i])));
      }
    }
    r.status = std::stoi(r.head.substr(9, 3));
    buffer.erase(0, end + 4);
    const std::string length = r.Header("content-length");
    if (!head_only && length != "(none)") {
      const size_t want = std::stoul(length);
      while (buffer.size() < want && fill()) {
      }
      r.body = buffer.substr(0, want);
    }
  }
  ::close(fd);
  return r;
}

std::string Request(const std::string& method, const std::string& target,
                    const std::string& extra = "", const std::string& body = "") {
  std::string out = method + " " + target + " HTTP/1.1\r\nHost: x\r\n" + extra;
  if (method == "PUT" || method == "POST") {
    out += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  }
  return out + "Connection: close\r\n\r\n" + body;
}

class CompressionServerTest : public ::testing::Test {
 protected:
  void StartServer(CompressionOptions compression = {}) {
    ServerOptions options;
    options.host = "127.0.0.1";
    options.port = 0;
    options.threads = 2;
    options.service.long_poll_timeout_ms = 3000;
    options.sse_max_duration_ms = 1000;
    options.service.compression = compression;
    auto server = HttpServer::Start(StreamRegistry(), options);
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(*server);
    thread_ = std::thread([this] { server_->Run(); });
  }
  void TearDown() override {
    if (server_) {
      server_->Stop();
      thread_.join();
    }
  }
  uint16_t port() const { return server_->port(); }

  // A JSON stream holding `messages` messages of about 60 bytes each.
  void MakeJsonStream(const std::string& name, int messages) {
    ASSERT_EQ(
        Exchange(port(), Request("PUT", "/v1/stream/" + name, "Content-Type: application/json\r\n"))
            .status,
        201);
    std::string batch = "[";
    for (int i = 0; i < messages; ++i) {
      if (i > 0) batch += ",";
      batch += R"({"order":)" + std::to_string(i) + R"(,"customer":"acme","total":)" +
               std::to_string(i * 7 % 1000) + "}";
    }
    batch += "]";
    ASSERT_EQ(Exchange(port(), Request("POST", "/v1/stream/" + name,
                                       "Content-Type: application/json\r\n", batch))
                  .status,
              204);
  }

  std::unique_ptr<HttpServer> server_;
  std::thread thread_;
};

TEST_F(CompressionServerTest, CatchUpIsCompressedByAcceptEncodingAndDecodesToTheSameBody) {
  StartServer();
  MakeJsonStream("orders", 200);
  const Response plain = Exchange(port(), Request("GET", "/v1/stream/orders?offset=-1"));
  ASSERT_EQ(plain.status, 200);
  ASSERT_GT(plain.body.size(), 4000u);
  EXPECT_EQ(plain.Header("content-encoding"), "(none)");
  EXPECT_EQ(plain.Header("vary"), "Accept-Encoding");
  for (auto [accept, coding] : {std::pair{"gzip", ContentCoding::kGzip},
                                std::pair{"gzip, deflate, br, zstd", ContentCoding::kZstd},
                                std::pair{"zstd;q=0.1, gzip;q=0.9", ContentCoding::kGzip}}) {
    SCOPED_TRACE(accept);
    const Response packed =
        Exchange(port(), Request("GET", "/v1/stream/orders?offset=-1",
                                 std::string("Accept-Encoding: ") + accept + "\r\n"));
    ASSERT_EQ(packed.status, 200);
    EXPECT_EQ(packed.Header("content-encoding"), CodingName(coding));
    EXPECT_EQ(packed.Header("vary"), "Accept-Encoding");
    EXPECT_EQ(packed.Header("content-type"), "application/json");
    EXPECT_EQ(packed.Header("stream-next-offset"), plain.Header("stream-next-offset"));
    EXPECT_LT(packed.body.size() * 3, plain.body.size());
    auto decoded = Decompress(coding, packed.body, 1 << 20);
    ASSERT_TRUE(decoded.has_value());
    EXPECT_EQ(*decoded, plain.body);
    // Each coding is a representation of its own, with an entity tag of its own.
    EXPECT_NE(packed.Header("etag"), plain.Header("etag"));
  }
}

TEST_F(CompressionServerTest, RefusedCodingsAndSmallBodiesAreSentAsTheyAre) {
  StartServer();
  MakeJsonStream("orders", 200);
  MakeJsonStream("tiny", 3);
  for (const char* accept : {"gzip;q=0", "identity, gzip;q=0.5", "*;q=0", "br, deflate"}) {
    SCOPED_TRACE(accept);
    const Response r =
        Exchange(port(), Request("GET", "/v1/stream/orders?offset=-1",
                                 std::string("Accept-Encoding: ") + accept + "\r\n"));
    ASSERT_EQ(r.status, 200);
    EXPECT_EQ(r.Header("content-encoding"), "(none)");
    EXPECT_EQ(r.body.front(), '[');
  }
  const Response tiny =
      Exchange(port(), Request("GET", "/v1/stream/tiny?offset=-1", "Accept-Encoding: gzip\r\n"));
  ASSERT_EQ(tiny.status, 200);
  EXPECT_LT(tiny.body.size(), 1024u);
  EXPECT_EQ(tiny.Header("content-encoding"), "(none)");
  EXPECT_EQ(tiny.body.front(), '[');
}

TEST_F(CompressionServerTest, TheThresholdIsAFlagAndCompressionCanBeTurnedOff) {
  CompressionOptions low;
  low.min_bytes = 10;
  StartServer(low);
  MakeJsonStream("tiny", 3);
  const Response r =
      Exchange(port(), Request("GET", "/v1/stream/tiny?offset=-1", "Accept-Encoding: gzip\r\n"));
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.Header("content-encoding"), "gzip");
  server_->Stop();
  thread_.join();
  server_.reset();
  CompressionOptions off;
  off.enabled = false;
  StartServer(off);
  MakeJsonStream("orders", 200);
  const Response plain =
      Exchange(port(), Request("GET", "/v1/stream/orders?offset=-1", "Accept-Encoding: gzip\r\n"));
  ASSERT_EQ(plain.status, 200);
  EXPECT_EQ(plain.Header("content-encoding"), "(none)");
  EXPECT_EQ(plain.Header("vary"), "(none)");
}

// If-None-Match matches only the representation the client holds: a gzip tag revalidates a
// gzip read (304, with that tag), and a client that now asks for identity gets the body.
TEST_F(CompressionServerTest, EntityTagsAreDistinctPerCoding) {
  StartServer();
  MakeJsonStream("orders", 200);
  const Response gz =
      Exchange(port(), Request("GET", "/v1/stream/orders?offset=-1", "Accept-Encoding: gzip\r\n"));
  ASSERT_EQ(gz.status, 200);
  const std::string tag = gz.Header("etag");
  ASSERT_NE(tag, "(none)");
  const Response again =
      Exchange(port(), Request("GET", "/v1/stream/orders?offset=-1",
                               "Accept-Encoding: gzip\r\nIf-None-Match: " + tag + "\r\n"));
  EXPECT_EQ(again.status, 304);
  EXPECT_EQ(again.Header("etag"), tag);
  EXPECT_EQ(again.Header("vary"), "Accept-Encoding");
  const Response identity = Exchange(
      port(), Request("GET", "/v1/stream/orders?offset=-1", "If-None-Match: " + tag + "\r\n"));
  ASSERT_EQ(identity.status, 200);
  EXPECT_EQ(identity.Header("content-encoding"), "(none)");
  EXPECT_EQ(identity.body.front(), '[');
  const Response identity_again =
      Exchange(port(), Request("GET", "/v1/stream/orders?offset=-1",
                               "If-None-Match: " + identity.Header("etag") + "\r\n"));
  EXPECT_EQ(identity_again.status, 304);
  const Response zstd =
      Exchange(port(), Request("GET", "/v1/stream/orders?offset=-1",
                               "Accept-Encoding: zstd\r\nIf-None-Match: " + tag + "\r\n"));
  ASSERT_EQ(zstd.status, 200);
  EXPECT_EQ(zstd.Header("content-encoding"), "zstd");
}

// A long-poll that waits for records answers them compressed.
TEST_F(CompressionServerTest, LongPollAnswersAreCompressed) {
  StartServer();
  MakeJsonStream("orders", 1);
  const Response first = Exchange(port(), Request("GET", "/v1/stream/orders?offset=-1"));
  ASSERT_EQ(first.status, 200);
  const std::string tail = first.Header("stream-next-offset");
  Response waited;
  std::thread poll([&] {
    waited = Exchange(port(), Request("GET", "/v1/stream/orders?offset=" + tail + "&live=long-poll",
                                      "Accept-Encoding: gzip\r\n"));
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  std::string batch = "[";
  for (int i = 0; i < 100; ++i) {
    batch += std::string(i ? "," : "") + R"({"event":"shipped","order":)" + std::to_string(i) + "}";
  }
  batch += "]";
  ASSERT_EQ(Exchange(port(), Request("POST", "/v1/stream/orders",
                                     "Content-Type: application/json\r\n", batch))
                .status,
            204);
  poll.join();
  ASSERT_EQ(waited.status, 200);
  EXPECT_EQ(waited.Header("content-encoding"), "gzip");
  EXPECT_EQ(waited.Header("vary"), "Accept-Encoding");
  auto decoded = Decompress(ContentCoding::kGzip, waited.body, 1 << 20);
  ASSERT_TRUE(decoded.has_value());
  EXPECT_EQ(*decoded, batch);
}

// SSE is never compressed (content_coding.h): its events must reach the reader one by one.
TEST_F(CompressionServerTest, SseIsNeverCompressed) {
  StartServer();
  MakeJsonStream("orders", 200);
  const Response sse = Exchange(
      port(), Request("GET", "/v1/stream/orders?offset=-1&live=sse", "Accept-Encoding: gzip\r\n"),
      /*head_only=*/true);
  ASSERT_EQ(sse.status, 200);
  EXPECT_EQ(sse.Header("content-type"), "text/event-stream");
  EXPECT_EQ(sse.Header("content-encoding"), "(none)");
}

}  // namespace
}  // namespace runnel::server
