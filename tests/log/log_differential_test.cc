// Runs the same random operations against the memory store (the reference implementation) and
// the log store, reopening the log store now and then, and requires identical observable
// results: statuses, offsets, records, catalog rows, cursors and producer state.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>
#include <vector>

#include "log/log_harness.h"
#include "log/log_test_util.h"
#include "runnel/log_store.h"
#include "support/store_show.h"

namespace runnel::testing {
namespace {

class LogDifferentialTest : public ::testing::TestWithParam<int> {};

TEST_P(LogDifferentialTest, LogStoreMatchesTheMemoryStore) {
  TempDir dir;
  LogStoreOptions options = SmallLogOptions(dir.path());
  options.segment_size = 8 << 10;
  options.checkpoint_interval_bytes = 24 << 10;
  // Reads go through pread only, through a cache that holds a few batches, or mostly the cache.
  const uint64_t cache_sizes[] = {0, 2048, 32 << 20};
  options.tail_cache_bytes = cache_sizes[GetParam() % 3];
  auto mem = NewMemoryStore();
  auto opened = OpenLogStore(options);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  std::unique_ptr<Store> log = std::move(*opened);

  std::mt19937_64 rng(static_cast<uint64_t>(GetParam()) * 7919 + 1);
  auto pick = [&](uint64_t n) { return rng() % n; };
  const std::vector<std::string> names = {"a", "b", "c", "d"};
  uint64_t now = 10'000;
  for (int step = 0; step < 600; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    now += pick(50);
    const std::string name = names[pick(names.size())];
    auto mem_info = mem->GetStream("global", name);
    auto log_info = log->GetStream("global", name);
    ASSERT_EQ(Show(mem_info), Show(log_info));
    const StreamId id = mem_info.ok() ? mem_info->id : 999;
    const uint64_t dice = pick(100);
    if (dice < 8) {
      StreamSpec spec = Spec(name);
      spec.content_type = "text/plain";
      spec.attributes = "attr" + std::to_string(step);
      if (pick(3) == 0) spec.retention.max_events = 1 + pick(6);
      if (pick(4) == 0) spec.retention.max_bytes = 1 + pick(40);
      if (pick(4) == 0) spec.retention.max_age_ms = pick(200);
      if (pick(5) == 0) spec.first_offset = 1 + pick(1000);
      ASSERT_EQ(Show(mem->CreateStream(spec)), Show(log->CreateStream(spec)));
    } else if (dice < 55) {
      AppendRequest req;
      req.stream = id;
      req.now_ms = now;
      const uint64_t n = pick(5);
      for (uint64_t i = 0; i < n; ++i) {
        AppendRecord r;
        if (pick(3) == 0) r.key = "k" + std::to_string(pick(10));
        r.payload = std::string(pick(600), static_cast<char>('a' + pick(26)));
        req.records.push_back(std::move(r));
      }
      if (pick(4) == 0 && mem_info.ok()) req.expected_offset = mem_info->next_offset + pick(2);
      if (pick(5) == 0) req.producer = ProducerState{"p" + std::to_string(pick(2)), pick(3), pick(100), 0};
      req.close = pick(90) == 0;
      AppendRequest copy = req;
      ASSERT_EQ(Show(AppendSync(*mem, std::move(req))), Show(AppendSync(*log, std::move(copy))));
      ASSERT_EQ(ShowProducer(*mem, id, "p0"), ShowProducer(*log, id, "p0"));
    } else if (dice < 70) {
      const uint64_t from = pick(mem_info.ok() ? mem_info->next_offset + 2 : 5);
      const size_t limit = pick(12);
      const size_t max_bytes = pick(3) == 0 ? pick(1500) : (1u << 20);
      ASSERT_EQ(Show(mem->Read(id, from, limit, max_bytes)), Show(log->Read(id, from, limit, max_bytes)));
      auto a = mem->ReadAt(id, from);
      auto b = log->ReadAt(id, from);
      ASSERT_EQ(a.ok(), b.ok());
      if (a.ok()) {
        ASSERT_EQ(a->has_value(), b->has_value());
        if (a->has_value()) {
          ASSERT_EQ((*a)->payload, (*b)->payload);
        }
      }
    } else if (dice < 76) {
      const uint64_t through = pick(mem_info.ok() ? mem_info->next_offset + 2 : 5);
      const bool respect = pick(2) == 0;
      auto a = mem->TruncatePrefix(id, through, respect);
      auto b = log->TruncatePrefix(id, through, respect);
      ASSERT_EQ(a.ok(), b.ok());
      if (a.ok()) {
        ASSERT_EQ(*a, *b);
      }
    } else if (dice < 86) {
      const std::string consumer = "g" + std::to_string(pick(3));
      const uint64_t offset = pick(mem_info.ok() ? mem_info->next_offset + 1 : 5);
      auto a = mem->CommitCursor(id, consumer, offset, now);
      auto b = log->CommitCursor(id, consumer, offset, now);
      ASSERT_EQ(a.ok(), b.ok());
      if (a.ok()) {
        ASSERT_EQ(*a, *b);
      }
      ASSERT_EQ(ShowCursors(*mem, id), ShowCursors(*log, id));
    } else if (dice < 90) {
      StreamRetention r;
      if (pick(2) == 0) r.max_events = 1 + pick(8);
      if (pick(3) == 0) r.max_bytes = 1 + pick(100);
      ASSERT_EQ(mem->UpdateStream(id, r, "upd", std::nullopt).code(),
                log->UpdateStream(id, r, "upd", std::nullopt).code());
    } else if (dice < 93) {
      ASSERT_EQ(mem->DeleteStream(id).code(), log->DeleteStream(id).code());
    } else {
      log.reset();
      auto again = OpenLogStore(options);
      ASSERT_TRUE(again.ok()) << again.status().ToString();
      log = std::move(*again);
    }
    if (mem_info.ok()) {
      ASSERT_EQ(ShowCursors(*mem, id), ShowCursors(*log, id));
      ASSERT_EQ(Show(mem->Read(id, 0, 1000, 1 << 30)), Show(log->Read(id, 0, 1000, 1 << 30)));
    }
  }
  auto ml = mem->ListStreams("global", "", 100);
  auto ll = log->ListStreams("global", "", 100);
  ASSERT_TRUE(ml.ok() && ll.ok());
  ASSERT_EQ(ml->size(), ll->size());
  for (size_t i = 0; i < ml->size(); ++i) EXPECT_EQ(Show((*ml)[i]), Show((*ll)[i]));
}

INSTANTIATE_TEST_SUITE_P(Seeds, LogDifferentialTest, ::testing::Range(0, 6));

}  // namespace
}  // namespace runnel::testing
