// A store that cannot be reached while live readers wait (a database restarting, a failover):
// no reader may be told that its stream was deleted. A long-poll answers 503 with Retry-After
// (retry freely), an SSE response sends the error as an event and ends; once the store is back,
// reads go on from where they were.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "runnel/registry.h"
#include "server/http_server.h"
#include "support/forwarding_store.h"
#include "support/loopback_socket.h"

namespace runnel::server {
namespace {

// A memory store whose lookups and reads by id fail with kUnavailable while it is "down", as a
// PostgreSQL store's do while its database restarts. Appends still go through, so a test can
// wake waiting readers (their tail listener fires) while their reads fail.
class FlakyStore final : public testing::ForwardingStore {
 public:
  void SetDown(bool down) { down_.store(down); }
  Result<StreamInfo> GetStreamById(StreamId id) override {
    if (down_.load()) return Status::Unavailable("the database cannot be reached");
    return ForwardingStore::GetStreamById(id);
  }
  Result<std::vector<StoredRecord>> Read(StreamId id, uint64_t from, size_t limit,
                                         size_t max_bytes) override {
    if (down_.load()) return Status::Unavailable("the database cannot be reached");
    return ForwardingStore::Read(id, from, limit, max_bytes);
  }

 private:
  std::atomic<bool> down_{false};
};

class StoreOutageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = std::make_unique<FlakyStore>();
    store_ = store.get();
    ServerOptions options;
    options.host = "127.0.0.1";
    options.port = 0;
    options.threads = 2;
    options.service.long_poll_timeout_ms = 10000;
    options.sse_max_duration_ms = 10000;
    auto server = HttpServer::Start(StreamRegistry(std::move(store)), options);
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(*server);
    thread_ = std::thread([this] { server_->Run(); });
  }
  void TearDown() override {
    server_->Stop();
    thread_.join();
  }

  // Sends `request` on a new connection and reads until the server closes it or `seconds` pass.
  std::string Exchange(const std::string& request, int seconds = 10) {
    const int fd = testing::ConnectLoopback(server_->port(), seconds);
    EXPECT_GE(fd, 0);
    EXPECT_TRUE(testing::SendAll(fd, request));
    std::string out;
    char buf[4096];
    for (;;) {
      const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
      if (n <= 0) break;
      out.append(buf, static_cast<size_t>(n));
    }
    ::close(fd);
    return out;
  }
  static std::string Request(const std::string& method, const std::string& target,
                             const std::string& body = "") {
    return method + " " + target +
           " HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: text/plain\r\n"
           "Content-Length: " +
           std::to_string(body.size()) + "\r\n\r\n" + body;
  }
  // Starts `request` on a connection of its own; the answer lands in *out when it ends.
  std::thread Start(const std::string& request, std::string* out) {
    return std::thread([this, request, out] { *out = Exchange(request); });
  }
  // Waits (bounded) until the server counts `n` live readers.
  bool WaitForLiveReaders(int n) {
    const std::string want = "runnel_live_readers " + std::to_string(n) + "\n";
    for (int i = 0; i < 500; ++i) {
      if (Exchange(Request("GET", "/metrics")).find(want) != std::string::npos) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }

  FlakyStore* store_ = nullptr;
  std::unique_ptr<HttpServer> server_;
  std::thread thread_;
};

TEST_F(StoreOutageTest, WaitingReadersAreNeverToldTheStreamWasDeleted) {
  ASSERT_NE(Exchange(Request("PUT", "/v1/stream/s")).find("201 Created"), std::string::npos);
  ASSERT_NE(Exchange(Request("POST", "/v1/stream/s", "a")).find("204"), std::string::npos);
  std::string poll, sse;
  std::thread poller = Start(Request("GET", "/v1/stream/s?offset=now&live=long-poll"), &poll);
  std::thread follower = Start(Request("GET", "/v1/stream/s?offset=now&live=sse"), &sse);
  ASSERT_TRUE(WaitForLiveReaders(2));
  store_->SetDown(true);
  // An append wakes both readers; their reads find the store unreachable.
  EXPECT_NE(Exchange(Request("POST", "/v1/stream/s", "b")).find("204"), std::string::npos);
  poller.join();
  follower.join();
  EXPECT_NE(poll.find("HTTP/1.1 503"), std::string::npos) << poll;
  EXPECT_NE(poll.find("Retry-After: 1"), std::string::npos) << poll;
  EXPECT_NE(poll.find("\"code\":\"unavailable\""), std::string::npos) << poll;
  EXPECT_EQ(poll.find("deleted"), std::string::npos) << poll;
  EXPECT_NE(sse.find("event: error"), std::string::npos) << sse;
  EXPECT_NE(sse.find("\"code\":\"unavailable\""), std::string::npos) << sse;
  EXPECT_EQ(sse.find("deleted"), std::string::npos) << sse;
  // Back: the stream and both records are there.
  store_->SetDown(false);
  const std::string after = Exchange(Request("GET", "/v1/stream/s?offset=-1"));
  EXPECT_NE(after.find("200 OK"), std::string::npos) << after;
  EXPECT_NE(after.find("\r\n\r\nab"), std::string::npos) << after;
}

}  // namespace
}  // namespace runnel::server
