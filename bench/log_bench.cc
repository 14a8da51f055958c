// Benchmarks of the embedded log store, printed side by side with the physical baseline
// measured in the same run on the same disk (a raw pwrite + fdatasync loop).
//
//   log_bench [--dir DIR] [--seconds S] [--quick]
//
// DIR (default: a new directory under /tmp) must be on the disk under test. Every figure is a
// median-free single run: rerun and compare before quoting a ratio.
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <condition_variable>
#include <optional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "runnel/log_store.h"
#include "runnel/store.h"

namespace {

using Clock = std::chrono::steady_clock;
using runnel::AppendRecord;
using runnel::AppendRequest;
using runnel::AppendResult;
using runnel::LogStoreOptions;
using runnel::Result;
using runnel::StreamId;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

struct Figures {
  double ops_per_s = 0;
  double mb_per_s = 0;
  double p50_us = 0;
  double p99_us = 0;
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

// `appenders` threads, each appending `size`-byte records to its own stream and waiting for
// each acknowledgement (fsync mode: on disk) before the next.
Figures DurableAppends(const std::string& dir, size_t size, int appenders, double seconds) {
  std::filesystem::remove_all(dir + "/log");
  LogStoreOptions o;
  o.dir = dir + "/log";
  auto store = MustOpen(o);
  std::vector<StreamId> ids;
  for (int i = 0; i < appenders; ++i) ids.push_back(MustCreate(*store, std::string("s").append(std::to_string(i))));
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::vector<double> lat;
  std::atomic<uint64_t> ops{0};
  std::vector<std::thread> threads;
  const std::string payload(size, 'p');
  const auto start = Clock::now();
  for (int t = 0; t < appenders; ++t) {
    threads.emplace_back([&, t] {
      std::vector<double> mine;
      while (!stop.load(std::memory_order_relaxed)) {
        const auto t0 = Clock::now();
        if (!AppendOne(*store, ids[static_cast<size_t>(t)], payload).ok()) std::abort();
        mine.push_back(Seconds(Clock::now() - t0) * 1e6);
        ops.fetch_add(1, std::memory_order_relaxed);
      }
      std::lock_guard lock(mu);
      lat.insert(lat.end(), mine.begin(), mine.end());
    });
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop = true;
  for (auto& t : threads) t.join();
  const double secs = Seconds(Clock::now() - start);
  store.reset();
  std::filesystem::remove_all(dir + "/log");
  return Summarise(lat, ops.load(), ops.load() * size, secs);
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
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--dir" && i + 1 < argc) {
      dir = argv[++i];
    } else if (a == "--seconds" && i + 1 < argc) {
      seconds = std::atof(argv[++i]);
    } else if (a == "--quick") {
      quick = true;
      seconds = 0.5;
    } else {
      std::fprintf(stderr, "usage: log_bench [--dir DIR] [--seconds S] [--quick]\n");
      return 2;
    }
  }
  bool own_dir = false;
  if (dir.empty()) {
    char tmpl[] = "/tmp/runnel-log-bench-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) return 1;
    dir = tmpl;
    own_dir = true;
  }
  std::printf("log_bench: dir=%s, %.1f s per figure\n\n", dir.c_str(), seconds);

  // 1. The physical baseline and durable appends, side by side.
  std::printf("%-34s %12s %10s %10s %10s %9s\n", "workload", "ops/s", "MB/s", "p50 us", "p99 us",
              "vs raw");
  const size_t sizes[] = {100, 4096, 65536};
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
    for (int appenders : {1, 16, 64}) {
      Figures f = DurableAppends(dir, size, appenders, seconds);
      std::snprintf(label, sizeof label, "runnel fsync %zu B x%d appenders", size, appenders);
      std::printf("%-34s %12.0f %10.1f %10.1f %10.1f %8.2fx\n", label, f.ops_per_s, f.mb_per_s,
                  f.p50_us, f.p99_us, f.mb_per_s / zero.mb_per_s);
    }
    std::printf("\n");
  }
  std::printf("(vs raw = runnel MB/s / pre-zeroed raw MB/s of the same record size; for one\n"
              " appender compare p50 latencies: target p50 <= 1.5x raw)\n\n");

  // 2. Catch-up reads: one stream written interleaved with 1,000 others vs written alone.
  {
    std::filesystem::remove_all(dir + "/log");
    LogStoreOptions o;
    o.dir = dir + "/log";
    o.durability.mode = runnel::LogDurability::kNone;
    o.tail_cache_bytes = 0;
    auto store = MustOpen(o);
    const int others = 1000;
    const int per_stream = quick ? 20 : 100;
    std::vector<StreamId> ids;
    for (int i = 0; i <= others; ++i) ids.push_back(MustCreate(*store, std::string("c").append(std::to_string(i))));
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
      std::printf("catch-up read, %-44s %8.0f MB/s\n", what, static_cast<double>(bytes) / secs / 1e6);
    };
    catch_up(ids[0], "stream interleaved with 1,000 others (1 KiB)");
    catch_up(alone, "stream written alone (1 KiB)");
    store.reset();
    std::filesystem::remove_all(dir + "/log");
  }

  // 3. Tail read time vs stream length.
  {
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
    std::printf("tail read (ReadAt newest, page cache): 1k-record stream %.2f us, %llu-record "
                "stream %.2f us (ratio %.2f)\n",
                short_us, static_cast<unsigned long long>(long_len), long_us, long_us / short_us);
    store.reset();
    std::filesystem::remove_all(dir + "/log");
  }

  // 4. Memory per idle stream, creation rate, restart time.
  {
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
    std::printf("stream creation (durability none): %.0f streams/s; memory per idle stream "
                "%.0f B (RSS delta over %d streams)\n",
                n / secs, static_cast<double>(rss1 - rss0) / n, n);
    {
      const auto c0 = Clock::now();
      store.reset();  // writes the final checkpoint
      std::printf("clean close with %d streams: %.2f s\n", n, Seconds(Clock::now() - c0));
    }
    const auto r0 = Clock::now();
    store = MustOpen(o);
    std::printf("restart from checkpoint with %d streams: %.2f s\n", n, Seconds(Clock::now() - r0));
    store.reset();
    std::filesystem::remove_all(dir + "/log");
  }
  if (own_dir) std::filesystem::remove_all(dir);
  return 0;
}
