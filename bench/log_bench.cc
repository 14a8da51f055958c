// Benchmarks of the embedded log store, printed side by side with the physical baseline
// measured in the same run on the same disk (a raw pwrite + fdatasync loop).
//
//   log_bench [--dir DIR] [--seconds S] [--quick]
//
// DIR (default: a new directory under /tmp) must be on the disk under test. Every figure is a
// median-free single run: rerun and compare before quoting a ratio.
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "runnel/log_store.h"
#ifdef RUNNEL_BENCH_ROCKSDB
#include <rocksdb/db.h>
#endif
#include "runnel/store.h"

namespace {

constexpr const char* kUsage =
    "usage: log_bench [--dir DIR] [--seconds S] [--quick] [--only SECTIONS]\n"
    "                 [--size BYTES] [--appenders N] [--restart-gb GB] [--churn-mb MB]\n"
    "                 [--churn-ratio R]\n"
    "                 [--group-commit-wait-us US]\n"
    "  SECTIONS: comma-separated from appends,rocksdb,catchup,tail,memory,rolls,churn,restart\n"
    "            (default: all; rocksdb runs inside appends, when built with RocksDB)\n"
    "  --churn-mb MB: records written by each churn run (default 2048, 1024 with --quick);\n"
    "            the churn section runs durability none, then fsync\n"
    "  --churn-ratio R: the cleaner's live ratio for the churn run with the cleaner on\n"
    "            (default: the store's default, LogStoreOptions::cleaner_live_ratio)\n"
    "  --restart-gb GB (or RUNNEL_BENCH_RESTART_GB): also time the restart of a data directory\n"
    "            grown to 1 GB and then GB gigabytes (off by default: it writes GB to --dir)\n"
    "  --size/--appenders restrict the appends matrix to one record size / appender count\n"
    "  --group-commit-wait-us US: the store's group-commit wait for the appends (default: the\n"
    "            store's default, LogStoreOptions::group_commit_wait_us)\n";

using Clock = std::chrono::steady_clock;
// --group-commit-wait-us: unset keeps the store's default.
std::optional<uint32_t> g_group_commit_wait_us;
using runnel::AppendRecord;
using runnel::AppendRequest;
using runnel::AppendResult;
using runnel::LogStoreOptions;
using runnel::Result;
using runnel::StreamId;

double Seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

struct Figures {
  double ops_per_s = 0;
  double mb_per_s = 0;
  double p50_us = 0;
  double p99_us = 0;
  // From the store's commit stats: records per fdatasync and the mean fdatasync time.
  double records_per_sync = 0;
  double sync_us = 0;
};

Figures Summarise(std::vector<double>& lat_us, uint64_t ops, uint64_t bytes, double secs) {
  Figures f;
  f.ops_per_s = static_cast<double>(ops) / secs;
  f.mb_per_s = static_cast<double>(bytes) / secs / 1e6;
  if (!lat_us.empty()) {
    std::sort(lat_us.begin(), lat_us.end());
    f.p50_us = lat_us[lat_us.size() / 2];
    f.p99_us = lat_us[std::min(lat_us.size() - 1, lat_us.size() * 99 / 100)];
  }
  return f;
}

// Raw baseline: pwrite `size` bytes at the end of the data and fdatasync, one at a time.
Figures RawAppendSync(const std::string& dir, size_t size, bool prezeroed, double seconds) {
  const std::string path = dir + "/raw.bin";
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) std::abort();
  const size_t span = 256u << 20;
  if (prezeroed) {
    std::string zeros(1 << 20, '\0');
    for (size_t off = 0; off < span; off += zeros.size()) {
      if (::pwrite(fd, zeros.data(), zeros.size(), static_cast<off_t>(off)) < 0) std::abort();
    }
    if (::fdatasync(fd) != 0) std::abort();
  }
  std::string buf(size, 'r');
  std::vector<double> lat;
  uint64_t ops = 0, off = 0;
  const auto start = Clock::now();
  while (Seconds(Clock::now() - start) < seconds && off + size <= span) {
    const auto t0 = Clock::now();
    if (::pwrite(fd, buf.data(), size, static_cast<off_t>(off)) != static_cast<ssize_t>(size)) {
      std::abort();
    }
    if (::fdatasync(fd) != 0) std::abort();
    lat.push_back(Seconds(Clock::now() - t0) * 1e6);
    off += size;
    ++ops;
  }
  const double secs = Seconds(Clock::now() - start);
  ::close(fd);
  ::unlink(path.c_str());
  return Summarise(lat, ops, ops * size, secs);
}

std::unique_ptr<runnel::Store> MustOpen(const LogStoreOptions& o) {
  auto s = runnel::OpenLogStore(o);
  if (!s.ok()) {
    std::fprintf(stderr, "open: %s\n", s.status().ToString().c_str());
    std::exit(1);
  }
  return std::move(*s);
}

StreamId MustCreate(runnel::Store& store, const std::string& name) {
  runnel::StreamSpec spec;
  spec.ns = "bench";
  spec.name = name;
  auto info = store.CreateStream(spec);
  if (!info.ok()) std::abort();
  return info->id;
}

Result<AppendResult> AppendOne(runnel::Store& store, StreamId id, const std::string& payload) {
  std::mutex mu;
  std::condition_variable cv;
  std::optional<Result<AppendResult>> out;
  AppendRequest req;
  req.stream = id;
  req.now_ms = 1;
  req.records.push_back(AppendRecord{std::nullopt, payload});
  store.Append(std::move(req), [&](Result<AppendResult> r) {
    std::lock_guard lock(mu);
    out.emplace(std::move(r));
    cv.notify_one();
  });
  std::unique_lock lock(mu);
  cv.wait(lock, [&] { return out.has_value(); });
  return std::move(*out);
}

// Appends `count` copies of `payload` to `id`, one at a time, each waiting for its
// acknowledgement: the latencies (ms, sorted) and the elapsed time.
struct SerialRun {
  std::vector<double> lat_ms;
  double secs = 0;
};
SerialRun SerialAppends(runnel::Store& store, StreamId id, const std::string& payload,
                        uint64_t count) {
  SerialRun run;
  run.lat_ms.reserve(count);
  const auto start = Clock::now();
  for (uint64_t i = 0; i < count; ++i) {
    const auto t = Clock::now();
    if (!AppendOne(store, id, payload).ok()) std::abort();
    run.lat_ms.push_back(Seconds(Clock::now() - t) * 1e3);
  }
  run.secs = Seconds(Clock::now() - start);
  std::sort(run.lat_ms.begin(), run.lat_ms.end());
  return run;
}

// Runs `appenders` threads for `seconds`, each calling append(thread, seq) with seq = 1, 2, ...
// until the time is up, and returns the latencies (microseconds), the count and the elapsed time.
// An append that fails aborts: a benchmark must not count errors as work.
struct TimedRun {
  std::vector<double> lat_us;
  uint64_t ops = 0;
  double secs = 0;
};
template <typename AppendFn>
TimedRun RunAppenders(int appenders, double seconds, AppendFn append) {
  std::atomic<bool> stop{false};
  std::mutex mu;
  TimedRun run;
  std::atomic<uint64_t> ops{0};
  std::vector<std::thread> threads;
  const auto start = Clock::now();
  for (int t = 0; t < appenders; ++t) {
    threads.emplace_back([&, t] {
      std::vector<double> mine;
      for (uint64_t seq = 1; !stop.load(std::memory_order_relaxed); ++seq) {
        const auto t0 = Clock::now();
        if (!append(t, seq)) std::abort();
        mine.push_back(Seconds(Clock::now() - t0) * 1e6);
        ops.fetch_add(1, std::memory_order_relaxed);
      }
      std::lock_guard lock(mu);
      run.lat_us.insert(run.lat_us.end(), mine.begin(), mine.end());
    });
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop = true;
  for (auto& t : threads) t.join();
  run.secs = Seconds(Clock::now() - start);
  run.ops = ops.load();
  return run;
}

// `appenders` threads, each appending `size`-byte records to its own stream and waiting for
// each acknowledgement (fsync mode: on disk) before the next.
Figures DurableAppends(const std::string& dir, size_t size, int appenders, double seconds) {
  std::filesystem::remove_all(dir + "/log");
  LogStoreOptions o;
  o.dir = dir + "/log";
  if (g_group_commit_wait_us) o.group_commit_wait_us = *g_group_commit_wait_us;
  auto store = MustOpen(o);
  std::vector<StreamId> ids;
  for (int i = 0; i < appenders; ++i)
    ids.push_back(MustCreate(*store, std::string("s").append(std::to_string(i))));
  const std::string payload(size, 'p');
  TimedRun run = RunAppenders(appenders, seconds, [&](int t, uint64_t) {
    return AppendOne(*store, ids[static_cast<size_t>(t)], payload).ok();
  });
  const runnel::StoreCommitStats stats = store->CommitStats();
  store.reset();
  std::filesystem::remove_all(dir + "/log");
  Figures f = Summarise(run.lat_us, run.ops, run.ops * size, run.secs);
  if (stats.syncs > 0) {
    f.records_per_sync = static_cast<double>(stats.records) / static_cast<double>(stats.syncs);
    f.sync_us = static_cast<double>(stats.sync_micros) / static_cast<double>(stats.syncs);
  }
  return f;
}

// `appenders` logical appenders, each with exactly one append in flight (fsync durability: the
// next one is issued once the previous is acknowledged, i.e. on disk), driven the way the HTTP
// server drives the store: completions are handed to `client_threads` threads (the server's io
// threads), which issue the next append. Unlike DurableAppends, an appender is not an OS thread
// blocking per append, so the figure is the store's group-commit rate rather than the kernel's
// thread wake-up rate.
Figures DurableAppendsAsync(const std::string& dir, size_t size, int appenders, int client_threads,
                            double seconds) {
  std::filesystem::remove_all(dir + "/log");
  LogStoreOptions o;
  o.dir = dir + "/log";
  if (g_group_commit_wait_us) o.group_commit_wait_us = *g_group_commit_wait_us;
  auto store = MustOpen(o);
  std::vector<StreamId> ids;
  for (int i = 0; i < appenders; ++i) {
    ids.push_back(MustCreate(*store, std::string("a").append(std::to_string(i))));
  }
  const std::string payload(size, 'p');
  std::mutex mu;
  std::condition_variable cv;
  std::vector<int> ready;   // GUARDED_BY(mu): appenders whose previous append completed
  std::vector<double> lat;  // GUARDED_BY(mu)
  int in_flight = 0;        // GUARDED_BY(mu)
  bool stop = false;        // GUARDED_BY(mu)
  std::vector<Clock::time_point> issued(static_cast<size_t>(appenders));
  uint64_t ops = 0;  // GUARDED_BY(mu)
  std::function<void(int)> issue = [&](int a) {
    AppendRequest req;
    req.stream = ids[static_cast<size_t>(a)];
    req.now_ms = 1;
    req.records.push_back(AppendRecord{std::nullopt, payload});
    issued[static_cast<size_t>(a)] = Clock::now();
    store->Append(std::move(req), [&, a](Result<AppendResult> r) {
      if (!r.ok()) std::abort();
      const double us = Seconds(Clock::now() - issued[static_cast<size_t>(a)]) * 1e6;
      std::lock_guard lock(mu);
      lat.push_back(us);
      ++ops;
      --in_flight;
      if (!stop) {
        ++in_flight;
        const bool was_empty = ready.empty();
        ready.push_back(a);
        if (was_empty) cv.notify_one();
      } else if (in_flight == 0) {
        cv.notify_all();
      }
    });
  };
  std::vector<std::thread> clients;
  const auto start = Clock::now();
  {
    std::lock_guard lock(mu);
    for (int a = 0; a < appenders; ++a) ready.push_back(a);
    in_flight = appenders;
  }
  for (int t = 0; t < client_threads; ++t) {
    clients.emplace_back([&] {
      std::vector<int> mine;
      for (;;) {
        {
          std::unique_lock lock(mu);
          cv.wait(lock, [&] { return stop || !ready.empty(); });
          if (stop) return;
          mine.swap(ready);
        }
        for (int a : mine) issue(a);
        mine.clear();
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  double secs = 0;
  uint64_t done_ops = 0;
  {
    std::unique_lock lock(mu);
    stop = true;
    secs = Seconds(Clock::now() - start);
    done_ops = ops;
    // Appenders queued but not issued will never complete.
    in_flight -= static_cast<int>(ready.size());
    ready.clear();
    cv.notify_all();
  }
  for (auto& t : clients) t.join();
  {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return in_flight == 0; });
  }
  const runnel::StoreCommitStats stats = store->CommitStats();
  store.reset();
  std::filesystem::remove_all(dir + "/log");
  Figures f = Summarise(lat, done_ops, done_ops * size, secs);
  if (stats.syncs > 0) {
    f.records_per_sync = static_cast<double>(stats.records) / static_cast<double>(stats.syncs);
    f.sync_us = static_cast<double>(stats.sync_micros) / static_cast<double>(stats.syncs);
  }
  return f;
}

#ifdef RUNNEL_BENCH_ROCKSDB
// The embedded peer: the same workload as DurableAppends on RocksDB with synced writes
// (WriteOptions::sync = true, so every acknowledged Put is in the fsync'ed WAL; RocksDB groups
// concurrent writers into one WAL write + sync, as runnel does). Key = appender / sequence.
Figures RocksDbAppends(const std::string& dir, size_t size, int appenders, double seconds) {
  const std::string path = dir + "/rocksdb";
  std::filesystem::remove_all(path);
  rocksdb::Options options;
  options.create_if_missing = true;
  rocksdb::DB* raw = nullptr;
  rocksdb::Status st = rocksdb::DB::Open(options, path, &raw);
  if (!st.ok()) {
    std::fprintf(stderr, "rocksdb open: %s\n", st.ToString().c_str());
    std::exit(1);
  }
  std::unique_ptr<rocksdb::DB> db(raw);
  rocksdb::WriteOptions sync_write;
  sync_write.sync = true;
  const std::string payload(size, 'p');
  TimedRun run = RunAppenders(appenders, seconds, [&](int t, uint64_t seq) {
    char key[32];
    std::snprintf(key, sizeof key, "s%d/%016llu", t, static_cast<unsigned long long>(seq));
    return db->Put(sync_write, key, payload).ok();
  });
  db.reset();
  std::filesystem::remove_all(path);
  return Summarise(run.lat_us, run.ops, run.ops * size, run.secs);
}
#endif

// Restart time of a large data directory. A child process appends `add_bytes` of 64 KiB records
// (16 per append, over 256 streams, durability none, then Flush) to the store in `logdir` and
// exits without closing it, as a crash would: no final checkpoint, so the next open loads the
// newest periodic checkpoint and replays the log written after it. The parent then drops the
// directory from the page cache (sync + POSIX_FADV_DONTNEED) and times the open.
void FillAndCrash(const std::string& logdir, uint64_t add_bytes) {
  std::fflush(stdout);
  const pid_t pid = ::fork();
  if (pid < 0) std::abort();
  if (pid == 0) {
    LogStoreOptions o;
    o.dir = logdir;
    o.durability.mode = runnel::LogDurability::kNone;
    auto store = MustOpen(o);
    const int nstreams = 256;
    std::vector<StreamId> ids;
    for (int i = 0; i < nstreams; ++i) {
      const std::string name = "r" + std::to_string(i);
      auto existing = store->GetStream("bench", name);
      ids.push_back(existing.ok() ? existing->id : MustCreate(*store, name));
    }
    const std::string payload(64 << 10, 'z');
    uint64_t written = 0;
    for (uint64_t i = 0; written < add_bytes; ++i) {
      AppendRequest req;
      req.stream = ids[i % ids.size()];
      req.now_ms = 1;
      for (int k = 0; k < 16; ++k) req.records.push_back(AppendRecord{std::nullopt, payload});
      written += 16 * payload.size();
      std::promise<void> done;
      store->Append(std::move(req), [&](Result<AppendResult> r) {
        if (!r.ok()) std::abort();
        done.set_value();
      });
      done.get_future().wait();
    }
    if (!store->Flush().ok()) std::abort();
    std::fflush(nullptr);
    ::_exit(0);  // no destructor: no final checkpoint
  }
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "log_bench: the filling child process failed\n");
    std::exit(1);
  }
}

uint64_t DirBytesDropCache(const std::string& dir) {
  ::sync();
  uint64_t total = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    total += e.file_size();
    const int fd = ::open(e.path().c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    (void)::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
  return total;
}

void RestartLargeDir(const std::string& dir, double total_gb) {
  const std::string logdir = dir + "/restart";
  std::filesystem::remove_all(logdir);
  LogStoreOptions o;
  o.dir = logdir;
  std::printf(
      "restart of a large data directory (checkpoint every %llu MiB of log; cold page "
      "cache; the store was killed, not closed):\n",
      static_cast<unsigned long long>(o.checkpoint_interval_bytes >> 20));
  const double first_gb = std::min(1.0, total_gb);
  uint64_t have = 0;
  for (double gb : {first_gb, total_gb}) {
    const uint64_t want = static_cast<uint64_t>(gb * static_cast<double>(1ull << 30));
    if (want <= have) continue;
    const auto w0 = Clock::now();
    FillAndCrash(logdir, want - have);
    const double write_secs = Seconds(Clock::now() - w0);
    have = want;
    const uint64_t bytes = DirBytesDropCache(logdir);
    const auto r0 = Clock::now();
    auto store = MustOpen(o);
    const double open_secs = Seconds(Clock::now() - r0);
    std::printf("  %6.2f GB on disk (written in %.0f s): restart %.3f s\n",
                static_cast<double>(bytes) / 1e9, write_secs, open_secs);
    store.reset();  // a clean close: the next fill starts after a fresh checkpoint
  }
  std::filesystem::remove_all(logdir);
}

// Steady churn: sessions (streams) are created, appended to in turns with the others, and
// deleted when done, so every segment holds records of a hundred sessions and dies only bit by
// bit. 128 sessions are live at any moment; nine in ten end after 32-224 records, one in ten
// after 1024-2048 (the long-lived ones that pin old segments when nothing copies them out), so
// about 280 MB are live in steady state. Records are 4000 bytes, appended one at a time
// (durability none: the figures are the store's own work, not the disk's sync time).
//
// Two stores run the same operations in lockstep, one with the cleaner off and one with it on
// (each append goes to both, in turns first), so a machine whose load changes weighs on both
// alike. Each store's throughput counts the time spent in its own calls (appends,
// creates, deletes). Disk use is sampled every 4 MiB of log after the first two fifths of the
// run (steady state): segment files against the live record bytes (what the sessions still
// hold), and every file of the directory (checkpoint, prepared segment and space reserve too)
// against the same.
struct ChurnFigures {
  double mb_per_s = 0;
  double p50_us = 0, p99_us = 0, worst_ms = 0;
  double segments_amp_mean = 0, segments_amp_max = 0, files_amp_max = 0;
  double live_mb = 0;
  double cleaner_mb = 0;  // live bytes the cleaner copied
  double written_mb = 0;  // record bytes appended
};

// Returns the figures of the store with cleaner ratio `ratios[0]`, then of `ratios[1]`.
// With `fsync`, the stores sync every append (their default durability) and an append carries
// 8 records (sessions get an eighth as many appends), so a run takes minutes, not hours.
std::vector<ChurnFigures> ChurnSideBySide(const std::string& dir, const double (&ratios)[2],
                                          uint64_t segment_size, uint64_t log_bytes, bool fsync) {
  constexpr int kSessions = 128;
  constexpr size_t kRecord = 4000;
  const size_t per_append = fsync ? 8 : 1;
  struct Side {
    std::string logdir;
    std::unique_ptr<runnel::Store> store;
    std::vector<StreamId> ids;
    std::vector<double> lat_us;
    double busy_secs = 0;  // time spent in this store's calls
    double amp_sum = 0;
    int samples = 0;
    runnel::StoreCommitStats before;
    ChurnFigures f;
  };
  std::vector<Side> sides(2);
  for (int k = 0; k < 2; ++k) {
    Side& side = sides[static_cast<size_t>(k)];
    side.logdir = dir + "/churn-" + std::to_string(k);
    std::filesystem::remove_all(side.logdir);
    LogStoreOptions o;
    o.dir = side.logdir;
    if (!fsync) o.durability.mode = runnel::LogDurability::kNone;
    o.segment_size = segment_size;
    o.cleaner_live_ratio = ratios[k];
    side.store = MustOpen(o);
    side.ids.resize(kSessions);
    side.before = side.store->CommitStats();
  }
  const std::string payload(kRecord, 'c');
  std::mt19937_64 rng(12345);
  std::vector<uint64_t> length(kSessions), records(kSessions);
  uint64_t created = 0;
  // Creates session `i` in both stores.
  auto start_session = [&](size_t i) {
    const std::string name = "session-" + std::to_string(created++);
    for (Side& side : sides) {
      const auto t = Clock::now();
      side.ids[i] = MustCreate(*side.store, name);
      side.busy_secs += Seconds(Clock::now() - t);
    }
    length[i] = (rng() % 10 == 0 ? 1024 + rng() % 1025 : 32 + rng() % 193) / per_append;
    records[i] = 0;
  };
  for (size_t i = 0; i < kSessions; ++i) start_session(i);
  auto dir_bytes = [](const std::string& logdir, bool segments_only) {
    uint64_t total = 0;
    for (const auto& e : std::filesystem::directory_iterator(logdir)) {
      std::error_code ec;
      const std::string name = e.path().filename().string();
      if (segments_only && !(name.size() == 24 && name.ends_with(".log"))) continue;
      const uint64_t size = e.file_size(ec);
      if (!ec) total += size;
    }
    return total;
  };
  uint64_t live_records = 0;
  uint64_t appended = 0;  // records
  uint64_t next_sample = 0;
  // Live data grows from nothing at first: the first two fifths of the run (four times the live
  // data, by default) bring it to its steady state before anything is measured.
  const uint64_t warmup = log_bytes / 5 * 2;
  uint64_t appends = 0;
  while (appended * kRecord < log_bytes) {
    const size_t i = static_cast<size_t>(rng() % kSessions);
    // Each goes first every other time: the one that goes second meets the first one's writer
    // thread still finishing up.
    for (size_t k = 0; k < 2; ++k) {
      Side& side = sides[(k + appends) % 2];
      AppendRequest req;
      req.stream = side.ids[i];
      req.now_ms = 1;
      for (size_t r = 0; r < per_append; ++r)
        req.records.push_back(AppendRecord{std::nullopt, payload});
      const auto t = Clock::now();
      std::promise<Result<AppendResult>> done;
      side.store->Append(std::move(req),
                         [&done](Result<AppendResult> r) { done.set_value(std::move(r)); });
      if (!done.get_future().get().ok()) std::abort();
      const double secs = Seconds(Clock::now() - t);
      side.busy_secs += secs;
      side.lat_us.push_back(secs * 1e6);
    }
    ++appends;
    appended += per_append;
    live_records += per_append;
    if (++records[i] >= length[i]) {
      for (Side& side : sides) {
        const auto t = Clock::now();
        if (!side.store->DeleteStream(side.ids[i]).ok()) std::abort();
        side.busy_secs += Seconds(Clock::now() - t);
      }
      live_records -= records[i] * per_append;
      start_session(i);
    }
    const uint64_t live = live_records * kRecord;
    if (appended * kRecord >= warmup && appended * kRecord >= next_sample) {
      next_sample = appended * kRecord + (4u << 20);
      for (Side& side : sides) {
        const double amp =
            static_cast<double>(dir_bytes(side.logdir, true)) / static_cast<double>(live);
        side.amp_sum += amp;
        ++side.samples;
        side.f.segments_amp_max = std::max(side.f.segments_amp_max, amp);
        side.f.files_amp_max =
            std::max(side.f.files_amp_max, static_cast<double>(dir_bytes(side.logdir, false)) /
                                               static_cast<double>(live));
        side.f.live_mb = static_cast<double>(live) / 1e6;
      }
    }
  }
  std::vector<ChurnFigures> out;
  for (Side& side : sides) {
    const runnel::StoreCommitStats after = side.store->CommitStats();
    side.store.reset();
    std::filesystem::remove_all(side.logdir);
    ChurnFigures& f = side.f;
    std::sort(side.lat_us.begin(), side.lat_us.end());
    f.written_mb = static_cast<double>(appended * kRecord) / 1e6;
    f.mb_per_s = f.written_mb / side.busy_secs;
    f.p50_us = side.lat_us[side.lat_us.size() / 2];
    f.p99_us = side.lat_us[side.lat_us.size() * 99 / 100];
    f.worst_ms = side.lat_us.back() / 1e3;
    f.segments_amp_mean = side.samples > 0 ? side.amp_sum / side.samples : 0;
    f.cleaner_mb = static_cast<double>(after.cleaner_bytes - side.before.cleaner_bytes) / 1e6;
    out.push_back(f);
  }
  return out;
}

uint64_t RssBytes() {
  std::ifstream in("/proc/self/statm");
  uint64_t pages = 0, resident = 0;
  in >> pages >> resident;
  return resident * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir;
  double seconds = 2.0;
  bool quick = false;
  std::string only;
  std::vector<size_t> sizes = {100, 4096, 65536};
  std::vector<int> appender_counts = {1, 16, 64};
  // The restart measurement writes this much; off (0) unless asked for, so a default run stays
  // short.
  double restart_gb = 0;
  if (const char* env = std::getenv("RUNNEL_BENCH_RESTART_GB")) restart_gb = std::atof(env);
  double churn_mb = 0;  // 0: the default for the run's length
  double churn_ratio = LogStoreOptions().cleaner_live_ratio;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--dir" && i + 1 < argc) {
      dir = argv[++i];
    } else if (a == "--seconds" && i + 1 < argc) {
      seconds = std::atof(argv[++i]);
    } else if (a == "--quick") {
      quick = true;
      seconds = 0.5;
    } else if (a == "--only" && i + 1 < argc) {
      only = argv[++i];
    } else if (a == "--size" && i + 1 < argc) {
      sizes = {static_cast<size_t>(std::atol(argv[++i]))};
    } else if (a == "--restart-gb" && i + 1 < argc) {
      restart_gb = std::atof(argv[++i]);
    } else if (a == "--churn-ratio" && i + 1 < argc) {
      churn_ratio = std::atof(argv[++i]);
      if (!(churn_ratio > 0 && churn_ratio < 1)) {
        std::fprintf(stderr, "log_bench: --churn-ratio must be in (0, 1)\n%s", kUsage);
        return 2;
      }
    } else if (a == "--churn-mb" && i + 1 < argc) {
      churn_mb = std::atof(argv[++i]);
      if (churn_mb < 64 || churn_mb > 1e6) {
        std::fprintf(stderr, "log_bench: --churn-mb must be in [64, 1000000]\n%s", kUsage);
        return 2;
      }
    } else if (a == "--appenders" && i + 1 < argc) {
      appender_counts = {std::atoi(argv[++i])};
    } else if (a == "--group-commit-wait-us" && i + 1 < argc) {
      const long us = std::atol(argv[++i]);
      if (us < 0 || us > 100000) {
        std::fprintf(stderr, "log_bench: --group-commit-wait-us must be in [0, 100000]\n%s",
                     kUsage);
        return 2;
      }
      g_group_commit_wait_us = static_cast<uint32_t>(us);
    } else {
      std::fprintf(stderr, "%s", kUsage);
      return 2;
    }
  }
  if (restart_gb < 0 || restart_gb > 1000) {
    std::fprintf(stderr, "log_bench: --restart-gb must be in [0, 1000]\n%s", kUsage);
    return 2;
  }
  if (seconds <= 0 || seconds > 600 || sizes[0] == 0 || sizes[0] > (64u << 20) ||
      appender_counts[0] < 1 || appender_counts[0] > 1024) {
    std::fprintf(stderr,
                 "log_bench: --seconds must be in (0, 600], --size in [1, 64 MiB], "
                 "--appenders in [1, 1024]\n%s",
                 kUsage);
    return 2;
  }
  if (churn_mb == 0) churn_mb = quick ? 1024 : 2048;
  // A section runs when --only is not given or names it.
  auto want = [&](std::string_view section) {
    if (only.empty()) return true;
    for (size_t b = 0; b <= only.size();) {
      size_t e = only.find(',', b);
      if (e == std::string::npos) e = only.size();
      if (std::string_view(only).substr(b, e - b) == section) return true;
      b = e + 1;
    }
    return false;
  };
  bool own_dir = false;
  if (dir.empty()) {
    char tmpl[] = "/tmp/runnel-log-bench-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) return 1;
    dir = tmpl;
    own_dir = true;
  }
  std::printf("log_bench: dir=%s, %.1f s per figure\n\n", dir.c_str(), seconds);

  // 1. The physical baseline and durable appends, side by side.
  if (want("appends")) {
    std::printf("%-34s %12s %10s %10s %10s %9s %9s %8s\n", "workload", "ops/s", "MB/s", "p50 us",
                "p99 us", "vs raw", "rec/sync", "sync us");
    for (size_t size : sizes) {
      Figures grow = RawAppendSync(dir, size, false, seconds);
      Figures zero = RawAppendSync(dir, size, true, seconds);
      char label[64];
      std::snprintf(label, sizeof label, "raw write+fdatasync %zu B grow", size);
      std::printf("%-34s %12.0f %10.1f %10.1f %10.1f %9s\n", label, grow.ops_per_s, grow.mb_per_s,
                  grow.p50_us, grow.p99_us, "");
      std::snprintf(label, sizeof label, "raw write+fdatasync %zu B prezero", size);
      std::printf("%-34s %12.0f %10.1f %10.1f %10.1f %9s\n", label, zero.ops_per_s, zero.mb_per_s,
                  zero.p50_us, zero.p99_us, "1.00");
      for (int appenders : appender_counts) {
        Figures f = DurableAppends(dir, size, appenders, seconds);
        std::snprintf(label, sizeof label, "runnel fsync %zu B x%d appenders", size, appenders);
        std::printf("%-34s %12.0f %10.1f %10.1f %10.1f %8.2fx %9.1f %8.0f\n", label, f.ops_per_s,
                    f.mb_per_s, f.p50_us, f.p99_us, f.mb_per_s / zero.mb_per_s, f.records_per_sync,
                    f.sync_us);
#ifdef RUNNEL_BENCH_ROCKSDB
        if (want("rocksdb")) {
          Figures r = RocksDbAppends(dir, size, appenders, seconds);
          std::snprintf(label, sizeof label, "  rocksdb sync=true, same load");
          std::printf("%-34s %12.0f %10.1f %10.1f %10.1f %8.2fx   runnel/rocksdb %.2fx\n", label,
                      r.ops_per_s, r.mb_per_s, r.p50_us, r.p99_us, r.mb_per_s / zero.mb_per_s,
                      f.ops_per_s / r.ops_per_s);
        }
#endif
        if (appenders > 1) {
          Figures a = DurableAppendsAsync(dir, size, appenders, 2, seconds);
          std::snprintf(label, sizeof label, "  same, async (2 client threads)");
          std::printf("%-34s %12.0f %10.1f %10.1f %10.1f %8.2fx %9.1f %8.0f\n", label, a.ops_per_s,
                      a.mb_per_s, a.p50_us, a.p99_us, a.mb_per_s / zero.mb_per_s,
                      a.records_per_sync, a.sync_us);
        }
      }
      std::printf("\n");
    }
    std::printf(
        "(vs raw = runnel MB/s / pre-zeroed raw MB/s of the same record size; for one\n"
        " appender compare p50 latencies: target p50 <= 1.5x raw)\n\n");
  }

  // 2. Catch-up reads: one stream written interleaved with 1,000 others vs written alone.
  if (want("catchup")) {
    std::filesystem::remove_all(dir + "/log");
    LogStoreOptions o;
    o.dir = dir + "/log";
    o.durability.mode = runnel::LogDurability::kNone;
    o.tail_cache_bytes = 0;
    auto store = MustOpen(o);
    const int others = 1000;
    const int per_stream = quick ? 20 : 100;
    std::vector<StreamId> ids;
    for (int i = 0; i <= others; ++i)
      ids.push_back(MustCreate(*store, std::string("c").append(std::to_string(i))));
    const StreamId alone = MustCreate(*store, "alone");
    const std::string payload(1024, 'c');
    for (int r = 0; r < per_stream; ++r) {
      for (StreamId id : ids) {
        if (!AppendOne(*store, id, payload).ok()) std::abort();
      }
    }
    for (int r = 0; r < per_stream * 20; ++r) {
      if (!AppendOne(*store, alone, payload).ok()) std::abort();
    }
    if (!store->Flush().ok()) std::abort();
    auto catch_up = [&](StreamId id, const char* what) {
      uint64_t bytes = 0;
      const auto t0 = Clock::now();
      int rounds = 0;
      while (Seconds(Clock::now() - t0) < seconds / 2 || rounds == 0) {
        for (uint64_t from = 1;;) {
          auto recs = store->Read(id, from, 1000, 16 << 20);
          if (!recs.ok()) std::abort();
          if (recs->empty()) break;
          for (const auto& rec : *recs) bytes += rec.payload.size();
          from = recs->back().offset + 1;
        }
        ++rounds;
      }
      const double secs = Seconds(Clock::now() - t0);
      std::printf("catch-up read, %-44s %8.0f MB/s\n", what,
                  static_cast<double>(bytes) / secs / 1e6);
    };
    catch_up(ids[0], "stream interleaved with 1,000 others (1 KiB)");
    catch_up(alone, "stream written alone (1 KiB)");
    store.reset();
    std::filesystem::remove_all(dir + "/log");
  }

  // 3. Tail read time vs stream length.
  if (want("tail")) {
    std::filesystem::remove_all(dir + "/log");
    LogStoreOptions o;
    o.dir = dir + "/log";
    o.durability.mode = runnel::LogDurability::kNone;
    o.tail_cache_bytes = 0;
    auto store = MustOpen(o);
    const uint64_t long_len = quick ? 100'000 : 1'000'000;
    const StreamId small = MustCreate(*store, "short");
    const StreamId big = MustCreate(*store, "long");
    // Both streams are written in batches of 100 records, so only the length differs.
    const uint64_t batch = 100;
    for (uint64_t i = 0; i < long_len + 1000; i += batch) {
      AppendRequest req;
      req.stream = i < 1000 ? small : big;
      req.now_ms = 1;
      for (uint64_t k = 0; k < batch; ++k) req.records.push_back(AppendRecord{std::nullopt, "y"});
      std::promise<void> done;
      store->Append(std::move(req), [&](Result<AppendResult> r) {
        if (!r.ok()) std::abort();
        done.set_value();
      });
      done.get_future().wait();
    }
    auto tail_read = [&](StreamId id, uint64_t tail) {
      const int n = 20000;
      const auto t0 = Clock::now();
      for (int i = 0; i < n; ++i) {
        if (!store->ReadAt(id, tail).ok()) std::abort();
      }
      return Seconds(Clock::now() - t0) / n * 1e6;
    };
    const double short_us = tail_read(small, 1000);
    const double long_us = tail_read(big, long_len);
    std::printf(
        "tail read (ReadAt newest, page cache): 1k-record stream %.2f us, %llu-record "
        "stream %.2f us (ratio %.2f)\n",
        short_us, static_cast<unsigned long long>(long_len), long_us, long_us / short_us);
    store.reset();
    std::filesystem::remove_all(dir + "/log");
  }

  // 4. Memory per idle stream, creation rate, restart time.
  if (want("memory")) {
    std::filesystem::remove_all(dir + "/log");
    LogStoreOptions o;
    o.dir = dir + "/log";
    o.durability.mode = runnel::LogDurability::kNone;
    auto store = MustOpen(o);
    const int n = quick ? 100'000 : 1'000'000;
    const uint64_t rss0 = RssBytes();
    const auto t0 = Clock::now();
    for (int i = 0; i < n; ++i) {
      char name[32];
      std::snprintf(name, sizeof name, "stream-%08d", i);
      MustCreate(*store, name);
    }
    const double secs = Seconds(Clock::now() - t0);
    const uint64_t rss1 = RssBytes();
    std::printf(
        "stream creation (durability none): %.0f streams/s; memory per idle stream "
        "%.0f B (RSS delta over %d streams; target <= 300 B)\n",
        n / secs, static_cast<double>(rss1 - rss0) / n, n);
    {
      const auto c0 = Clock::now();
      store.reset();  // writes the final checkpoint
      std::printf("clean close with %d streams: %.2f s\n", n, Seconds(Clock::now() - c0));
    }
    const auto r0 = Clock::now();
    store = MustOpen(o);
    std::printf("restart from checkpoint with %d streams: %.2f s\n", n, Seconds(Clock::now() - r0));
    {
      // One appender across two periodic checkpoints of this state (one every
      // checkpoint_interval_bytes of log): the writer builds each checkpoint's contents, and a
      // background thread writes the file, so the worst append waits for the build alone.
      auto id = store->GetStream("bench", "stream-00000000");
      if (!id.ok()) std::abort();
      const std::string payload(64 << 10, 'p');
      const uint64_t count = 2 * o.checkpoint_interval_bytes / payload.size() + 16;
      const runnel::StoreCommitStats before = store->CommitStats();
      const SerialRun run = SerialAppends(*store, id->id, payload, count);
      const std::vector<double>& lat = run.lat_ms;
      const double total = run.secs;
      const runnel::StoreCommitStats after = store->CommitStats();
      const uint64_t built = after.checkpoints - before.checkpoints;
      std::printf(
          "appends across 2 checkpoints of %d streams (64 KiB, durability none): p50 %.2f ms, "
          "worst %.0f ms, %.1f s for %llu appends; %llu checkpoint builds of %.0f ms each\n",
          n, lat[lat.size() / 2], lat.back(), total, static_cast<unsigned long long>(count),
          static_cast<unsigned long long>(built),
          built == 0 ? 0.0
                     : static_cast<double>(after.checkpoint_build_micros -
                                           before.checkpoint_build_micros) /
                           1e3 / static_cast<double>(built));
    }
    store.reset();
    std::filesystem::remove_all(dir + "/log");
  }
  // 5. Appends across segment rolls: with durability none the writer outruns the thread that
  // prepares (zeroes) the next segment, so this shows what a roll costs the append that meets it.
  if (want("rolls")) {
    std::filesystem::remove_all(dir + "/log");
    LogStoreOptions o;
    o.dir = dir + "/log";
    o.durability.mode = runnel::LogDurability::kNone;
    auto store = MustOpen(o);
    const StreamId id = MustCreate(*store, "rolls");
    const std::string payload(64 << 10, 'r');
    const uint64_t segments = quick ? 8 : 32;
    const uint64_t count = segments * o.segment_size / payload.size();
    const runnel::StoreCommitStats before = store->CommitStats();
    const SerialRun run = SerialAppends(*store, id, payload, count);
    const std::vector<double>& lat = run.lat_ms;
    const double total = run.secs;
    const runnel::StoreCommitStats after = store->CommitStats();
    const uint64_t rolls = after.segment_rolls - before.segment_rolls;
    std::printf(
        "appends across %llu segment rolls (64 KiB, durability none): %.0f MB/s, p50 %.3f ms, "
        "p99 %.3f ms, worst %.0f ms; %llu rolls met an unprepared segment; %.1f ms per roll\n",
        static_cast<unsigned long long>(rolls),
        static_cast<double>(count * payload.size()) / total / 1e6, lat[lat.size() / 2],
        lat[std::min(lat.size() - 1, lat.size() * 99 / 100)], lat.back(),
        static_cast<unsigned long long>(after.segment_rolls_unprepared -
                                        before.segment_rolls_unprepared),
        rolls == 0 ? 0.0
                   : static_cast<double>(after.segment_roll_micros - before.segment_roll_micros) /
                         1e3 / static_cast<double>(rolls));
    store.reset();
    std::filesystem::remove_all(dir + "/log");
  }
  // 6. Steady churn: space amplification and the cleaner's cost to appends, measured with the
  // cleaner on (the default ratio) and off, side by side.
  if (want("churn")) {
    const uint64_t segment = 16u << 20;
    const uint64_t bytes = static_cast<uint64_t>(churn_mb * 1e6);
    std::printf(
        "steady churn (128 live sessions deleted when done, 4000 B records appended in turns, "
        "%llu MiB segments, checkpoint every %llu MiB, %.0f MB of records per run, 8 records per "
        "append with fsync; two stores in lockstep, the cleaner off and on):\n",
        static_cast<unsigned long long>(segment >> 20),
        static_cast<unsigned long long>(LogStoreOptions().checkpoint_interval_bytes >> 20),
        static_cast<double>(bytes) / 1e6);
    std::printf("  %-18s %8s %9s %9s %9s %9s %9s %9s %10s\n", "durability, cleaner", "MB/s",
                "p50 us", "p99 us", "worst ms", "live MB", "seg/live", "max", "files max");
    const double ratios[2] = {0, churn_ratio};
    std::string summary;
    // Durability none shows the cleaner's whole cost (its copies are extra writes to an
    // appender that waits for nothing else); fsync, the default, what it costs in service.
    for (const bool fsync : {false, true}) {
      const std::vector<ChurnFigures> both = ChurnSideBySide(dir, ratios, segment, bytes, fsync);
      const ChurnFigures& off = both[0];
      const ChurnFigures& on = both[1];
      const char* mode = fsync ? "fsync" : "none";
      char off_label[64], on_label[64];
      std::snprintf(off_label, sizeof off_label, "%s, off", mode);
      std::snprintf(on_label, sizeof on_label, "%s, on (%.2f)", mode, churn_ratio);
      for (const auto& [label, c] :
           {std::pair<const char*, const ChurnFigures&>{off_label, off}, {on_label, on}}) {
        std::printf("  %-18s %8.0f %9.1f %9.1f %9.1f %9.1f %8.2fx %8.2fx %9.2fx\n", label,
                    c.mb_per_s, c.p50_us, c.p99_us, c.worst_ms, c.live_mb, c.segments_amp_mean,
                    c.segments_amp_max, c.files_amp_max);
      }
      char line[256];
      std::snprintf(line, sizeof line,
                    "  durability %s: with the cleaner, appends %.2fx the throughput (goal >= "
                    "0.80), segments at most %.2fx the live bytes (goal <= 2); it copies %.2f "
                    "bytes per byte appended\n",
                    fsync ? "fsync" : "none", on.mb_per_s / off.mb_per_s, on.segments_amp_max,
                    on.cleaner_mb / on.written_mb);
      summary += line;
    }
    std::printf("%s\n", summary.c_str());
  }
  // 7. Restart time of a large data directory (opt-in).
  if (restart_gb > 0 && want("restart")) RestartLargeDir(dir, restart_gb);
  if (own_dir) std::filesystem::remove_all(dir);
  return 0;
}
