// Runs the same random operations against the memory store (the reference implementation) and
// the log store, reopening the log store now and then, and requires identical observable
// results: statuses, offsets, records, catalog rows, cursors and producer state
// (support/store_differential.h).
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "log/log_harness.h"
#include "log/log_test_util.h"
#include "runnel/log_store.h"
#include "support/store_differential.h"

namespace runnel::testing {
namespace {

class LogDifferentialTest : public ::testing::TestWithParam<int> {};

TEST_P(LogDifferentialTest, LogStoreMatchesTheMemoryStore) {
  TempDir dir;
  ManualClock clock(10'000);
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

  DifferentialSubject subject;
  subject.store = [&log](uint64_t) -> Store& { return *log; };
  subject.all = [&log] { return std::vector<Store*>{log.get()}; };
  subject.reopen = [&log, &options](uint64_t) {
    log.reset();
    auto again = OpenLogStore(options);
    ASSERT_TRUE(again.ok()) << again.status().ToString();
    log = std::move(*again);
  };
  DifferentialOptions run;
  run.seed = static_cast<uint64_t>(GetParam());
  run.steps = 600;
  run.max_payload = 600;
  run.names = {"a", "b", "c", "d"};
  run.clock = &clock;
  RunDifferential(*mem, subject, run);
}

INSTANTIATE_TEST_SUITE_P(Seeds, LogDifferentialTest, ::testing::Range(0, 6));

}  // namespace
}  // namespace runnel::testing
