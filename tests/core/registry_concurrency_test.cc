// Thread-safety of the registry (R7, A8, D6, N1) under many threads; meant to run under TSan too.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "runnel/registry.h"

namespace runnel {
namespace {

TEST(RegistryConcurrencyTest, CopiesUsedFromManyThreadsShareOneConsistentState) {
  StreamRegistry reg;
  constexpr int kThreads = 4;
  constexpr int kStreams = 20;
  constexpr int kAppends = 50;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([copy = reg, t]() mutable {
      for (int s = 0; s < kStreams; ++s) {
        const std::string name = "s" + std::to_string(s);
        Status created = copy.CreateStream(StreamScope::Global(), name, StreamRetention{});
        ASSERT_TRUE(created.ok() || created.code() == StatusCode::kAlreadyExists);
        for (int i = 0; i < kAppends; ++i) {
          ASSERT_TRUE(copy.Append(StreamScope::Global(), name, std::nullopt, "x", 1).ok());
        }
        ASSERT_TRUE(copy.Ack(StreamScope::Global(), name, "g" + std::to_string(t), kAppends).ok());
        (void)copy.ListStreams(StreamScope::Global());
      }
    });
  }
  for (auto& th : threads) th.join();
  auto list = reg.ListStreams(StreamScope::Global());
  ASSERT_EQ(list.size(), static_cast<size_t>(kStreams));
  for (const auto& d : list) {
    EXPECT_EQ(d.event_count, static_cast<uint64_t>(kThreads * kAppends)) << d.name;
    EXPECT_EQ(d.tail_offset, static_cast<uint64_t>(kThreads * kAppends)) << d.name;
    EXPECT_EQ(reg.ConsumerGroupInfo(StreamScope::Global(), d.name)->size(),
              static_cast<size_t>(kThreads));
  }
}

TEST(RegistryConcurrencyTest, SubscribersRacingAppendersAlwaysCatchUp) {
  StreamRegistry reg;
  ASSERT_TRUE(reg.CreateStream(StreamScope::Global(), "s", StreamRetention{}).ok());
  constexpr uint64_t kTotal = 2000;
  std::thread writer([&] {
    for (uint64_t i = 0; i < kTotal; ++i) {
      ASSERT_TRUE(reg.Append(StreamScope::Global(), "s", std::nullopt, "x", 1).ok());
    }
  });
  // A consumer loop as documented: subscribe with the last seen offset, read, wait, re-read.
  uint64_t seen = 0;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (seen < kTotal && std::chrono::steady_clock::now() < deadline) {
    auto sub = reg.Subscribe(StreamScope::Global(), "s", "g", seen);
    ASSERT_TRUE(sub.ok());
    auto events = reg.ReadAfter(StreamScope::Global(), "s", seen, 1000);
    ASSERT_TRUE(events.ok());
    for (const auto& e : *events) {
      ASSERT_EQ(e.offset, seen + 1);
      seen = e.offset;
    }
    if (events->empty()) (void)sub->WaitFor(std::chrono::milliseconds(100));
  }
  writer.join();
  EXPECT_EQ(seen, kTotal);
}

TEST(RegistryConcurrencyTest, DeleteRacingAppendsNeverCorrupts) {
  StreamRegistry reg;
  std::atomic<bool> stop{false};
  std::thread churn([&] {
    for (int i = 0; i < 200; ++i) {
      (void)reg.CreateStream(StreamScope::Global(), "c", StreamRetention{});
      (void)reg.DeleteStream(StreamScope::Global(), "c");
    }
    stop = true;
  });
  uint64_t ok = 0;
  while (!stop.load()) {
    auto r = reg.Append(StreamScope::Global(), "c", std::nullopt, "x", 1);
    if (r.ok()) {
      ++ok;
      EXPECT_GE(*r, 1u);
    } else {
      EXPECT_EQ(r.status().code(), StatusCode::kNotFound) << r.status().ToString();
    }
  }
  churn.join();
  SUCCEED() << ok << " appends landed between deletes";
}

}  // namespace
}  // namespace runnel
