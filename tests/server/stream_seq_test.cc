// Stream-Seq (PROTOCOL.md 5.2) and crash safety: the last Stream-Seq must commit in the same
// store write as the records it accepted. If it were written afterwards, a crash in between
// would keep the records but forget the sequence, and the client's retry of the unacknowledged
// append would be accepted a second time. These tests watch the store writes the service makes.
#include <gtest/gtest.h>

#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runnel/registry.h"
#include "runnel/store.h"
#include "server/stream_service.h"

namespace runnel::server {
namespace {

// Forwards to a memory store and records every append request and catalog update.
class RecordingStore : public Store {
 public:
  RecordingStore() : inner_(NewMemoryStore()) {}

  std::string_view Name() const override { return inner_->Name(); }
  std::string Durability() const override { return inner_->Durability(); }
  Result<StreamInfo> CreateStream(const StreamSpec& spec) override {
    return inner_->CreateStream(spec);
  }
  Result<StreamInfo> GetStream(std::string_view ns, std::string_view name) override {
    return inner_->GetStream(ns, name);
  }
  Result<StreamInfo> GetStreamById(StreamId id) override { return inner_->GetStreamById(id); }
  Result<std::vector<StreamInfo>> ListStreams(std::string_view ns, std::string_view start_after,
                                              size_t limit) override {
    return inner_->ListStreams(ns, start_after, limit);
  }
  Status UpdateStream(StreamId id, const StreamRetention& retention,
                      std::string_view attributes) override {
    {
      std::lock_guard lock(mu_);
      ++updates_;
    }
    return inner_->UpdateStream(id, retention, attributes);
  }
  Status DeleteStream(StreamId id) override { return inner_->DeleteStream(id); }
  void Append(AppendRequest request, AppendCallback done) override {
    {
      std::lock_guard lock(mu_);
      appends_.push_back(request.attributes);
    }
    inner_->Append(std::move(request), std::move(done));
  }
  Result<std::vector<StoredRecord>> Read(StreamId id, uint64_t from, size_t limit,
                                         size_t max_bytes) override {
    return inner_->Read(id, from, limit, max_bytes);
  }
  Result<std::optional<StoredRecord>> ReadAt(StreamId id, uint64_t offset) override {
    return inner_->ReadAt(id, offset);
  }
  Result<uint64_t> TruncatePrefix(StreamId id, uint64_t through, bool respect_cursors) override {
    return inner_->TruncatePrefix(id, through, respect_cursors);
  }
  Result<uint64_t> CommitCursor(StreamId id, std::string_view consumer, uint64_t offset,
                                uint64_t now_ms) override {
    return inner_->CommitCursor(id, consumer, offset, now_ms);
  }
  Result<std::optional<CursorState>> GetCursor(StreamId id, std::string_view consumer) override {
    return inner_->GetCursor(id, consumer);
  }
  Result<std::vector<CursorState>> ListCursors(StreamId id) override {
    return inner_->ListCursors(id);
  }
  Result<std::optional<ProducerState>> GetProducer(StreamId id,
                                                   std::string_view producer_id) override {
    return inner_->GetProducer(id, producer_id);
  }
  Status Flush() override { return inner_->Flush(); }
  void SetTailListener(TailListener listener) override {
    inner_->SetTailListener(std::move(listener));
  }

  int updates() {
    std::lock_guard lock(mu_);
    return updates_;
  }
  std::vector<std::optional<std::string>> appends() {
    std::lock_guard lock(mu_);
    return appends_;
  }

 private:
  std::unique_ptr<Store> inner_;
  std::mutex mu_;
  int updates_ = 0;
  std::vector<std::optional<std::string>> appends_;
};

class StreamSeqTest : public ::testing::Test {
 protected:
  StreamSeqTest() {
    auto store = std::make_unique<RecordingStore>();
    store_ = store.get();
    service_ = std::make_unique<StreamService>(StreamRegistry(std::move(store)),
                                               StreamServiceOptions{}, nullptr);
  }

  HttpResponse Write(const std::string& method, const std::string& body,
                     std::map<std::string, std::string> headers = {}) {
    HttpRequest request;
    request.method = method;
    request.path = "/v1/stream/s";
    request.headers = std::move(headers);
    request.headers["content-type"] = "text/plain";
    request.body = body;
    std::promise<HttpResponse> answered;
    auto future = answered.get_future();
    const Route route = ParseRoute(request.path);
    service_->HandleWrite(route, std::move(request),
                          [&answered](HttpResponse r) { answered.set_value(std::move(r)); });
    HttpResponse r = future.get();
    return r;
  }

  RecordingStore* store_ = nullptr;
  std::unique_ptr<StreamService> service_;
};

TEST_F(StreamSeqTest, TheLastStreamSeqCommitsInTheSameWriteAsTheRecords) {
  ASSERT_EQ(Write("PUT", "").status, 201);
  const int updates_after_create = store_->updates();
  ASSERT_EQ(Write("POST", "a", {{"stream-seq", "0005"}}).status, 204);
  // No separate catalog write: the sequence travelled with the append.
  EXPECT_EQ(store_->updates(), updates_after_create);
  auto appends = store_->appends();
  ASSERT_EQ(appends.size(), 1u);
  ASSERT_TRUE(appends[0].has_value());
  EXPECT_NE(appends[0]->find("0005"), std::string::npos) << *appends[0];

  // The stored sequence refuses a replay and accepts the next one.
  EXPECT_EQ(Write("POST", "a", {{"stream-seq", "0005"}}).status, 409);
  EXPECT_EQ(Write("POST", "b", {{"stream-seq", "0006"}}).status, 204);
  // A plain append does not rewrite the attributes.
  EXPECT_EQ(Write("POST", "c").status, 204);
  appends = store_->appends();
  ASSERT_EQ(appends.size(), 3u);
  EXPECT_FALSE(appends[2].has_value());
  EXPECT_EQ(store_->updates(), updates_after_create);
  auto info = store_->GetStream("global", "s");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->event_count, 3u);
}

TEST_F(StreamSeqTest, ARefusedAppendLeavesTheStreamSeqUnchanged) {
  ASSERT_EQ(Write("PUT", "").status, 201);
  ASSERT_EQ(Write("POST", "a", {{"stream-seq", "b"}}).status, 204);
  // A conditional append at a stale position is refused by the store: its sequence must not
  // be recorded, so the same sequence is still accepted afterwards.
  EXPECT_EQ(
      Write("POST", "x",
            {{"stream-seq", "c"}, {"stream-expected-offset", "0000000000000000_0000000000000000"}})
          .status,
      409);
  EXPECT_EQ(Write("POST", "y", {{"stream-seq", "c"}}).status, 204);
}

}  // namespace
}  // namespace runnel::server
