// Keyed compaction of a State Protocol stream (core/state_compaction.h) on the memory or the log
// store: what a new reader downloads and how long it takes to fold, before and after a
// compaction; the bytes the compaction frees (on the log store: the segment files on disk before
// and after the cleaner's passes); and the append rate to the same stream while it runs, next to
// the rate without it. Not a test: it prints figures and the goals next to them.
//
//   compaction_bench [--store memory|log] [--dir DIR] [--segment-mb M] [--messages N] [--keys K]
//                    [--append-seconds S]
//
// --store log opens the log store (default options, fsync durability; segments of M MiB if
// given) in DIR, which must not hold one (default: a new directory under $TMPDIR or /tmp,
// removed at the end).
// Defaults: 1,000,000 messages over 10,000 keys (about 100-byte values, 10% deletes), appended in
// batches of 100; tombstones expire at once (tombstone time 0), the case with the most to drop.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/state_compaction.h"
#include "runnel/log_store.h"
#include "runnel/store.h"
#include "store/log/log_store.h"

namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

struct History {
  std::mt19937_64 rng{42};
  std::vector<bool> live;
  uint64_t n = 0;
  explicit History(size_t keys) : live(keys, false) {}
  std::string Next() {
    const size_t k = rng() % live.size();
    std::string op = !live[k] ? "insert" : (rng() % 9 == 0 ? "delete" : "update");
    live[k] = op != "delete";
    json m = {{"type", "row"}, {"key", "k" + std::to_string(k)}, {"headers", {{"operation", op}}}};
    if (op != "delete") {
      m["value"] = {{"n", n}, {"text", std::string(80, static_cast<char>('a' + n % 26))}};
    }
    ++n;
    return m.dump();
  }
};

// Appends in flight: at most kMaxInFlight batches wait for their acknowledgement (the log store
// answers on its writer thread; the memory store at once).
constexpr int kMaxInFlight = 64;
std::atomic<int> in_flight{0};

void WaitForAppends(int at_most) {
  while (in_flight.load() > at_most) std::this_thread::yield();
}

void AppendBatch(runnel::Store& store, runnel::StreamId id, std::vector<std::string> batch,
                 uint64_t now_ms) {
  WaitForAppends(kMaxInFlight - 1);
  runnel::AppendRequest req;
  req.stream = id;
  req.now_ms = now_ms;
  for (auto& p : batch) {
    // What the server checks before it appends to a compacted stream.
    if (!runnel::compaction::ParseMessage(p).ok()) std::abort();
    req.records.push_back(runnel::AppendRecord{std::nullopt, std::move(p)});
  }
  ++in_flight;
  store.Append(std::move(req), [](runnel::Result<runnel::AppendResult> r) {
    if (!r.ok()) std::abort();
    --in_flight;
  });
}

// Bytes of the log's segment files in `dir`.
uint64_t SegmentBytes(const std::string& dir) {
  uint64_t total = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.size() == 24 && name.ends_with(".log")) total += entry.file_size();
  }
  return total;
}

// A new reader: reads from the beginning (as JSON arrays of up to 1 MiB, as the server sends
// them) and folds with a JSON parser per message. Returns (bytes, seconds, rows).
struct ReaderCost {
  uint64_t bytes = 0;
  double seconds = 0;
  size_t rows = 0;
};

ReaderCost NewReader(runnel::Store& store, runnel::StreamId id) {
  ReaderCost cost;
  const auto start = Clock::now();
  std::map<std::string, std::string> state;
  uint64_t from = 1;
  for (;;) {
    auto page = store.Read(id, from, 65536, 1u << 20);
    if (!page.ok()) std::abort();
    if (page->empty()) break;
    cost.bytes += 2;  // the array's brackets
    for (const auto& r : *page) {
      cost.bytes += r.payload.size() + 1;  // and a comma
      json m = json::parse(r.payload);
      const json& h = m["headers"];
      if (h.contains("control")) continue;
      const std::string key = m["type"].get<std::string>() + "/" + m["key"].get<std::string>();
      if (h["operation"] == "delete") {
        state.erase(key);
      } else {
        state[key] = m["value"].dump();
      }
    }
    from = page->back().offset + 1;
  }
  cost.seconds = Seconds(start);
  cost.rows = state.size();
  return cost;
}

}  // namespace

int main(int argc, char** argv) {
  size_t messages = 1000000, keys = 10000;
  double append_seconds = 3;
  std::string store_name = "memory", dir;
  uint64_t segment_mb = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--messages")) messages = std::strtoull(argv[i + 1], nullptr, 10);
    if (!std::strcmp(argv[i], "--keys")) keys = std::strtoull(argv[i + 1], nullptr, 10);
    if (!std::strcmp(argv[i], "--append-seconds")) append_seconds = std::atof(argv[i + 1]);
    if (!std::strcmp(argv[i], "--store")) store_name = argv[i + 1];
    if (!std::strcmp(argv[i], "--dir")) dir = argv[i + 1];
    if (!std::strcmp(argv[i], "--segment-mb")) segment_mb = std::strtoull(argv[i + 1], nullptr, 10);
  }
  if (messages == 0 || keys == 0 || (store_name != "memory" && store_name != "log")) {
    std::fprintf(stderr,
                 "usage: compaction_bench [--store memory|log] [--dir DIR] "
                 "[--segment-mb M] [--messages N>0] [--keys K>0] [--append-seconds S]\n");
    return 2;
  }
  std::unique_ptr<runnel::Store> store;
  bool remove_dir = false;
  if (store_name == "log") {
    if (dir.empty()) {
      const char* tmp = std::getenv("TMPDIR");
      std::string pattern = std::string(tmp != nullptr ? tmp : "/tmp") + "/compaction-bench-XXXXXX";
      if (::mkdtemp(pattern.data()) == nullptr) return 1;
      dir = pattern;
      remove_dir = true;
    }
    runnel::LogStoreOptions options;
    options.dir = dir;
    if (segment_mb > 0) options.segment_size = segment_mb << 20;
    auto opened = runnel::OpenLogStore(options);
    if (!opened.ok()) {
      std::fprintf(stderr, "%s\n", opened.status().ToString().c_str());
      return 1;
    }
    store = std::move(*opened);
  } else {
    store = runnel::NewMemoryStore();
  }
  std::printf("store: %s\n", store_name.c_str());
  runnel::compaction::Config config;
  config.tombstone_ms = 0;
  runnel::StreamSpec spec;
  spec.ns = "bench";
  spec.name = "state";
  spec.content_type = "application/json";
  spec.attributes = *runnel::compaction::WithConfig("", config);
  const runnel::StreamId id = store->CreateStream(spec)->id;

  History history(keys);
  const auto fill = Clock::now();
  for (size_t done = 0; done < messages;) {
    std::vector<std::string> batch;
    for (int i = 0; i < 100 && done < messages; ++i, ++done) batch.push_back(history.Next());
    AppendBatch(*store, id, std::move(batch), 1000);
  }
  WaitForAppends(0);
  std::printf("stream: %zu messages over %zu keys appended in %.1f s\n", messages, keys,
              Seconds(fill));
  const uint64_t retained_before = store->GetStreamById(id)->retained_bytes;

  const ReaderCost before = NewReader(*store, id);
  std::printf("new reader before: %.1f MB, fold %.2f s, %zu rows\n", before.bytes / 1e6,
              before.seconds, before.rows);

  // The append rate to the same stream without and with a compaction running.
  auto append_for = [&](double seconds, const std::atomic<bool>* stop) {
    uint64_t appended = 0;
    const auto start = Clock::now();
    while (stop ? !stop->load() : Seconds(start) < seconds) {
      std::vector<std::string> batch;
      for (int i = 0; i < 100; ++i) batch.push_back(history.Next());
      AppendBatch(*store, id, std::move(batch), 1000);
      appended += 100;
    }
    WaitForAppends(0);
    return appended / Seconds(start);
  };
  const double alone = append_for(append_seconds, nullptr);

  // The log's segments before the compaction (after a checkpoint, which deletes what it can).
  uint64_t disk_uncompacted = 0;
  if (store_name == "log") {
    if (!dynamic_cast<runnel::log::LogStore&>(*store).CheckpointNow().ok()) return 1;
    disk_uncompacted = SegmentBytes(dir);
  }
  std::atomic<bool> compacted{false};
  runnel::Result<runnel::compaction::Report> report = runnel::Status::Internal("not run");
  double compact_seconds = 0;
  std::thread compactor([&] {
    const auto start = Clock::now();
    report = runnel::compaction::Compact(*store, id, 2000);
    compact_seconds = Seconds(start);
    compacted = true;
  });
  const double during = append_for(0, &compacted);
  compactor.join();
  if (!report.ok()) {
    std::fprintf(stderr, "compaction failed: %s\n", report.status().ToString().c_str());
    return 1;
  }
  const uint64_t retained_after = store->GetStreamById(id)->retained_bytes;
  std::printf(
      "compaction: %.2f s; scanned %llu records, dropped %llu (%.1f MB, %llu tombstones), "
      "kept %llu; horizon %llu\n",
      compact_seconds, static_cast<unsigned long long>(report->scanned_records),
      static_cast<unsigned long long>(report->dropped_records), report->dropped_bytes / 1e6,
      static_cast<unsigned long long>(report->dropped_tombstones),
      static_cast<unsigned long long>(report->kept_records),
      static_cast<unsigned long long>(report->horizon));
  std::printf(
      "retained bytes: %.1f MB before (the first compaction's input), %.1f MB after it, "
      "appends made during it included\n",
      retained_before / 1e6, retained_after / 1e6);
  // A second compaction takes the appends made during the first (everything is now one stream).
  if (!runnel::compaction::Compact(*store, id, 2000).ok()) return 1;
  const uint64_t retained_final = store->GetStreamById(id)->retained_bytes;
  std::printf(
      "retained bytes after a second compaction (of the appends made during the first): "
      "%.2f MB\n",
      retained_final / 1e6);
  const ReaderCost after = NewReader(*store, id);
  std::printf("new reader after:  %.2f MB, fold %.3f s, %zu rows\n", after.bytes / 1e6,
              after.seconds, after.rows);
  std::printf("bytes a new reader downloads: %.0fx fewer (goal >= 50x); fold %.0fx faster\n",
              static_cast<double>(before.bytes) / static_cast<double>(after.bytes),
              before.seconds / after.seconds);
  std::printf(
      "appends to the stream: %.0f/s alone, %.0f/s during compaction = %.0f%% (goal >= "
      "80%%)\n",
      alone, during, 100.0 * during / alone);
  if (store_name == "log") {
    // The disk: the segments before the cleaner, then after its passes (each pass relocates
    // the survivors of the emptiest old segments and checkpoints; repeated until nothing
    // shrinks, at most 50).
    auto& log = dynamic_cast<runnel::log::LogStore&>(*store);
    if (!log.CheckpointNow().ok()) return 1;
    const uint64_t disk_before = SegmentBytes(dir);
    const auto clean = Clock::now();
    uint64_t disk_after = disk_before;
    int passes = 0;
    for (; passes < 50; ++passes) {
      if (!log.CleanNow().ok()) return 1;
      const uint64_t now = SegmentBytes(dir);
      if (now >= disk_after && passes > 0) break;
      disk_after = now;
    }
    std::printf(
        "segments on disk: %.1f MB before compacting, %.1f MB after (appends made during it "
        "included), %.1f MB after %d cleaner passes (%.2f s); %.2f MB retained; cleaner copied "
        "%.1f MB in all\n",
        disk_uncompacted / 1e6, disk_before / 1e6, disk_after / 1e6, passes + 1, Seconds(clean),
        store->GetStreamById(id)->retained_bytes / 1e6, log.CommitStats().cleaner_bytes / 1e6);
  }
  store.reset();
  if (remove_dir) std::filesystem::remove_all(dir);
  return 0;
}
