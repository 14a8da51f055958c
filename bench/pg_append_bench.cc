// Load generator for the PostgreSQL store: C client threads, each appending one 100-byte record
// at a time and waiting for its acknowledgement (the same shape as pgbench's one row per
// transaction), for a fixed time. Group commit is what lets the store beat one transaction per
// row. Prints rows/s, and the append transactions per second with their mean records and commit
// round trip (from the store's commit stats). bench/pg_bench.sh runs it on a private cluster next
// to pgbench.
//
//   RUNNEL_TEST_PG_URL=postgresql://... pg_append_bench [clients] [seconds] [streams] [workers]
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "runnel/postgres_store.h"

namespace {

runnel::Result<runnel::AppendResult> AppendSync(runnel::Store& store, runnel::AppendRequest req) {
  std::optional<runnel::Result<runnel::AppendResult>> out;
  std::mutex mu;
  std::condition_variable cv;
  store.Append(std::move(req), [&](runnel::Result<runnel::AppendResult> r) {
    std::lock_guard lock(mu);
    out.emplace(std::move(r));
    cv.notify_all();
  });
  std::unique_lock lock(mu);
  cv.wait(lock, [&] { return out.has_value(); });
  return std::move(*out);
}

}  // namespace

int main(int argc, char** argv) {
  const char* url = std::getenv("RUNNEL_TEST_PG_URL");
  if (url == nullptr || *url == '\0') {
    std::printf(
        "pg_append_bench: needs a PostgreSQL server in RUNNEL_TEST_PG_URL; "
        "bench/pg_bench.sh runs it on a private cluster next to pgbench\n");
    return 0;
  }
  const int clients = argc > 1 ? std::atoi(argv[1]) : 16;
  const int seconds = argc > 2 ? std::atoi(argv[2]) : 10;
  const int streams = argc > 3 ? std::atoi(argv[3]) : 16;
  const int workers = argc > 4 ? std::atoi(argv[4]) : 0;  // 0: the store's default
  runnel::PostgresStoreOptions options;
  options.conninfo = url;
  if (workers > 0) options.append_workers = static_cast<size_t>(workers);
  // Names are formatted with snprintf: string concatenation here trips a g++ 12 -O3
  // -Wrestrict false positive.
  char name[64];
  std::snprintf(name, sizeof(name), "bench_%d", static_cast<int>(::getpid()));
  options.schema = std::string(name);
  auto opened = runnel::OpenPostgresStore(options);
  if (!opened.ok()) {
    std::fprintf(stderr, "pg_append_bench: %s\n", opened.status().ToString().c_str());
    return 1;
  }
  auto& store = **opened;
  std::vector<runnel::StreamId> ids;
  for (int i = 0; i < streams; ++i) {
    runnel::StreamSpec spec;
    spec.ns = "bench";
    std::snprintf(name, sizeof(name), "s%d", i);
    spec.name = std::string(name);
    auto info = store.CreateStream(spec);
    if (!info.ok()) {
      std::fprintf(stderr, "pg_append_bench: %s\n", info.status().ToString().c_str());
      return 1;
    }
    ids.push_back(info->id);
  }
  const std::string payload(100, 'x');
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> rows{0};
  std::atomic<uint64_t> errors{0};
  std::vector<std::thread> threads;
  const auto start = std::chrono::steady_clock::now();
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      const runnel::StreamId id = ids[static_cast<size_t>(c % streams)];
      while (!stop.load(std::memory_order_relaxed)) {
        runnel::AppendRequest req;
        req.stream = id;
        req.now_ms = 1;
        req.records.push_back(runnel::AppendRecord{std::nullopt, payload});
        if (AppendSync(store, std::move(req)).ok()) {
          rows.fetch_add(1, std::memory_order_relaxed);
        } else {
          errors.fetch_add(1, std::memory_order_relaxed);
        }
      }
    });
  }
  const runnel::StoreCommitStats before = store.CommitStats();
  std::this_thread::sleep_for(std::chrono::seconds(seconds));
  stop = true;
  for (auto& t : threads) t.join();
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // The append transactions of the run: how many records each carried, and how long each took
  // from sending its statements to the reply to COMMIT.
  const runnel::StoreCommitStats after = store.CommitStats();
  const double txns = static_cast<double>(after.syncs - before.syncs);
  std::printf(
      "runnel_rows=%llu errors=%llu seconds=%.2f rows_per_s=%.0f transactions_per_s=%.0f "
      "rows_per_transaction=%.1f commit_ms=%.3f\n",
      static_cast<unsigned long long>(rows.load()), static_cast<unsigned long long>(errors.load()),
      elapsed, static_cast<double>(rows.load()) / elapsed, txns / elapsed,
      txns > 0 ? static_cast<double>(after.records - before.records) / txns : 0.0,
      txns > 0 ? static_cast<double>(after.sync_micros - before.sync_micros) / txns / 1000 : 0.0);
  return errors.load() == 0 ? 0 : 1;
}
