// Stream-Seq (PROTOCOL.md 5.2) and crash safety: the last Stream-Seq must commit in the same
// store write as the records it accepted. If it were written afterwards, a crash in between
// would keep the records but forget the sequence, and the client's retry of the unacknowledged
// append would be accepted a second time. These tests watch the store writes the service makes.
#include <gtest/gtest.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runnel/registry.h"
#include "runnel/store.h"
#include "server/stream_service.h"
#include "support/forwarding_store.h"
#include "support/write_sync.h"

namespace runnel::server {
namespace {

// A memory store that records every append it writes and every catalog update.
class RecordingStore : public testing::ForwardingStore {
 public:
  Status UpdateStream(StreamId id, const std::optional<StreamRetention>& retention,
                      std::string_view attributes,
                      std::optional<std::string_view> expected_attributes,
                      std::optional<uint64_t> expected_next_offset) override {
    {
      std::lock_guard lock(mu_);
      ++updates_;
    }
    return ForwardingStore::UpdateStream(id, retention, attributes, expected_attributes,
                                         expected_next_offset);
  }
  // What an append writes is known once its guard (the protocol's rules) completed it inside
  // the store's atomic step: it is recorded there, after the append's own guard admitted it.
  void Append(AppendRequest request, AppendCallback done) override {
    auto recorder = std::make_shared<Recorder>(this, request.guard);
    request.guard = recorder.get();
    ForwardingStore::Append(std::move(request),
                            [recorder, done = std::move(done)](Result<AppendResult> result) {
                              done(std::move(result));
                            });
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
  class Recorder : public AppendGuard {
   public:
    Recorder(RecordingStore* store, AppendGuard* inner) : store_(store), inner_(inner) {}
    Status Admit(const AppendState& state, AppendRequest* request) override {
      Status admitted = inner_ != nullptr ? inner_->Admit(state, request) : Status::OK();
      if (admitted.ok()) {
        std::lock_guard lock(store_->mu_);
        store_->appends_.push_back(request->attributes);
      }
      return admitted;
    }

   private:
    RecordingStore* store_;
    AppendGuard* inner_;
  };

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
    request.headers.insert(headers.begin(), headers.end());
    request.headers["content-type"] = "text/plain";
    request.body = body;
    return testing::WriteSync(*service_, std::move(request));
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

TEST_F(StreamSeqTest, OnlyStreamsWithProtocolMetadataStoreAttributes) {
  // A plain stream stores no attributes at all (the log store then keeps no per-stream extras
  // for it); the first Stream-Seq adds them, and re-creating the stream still matches it.
  ASSERT_EQ(Write("PUT", "").status, 201);
  auto info = store_->GetStream("global", "s");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->spec.attributes, "");
  EXPECT_EQ(Write("PUT", "").status, 200);
  ASSERT_EQ(Write("POST", "a", {{"stream-seq", "0001"}}).status, 204);
  info = store_->GetStream("global", "s");
  ASSERT_TRUE(info.ok());
  EXPECT_NE(info->spec.attributes.find("0001"), std::string::npos) << info->spec.attributes;
  EXPECT_EQ(Write("PUT", "").status, 200);
}

}  // namespace
}  // namespace runnel::server
