// The reserved subscription API (PROTOCOL.md sections 6-7) beyond what the conformance suite
// covers: webhook signatures checked against the published JWK, key persistence, SSRF refusal,
// lease expiry, generation fencing, bounded retries with backoff, and state surviving a restart
// of the service. The service runs without threads on a manual clock; the test drives Tick()
// and RunDeliveries().
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <random>
#include <set>
#include <thread>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "server/offset_token.h"
#include "server/subscription_service.h"
#include "server/webhook_client.h"
#include "server/webhook_signer.h"
#include "server/webhook_url.h"
#include "support/forwarding_store.h"

namespace runnel::server {
namespace {

using json = nlohmann::json;

// Verifies a Webhook-Signature header over `body` with the key of that kid in `jwks`, exactly
// as a receiver would: only the published JWK is used.
bool VerifyWithJwks(const std::string& jwks_text, const std::string& header,
                    const std::string& body) {
  // "t=<digits>,kid=<kid>,ed25519=<base64url>", split by hand (std::regex trips a GCC 12
  // false warning under the sanitizers).
  auto field = [&header](std::string_view name, size_t from, size_t* end) -> std::string {
    if (header.compare(from, name.size(), name) != 0) return {};
    size_t stop = header.find(',', from);
    if (stop == std::string::npos) stop = header.size();
    *end = stop;
    return header.substr(from + name.size(), stop - from - name.size());
  };
  size_t end = 0;
  const std::string t = field("t=", 0, &end);
  const std::string kid = end < header.size() ? field("kid=", end + 1, &end) : "";
  const std::string signature = end < header.size() ? field("ed25519=", end + 1, &end) : "";
  if (t.empty() || kid.empty() || signature.empty() || end != header.size() ||
      t.find_first_not_of("0123456789") != std::string::npos) {
    return false;
  }
  json jwks = json::parse(jwks_text);
  for (const auto& key : jwks["keys"]) {
    if (key["kid"] != kid) continue;
    if (key["kty"] != "OKP" || key["crv"] != "Ed25519" || key["alg"] != "EdDSA") return false;
    auto x = Base64UrlDecode(key["x"].get<std::string>());
    auto sig = Base64UrlDecode(signature);
    if (!x || !sig || x->size() != 32) return false;
    EVP_PKEY* pkey = EVP_PKEY_new_raw_public_key(
        EVP_PKEY_ED25519, nullptr, reinterpret_cast<const unsigned char*>(x->data()), x->size());
    std::string message = t + "." + body;
    EVP_MD_CTX* ctx = EVP_MD_CTX_new();
    bool ok = EVP_DigestVerifyInit(ctx, nullptr, nullptr, nullptr, pkey) == 1 &&
              EVP_DigestVerify(ctx, reinterpret_cast<const unsigned char*>(sig->data()),
                               sig->size(), reinterpret_cast<const unsigned char*>(message.data()),
                               message.size()) == 1;
    EVP_MD_CTX_free(ctx);
    EVP_PKEY_free(pkey);
    return ok;
  }
  return false;
}

TEST(WebhookSignerTest, SignatureVerifiesAgainstTheJwksKeyAndNotForAnotherBody) {
  auto signer = WebhookSigner::LoadOrCreate("");
  ASSERT_TRUE(signer.ok());
  std::string body = R"({"subscription_id":"s","generation":1})";
  std::string header = (*signer)->SignatureHeader(1778324210, body);
  EXPECT_TRUE(VerifyWithJwks((*signer)->JwksJson(), header, body));
  EXPECT_FALSE(VerifyWithJwks((*signer)->JwksJson(), header, body + " "));
  auto other = WebhookSigner::LoadOrCreate("");
  ASSERT_TRUE(other.ok());
  EXPECT_FALSE(VerifyWithJwks((*other)->JwksJson(), header, body));
  EXPECT_EQ((*signer)->kid().rfind("ds_", 0), 0u);
}

TEST(WebhookSignerTest, KeyIsPersistedOwnerOnlyAndReloadedWithTheSameKid) {
  auto dir =
      std::filesystem::temp_directory_path() / ("runnel-signer-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::string path = (dir / "webhook-signing-key.pem").string();
  std::filesystem::remove(path);
  auto first = WebhookSigner::LoadOrCreate(path);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  auto second = WebhookSigner::LoadOrCreate(path);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ((*first)->kid(), (*second)->kid());
  EXPECT_EQ((*first)->public_key(), (*second)->public_key());
  // A signature made before the "restart" verifies with the reloaded key set.
  std::string header = (*first)->SignatureHeader(1, "x");
  EXPECT_TRUE(VerifyWithJwks((*second)->JwksJson(), header, "x"));
  std::filesystem::remove_all(dir);
}

TEST(WebhookSignerTest, CorruptKeyFileIsAnErrorNotANewKey) {
  auto dir =
      std::filesystem::temp_directory_path() / ("runnel-signer-bad-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::string path = (dir / "key.pem").string();
  FILE* f = std::fopen(path.c_str(), "w");
  std::fputs("not a key", f);
  std::fclose(f);
  auto loaded = WebhookSigner::LoadOrCreate(path);
  EXPECT_EQ(loaded.status().code(), StatusCode::kCorruption);
  std::filesystem::remove_all(dir);
}

TEST(WebhookSignerTest, TokensRejectTamperingAndOtherKeys) {
  const std::string key = NewTokenKey();
  const std::string other = NewTokenKey();
  ASSERT_EQ(key.size(), 32u);
  ASSERT_NE(key, other);
  std::string token = MintToken(key, R"({"g":7})");
  EXPECT_EQ(VerifyToken(key, token), std::optional<std::string>(R"({"g":7})"));
  EXPECT_FALSE(VerifyToken(other, token));
  EXPECT_FALSE(VerifyToken("", token));
  std::string forged = MintToken(key, R"({"g":8})");
  std::string spliced = forged.substr(0, forged.find('.')) + token.substr(token.find('.'));
  EXPECT_FALSE(VerifyToken(key, spliced));
  EXPECT_FALSE(VerifyToken(key, "garbage"));
}

TEST(Base64UrlTest, RoundTripsEveryLength) {
  std::string bytes;
  for (int n = 0; n < 40; ++n) {
    EXPECT_EQ(Base64UrlDecode(Base64UrlEncode(bytes)), std::optional<std::string>(bytes));
    bytes += static_cast<char>(n * 37 + 200);
  }
  EXPECT_FALSE(Base64UrlDecode("ab=="));
  EXPECT_FALSE(Base64UrlDecode("a"));
}

// PROTOCOL.md 6.2 and 12.8.
TEST(WebhookUrlTest, RefusesPrivateLoopbackLinkLocalAndPlainHttpTargets) {
  for (const char* url : {"http://10.0.0.1/hook",
                          "https://10.0.0.1/hook",
                          "https://192.168.1.20/",
                          "https://172.16.0.1/",
                          "https://169.254.169.254/latest/meta-data",
                          "https://127.0.0.1/",
                          "https://[::1]/",
                          "https://[fe80::1]/",
                          "https://[fd00::1]/",
                          "https://[::ffff:10.0.0.1]/",
                          "https://[::127.0.0.1]/",         // IPv4-compatible
                          "https://[::ffff:0:127.0.0.1]/",  // IPv4-translated
                          "https://[64:ff9b::10.0.0.1]/",   // NAT64 of a private address
                          "https://[64:ff9b:1::7f00:1]/",   // local-use NAT64
                          "https://[2002:7f00:1::]/",       // 6to4 of 127.0.0.1
                          "https://[2002:c0a8:101::1]/",    // 6to4 of 192.168.1.1
                          "https://[100::1]/",              // discard-only
                          "https://[2001::1]/",             // Teredo
                          "https://[2001:db8::1]/",         // documentation
                          "https://[3fff::1]/",             // documentation
                          "https://0.0.0.0/",
                          "https://100.64.0.1/",
                          "http://example.com/hook",
                          "ftp://example.com/",
                          "https://user@example.com/",
                          "https://example.com:0/",
                          "https://example.com:99999/",
                          "https:///x",
                          "http://localhost:8080/hook",
                          "http://127.0.0.1:9/x"}) {
    EXPECT_FALSE(CheckWebhookUrl(url, /*allow_localhost=*/false).ok()) << url;
  }
  EXPECT_TRUE(CheckWebhookUrl("https://example.com/hook", false).ok());
  EXPECT_TRUE(CheckWebhookUrl("https://93.184.216.34:8443/x?y=1", false).ok());
  EXPECT_TRUE(CheckWebhookUrl("https://[2606:4700::1111]/", false).ok());
  EXPECT_TRUE(CheckWebhookUrl("https://[2002:5db8:d822::1]/", false).ok()) << "6to4 of a public";
  EXPECT_TRUE(CheckWebhookUrl("https://[64:ff9b::5db8:d822]/", false).ok()) << "NAT64 of a public";
}

// The resolver reads legacy numeric IPv4 forms as addresses, so creation judges them by the
// address they stand for (delivery re-checks resolved addresses anyway).
TEST(WebhookUrlTest, LegacyNumericIpv4FormsAreJudgedByTheirAddress) {
  for (const char* url : {"https://2130706433/", "https://0x7f.1/", "https://127.1/",
                          "https://0177.0.0.1/", "https://10.1/", "https://0xa9fea9fe/"}) {
    auto s = CheckWebhookUrl(url, /*allow_localhost=*/false);
    EXPECT_FALSE(s.ok()) << url;
    EXPECT_NE(s.message().find("reserved address"), std::string::npos) << s.ToString();
  }
  EXPECT_TRUE(CheckWebhookUrl("https://1572395042/", false).ok()) << "93.184.216.34 is public";
}

TEST(WebhookUrlTest, DevelopmentExceptionCoversOnlyLocalhostAnd127Dot0Dot0) {
  EXPECT_TRUE(CheckWebhookUrl("http://localhost:8080/hook", true).ok());
  EXPECT_TRUE(CheckWebhookUrl("http://127.0.0.1:9/x", true).ok());
  EXPECT_TRUE(CheckWebhookUrl("http://127.0.0.9/x", true).ok());
  EXPECT_FALSE(CheckWebhookUrl("http://127.1.0.1/x", true).ok());
  EXPECT_FALSE(CheckWebhookUrl("http://10.0.0.1/hook", true).ok());
  EXPECT_FALSE(CheckWebhookUrl("http://example.com/hook", true).ok());
}

// Found by webhook_url_fuzz: a host must be a DNS name, an IPv4 address or a bracketed IPv6
// address; anything else is refused when the subscription is made, not at every delivery.
TEST(WebhookUrlTest, HostsThatAreNoNameOrAddressAreRefused) {
  for (const char* bad : {"https://a]b/x", "https://a[b/x", "https://h\xc3\xa9llo.example/x",
                          "https://a%2eb/x", "https://a,b/x", "https://[1.2.3.4]/x",
                          "https://[::1/x", "https://[zz::1]/x", "https://./x", "https://:443/x"}) {
    auto url = ParseWebhookUrl(bad);
    EXPECT_EQ(url.status().code(), StatusCode::kInvalidArgument) << bad;
  }
  for (const char* good :
       {"https://hooks.example.com/x", "https://Hooks.Example.COM./x",
        "https://my_host-1.example/x", "https://[2001:db8::1]:8443/x", "https://93.184.216.34/x"}) {
    EXPECT_TRUE(ParseWebhookUrl(good).ok()) << good;
  }
  auto v6 = ParseWebhookUrl("https://[2001:DB8::1]/x");
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->host, "2001:db8::1");
}

TEST(WebhookUrlTest, ResolvedAddressesAreCheckedAtConnectTime) {
  auto url = ParseWebhookUrl("https://hooks.example.com/x");
  ASSERT_TRUE(url.ok());
  EXPECT_TRUE(AddressAllowed(*url, "93.184.216.34", false));
  EXPECT_FALSE(AddressAllowed(*url, "10.1.2.3", false));
  EXPECT_FALSE(AddressAllowed(*url, "127.0.0.1", true));  // not a localhost URL
  auto local = ParseWebhookUrl("http://localhost:1/x");
  EXPECT_TRUE(AddressAllowed(*local, "127.0.0.1", true));
  EXPECT_TRUE(AddressAllowed(*local, "::1", true));
  EXPECT_FALSE(AddressAllowed(*local, "127.0.0.1", false));
  EXPECT_FALSE(AddressAllowed(*local, "192.168.0.1", true));
}

TEST(RetryDelayTest, DoublesFromOneSecondToSixtyWithTwentyPercentJitter) {
  uint64_t expected[] = {1000, 2000, 4000, 8000, 16000, 32000, 60000, 60000, 60000};
  for (uint32_t attempt = 1; attempt <= 9; ++attempt) {
    uint64_t base = expected[attempt - 1];
    EXPECT_EQ(RetryDelayMs(attempt, 0.5), base) << attempt;
    EXPECT_EQ(RetryDelayMs(attempt, 0.0), base * 8 / 10) << attempt;
    EXPECT_LE(RetryDelayMs(attempt, 0.999999), base * 12 / 10) << attempt;
  }
  EXPECT_EQ(RetryDelayMs(1000000, 0.5), 60000u);
}

// A one-connection loopback listener that reads the request and then sends `reply` (or nothing,
// keeping the connection open for `hold_ms`).
class OneShotServer {
 public:
  OneShotServer(std::string reply, int hold_ms) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    ::listen(fd_, 1);
    socklen_t len = sizeof(addr);
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this, reply = std::move(reply), hold_ms] {
      int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      char buf[4096];
      timeval tv{2, 0};
      ::setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
      ::recv(c, buf, sizeof(buf), 0);
      if (!reply.empty()) ::send(c, reply.data(), reply.size(), MSG_NOSIGNAL);
      std::this_thread::sleep_for(std::chrono::milliseconds(hold_ms));
      ::close(c);
    });
  }
  ~OneShotServer() {
    ::shutdown(fd_, SHUT_RDWR);
    thread_.join();
    ::close(fd_);
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_) + "/hook"; }

 private:
  int fd_ = -1;
  uint16_t port_ = 0;
  std::thread thread_;
};

TEST(WebhookClientTest, DeliversAndReadsTheReply) {
  OneShotServer server("HTTP/1.1 200 OK\r\nContent-Length: 13\r\n\r\n{\"done\":true}", 0);
  WebhookClientOptions options;
  options.allow_localhost = true;
  WebhookReply reply = PostWebhook(options, {server.url(), {}, "{}"});
  ASSERT_TRUE(reply.responded) << reply.error;
  EXPECT_EQ(reply.status, 200);
  EXPECT_EQ(reply.body, R"({"done":true})");
}

TEST(WebhookClientTest, GivesUpAtTheDeadlineWhenTheReceiverNeverAnswers) {
  OneShotServer server("", 1000);
  WebhookClientOptions options;
  options.allow_localhost = true;
  options.timeout_ms = 300;
  auto start = std::chrono::steady_clock::now();
  WebhookReply reply = PostWebhook(options, {server.url(), {}, "{}"});
  auto took = std::chrono::steady_clock::now() - start;
  EXPECT_FALSE(reply.responded);
  EXPECT_NE(reply.error.find("no response within 300 ms"), std::string::npos) << reply.error;
  EXPECT_LT(took, std::chrono::milliseconds(2500));
}

TEST(WebhookClientTest, RefusesAnOversizedReply) {
  std::string big(1000, 'x');
  OneShotServer server("HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n" + big, 0);
  WebhookClientOptions options;
  options.allow_localhost = true;
  options.max_response_bytes = 100;
  WebhookReply reply = PostWebhook(options, {server.url(), {}, "{}"});
  EXPECT_FALSE(reply.responded);
  EXPECT_NE(reply.error.find("larger than 100 bytes"), std::string::npos)
      << reply.error << " status " << reply.status << " body bytes " << reply.body.size();
}

TEST(WebhookClientTest, RefusesLoopbackWithoutTheDevelopmentException) {
  OneShotServer server("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", 0);
  WebhookReply reply = PostWebhook(WebhookClientOptions{}, {server.url(), {}, "{}"});
  EXPECT_FALSE(reply.responded);
  EXPECT_NE(reply.error.find("private, loopback or reserved"), std::string::npos) << reply.error;
  // Unblock the listener, which is waiting for a connection that never comes.
  WebhookClientOptions dev;
  dev.allow_localhost = true;
  (void)PostWebhook(dev, {server.url(), {}, "{}"});
}

class SubscriptionServiceTest : public ::testing::Test {
 protected:
  SubscriptionServiceTest() : clock_(1778324210000), registry_(NewMemoryStore(), &clock_) {}

  void Start(uint32_t max_attempts = 10, size_t compaction_slack_records = 256) {
    service_ = StartNode(max_attempts, compaction_slack_records);
    ASSERT_NE(service_, nullptr);
  }

  // A service (a node) over the test's store: no threads, webhooks recorded.
  std::unique_ptr<SubscriptionService> StartNode(uint32_t max_attempts = 10,
                                                 size_t compaction_slack_records = 256) {
    SubscriptionOptions options;
    options.compaction_slack_records = compaction_slack_records;
    options.start_threads = false;
    options.allow_localhost_webhooks = true;
    options.max_delivery_attempts = max_attempts;
    options.poster = [this](const WebhookPost& post) {
      posts_.push_back(post);
      post_times_.push_back(clock_.NowMs());
      return reply_;
    };
    auto service = SubscriptionService::Create(registry_, options);
    EXPECT_TRUE(service.ok()) << service.status().ToString();
    return service.ok() ? std::move(*service) : nullptr;
  }

  HttpResponse Call(const std::string& method, const std::string& name, const json& body = nullptr,
                    const std::string& token = "") {
    return CallOn(*service_, method, name, body, token);
  }

  static HttpResponse CallOn(SubscriptionService& node, const std::string& method,
                             const std::string& name, const json& body = nullptr,
                             const std::string& token = "") {
    HttpRequest request;
    request.method = method;
    request.path = "/v1/stream/" + name;
    request.headers["host"] = "streams.test";
    if (!token.empty()) request.headers["authorization"] = "Bearer " + token;
    if (!body.is_null()) request.body = body.dump();
    Route route = ParseRoute(request.path, true);
    return node.Handle(route, request);
  }

  void CreateStream(const std::string& name) {
    CreateStreamOptions options;
    options.content_type = "application/json";
    ASSERT_TRUE(registry_.CreateStream(StreamScope::Global(), name, options).ok());
  }

  // An append as the HTTP server does it: write, then NoteWrite.
  void Append(const std::string& name, const std::string& payload) {
    AppendOn(*service_, name, payload);
  }
  // The same through another node.
  void AppendOn(SubscriptionService& node, const std::string& name, const std::string& payload) {
    ASSERT_TRUE(
        registry_.Append(StreamScope::Global(), name, std::nullopt, payload, clock_.NowMs()).ok());
    node.NoteWrite(ParseRoute("/v1/stream/" + name, true));
  }

  std::vector<json> WakeEvents(const std::string& wake_stream) {
    std::vector<json> out;
    auto events = registry_.ReadSince(StreamScope::Global(), wake_stream, 1, 1000);
    EXPECT_TRUE(events.ok());
    for (const auto& e : *events) out.push_back(json::parse(e.payload));
    return out;
  }

  // Subscription p1 (PullSub) with one append to events/a pending, after one engine pass: the
  // wake events written.
  std::vector<json> SubscribeAndWake() {
    CreateStream("wake/pool");
    EXPECT_EQ(Call("PUT", "__ds/subscriptions/p1", PullSub("p1")).status, 201);
    CreateStream("events/a");
    Append("events/a", R"({"n":1})");
    service_->Tick();
    return WakeEvents("wake/pool");
  }

  // A pull-wake subscription to the one stream `stream`, waking into "w".
  static json StreamsSub(const std::string& stream) {
    return {{"type", "pull-wake"}, {"streams", {stream}}, {"wake_stream", "w"}};
  }

  static json PullSub(const std::string& /*id*/) {
    return {{"type", "pull-wake"},
            {"pattern", "events/*"},
            {"wake_stream", "wake/pool"},
            {"lease_ttl_ms", 1000}};
  }

  ManualClock clock_;
  StreamRegistry registry_;
  std::unique_ptr<SubscriptionService> service_;
  std::vector<WebhookPost> posts_;
  std::vector<uint64_t> post_times_;
  WebhookReply reply_{true, 200, "{}", ""};
};

// A subscription body nested past kMaxJsonDepth is refused like invalid JSON (never parsed and
// then serialized, which would recurse once per level).
TEST_F(SubscriptionServiceTest, DeeplyNestedBodiesAreRefusedAsInvalidJson) {
  Start();
  HttpRequest request;
  request.method = "PUT";
  request.path = "/v1/stream/__ds/subscriptions/deep";
  request.headers["host"] = "streams.test";
  request.body = "{\"type\":" + std::string(300000, '[') + std::string(300000, ']') + "}";
  HttpResponse r = service_->Handle(ParseRoute(request.path, true), request);
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("not valid JSON"), std::string::npos) << r.body;
}

// A stream whose name is not UTF-8 (made through the library; HTTP refuses such names) never
// breaks the service: a glob subscription skips it when linking existing streams, and an append
// to it that matches a glob is recorded without the state serializer throwing.
TEST_F(SubscriptionServiceTest, StreamNamesThatAreNotUtf8NeverBreakTheService) {
  Start();
  CreateStream("wake/pool");
  CreateStream("events/\xff");
  ASSERT_EQ(Call("PUT", "__ds/subscriptions/p1", PullSub("p1")).status, 201);
  Append("events/\xff", "{}");
  CreateStream("events/ok");
  Append("events/ok", "{}");
  auto got = Call("GET", "__ds/subscriptions/p1");
  EXPECT_EQ(got.status, 200) << got.body;
  EXPECT_NE(got.body.find("events/ok"), std::string::npos) << got.body;
}

// A pattern that also matches the subscription's own wake stream does not link it: every wake
// written there would otherwise be pending work that asks for the next wake.
TEST_F(SubscriptionServiceTest, APatternNeverLinksTheSubscriptionsOwnWakeStream) {
  Start();
  CreateStream("wake/pool");
  CreateStream("events/a");
  json everything = PullSub("all");
  everything["pattern"] = "**";
  ASSERT_EQ(Call("PUT", "__ds/subscriptions/all", everything).status, 201);
  Append("wake/pool", R"({"not":"a wake"})");
  Append("events/a", R"({"n":1})");
  auto got = Call("GET", "__ds/subscriptions/all");
  ASSERT_EQ(got.status, 200) << got.body;
  const json body = json::parse(got.body);
  std::vector<std::string> linked;
  for (const json& link : body["streams"]) linked.push_back(link["path"]);
  EXPECT_EQ(linked, std::vector<std::string>{"events/a"}) << got.body;
}

// PROTOCOL.md 7.3: a lease ends after lease_ttl_ms without heartbeat; its token is then fenced
// and pending work gets a new wake with a higher generation.
TEST_F(SubscriptionServiceTest, LeaseExpiryFencesTheHolderAndWakesAgain) {
  Start();
  auto wakes = SubscribeAndWake();
  ASSERT_EQ(wakes.size(), 1u);
  EXPECT_EQ(wakes[0]["subscription_id"], "p1");
  EXPECT_EQ(wakes[0]["stream"], "events/a");
  auto claim = Call("POST", "__ds/subscriptions/p1/claim", {{"worker", "w1"}});
  ASSERT_EQ(claim.status, 200) << claim.body;
  json claimed = json::parse(claim.body);
  EXPECT_EQ(claimed["generation"], wakes[0]["generation"]);

  // A heartbeat inside the lease keeps it.
  clock_.Advance(800);
  json heartbeat = {{"wake_id", claimed["wake_id"]}, {"generation", claimed["generation"]}};
  EXPECT_EQ(Call("POST", "__ds/subscriptions/p1/ack", heartbeat, claimed["token"]).status, 200);
  clock_.Advance(800);
  service_->Tick();
  EXPECT_EQ(Call("POST", "__ds/subscriptions/p1/claim", {{"worker", "w2"}}).status, 409);

  // Past the extended lease: the holder is cleared, a new wake is written, the old token fenced.
  clock_.Advance(300);
  service_->Tick();
  wakes = WakeEvents("wake/pool");
  ASSERT_EQ(wakes.size(), 2u);
  EXPECT_EQ(wakes[1]["generation"].get<uint64_t>(), claimed["generation"].get<uint64_t>() + 1);
  auto stale = Call("POST", "__ds/subscriptions/p1/ack", heartbeat, claimed["token"]);
  EXPECT_EQ(stale.status, 409);
  EXPECT_EQ(json::parse(stale.body)["error"]["code"], "FENCED");
  auto claim2 = Call("POST", "__ds/subscriptions/p1/claim", {{"worker", "w2"}});
  ASSERT_EQ(claim2.status, 200);
  EXPECT_EQ(json::parse(claim2.body)["generation"], wakes[1]["generation"]);
}

// A pull-wake wake that no worker claims within lease_ttl_ms ends like an expired lease: the
// pending work gets a new wake event with a higher generation (a worker that missed the event,
// or a node stopped between recording the wake and writing its event, cannot stall it).
TEST_F(SubscriptionServiceTest, AnUnclaimedPullWakeIsWokenAgainAfterTheLeaseTtl) {
  Start();
  ASSERT_EQ(SubscribeAndWake().size(), 1u);
  clock_.Advance(999);
  service_->Tick();
  EXPECT_EQ(WakeEvents("wake/pool").size(), 1u);
  clock_.Advance(1);
  service_->Tick();
  auto wakes = WakeEvents("wake/pool");
  ASSERT_EQ(wakes.size(), 2u);
  EXPECT_EQ(wakes[1]["generation"].get<uint64_t>(), wakes[0]["generation"].get<uint64_t>() + 1);
  auto claim = Call("POST", "__ds/subscriptions/p1/claim", {{"worker", "w1"}});
  ASSERT_EQ(claim.status, 200) << claim.body;
  EXPECT_EQ(json::parse(claim.body)["generation"], wakes[1]["generation"]);
}

// PROTOCOL.md 7.3: a request must match the token, the current generation and the wake_id.
TEST_F(SubscriptionServiceTest, GenerationFencingRefusesStaleAndMismatchedRequests) {
  Start();
  CreateStream("wake/pool");
  ASSERT_EQ(Call("PUT", "__ds/subscriptions/p1", PullSub("p1")).status, 201);
  CreateStream("events/a");
  Append("events/a", R"({"n":1})");
  json c1 = json::parse(Call("POST", "__ds/subscriptions/p1/claim", {{"worker", "w1"}}).body);
  json release = {{"wake_id", c1["wake_id"]}, {"generation", c1["generation"]}};
  EXPECT_EQ(Call("POST", "__ds/subscriptions/p1/release", release, c1["token"]).status, 204);
  json c2 = json::parse(Call("POST", "__ds/subscriptions/p1/claim", {{"worker", "w1"}}).body);
  ASSERT_GT(c2["generation"].get<uint64_t>(), c1["generation"].get<uint64_t>());
  std::string tail = FormatOffset(1);
  json ack = {{"wake_id", c2["wake_id"]},
              {"generation", c2["generation"]},
              {"acks", {{{"stream", "events/a"}, {"offset", tail}}}},
              {"done", true}};
  // The old token, the old generation, and a wrong wake_id are all fenced.
  EXPECT_EQ(Call("POST", "__ds/subscriptions/p1/ack", ack, c1["token"]).status, 409);
  json old_gen = ack;
  old_gen["generation"] = c1["generation"];
  EXPECT_EQ(Call("POST", "__ds/subscriptions/p1/ack", old_gen, c2["token"]).status, 409);
  json wrong_wake = ack;
  wrong_wake["wake_id"] = c1["wake_id"];
  EXPECT_EQ(Call("POST", "__ds/subscriptions/p1/ack", wrong_wake, c2["token"]).status, 409);
  EXPECT_EQ(Call("POST", "__ds/subscriptions/p1/ack", ack, "forged.token").status, 401);
  EXPECT_EQ(Call("POST", "__ds/subscriptions/p1/ack", ack).status, 401);
  // None of those moved the cursor.
  json get = json::parse(Call("GET", "__ds/subscriptions/p1").body);
  EXPECT_EQ(get["streams"][0]["acked_offset"], FormatOffset(0));
  auto ok = Call("POST", "__ds/subscriptions/p1/ack", ack, c2["token"]);
  ASSERT_EQ(ok.status, 200) << ok.body;
  EXPECT_EQ(json::parse(ok.body), json({{"ok", true}, {"next_wake", false}}));
  get = json::parse(Call("GET", "__ds/subscriptions/p1").body);
  EXPECT_EQ(get["streams"][0]["acked_offset"], tail);
  // Replaying the completed ack is fenced; so is anything after DELETE.
  EXPECT_EQ(Call("POST", "__ds/subscriptions/p1/ack", ack, c2["token"]).status, 409);
  EXPECT_EQ(Call("DELETE", "__ds/subscriptions/p1").status, 204);
  EXPECT_EQ(Call("POST", "__ds/subscriptions/p1/ack", ack, c2["token"]).status, 404);
}

// Ack, release and callback authenticate with a wake token alone (no bearer token passes the
// access gate first): without a valid one they are refused before anything is written, so an
// anonymous caller cannot make the server create state streams in any scope.
TEST_F(SubscriptionServiceTest, CallsWithoutAValidWakeTokenCreateNoStreams) {
  Start();
  const json settle = {{"wake_id", "w"}, {"generation", 1}};
  for (const std::string root : {"/v1/stream/", "/v1/tenants/acme/stream/"}) {
    for (const std::string op : {"ack", "release", "callback"}) {
      for (const std::string token : {"", "forged.token"}) {
        HttpRequest request;
        request.method = "POST";
        request.path = root + "__ds/subscriptions/s1/" + op;
        request.headers["host"] = "streams.test";
        if (!token.empty()) request.headers["authorization"] = "Bearer " + token;
        request.body = settle.dump();
        HttpResponse r = service_->Handle(ParseRoute(request.path, true), request);
        EXPECT_EQ(r.status, 401) << request.path << " " << r.body;
      }
    }
  }
  for (const StreamScope& scope : {StreamScope::Global(), StreamScope::Tenant("acme")}) {
    auto state = registry_.ReadSince(scope, "__ds/subscriptions", 1, 10);
    EXPECT_EQ(state.status().code(), StatusCode::kNotFound) << scope.Label();
  }
}

TEST_F(SubscriptionServiceTest, WebhookIsSignedWithTheJwksKeyAndDoneAutoAcks) {
  Start();
  reply_.body = R"({"done":true})";
  auto created = Call("PUT", "__ds/subscriptions/h1",
                      {{"type", "webhook"},
                       {"pattern", "events/**"},
                       {"webhook", {{"url", "http://127.0.0.1:9/hook"}}}});
  ASSERT_EQ(created.status, 201) << created.body;
  json body = json::parse(created.body);
  EXPECT_EQ(body["webhook"]["signing"]["jwks_url"], "http://streams.test/v1/stream/__ds/jwks.json");
  auto jwks = Call("GET", "__ds/jwks.json");
  ASSERT_EQ(jwks.status, 200);
  CreateStream("events/deep/x");
  Append("events/deep/x", R"({"n":1})");
  Append("events/deep/x", R"({"n":2})");
  service_->Tick();
  service_->RunDeliveries();
  ASSERT_EQ(posts_.size(), 1u);
  std::string signature;
  for (const auto& [name, value] : posts_[0].headers) {
    if (name == "Webhook-Signature") signature = value;
  }
  EXPECT_TRUE(VerifyWithJwks(jwks.body, signature, posts_[0].body));
  json wake = json::parse(posts_[0].body);
  EXPECT_EQ(wake["callback_url"], "http://streams.test/v1/stream/__ds/subscriptions/h1/callback");
  EXPECT_EQ(wake["streams"][0]["tail_offset"], FormatOffset(2));
  json get = json::parse(Call("GET", "__ds/subscriptions/h1").body);
  EXPECT_EQ(get["streams"][0]["acked_offset"], FormatOffset(2));
  EXPECT_EQ(get["status"], "active");
  // Nothing pending: no further delivery.
  service_->Tick();
  service_->RunDeliveries();
  EXPECT_EQ(posts_.size(), 1u);
}

// PROTOCOL.md 7.1 retries, bounded by max_delivery_attempts.
TEST_F(SubscriptionServiceTest, FailedDeliveriesBackOffExponentiallyAndStopAfterTheLimit) {
  Start(/*max_attempts=*/5);
  reply_ = WebhookReply{true, 503, "", ""};
  ASSERT_EQ(Call("PUT", "__ds/subscriptions/h1",
                 {{"type", "webhook"},
                  {"streams", {"events/a"}},
                  {"webhook", {{"url", "http://localhost:9/hook"}}}})
                .status,
            201);
  CreateStream("events/a");
  Append("events/a", R"({"n":1})");
  // Step the clock in 100 ms increments for ten simulated minutes.
  for (int step = 0; step < 6000; ++step) {
    service_->Tick();
    service_->RunDeliveries();
    clock_.Advance(100);
  }
  ASSERT_EQ(posts_.size(), 5u);
  for (size_t i = 1; i < post_times_.size(); ++i) {
    uint64_t gap = post_times_[i] - post_times_[i - 1];
    uint64_t base = 1000ull << (i - 1);
    EXPECT_GE(gap, base * 8 / 10) << i;
    EXPECT_LE(gap, base * 12 / 10 + 200) << i;
  }
  // Every attempt was a new wake with a higher generation.
  for (size_t i = 1; i < posts_.size(); ++i) {
    EXPECT_GT(json::parse(posts_[i].body)["generation"].get<uint64_t>(),
              json::parse(posts_[i - 1].body)["generation"].get<uint64_t>());
  }
  EXPECT_EQ(json::parse(Call("GET", "__ds/subscriptions/h1").body)["status"], "failed");
  // A new append a minute later starts a new bounded cycle; the receiver has recovered.
  reply_ = WebhookReply{true, 200, R"({"done":true})", ""};
  clock_.Advance(60000);
  Append("events/a", R"({"n":2})");
  service_->Tick();
  service_->RunDeliveries();
  EXPECT_EQ(posts_.size(), 6u);
  json get = json::parse(Call("GET", "__ds/subscriptions/h1").body);
  EXPECT_EQ(get["status"], "active");
  EXPECT_EQ(get["streams"][0]["acked_offset"], FormatOffset(2));
}

TEST_F(SubscriptionServiceTest, StateSurvivesARestartOfTheService) {
  Start();
  CreateStream("wake/pool");
  CreateStream("events/a");
  ASSERT_TRUE(registry_.Append(StreamScope::Global(), "events/a", std::nullopt, "{}", 1).ok());
  ASSERT_EQ(Call("PUT", "__ds/subscriptions/p1", PullSub("p1")).status, 201);
  Append("events/a", R"({"n":2})");
  json c = json::parse(Call("POST", "__ds/subscriptions/p1/claim", {{"worker", "w"}}).body);
  json ack = {{"wake_id", c["wake_id"]},
              {"generation", c["generation"]},
              {"acks", {{{"stream", "events/a"}, {"offset", FormatOffset(2)}}}}};
  ASSERT_EQ(Call("POST", "__ds/subscriptions/p1/ack", ack, c["token"]).status, 200);
  service_.reset();
  Start();
  auto get = Call("GET", "__ds/subscriptions/p1");
  ASSERT_EQ(get.status, 200);
  json body = json::parse(get.body);
  EXPECT_EQ(body["streams"][0]["acked_offset"], FormatOffset(2));
  EXPECT_EQ(body["generation"], c["generation"]);
  // The lease, its holder and the claim token survive too: the worker goes on after the
  // restart (any node sharing the store would have accepted its token just the same).
  auto other = Call("POST", "__ds/subscriptions/p1/claim", {{"worker", "w2"}});
  EXPECT_EQ(other.status, 409) << other.body;
  EXPECT_EQ(json::parse(other.body)["error"]["current_holder"], "w");
  EXPECT_EQ(Call("POST", "__ds/subscriptions/p1/ack", ack, c["token"]).status, 200);
  // Re-confirmation is idempotent across the restart; a different configuration conflicts.
  EXPECT_EQ(Call("PUT", "__ds/subscriptions/p1", PullSub("p1")).status, 200);
  json changed = PullSub("p1");
  changed["lease_ttl_ms"] = 2000;
  EXPECT_EQ(Call("PUT", "__ds/subscriptions/p1", changed).status, 409);
}

// The state stream is compacted (live snapshots rewritten, older records pruned) and a restart
// after compaction still sees every change.
TEST_F(SubscriptionServiceTest, StateStreamIsCompactedWithoutLosingState) {
  Start();
  ASSERT_EQ(Call("PUT", "__ds/subscriptions/a", StreamsSub("s/0")).status, 201);
  ASSERT_EQ(Call("PUT", "__ds/subscriptions/b", StreamsSub("t/0")).status, 201);
  for (int i = 1; i <= 600; ++i) {
    ASSERT_EQ(
        Call("POST", "__ds/subscriptions/a/streams", {{"streams", {"s/" + std::to_string(i)}}})
            .status,
        204);
  }
  ASSERT_EQ(Call("DELETE", "__ds/subscriptions/b").status, 204);
  auto state = registry_.Describe(StreamScope::Global(), "__ds/subscriptions");
  ASSERT_TRUE(state.has_value());
  EXPECT_LE(state->event_count, 4u * 2 + 256 + 2);
  EXPECT_GE(state->next_offset, 603u);
  service_.reset();
  Start();
  json a = json::parse(Call("GET", "__ds/subscriptions/a").body);
  EXPECT_EQ(a["streams"].size(), 601u);
  EXPECT_EQ(Call("GET", "__ds/subscriptions/b").status, 404);
}

// The write that makes the state stream long enough to compact is itself in the compacted
// stream: a node reading the stream afresh after any single change sees that change, whether it
// was a new link or a deletion.
TEST_F(SubscriptionServiceTest, TheChangeThatTriggersACompactionIsNotLost) {
  Start();
  ASSERT_EQ(Call("PUT", "__ds/subscriptions/a", StreamsSub("s/0")).status, 201);
  bool compacted = false;
  for (int i = 1; i <= 300; ++i) {
    const std::string id = "x" + std::to_string(i);
    HttpResponse change = i % 2 == 0 ? Call("POST", "__ds/subscriptions/a/streams",
                                            {{"streams", {"s/" + std::to_string(i)}}})
                                     : Call("PUT", "__ds/subscriptions/" + id, StreamsSub("t"));
    ASSERT_EQ(change.status, i % 2 == 0 ? 204 : 201) << change.body;
    if (i % 2 == 1) {
      ASSERT_EQ(Call("DELETE", "__ds/subscriptions/" + id).status, 204);
    }
    auto state = registry_.Describe(StreamScope::Global(), "__ds/subscriptions");
    ASSERT_TRUE(state.has_value());
    compacted = compacted || state->head_offset > 1;
    std::unique_ptr<SubscriptionService> fresh = StartNode();
    json a = json::parse(CallOn(*fresh, "GET", "__ds/subscriptions/a").body);
    ASSERT_EQ(a["streams"].size(), static_cast<size_t>(1 + i / 2)) << "after change " << i;
    if (i % 2 == 1) {
      ASSERT_EQ(CallOn(*fresh, "GET", "__ds/subscriptions/" + id).status, 404)
          << "deleted " << id << " came back";
    }
  }
  EXPECT_TRUE(compacted) << "the state stream was never compacted";
}

// Random requests, appends and engine passes spread over two nodes (pull-wake and webhook
// subscriptions, links added and removed, claims, heartbeats, acks, releases, deletions,
// compactions of the state stream): after every step the nodes agree with each other and with a
// node that reads the state stream afresh. RUNNEL_SUBSCRIPTION_SEEDS raises the default 3 runs.
TEST_F(SubscriptionServiceTest, TwoNodesAndAFreshOneAlwaysAgreeUnderRandomChanges) {
  const char* seeds_env = std::getenv("RUNNEL_SUBSCRIPTION_SEEDS");
  const uint32_t seeds = seeds_env != nullptr ? static_cast<uint32_t>(std::atoi(seeds_env)) : 3;
  for (uint32_t seed = 1; seed <= seeds; ++seed) {
    registry_ = StreamRegistry(NewMemoryStore(), &clock_);
    posts_.clear();
    post_times_.clear();
    // A small slack compacts the state stream every few dozen changes, at random points.
    Start(10, 12);
    std::unique_ptr<SubscriptionService> b = StartNode(10, 12);
    std::mt19937 rng(seed);
    auto pick = [&rng](size_t n) { return static_cast<size_t>(rng() % n); };
    CreateStream("wake/pool");
    const std::vector<std::string> streams = {"events/a", "events/b", "events/c", "other/x"};
    for (const auto& name : streams) CreateStream(name);
    const std::vector<std::string> ids = {"p0", "p1", "p2", "h0"};
    std::map<std::string, json> claims;  // id -> the last successful claim's answer
    int compactions = 0;
    uint64_t last_head = 1;
    for (int step = 0; step < 500; ++step) {
      SubscriptionService& node = pick(2) == 0 ? *service_ : *b;
      const std::string id = ids[pick(ids.size())];
      const std::string sub = "__ds/subscriptions/" + id;
      switch (pick(10)) {
        case 0: {
          json config = id == "h0"   ? json{{"type", "webhook"},
                                          {"pattern", "events/*"},
                                          {"webhook", {{"url", "http://localhost:9/hook"}}}}
                        : id == "p2" ? json{{"type", "pull-wake"},
                                            {"streams", {"other/x"}},
                                            {"wake_stream", "wake/pool"},
                                            {"lease_ttl_ms", 1000}}
                                     : PullSub(id);
          auto r = CallOn(node, "PUT", sub, config);
          ASSERT_TRUE(r.status == 200 || r.status == 201) << r.body;
          break;
        }
        case 1:
          if (pick(4) == 0) CallOn(node, "DELETE", sub);
          break;
        case 2:
          CallOn(node, "POST", sub + "/streams", {{"streams", {streams[pick(streams.size())]}}});
          break;
        case 3: CallOn(node, "DELETE", sub + "/streams/" + streams[pick(streams.size())]); break;
        case 4: {
          auto r = CallOn(node, "POST", sub + "/claim", {{"worker", "w" + std::to_string(step)}});
          if (r.status == 200) claims[id] = json::parse(r.body);
          break;
        }
        case 5: {
          auto c = claims.find(id);
          if (c == claims.end()) break;
          json body = {{"wake_id", c->second["wake_id"]}, {"generation", c->second["generation"]}};
          const std::string stream = streams[pick(streams.size())];
          auto d = registry_.Describe(StreamScope::Global(), stream);
          if (d && pick(2) == 0) {
            body["acks"] = {{{"stream", stream}, {"offset", FormatOffset(d->next_offset - 1)}}};
          }
          if (pick(2) == 0) body["done"] = true;
          CallOn(node, "POST", sub + (pick(5) == 0 ? "/release" : "/ack"), body,
                 c->second["token"]);
          break;
        }
        case 6:
        case 7:
          AppendOn(node, streams[pick(streams.size())], R"({"step":)" + std::to_string(step) + "}");
          break;
        case 8:
          reply_ = pick(3) == 0   ? WebhookReply{true, 500, "", ""}
                   : pick(2) == 0 ? WebhookReply{true, 200, R"({"done":true})", ""}
                                  : WebhookReply{true, 200, "{}", ""};
          node.Tick();
          node.RunDeliveries();
          break;
        default: clock_.Advance(1 + pick(700)); break;
      }
      auto state = registry_.Describe(StreamScope::Global(), "__ds/subscriptions");
      if (state && state->head_offset > last_head) {
        ++compactions;
        last_head = state->head_offset;
      }
      // Each node signs webhooks with its own key unless given the same one
      // (--webhook-signing-key).
      auto state_of = [](const HttpResponse& r) {
        json body = r.status == 200 ? json::parse(r.body) : json();
        if (body.is_object() && body["webhook"].is_object())
          body["webhook"]["signing"].erase("kid");
        return std::to_string(r.status) + " " + body.dump();
      };
      std::unique_ptr<SubscriptionService> fresh = StartNode();
      for (const std::string& each : ids) {
        auto from_a = CallOn(*service_, "GET", "__ds/subscriptions/" + each);
        auto from_b = CallOn(*b, "GET", "__ds/subscriptions/" + each);
        auto from_fresh = CallOn(*fresh, "GET", "__ds/subscriptions/" + each);
        ASSERT_EQ(state_of(from_a), state_of(from_fresh)) << "seed " << seed << " step " << step;
        ASSERT_EQ(state_of(from_b), state_of(from_fresh)) << "seed " << seed << " step " << step;
      }
    }
    EXPECT_GE(compactions, 3) << "seed " << seed << ": the state stream was rarely compacted";
    b.reset();
    service_.reset();
  }
}

// A store shared with other nodes, as PostgreSQL is.
class SharedMemoryStore : public testing::ForwardingStore {
 public:
  bool SharedWithOtherNodes() const override { return true; }
};

// Nodes sign webhooks with their own keys (unless given one key file). On a shared store each
// node records its public key in the state stream, so the key set any node serves verifies a
// delivery signed by any other node, and a node started later is listed too.
TEST(SubscriptionKeysTest, EveryNodesKeySetListsEveryNodesKey) {
  ManualClock clock(1778324210000);
  StreamRegistry registry(std::make_unique<SharedMemoryStore>(), &clock);
  SubscriptionOptions options;
  options.start_threads = false;
  auto a = SubscriptionService::Create(registry, options);
  auto b = SubscriptionService::Create(registry, options);
  ASSERT_TRUE(a.ok() && b.ok());
  auto jwks_of = [](SubscriptionService& node) {
    HttpRequest request;
    request.method = "GET";
    request.path = "/v1/stream/__ds/jwks.json";
    auto r = node.Handle(ParseRoute(request.path, true), request);
    EXPECT_EQ(r.status, 200);
    return r.body;
  };
  auto kids = [](const std::string& jwks) {
    std::set<std::string> out;
    const json doc = json::parse(jwks);
    for (const auto& key : doc["keys"]) out.insert(key["kid"].get<std::string>());
    return out;
  };
  // Each node's own key comes first; both list both.
  const std::string a_keys = jwks_of(**a);
  const std::string b_keys = jwks_of(**b);
  ASSERT_EQ(kids(a_keys).size(), 2u) << a_keys;
  EXPECT_EQ(kids(a_keys), kids(b_keys));
  const std::string a_kid = json::parse(a_keys)["keys"][0]["kid"];
  const std::string b_kid = json::parse(b_keys)["keys"][0]["kid"];
  EXPECT_NE(a_kid, b_kid);

  // A third node C delivers a webhook signed with its own key.
  std::vector<WebhookPost> posts;
  SubscriptionOptions recording = options;
  recording.allow_localhost_webhooks = true;
  recording.poster = [&posts](const WebhookPost& post) {
    posts.push_back(post);
    return WebhookReply{true, 200, "{}", ""};
  };
  auto c = SubscriptionService::Create(registry, recording);
  ASSERT_TRUE(c.ok());
  CreateStreamOptions create;
  create.content_type = "application/json";
  ASSERT_TRUE(registry.CreateStream(StreamScope::Global(), "events/a", create).ok());
  HttpRequest put;
  put.method = "PUT";
  put.path = "/v1/stream/__ds/subscriptions/h";
  put.headers["host"] = "streams.test";
  put.body = json{{"type", "webhook"},
                  {"pattern", "events/*"},
                  {"webhook", {{"url", "http://localhost:9/hook"}}}}
                 .dump();
  ASSERT_EQ((*c)->Handle(ParseRoute(put.path, true), put).status, 201);
  ASSERT_TRUE(
      registry.Append(StreamScope::Global(), "events/a", std::nullopt, "{}", clock.NowMs()).ok());
  (*c)->NoteWrite(ParseRoute("/v1/stream/events/a", true));
  (*c)->Tick();
  (*c)->RunDeliveries();
  ASSERT_EQ(posts.size(), 1u);
  std::string header;
  for (const auto& [name, value] : posts[0].headers) {
    if (name == "Webhook-Signature") header = value;
  }
  // C started after A and B: their key sets list it once they read the state again.
  const std::string b_now = jwks_of(**b);
  EXPECT_EQ(kids(b_now).size(), 3u) << b_now;
  EXPECT_TRUE(VerifyWithJwks(b_now, header, posts[0].body));
  EXPECT_FALSE(VerifyWithJwks(b_keys, header, posts[0].body)) << "B's earlier set knew C's key";
}

// Two services over one store are two nodes behind a load balancer: a subscription made
// through one is seen by the other, one wake is issued for pending work both see, a claim
// through one node fences claims through the other, and tokens minted by one are accepted by
// the other.
TEST_F(SubscriptionServiceTest, TwoNodesShareSubscriptionsClaimsAndTokens) {
  Start();
  std::unique_ptr<SubscriptionService> b = StartNode();
  CreateStream("wake/pool");
  CreateStream("events/a");
  ASSERT_EQ(Call("PUT", "__ds/subscriptions/p1", PullSub("p1")).status, 201);
  ASSERT_EQ(CallOn(*b, "GET", "__ds/subscriptions/p1").status, 200);
  EXPECT_EQ(CallOn(*b, "PUT", "__ds/subscriptions/p1", PullSub("p1")).status, 200);

  // An append through B; both engines run; one wake event.
  AppendOn(*b, "events/a", R"({"n":1})");
  b->Tick();
  service_->Tick();
  b->Tick();
  ASSERT_EQ(WakeEvents("wake/pool").size(), 1u);

  auto claim = Call("POST", "__ds/subscriptions/p1/claim", {{"worker", "w1"}});
  ASSERT_EQ(claim.status, 200) << claim.body;
  json claimed = json::parse(claim.body);
  EXPECT_EQ(claimed["generation"], WakeEvents("wake/pool")[0]["generation"]);
  auto second = CallOn(*b, "POST", "__ds/subscriptions/p1/claim", {{"worker", "w2"}});
  ASSERT_EQ(second.status, 409) << second.body;
  EXPECT_EQ(json::parse(second.body)["error"]["code"], "ALREADY_CLAIMED");
  EXPECT_EQ(json::parse(second.body)["error"]["current_holder"], "w1");

  // A heartbeat through B with A's token extends the lease on both nodes.
  json heartbeat = {{"wake_id", claimed["wake_id"]}, {"generation", claimed["generation"]}};
  clock_.Advance(800);
  EXPECT_EQ(CallOn(*b, "POST", "__ds/subscriptions/p1/ack", heartbeat, claimed["token"]).status,
            200);
  clock_.Advance(800);
  service_->Tick();
  EXPECT_EQ(Call("POST", "__ds/subscriptions/p1/claim", {{"worker", "w3"}}).status, 409);

  // Done through B; A reads the acked offset.
  json done = heartbeat;
  done["acks"] = {{{"stream", "events/a"}, {"offset", FormatOffset(1)}}};
  done["done"] = true;
  auto finished = CallOn(*b, "POST", "__ds/subscriptions/p1/ack", done, claimed["token"]);
  ASSERT_EQ(finished.status, 200) << finished.body;
  EXPECT_EQ(json::parse(finished.body)["next_wake"], false);
  json got = json::parse(Call("GET", "__ds/subscriptions/p1").body);
  EXPECT_EQ(got["streams"][0]["acked_offset"], FormatOffset(1));
  // The finished wake is fenced on both nodes.
  EXPECT_EQ(Call("POST", "__ds/subscriptions/p1/ack", done, claimed["token"]).status, 409);

  // A deletion through B is seen by A.
  EXPECT_EQ(CallOn(*b, "DELETE", "__ds/subscriptions/p1").status, 204);
  EXPECT_EQ(Call("GET", "__ds/subscriptions/p1").status, 404);
}

// A stream created and written through node B before B read a pattern subscription made
// through node A is not linked by that write (B knew no subscription). When B reads the
// subscription it links such streams from offset zero, so the write still wakes it.
TEST_F(SubscriptionServiceTest, ANodeLinksStreamsItWroteBeforeItSawANewSubscription) {
  Start();
  std::unique_ptr<SubscriptionService> b = StartNode();
  CreateStream("wake/pool");
  CreateStream("events/old");
  Append("events/old", R"({"n":0})");
  ASSERT_EQ(CallOn(*b, "GET", "__ds/subscriptions/p1").status, 404);
  ASSERT_EQ(Call("PUT", "__ds/subscriptions/p1", PullSub("p1")).status, 201);
  CreateStream("events/late");
  AppendOn(*b, "events/late", R"({"n":1})");
  b->Tick();
  auto wakes = WakeEvents("wake/pool");
  ASSERT_EQ(wakes.size(), 1u);
  EXPECT_EQ(wakes[0]["stream"], "events/late");
  json got = json::parse(Call("GET", "__ds/subscriptions/p1").body);
  ASSERT_EQ(got["streams"].size(), 2u) << got.dump();
  // events/old existed when A created the subscription: linked at its tail by A. events/late:
  // linked by B from offset zero.
  EXPECT_EQ(got["streams"][0]["path"], "events/late");
  EXPECT_EQ(got["streams"][0]["acked_offset"], FormatOffset(0));
  EXPECT_EQ(got["streams"][1]["path"], "events/old");
  EXPECT_EQ(got["streams"][1]["acked_offset"], FormatOffset(1));
}

// A node whose view is stale cannot overwrite another node's change: its write is refused, it
// reads the change and applies its own on top. Without the conditional state append, A's link
// of events/b would drop the link B added just before.
TEST_F(SubscriptionServiceTest, TwoNodesNeverLoseEachOthersChanges) {
  Start();
  std::unique_ptr<SubscriptionService> b = StartNode();
  CreateStream("wake/pool");
  ASSERT_EQ(Call("PUT", "__ds/subscriptions/p1", PullSub("p1")).status, 201);
  ASSERT_EQ(CallOn(*b, "POST", "__ds/subscriptions/p1/streams", {{"streams", {"other/x"}}}).status,
            204);
  // A has not read B's change; a write matching the pattern links events/b through A.
  CreateStream("events/b");
  Append("events/b", R"({"n":1})");
  for (SubscriptionService* node : {service_.get(), b.get()}) {
    json got = json::parse(CallOn(*node, "GET", "__ds/subscriptions/p1").body);
    std::vector<std::string> linked;
    for (const json& link : got["streams"]) linked.push_back(link["path"]);
    EXPECT_EQ(linked, (std::vector<std::string>{"events/b", "other/x"})) << got.dump();
  }
}

// One node compacts the state stream past another node's read position (pruning a tombstone
// the other never read); the other reloads from the stream's head and still sees the deletion.
TEST_F(SubscriptionServiceTest, ANodeBehindACompactionReloadsFromTheHead) {
  Start();
  std::unique_ptr<SubscriptionService> b = StartNode();
  ASSERT_EQ(Call("PUT", "__ds/subscriptions/gone", PullSub("gone")).status, 201);
  ASSERT_EQ(Call("PUT", "__ds/subscriptions/kept", StreamsSub("s/0")).status, 201);
  ASSERT_EQ(CallOn(*b, "GET", "__ds/subscriptions/gone").status, 200);
  ASSERT_EQ(Call("DELETE", "__ds/subscriptions/gone").status, 204);
  for (int i = 1; i <= 300; ++i) {
    ASSERT_EQ(
        Call("POST", "__ds/subscriptions/kept/streams", {{"streams", {"s/" + std::to_string(i)}}})
            .status,
        204);
  }
  auto state = registry_.Describe(StreamScope::Global(), "__ds/subscriptions");
  ASSERT_TRUE(state.has_value());
  ASSERT_LT(state->event_count, 300u) << "the state stream was not compacted";
  EXPECT_EQ(CallOn(*b, "GET", "__ds/subscriptions/gone").status, 404);
  json kept = json::parse(CallOn(*b, "GET", "__ds/subscriptions/kept").body);
  EXPECT_EQ(kept["streams"].size(), 301u);
}

TEST_F(SubscriptionServiceTest, BadRequestsGetClearErrors) {
  Start();
  auto bad_url = Call("PUT", "__ds/subscriptions/x",
                      {{"type", "webhook"},
                       {"pattern", "a/*"},
                       {"webhook", {{"url", "https://169.254.169.254/"}}}});
  EXPECT_EQ(bad_url.status, 400);
  EXPECT_EQ(json::parse(bad_url.body)["error"]["code"], "WEBHOOK_URL_REJECTED");
  EXPECT_EQ(Call("PUT", "__ds/subscriptions/x", {{"type", "pull-wake"}, {"pattern", "a/*"}}).status,
            400);
  EXPECT_EQ(Call("PUT", "__ds/subscriptions/x", {{"type", "webhook"}}).status, 400);
  EXPECT_EQ(
      Call("PUT", "__ds/subscriptions/x",
           {{"type", "pull-wake"}, {"pattern", "a/*"}, {"wake_stream", "w"}, {"lease_ttl_ms", 999}})
          .status,
      400);
  EXPECT_EQ(Call("PUT", "__ds/subscriptions/bad%id", PullSub("x")).status, 400);
  EXPECT_EQ(Call("GET", "__ds/subscriptions/missing").status, 404);
  EXPECT_EQ(Call("GET", "__ds/other").status, 404);
  HttpRequest garbage;
  garbage.method = "PUT";
  garbage.path = "/v1/stream/__ds/subscriptions/x";
  garbage.body = "{not json";
  EXPECT_EQ(service_->Handle(ParseRoute(garbage.path, true), garbage).status, 400);
}

}  // namespace
}  // namespace runnel::server
