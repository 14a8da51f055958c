// The fixture of the channel suites: a store from the StoreParam, wrapped in a FaultyStore, under
// a registry. Suites are instantiated per store at the bottom of each *_test.cc:
//
//   INSTANTIATE_TEST_SUITE_P(Memory, ChannelRulesTest,
//                            ::testing::Values(runnel::testing::MemoryStoreParam()),
//                            runnel::testing::StoreParamName);
#ifndef RUNNEL_TESTS_CHANNEL_CHANNEL_TEST_BASE_H_
#define RUNNEL_TESTS_CHANNEL_CHANNEL_TEST_BASE_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "channel/faulty_store.h"
#include "runnel/channel.h"
#include "runnel/registry.h"
#include "support/store_harness.h"

namespace runnel::testing {

class ChannelTestBase : public ::testing::TestWithParam<StoreParam> {
 protected:
  void SetUp() override {
    harness_ = GetParam().make();
    auto store = harness_->Open(&clock_);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    auto faulty = std::make_unique<FaultyStore>(std::move(*store));
    faulty_ = faulty.get();
    registry_.emplace(std::move(faulty), &clock_);
  }
  void TearDown() override {
    registry_.reset();
    harness_.reset();
  }

  StreamRegistry& registry() { return *registry_; }
  FaultyStore& faulty() { return *faulty_; }

  static MessageEnvelope Env(std::string payload, std::optional<std::string> idempotency_key = {},
                             std::optional<std::string> key = {}) {
    MessageEnvelope e;
    e.payload = std::move(payload);
    e.timestamp_ms = 1'000;
    e.publisher_id = "tester";
    e.idempotency_key = std::move(idempotency_key);
    e.key = std::move(key);
    return e;
  }

  // Every retained event of a stream in the global scope, ascending.
  std::vector<StreamEvent> ReadAll(const std::string& stream,
                                   const StreamScope& scope = StreamScope::Global()) {
    std::vector<StreamEvent> out;
    uint64_t from = 1;
    for (int page = 0; page < 100000; ++page) {
      auto events = registry_->ReadSince(scope, stream, from, StreamRegistry::kMaxReadLimit);
      EXPECT_TRUE(events.ok()) << events.status().ToString();
      if (!events.ok() || events->empty()) break;
      from = events->back().offset + 1;
      for (auto& e : *events) out.push_back(std::move(e));
    }
    return out;
  }

  // One stored row of a channel.
  struct ChannelRow {
    size_t partition;
    uint64_t offset;
    MessageEnvelope envelope;
  };
  // Every row of `channel`'s partitions, partition by partition; a gap in a partition's
  // offsets or a row that does not decode fails the test (and is left out).
  std::vector<ChannelRow> ReadChannel(const std::string& channel, size_t partitions) {
    std::vector<ChannelRow> out;
    for (size_t p = 0; p < partitions; ++p) {
      auto events = ReadAll(channel + ":" + std::to_string(p));
      for (size_t i = 0; i < events.size(); ++i) {
        EXPECT_EQ(events[i].offset, i + 1) << "gap in partition " << p;
        auto env = DecodeEnvelope(events[i].payload);
        EXPECT_TRUE(env.ok()) << env.status().ToString();
        if (env.ok()) out.push_back({p, events[i].offset, std::move(*env)});
      }
    }
    return out;
  }

  // Appends raw bytes to a stream as "another writer" would, bypassing any channel.
  uint64_t AppendRaw(const std::string& stream, std::string bytes) {
    auto r = registry_->Append(StreamScope::Global(), stream, std::nullopt, std::move(bytes),
                               clock_.NowMs());
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : 0;
  }

  ManualClock clock_{1'000'000};
  std::unique_ptr<StoreHarness> harness_;
  FaultyStore* faulty_ = nullptr;  // owned by registry_
  std::optional<StreamRegistry> registry_;
};

}  // namespace runnel::testing

#endif  // RUNNEL_TESTS_CHANNEL_CHANNEL_TEST_BASE_H_
