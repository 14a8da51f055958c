// The stream cache (core/stream_cache.h): bounded, and one per registry, shared by the
// registry's appends by name and the protocol's plain appends through runnel::Streams.
#include "core/stream_cache.h"

#include <gtest/gtest.h>

#include <memory>
#include <mutex>
#include <string>

#include "runnel/registry.h"
#include "runnel/streams.h"
#include "support/forwarding_store.h"

namespace runnel {
namespace {

std::shared_ptr<const protocol::Found> Entry(StreamId id) {
  auto found = std::make_shared<protocol::Found>();
  found->info.id = id;
  return found;
}

TEST(StreamCacheTest, KeysSeparateScopesAndHoldAnyByte) {
  const std::string a = internal::StreamCache::Key(StreamScope::Global(), "s");
  const std::string b = internal::StreamCache::Key(StreamScope::Tenant("t"), "s");
  EXPECT_NE(a, b);
  // A name holding the separator cannot stand for another scope's name.
  EXPECT_NE(internal::StreamCache::Key(StreamScope::Global(), std::string("x\0y", 3)),
            internal::StreamCache::Key(StreamScope::Global(), "x"));
}

TEST(StreamCacheTest, IsBoundedByItsCapacity) {
  internal::StreamCache cache;
  cache.SetCapacity(2);
  cache.Put("a", Entry(1));
  cache.Put("b", Entry(2));
  EXPECT_EQ(cache.Get("a")->info.id, 1u);
  cache.Put("c", Entry(3));  // full: starts over
  EXPECT_EQ(cache.Get("a"), nullptr);
  EXPECT_EQ(cache.Get("b"), nullptr);
  EXPECT_EQ(cache.Get("c")->info.id, 3u);
  cache.Erase("c");
  EXPECT_EQ(cache.Get("c"), nullptr);
  cache.SetCapacity(0);
  cache.Put("d", Entry(4));
  EXPECT_EQ(cache.Get("d"), nullptr);
}

// A memory store that counts lookups by name.
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

 private:
  std::mutex mu_;
  int lookups_ = 0;
};

class LibraryAppendCacheTest : public ::testing::Test {
 protected:
  LibraryAppendCacheTest() {
    auto store = std::make_unique<CountingStore>();
    store_ = store.get();
    registry_ = std::make_unique<StreamRegistry>(std::move(store));
    streams_ = std::make_unique<Streams>(*registry_);
  }
  Result<ProtocolAppendResult> Append(const std::string& body) {
    ProtocolAppend a;
    a.content_type = "text/plain";
    a.body = body;
    return streams_->Append(StreamScope::Global(), "s", a);
  }

  CountingStore* store_ = nullptr;
  std::unique_ptr<StreamRegistry> registry_;
  std::unique_ptr<Streams> streams_;
};

TEST_F(LibraryAppendCacheTest, AppendsLookTheStreamUpOnceThroughTheRegistrysCache) {
  ASSERT_TRUE(streams_->Create(StreamScope::Global(), "s", {.content_type = "text/plain"}).ok());
  ASSERT_TRUE(Append("1").ok());  // empty until now: not remembered (a channel may adopt it)
  const int before = store_->lookups();
  ASSERT_TRUE(Append("2").ok());
  for (int i = 3; i <= 10; ++i) ASSERT_TRUE(Append(std::to_string(i)).ok());
  EXPECT_EQ(store_->lookups(), before + 1);
  // The entry is the registry's: one cache for the process.
  auto entry =
      registry_->stream_cache().Get(internal::StreamCache::Key(StreamScope::Global(), "s"));
  ASSERT_NE(entry, nullptr);
  EXPECT_EQ(entry->info.spec.name, "s");
  // Appends with a Stream-Seq or a producer take the entry too: what their rules read (the last
  // Stream-Seq, the producer's state) the store shows them inside the append's atomic step.
  ProtocolAppend seq;
  seq.content_type = "text/plain";
  seq.body = "x";
  seq.stream_seq = "1";
  ASSERT_TRUE(streams_->Append(StreamScope::Global(), "s", seq).ok());
  EXPECT_EQ(streams_->Append(StreamScope::Global(), "s", seq).status().code(),
            StatusCode::kConflict);  // not greater than the last
  ProtocolAppend produced = seq;
  produced.stream_seq.reset();
  produced.producer = ProducerId{"p", 0, 0};
  auto first = streams_->Append(StreamScope::Global(), "s", produced);
  ASSERT_TRUE(first.ok());
  EXPECT_FALSE(first->duplicate);
  auto resent = streams_->Append(StreamScope::Global(), "s", produced);
  ASSERT_TRUE(resent.ok());
  EXPECT_TRUE(resent->duplicate);
  EXPECT_EQ(store_->lookups(), before + 1);
  auto read = streams_->Read(StreamScope::Global(), "s", 0, 100);
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(read->records.size(), 12u);  // 1..10, the Stream-Seq's and the producer's
}

TEST_F(LibraryAppendCacheTest, AStreamReplacedBehindTheCacheIsDecidedAfresh) {
  ASSERT_TRUE(streams_->Create(StreamScope::Global(), "s", {.content_type = "text/plain"}).ok());
  ASSERT_TRUE(Append("1").ok());
  ASSERT_TRUE(Append("2").ok());  // remembered now
  // Deleted and re-created below the protocol layer (as another node sharing the store would):
  // the remembered id is gone, so the store refuses it, and the append lands on the new stream.
  auto old = registry_->store().GetStream("global", "s");
  ASSERT_TRUE(old.ok());
  ASSERT_TRUE(registry_->store().DeleteStream(old->id).ok());
  ASSERT_TRUE(registry_
                  ->CreateStream(StreamScope::Global(), "s",
                                 CreateStreamOptions{.content_type = "application/json"})
                  .ok());
  auto replaced = registry_->store().GetStream("global", "s");
  ASSERT_TRUE(replaced.ok());
  ASSERT_NE(replaced->id, old->id);
  // The new stream holds JSON: the fresh decision refuses text/plain.
  auto refused = Append("3");
  EXPECT_EQ(refused.status().code(), StatusCode::kConflict);
  ProtocolAppend json;
  json.content_type = "application/json";
  json.body = "4";
  auto landed = streams_->Append(StreamScope::Global(), "s", json);
  ASSERT_TRUE(landed.ok()) << landed.status().ToString();
  auto now = registry_->store().GetStreamById(replaced->id);
  ASSERT_TRUE(now.ok());
  EXPECT_EQ(now->event_count, 1u);
}

}  // namespace
}  // namespace runnel
