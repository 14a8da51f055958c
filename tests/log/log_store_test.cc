#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <iostream>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "env/env.h"
#include "env/fault_env.h"
#include "env/mem_env.h"
#include "log/log_harness.h"
#include "log/log_test_util.h"
#include "runnel/log_store.h"
#include "runnel/registry.h"
#include "store/log/log_store.h"

namespace runnel::testing {
namespace {

class LogStoreTest : public ::testing::Test {
 protected:
  Result<std::unique_ptr<Store>> Open() {
    LogStoreOptions o = SmallLogOptions(dir_.path());
    return OpenLogStore(o);
  }
  TempDir dir_;
};

TEST_F(LogStoreTest, AppendsAreReadableAndSurviveReopen) {
  StreamId id;
  {
    auto store = Open();
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    auto info = (*store)->CreateStream(Spec("s"));
    ASSERT_TRUE(info.ok()) << info.status().ToString();
    id = info->id;
    auto r = AppendPayloads(**store, id, {"a", "bb", "ccc"});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->first_offset, 1u);
    EXPECT_EQ(r->last_offset, 3u);
    auto recs = (*store)->Read(id, 2, 10, 1 << 20);
    ASSERT_TRUE(recs.ok());
    ASSERT_EQ(recs->size(), 2u);
    EXPECT_EQ((*recs)[0].payload, "bb");
    EXPECT_EQ((*recs)[1].offset, 3u);
  }
  auto store = Open();
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto info = (*store)->GetStream("global", "s");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->next_offset, 4u);
  EXPECT_EQ(info->retained_bytes, 6u);
  auto recs = (*store)->Read(id, 1, 10, 1 << 20);
  ASSERT_TRUE(recs.ok());
  ASSERT_EQ(recs->size(), 3u);
  EXPECT_EQ((*recs)[2].payload, "ccc");
}

// Key sizes are kept only once a stream has a record with a key (most streams have none):
// retained bytes still count every key exactly, while retention drops and compacts the head
// across keyless and keyed records, and after a checkpoint and a replay.
TEST_F(LogStoreTest, RetainedBytesCountKeysAcrossRetentionCheckpointAndReopen) {
  struct Rec {
    std::optional<std::string> key;
    std::string payload;
  };
  std::vector<Rec> all;
  // 300 keyless, 300 with keys of varying size, 300 keyless again.
  for (int i = 0; i < 900; ++i) {
    Rec r;
    if (i >= 300 && i < 600) r.key = std::string(1 + i % 7, 'k');
    r.payload = std::string(1 + i % 5, 'p');
    all.push_back(std::move(r));
  }
  auto expected_bytes = [&](size_t through) {  // the last 100 of all[0, through)
    uint64_t b = 0;
    for (size_t i = through - 100; i < through; ++i) {
      b += all[i].payload.size() + (all[i].key ? all[i].key->size() : 0);
    }
    return b;
  };
  StreamId id;
  auto check = [&](Store& store, size_t through) {
    auto info = store.GetStreamById(id);
    ASSERT_TRUE(info.ok()) << info.status().ToString();
    EXPECT_EQ(info->head_offset, through - 99) << "through " << through;
    EXPECT_EQ(info->retained_bytes, expected_bytes(through)) << "through " << through;
    auto recs = store.Read(id, 0, 1000, 1 << 20);
    ASSERT_TRUE(recs.ok());
    ASSERT_EQ(recs->size(), 100u);
    for (const StoredRecord& r : *recs) {
      EXPECT_EQ(r.key, all[r.offset - 1].key) << r.offset;
      EXPECT_EQ(r.payload, all[r.offset - 1].payload) << r.offset;
    }
  };
  {
    auto store = Open();
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    StreamSpec spec = Spec("s");
    spec.retention.max_events = 100;
    auto info = (*store)->CreateStream(spec);
    ASSERT_TRUE(info.ok()) << info.status().ToString();
    id = info->id;
    for (size_t i = 0; i < all.size(); i += 3) {
      AppendRequest req;
      req.stream = id;
      req.now_ms = 1000;
      for (size_t j = i; j < i + 3; ++j)
        req.records.push_back(AppendRecord{all[j].key, all[j].payload});
      ASSERT_TRUE(AppendSync(**store, std::move(req)).ok());
      const size_t through = i + 3;
      if (through >= 100 && through % 150 == 0) {
        ASSERT_NO_FATAL_FAILURE(check(**store, through));
      }
      if (through == 450) {
        auto* log = dynamic_cast<log::LogStore*>(store->get());
        ASSERT_NE(log, nullptr);
        ASSERT_TRUE(log->CheckpointNow().ok());
      }
    }
    ASSERT_NO_FATAL_FAILURE(check(**store, all.size()));
  }
  // Reopened: the checkpoint at 450 (keys present) plus a replay of the rest.
  auto store = Open();
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  ASSERT_NO_FATAL_FAILURE(check(**store, all.size()));
}

// The stream table is a hash table with backward-shift deletion that grows and shrinks: after
// thousands of creates and deletes in scrambled order (clusters of sequential ids broken up
// from every side), every live stream is found by id and name, every deleted one is gone, ids
// are never reused, and a checkpoint and a replay rebuild the same table.
TEST_F(LogStoreTest, ManyCreatesAndDeletesKeepEveryLiveStreamFindable) {
  constexpr int kStreams = 3000;
  LogStoreOptions o = SmallLogOptions(dir_.path());
  o.durability.mode = LogDurability::kNone;  // thousands of catalog commits; durability is not
                                             // what this test is about
  std::vector<StreamId> ids;
  std::vector<bool> live;
  auto check = [&](Store& store) {
    for (int i = 0; i < kStreams; ++i) {
      auto info = store.GetStreamById(ids[i]);
      if (live[i]) {
        ASSERT_TRUE(info.ok()) << "stream " << ids[i] << ": " << info.status().ToString();
        EXPECT_EQ(info->spec.name, "s" + std::to_string(i));
        EXPECT_TRUE(store.GetStream("global", "s" + std::to_string(i)).ok()) << i;
      } else {
        EXPECT_EQ(info.status().code(), StatusCode::kNotFound) << ids[i];
      }
    }
  };
  {
    auto store = OpenLogStore(o);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    for (int i = 0; i < kStreams; ++i) {
      auto info = (*store)->CreateStream(Spec("s" + std::to_string(i)));
      ASSERT_TRUE(info.ok()) << info.status().ToString();
      ids.push_back(info->id);
      live.push_back(true);
    }
    // Delete all but every seventh, in an order that jumps around (a permutation of 0..n-1).
    for (int k = 0; k < kStreams; ++k) {
      const int i = static_cast<int>((static_cast<int64_t>(k) * 1543) % kStreams);
      if (i % 7 == 0) continue;
      ASSERT_TRUE((*store)->DeleteStream(ids[i]).ok()) << ids[i];
      live[i] = false;
      if (k % 500 == 0) {
        ASSERT_NO_FATAL_FAILURE(check(**store));
      }
    }
    ASSERT_NO_FATAL_FAILURE(check(**store));
    auto* log = dynamic_cast<log::LogStore*>(store->get());
    ASSERT_NE(log, nullptr);
    ASSERT_TRUE(log->CheckpointNow().ok());
    // Deleted then re-created names get new ids.
    for (int i = 1; i < 50; ++i) {
      if (live[i]) continue;
      auto info = (*store)->CreateStream(Spec("s" + std::to_string(i)));
      ASSERT_TRUE(info.ok());
      EXPECT_GT(info->id, ids.back()) << "an id was reused";
      ids[i] = info->id;
      live[i] = true;
    }
    ASSERT_NO_FATAL_FAILURE(check(**store));
  }
  auto store = OpenLogStore(o);  // the checkpoint plus a replay of the re-creates
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  ASSERT_NO_FATAL_FAILURE(check(**store));
}

// Stream names are stored packed (a one-byte length below 255 bytes, a longer prefix above):
// every length and any byte survive lookups, listing order, a checkpoint and a replay.
TEST_F(LogStoreTest, NamesOfEveryLengthAndByteAreKeptExactly) {
  std::vector<std::string> names = {"a",
                                    std::string("n\0ul", 4),
                                    std::string(254, 'x'),
                                    std::string(255, 'y'),
                                    std::string(256, 'z'),
                                    std::string(70000, 'w'),
                                    "\xff\xfe"};
  auto check = [&](Store& store) {
    for (const std::string& name : names) {
      auto info = store.GetStream("global", name);
      ASSERT_TRUE(info.ok()) << name.size() << ": " << info.status().ToString();
      EXPECT_EQ(info->spec.name, name);
    }
    auto listed = store.ListStreams("global", "", 100);
    ASSERT_TRUE(listed.ok());
    std::vector<std::string> sorted = names;
    std::sort(sorted.begin(), sorted.end());
    ASSERT_EQ(listed->size(), sorted.size());
    for (size_t i = 0; i < sorted.size(); ++i) EXPECT_EQ((*listed)[i].spec.name, sorted[i]);
  };
  {
    auto store = Open();
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    for (size_t i = 0; i < names.size(); ++i) {
      ASSERT_TRUE((*store)->CreateStream(Spec(names[i])).ok()) << names[i].size();
      if (i == 3) {
        ASSERT_TRUE(dynamic_cast<log::LogStore&>(**store).CheckpointNow().ok());
      }
    }
    ASSERT_NO_FATAL_FAILURE(check(**store));
  }
  auto store = Open();  // the checkpoint holds the first four names, the replay the rest
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  ASSERT_NO_FATAL_FAILURE(check(**store));
}

TEST_F(LogStoreTest, SecondOpenOfTheSameDirectoryIsRefused) {
  auto first = Open();
  ASSERT_TRUE(first.ok());
  auto second = Open();
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kUnavailable) << second.status().ToString();
  EXPECT_NE(second.status().message().find("in use"), std::string_view::npos);
}

// The directory is locked as well as its LOCK file: removing the file under a running store
// does not let a second one in.
TEST_F(LogStoreTest, SecondOpenIsRefusedEvenWithTheLockFileRemoved) {
  auto first = Open();
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE(env::Env::Posix()->RemoveFile(dir_.path() + "/LOCK").ok());
  auto second = Open();
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kUnavailable) << second.status().ToString();
  EXPECT_NE(second.status().message().find("in use"), std::string_view::npos);
  first->reset();
  EXPECT_TRUE(Open().ok()) << "the lock goes with its holder";
}

// Operators tell the store's threads apart in top -H / ps -L by name.
// The names in `dir` without the files the store's helper thread makes and removes on its own
// time (the next segment prepared, the space reserve), sorted; {"<none>"} when it is missing.
std::vector<std::string> Listing(env::Env& env, const std::string& dir) {
  auto names = env.ListDir(dir);
  if (!names.ok()) return {"<none>"};
  std::vector<std::string> out;
  for (const std::string& name : *names) {
    if (!name.ends_with(".prep") && name != "RESERVE") out.push_back(name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// An Open that fails leaves the directory as it found it, whatever made it fail: an option it
// refuses before it touches anything, a disk without room for the first segment of a new
// directory, a directory another store holds. A store opened on a new directory that closes
// without having written anything (a server that fails to start after opening it) leaves
// nothing either; one that found a log keeps it.
TEST(LogOpenTest, AFailedOpenLeavesTheDirectoryAsItFoundIt) {
  env::MemEnv mem;
  env::FaultInjectionEnv faults(&mem);
  ASSERT_TRUE(mem.CreateDir("/disk").ok());
  LogStoreOptions o;
  o.dir = "/disk/data";
  o.env = &faults;
  o.segment_size = 64 << 10;
  const std::vector<std::string> none = {"<none>"};

  std::vector<LogStoreOptions> bad(4, o);
  bad[0].cleaner_live_ratio = 1.5;
  bad[1].cleaner_live_ratio = -0.1;
  bad[2].checkpoint_interval_bytes = 0;
  bad[3].segment_size = 100;
  for (const LogStoreOptions& b : bad) {
    auto refused = OpenLogStore(b);
    EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument) << refused.status().ToString();
    EXPECT_EQ(Listing(mem, "/disk/data"), none);
  }

  faults.SetSpaceLimit(faults.SpaceUsed() + (16 << 10));
  auto full = OpenLogStore(o);
  ASSERT_FALSE(full.ok()) << "a 64 KiB segment on 16 KiB of disk";
  EXPECT_TRUE(full.status().no_space()) << full.status().ToString();
  EXPECT_EQ(Listing(mem, "/disk/data"), none);
  faults.ClearFaults();

  {
    auto unused = OpenLogStore(o);
    ASSERT_TRUE(unused.ok()) << unused.status().ToString();
    EXPECT_EQ(Listing(mem, "/disk/data"),
              (std::vector<std::string>{"00000000000000000001.log", "LOCK"}));
  }
  EXPECT_FALSE(mem.FileExists("/disk/data")) << "a store that wrote nothing left files";

  auto first = OpenLogStore(o);
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE((*first)->CreateStream(Spec("s")).ok());
  const std::vector<std::string> before = Listing(mem, "/disk/data");
  auto second = OpenLogStore(o);
  EXPECT_EQ(second.status().code(), StatusCode::kUnavailable) << second.status().ToString();
  EXPECT_EQ(Listing(mem, "/disk/data"), before);
  first->reset();
  auto again = OpenLogStore(o);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  again->reset();  // opened and closed without a write: the log it found stays
  auto reopened = OpenLogStore(o);
  ASSERT_TRUE(reopened.ok()) << reopened.status().ToString();
  EXPECT_TRUE((*reopened)->GetStream("global", "s").ok());
}

TEST_F(LogStoreTest, WriterThreadIsNamed) {
  auto count_named = [] {
    int n = 0;
    for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
      std::ifstream comm(task.path() / "comm");
      std::string name;
      std::getline(comm, name);
      n += name == "log-writer" ? 1 : 0;
    }
    return n;
  };
  const int before = count_named();
  {
    auto store = Open();
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    EXPECT_EQ(count_named(), before + 1);
  }
  EXPECT_EQ(count_named(), before);
}

TEST_F(LogStoreTest, DurabilityModesParseAndAreReported) {
  EXPECT_EQ(ParseLogDurability("fsync")->mode, LogDurability::kFsync);
  EXPECT_EQ(ParseLogDurability("none")->mode, LogDurability::kNone);
  auto iv = ParseLogDurability("interval:25");
  ASSERT_TRUE(iv.ok());
  EXPECT_EQ(iv->interval_ms, 25u);
  EXPECT_EQ(LogDurabilityName(*iv), "interval:25");
  EXPECT_FALSE(ParseLogDurability("interval:0").ok());
  EXPECT_FALSE(ParseLogDurability("sometimes").ok());
  auto store = Open();
  ASSERT_TRUE(store.ok());
  EXPECT_EQ((*store)->Name(), "log");
  EXPECT_NE((*store)->Durability().find("fsync"), std::string::npos);
}

// Continuous appends to a stream with retention, interleaved with rare appends to a stream that
// keeps everything: without the cleaner the rare records would pin every old segment.
// Group-commit metrics: in fsync mode every acknowledged append was made durable by a counted
// sync, and the records and bytes per sync add up to what was appended.
TEST_F(LogStoreTest, CommitStatsCountSyncsRecordsAndBytes) {
  auto opened = Open();
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  std::unique_ptr<Store> store = std::move(*opened);
  const StoreCommitStats before = store->CommitStats();
  EXPECT_TRUE(before.available);
  auto info = store->CreateStream(Spec("stats"));
  ASSERT_TRUE(info.ok());
  const StoreCommitStats created = store->CommitStats();
  EXPECT_GT(created.syncs, before.syncs);  // the create frame was synced too
  EXPECT_EQ(created.records, before.records);
  // Sequential appends: each is its own group and its own sync.
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(AppendPayloads(*store, info->id, {"ab", "cde", "f"}).ok());
  }
  const StoreCommitStats after = store->CommitStats();
  EXPECT_EQ(after.syncs - created.syncs, 5u);
  EXPECT_EQ(after.records - created.records, 15u);
  // Each append batch frame carries at least its 6 payload bytes plus headers.
  EXPECT_GT(after.bytes - created.bytes, 5u * 6u);
  uint64_t histogram_total = 0;
  for (uint64_t n : after.records_per_sync) histogram_total += n;
  EXPECT_EQ(histogram_total, after.syncs);
  // Three records per sync land in the "<= 4" bucket (index 2).
  EXPECT_EQ(after.records_per_sync[2] - created.records_per_sync[2], 5u);
  // Each checkpoint the writer builds is counted with its build time (commits wait for it):
  // a thousand streams take it well past a microsecond.
  std::vector<StreamId> ids;
  ASSERT_NO_FATAL_FAILURE(CreateStreams(*store, 1000, &ids));
  const StoreCommitStats filled = store->CommitStats();
  ASSERT_TRUE(dynamic_cast<log::LogStore&>(*store).CheckpointNow().ok());
  const StoreCommitStats checkpointed = store->CommitStats();
  EXPECT_EQ(checkpointed.checkpoints - filled.checkpoints, 1u);
  EXPECT_GT(checkpointed.checkpoint_build_micros, filled.checkpoint_build_micros);
  // The first segment, made at open before any preparation could run, is the one roll so far.
  EXPECT_EQ(checkpointed.segment_rolls, 1u);
  EXPECT_EQ(checkpointed.segment_rolls_unprepared, 1u);
  // The memory store has no commit log to report.
  EXPECT_FALSE(NewMemoryStore()->CommitStats().available);
}

TEST_F(LogStoreTest, DiskStaysBoundedUnderContinuousAppendsWithRetention) {
  LogStoreOptions o = SmallLogOptions(dir_.path());
  o.segment_size = 32 << 10;
  o.checkpoint_interval_bytes = 64 << 10;
  o.durability.mode = LogDurability::kNone;  // the bound, not the sync, is under test
  auto opened = OpenLogStore(o);
  ASSERT_TRUE(opened.ok());
  std::unique_ptr<Store> store = std::move(*opened);
  StreamSpec busy_spec = Spec("busy");
  busy_spec.retention.max_events = 50;
  auto busy = store->CreateStream(busy_spec);
  auto pinned = store->CreateStream(Spec("pinned"));
  ASSERT_TRUE(busy.ok() && pinned.ok());
  std::vector<std::string> kept;
  uint64_t max_segment_bytes = 0;
  for (int i = 0; i < 6000; ++i) {
    ASSERT_TRUE(AppendPayloads(*store, busy->id, {std::string(1000, 'b')}).ok());
    if (i % 100 == 0) {
      kept.push_back("pinned-" + std::to_string(i));
      ASSERT_TRUE(AppendPayloads(*store, pinned->id, {kept.back()}).ok());
    }
    if (i % 500 == 499) {
      uint64_t bytes = 0;
      auto names = env::Env::Posix()->ListDir(dir_.path());
      ASSERT_TRUE(names.ok());
      for (const auto& name : *names) {
        if (name.size() == 24 && name.substr(20) == ".log") {
          // A segment listed may be deleted before it is measured: dead segments go once a
          // checkpoint written in the background is in place, at any moment.
          auto size = env::Env::Posix()->FileSize(dir_.path() + "/" + name);
          bytes += size.ok() ? *size : 0;
        }
      }
      max_segment_bytes = std::max(max_segment_bytes, bytes);
    }
  }
  // ~6 MB were appended; the live data is ~50 KB of busy records plus 60 pinned ones.
  EXPECT_LT(max_segment_bytes, 20u * (32 << 10)) << "segments are reclaimed";
  store.reset();
  opened = OpenLogStore(o);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  store = std::move(*opened);
  auto recs = store->Read(pinned->id, 1, 1000, 1 << 30);
  ASSERT_TRUE(recs.ok()) << recs.status().ToString();
  ASSERT_EQ(recs->size(), kept.size());
  for (size_t i = 0; i < kept.size(); ++i) EXPECT_EQ((*recs)[i].payload, kept[i]);
  auto tail = store->Read(busy->id, 1, 1000, 1 << 30);
  ASSERT_TRUE(tail.ok());
  EXPECT_EQ(tail->size(), 50u);
}

// Steady churn, scaled down: sessions appended to in turns and deleted when done, a tenth of
// them long-lived, so every segment dies bit by bit and the long sessions would pin old
// segments. Segments are small next to the checkpoint interval (16 per interval), so a cleaner
// that takes only a few segments per pass falls behind. After a warm-up, the segments never
// hold more than twice the live record bytes plus one checkpoint interval and a few segments
// (log_bench's churn section measures the same at full scale).
TEST(LogCleanerTest, SegmentsStayWithinTwiceTheLiveBytesUnderChurn) {
  env::MemEnv mem;
  LogStoreOptions o;
  o.dir = "/data";
  o.env = &mem;
  o.segment_size = 8 << 10;
  o.checkpoint_interval_bytes = 128 << 10;
  o.durability.mode = LogDurability::kNone;  // the space, not the sync, is under test
  auto opened = OpenLogStore(o);
  ASSERT_TRUE(opened.ok());
  Store& store = **opened;
  struct Session {
    StreamId id = 0;
    uint64_t length = 0;
    uint64_t records = 0;
  };
  std::mt19937_64 rng(99);
  int created = 0;
  auto start = [&](Session& s) {
    auto info = store.CreateStream(Spec("session-" + std::to_string(created++)));
    ASSERT_TRUE(info.ok());
    s.id = info->id;
    s.length = rng() % 10 == 0 ? 256 + rng() % 257 : 8 + rng() % 57;
    s.records = 0;
  };
  std::vector<Session> sessions(32);
  for (Session& s : sessions) ASSERT_NO_FATAL_FAILURE(start(s));
  const std::string payload(1000, 'c');
  uint64_t live = 0, written = 0, worst_excess = 0;
  constexpr uint64_t kWritten = 12 << 20;
  const uint64_t allowance = o.checkpoint_interval_bytes + 4 * o.segment_size;
  double worst_ratio = 0;
  while (written < kWritten) {
    Session& s = sessions[rng() % sessions.size()];
    ASSERT_TRUE(AppendPayloads(store, s.id, {payload}).ok());
    written += payload.size();
    live += payload.size();
    if (++s.records == s.length) {
      ASSERT_TRUE(store.DeleteStream(s.id).ok());
      live -= s.records * payload.size();
      ASSERT_NO_FATAL_FAILURE(start(s));
    }
    if (written > kWritten / 5 * 2 && written % (64 << 10) < payload.size()) {
      uint64_t segment_bytes = 0;
      auto names = mem.ListDir("/data");
      ASSERT_TRUE(names.ok());
      for (const std::string& name : *names) {
        if (name.size() == 24 && name.ends_with(".log")) {
          auto size = mem.FileSize("/data/" + name);
          segment_bytes += size.ok() ? *size : 0;
        }
      }
      worst_ratio = std::max(worst_ratio, static_cast<double>(segment_bytes) / live);
      if (segment_bytes > 2 * live) worst_excess = std::max(worst_excess, segment_bytes - 2 * live);
    }
  }
  EXPECT_LE(worst_excess, allowance) << "segments reached " << worst_ratio << "x the live bytes";
  EXPECT_GT(store.CommitStats().cleaner_bytes, 0u);
}

// The index merges adjacent frames of one stream written in one group with one timestamp into
// a single reference (memory per record for hot streams); reads, the tail cache and a reopen
// see every record exactly as appended, and frames with other timestamps (age retention reads
// them) stay apart.
TEST(LogIndexTest, AdjacentAppendsOfOneGroupShareAReference) {
  env::MemEnv mem;
  env::FaultInjectionEnv slow(&mem);
  slow.SetSyncDelay(std::chrono::milliseconds(20));  // the burst queues behind the first sync
  LogStoreOptions o;
  o.dir = "/data";
  o.env = &slow;
  o.segment_size = 1 << 20;
  o.prezero_segments = false;
  // Declared before the store, so they outlive its threads.
  std::mutex mu;
  std::condition_variable cv;
  int pending = 0;      // GUARDED_BY(mu)
  bool failed = false;  // GUARDED_BY(mu)
  auto opened = OpenLogStore(o);
  ASSERT_TRUE(opened.ok());
  std::unique_ptr<Store> store = std::move(*opened);
  auto& log = dynamic_cast<log::LogStore&>(*store);
  auto same = store->CreateStream(Spec("same-ms"));
  auto varied = store->CreateStream(Spec("varied-ms"));
  ASSERT_TRUE(same.ok() && varied.ok());
  auto burst = [&](StreamId id, bool vary) {
    constexpr int kAppends = 40;
    {
      std::lock_guard lock(mu);
      pending = kAppends;
      failed = false;
    }
    for (int i = 0; i < kAppends; ++i) {
      AppendRequest req;
      req.stream = id;
      req.now_ms = vary ? 100 + static_cast<uint64_t>(i) : 100;
      req.records.push_back(AppendRecord{std::nullopt, "r" + std::to_string(i)});
      if (i % 5 == 4) req.records.push_back(AppendRecord{std::string("k"), "extra"});
      store->Append(std::move(req), [&](Result<AppendResult> r) {
        std::lock_guard lock(mu);
        failed = failed || !r.ok();
        if (--pending == 0) cv.notify_all();
      });
    }
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return pending == 0; });
    EXPECT_FALSE(failed);
  };
  burst(same->id, false);
  burst(varied->id, true);
  // 40 appends (48 records): the first goes alone, the rest share the next group.
  EXPECT_LE(log.BatchRefsForTesting(same->id), 3u);
  EXPECT_EQ(log.BatchRefsForTesting(varied->id), 40u);
  auto check = [&](Store& st) {
    for (StreamId id : {same->id, varied->id}) {
      auto recs = st.Read(id, 1, 1000, 1 << 20);
      ASSERT_TRUE(recs.ok()) << recs.status().ToString();
      ASSERT_EQ(recs->size(), 48u);
      size_t at = 0;
      for (int i = 0; i < 40; ++i) {
        EXPECT_EQ((*recs)[at].offset, at + 1);
        EXPECT_EQ((*recs)[at++].payload, "r" + std::to_string(i));
        if (i % 5 == 4) {
          EXPECT_EQ((*recs)[at].key, std::optional<std::string>("k"));
          EXPECT_EQ((*recs)[at++].payload, "extra");
        }
      }
      // A read that starts inside a merged reference, one record at a time.
      for (uint64_t from : {2u, 17u, 30u, 48u}) {
        auto one = st.Read(id, from, 1, 1 << 20);
        ASSERT_TRUE(one.ok());
        ASSERT_EQ(one->size(), 1u);
        EXPECT_EQ((*one)[0].offset, from);
      }
    }
  };
  ASSERT_NO_FATAL_FAILURE(check(*store));
  store.reset();
  opened = OpenLogStore(o);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  ASSERT_NO_FATAL_FAILURE(check(**opened));
}

TEST_F(LogStoreTest, LiveReadsAreServedFromTheTailCache) {
  auto opened = OpenLogStore(SmallLogOptions(dir_.path()));
  ASSERT_TRUE(opened.ok());
  auto& store = dynamic_cast<log::LogStore&>(**opened);
  auto info = store.CreateStream(Spec("s"));
  ASSERT_TRUE(info.ok());
  ASSERT_TRUE(AppendPayloads(store, info->id, {"x", "y"}).ok());
  auto recs = store.Read(info->id, 2, 10, 1 << 20);
  ASSERT_TRUE(recs.ok());
  ASSERT_EQ(recs->size(), 1u);
  EXPECT_EQ((*recs)[0].payload, "y");
  EXPECT_EQ(store.cache_hits(), 1u);
  EXPECT_EQ(store.cache_misses(), 0u);
  opened->reset();
  // After a restart the cache is empty: the same read is a pread.
  LogStoreOptions o = SmallLogOptions(dir_.path());
  opened = OpenLogStore(o);
  ASSERT_TRUE(opened.ok());
  auto& reopened = dynamic_cast<log::LogStore&>(**opened);
  recs = reopened.Read(info->id, 2, 10, 1 << 20);
  ASSERT_TRUE(recs.ok());
  ASSERT_EQ(recs->size(), 1u);
  EXPECT_EQ((*recs)[0].payload, "y");
  EXPECT_EQ(reopened.cache_hits(), 0u);
  EXPECT_EQ(reopened.cache_misses(), 1u);
}

// The tail cache holds whole committed groups. Batches of different streams share a group; a
// read takes each stream's frames out of the groups by position, across several groups, and
// falls back to pread for groups already evicted.
TEST_F(LogStoreTest, TailCacheServesBatchesOutOfSharedGroupsAndPreadsEvictedOnes) {
  LogStoreOptions o = SmallLogOptions(dir_.path());
  o.tail_cache_bytes = 16 << 10;
  auto opened = OpenLogStore(o);
  ASSERT_TRUE(opened.ok());
  auto& store = dynamic_cast<log::LogStore&>(**opened);
  constexpr int kStreams = 4;
  constexpr int kRounds = 200;
  std::vector<StreamId> ids;
  ASSERT_NO_FATAL_FAILURE(CreateStreams(store, kStreams, &ids));
  auto payload = [](int stream, int round) {
    return "stream " + std::to_string(stream) + " round " + std::to_string(round) + " " +
           std::string(static_cast<size_t>(round % 50), 'p');
  };
  // One thread per stream, so that concurrent batches land in the same groups.
  std::vector<std::thread> threads;
  for (int i = 0; i < kStreams; ++i) {
    threads.emplace_back([&, i] {
      for (int r = 0; r < kRounds; ++r) {
        ASSERT_TRUE(AppendPayloads(store, ids[static_cast<size_t>(i)], {payload(i, r)}).ok());
      }
    });
  }
  for (auto& t : threads) t.join();
  const runnel::StoreCommitStats stats = store.CommitStats();
  EXPECT_LT(stats.syncs, static_cast<uint64_t>(kStreams * kRounds)) << "no group was shared";
  for (int i = 0; i < kStreams; ++i) {
    // Everything: the old groups are evicted (16 KiB cache), the newest are cached.
    const uint64_t hits = store.cache_hits(), misses = store.cache_misses();
    auto recs = store.Read(ids[static_cast<size_t>(i)], 1, kRounds, 1 << 20);
    ASSERT_TRUE(recs.ok()) << recs.status().ToString();
    ASSERT_EQ(recs->size(), static_cast<size_t>(kRounds));
    for (int r = 0; r < kRounds; ++r) {
      EXPECT_EQ((*recs)[static_cast<size_t>(r)].offset, static_cast<uint64_t>(r + 1));
      EXPECT_EQ((*recs)[static_cast<size_t>(r)].payload, payload(i, r));
    }
    EXPECT_GT(store.cache_hits(), hits);
    EXPECT_GT(store.cache_misses(), misses);
    // The newest record alone comes from the cache.
    const uint64_t misses_before_tail = store.cache_misses();
    recs = store.Read(ids[static_cast<size_t>(i)], kRounds, 1, 1 << 20);
    ASSERT_TRUE(recs.ok());
    ASSERT_EQ(recs->size(), 1u);
    EXPECT_EQ(recs->front().payload, payload(i, kRounds - 1));
    EXPECT_EQ(store.cache_misses(), misses_before_tail);
  }
}

// Batches of one stream queued together share a group and sit next to each other in it: a read
// takes them from the cached group as one run, in order.
TEST_F(LogStoreTest, TailCacheServesAdjacentBatchesOfOneStreamInOrder) {
  auto opened = OpenLogStore(SmallLogOptions(dir_.path()));
  ASSERT_TRUE(opened.ok());
  auto& store = dynamic_cast<log::LogStore&>(**opened);
  auto info = store.CreateStream(Spec("s"));
  ASSERT_TRUE(info.ok());
  constexpr int kBatches = 50;
  std::mutex mu;
  std::condition_variable cv;
  int acked = 0;  // GUARDED_BY(mu)
  for (int b = 0; b < kBatches; ++b) {
    AppendRequest req;
    req.stream = info->id;
    req.now_ms = 1;
    req.records.push_back(AppendRecord{std::nullopt, "batch " + std::to_string(b) + " first"});
    req.records.push_back(AppendRecord{std::nullopt, "batch " + std::to_string(b) + " second"});
    store.Append(std::move(req), [&](Result<AppendResult> r) {
      EXPECT_TRUE(r.ok());
      std::lock_guard lock(mu);
      ++acked;
      cv.notify_all();
    });
  }
  {
    std::unique_lock lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(30), [&] { return acked == kBatches; }));
  }
  const uint64_t misses = store.cache_misses();
  auto recs = store.Read(info->id, 2, 2 * kBatches, 1 << 20);
  ASSERT_TRUE(recs.ok()) << recs.status().ToString();
  ASSERT_EQ(recs->size(), static_cast<size_t>(2 * kBatches - 1));
  for (size_t i = 0; i < recs->size(); ++i) {
    const uint64_t offset = i + 2;
    EXPECT_EQ((*recs)[i].offset, offset);
    EXPECT_EQ((*recs)[i].payload, "batch " + std::to_string((offset - 1) / 2) +
                                      (offset % 2 == 1 ? " first" : " second"));
  }
  EXPECT_EQ(store.cache_misses(), misses);
}

// fsync mode: after acknowledging a group, the writer waits (up to group_commit_wait_us, at most
// half the mean sync time) until as many ops are queued again as were in flight during that
// group, so appenders that come straight back share one sync instead of splitting over two.
class LogGroupCommitTest : public ::testing::Test {
 protected:
  static constexpr int kAppenders = 16;

  void SetUp() override {
    slow_.SetSyncDelay(std::chrono::milliseconds(4));  // a slow disk: the wait is worth it
    LogStoreOptions o;
    o.dir = "/data";
    o.env = &slow_;
    o.segment_size = 1 << 20;
    o.prezero_segments = false;
    o.group_commit_wait_us = 2000;
    // A gap as long as the wait itself: on a loaded machine (sanitizers, parallel tests) the
    // client thread can take far more than the default 30 us between two re-issued appends.
    o.group_arrival_gap_us = 2000;
    auto opened = OpenLogStore(o);
    ASSERT_TRUE(opened.ok());
    store_ = std::move(*opened);
    ASSERT_NO_FATAL_FAILURE(CreateStreams(*store_, kAppenders, &ids_));
  }

  // Closed loop: each acknowledgement hands its appender back to one client thread, which
  // issues its next append (the way the server's io threads do). When `stall_every` > 0, the
  // first half of the appenders is held back for 10 ms (five times the wait) before every
  // round that is a multiple of it, which splits them from the others. Returns records per sync.
  // `reissue_delay` is the client's reaction time: how long it takes to issue appends after it
  // sees their acknowledgements.
  double RunClosedLoop(int rounds, int stall_every,
                       std::chrono::microseconds reissue_delay = std::chrono::microseconds(0)) {
    const runnel::StoreCommitStats before = store_->CommitStats();
    std::mutex mu;
    std::condition_variable cv;
    std::vector<int> ready;                  // GUARDED_BY(mu)
    int done = 0;                            // GUARDED_BY(mu): appenders that finished their rounds
    bool failed = false;                     // GUARDED_BY(mu)
    std::vector<int> issued(kAppenders, 0);  // by whoever issues that appender's next append
    std::vector<int> acked(kAppenders, 0);   // GUARDED_BY(mu)
    auto issue = [&](int a) {
      AppendRequest req;
      req.stream = ids_[static_cast<size_t>(a)];
      req.now_ms = 1;
      req.records.push_back(AppendRecord{std::nullopt, "payload"});
      ++issued[static_cast<size_t>(a)];
      store_->Append(std::move(req), [&, a](Result<AppendResult> r) {
        std::lock_guard lock(mu);
        failed = failed || !r.ok();
        if (++acked[static_cast<size_t>(a)] == rounds) {
          ++done;
        } else {
          ready.push_back(a);
        }
        cv.notify_all();
      });
    };
    for (int a = 0; a < kAppenders; ++a) issue(a);
    std::vector<int> held;  // the stalled half, issued together by `releaser`
    std::thread releaser;
    std::unique_lock lock(mu);
    while (done < kAppenders) {
      const bool woke = cv.wait_for(lock, std::chrono::seconds(30),
                                    [&] { return !ready.empty() || done == kAppenders; });
      EXPECT_TRUE(woke) << "appends stopped completing";
      if (!woke) break;
      std::vector<int> mine;
      mine.swap(ready);
      lock.unlock();
      if (reissue_delay.count() > 0) std::this_thread::sleep_for(reissue_delay);
      for (int a : mine) {
        const int next = issued[static_cast<size_t>(a)] + 1;
        if (stall_every > 0 && a < kAppenders / 2 && next % stall_every == 0) {
          held.push_back(a);
        } else {
          issue(a);
        }
      }
      if (held.size() == kAppenders / 2) {
        // Released on their own, not with the next acknowledgements the client thread sees.
        if (releaser.joinable()) releaser.join();
        releaser = std::thread([&issue, batch = std::move(held)] {
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
          for (int a : batch) issue(a);
        });
        held.clear();
      }
      lock.lock();
    }
    lock.unlock();
    if (releaser.joinable()) releaser.join();
    EXPECT_FALSE(failed);
    const runnel::StoreCommitStats after = store_->CommitStats();
    const uint64_t records = after.records - before.records;
    const uint64_t syncs = after.syncs - before.syncs;
    EXPECT_EQ(records, static_cast<uint64_t>(kAppenders * rounds));
    if (syncs == 0) {
      ADD_FAILURE() << "no syncs";
      return 0;
    }
    std::cout << syncs << " syncs for " << records << " records\n";
    return static_cast<double>(records) / static_cast<double>(syncs);
  }

  env::MemEnv mem_;
  env::FaultInjectionEnv slow_{&mem_};
  std::unique_ptr<Store> store_;
  std::vector<StreamId> ids_;
};

TEST_F(LogGroupCommitTest, AppendersThatComeStraightBackShareTheNextSync) {
  // Without the wait the appenders split into two alternating groups (about 8 per sync here).
  EXPECT_GE(RunClosedLoop(15, 0), 0.75 * kAppenders);
}

// A slow client splits the appenders into two groups that alternate between syncs. When the
// client reacts more slowly than the writer takes the next queue (0.5 ms here, as on a loaded
// machine), waiting only for as many ops as the previous group held keeps them apart for good:
// 8 records per sync. Counting what queued during that group merges them again at once.
TEST_F(LogGroupCommitTest, GroupsSplitByASlowClientMergeAgain) {
  EXPECT_GE(RunClosedLoop(40, 10, std::chrono::microseconds(500)), 0.75 * kAppenders);
}

TEST(LogIntervalTest, IntervalModeSyncsInTheBackground) {
  env::MemEnv mem;
  LogStoreOptions o;
  o.dir = "/data";
  o.env = &mem;
  o.segment_size = 64 << 10;
  o.durability = *ParseLogDurability("interval:5");
  auto opened = OpenLogStore(o);
  ASSERT_TRUE(opened.ok());
  EXPECT_NE((*opened)->Durability().find("interval:5"), std::string::npos);
  auto info = (*opened)->CreateStream(Spec("s"));
  ASSERT_TRUE(info.ok());
  ASSERT_TRUE(AppendPayloads(**opened, info->id, {"a"}).ok());
  // Nothing more is appended; the writer must sync on its own. Bounded wait (10 s).
  bool synced = false;
  for (int i = 0; i < 1000 && !synced; ++i) {
    synced = mem.PendingOperations() == 0;
    if (!synced) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(synced) << "interval mode left acknowledged data unsynced";
  mem.DropUnsyncedData();
  opened->reset();
  opened = OpenLogStore(o);
  ASSERT_TRUE(opened.ok());
  EXPECT_EQ((*opened)->GetStreamById(info->id)->next_offset, 2u);
}

TEST_F(LogStoreTest, RegistryOpensTheLogStoreByName) {
  RegistryOptions options;
  options.store = "log";
  options.data_dir = dir_.path();
  {
    auto registry = StreamRegistry::Open(options);
    ASSERT_TRUE(registry.ok()) << registry.status().ToString();
    EXPECT_EQ(registry->store().Name(), "log");
    ASSERT_TRUE(registry->CreateStream(StreamScope::Global(), "orders", StreamRetention{}).ok());
    auto offset = registry->Append(StreamScope::Global(), "orders", std::nullopt, "hello", 5);
    ASSERT_TRUE(offset.ok()) << offset.status().ToString();
    EXPECT_EQ(*offset, 1u);
  }
  auto registry = StreamRegistry::Open(options);
  ASSERT_TRUE(registry.ok()) << registry.status().ToString();
  auto d = registry->Describe(StreamScope::Global(), "orders");
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->next_offset, 2u);

  RegistryOptions bad = options;
  bad.data_dir = dir_.path() + "/other";
  bad.durability = "sometimes";
  EXPECT_EQ(StreamRegistry::Open(bad).status().code(), StatusCode::kInvalidArgument);
  bad.durability = "fsync";
  bad.data_dir.clear();
  EXPECT_EQ(StreamRegistry::Open(bad).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(LogStoreTest, ConcurrentCreatesShareCommitsAndEachNameWinsOnce) {
  std::set<StreamId> ids;
  {
    auto opened = Open();
    ASSERT_TRUE(opened.ok());
    Store& store = **opened;
    std::mutex mu;
    std::map<std::string, int> wins;
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t) {
      threads.emplace_back([&] {
        for (int i = 0; i < 40; ++i) {
          auto info = store.CreateStream(Spec("n" + std::to_string(i)));
          std::lock_guard lock(mu);
          if (info.ok()) {
            ++wins[info->spec.name];
            EXPECT_TRUE(ids.insert(info->id).second) << "id " << info->id << " given twice";
          } else {
            EXPECT_EQ(info.status().code(), StatusCode::kAlreadyExists);
          }
        }
      });
    }
    for (auto& t : threads) t.join();
    ASSERT_EQ(wins.size(), 40u);
    for (const auto& [name, n] : wins) EXPECT_EQ(n, 1) << name;
  }
  auto opened = Open();
  ASSERT_TRUE(opened.ok());
  auto list = (*opened)->ListStreams("global", "", 100);
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 40u);
  for (const auto& info : *list) EXPECT_TRUE(ids.count(info.id)) << info.spec.name;
}

TEST(LogSegmentPreparationTest, RollsUseTheSegmentPreparedInTheBackground) {
  env::MemEnv mem;
  ASSERT_TRUE(mem.CreateDir("/data").ok());
  ASSERT_TRUE(mem.OpenFile("/data/00000000000000000009.log.prep", true).ok());  // a leftover
  LogStoreOptions o;
  o.dir = "/data";
  o.env = &mem;
  o.segment_size = 16 << 10;
  auto opened = OpenLogStore(o);
  ASSERT_TRUE(opened.ok());
  EXPECT_FALSE(mem.FileExists("/data/00000000000000000009.log.prep"));
  auto wait_for = [&](const std::string& path) {
    for (int i = 0; i < 1000 && !mem.FileExists(path); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return mem.FileExists(path);
  };
  ASSERT_TRUE(wait_for("/data/00000000000000000002.log.prep"));
  auto info = (*opened)->CreateStream(Spec("s"));
  ASSERT_TRUE(info.ok());
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(AppendPayloads(**opened, info->id, {std::string(1000, 'a')}).ok());
  }
  EXPECT_TRUE(mem.FileExists("/data/00000000000000000002.log"));
  EXPECT_FALSE(mem.FileExists("/data/00000000000000000002.log.prep")) << "renamed, not rewritten";
  EXPECT_TRUE(wait_for("/data/00000000000000000003.log.prep")) << "the next one is prepared";
  opened->reset();
  EXPECT_FALSE(mem.FileExists("/data/00000000000000000003.log.prep")) << "removed at close";
  opened = OpenLogStore(o);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  EXPECT_EQ((*opened)->GetStreamById(info->id)->next_offset, 21u);
}

// A roll that meets the preparer still writing the very segment it needs waits for it instead
// of zeroing the same segment a second time beside it (twice the disk traffic, both slower):
// with the preparer's sync held, the appends that need the roll cannot finish, and once it is
// released they do, on the prepared file.
TEST(LogSegmentPreparationTest, RollWaitsForTheSegmentBeingPrepared) {
  env::MemEnv mem;
  env::FaultInjectionEnv faulty(&mem);
  ASSERT_TRUE(mem.CreateDir("/data").ok());
  faulty.HoldSyncs(".prep");
  LogStoreOptions o;
  o.dir = "/data";
  o.env = &faulty;
  o.segment_size = 16 << 10;
  o.durability.mode = LogDurability::kNone;
  auto opened = OpenLogStore(o);
  ASSERT_TRUE(opened.ok());
  Store& store = **opened;
  for (int i = 0; i < 500 && faulty.HeldSyncs() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(faulty.HeldSyncs(), 1) << "segment 2 is being prepared";
  auto info = store.CreateStream(Spec("s"));
  ASSERT_TRUE(info.ok());
  const StoreCommitStats before = store.CommitStats();
  auto appends = std::async(std::launch::async, [&] {
    for (int i = 0; i < 20; ++i) {
      Status s = AppendPayloads(store, info->id, {std::string(1000, 'a')}).status();
      if (!s.ok()) return s;
    }
    return Status::OK();
  });
  const bool finished_while_held =
      appends.wait_for(std::chrono::milliseconds(300)) == std::future_status::ready;
  faulty.ReleaseSyncs();
  EXPECT_FALSE(finished_while_held) << "the roll zeroed segment 2 itself";
  const Status appended = appends.get();
  ASSERT_TRUE(appended.ok()) << appended.ToString();
  EXPECT_TRUE(mem.FileExists("/data/00000000000000000002.log"));
  EXPECT_FALSE(mem.FileExists("/data/00000000000000000002.log.prep")) << "renamed, not rewritten";
  const StoreCommitStats after = store.CommitStats();
  EXPECT_EQ(after.segment_rolls - before.segment_rolls, 1u);
  EXPECT_EQ(after.segment_rolls_unprepared, before.segment_rolls_unprepared);
  EXPECT_GT(after.segment_roll_micros, before.segment_roll_micros);
  opened->reset();
  opened = OpenLogStore(o);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  EXPECT_EQ((*opened)->GetStreamById(info->id)->next_offset, 21u);
}

// Each request for a prepared segment is served by one preparation. The preparer used to see
// a segment it had just handed to a waiting roll as wanted and not ready, and prepare it again:
// reopening the file the roll was installing as the active segment, truncating and zeroing it,
// so records appended there were gone after a power loss (LogFaultDifferentialTest, seed 2,
// under ASan). That needs the preparer to look in the few microseconds between the roll taking
// the segment and asking for the next, which this test does not force: with pauses added by
// hand at those two points the old code failed in its first rounds, and this code does not.
// What it checks every time: segment 2 is opened once (also when the open and the first roll
// of a new directory both ask for it), and every acknowledged record survives the power loss.
TEST(LogSegmentPreparationTest, ATakenSegmentIsNotPreparedAgain) {
  for (int round = 0; round < 4; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    env::MemEnv mem;
    env::FaultInjectionEnv faulty(&mem);
    ASSERT_TRUE(mem.CreateDir("/data").ok());
    faulty.HoldSyncs(".prep");
    LogStoreOptions o;
    o.dir = "/data";
    o.env = &faulty;
    o.segment_size = 16 << 10;
    auto opened = OpenLogStore(o);
    ASSERT_TRUE(opened.ok());
    Store& store = **opened;
    for (int i = 0; i < 500 && faulty.HeldSyncs() == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    ASSERT_EQ(faulty.HeldSyncs(), 1) << "segment 2 is being prepared";
    auto info = store.CreateStream(Spec("s"));
    ASSERT_TRUE(info.ok());
    auto appends = std::async(std::launch::async, [&] {
      for (int i = 0; i < 20; ++i) {
        Status s = AppendPayloads(store, info->id, {std::string(1000, 'a')}).status();
        if (!s.ok()) return s;
      }
      return Status::OK();
    });
    // Long enough for the appends to fill segment 1 and the roll to wait for segment 2.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    faulty.ReleaseSyncs();
    const Status appended = appends.get();
    ASSERT_TRUE(appended.ok()) << appended.ToString();
    // Until segment 3 is asked for and prepared, the preparer has had every chance to look.
    for (int i = 0; i < 500 && !mem.FileExists("/data/00000000000000000003.log.prep"); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    EXPECT_EQ(faulty.Opens("/data/00000000000000000002.log.prep"), 1)
        << "segment 2 was prepared again after the roll took it";
    mem.DropUnsyncedData();
    opened->reset();
    opened = OpenLogStore(o);
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    auto after = (*opened)->GetStreamById(info->id);
    ASSERT_TRUE(after.ok());
    EXPECT_EQ(after->next_offset, 21u) << "acknowledged records lost";
    auto read = (*opened)->Read(info->id, 1, 100, 1 << 20);
    ASSERT_TRUE(read.ok()) << read.status().ToString();
    EXPECT_EQ(read->size(), 20u);
    if (::testing::Test::HasFailure()) return;
  }
}

// A roll that does not use the prepared segment (a frame larger than a segment, a failed
// rename) creates its segment itself; the segment the preparer then finishes for it must not
// stay behind. Checks the invariant over many fast rolls (durability none, tiny segments): at
// most the segment being prepared and a ready one exist at any moment, none after close. (The
// interleaving that leaked is timing-dependent; the posix log_bench restart run showed it, this
// in-memory run does not force it.)
TEST(LogSegmentPreparationTest, FastRollsLeaveNoStalePreparedSegments) {
  env::MemEnv mem;
  ASSERT_TRUE(mem.CreateDir("/data").ok());
  LogStoreOptions o;
  o.dir = "/data";
  o.env = &mem;
  o.segment_size = 2 << 10;
  o.durability.mode = LogDurability::kNone;
  auto opened = OpenLogStore(o);
  ASSERT_TRUE(opened.ok());
  auto info = (*opened)->CreateStream(Spec("s"));
  ASSERT_TRUE(info.ok());
  auto count_prep = [&] {
    size_t n = 0;
    auto names = mem.ListDir("/data");
    if (!names.ok()) return size_t{100};
    for (const std::string& name : names.value()) {
      n += name.size() > 5 && name.substr(name.size() - 5) == ".prep" ? 1 : 0;
    }
    return n;
  };
  size_t most = 0;
  for (int i = 0; i < 400; ++i) {
    ASSERT_TRUE(AppendPayloads(**opened, info->id, {std::string(1500, 'a')}).ok());
    most = std::max(most, count_prep());
  }
  EXPECT_LE(most, 2u) << "prepared segments pile up";
  opened->reset();
  EXPECT_EQ(count_prep(), 0u) << "a prepared segment outlived the store";
}

// Errors the store returns may reach remote clients (the HTTP server puts them in error bodies):
// they name the files of the data directory relative to it, never by the directory's path.
class LogStoreErrorPathTest : public ::testing::Test {
 protected:
  // The store in dir_ through faults_ (over the real file system). Segments are made on demand
  // (not prepared ahead), so a roll opens the new segment itself.
  Result<std::unique_ptr<Store>> Open() {
    LogStoreOptions o = SmallLogOptions(dir_.path());
    o.env = &faults_;
    o.prezero_segments = false;
    return OpenLogStore(o);
  }
  // `s` failed with `code`, its message holds `expected` and not the directory's path.
  void ExpectRelative(const Status& s, StatusCode code, const std::string& expected) {
    EXPECT_EQ(s.code(), code) << s.ToString();
    EXPECT_NE(s.message().find(expected), std::string_view::npos) << s.ToString();
    EXPECT_EQ(s.message().find(dir_.path()), std::string_view::npos) << s.ToString();
  }
  TempDir dir_;
  env::FaultInjectionEnv faults_{env::Env::Posix()};
};

TEST_F(LogStoreErrorPathTest, ASegmentThatCannotBeOpenedIsNamedRelativeToTheDirectory) {
  auto store = Open();
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto info = (*store)->CreateStream(Spec("s"));
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  faults_.SetFaultPathSuffix(".log");
  faults_.FailOpen(1);  // the next segment: the process is out of file descriptors (EMFILE)
  Status failed;
  for (int i = 0; i < 200 && failed.ok(); ++i) {
    auto r = AppendPayloads(**store, info->id, {std::string(1024, 'x')});
    if (!r.ok()) failed = r.status();
  }
  ASSERT_FALSE(failed.ok()) << "200 KiB of appends roll a 64 KiB segment";
  ExpectRelative(failed, StatusCode::kIOError,
                 "open '00000000000000000002.log': Too many open files");
  faults_.ClearFaults();
}

TEST_F(LogStoreErrorPathTest, AFullDiskIsReportedWithTheSegmentNamedRelativeToTheDirectory) {
  auto store = Open();
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto info = (*store)->CreateStream(Spec("s"));
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  faults_.SetNoSpace(true);
  auto r = AppendPayloads(**store, info->id, {"no room"});
  ASSERT_FALSE(r.ok());
  ExpectRelative(r.status(), StatusCode::kResourceExhausted,
                 "write '00000000000000000001.log': No space left on device");
  EXPECT_TRUE(r.status().no_space()) << r.status().ToString();
  faults_.ClearFaults();
}

TEST_F(LogStoreErrorPathTest, ACorruptRecordIsReportedWithTheSegmentNamedRelativeToTheDirectory) {
  StreamId id;
  {
    auto store = Open();
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    auto info = (*store)->CreateStream(Spec("s"));
    ASSERT_TRUE(info.ok()) << info.status().ToString();
    id = info->id;
    ASSERT_TRUE(AppendPayloads(**store, id, {"the-damaged-record", "the-next-one"}).ok());
  }  // a clean close: the checkpoint covers every frame, so the open does not read them again
  const std::string seg = env::JoinPath(dir_.path(), "00000000000000000001.log");
  std::string data;
  {
    std::ifstream in(seg, std::ios::binary);
    data.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  const size_t at = data.find("the-damaged-record");
  ASSERT_NE(at, std::string::npos);
  data[at] = 'T';
  {
    std::ofstream out(seg, std::ios::binary | std::ios::trunc);
    out << data;
  }
  auto store = Open();
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto read = (*store)->Read(id, 1, 10, 1 << 20);
  ASSERT_FALSE(read.ok());
  ExpectRelative(read.status(), StatusCode::kCorruption,
                 "segment 00000000000000000001.log at byte ");
}

}  // namespace
}  // namespace runnel::testing
