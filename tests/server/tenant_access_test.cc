// Tenant isolation and authentication over HTTP (SEMANTICS Z1-Z4), and consumer groups over
// HTTP (C2, C5, C9, P7, N1; catch-up, long-poll and SSE read-next; group requests off the io
// thread), against an in-process server on a free loopback port with a token file in
// a temporary directory.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/token_store.h"
#include "runnel/store.h"
#include "server/group_service.h"
#include "server/http_server.h"
#include "server/tenant_quota.h"
#include "support/forwarding_store.h"
#include "support/loopback_socket.h"

namespace runnel::server {
namespace {

using json = nlohmann::json;

struct Response {
  int status = 0;
  std::string head;  // status line and headers
  std::string body;
};

// One request on a fresh blocking loopback connection, answered with Connection: close.
Response Send(uint16_t port, const std::string& method, const std::string& target,
              const std::vector<std::string>& headers = {}, const std::string& body = "") {
  Response r;
  int fd = testing::ConnectLoopback(port, 10);
  if (fd < 0) return r;
  std::string text = method + " " + target + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n";
  for (const auto& h : headers) text += h + "\r\n";
  if (!body.empty() || method == "POST" || method == "PUT") {
    text += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  }
  text += "\r\n" + body;
  testing::SendAll(fd, text);
  std::string all;
  char chunk[65536];
  for (;;) {  // the server closes after the response; a HEAD response has no body to wait for
    ssize_t n = ::recv(fd, chunk, sizeof(chunk), 0);
    if (n <= 0) break;
    all.append(chunk, static_cast<size_t>(n));
  }
  ::close(fd);
  size_t end = all.find("\r\n\r\n");
  if (end == std::string::npos || all.size() < 12) return r;
  r.head = all.substr(0, end);
  r.body = all.substr(end + 4);
  r.status = std::stoi(all.substr(9, 3));
  return r;
}

bool HasHeader(const Response& r, std::string_view name) {
  std::string lower = r.head;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return lower.find("\r\n" + std::string(name) + ":") != std::string::npos;
}

// The value of header `name` (lower-case) in a response head, or "".
std::string HeaderValue(const Response& r, std::string_view name) {
  std::string lower = r.head;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const std::string key = "\r\n" + std::string(name) + ":";
  const size_t at = lower.find(key);
  if (at == std::string::npos) return "";
  size_t from = at + key.size();
  while (from < r.head.size() && r.head[from] == ' ') ++from;
  return r.head.substr(from, r.head.find("\r\n", from) - from);
}

class TenantServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("runnel_tenant_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    tokens_path_ = (dir_ / "tokens").string();
  }
  void TearDown() override {
    if (server_) {
      server_->Stop();
      thread_.join();
    }
    std::filesystem::remove_all(dir_);
  }

  std::string NewToken(std::optional<std::string> tenant, bool cross,
                       std::optional<uint64_t> expires_at_ms = std::nullopt) {
    auto store = TokenStore::Open(tokens_path_);
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    TokenGrant grant;
    grant.tenant = std::move(tenant);
    grant.cross_tenant = cross;
    grant.expires_at_ms = expires_at_ms;
    auto token = (*store)->Create(grant);
    EXPECT_TRUE(token.ok()) << token.status().ToString();
    return *token;
  }

  // auth: true = an AccessGate over the token file (re-read on every request).
  void StartServer(bool auth, uint64_t long_poll_timeout_ms = 200,
                   size_t max_groups_per_stream = GroupService::kDefaultMaxGroupsPerStream,
                   uint64_t sse_max_duration_ms = 1000,
                   std::set<std::string> public_cache_scopes = {}) {
    ServerOptions options;
    options.public_cache_scopes = std::move(public_cache_scopes);
    options.host = "127.0.0.1";
    options.port = 0;
    options.threads = 2;
    options.max_groups_per_stream = max_groups_per_stream;
    options.service.long_poll_timeout_ms = long_poll_timeout_ms;
    options.sse_max_duration_ms = sse_max_duration_ms;
    if (auth) {
      AccessOptions access;
      access.tokens_path = tokens_path_;
      access.reload_interval_ms = 0;
      auto gate = AccessGate::Open(access);
      ASSERT_TRUE(gate.ok()) << gate.status().ToString();
      options.access = *gate;
    }
    StreamRegistry registry;
    SubscriptionOptions subscriptions;
    subscriptions.allow_localhost_webhooks = true;
    auto service = SubscriptionService::Create(registry, subscriptions);
    ASSERT_TRUE(service.ok()) << service.status().ToString();
    options.subscriptions = std::move(*service);
    auto server = HttpServer::Start(registry, options);
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(*server);
    thread_ = std::thread([this] { server_->Run(); });
  }
  uint16_t port() const { return server_->port(); }

  static std::string Bearer(const std::string& token) { return "Authorization: Bearer " + token; }

  std::filesystem::path dir_;
  std::string tokens_path_;
  std::unique_ptr<HttpServer> server_;
  std::thread thread_;
};

// A catch-up read that needed a token is `private` (a shared cache must not give it to another
// caller) unless the operator declared its scope public; on an open server, and for a declared
// scope, it stays `public` so caches in front of runnel fan out reads.
TEST_F(TenantServerTest, ReadsThatNeededATokenArePrivateUnlessTheScopeIsDeclaredPublic) {
  const std::string acme = NewToken("acme", false);
  const std::string globex = NewToken("globex", false);
  StartServer(true, 200, GroupService::kDefaultMaxGroupsPerStream, 1000, {"tenant:globex"});
  for (const auto& [tenant, token] : {std::pair{"acme", acme}, std::pair{"globex", globex}}) {
    const std::string path = std::string("/v1/tenants/") + tenant + "/stream/s";
    ASSERT_EQ(Send(port(), "PUT", path, {Bearer(token), "Content-Type: text/plain"}).status, 201);
    ASSERT_EQ(Send(port(), "POST", path, {Bearer(token), "Content-Type: text/plain"}, "x").status,
              204);
  }
  Response private_read =
      Send(port(), "GET", "/v1/tenants/acme/stream/s?offset=-1", {Bearer(acme)});
  ASSERT_EQ(private_read.status, 200);
  EXPECT_EQ(HeaderValue(private_read, "cache-control"),
            "private, max-age=60, stale-while-revalidate=300");
  // Accept-Encoding is merged into the same field (compressed answers differ by coding).
  EXPECT_EQ(HeaderValue(private_read, "vary"), "Authorization, Accept-Encoding");
  Response public_read =
      Send(port(), "GET", "/v1/tenants/globex/stream/s?offset=-1", {Bearer(globex)});
  ASSERT_EQ(public_read.status, 200);
  EXPECT_EQ(HeaderValue(public_read, "cache-control"),
            "public, max-age=60, stale-while-revalidate=300");
}

TEST_F(TenantServerTest, AnOpenServersReadsStayPublic) {
  StartServer(false);
  ASSERT_EQ(Send(port(), "PUT", "/v1/stream/s", {"Content-Type: text/plain"}, "x").status, 201);
  Response r = Send(port(), "GET", "/v1/stream/s?offset=-1", {});
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(HeaderValue(r, "cache-control"), "public, max-age=60, stale-while-revalidate=300");
}

// Strings only the owners may ever see.
constexpr const char* kAcmeSecretName = "hidden-acme-name";
constexpr const char* kAcmeData = "acme-payload-7f3a";
constexpr const char* kGlobexSecretName = "hidden-globex-name";

struct Caller {
  std::string label;
  std::vector<std::string> headers;
  // Expected for acme's streams, globex's streams and global streams: 0 = allowed (neither 401
  // nor 403), else the exact status.
  int acme = 0;
  int globex = 0;
  int global = 0;
};

struct Op {
  std::string label;
  std::string method;
  // Target for a stream URL path "<scope-prefix>/stream/<name>" (groups use the group URL).
  bool groups = false;
  std::string query;
  std::vector<std::string> headers;
  std::string body;
};

TEST_F(TenantServerTest, IsolationMatrix) {
  const std::string acme = NewToken("acme", false);
  const std::string globex = NewToken("globex", false);
  const std::string platform = NewToken(std::nullopt, false);
  const std::string acme_cross = NewToken("acme", true);
  const std::string platform_cross = NewToken(std::nullopt, true);
  const std::string expired = NewToken("acme", false, /*expires_at_ms=*/1);
  StartServer(true);

  // Seed: acme and globex streams, through their owners.
  auto seed = [&](const std::string& token, const std::string& path, const std::string& data) {
    auto put = Send(port(), "PUT", path, {Bearer(token), "Content-Type: text/plain"});
    ASSERT_EQ(put.status, 201) << path << " " << put.body;
    auto post = Send(port(), "POST", path, {Bearer(token), "Content-Type: text/plain"}, data);
    ASSERT_EQ(post.status, 204) << path << " " << post.body;
  };
  seed(acme, "/v1/tenants/acme/stream/s", kAcmeData);
  seed(acme, std::string("/v1/tenants/acme/stream/") + kAcmeSecretName, kAcmeData);
  seed(globex, "/v1/tenants/globex/stream/s", "globex-data");
  seed(globex, std::string("/v1/tenants/globex/stream/") + kGlobexSecretName, "globex-data");
  seed(platform, "/v1/stream/s", "global-data");
  // Groups on acme's stream, so group listings have something to leak.
  ASSERT_EQ(Send(port(), "POST", "/v1/groups/tenants/acme/stream/s?group=acme-group&ack=1",
                 {Bearer(acme)})
                .status,
            200);

  const std::vector<Caller> callers = {
      {"same tenant (acme)", {Bearer(acme)}, 0, 403, 403},
      {"other tenant (globex)", {Bearer(globex)}, 403, 0, 403},
      {"platform", {Bearer(platform)}, 403, 403, 0},
      {"tenant with cross-tenant capability", {Bearer(acme_cross)}, 0, 0, 0},
      {"platform with cross-tenant capability", {Bearer(platform_cross)}, 0, 0, 0},
      {"no token", {}, 401, 401, 401},
      {"non-bearer scheme", {"Authorization: Basic dXNlcjpwYXNz"}, 401, 401, 401},
      {"malformed token", {Bearer("not-a-token")}, 403, 403, 403},
      {"unknown token", {Bearer("rnl_000000000000_" + std::string(43, 'A'))}, 403, 403, 403},
      {"expired token", {Bearer(expired)}, 403, 403, 403},
  };
  // Read-only or idempotent operations first; each is tried on an existing and a missing
  // stream, so a denial can be compared across the two (Z4).
  const std::vector<Op> ops = {
      {"read", "GET", false, "?offset=-1", {}, ""},
      {"head", "HEAD", false, "", {}, ""},
      {"append", "POST", false, "", {"Content-Type: text/plain"}, "x"},
      {"create (idempotent)", "PUT", false, "", {"Content-Type: text/plain"}, ""},
      {"group list", "GET", true, "", {}, ""},
      {"group read-next", "GET", true, "?group=g", {}, ""},
      // The live forms authorize before they wait (g has unread records: no long-poll wait;
      // an allowed SSE read lasts the test server's 1 s).
      {"group read-next long-poll", "GET", true, "?group=g&live=long-poll", {}, ""},
      {"group read-next sse", "GET", true, "?group=g&live=sse", {}, ""},
      {"group ack", "POST", true, "?group=g&ack=1", {}, ""},
      {"group prune", "POST", true, "?prune=0", {}, ""},
      {"retention change", "PATCH", false, "", {"Stream-Retention-Max-Events: 1000"}, ""},
      {"conditional append",
       "POST",
       false,
       "",
       {"Content-Type: text/plain", "Stream-Expected-Offset: 0000000000000000_0000000000000000"},
       "y"},
  };
  const std::vector<std::pair<std::string, int Caller::*>> scopes = {
      {"tenants/acme/", &Caller::acme},
      {"tenants/globex/", &Caller::globex},
      {"", &Caller::global},
  };
  auto check_no_leak = [](const Response& r, const std::string& context, bool acme_visible,
                          bool globex_visible) {
    const std::string all = r.head + "\n" + r.body;
    if (!acme_visible) {
      EXPECT_EQ(all.find(kAcmeSecretName), std::string::npos) << context << "\n" << all;
      EXPECT_EQ(all.find(kAcmeData), std::string::npos) << context << "\n" << all;
      EXPECT_EQ(all.find("acme-group"), std::string::npos) << context << "\n" << all;
    }
    if (!globex_visible) {
      EXPECT_EQ(all.find(kGlobexSecretName), std::string::npos) << context << "\n" << all;
      EXPECT_EQ(all.find("globex-data"), std::string::npos) << context << "\n" << all;
    }
  };

  int checked = 0;
  for (const Caller& caller : callers) {
    const bool sees_acme = caller.acme == 0;
    const bool sees_globex = caller.globex == 0;
    for (const auto& [prefix, field] : scopes) {
      const int expected = caller.*field;
      for (const Op& op : ops) {
        Response answers[2];
        for (int missing = 0; missing < 2; ++missing) {
          const std::string name = missing ? "no-such-stream" : "s";
          const std::string target = std::string(op.groups ? "/v1/groups/" : "/v1/") + prefix +
                                     "stream/" + name + op.query;
          std::vector<std::string> headers = caller.headers;
          headers.insert(headers.end(), op.headers.begin(), op.headers.end());
          Response r = Send(port(), op.method, target, headers, op.body);
          const std::string context = caller.label + " " + op.label + " " + op.method + " " +
                                      target + " -> " + std::to_string(r.status);
          ++checked;
          if (expected == 0) {
            EXPECT_NE(r.status, 0) << context;
            EXPECT_NE(r.status, 401) << context;
            EXPECT_NE(r.status, 403) << context;
            // What needed a token is never offered to shared caches.
            EXPECT_EQ(HeaderValue(r, "cache-control").find("public"), std::string::npos)
                << context << "\n"
                << r.head;
            if (op.label == "read" && r.status == 200) {
              EXPECT_TRUE(HeaderValue(r, "cache-control").starts_with("private")) << context;
            }
          } else {
            EXPECT_EQ(r.status, expected) << context << "\n" << r.body;
            if (expected == 401) {
              EXPECT_TRUE(HasHeader(r, "www-authenticate")) << context;
            }
          }
          check_no_leak(r, context, sees_acme, sees_globex);
          answers[missing] = r;
        }
        if (expected != 0 && op.method != "HEAD") {
          // The same denial whether or not the stream exists, apart from the name sent.
          std::string existing = answers[0].body;
          const std::string absent = answers[1].body;
          for (size_t at; (at = existing.find("'s'")) != std::string::npos;) {
            existing.replace(at, 3, "'no-such-stream'");
          }
          EXPECT_EQ(existing, absent) << caller.label << " " << op.label << " " << prefix;
        }
        EXPECT_EQ(answers[0].status == 403 || answers[0].status == 401,
                  answers[1].status == 403 || answers[1].status == 401)
            << caller.label << " " << op.label << " " << prefix;
      }
    }

    // Listings: the tenant form and the global form.
    for (const auto& [prefix, field] : scopes) {
      const int expected = caller.*field;
      const std::string target = prefix.empty()
                                     ? "/v1/streams"
                                     : "/v1/" + prefix.substr(0, prefix.size() - 1) + "/streams";
      Response r = Send(port(), "GET", target, caller.headers);
      const std::string context = caller.label + " list " + target;
      ++checked;
      if (expected == 0) {
        EXPECT_EQ(r.status, 200) << context << "\n" << r.body;
      } else {
        EXPECT_EQ(r.status, expected) << context << "\n" << r.body;
      }
      check_no_leak(r, context, sees_acme && prefix == "tenants/acme/",
                    sees_globex && prefix == "tenants/globex/");
    }

    // Forks into the caller's allowed scope from acme's stream (existing and missing).
    if (caller.globex == 0 && caller.acme != 0) {
      Response from_existing =
          Send(port(), "PUT", "/v1/tenants/globex/stream/fork1",
               caller.headers.empty() ? std::vector<std::string>{}
                                      : std::vector<std::string>{caller.headers[0],
                                                                 "Stream-Forked-From: "
                                                                 "/v1/tenants/acme/stream/s"});
      EXPECT_EQ(from_existing.status, 403) << caller.label << " " << from_existing.body;
      check_no_leak(from_existing, caller.label + " fork", false, true);
    }

    // /metrics: the platform or a cross-tenant caller only.
    Response metrics = Send(port(), "GET", "/metrics", caller.headers);
    EXPECT_EQ(metrics.status, caller.global == 0 ? 200 : (caller.global == 401 ? 401 : 403))
        << caller.label;
  }
  EXPECT_GT(checked, 400);

  // Destructive operations last: denied deletes leave the stream in place.
  for (const std::string& token : {globex, platform, expired}) {
    Response del = Send(port(), "DELETE", "/v1/tenants/acme/stream/s", {Bearer(token)});
    EXPECT_EQ(del.status, 403);
  }
  EXPECT_EQ(Send(port(), "DELETE", "/v1/tenants/acme/stream/s", {}).status, 401);
  Response still = Send(port(), "GET", "/v1/tenants/acme/stream/s?offset=-1", {Bearer(acme)});
  EXPECT_EQ(still.status, 200);
  EXPECT_NE(still.body.find(kAcmeData), std::string::npos);
  EXPECT_EQ(Send(port(), "DELETE", "/v1/tenants/acme/stream/s", {Bearer(acme)}).status, 204);
  // A cross-tenant caller may fork across scopes.
  Response fork = Send(port(), "PUT", "/v1/tenants/globex/stream/copy",
                       {Bearer(acme_cross), "Stream-Forked-From: /v1/tenants/acme/stream/" +
                                                std::string(kAcmeSecretName)});
  EXPECT_EQ(fork.status, 201) << fork.body;
}

TEST_F(TenantServerTest, HealthzAndPreflightNeedNoToken) {
  NewToken("acme", false);
  StartServer(true);
  EXPECT_EQ(Send(port(), "GET", "/healthz").status, 200);
  Response preflight = Send(port(), "OPTIONS", "/v1/tenants/acme/stream/s",
                            {"Origin: http://example.test", "Access-Control-Request-Method: POST"});
  EXPECT_NE(preflight.status, 401);
  EXPECT_NE(preflight.status, 403);
}

// The dashboard's files hold no data and load without a token; what the page then asks the API
// for is gated like any other request (Z4).
TEST_F(TenantServerTest, DashboardFilesNeedNoTokenButItsApiCallsDoZ4) {
  const std::string platform = NewToken(std::nullopt, true);
  StartServer(true);
  EXPECT_EQ(Send(port(), "GET", "/").status, 200);
  EXPECT_EQ(Send(port(), "GET", "/ui/app.js").status, 200);
  EXPECT_EQ(Send(port(), "GET", "/v1/streams").status, 401);
  EXPECT_EQ(Send(port(), "GET", "/metrics").status, 401);
  EXPECT_EQ(Send(port(), "GET", "/v1/streams", {Bearer(platform)}).status, 200);
  EXPECT_EQ(Send(port(), "GET", "/metrics", {Bearer(platform)}).status, 200);
}

TEST_F(TenantServerTest, OpenWithoutTokensAndTokenFileReloaded) {
  StartServer(true);
  // No tokens: open, tenant routes work for everyone.
  EXPECT_EQ(Send(port(), "PUT", "/v1/tenants/acme/stream/s", {"Content-Type: text/plain"}).status,
            201);
  EXPECT_EQ(Send(port(), "GET", "/v1/tenants/acme/streams").status, 200);
  // A token created while running takes effect without a restart.
  const std::string acme = NewToken("acme", false);
  Response anonymous = Send(port(), "GET", "/v1/tenants/acme/stream/s?offset=-1");
  EXPECT_EQ(anonymous.status, 401);
  EXPECT_TRUE(HasHeader(anonymous, "www-authenticate"));
  auto body = json::parse(anonymous.body, nullptr, false);
  ASSERT_TRUE(body.is_object());
  EXPECT_EQ(body["error"]["code"], "unauthenticated");
  EXPECT_EQ(Send(port(), "GET", "/v1/tenants/acme/stream/s?offset=-1", {Bearer(acme)}).status, 200);
  // Revoking the last token, or deleting the file, does not open the server again.
  {
    auto store = TokenStore::Open(tokens_path_);
    ASSERT_TRUE(store.ok());
    auto listed = (*store)->List();
    ASSERT_EQ(listed.size(), 1u);
    ASSERT_TRUE((*store)->Revoke(listed[0].id).ok());
  }
  EXPECT_EQ(Send(port(), "GET", "/v1/tenants/acme/stream/s?offset=-1").status, 401);
  EXPECT_EQ(Send(port(), "GET", "/v1/tenants/acme/stream/s?offset=-1", {Bearer(acme)}).status, 403);
  std::filesystem::remove(tokens_path_);
  EXPECT_EQ(Send(port(), "GET", "/v1/tenants/acme/stream/s?offset=-1").status, 401);
}

// A live SSE response ends once its token is revoked (the token file is watched while it runs),
// not when its --sse-max-duration-ms is up; one whose token stays valid runs on.
TEST_F(TenantServerTest, RevokingATokenEndsItsLiveSseResponses) {
  const std::string revoked = NewToken("acme", false);
  const std::string kept = NewToken(std::nullopt, true);
  StartServer(true, 200, GroupService::kDefaultMaxGroupsPerStream, /*sse_max_duration_ms=*/60000);
  ASSERT_EQ(Send(port(), "PUT", "/v1/tenants/acme/stream/s",
                 {Bearer(revoked), "Content-Type: text/plain"})
                .status,
            201);
  // Reads from `fd` until what arrived holds `needle` (or the connection ends or times out).
  auto read_until = [](int fd, std::string_view needle) {
    std::string got;
    char buf[4096];
    while (got.find(needle) == std::string::npos) {
      const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
      if (n <= 0) break;
      got.append(buf, static_cast<size_t>(n));
    }
    return got;
  };
  // Opens an SSE response with `token`; returns its socket once the head has arrived.
  auto open_sse = [&](const std::string& token) {
    int fd = testing::ConnectLoopback(port(), 20);
    EXPECT_GE(fd, 0);
    EXPECT_TRUE(testing::SendAll(fd,
                                 "GET /v1/tenants/acme/stream/s?offset=now&live=sse HTTP/1.1\r\n"
                                 "Host: x\r\n" +
                                     Bearer(token) + "\r\n\r\n"));
    const std::string head = read_until(fd, "\r\n\r\n");
    EXPECT_EQ(head.rfind("HTTP/1.1 200", 0), 0u) << head;
    return fd;
  };
  // Reads until the server ends the response (the last chunk, then the close), or `seconds`.
  auto ended_within = [](int fd, int seconds) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
    char buf[4096];
    while (std::chrono::steady_clock::now() < deadline) {
      const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
      if (n == 0) return true;
      if (n < 0) return false;  // the receive timeout: still open
    }
    return false;
  };
  const int doomed = open_sse(revoked);
  const int alive = open_sse(kept);
  {
    auto store = TokenStore::Open(tokens_path_);
    ASSERT_TRUE(store.ok());
    for (const auto& token : (*store)->List()) {
      if (token.grant.tenant == std::optional<std::string>("acme")) {
        ASSERT_TRUE((*store)->Revoke(token.id).ok());
      }
    }
  }
  EXPECT_TRUE(ended_within(doomed, 10)) << "the revoked token's SSE response is still open";
  ::close(doomed);
  // The other reader is still served: an append reaches it.
  ASSERT_EQ(Send(port(), "POST", "/v1/tenants/acme/stream/s",
                 {Bearer(kept), "Content-Type: text/plain"}, "after")
                .status,
            204);
  const std::string got = read_until(alive, "after");
  EXPECT_NE(got.find("after"), std::string::npos) << got;
  ::close(alive);
}

TEST_F(TenantServerTest, TenantListingShowsOnlyThatTenant) {
  const std::string acme = NewToken("acme", false);
  const std::string globex = NewToken("globex", false);
  StartServer(true);
  ASSERT_EQ(Send(port(), "PUT", "/v1/tenants/acme/stream/a1", {Bearer(acme)}).status, 201);
  ASSERT_EQ(Send(port(), "PUT", "/v1/tenants/globex/stream/g1", {Bearer(globex)}).status, 201);
  Response list = Send(port(), "GET", "/v1/tenants/acme/streams", {Bearer(acme)});
  ASSERT_EQ(list.status, 200);
  auto body = json::parse(list.body, nullptr, false);
  ASSERT_TRUE(body.is_object()) << list.body;
  ASSERT_EQ(body["streams"].size(), 1u) << list.body;
  EXPECT_EQ(body["streams"][0]["name"], "a1");
  // Prefix and pagination work in a tenant scope too.
  ASSERT_EQ(Send(port(), "PUT", "/v1/tenants/acme/stream/a2", {Bearer(acme)}).status, 201);
  ASSERT_EQ(Send(port(), "PUT", "/v1/tenants/acme/stream/b1", {Bearer(acme)}).status, 201);
  Response page = Send(port(), "GET", "/v1/tenants/acme/streams?prefix=a&limit=1", {Bearer(acme)});
  ASSERT_EQ(page.status, 200);
  auto first = json::parse(page.body, nullptr, false);
  ASSERT_TRUE(first.is_object()) << page.body;
  ASSERT_EQ(first["streams"].size(), 1u) << page.body;
  EXPECT_EQ(first["streams"][0]["name"], "a1");
  Response rest = Send(port(), "GET", "/v1/tenants/acme/streams?prefix=a&after=a1", {Bearer(acme)});
  auto second = json::parse(rest.body, nullptr, false);
  ASSERT_TRUE(second.is_object()) << rest.body;
  ASSERT_EQ(second["streams"].size(), 1u) << rest.body;
  EXPECT_EQ(second["streams"][0]["name"], "a2");
}

// --- Consumer groups over HTTP ---

class GroupHttpTest : public TenantServerTest {
 protected:
  json Call(const std::string& method, const std::string& target, int expect_status = 200) {
    Response r = Send(port(), method, target);
    EXPECT_EQ(r.status, expect_status) << method << " " << target << " " << r.body;
    auto body = json::parse(r.body, nullptr, false);
    return body.is_discarded() ? json() : body;
  }
  std::vector<uint64_t> Offsets(const json& read) {
    std::vector<uint64_t> out;
    for (const auto& e : read["events"]) out.push_back(e["offset"].get<uint64_t>());
    return out;
  }
  void Seed(const std::string& path, int n) {
    ASSERT_EQ(Send(port(), "PUT", path, {"Content-Type: application/json"}).status, 201);
    json batch = json::array();
    for (int i = 1; i <= n; ++i) batch.push_back({{"n", i}});
    ASSERT_EQ(Send(port(), "POST", path, {"Content-Type: application/json"}, batch.dump()).status,
              204);
  }
};

TEST_F(GroupHttpTest, AckIsMonotonicC2) {
  StartServer(false);
  Seed("/v1/stream/c2", 5);
  const std::string g = "/v1/groups/stream/c2?group=c1&ack=";
  EXPECT_EQ(Call("POST", g + "3")["last_acked"], 3);
  EXPECT_EQ(Call("POST", g + "1")["last_acked"], 3);
  EXPECT_EQ(Call("POST", g + "3")["last_acked"], 3);
  EXPECT_EQ(Call("POST", g + "5")["last_acked"], 5);
  // Other groups are independent (C3).
  EXPECT_EQ(Call("GET", "/v1/groups/stream/c2?group=c2")["last_acked"], 0);
  Call("POST", g + "x", 400);
  Call("POST", "/v1/groups/stream/missing?group=c1&ack=1", 404);
  Call("POST", "/v1/groups/stream/c2?group=a%00b&ack=1", 400);  // control characters
  Call("POST", "/v1/groups/stream/c2?group=a%1Bb&ack=1", 400);
}

TEST_F(GroupHttpTest, ReadNextC5) {
  StartServer(false);
  Seed("/v1/tenants/acme/stream/c5", 5);
  const std::string base = "/v1/groups/tenants/acme/stream/c5";
  Call("POST", base + "?group=A&ack=3");
  Call("POST", base + "?group=B&ack=1");
  EXPECT_EQ(Offsets(Call("GET", base + "?group=A")), (std::vector<uint64_t>{4, 5}));
  EXPECT_EQ(Offsets(Call("GET", base + "?group=B")), (std::vector<uint64_t>{2, 3, 4, 5}));
  json c = Call("GET", base + "?group=C");
  EXPECT_EQ(Offsets(c), (std::vector<uint64_t>{1, 2, 3, 4, 5}));
  EXPECT_EQ(c["events"][0]["data"], json({{"n", 1}}));
  EXPECT_EQ(c["next_ack"], 5);
  Call("POST", base + "?group=A&ack=2");
  EXPECT_EQ(Offsets(Call("GET", base + "?group=A")), (std::vector<uint64_t>{4, 5}));
  EXPECT_EQ(Offsets(Call("GET", base + "?group=B&limit=2")), (std::vector<uint64_t>{2, 3}));
  // Reads are pure (D4): reading did not move B.
  EXPECT_EQ(Call("GET", base + "?group=B")["last_acked"], 1);
}

TEST_F(GroupHttpTest, PruneWithFastAndSlowGroupsP7) {
  StartServer(false);
  Seed("/v1/stream/p7", 10);
  const std::string base = "/v1/groups/stream/p7";
  Call("POST", base + "?group=fast&ack=8");
  Call("POST", base + "?group=slow&ack=3");
  json list = Call("GET", base);
  EXPECT_EQ(list["tail"], 10);
  ASSERT_EQ(list["groups"].size(), 2u) << list.dump();
  for (const auto& g : list["groups"]) {
    if (g["group"] == "fast") {
      EXPECT_EQ(g["last_acked"], 8);
      EXPECT_EQ(g["lag"], 2);
    } else {
      EXPECT_EQ(g["group"], "slow");
      EXPECT_EQ(g["last_acked"], 3);
      EXPECT_EQ(g["lag"], 7);
    }
  }
  EXPECT_EQ(Call("POST", base + "?prune=8")["removed"], 3);
  EXPECT_EQ(Offsets(Call("GET", base + "?group=slow")),
            (std::vector<uint64_t>{4, 5, 6, 7, 8, 9, 10}));
  EXPECT_EQ(Offsets(Call("GET", base + "?group=fast")), (std::vector<uint64_t>{9, 10}));
  // P9: a repeat removes nothing and group offsets did not move.
  EXPECT_EQ(Call("POST", base + "?prune=8")["removed"], 0);
  EXPECT_EQ(Call("GET", base + "?group=slow")["last_acked"], 3);
  // The protocol read starts at the retained head.
  Response read = Send(port(), "GET", "/v1/stream/p7?offset=-1");
  EXPECT_EQ(read.status, 200);
  EXPECT_EQ(read.body.find("{\"n\":3}"), std::string::npos) << read.body;
  EXPECT_NE(read.body.find("{\"n\":4}"), std::string::npos) << read.body;
}

// Consumer groups per stream are bounded: the ack that would add one more is refused with 429;
// acks of existing groups, and groups of other streams, go on.
TEST_F(GroupHttpTest, GroupsPerStreamAreBounded) {
  StartServer(false, 200, /*max_groups_per_stream=*/2);
  Seed("/v1/stream/many", 3);
  Seed("/v1/stream/other", 1);
  Call("POST", "/v1/groups/stream/many?group=a&ack=0");
  Call("POST", "/v1/groups/stream/many?group=b&ack=1");
  json refused = Call("POST", "/v1/groups/stream/many?group=c&ack=1", 429);
  EXPECT_EQ(refused["error"]["code"], "resource_exhausted");
  EXPECT_EQ(Call("POST", "/v1/groups/stream/many?group=a&ack=2")["last_acked"], 2);
  EXPECT_EQ(Call("POST", "/v1/groups/stream/many?group=b&ack=3")["last_acked"], 3);
  Call("POST", "/v1/groups/stream/other?group=c&ack=1");
  EXPECT_EQ(Call("GET", "/v1/groups/stream/many")["groups"].size(), 2u);
}

// Deleting a stream ends the long-polls waiting on it at once (they answer 404), not at their
// timeout: the delete wakes the stream's readers like an append.
TEST_F(GroupHttpTest, DeleteEndsWaitingReadersAtOnce) {
  StartServer(false, /*long_poll_timeout_ms=*/20000);
  Seed("/v1/stream/gone", 1);
  std::vector<std::thread> readers;
  std::vector<int> statuses(2, 0);
  std::vector<double> seconds(2, 0);
  // The group's long-poll waits once the group has acked the tail.
  Call("POST", "/v1/groups/stream/gone?group=g&ack=1");
  const std::vector<std::string> waits = {"/v1/stream/gone?offset=now&live=long-poll",
                                          "/v1/groups/stream/gone?group=g&live=long-poll"};
  for (size_t i = 0; i < waits.size(); ++i) {
    readers.emplace_back([&, i] {
      const auto start = std::chrono::steady_clock::now();
      statuses[i] = Send(port(), "GET", waits[i]).status;
      seconds[i] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(Send(port(), "DELETE", "/v1/stream/gone").status, 204);
  for (auto& t : readers) t.join();
  for (size_t i = 0; i < waits.size(); ++i) {
    EXPECT_EQ(statuses[i], 404) << waits[i];
    EXPECT_LT(seconds[i], 10.0) << waits[i] << " waited for its timeout";
  }
}

// A prune that empties the stream: a reader from the beginning stands at the tail, past the
// removed offsets (not at 0, which would be read again and again, and later answered 410).
TEST_F(GroupHttpTest, ReadOfAStreamPrunedEmptyStandsAtTheTailP8) {
  StartServer(false);
  Seed("/v1/stream/p8", 3);
  EXPECT_EQ(Call("POST", "/v1/groups/stream/p8?prune=3")["removed"], 3);
  const std::string tail = "0000000000000000_0000000000000003";
  Response read = Send(port(), "GET", "/v1/stream/p8?offset=-1");
  EXPECT_EQ(read.status, 200);
  EXPECT_NE(read.head.find("Stream-Next-Offset: " + tail), std::string::npos) << read.head;
  EXPECT_TRUE(HasHeader(read, "stream-up-to-date")) << read.head;
  Response again = Send(port(), "GET", "/v1/stream/p8?offset=" + tail);
  EXPECT_EQ(again.status, 200) << again.body;
  Response poll = Send(port(), "GET", "/v1/stream/p8?offset=-1&live=long-poll");
  EXPECT_EQ(poll.status, 204);
  EXPECT_NE(poll.head.find("Stream-Next-Offset: " + tail), std::string::npos) << poll.head;
  // SSE: the control event names the tail (the server ends the response after 1 s).
  Response sse = Send(port(), "GET", "/v1/stream/p8?offset=-1&live=sse");
  EXPECT_EQ(sse.status, 200);
  EXPECT_NE(sse.body.find("\"streamNextOffset\":\"" + tail + "\",\"upToDate\":true"),
            std::string::npos)
      << sse.body;
}

}  // namespace
}  // namespace runnel::server

namespace runnel::server {
namespace {

TEST_F(TenantServerTest, RetentionSetAtCreateVisibleOnHeadAndChangeable) {
  StartServer(false);
  const std::string path = "/v1/stream/r";
  ASSERT_EQ(
      Send(port(), "PUT", path, {"Content-Type: text/plain", "Stream-Retention-Max-Events: 3"})
          .status,
      201);
  // A re-create with different retention is a different configuration.
  EXPECT_EQ(Send(port(), "PUT", path, {"Content-Type: text/plain"}).status, 409);
  EXPECT_EQ(
      Send(port(), "PUT", path, {"Content-Type: text/plain", "Stream-Retention-Max-Events: 3"})
          .status,
      200);
  EXPECT_EQ(Send(port(), "PUT", "/v1/stream/r0",
                 {"Content-Type: text/plain", "Stream-Retention-Max-Events: 0"})
                .status,
            400);
  Response head = Send(port(), "HEAD", path);
  EXPECT_EQ(HeaderValue(head, "stream-retention-max-events"), "3");
  for (int i = 1; i <= 5; ++i) {
    ASSERT_EQ(
        Send(port(), "POST", path, {"Content-Type: text/plain"}, "e" + std::to_string(i)).status,
        204);
  }
  EXPECT_EQ(Send(port(), "GET", path + "?offset=-1").body, "e3e4e5");
  // Positions 0 and 1 (before records 1 and 2) were trimmed: 410; position 2 is the head.
  EXPECT_EQ(Send(port(), "GET", path + "?offset=0000000000000000_0000000000000000").status, 410);
  EXPECT_EQ(Send(port(), "GET", path + "?offset=0000000000000000_0000000000000001").status, 410);
  EXPECT_EQ(Send(port(), "GET", path + "?offset=0000000000000000_0000000000000002").body, "e3e4e5");
  // Changed later: PATCH replaces the caps.
  Response patch = Send(port(), "PATCH", path, {"Stream-Retention-Max-Events: 1"});
  EXPECT_EQ(patch.status, 204) << patch.body;
  EXPECT_EQ(HeaderValue(Send(port(), "HEAD", path), "stream-retention-max-events"), "1");
  ASSERT_EQ(Send(port(), "POST", path, {"Content-Type: text/plain"}, "e6").status, 204);
  EXPECT_EQ(Send(port(), "GET", path + "?offset=-1").body, "e6");
  EXPECT_EQ(Send(port(), "PATCH", "/v1/stream/missing", {"Stream-Retention-Max-Events: 1"}).status,
            404);
  EXPECT_EQ(Send(port(), "PATCH", path).status, 400);
  // "none" clears every cap: it is refused next to a cap, and other values are refused.
  EXPECT_EQ(
      Send(port(), "PATCH", path, {"Stream-Retention: none", "Stream-Retention-Max-Events: 2"})
          .status,
      400);
  EXPECT_EQ(Send(port(), "PATCH", path, {"Stream-Retention: all"}).status, 400);
  EXPECT_EQ(HeaderValue(Send(port(), "HEAD", path), "stream-retention-max-events"), "1");
  EXPECT_EQ(Send(port(), "PATCH", path, {"Stream-Retention: none"}).status, 204);
  EXPECT_EQ(HeaderValue(Send(port(), "HEAD", path), "stream-retention-max-events"), "");
}

TEST_F(TenantServerTest, ConditionalAppendConflictsWithCurrentTail) {
  StartServer(false);
  const std::string path = "/v1/stream/cas";
  ASSERT_EQ(Send(port(), "PUT", path, {"Content-Type: text/plain"}).status, 201);
  const std::string at0 = "Stream-Expected-Offset: 0000000000000000_0000000000000000";
  const std::string at1 = "Stream-Expected-Offset: 0000000000000000_0000000000000001";
  Response first = Send(port(), "POST", path, {"Content-Type: text/plain", at0}, "a");
  EXPECT_EQ(first.status, 204) << first.body;
  EXPECT_EQ(HeaderValue(first, "stream-next-offset"), "0000000000000000_0000000000000001");
  // The position is occupied now.
  Response again = Send(port(), "POST", path, {"Content-Type: text/plain", at0}, "b");
  EXPECT_EQ(again.status, 409) << again.body;
  EXPECT_EQ(HeaderValue(again, "stream-next-offset"), "0000000000000000_0000000000000001");
  EXPECT_EQ(Send(port(), "POST", path, {"Content-Type: text/plain", at1}, "c").status, 204);
  EXPECT_EQ(
      Send(port(), "POST", path, {"Content-Type: text/plain", "Stream-Expected-Offset: x"}, "d")
          .status,
      400);
  EXPECT_EQ(Send(port(), "GET", path + "?offset=-1").body, "ac");
}

}  // namespace
}  // namespace runnel::server

namespace runnel::server {
namespace {

TEST_F(TenantServerTest, GroupsSurviveARestartOnTheLogStore) {
  auto open_server = [&]() {
    RegistryOptions registry_options;
    registry_options.store = "log";
    registry_options.data_dir = (dir_ / "data").string();
    auto registry = StreamRegistry::Open(registry_options);
    EXPECT_TRUE(registry.ok()) << registry.status().ToString();
    ServerOptions options;
    options.host = "127.0.0.1";
    options.port = 0;
    options.threads = 2;
    auto server = HttpServer::Start(std::move(*registry), options);
    EXPECT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(*server);
    thread_ = std::thread([this] { server_->Run(); });
  };
  open_server();
  const std::string path = "/v1/tenants/acme/stream/durable";
  ASSERT_EQ(Send(port(), "PUT", path, {"Content-Type: application/json"}).status, 201);
  ASSERT_EQ(Send(port(), "POST", path, {"Content-Type: application/json"}, "[1,2,3,4,5]").status,
            204);
  ASSERT_EQ(Send(port(), "POST", "/v1/groups/tenants/acme/stream/durable?group=g&ack=3").status,
            200);
  server_->Stop();
  thread_.join();
  server_.reset();

  open_server();
  Response list = Send(port(), "GET", "/v1/groups/tenants/acme/stream/durable");
  ASSERT_EQ(list.status, 200) << list.body;
  auto body = json::parse(list.body, nullptr, false);
  ASSERT_TRUE(body.is_object()) << list.body;
  ASSERT_EQ(body["groups"].size(), 1u) << list.body;
  EXPECT_EQ(body["groups"][0]["group"], "g");
  EXPECT_EQ(body["groups"][0]["last_acked"], 3);
  EXPECT_EQ(body["groups"][0]["lag"], 2);
  Response next = Send(port(), "GET", "/v1/groups/tenants/acme/stream/durable?group=g");
  auto events = json::parse(next.body, nullptr, false);
  ASSERT_TRUE(events.is_object()) << next.body;
  ASSERT_EQ(events["events"].size(), 2u) << next.body;
  EXPECT_EQ(events["events"][0]["offset"], 4);
  EXPECT_EQ(events["events"][0]["data"], 4);
}

}  // namespace
}  // namespace runnel::server

namespace runnel::server {
namespace {

TEST_F(GroupHttpTest, LongPollReadNextWaitsForAnAppend) {
  StartServer(false);
  Seed("/v1/stream/lp", 2);
  const std::string base = "/v1/groups/stream/lp";
  Call("POST", base + "?group=w&ack=2");
  // With the test server's 200 ms long-poll timeout and nothing to read: 204.
  Response timeout = Send(port(), "GET", base + "?group=w&live=long-poll");
  EXPECT_EQ(timeout.status, 204) << timeout.body;
  // With work available the answer is immediate.
  Call("POST", base + "?group=v&ack=1");
  json ready = Call("GET", base + "?group=v&live=long-poll");
  EXPECT_EQ(Offsets(ready), (std::vector<uint64_t>{2}));
  Call("GET", base + "?group=v&live=bogus", 400);
}

// The long-poll form times out like a stream long-poll: 204 with the protocol's headers, the
// next offset being the group's offset as a token (C5: read-next starts after last_acked).
TEST_F(GroupHttpTest, LongPollTimeoutAnswers204WithProtocolHeadersC5) {
  StartServer(false);
  Seed("/v1/stream/lph", 3);
  const std::string base = "/v1/groups/stream/lph";
  Call("POST", base + "?group=g&ack=3");
  Response r = Send(port(), "GET", base + "?group=g&live=long-poll&cursor=abc");
  EXPECT_EQ(r.status, 204) << r.body;
  EXPECT_EQ(HeaderValue(r, "stream-next-offset"), "0000000000000000_0000000000000003");
  EXPECT_EQ(HeaderValue(r, "stream-up-to-date"), "true");
  EXPECT_FALSE(HeaderValue(r, "stream-cursor").empty()) << r.head;
  EXPECT_TRUE(r.body.empty());
  // A closed stream: Stream-Closed instead of a cursor.
  ASSERT_EQ(Send(port(), "POST", "/v1/stream/lph", {"Stream-Closed: true"}).status, 204);
  Response closed = Send(port(), "GET", base + "?group=g&live=long-poll");
  EXPECT_EQ(closed.status, 204);
  EXPECT_EQ(HeaderValue(closed, "stream-closed"), "true");
  EXPECT_EQ(HeaderValue(closed, "stream-cursor"), "");
  // Errors as for the catch-up form.
  Call("GET", "/v1/groups/stream/missing?group=g&live=long-poll", 404);
  Call("GET", "/v1/groups/stream/missing?group=g&live=sse", 404);
}

// C9: an ack past the tail is kept (skip-ahead); the long-poll then hands out only records
// beyond it.
TEST_F(GroupHttpTest, LongPollAfterSkipAheadWaitsBeyondTheAckedOffsetC9) {
  StartServer(false);
  Seed("/v1/stream/skip", 2);
  const std::string base = "/v1/groups/stream/skip";
  EXPECT_EQ(Call("POST", base + "?group=g&ack=4")["last_acked"], 4);
  EXPECT_EQ(Send(port(), "GET", base + "?group=g&live=long-poll").status, 204);
  ASSERT_EQ(Send(port(), "POST", "/v1/stream/skip", {"Content-Type: application/json"},
                 "[{\"n\":3},{\"n\":4},{\"n\":5}]")
                .status,
            204);
  json ready = Call("GET", base + "?group=g&live=long-poll");
  EXPECT_EQ(Offsets(ready), (std::vector<uint64_t>{5}));
  EXPECT_EQ(ready["events"][0]["data"], json({{"n", 5}}));
}

// A group long-poll woken by records the group has meanwhile acked past (another consumer of
// the group did the work) waits on for records beyond the ack, until its own deadline; it does
// not answer 204 at once.
TEST_F(GroupHttpTest, LongPollWaitsOnWhenTheGroupAckedPastTheNewRecords) {
  StartServer(false, /*long_poll_timeout_ms=*/5000);
  Seed("/v1/stream/past", 1);
  const std::string base = "/v1/groups/stream/past";
  Call("POST", base + "?group=g&ack=1");
  std::promise<Response> answered;
  std::thread reader(
      [&] { answered.set_value(Send(port(), "GET", base + "?group=g&live=long-poll")); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));        // the poll is waiting
  EXPECT_EQ(Call("POST", base + "?group=g&ack=3")["last_acked"], 3);  // skip-ahead (C9)
  ASSERT_EQ(Send(port(), "POST", "/v1/stream/past", {"Content-Type: application/json"},
                 "[{\"n\":2},{\"n\":3}]")
                .status,
            204);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ASSERT_EQ(
      Send(port(), "POST", "/v1/stream/past", {"Content-Type: application/json"}, "[{\"n\":4}]")
          .status,
      204);
  Response r = answered.get_future().get();
  reader.join();
  EXPECT_EQ(r.status, 200) << r.body;
  auto body = json::parse(r.body, nullptr, false);
  EXPECT_EQ(Offsets(body), (std::vector<uint64_t>{4})) << r.body;
}

// The SSE form is the protocol's SSE read from the group's offset: data events with the records
// after last_acked only, control events whose streamNextOffset can be acked as is (C2, C5).
TEST_F(GroupHttpTest, SseReadsFromTheGroupsOffsetC5) {
  StartServer(false);
  Seed("/v1/stream/sse", 3);
  const std::string base = "/v1/groups/stream/sse";
  Call("POST", base + "?group=g&ack=1");
  // Ends after the test server's 1 s SSE duration.
  Response r = Send(port(), "GET", base + "?group=g&live=sse");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(HeaderValue(r, "content-type"), "text/event-stream");
  EXPECT_NE(r.body.find("event: data"), std::string::npos) << r.body;
  EXPECT_EQ(r.body.find("{\"n\":1}"), std::string::npos) << r.body;
  EXPECT_NE(r.body.find("{\"n\":2}"), std::string::npos) << r.body;
  EXPECT_NE(r.body.find("{\"n\":3}"), std::string::npos) << r.body;
  const std::string token = "0000000000000000_0000000000000003";
  EXPECT_NE(r.body.find("\"streamNextOffset\":\"" + token + "\""), std::string::npos) << r.body;
  // Reading did not move the group (D4); acking the control event's offset does (C2).
  EXPECT_EQ(Call("GET", base + "?group=g")["last_acked"], 1);
  EXPECT_EQ(Call("POST", base + "?group=g&ack=" + token)["last_acked"], 3);
  Call("POST", base + "?group=g&ack=" + token.substr(1), 400);
  Call("POST", base + "?group=g&ack=now", 400);
  // Nothing left: the stream's SSE from the group's offset is a control event only.
  Response empty = Send(port(), "GET", base + "?group=g&live=sse");
  ASSERT_EQ(empty.status, 200);
  EXPECT_EQ(empty.body.find("event: data"), std::string::npos) << empty.body;
  EXPECT_NE(empty.body.find("\"upToDate\":true"), std::string::npos) << empty.body;
}

// N1: an append while a group's SSE reader waits reaches it as a data event.
TEST_F(GroupHttpTest, SseDeliversAnAppendWhileOpenN1) {
  StartServer(false);
  Seed("/v1/stream/ssew", 1);
  Call("POST", "/v1/groups/stream/ssew?group=g&ack=1");
  Response streamed;
  std::thread reader(
      [&] { streamed = Send(port(), "GET", "/v1/groups/stream/ssew?group=g&live=sse"); });
  // Whether this lands before or after the reader subscribes, the record is after the group's
  // offset, so it is delivered either way.
  ASSERT_EQ(
      Send(port(), "POST", "/v1/stream/ssew", {"Content-Type: application/json"}, "[{\"n\":2}]")
          .status,
      204);
  reader.join();
  ASSERT_EQ(streamed.status, 200) << streamed.body;
  EXPECT_EQ(streamed.body.find("{\"n\":1}"), std::string::npos) << streamed.body;
  EXPECT_NE(streamed.body.find("{\"n\":2}"), std::string::npos) << streamed.body;
}

class GroupLongPollTest : public GroupHttpTest {};

TEST_F(GroupLongPollTest, AppendWakesAWaitingReaderN1) {
  // A long timeout: the reader gets the event whether the append lands before or after it
  // starts waiting, so the outcome does not depend on timing.
  ServerOptions options;
  options.host = "127.0.0.1";
  options.port = 0;
  options.threads = 2;
  options.service.long_poll_timeout_ms = 30000;
  auto server = HttpServer::Start(StreamRegistry(), options);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  server_ = std::move(*server);
  thread_ = std::thread([this] { server_->Run(); });
  Seed("/v1/stream/wake", 1);
  Call("POST", "/v1/groups/stream/wake?group=w&ack=1");
  Response waited;
  std::thread reader(
      [&] { waited = Send(port(), "GET", "/v1/groups/stream/wake?group=w&live=long-poll"); });
  ASSERT_EQ(
      Send(port(), "POST", "/v1/stream/wake", {"Content-Type: application/json"}, "[{\"n\":2}]")
          .status,
      204);
  reader.join();
  ASSERT_EQ(waited.status, 200) << waited.body;
  auto body = json::parse(waited.body, nullptr, false);
  ASSERT_TRUE(body.is_object()) << waited.body;
  ASSERT_EQ(body["events"].size(), 1u);
  EXPECT_EQ(body["events"][0]["offset"], 2);
}

}  // namespace
}  // namespace runnel::server

namespace runnel::server {
namespace {

TEST(TenantRoutes, TenantStreamListingAndGroupPaths) {
  Route list = ParseRoute("/v1/tenants/acme/streams", /*allow_tenants=*/true);
  EXPECT_EQ(list.kind, Route::Kind::kList);
  EXPECT_EQ(list.scope, StreamScope::Tenant("acme"));
  EXPECT_EQ(ParseRoute("/v1/tenants/acme/streams", /*allow_tenants=*/false).kind,
            Route::Kind::kNotFound);
  EXPECT_EQ(ParseRoute("/v1/tenants/acme/streamsx", true).kind, Route::Kind::kNotFound);

  Route global = GroupService::StreamRouteOf("/v1/groups/stream/a/b");
  EXPECT_EQ(global.kind, Route::Kind::kStream);
  EXPECT_EQ(global.scope, StreamScope::Global());
  EXPECT_EQ(global.name, "a/b");
  Route tenant = GroupService::StreamRouteOf("/v1/groups/tenants/acme/stream/x");
  EXPECT_EQ(tenant.kind, Route::Kind::kStream);
  EXPECT_EQ(tenant.scope, StreamScope::Tenant("acme"));
  EXPECT_EQ(tenant.name, "x");
  EXPECT_EQ(GroupService::StreamRouteOf("/v1/groups/streams").kind, Route::Kind::kNotFound);
  EXPECT_EQ(GroupService::StreamRouteOf("/v1/groups/tenants/acme/streams").kind,
            Route::Kind::kNotFound);
  EXPECT_FALSE(GroupService::Matches("/v1/stream/groups"));
}

}  // namespace
}  // namespace runnel::server

namespace runnel::server {
namespace {

class QuotaTest : public TenantServerTest {
 protected:
  void StartWithQuotas(QuotaOptions quotas) {
    ServerOptions options;
    options.host = "127.0.0.1";
    options.port = 0;
    options.threads = 2;
    options.quotas = quotas;
    StreamRegistry registry;
    auto subscriptions = SubscriptionService::Create(registry, SubscriptionOptions{});
    ASSERT_TRUE(subscriptions.ok()) << subscriptions.status().ToString();
    options.subscriptions = std::move(*subscriptions);
    auto server = HttpServer::Start(registry, options);
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(*server);
    thread_ = std::thread([this] { server_->Run(); });
  }
};

TEST_F(QuotaTest, StreamLimitPerTenant) {
  QuotaOptions quotas;
  quotas.max_streams = 2;
  StartWithQuotas(quotas);
  const std::vector<std::string> ct = {"Content-Type: text/plain"};
  EXPECT_EQ(Send(port(), "PUT", "/v1/tenants/acme/stream/a", ct).status, 201);
  EXPECT_EQ(Send(port(), "PUT", "/v1/tenants/acme/stream/b", ct).status, 201);
  Response third = Send(port(), "PUT", "/v1/tenants/acme/stream/c", ct);
  EXPECT_EQ(third.status, 429) << third.body;
  EXPECT_TRUE(HasHeader(third, "retry-after"));
  // Re-creating an existing stream is not a new stream; other tenants and global are separate.
  EXPECT_EQ(Send(port(), "PUT", "/v1/tenants/acme/stream/a", ct).status, 200);
  EXPECT_EQ(Send(port(), "PUT", "/v1/tenants/globex/stream/c", ct).status, 201);
  EXPECT_EQ(Send(port(), "PUT", "/v1/stream/c", ct).status, 201);
  EXPECT_EQ(Send(port(), "PUT", "/v1/stream/d", ct).status, 201);
  EXPECT_EQ(Send(port(), "PUT", "/v1/stream/e", ct).status, 201);
}

// Creates racing in one tenant cannot overshoot the stream limit: every create is checked here
// before any of them lands (the worst interleaving of a race), and only as many as the limit
// has room for are admitted; each holds its place until its request is done.
TEST(TenantQuotaCheck, RacingCreatesStayWithinTheStreamLimit) {
  StreamRegistry registry;
  QuotaOptions options;
  options.max_streams = 5;
  TenantQuota quota(options, registry);
  const StreamScope acme = StreamScope::Tenant("acme");
  auto check = [&](const std::string& name, TenantQuota::CreateHold* hold) {
    HttpRequest put;
    put.method = "PUT";
    put.path = "/v1/tenants/acme/stream/" + name;
    return !quota.Check(ParseRoute(put.path, /*allow_tenants=*/true), put, hold).has_value();
  };
  constexpr int kCreates = 20;
  std::vector<TenantQuota::CreateHold> holds(kCreates);
  std::vector<int> admitted;
  for (int i = 0; i < kCreates; ++i) {
    if (check("s" + std::to_string(i), &holds[i])) admitted.push_back(i);
  }
  EXPECT_EQ(admitted.size(), 5u);
  // The admitted creates land and finish; the refused ones left no reservation behind.
  for (int i = 0; i < kCreates; ++i) {
    if (std::find(admitted.begin(), admitted.end(), i) != admitted.end()) {
      ASSERT_TRUE(registry.CreateStream(acme, "s" + std::to_string(i), StreamRetention{}).ok());
    }
    holds[i].reset();
  }
  TenantQuota::CreateHold hold;
  EXPECT_FALSE(check("late", &hold)) << "five stored streams fill the limit";
  ASSERT_TRUE(registry.DeleteStream(acme, "s" + std::to_string(admitted[0])).ok());
  EXPECT_TRUE(check("late", &hold)) << "a deleted stream makes room for exactly one";
  TenantQuota::CreateHold second;
  EXPECT_FALSE(check("later", &second)) << "the first create still holds that room";
}

TEST_F(QuotaTest, StoredBytesPerTenant) {
  QuotaOptions quotas;
  quotas.max_bytes = 10;
  StartWithQuotas(quotas);
  const std::vector<std::string> ct = {"Content-Type: text/plain"};
  ASSERT_EQ(Send(port(), "PUT", "/v1/tenants/acme/stream/a", ct).status, 201);
  EXPECT_EQ(Send(port(), "POST", "/v1/tenants/acme/stream/a", ct, std::string(20, 'x')).status,
            204);
  Response over = Send(port(), "POST", "/v1/tenants/acme/stream/a", ct, "y");
  EXPECT_EQ(over.status, 429) << over.body;
  EXPECT_TRUE(HasHeader(over, "retry-after"));
  // Over the limit, data cannot come in through a create with a body or a fork either; an
  // empty stream can still be created.
  EXPECT_EQ(Send(port(), "PUT", "/v1/tenants/acme/stream/b", ct, "zz").status, 429);
  std::vector<std::string> fork = ct;
  fork.push_back("Stream-Forked-From: /v1/tenants/acme/stream/a");
  EXPECT_EQ(Send(port(), "PUT", "/v1/tenants/acme/stream/c", fork).status, 429);
  EXPECT_EQ(Send(port(), "PUT", "/v1/tenants/acme/stream/d", ct).status, 201);
  ASSERT_EQ(Send(port(), "PUT", "/v1/tenants/globex/stream/a", ct).status, 201);
  EXPECT_EQ(Send(port(), "POST", "/v1/tenants/globex/stream/a", ct, "z").status, 204);
}

TEST_F(QuotaTest, AppendRatePerTenant) {
  ManualClock clock(1000000);
  QuotaOptions quotas;
  quotas.appends_per_sec = 3;
  quotas.clock = &clock;
  StartWithQuotas(quotas);
  const std::vector<std::string> ct = {"Content-Type: text/plain"};
  ASSERT_EQ(Send(port(), "PUT", "/v1/tenants/acme/stream/a", ct).status, 201);
  ASSERT_EQ(Send(port(), "PUT", "/v1/tenants/globex/stream/a", ct).status, 201);
  auto appends = [&](const std::string& tenant, int n) {
    std::vector<int> statuses;
    for (int i = 0; i < n; ++i) {
      statuses.push_back(
          Send(port(), "POST", "/v1/tenants/" + tenant + "/stream/a", ct, "x").status);
    }
    return statuses;
  };
  // The clock stands still: the bucket holds exactly one second's worth.
  EXPECT_EQ(appends("acme", 5), (std::vector<int>{204, 204, 204, 429, 429}));
  // Another tenant has its own bucket.
  EXPECT_EQ(appends("globex", 1), (std::vector<int>{204}));
  clock.Advance(1000);
  EXPECT_EQ(appends("acme", 4), (std::vector<int>{204, 204, 204, 429}));
  clock.Advance(334);
  EXPECT_EQ(appends("acme", 2), (std::vector<int>{204, 429}));
}

// The wake-token routes of subscriptions (ack, release, callback) admit callers without a
// tenant token: they must neither draw on a tenant's quota nor learn its state from a 429.
TEST_F(QuotaTest, WakeTokenRoutesNeitherUseNorRevealAQuota) {
  ManualClock clock(1000000);
  QuotaOptions quotas;
  quotas.appends_per_sec = 3;
  quotas.max_bytes = 1000;
  quotas.clock = &clock;
  StartWithQuotas(quotas);
  const std::vector<std::string> ct = {"Content-Type: text/plain"};
  ASSERT_EQ(Send(port(), "PUT", "/v1/tenants/acme/stream/a", ct).status, 201);
  for (const char* op : {"ack", "release", "callback"}) {
    for (int i = 0; i < 4; ++i) {
      Response r =
          Send(port(), "POST", std::string("/v1/tenants/acme/stream/__ds/subscriptions/zz/") + op,
               ct, std::string(2000, 'x'));
      EXPECT_EQ(r.status, 401) << op << " " << r.body;
    }
  }
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(Send(port(), "POST", "/v1/tenants/acme/stream/a", ct, "x").status, 204);
  }
}

// The reserved __ds subscription API follows the scope's authorization (Z1-Z4) like the
// scope's streams; ack, release and callback authenticate with the wake's own token instead.
TEST_F(TenantServerTest, SubscriptionsAreScopedAndAckUsesTheClaimTokenOnly) {
  const std::string acme = NewToken("acme", false);
  const std::string globex = NewToken("globex", false);
  StartServer(true);
  const std::string root = "/v1/tenants/acme/stream/";
  const std::string sub = root + "__ds/subscriptions/p";
  const std::string config =
      R"({"type":"pull-wake","pattern":"events/*","wake_stream":"wake","lease_ttl_ms":5000})";
  ASSERT_EQ(
      Send(port(), "PUT", root + "wake", {Bearer(acme), "Content-Type: application/json"}, "[]")
          .status,
      201);
  EXPECT_EQ(Send(port(), "PUT", sub, {"Content-Type: application/json"}, config).status, 401);
  auto denied =
      Send(port(), "PUT", sub, {Bearer(globex), "Content-Type: application/json"}, config);
  EXPECT_EQ(denied.status, 403);
  ASSERT_EQ(
      Send(port(), "PUT", sub, {Bearer(acme), "Content-Type: application/json"}, config).status,
      201);
  // Another tenant's scope has its own (empty) subscription namespace.
  EXPECT_EQ(Send(port(), "GET", "/v1/tenants/globex/stream/__ds/subscriptions/p", {Bearer(globex)})
                .status,
            404);
  ASSERT_EQ(Send(port(), "PUT", root + "events/a", {Bearer(acme), "Content-Type: application/json"},
                 R"({"n":1})")
                .status,
            201);
  auto claim = Send(port(), "POST", sub + "/claim",
                    {Bearer(acme), "Content-Type: application/json"}, R"({"worker":"w1"})");
  ASSERT_EQ(claim.status, 200) << claim.body;
  json claimed = json::parse(claim.body);
  json ack = {
      {"wake_id", claimed["wake_id"]},
      {"generation", claimed["generation"]},
      {"acks", {{{"stream", "events/a"}, {"offset", claimed["streams"][0]["tail_offset"]}}}},
      {"done", true}};
  // A service token is not a claim token.
  EXPECT_EQ(Send(port(), "POST", sub + "/ack", {Bearer(acme)}, ack.dump()).status, 401);
  // The claim token is scoped to its subscription and scope. Without a valid token every
  // answer is the same 401, whether the subscription exists or not and whatever its kind.
  EXPECT_EQ(Send(port(), "POST", "/v1/tenants/globex/stream/__ds/subscriptions/p/ack",
                 {Bearer(claimed["token"].get<std::string>())}, ack.dump())
                .status,
            401);
  EXPECT_EQ(Send(port(), "POST", sub + "/callback", {Bearer(acme)}, ack.dump()).status, 401);
  EXPECT_EQ(Send(port(), "POST", "/v1/tenants/acme/stream/__ds/subscriptions/nope/ack",
                 {Bearer(acme)}, ack.dump())
                .status,
            401);
  // Nor do groups reach the reserved state stream.
  EXPECT_EQ(Send(port(), "GET", "/v1/groups/tenants/acme/stream/__ds/subscriptions?group=g",
                 {Bearer(acme)})
                .status,
            404);
  EXPECT_EQ(Send(port(), "POST", "/v1/groups/tenants/acme/stream/__ds/subscriptions?prune=100",
                 {Bearer(acme)})
                .status,
            404);
  auto acked =
      Send(port(), "POST", sub + "/ack", {Bearer(claimed["token"].get<std::string>())}, ack.dump());
  EXPECT_EQ(acked.status, 200) << acked.body;
  EXPECT_EQ(json::parse(acked.body), json({{"ok", true}, {"next_wake", false}}));
  // The state stream is reserved: it is not reachable as an ordinary stream.
  EXPECT_EQ(Send(port(), "GET", root + "__ds/subscriptions", {Bearer(acme)}).status, 404);
}

}  // namespace
}  // namespace runnel::server

namespace runnel::server {
namespace {

// A memory store whose cursor commits (a group ack) wait while the gate is closed, like a store
// stuck on a disk or a database round trip; with `reads`, its record reads wait instead, and it
// reports that its calls may block (Store::CallsMayBlock), as a database store does. Waits are
// bounded (30 s) so a bug cannot hang.
class GatedStore final : public testing::ForwardingStore {
 public:
  explicit GatedStore(bool reads = false) : reads_(reads) {}
  bool CallsMayBlock() const override { return reads_; }
  void Close() {
    std::lock_guard lock(mu_);
    open_ = false;
  }
  void Open() {
    {
      std::lock_guard lock(mu_);
      open_ = true;
    }
    cv_.notify_all();
  }
  // True once `calls` calls wait at the closed gate (within `timeout`).
  bool WaitForBlocked(std::chrono::milliseconds timeout, int calls = 1) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return blocked_ >= calls; });
  }

  Result<uint64_t> CommitCursor(StreamId id, std::string_view consumer, uint64_t offset,
                                uint64_t now_ms) override {
    if (!reads_) Wait();
    return ForwardingStore::CommitCursor(id, consumer, offset, now_ms);
  }
  Result<std::vector<StoredRecord>> Read(StreamId id, uint64_t from, size_t limit,
                                         size_t max_bytes) override {
    if (reads_) Wait();
    return ForwardingStore::Read(id, from, limit, max_bytes);
  }

 private:
  void Wait() {
    std::unique_lock lock(mu_);
    if (open_) return;
    ++blocked_;
    cv_.notify_all();
    cv_.wait_for(lock, std::chrono::seconds(30), [this] { return open_; });
    --blocked_;
  }

  const bool reads_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = true;  // GUARDED_BY(mu_)
  int blocked_ = 0;   // GUARDED_BY(mu_)
};

// A server with one io thread over a GatedStore (gating reads or cursor commits), with the
// JSON stream /v1/stream/gated holding two records.
class GatedServerTest : public GroupHttpTest {
 protected:
  void StartGated(bool reads, GatedStore** gate) {
    auto owned = std::make_unique<GatedStore>(reads);
    *gate = owned.get();
    ServerOptions options;
    options.host = "127.0.0.1";
    options.port = 0;
    options.threads = 1;
    options.group_threads = 2;
    options.sse_max_duration_ms = 1000;  // an SSE response ends by itself, so Send returns
    auto server = HttpServer::Start(StreamRegistry(std::move(owned)), options);
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(*server);
    thread_ = std::thread([this] { server_->Run(); });
    Seed("/v1/stream/gated", 2);
  }
};

// Group requests run on the group service's workers: with a single io thread, an ack stuck in
// the store leaves the server answering other requests (reads, health, other groups' reads).
TEST_F(GatedServerTest, AnAckBlockedInTheStoreDoesNotStallTheIoThread) {
  GatedStore* gate = nullptr;
  ASSERT_NO_FATAL_FAILURE(StartGated(false, &gate));

  gate->Close();
  Response ack;
  std::thread acker([&] { ack = Send(port(), "POST", "/v1/groups/stream/gated?group=g&ack=1"); });
  const bool blocked = gate->WaitForBlocked(std::chrono::seconds(10));
  EXPECT_TRUE(blocked);
  if (blocked) {
    // The ack waits in the store (up to 30 s, longer than Send's 10 s receive timeout); the
    // one io thread still serves.
    EXPECT_EQ(Send(port(), "GET", "/healthz").status, 200);
    EXPECT_EQ(Send(port(), "GET", "/v1/stream/gated?offset=-1").status, 200);
    EXPECT_EQ(Offsets(Call("GET", "/v1/groups/stream/gated?group=other")),
              (std::vector<uint64_t>{1, 2}));
  }
  gate->Open();
  acker.join();
  EXPECT_EQ(ack.status, 200) << ack.body;
  EXPECT_EQ(Call("GET", "/v1/groups/stream/gated?group=g")["last_acked"], 1);
}

// A store whose calls may block (a database) is called from the catalog workers, never from an
// io thread: with a single io thread and a read stuck in the store, the server still answers
// health checks, appends and other streams' reads, and the stuck read completes afterwards.
TEST_F(GatedServerTest, AReadBlockedInTheStoreDoesNotStallTheIoThread) {
  GatedStore* gate = nullptr;
  ASSERT_NO_FATAL_FAILURE(StartGated(true, &gate));

  gate->Close();
  Response read;
  Response sse;
  std::thread reader([&] { read = Send(port(), "GET", "/v1/stream/gated?offset=-1"); });
  std::thread sse_reader([&] { sse = Send(port(), "GET", "/v1/stream/gated?offset=-1&live=sse"); });
  const bool blocked = gate->WaitForBlocked(std::chrono::seconds(10), 2);
  EXPECT_TRUE(blocked);
  if (blocked) {
    EXPECT_EQ(Send(port(), "GET", "/healthz").status, 200);
    EXPECT_EQ(Send(port(), "HEAD", "/v1/stream/gated").status, 200);
    EXPECT_EQ(
        Send(port(), "POST", "/v1/stream/gated", {"Content-Type: application/json"}, R"({"n":3})")
            .status,
        204);
  }
  gate->Open();
  reader.join();
  sse_reader.join();
  EXPECT_EQ(read.status, 200) << read.body;
  auto events = json::parse(read.body, nullptr, false);
  ASSERT_TRUE(events.is_array()) << read.body;
  EXPECT_GE(events.size(), 2u);
  EXPECT_EQ(sse.status, 200);
  EXPECT_NE(sse.body.find(R"({"n":1})"), std::string::npos) << sse.body;
}

}  // namespace
}  // namespace runnel::server
