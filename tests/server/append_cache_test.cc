// The append path's stream cache (core/stream_cache.h, used through protocol::Catalog): plain
// appends decide from a remembered lookup instead of reading the catalog each time, and a stale
// entry can only cause a refusal that is then decided again from a fresh lookup, never a wrong
// acceptance. Two services over two registries (each with its own stream cache) stand for two
// server nodes over one shared store: what one node does to a stream (delete, re-create, close,
// soft delete) the other's cache does not see.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "core/attributes.h"
#include "runnel/channel.h"
#include "runnel/clock.h"
#include "runnel/registry.h"
#include "runnel/store.h"
#include "server/stream_service.h"
#include "support/forwarding_store.h"
#include "support/write_sync.h"

namespace runnel::server {
namespace {

// A memory store that counts catalog reads by name.
class CountingStore : public testing::ForwardingStore {
 public:
  Result<StreamInfo> GetStream(std::string_view ns, std::string_view name) override {
    {
      std::lock_guard lock(mu_);
      ++lookups_;
    }
    return ForwardingStore::GetStream(ns, name);
  }
  int lookups() {
    std::lock_guard lock(mu_);
    return lookups_;
  }
  // Runs once, at the next append, before the store sees it: another node's write landing
  // between this node's read and its append.
  void BeforeNextAppend(std::function<void()> fn) { before_append_ = std::move(fn); }
  void Append(AppendRequest request, AppendCallback done) override {
    if (auto fn = std::exchange(before_append_, nullptr)) fn();
    ForwardingStore::Append(std::move(request), std::move(done));
  }
  // Runs once, before the next catalog update of stream `id`.
  void BeforeNextUpdate(StreamId id, std::function<void()> fn) {
    update_target_ = id;
    before_update_ = std::move(fn);
  }
  Status UpdateStream(StreamId id, const std::optional<StreamRetention>& retention,
                      std::string_view attributes,
                      std::optional<std::string_view> expected_attributes,
                      std::optional<uint64_t> expected_next_offset) override {
    if (id == update_target_) {
      if (auto fn = std::exchange(before_update_, nullptr)) fn();
    }
    if (id == fail_update_) {
      fail_update_ = 0;
      return Status::Unavailable("injected: the node stopped before this update");
    }
    return ForwardingStore::UpdateStream(id, retention, attributes, expected_attributes,
                                         expected_next_offset);
  }
  // The next catalog update of stream `id` fails (and changes nothing), as if this node
  // stopped just before it.
  void FailNextUpdate(StreamId id) { fail_update_ = id; }
  // Every delete fails while set: a node that stopped does not clean up after itself.
  void FailDeletes(bool fail) { fail_deletes_ = fail; }
  Status DeleteStream(StreamId id) override {
    if (fail_deletes_) return Status::Unavailable("injected: the node stopped");
    return ForwardingStore::DeleteStream(id);
  }

 private:
  std::mutex mu_;
  int lookups_ = 0;                      // GUARDED_BY(mu_)
  std::function<void()> before_append_;  // test thread only
  StreamId update_target_ = 0;
  std::function<void()> before_update_;
  StreamId fail_update_ = 0;
  bool fail_deletes_ = false;
};

class AppendCacheTest : public ::testing::Test {
 protected:
  AppendCacheTest() {
    // Each node has its own registry, and so its own stream cache, over the one shared store.
    auto store = std::make_shared<CountingStore>();
    store_ = store.get();
    StreamRegistry registry_a(std::make_unique<testing::ForwardingStore>(store), &clock_);
    StreamRegistry registry_b(std::make_unique<testing::ForwardingStore>(store), &clock_);
    registry_ = std::make_unique<StreamRegistry>(registry_a);
    node_a_ = std::make_unique<StreamService>(registry_a, StreamServiceOptions{}, nullptr);
    node_b_ = std::make_unique<StreamService>(registry_b, StreamServiceOptions{}, nullptr);
  }

  static HttpResponse Write(StreamService& node, const std::string& method, const std::string& path,
                            const std::string& body,
                            std::map<std::string, std::string> headers = {}) {
    HttpRequest request;
    request.method = method;
    request.path = path;
    request.headers.insert(headers.begin(), headers.end());
    if (!request.headers.count("content-type")) request.headers["content-type"] = "text/plain";
    request.body = body;
    return testing::WriteSync(node, std::move(request));
  }

  uint64_t EventCount(const std::string& name) {
    auto info = store_->GetStream("global", name);
    return info.ok() ? info->event_count : 0;
  }

  ManualClock clock_{Clock::Real()->NowMs()};
  // The protocol's metadata ("ds") in a stream's attributes, as stored.
  static std::string Meta(const StreamInfo& info) {
    auto ds = attributes::Get(info.spec.attributes, "ds");
    return ds.ok() && ds->has_value() ? **ds : std::string();
  }

  CountingStore* store_ = nullptr;
  std::unique_ptr<StreamRegistry> registry_;  // the nodes' registry (copies share state)
  std::unique_ptr<StreamService> node_a_;
  std::unique_ptr<StreamService> node_b_;
};

TEST_F(AppendCacheTest, PlainAppendsReadTheCatalogOnce) {
  ASSERT_EQ(Write(*node_a_, "PUT", "/v1/stream/s", "").status, 201);
  const int before = store_->lookups();
  ASSERT_EQ(Write(*node_a_, "POST", "/v1/stream/s", "1").status, 204);
  EXPECT_EQ(store_->lookups(), before + 1);
  // The first lookup found the stream empty (a channel could still adopt it): not remembered.
  ASSERT_EQ(Write(*node_a_, "POST", "/v1/stream/s", "2").status, 204);
  EXPECT_EQ(store_->lookups(), before + 2);
  for (int i = 3; i <= 10; ++i) {
    ASSERT_EQ(Write(*node_a_, "POST", "/v1/stream/s", std::to_string(i)).status, 204);
  }
  EXPECT_EQ(store_->lookups(), before + 2);
  EXPECT_EQ(EventCount("s"), 10u);
  // A refusal from the service's own checks is decided from a fresh lookup, and the entry
  // stays valid for the stream: the wrong content type is refused, the next append is cached.
  EXPECT_EQ(
      Write(*node_a_, "POST", "/v1/stream/s", "x", {{"content-type", "application/json"}}).status,
      409);
  EXPECT_EQ(EventCount("s"), 10u);
}

TEST_F(AppendCacheTest, AStreamRecreatedOnAnotherNodeIsValidatedAfresh) {
  ASSERT_EQ(Write(*node_a_, "PUT", "/v1/stream/s", "").status, 201);
  ASSERT_EQ(Write(*node_a_, "POST", "/v1/stream/s", "old").status, 204);
  // Node B deletes the stream and creates a JSON stream under the same name.
  ASSERT_EQ(Write(*node_b_, "DELETE", "/v1/stream/s", "").status, 204);
  ASSERT_EQ(
      Write(*node_b_, "PUT", "/v1/stream/s", "", {{"content-type", "application/json"}}).status,
      201);
  // Node A's remembered stream is gone: its text append is checked against the new stream.
  HttpResponse r = Write(*node_a_, "POST", "/v1/stream/s", "text");
  EXPECT_EQ(r.status, 409) << r.body;
  EXPECT_EQ(EventCount("s"), 0u);
  r = Write(*node_a_, "POST", "/v1/stream/s", R"({"n":1})", {{"content-type", "application/json"}});
  EXPECT_EQ(r.status, 204) << r.body;
  EXPECT_EQ(EventCount("s"), 1u);
}

TEST_F(AppendCacheTest, AStreamDeletedOnAnotherNodeAnswers404) {
  ASSERT_EQ(Write(*node_a_, "PUT", "/v1/stream/s", "").status, 201);
  ASSERT_EQ(Write(*node_a_, "POST", "/v1/stream/s", "a").status, 204);
  ASSERT_EQ(Write(*node_b_, "DELETE", "/v1/stream/s", "").status, 204);
  EXPECT_EQ(Write(*node_a_, "POST", "/v1/stream/s", "b").status, 404);
}

TEST_F(AppendCacheTest, AStreamClosedOnAnotherNodeRefusesWithStreamClosed) {
  ASSERT_EQ(Write(*node_a_, "PUT", "/v1/stream/s", "").status, 201);
  ASSERT_EQ(Write(*node_a_, "POST", "/v1/stream/s", "a").status, 204);
  ASSERT_EQ(Write(*node_b_, "POST", "/v1/stream/s", "", {{"stream-closed", "true"}}).status, 204);
  HttpResponse r = Write(*node_a_, "POST", "/v1/stream/s", "b");
  EXPECT_EQ(r.status, 409) << r.body;
  bool closed = false;
  for (const auto& [name, value] : r.headers)
    closed = closed || (name == "Stream-Closed" && value == "true");
  EXPECT_TRUE(closed);
  EXPECT_EQ(EventCount("s"), 1u);
}

// A soft delete (the stream still has forks) closes the stream in the store in the same commit,
// so a node that remembers the stream as live cannot append to it: 410 like a fresh lookup.
TEST_F(AppendCacheTest, AStreamSoftDeletedOnAnotherNodeAnswersGone) {
  ASSERT_EQ(Write(*node_a_, "PUT", "/v1/stream/src", "").status, 201);
  ASSERT_EQ(Write(*node_a_, "POST", "/v1/stream/src", "a").status, 204);
  ASSERT_EQ(
      Write(*node_b_, "PUT", "/v1/stream/fork", "", {{"stream-forked-from", "/v1/stream/src"}})
          .status,
      201);
  ASSERT_EQ(Write(*node_b_, "DELETE", "/v1/stream/src", "").status, 204);
  EXPECT_EQ(Write(*node_a_, "POST", "/v1/stream/src", "b").status, 410);
  EXPECT_EQ(EventCount("src"), 1u);
  // The fork still reads its inherited record and takes appends.
  EXPECT_EQ(Write(*node_a_, "POST", "/v1/stream/fork", "c").status, 204);
}

TEST_F(AppendCacheTest, ConditionalAndLaneAppendsUseTheCacheAndAreDecidedByTheStore) {
  ASSERT_EQ(Write(*node_a_, "PUT", "/v1/stream/s", "").status, 201);
  ASSERT_EQ(Write(*node_a_, "POST", "/v1/stream/s", "a").status, 204);
  ASSERT_EQ(Write(*node_a_, "POST", "/v1/stream/s", "a2").status, 204);  // remembered now
  const int before = store_->lookups();
  ASSERT_EQ(Write(*node_a_, "POST", "/v1/stream/s", "b", {{"stream-seq", "1"}}).status, 204);
  // The rules that read the stream's state run inside the store's append, not on the entry.
  EXPECT_EQ(Write(*node_a_, "POST", "/v1/stream/s", "b", {{"stream-seq", "1"}}).status, 409);
  EXPECT_EQ(Write(*node_a_, "POST", "/v1/stream/s", "c",
                  {{"stream-expected-offset", "0000000000000000_0000000000000003"}})
                .status,
            204);
  const HttpResponse stale =
      Write(*node_a_, "POST", "/v1/stream/s", "d",
            {{"stream-expected-offset", "0000000000000000_0000000000000003"}});
  EXPECT_EQ(stale.status, 409);
  std::string next;
  for (const auto& [name, value] : stale.headers) {
    if (name == "Stream-Next-Offset") next = value;
  }
  EXPECT_EQ(next, "0000000000000000_0000000000000004");
  EXPECT_EQ(store_->lookups(), before);
  EXPECT_EQ(EventCount("s"), 4u);
}

// Stream-Seq is a read-modify-write of the stream's attributes. Two nodes that both read the
// last Stream-Seq before either appends must not both accept the same next one (PROTOCOL 5.2):
// the append expects the attributes it read, the store refuses it when another node's append
// changed them, and the request is decided again from what is stored: 409.
TEST_F(AppendCacheTest, TheSameStreamSeqThroughTwoNodesIsAcceptedOnce) {
  ASSERT_EQ(Write(*node_a_, "PUT", "/v1/stream/s", "").status, 201);
  ASSERT_EQ(Write(*node_a_, "POST", "/v1/stream/s", "a", {{"stream-seq", "1"}}).status, 204);
  int node_b_status = 0;
  store_->BeforeNextAppend([&] {
    node_b_status = Write(*node_b_, "POST", "/v1/stream/s", "B", {{"stream-seq", "2"}}).status;
  });
  const HttpResponse node_a = Write(*node_a_, "POST", "/v1/stream/s", "A", {{"stream-seq", "2"}});
  EXPECT_EQ(node_b_status, 204);
  EXPECT_EQ(node_a.status, 409) << node_a.body;
  EXPECT_EQ(EventCount("s"), 2u);
  // A later Stream-Seq still goes through either node.
  EXPECT_EQ(Write(*node_a_, "POST", "/v1/stream/s", "c", {{"stream-seq", "3"}}).status, 204);
  EXPECT_EQ(EventCount("s"), 3u);
}

// An idempotent producer's resend that races the original through another node commits once;
// the loser answers as a duplicate does, 204 with the highest sequence accepted in the epoch
// (PROTOCOL 5.2.1), which the other node may already have moved past the resent one.
TEST_F(AppendCacheTest, AProducerResendThroughAnotherNodeCommitsOnce) {
  ASSERT_EQ(Write(*node_a_, "PUT", "/v1/stream/p", "").status, 201);
  auto producer = [](int seq) {
    return std::map<std::string, std::string>{
        {"producer-id", "w"}, {"producer-epoch", "0"}, {"producer-seq", std::to_string(seq)}};
  };
  ASSERT_EQ(Write(*node_a_, "POST", "/v1/stream/p", "m0", producer(0)).status, 200);
  int node_b_first = 0;
  int node_b_second = 0;
  store_->BeforeNextAppend([&] {
    node_b_first = Write(*node_b_, "POST", "/v1/stream/p", "m1", producer(1)).status;
    node_b_second = Write(*node_b_, "POST", "/v1/stream/p", "m2", producer(2)).status;
  });
  const HttpResponse resent = Write(*node_a_, "POST", "/v1/stream/p", "m1", producer(1));
  EXPECT_EQ(node_b_first, 200);
  EXPECT_EQ(node_b_second, 200);
  EXPECT_EQ(resent.status, 204) << resent.body;
  std::string seq_header;
  for (const auto& [name, value] : resent.headers) {
    if (name == "Producer-Seq") seq_header = value;
  }
  EXPECT_EQ(seq_header, "2");
  EXPECT_EQ(EventCount("p"), 3u);
}

// A fork's reference count on its source is a read-modify-write of the source's attributes.
// Two forks created through two nodes at once must both count, or deleting the source and
// then one fork would delete the source's data under the other (PROTOCOL 4.2, soft delete).
TEST_F(AppendCacheTest, ForksCreatedThroughTwoNodesAtOnceBothCount) {
  ASSERT_EQ(Write(*node_a_, "PUT", "/v1/stream/src", "x").status, 201);
  auto source = store_->GetStream("global", "src");
  ASSERT_TRUE(source.ok());
  const std::map<std::string, std::string> fork_of_src = {{"stream-forked-from", "/v1/stream/src"}};
  int node_b_status = 0;
  store_->BeforeNextUpdate(source->id, [&] {
    node_b_status = Write(*node_b_, "PUT", "/v1/stream/f2", "", fork_of_src).status;
  });
  ASSERT_EQ(Write(*node_a_, "PUT", "/v1/stream/f1", "", fork_of_src).status, 201);
  ASSERT_EQ(node_b_status, 201);
  EXPECT_EQ(Write(*node_a_, "DELETE", "/v1/stream/src", "").status, 204);
  EXPECT_EQ(Write(*node_a_, "DELETE", "/v1/stream/f1", "").status, 204);
  // f2 still references the source: soft-deleted (410 to direct operations), not gone.
  EXPECT_EQ(Write(*node_b_, "POST", "/v1/stream/src", "y").status, 410);
  EXPECT_EQ(Write(*node_b_, "DELETE", "/v1/stream/f2", "").status, 204);
  EXPECT_EQ(Write(*node_b_, "POST", "/v1/stream/src", "y").status, 404);
}

// A create with a body commits the stream and its first records in two steps. In between the
// stream exists in the store but not for other requests (404), so nothing can be appended
// before its initial records, through this node or another (PROTOCOL 5.1: with Stream-Closed
// the body is the stream's complete content).
TEST_F(AppendCacheTest, NothingLandsBeforeACreatesInitialRecords) {
  int node_b_append = 0;
  std::string node_b_listing;
  store_->BeforeNextAppend([&] {
    node_b_append = Write(*node_b_, "POST", "/v1/stream/s", "intruder").status;
    HttpRequest list;
    list.method = "GET";
    list.path = "/v1/streams";
    node_b_listing = node_b_->HandleList(ParseRoute(list.path), list).body;
  });
  const HttpResponse created =
      Write(*node_a_, "PUT", "/v1/stream/s", "initial", {{"stream-closed", "true"}});
  EXPECT_EQ(created.status, 201) << created.body;
  EXPECT_EQ(node_b_append, 404);
  EXPECT_EQ(node_b_listing.find("\"s\""), std::string::npos) << node_b_listing;  // not listed
  EXPECT_EQ(EventCount("s"), 1u);
  EXPECT_EQ(Write(*node_b_, "POST", "/v1/stream/s", "late").status, 409);  // closed
}

// Two identical creates with a body through two nodes at once: the one that loses the name
// waits for the winner's initial records and answers as a re-create does (200), not 409.
TEST_F(AppendCacheTest, IdenticalCreatesRacingThroughTwoNodesBothSucceed) {
  std::thread node_b_thread;
  HttpResponse node_b;
  store_->BeforeNextAppend([&] {
    node_b_thread =
        std::thread([&] { node_b = Write(*node_b_, "PUT", "/v1/stream/s", "initial", {}); });
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // it finds the name taken
  });
  const HttpResponse node_a = Write(*node_a_, "PUT", "/v1/stream/s", "initial", {});
  node_b_thread.join();
  EXPECT_EQ(node_a.status, 201) << node_a.body;
  EXPECT_EQ(node_b.status, 200) << node_b.body;
  EXPECT_EQ(EventCount("s"), 1u);
}

// A stream left half-created by a stopped node (still marked after kStaleCreationMs) is
// removed by the next request for its name, which then finds the name free.
TEST_F(AppendCacheTest, AnInterruptedCreateFreesTheNameLater) {
  StreamSpec spec;
  spec.ns = "global";
  spec.name = "s";
  spec.content_type = "text/plain";
  spec.created_at_ms = 1;  // long ago
  auto attrs = attributes::Set("", "ds", R"({"creating":true})");
  ASSERT_TRUE(attrs.ok());
  spec.attributes = *attrs;
  ASSERT_TRUE(store_->CreateStream(spec).ok());
  EXPECT_EQ(Write(*node_a_, "POST", "/v1/stream/s", "x").status, 404);
  EXPECT_EQ(Write(*node_a_, "PUT", "/v1/stream/s", "fresh").status, 201);
  EXPECT_EQ(EventCount("s"), 1u);
}

// A channel adopting an empty stream races a plain append to it. Either order must leave no
// record that is not an envelope under the partition's tag.
//
// The tag first: the append was validated against the untagged stream, the channel tags it
// before the append reaches the store. The append expects the attributes it saw, so it is
// refused and decided again from a fresh lookup: 409, nothing written, the channel intact.
TEST_F(AppendCacheTest, APlainAppendLosingToAChannelsAdoptionIsRefused) {
  ASSERT_EQ(Write(*node_a_, "PUT", "/v1/stream/ad:0", "").status, 201);
  Status opened = Status::Internal("not run");
  store_->BeforeNextAppend([&] { opened = DurableChannel::Open("ad", 1, *registry_).status(); });
  HttpResponse r = Write(*node_a_, "POST", "/v1/stream/ad:0", "junk");
  ASSERT_TRUE(opened.ok()) << opened.ToString();
  EXPECT_EQ(r.status, 409) << r.body;
  EXPECT_EQ(EventCount("ad:0"), 0u);
  auto channel = DurableChannel::Open("ad", 1, *registry_);
  ASSERT_TRUE(channel.ok()) << channel.status().ToString();
  // The partition holds only envelopes: the first publish gets the first offset.
  MessageEnvelope message;
  message.publisher_id = "p";
  message.payload = "m";
  auto position = channel->Publish(message);
  ASSERT_TRUE(position.ok()) << position.status().ToString();
  EXPECT_EQ(*position, 1u);
  EXPECT_EQ(EventCount("ad:0"), 1u);
}

// The append first: it commits between the channel's check that the stream is empty and its
// tag. The tag expects the tail it checked, so it is refused; the channel looks again, finds a
// record that is not an envelope and refuses to adopt the stream (it stays untagged).
TEST_F(AppendCacheTest, AChannelsAdoptionLosingToAPlainAppendIsRefused) {
  ASSERT_EQ(Write(*node_a_, "PUT", "/v1/stream/ad:0", "").status, 201);
  auto info = store_->GetStream("global", "ad:0");
  ASSERT_TRUE(info.ok());
  int appended = 0;
  store_->BeforeNextUpdate(
      info->id, [&] { appended = Write(*node_b_, "POST", "/v1/stream/ad:0", "x").status; });
  auto channel = DurableChannel::Open("ad", 1, *registry_);
  EXPECT_EQ(appended, 204);
  ASSERT_FALSE(channel.ok());
  EXPECT_NE(channel.status().message().find("holds records"), std::string::npos)
      << channel.status().ToString();
  info = store_->GetStream("global", "ad:0");
  ASSERT_TRUE(info.ok());
  auto tag = attributes::Get(info->spec.attributes, DurableChannel::kAttributeKey);
  ASSERT_TRUE(tag.ok());
  EXPECT_FALSE(tag->has_value()) << info->spec.attributes;
  EXPECT_EQ(Write(*node_a_, "POST", "/v1/stream/ad:0", "y").status, 204);
  EXPECT_EQ(EventCount("ad:0"), 2u);
}

// A retention PATCH racing a metadata write of the same stream (here a fork counting itself on
// its source; Stream-Seq bookkeeping, soft deletes and recorded accesses write the same way):
// the metadata write changes the attributes alone, so the PATCH that landed between its read
// and its write stays.
TEST_F(AppendCacheTest, ARetentionChangeRacingAForkCountIsKept) {
  ASSERT_EQ(Write(*node_a_, "PUT", "/v1/stream/src", "").status, 201);
  ASSERT_EQ(Write(*node_a_, "POST", "/v1/stream/src", "a").status, 204);
  auto info = store_->GetStream("global", "src");
  ASSERT_TRUE(info.ok());
  int patched = 0;
  store_->BeforeNextUpdate(info->id, [&] {
    patched = Write(*node_b_, "PATCH", "/v1/stream/src", "", {{"stream-retention-max-events", "5"}})
                  .status;
  });
  ASSERT_EQ(
      Write(*node_a_, "PUT", "/v1/stream/fork", "", {{"stream-forked-from", "/v1/stream/src"}})
          .status,
      201);
  EXPECT_EQ(patched, 204);
  info = store_->GetStream("global", "src");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->spec.retention.max_events, std::optional<uint64_t>(5));
  // The fork was counted too: deleting the source keeps its data for the fork.
  ASSERT_EQ(Write(*node_a_, "DELETE", "/v1/stream/src", "").status, 204);
  EXPECT_EQ(EventCount("src"), 1u);
}

// A fork's node stops after creating the fork (marked creating) but before listing it on its
// source. When the stale fork is removed later, it must not release a source that another fork
// still holds: a count decremented for it would have let the source's DELETE collect it.
TEST_F(AppendCacheTest, AForkWhoseNodeStoppedBeforeListingItReleasesNothing) {
  ASSERT_EQ(Write(*node_a_, "PUT", "/v1/stream/src", "a").status, 201);
  const std::map<std::string, std::string> fork_src = {{"stream-forked-from", "/v1/stream/src"}};
  ASSERT_EQ(Write(*node_a_, "PUT", "/v1/stream/f1", "", fork_src).status, 201);
  auto src = store_->GetStream("global", "src");
  ASSERT_TRUE(src.ok());
  store_->FailNextUpdate(src->id);
  store_->FailDeletes(true);
  EXPECT_EQ(Write(*node_b_, "PUT", "/v1/stream/f2", "", fork_src).status, 503);
  store_->FailDeletes(false);
  EXPECT_TRUE(store_->GetStream("global", "f2").ok());  // left behind, still marked creating
  // Past the stale-creation age, the next lookup of its name removes it.
  clock_.Advance(11'000);
  EXPECT_EQ(Write(*node_a_, "POST", "/v1/stream/f2", "x").status, 404);
  EXPECT_EQ(store_->GetStream("global", "f2").status().code(), StatusCode::kNotFound);
  // f1 still holds the source: its DELETE soft-deletes it, keeping its records.
  ASSERT_EQ(Write(*node_a_, "DELETE", "/v1/stream/src", "").status, 204);
  EXPECT_EQ(EventCount("src"), 1u);
  EXPECT_EQ(Write(*node_a_, "PUT", "/v1/stream/src", "").status, 409);
  // The last fork's removal collects it.
  ASSERT_EQ(Write(*node_a_, "DELETE", "/v1/stream/f1", "").status, 204);
  EXPECT_EQ(store_->GetStream("global", "src").status().code(), StatusCode::kNotFound);
}

// A fork's listing fails while its creator is still running: the fork is not answered as
// created, so it is not left behind either.
TEST_F(AppendCacheTest, AForkThatCouldNotBeListedIsNotLeftBehind) {
  ASSERT_EQ(Write(*node_a_, "PUT", "/v1/stream/src", "a").status, 201);
  auto src = store_->GetStream("global", "src");
  ASSERT_TRUE(src.ok());
  store_->FailNextUpdate(src->id);
  EXPECT_EQ(
      Write(*node_a_, "PUT", "/v1/stream/f", "", {{"stream-forked-from", "/v1/stream/src"}}).status,
      503);
  EXPECT_EQ(store_->GetStream("global", "f").status().code(), StatusCode::kNotFound);
  // Nothing holds the source: its DELETE removes it at once.
  ASSERT_EQ(Write(*node_a_, "DELETE", "/v1/stream/src", "").status, 204);
  EXPECT_EQ(store_->GetStream("global", "src").status().code(), StatusCode::kNotFound);
}

// A node removes a soft-deleted source's last fork and stops before unlisting it: the source
// must not keep its name forever. A create of that name finds the listed fork gone and
// collects the source first.
TEST_F(AppendCacheTest, AForkRemovedButStillListedDoesNotHoldItsSourceForever) {
  ASSERT_EQ(Write(*node_a_, "PUT", "/v1/stream/src", "a").status, 201);
  ASSERT_EQ(
      Write(*node_a_, "PUT", "/v1/stream/f", "", {{"stream-forked-from", "/v1/stream/src"}}).status,
      201);
  ASSERT_EQ(Write(*node_a_, "DELETE", "/v1/stream/src", "").status, 204);
  auto src = store_->GetStream("global", "src");
  ASSERT_TRUE(src.ok());
  store_->FailNextUpdate(src->id);
  EXPECT_EQ(Write(*node_b_, "DELETE", "/v1/stream/f", "").status, 503);
  EXPECT_EQ(store_->GetStream("global", "f").status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(store_->GetStream("global", "src").ok());  // soft-deleted, listing a dead fork
  HttpResponse r = Write(*node_a_, "PUT", "/v1/stream/src", "new");
  EXPECT_EQ(r.status, 201) << r.body;
  auto fresh = store_->GetStream("global", "src");
  ASSERT_TRUE(fresh.ok());
  EXPECT_NE(fresh->id, src->id);
  EXPECT_EQ(fresh->event_count, 1u);
  EXPECT_EQ(Meta(*fresh).find("forks"), std::string::npos) << Meta(*fresh);
}

// The fork list is bounded (StreamServiceOptions::max_forks_per_stream): one more is refused
// with a clear 409, and removing a fork makes room again.
TEST_F(AppendCacheTest, ForksPerStreamAreBounded) {
  StreamServiceOptions options;
  options.max_forks_per_stream = 2;
  StreamService node(*registry_, options, nullptr);
  ASSERT_EQ(Write(node, "PUT", "/v1/stream/src", "a").status, 201);
  const std::map<std::string, std::string> fork_src = {{"stream-forked-from", "/v1/stream/src"}};
  ASSERT_EQ(Write(node, "PUT", "/v1/stream/f1", "", fork_src).status, 201);
  ASSERT_EQ(Write(node, "PUT", "/v1/stream/f2", "", fork_src).status, 201);
  HttpResponse r = Write(node, "PUT", "/v1/stream/f3", "", fork_src);
  EXPECT_EQ(r.status, 409);
  EXPECT_NE(r.body.find("already has 2 forks"), std::string::npos) << r.body;
  EXPECT_EQ(store_->GetStream("global", "f3").status().code(), StatusCode::kNotFound);
  ASSERT_EQ(Write(node, "DELETE", "/v1/stream/f1", "").status, 204);
  EXPECT_EQ(Write(node, "PUT", "/v1/stream/f3", "", fork_src).status, 201);
}

// Two nodes forking one source at the same time: both pass the early check (one fork of two),
// and the second to list its fork finds the list full in the compare-and-set, so it answers
// 409 and removes its fork. The limit holds across nodes, not just within one.
TEST_F(AppendCacheTest, ForksRacingThroughTwoNodesDoNotPassTheLimit) {
  StreamServiceOptions options;
  options.max_forks_per_stream = 2;
  StreamService a(*registry_, options, nullptr);
  StreamService b(*registry_, options, nullptr);
  ASSERT_EQ(Write(a, "PUT", "/v1/stream/src", "a").status, 201);
  const std::map<std::string, std::string> fork_src = {{"stream-forked-from", "/v1/stream/src"}};
  ASSERT_EQ(Write(a, "PUT", "/v1/stream/f1", "", fork_src).status, 201);
  auto src = store_->GetStream("global", "src");
  ASSERT_TRUE(src.ok());
  // Node b creates and lists f2 just before node a lists f3 (a has checked the limit already).
  int raced = 0;
  store_->BeforeNextUpdate(src->id,
                           [&] { raced = Write(b, "PUT", "/v1/stream/f2", "", fork_src).status; });
  HttpResponse r = Write(a, "PUT", "/v1/stream/f3", "", fork_src);
  EXPECT_EQ(raced, 201);
  EXPECT_EQ(r.status, 409) << r.body;
  EXPECT_NE(r.body.find("already has 2 forks"), std::string::npos) << r.body;
  EXPECT_EQ(store_->GetStream("global", "f3").status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(store_->GetStream("global", "f2").ok());
  // The list holds exactly the two live forks: deleting both lets the source go.
  ASSERT_EQ(Write(a, "DELETE", "/v1/stream/src", "").status, 204);
  EXPECT_TRUE(store_->GetStream("global", "src").ok()) << "held by f1 and f2";
  ASSERT_EQ(Write(b, "DELETE", "/v1/stream/f1", "").status, 204);
  ASSERT_EQ(Write(a, "DELETE", "/v1/stream/f2", "").status, 204);
  EXPECT_EQ(store_->GetStream("global", "src").status().code(), StatusCode::kNotFound);
}

// Streams stored before sources listed their forks: the source counts its forks in
// "fork_refs", a fork names its source alone. Those forks still hold and release their source.
TEST_F(AppendCacheTest, ForksStoredBeforeTheListStillHoldTheirSource) {
  ASSERT_EQ(Write(*node_a_, "PUT", "/v1/stream/src", "a").status, 201);
  ASSERT_EQ(Write(*node_a_, "PUT", "/v1/stream/old", "a").status, 201);
  auto src = store_->GetStream("global", "src");
  auto old = store_->GetStream("global", "old");
  ASSERT_TRUE(src.ok() && old.ok());
  // The metadata as the earlier format wrote it.
  auto src_attrs = attributes::Set("", "ds", R"({"fork_refs":1})");
  auto old_attrs =
      attributes::Set("", "ds", R"({"fork_ns":"global","fork_name":"src","fork_position":1})");
  ASSERT_TRUE(src_attrs.ok() && old_attrs.ok());
  ASSERT_TRUE(
      store_->UpdateStream(src->id, std::nullopt, *src_attrs, std::nullopt, std::nullopt).ok());
  ASSERT_TRUE(
      store_->UpdateStream(old->id, std::nullopt, *old_attrs, std::nullopt, std::nullopt).ok());
  // A new fork joins the list next to the old count.
  ASSERT_EQ(Write(*node_a_, "PUT", "/v1/stream/new", "", {{"stream-forked-from", "/v1/stream/src"}})
                .status,
            201);
  ASSERT_EQ(Write(*node_a_, "DELETE", "/v1/stream/src", "").status, 204);
  EXPECT_TRUE(store_->GetStream("global", "src").ok());
  ASSERT_EQ(Write(*node_a_, "DELETE", "/v1/stream/new", "").status, 204);
  EXPECT_TRUE(store_->GetStream("global", "src").ok());  // the old fork still counts
  ASSERT_EQ(Write(*node_a_, "DELETE", "/v1/stream/old", "").status, 204);
  EXPECT_EQ(store_->GetStream("global", "src").status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace runnel::server
