// Crash and fault tests through the in-memory and fault-injecting envs.
//
// The promise under test (fsync mode): after a crash that loses everything not synced, every
// acknowledged append is present exactly once at its acknowledged offsets with its bytes; an
// append that was not acknowledged is either wholly present or wholly absent; an append refused
// with a definite error is absent; and the next offset continues after the last present one.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "env/fault_env.h"
#include "env/mem_env.h"
#include "log/log_harness.h"
#include "log/log_test_util.h"
#include "runnel/log_store.h"
#include "store/log/log_store.h"

namespace runnel::testing {
namespace {

// One submitted batch and what the store said about it.
struct Batch {
  std::string stream;
  uint64_t id = 0;
  size_t count = 0;
  enum State { kPending, kAcked, kDefiniteFailure, kUnknown } state = kPending;
  uint64_t first_offset = 0;
};

// Payload: "<batch id>/<index>/<count>/" then filler, so every record names its batch.
std::string MakePayload(uint64_t batch, size_t index, size_t count, size_t filler, char c) {
  return std::to_string(batch) + "/" + std::to_string(index) + "/" + std::to_string(count) + "/" +
         std::string(filler, c);
}

bool ParsePayload(const std::string& p, uint64_t* batch, size_t* index, size_t* count) {
  size_t a = p.find('/'), b = p.find('/', a + 1), c = p.find('/', b + 1);
  if (a == std::string::npos || b == std::string::npos || c == std::string::npos) return false;
  *batch = std::stoull(p.substr(0, a));
  *index = std::stoull(p.substr(a + 1, b - a - 1));
  *count = std::stoull(p.substr(b + 1, c - b - 1));
  const char fill = p.size() > c + 1 ? p[c + 1] : 'x';
  for (size_t i = c + 1; i < p.size(); ++i) {
    if (p[i] != fill) return false;
  }
  return true;
}

class Ledger {
 public:
  uint64_t Add(const std::string& stream, size_t count) {
    std::lock_guard lock(mu_);
    Batch b;
    b.stream = stream;
    b.id = batches_.size();
    b.count = count;
    batches_.push_back(b);
    return b.id;
  }
  void Complete(uint64_t id, const Result<AppendResult>& r) {
    std::lock_guard lock(mu_);
    Batch& b = batches_[id];
    if (r.ok()) {
      b.state = Batch::kAcked;
      b.first_offset = r->first_offset;
      ++acked_;
    } else if (r.status().code() == StatusCode::kOutcomeUnknown) {
      b.state = Batch::kUnknown;
    } else {
      b.state = Batch::kDefiniteFailure;
    }
    cv_.notify_all();
  }
  bool WaitForAcks(uint64_t n) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(20), [&] { return acked_ >= n; });
  }
  uint64_t acked() {
    std::lock_guard lock(mu_);
    return acked_;
  }
  // Checks the recovered store against everything submitted so far. Afterwards every batch
  // that turned out present counts as acknowledged (it is durable now), every absent one as
  // failed, so later rounds check them too.
  void Verify(Store& store, const std::vector<std::string>& streams) {
    std::lock_guard lock(mu_);
    std::map<uint64_t, std::vector<uint64_t>> seen;  // batch -> offsets of its records
    std::map<uint64_t, size_t> first_index;          // batch -> index of its first record seen
    std::map<std::string, uint64_t> heads;
    for (const auto& name : streams) {
      auto info = store.GetStream("global", name);
      ASSERT_TRUE(info.ok()) << info.status().ToString();
      heads[name] = info->event_count ? info->head_offset : info->next_offset;
      uint64_t expect = info->event_count ? info->head_offset : info->next_offset;
      for (uint64_t from = 1;;) {
        auto recs = store.Read(info->id, from, 1000, 1 << 30);
        ASSERT_TRUE(recs.ok()) << recs.status().ToString();
        if (recs->empty()) break;
        for (const auto& r : *recs) {
          ASSERT_EQ(r.offset, expect) << "gap or disorder in " << name;
          ++expect;
          uint64_t batch;
          size_t index, count;
          ASSERT_TRUE(ParsePayload(r.payload, &batch, &index, &count)) << r.payload.substr(0, 40);
          ASSERT_LT(batch, batches_.size());
          ASSERT_EQ(batches_[batch].stream, name);
          ASSERT_EQ(batches_[batch].count, count);
          if (seen[batch].empty() && index > 0) {
            // Only retention may cut a batch, and only at the head of the stream.
            ASSERT_EQ(r.offset, heads[name]) << "batch " << batch << " starts mid-way";
            first_index[batch] = index;
          }
          ASSERT_EQ(seen[batch].size() + first_index[batch], index)
              << "record of batch " << batch << " twice or out of order";
          seen[batch].push_back(r.offset);
        }
        from = recs->back().offset + 1;
      }
      ASSERT_EQ(expect, info->next_offset) << "next offset of " << name;
    }
    for (Batch& b : batches_) {
      auto it = seen.find(b.id);
      const bool present = it != seen.end();
      const size_t cut = first_index.count(b.id) ? first_index[b.id] : 0;
      if (present) {
        ASSERT_EQ(it->second.size() + cut, b.count) << "batch " << b.id << " is half present";
        for (size_t i = 1; i < it->second.size(); ++i) ASSERT_EQ(it->second[i], it->second[0] + i);
      }
      switch (b.state) {
        case Batch::kAcked:
          if (!present) {
            ASSERT_LE(b.first_offset + b.count, heads[b.stream])
                << "acknowledged batch " << b.id << " of " << b.stream << " lost";
            break;
          }
          ASSERT_EQ(it->second.front(), b.first_offset + cut) << "batch " << b.id << " moved";
          break;
        case Batch::kDefiniteFailure:
          ASSERT_FALSE(present) << "batch " << b.id << " was refused but is present";
          break;
        case Batch::kPending:
        case Batch::kUnknown: break;
      }
      if (present) {
        b.state = Batch::kAcked;
        b.first_offset = it->second.front() - cut;
      } else if (b.state != Batch::kAcked) {
        b.state = Batch::kDefiniteFailure;
      }
    }
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Batch> batches_;
  uint64_t acked_ = 0;
};

LogStoreOptions MemOptions(env::Env* env) {
  LogStoreOptions o;
  o.dir = "/data";
  o.env = env;
  o.segment_size = 16 << 10;
  o.checkpoint_interval_bytes = 40 << 10;
  return o;
}

// Arms a power loss just before the `sync`-th fdatasync from now: each file keeps a
// pseudo-random part of its unsynced writes (chosen by `keep_seed`), the last one torn after
// `tear` bytes when `tear` > 0; then sets `crashed`.
void ArmPowerLoss(env::FaultInjectionEnv& env, env::MemEnv& mem, int sync, uint64_t keep_seed,
                  size_t tear, std::atomic<bool>& crashed) {
  env.BeforeSyncDo(sync, [&mem, &crashed, keep_seed, tear] {
    mem.Crash(
        [keep_seed](const std::string& path, size_t pending) {
          return static_cast<size_t>((keep_seed ^ std::hash<std::string>()(path)) % (pending + 1));
        },
        tear);
    crashed = true;
  });
}

std::unique_ptr<Store> MustOpen(const LogStoreOptions& o) {
  auto s = OpenLogStore(o);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? std::move(*s) : nullptr;
}

// Appends from several threads while the "power" fails just before a random fdatasync, with a
// random part of the unsynced writes landing (the last one possibly torn); reopens and
// verifies, 40 times over the same directory.
TEST(LogCrashTest, AcknowledgedAppendsSurvivePowerLossAtManyCutPoints) {
  env::MemEnv mem;
  env::FaultInjectionEnv env(&mem);
  const std::vector<std::string> streams = {"s0", "s1", "s2", "s3", "s4"};
  Ledger ledger;
  std::mt19937_64 rng(42);
  {
    auto store = MustOpen(MemOptions(&env));
    ASSERT_NE(store, nullptr);
    for (const auto& n : streams) {
      StreamSpec spec = Spec(n);
      if (n == "s4") spec.retention.max_events = 20;  // lets old segments die
      ASSERT_TRUE(store->CreateStream(spec).ok());
    }
  }
  int torn_tails = 0;
  for (int round = 0; round < 40; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    auto store = MustOpen(MemOptions(&env));
    ASSERT_NE(store, nullptr);
    for (const auto& note : dynamic_cast<log::LogStore&>(*store).RecoveryNotes()) {
      if (note.find("torn tail") != std::string::npos) ++torn_tails;
    }
    ledger.Verify(*store, streams);
    if (::testing::Test::HasFatalFailure()) return;
    const uint64_t keep_seed = rng();
    const size_t tear = rng() % 4 == 0 ? 0 : 1 + rng() % 2000;
    std::atomic<bool> crashed{false};
    ArmPowerLoss(env, mem, static_cast<int>(1 + rng() % 60), keep_seed, tear, crashed);
    std::vector<std::thread> appenders;
    for (int t = 0; t < 3; ++t) {
      appenders.emplace_back([&, t] {
        std::mt19937_64 r(static_cast<uint64_t>(round * 10 + t));
        for (int i = 0; i < 300 && !crashed.load(); ++i) {
          const std::string& name = streams[r() % streams.size()];
          auto info = store->GetStream("global", name);
          if (!info.ok()) return;
          const size_t count = 1 + r() % 4;
          const uint64_t id = ledger.Add(name, count);
          AppendRequest req;
          req.stream = info->id;
          req.now_ms = 1000;
          for (size_t k = 0; k < count; ++k) {
            req.records.push_back(AppendRecord{
                std::nullopt, MakePayload(id, k, count, r() % 900, static_cast<char>('a' + t))});
          }
          std::promise<void> done;
          store->Append(std::move(req), [&ledger, id, &done](Result<AppendResult> res) {
            ledger.Complete(id, res);
            done.set_value();
          });
          done.get_future().wait();
        }
      });
    }
    for (auto& t : appenders) t.join();
    store.reset();  // a clean close would sync: make sure the plug is pulled first
    if (!crashed) mem.DropUnsyncedData();
    env.ClearFaults();
  }
  // About a third of the rounds tear a write (how many depends on thread timing); all 40
  // missing one would mean the cut points do not reach torn writes at all.
  EXPECT_GE(torn_tails, 1) << "the cut points must include torn writes";
  auto store = MustOpen(MemOptions(&env));
  ASSERT_NE(store, nullptr);
  ledger.Verify(*store, streams);
  // The next offset continues after the last present record.
  auto info = store->GetStream("global", "s0");
  ASSERT_TRUE(info.ok());
  auto r = AppendPayloads(*store, info->id, {MakePayload(ledger.Add("s0", 1), 0, 1, 3, 'z')});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->first_offset, info->next_offset);
}

// Bursts of appends to one hot stream share groups, so the index merges their adjacent frames
// into one reference; a filler stream with retention kills old segments, so the cleaner moves
// those merged references frame by frame. Power fails at random syncs (cleaner syncs included);
// every acknowledged record must be present exactly once after each reopen.
TEST(LogCrashTest, MergedReferencesSurvivePowerLossWhileTheCleanerMovesThem) {
  env::MemEnv mem;
  env::FaultInjectionEnv env(&mem);
  const std::vector<std::string> streams = {"hot", "filler"};
  Ledger ledger;
  std::mt19937_64 rng(7);
  LogStoreOptions options = MemOptions(&env);
  options.checkpoint_interval_bytes = 16 << 10;  // the cleaner runs before each checkpoint
  {
    auto store = MustOpen(options);
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->CreateStream(Spec("hot")).ok());
    StreamSpec filler = Spec("filler");
    filler.retention.max_events = 5;
    ASSERT_TRUE(store->CreateStream(filler).ok());
  }
  size_t most_merged = 0;  // the largest records-per-reference ratio seen for "hot"
  // Outlive every store, so a callback still unlocking `mu` never touches a dead mutex.
  std::mutex mu;
  std::condition_variable cv;
  int pending = 0;  // GUARDED_BY(mu)
  for (int round = 0; round < 25; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    auto store = MustOpen(options);
    ASSERT_NE(store, nullptr);
    ledger.Verify(*store, streams);
    if (::testing::Test::HasFatalFailure()) return;
    const uint64_t keep_seed = rng();
    const size_t tear = rng() % 3 == 0 ? 0 : 1 + rng() % 500;
    std::atomic<bool> crashed{false};
    ArmPowerLoss(env, mem, static_cast<int>(20 + rng() % 150), keep_seed, tear, crashed);
    auto hot = store->GetStream("global", "hot");
    auto filler = store->GetStream("global", "filler");
    ASSERT_TRUE(hot.ok() && filler.ok());
    for (int burst = 0; burst < 30 && !crashed.load(); ++burst) {
      // 24 appends issued back to back, without waiting: most share a group and a timestamp.
      constexpr int kBurst = 24;
      {
        std::lock_guard lock(mu);
        pending = kBurst;
      }
      for (int i = 0; i < kBurst; ++i) {
        const uint64_t id = ledger.Add("hot", 1);
        AppendRequest req;
        req.stream = hot->id;
        req.now_ms = 5000 + static_cast<uint64_t>(burst);
        req.records.push_back(AppendRecord{std::nullopt, MakePayload(id, 0, 1, rng() % 200, 'h')});
        store->Append(std::move(req), [&, id](Result<AppendResult> res) {
          ledger.Complete(id, res);
          std::lock_guard lock(mu);
          if (--pending == 0) cv.notify_all();
        });
      }
      {
        std::unique_lock lock(mu);
        cv.wait(lock, [&] { return pending == 0; });
      }
      if (!crashed.load()) {
        const size_t refs = dynamic_cast<log::LogStore&>(*store).BatchRefsForTesting(hot->id);
        auto info = store->GetStream("global", "hot");
        if (info.ok() && refs > 0) {
          most_merged = std::max<size_t>(most_merged, info->event_count / refs);
        }
      }
      // Filler that retention drops at once: the segments behind it die but for "hot".
      for (int i = 0; i < 6 && !crashed.load(); ++i) {
        const uint64_t id = ledger.Add("filler", 1);
        AppendRequest req;
        req.stream = filler->id;
        req.now_ms = 1;
        req.records.push_back(AppendRecord{std::nullopt, MakePayload(id, 0, 1, 900, 'f')});
        std::promise<void> done;
        store->Append(std::move(req), [&ledger, id, &done](Result<AppendResult> res) {
          ledger.Complete(id, res);
          done.set_value();
        });
        done.get_future().wait();
      }
    }
    store.reset();
    if (!crashed) mem.DropUnsyncedData();
    env.ClearFaults();
  }
  auto store = MustOpen(options);
  ASSERT_NE(store, nullptr);
  ledger.Verify(*store, streams);
  EXPECT_GE(most_merged, 2u) << "bursts must have produced merged references";
}

// The shutdown path and checkpoints: crash right after a clean close loses nothing.
TEST(LogCrashTest, CleanCloseThenPowerLossKeepsEverything) {
  env::MemEnv mem;
  LogStoreOptions o = MemOptions(&mem);
  o.durability.mode = LogDurability::kNone;
  StreamId id;
  {
    auto store = MustOpen(o);
    ASSERT_NE(store, nullptr);
    auto info = store->CreateStream(Spec("s"));
    ASSERT_TRUE(info.ok());
    id = info->id;
    for (int i = 0; i < 50; ++i)
      ASSERT_TRUE(AppendPayloads(*store, id, {std::string(500, 'x')}).ok());
  }
  mem.DropUnsyncedData();
  auto store = MustOpen(o);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->GetStreamById(id)->next_offset, 51u);
}

TEST(LogCrashTest, FlushMakesAppendsDurableInModeNone) {
  env::MemEnv mem;
  LogStoreOptions o = MemOptions(&mem);
  o.durability.mode = LogDurability::kNone;
  auto store = MustOpen(o);
  ASSERT_NE(store, nullptr);
  auto info = store->CreateStream(Spec("s"));
  ASSERT_TRUE(info.ok());
  ASSERT_TRUE(AppendPayloads(*store, info->id, {"a", "b"}).ok());
  EXPECT_GT(mem.PendingOperations(), 0u) << "mode none does not sync on append";
  ASSERT_TRUE(store->Flush().ok());
  ASSERT_TRUE(AppendPayloads(*store, info->id, {"not flushed"}).ok());
  mem.DropUnsyncedData();
  store.reset();
  store = MustOpen(o);
  ASSERT_NE(store, nullptr);
  auto recs = store->Read(info->id, 1, 10, 1 << 20);
  ASSERT_TRUE(recs.ok());
  ASSERT_EQ(recs->size(), 2u) << "flushed appends survive, the later one is lost";
  EXPECT_EQ((*recs)[1].payload, "b");
}

class LogFaultTest : public ::testing::Test {
 protected:
  LogFaultTest() : faults_(&mem_) {}
  std::unique_ptr<Store> Open() { return MustOpen(MemOptions(&faults_)); }
  env::MemEnv mem_;
  env::FaultInjectionEnv faults_;
};

TEST_F(LogFaultTest, FailedSyncIsADefiniteErrorAndTheStoreKeepsWorking) {
  faults_.SetFaultPathSuffix(".log");  // not the segment being prepared in the background
  auto store = Open();
  ASSERT_NE(store, nullptr);
  auto info = store->CreateStream(Spec("s"));
  ASSERT_TRUE(info.ok());
  ASSERT_TRUE(AppendPayloads(*store, info->id, {"one"}).ok());
  faults_.FailSync(1);
  auto failed = AppendPayloads(*store, info->id, {"two"});
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), StatusCode::kIOError) << failed.status().ToString();
  EXPECT_NE(failed.status().message().find("fdatasync"), std::string_view::npos);
  auto ok = AppendPayloads(*store, info->id, {"three"});
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->first_offset, 2u) << "the failed append took no offset";
  auto recs = store->Read(info->id, 1, 10, 1 << 20);
  ASSERT_TRUE(recs.ok());
  ASSERT_EQ(recs->size(), 2u);
  EXPECT_EQ((*recs)[1].payload, "three");
  store.reset();
  mem_.DropUnsyncedData();
  store = Open();
  ASSERT_NE(store, nullptr);
  recs = store->Read(info->id, 1, 10, 1 << 20);
  ASSERT_TRUE(recs.ok());
  ASSERT_EQ(recs->size(), 2u) << "the failed append is not resurrected by recovery";
  EXPECT_EQ((*recs)[0].payload, "one");
  EXPECT_EQ((*recs)[1].payload, "three");
}

TEST_F(LogFaultTest, FailedWriteIsADefiniteErrorAndTheStoreKeepsWorking) {
  faults_.SetFaultPathSuffix(".log");  // not the segment being prepared in the background
  auto store = Open();
  ASSERT_NE(store, nullptr);
  auto info = store->CreateStream(Spec("s"));
  ASSERT_TRUE(info.ok());
  faults_.FailWrite(1);
  auto failed = AppendPayloads(*store, info->id, {"lost"});
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), StatusCode::kIOError);
  ASSERT_TRUE(AppendPayloads(*store, info->id, {"kept"}).ok());
  store.reset();
  store = Open();
  ASSERT_NE(store, nullptr);
  auto recs = store->Read(info->id, 1, 10, 1 << 20);
  ASSERT_TRUE(recs.ok());
  ASSERT_EQ(recs->size(), 1u);
  EXPECT_EQ((*recs)[0].payload, "kept");
}

TEST_F(LogFaultTest, DiskFullFailsAppendsClearlyAndRecoversWhenSpaceReturns) {
  auto store = Open();
  ASSERT_NE(store, nullptr);
  auto info = store->CreateStream(Spec("s"));
  ASSERT_TRUE(info.ok());
  faults_.SetNoSpace(true);
  // Appends still fit in the pre-zeroed segment; the one that needs a new segment fails.
  std::vector<uint64_t> acked;
  Status failure;
  for (int i = 0; i < 100 && failure.ok(); ++i) {
    auto r = AppendPayloads(*store, info->id, {std::string(1000, 'a' + i % 26)});
    if (r.ok()) {
      acked.push_back(r->first_offset);
    } else {
      failure = r.status();
    }
  }
  ASSERT_FALSE(failure.ok()) << "16 KiB segments must fill up within 100 KB of appends";
  EXPECT_EQ(failure.code(), StatusCode::kResourceExhausted) << failure.ToString();
  EXPECT_TRUE(failure.no_space()) << failure.ToString();
  EXPECT_NE(failure.message().find("disk full"), std::string_view::npos) << failure.ToString();
  EXPECT_NE(failure.message().find("No space left on device"), std::string_view::npos)
      << failure.ToString();
  EXPECT_FALSE(acked.empty());
  auto again = AppendPayloads(*store, info->id, {std::string(1000, '!')});
  EXPECT_FALSE(again.ok());
  faults_.ClearFaults();
  auto ok = AppendPayloads(*store, info->id, {"space again"});
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->first_offset, acked.back() + 1);
  store.reset();
  mem_.DropUnsyncedData();
  store = Open();
  ASSERT_NE(store, nullptr);
  auto recs = store->Read(info->id, 1, 1000, 1 << 30);
  ASSERT_TRUE(recs.ok());
  ASSERT_EQ(recs->size(), acked.size() + 1);
  EXPECT_EQ(recs->back().payload, "space again");
}

// On a full disk, deleting what fills the log gives its segments back without a restart: the
// delete still fits in the active segment (frames carrying records leave its last bytes to the
// others), and a segment losing its last live record brings the checkpoint that lets it go,
// without waiting for a checkpoint interval's worth of new log (which a full disk never lets
// come).
TEST_F(LogFaultTest, DeletingStreamsOnAFullDiskGivesTheirSegmentsBack) {
  auto store = Open();
  ASSERT_NE(store, nullptr);
  auto big = store->CreateStream(Spec("big"));
  ASSERT_TRUE(big.ok());
  auto segments = [&] {
    size_t n = 0;
    auto names = mem_.ListDir("/data");
    if (names.ok()) {
      for (const auto& name : *names) n += name.size() > 4 && name.ends_with(".log") ? 1 : 0;
    }
    return n;
  };
  for (int i = 0; i < 30; ++i) {
    ASSERT_TRUE(AppendPayloads(*store, big->id, {std::string(1000, 'b')}).ok());
  }
  ASSERT_GE(segments(), 2u);
  // Full for segments (no room for a new one), with a little left for a checkpoint file.
  faults_.SetExemptPathSuffix(".ckpt.tmp");
  faults_.SetNoSpace(true);
  Status failure;
  for (int i = 0; i < 40 && failure.ok(); ++i) {
    auto r = AppendPayloads(*store, big->id, {std::string(1000, 'c')});
    if (!r.ok()) failure = r.status();
  }
  ASSERT_FALSE(failure.ok()) << "the disk is full";
  const size_t before = segments();
  ASSERT_TRUE(store->DeleteStream(big->id).ok()) << "a delete fits on a full disk";
  size_t after = before;
  for (int i = 0; i < 500 && after >= before; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    after = segments();
  }
  EXPECT_LT(after, before) << "the dead segments are deleted without a restart";
}

// Waits up to 10 s for `done`.
bool WaitFor(const std::function<bool()>& done) {
  for (int i = 0; i < 1000 && !done(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return done();
}

// Waits until nothing has touched the disk through `env` for 50 ms (the store's helper threads
// are done preparing), so what follows starts from a quiet disk.
void WaitForQuietDisk(env::FaultInjectionEnv& env) {
  uint64_t last = env.ops();
  for (int quiet = 0, i = 0; quiet < 5 && i < 1000; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    const uint64_t now = env.ops();
    quiet = now == last ? quiet + 1 : 0;
    last = now;
  }
}

uint64_t FileBytes(env::Env& env, const std::string& path) {
  auto size = env.FileSize(path);
  return size.ok() ? *size : 0;
}

// One append of a 1000-byte record of batch `ledger.Add(name, 1)`, its outcome in the ledger.
Result<AppendResult> LedgerAppend(Store& store, Ledger& ledger, const std::string& name,
                                  StreamId id, char fill) {
  const uint64_t batch = ledger.Add(name, 1);
  auto r = AppendPayloads(store, id, {MakePayload(batch, 0, 1, 990, fill)});
  ledger.Complete(batch, r);
  return r;
}

// The full disk of the hostile review: two streams written in turns, so every segment holds
// about as many bytes of one as of the other, on a disk with room for about six segments more
// than the store holds once its reserve is made; appends go on until the disk refuses one.
// Returns that refusal. The outcomes go to `ledger` ("live") and `dead_ledger` ("dead"); the
// disk's size to *disk when given.
Status FillDiskInTurns(Store& store, env::FaultInjectionEnv& faults, Ledger& ledger,
                       Ledger& dead_ledger, StreamId dead, StreamId live,
                       uint64_t* disk = nullptr) {
  // The first write asks for the reserve; the disk is measured once it is made.
  auto first = LedgerAppend(store, ledger, "live", live, 'l');
  EXPECT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_TRUE(WaitFor([&] { return faults.FileExists("/data/RESERVE"); }));
  WaitForQuietDisk(faults);
  const uint64_t size = faults.SpaceUsed() + 6 * (16 << 10);
  faults.SetSpaceLimit(size);
  if (disk != nullptr) *disk = size;
  for (int i = 0; i < 1000; ++i) {
    auto r = i % 2 ? LedgerAppend(store, ledger, "live", live, 'l')
                   : LedgerAppend(store, dead_ledger, "dead", dead, 'd');
    if (!r.ok()) return r.status();
  }
  return Status::OK();
}

// After a delete or trim on a full disk (`what`): appends to `live` resume within 5 s, and at
// least 25 more fit, so the dead records' space came back.
void ExpectAppendsResumeAndSpaceComesBack(Store& store, Ledger& ledger, StreamId live,
                                          const std::string& what) {
  bool resumed = false;
  for (int i = 0; i < 500 && !resumed; ++i) {
    resumed = LedgerAppend(store, ledger, "live", live, 'r').ok();
    if (!resumed) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(resumed) << "appends did not resume within 5 s of the " << what;
  // The dead stream held about half of six segments: most of that is room again.
  int more = 0;
  while (more < 200 && LedgerAppend(store, ledger, "live", live, 'm').ok()) ++more;
  EXPECT_GE(more, 25) << "the space of the " << what << " did not come back";
}

// On a full disk, deleting a stream whose records are interleaved with those of a live stream
// gives its space back within seconds, without a restart: the writer moves the live records
// of the emptiest segments into a new segment (made on the space of the reserve), writes a
// checkpoint that no longer needs them and deletes them; the reserve is made again. Appends
// refused meanwhile fail cleanly (kResourceExhausted, no trace), and everything acknowledged
// survives a power loss afterwards.
TEST_F(LogFaultTest, DeletingAnInterleavedStreamOnAFullDiskLetsAppendsResume) {
  auto store = Open();
  ASSERT_NE(store, nullptr);
  auto dead = store->CreateStream(Spec("dead"));
  auto live = store->CreateStream(Spec("live"));
  ASSERT_TRUE(dead.ok() && live.ok());
  Ledger ledger, dead_ledger;
  const Status full = FillDiskInTurns(*store, faults_, ledger, dead_ledger, dead->id, live->id);
  ASSERT_FALSE(full.ok()) << "the disk never filled up";
  EXPECT_EQ(full.code(), StatusCode::kResourceExhausted) << full.ToString();
  EXPECT_TRUE(full.no_space()) << full.ToString();
  EXPECT_NE(full.message().find("disk full"), std::string_view::npos) << full.ToString();
  auto again = LedgerAppend(*store, ledger, "live", live->id, 'l');
  EXPECT_TRUE(again.status().no_space()) << "nothing is dead yet: " << again.status().ToString();

  ASSERT_TRUE(store->DeleteStream(dead->id).ok()) << "a delete fits on a full disk";
  ExpectAppendsResumeAndSpaceComesBack(*store, ledger, live->id, "delete");
  if (HasFatalFailure()) return;
  const StoreCommitStats stats = store->CommitStats();
  EXPECT_GE(stats.space_reclaims, 1u);
  EXPECT_GE(stats.reserve_draws, 1u) << "a disk without a free byte needs the reserve";
  EXPECT_GT(stats.cleaner_bytes, 0u);
  EXPECT_GE(FileBytes(mem_, "/data/RESERVE"), 16u << 10) << "the reserve is made again";
  ledger.Verify(*store, {"live"});

  store.reset();
  mem_.DropUnsyncedData();
  store = Open();
  ASSERT_NE(store, nullptr);
  ledger.Verify(*store, {"live"});
  EXPECT_EQ(store->GetStream("global", "dead").status().code(), StatusCode::kNotFound);
}

// The same full disk given back by a trim instead of a delete: the dead stream keeps its name
// and its last record, and everything before it becomes room again.
TEST_F(LogFaultTest, TrimmingAnInterleavedStreamOnAFullDiskLetsAppendsResume) {
  auto store = Open();
  ASSERT_NE(store, nullptr);
  auto dead = store->CreateStream(Spec("dead"));
  auto live = store->CreateStream(Spec("live"));
  ASSERT_TRUE(dead.ok() && live.ok());
  Ledger ledger, dead_ledger;
  const Status full = FillDiskInTurns(*store, faults_, ledger, dead_ledger, dead->id, live->id);
  ASSERT_TRUE(full.no_space()) << full.ToString();
  auto info = store->GetStreamById(dead->id);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  ASSERT_GT(info->next_offset, 2u);
  const uint64_t last = info->next_offset - 1;
  auto trimmed = store->TruncatePrefix(dead->id, last - 1, false);
  ASSERT_TRUE(trimmed.ok()) << "a trim fits on a full disk: " << trimmed.status().ToString();
  ExpectAppendsResumeAndSpaceComesBack(*store, ledger, live->id, "trim");
  if (HasFatalFailure()) return;
  EXPECT_GE(store->CommitStats().space_reclaims, 1u);
  ledger.Verify(*store, {"live"});
  auto kept = store->Read(dead->id, last, 10, 1 << 20);
  ASSERT_TRUE(kept.ok()) << kept.status().ToString();
  ASSERT_FALSE(kept->empty()) << "the record after the trim point is gone";
  EXPECT_EQ(kept->front().offset, last);

  store.reset();
  mem_.DropUnsyncedData();
  store = Open();
  ASSERT_NE(store, nullptr);
  ledger.Verify(*store, {"live"});
  auto after = store->Read(dead->id, last, 10, 1 << 20);
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  ASSERT_FALSE(after->empty());
  EXPECT_EQ(after->front().offset, last);
}

// A power cut before each operation on the disk in turn, from the delete on: the delete itself,
// the copies of the live records, the segment made on the reserve's space, the checkpoint, the
// deletion of the emptied segments, the reserve made again, the appends that follow. After
// each, the reopened store holds every acknowledged record exactly once at its offset, a batch
// that was not acknowledged wholly or not at all, the deleted stream gone if its delete was
// acknowledged and whole otherwise; and it gives the space back after the restart as well.
TEST(LogCrashTest, PowerCutAtEveryStepOfAFullDiskReclamationLosesNothing) {
  int cuts = 0;
  bool finished = false;
  for (uint64_t cut = 1; cut < 500 && !finished; ++cut) {
    SCOPED_TRACE("power cut before disk operation " + std::to_string(cut));
    env::MemEnv mem;
    env::FaultInjectionEnv faults(&mem);
    const LogStoreOptions o = MemOptions(&faults);
    auto store = MustOpen(o);
    ASSERT_NE(store, nullptr);
    auto dead = store->CreateStream(Spec("dead"));
    auto live = store->CreateStream(Spec("live"));
    ASSERT_TRUE(dead.ok() && live.ok());
    Ledger ledger, dead_ledger;
    uint64_t disk = 0;
    ASSERT_TRUE(
        FillDiskInTurns(*store, faults, ledger, dead_ledger, dead->id, live->id, &disk).no_space());
    WaitForQuietDisk(faults);
    std::atomic<bool> crashed{false};
    const uint64_t seed = cut * 7919;
    faults.BeforeOpDo(cut, [&mem, &faults, &crashed, seed] {
      mem.Crash(
          [seed](const std::string& path, size_t pending) {
            return static_cast<size_t>((seed ^ std::hash<std::string>()(path)) % (pending + 1));
          },
          seed % 3 == 0 ? 0 : 1 + seed % 700);
      faults.PowerOff();
      crashed = true;
    });
    const Status deleted = store->DeleteStream(dead->id);
    for (int i = 0; i < 12 && !crashed; ++i)
      (void)LedgerAppend(*store, ledger, "live", live->id, 'r');
    store.reset();
    finished = !crashed;  // every operation of the sequence ran before the cut: all are covered
    cuts += crashed ? 1 : 0;
    faults.ClearFaults();
    faults.SetSpaceLimit(disk);

    store = MustOpen(o);
    ASSERT_NE(store, nullptr);
    ledger.Verify(*store, {"live"});
    auto after = store->GetStream("global", "dead");
    if (deleted.ok()) {
      EXPECT_EQ(after.status().code(), StatusCode::kNotFound) << "an acknowledged delete undone";
    }
    if (after.ok()) {
      dead_ledger.Verify(*store, {"dead"});
      ASSERT_TRUE(store->DeleteStream(after->id).ok());
    }
    bool resumed = false;
    for (int i = 0; i < 300 && !resumed; ++i) {
      resumed = LedgerAppend(*store, ledger, "live", live->id, 'z').ok();
      if (!resumed) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_TRUE(resumed) << "no space came back after the restart";
    ledger.Verify(*store, {"live"});
    if (::testing::Test::HasFailure()) return;
  }
  EXPECT_TRUE(finished) << "the sequence did not end within the cut points tried";
  EXPECT_GE(cuts, 30) << "the cut points must cover the reclamation";
}

// The same full disk, restarted before the delete: the reserve is a file, so it is there after
// the restart, and the delete gives space back as it does without one.
TEST_F(LogFaultTest, AFullDiskGivesSpaceBackAfterARestartToo) {
  auto store = Open();
  ASSERT_NE(store, nullptr);
  auto dead = store->CreateStream(Spec("dead"));
  auto live = store->CreateStream(Spec("live"));
  ASSERT_TRUE(dead.ok() && live.ok());
  Ledger ledger, dead_ledger;
  ASSERT_TRUE(FillDiskInTurns(*store, faults_, ledger, dead_ledger, dead->id, live->id).no_space());
  store.reset();  // its closing checkpoint may not fit: the next open replays more
  store = Open();
  ASSERT_NE(store, nullptr);
  ledger.Verify(*store, {"live"});
  dead_ledger.Verify(*store, {"dead"});
  EXPECT_TRUE(LedgerAppend(*store, ledger, "live", live->id, 'l').status().no_space());
  ASSERT_TRUE(store->DeleteStream(dead->id).ok());
  bool resumed = false;
  for (int i = 0; i < 500 && !resumed; ++i) {
    resumed = LedgerAppend(*store, ledger, "live", live->id, 'r').ok();
    if (!resumed) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(resumed) << "appends did not resume within 5 s of the delete";
  int more = 0;
  while (more < 200 && LedgerAppend(*store, ledger, "live", live->id, 'm').ok()) ++more;
  EXPECT_GE(more, 25) << "the space of the deleted stream did not come back";
  store.reset();
  mem_.DropUnsyncedData();
  store = Open();
  ASSERT_NE(store, nullptr);
  ledger.Verify(*store, {"live"});
}

// A periodic checkpoint's file is written in the background (a million streams make a 100+ MB
// file): while its fdatasync is stalled, appends are still committed and acknowledged. A power
// loss before it lands loses nothing acknowledged; once it lands, a restart starts from it.
TEST_F(LogFaultTest, AppendsGoOnConcurrentlyWithACheckpointBeingWritten) {
  auto store = Open();
  ASSERT_NE(store, nullptr);
  auto info = store->CreateStream(Spec("s"));
  ASSERT_TRUE(info.ok());
  std::vector<std::string> acked;
  auto append = [&](char c) {
    std::string payload = std::string(1000, c) + std::to_string(acked.size());
    auto r = AppendPayloads(*store, info->id, {payload});
    if (r.ok()) acked.push_back(payload);
    return r.ok();
  };
  auto checkpoints = [&] {
    std::vector<std::string> out;
    auto names = mem_.ListDir("/data");
    if (names.ok()) {
      for (const auto& name : *names) {
        if (name.rfind("checkpoint-", 0) == 0 && name.ends_with(".ckpt")) out.push_back(name);
      }
    }
    return out;
  };
  auto wait_for = [](const std::function<bool()>& done) {
    for (int i = 0; i < 1000 && !done(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return done();
  };
  // Appends while the checkpoint's sync is held, on another thread, so that a writer blocked
  // by the checkpoint shows as a timeout instead of a hung test.
  auto append_while_held = [&](char c, int n) {
    auto more = std::async(std::launch::async, [&] {
      int ok = 0;
      for (int i = 0; i < n; ++i) ok += append(c) ? 1 : 0;
      return ok;
    });
    const bool done = more.wait_for(std::chrono::seconds(20)) == std::future_status::ready;
    if (!done) faults_.ReleaseSyncs();
    ASSERT_TRUE(done) << "appends waited for the checkpoint's fdatasync";
    EXPECT_EQ(more.get(), n);
  };

  faults_.HoldSyncs(".ckpt.tmp");
  // Past the checkpoint interval (40 KiB): the writer starts a checkpoint.
  ASSERT_NO_FATAL_FAILURE(append_while_held('a', 60));
  ASSERT_TRUE(wait_for([&] { return faults_.HeldSyncs() == 1; })) << "no checkpoint started";
  ASSERT_NO_FATAL_FAILURE(append_while_held('b', 20));
  EXPECT_TRUE(checkpoints().empty()) << "the held checkpoint is not in place yet";

  // Power loss with the checkpoint still unsynced: it is gone, the log has everything.
  mem_.DropUnsyncedData();
  faults_.ReleaseSyncs();  // its sync now fails: the handle died with the power
  store.reset();
  store = Open();
  ASSERT_NE(store, nullptr);
  auto check = [&] {
    auto recs = store->Read(info->id, 1, 1000, 1 << 30);
    ASSERT_TRUE(recs.ok());
    ASSERT_EQ(recs->size(), acked.size());
    for (size_t i = 0; i < acked.size(); ++i) EXPECT_EQ((*recs)[i].payload, acked[i]) << i;
  };
  ASSERT_NO_FATAL_FAILURE(check());

  // Again, and this time the checkpoint lands: a restart begins from it.
  const std::vector<std::string> before = checkpoints();  // the clean open's own
  faults_.HoldSyncs(".ckpt.tmp");
  ASSERT_NO_FATAL_FAILURE(append_while_held('c', 60));
  ASSERT_TRUE(wait_for([&] { return faults_.HeldSyncs() == 1; })) << "no checkpoint started";
  ASSERT_NO_FATAL_FAILURE(append_while_held('d', 20));
  faults_.ReleaseSyncs();
  ASSERT_TRUE(wait_for([&] { return !checkpoints().empty() && checkpoints() != before; }));
  mem_.DropUnsyncedData();
  store.reset();
  store = Open();
  ASSERT_NE(store, nullptr);
  ASSERT_NO_FATAL_FAILURE(check());
  EXPECT_NE(checkpoints(), before);
}

// The other side of the test above: a checkpoint that falls far behind (its fdatasync stalled
// while appends keep coming) holds commits back once four checkpoint intervals are logged since
// the last checkpoint that landed, so the log a restart replays and the dead segments waiting
// for a checkpoint stay bounded. Releasing the stall lets every held append through.
TEST_F(LogFaultTest, ConcurrentAppendsWaitForACheckpointThatFallsFourIntervalsBehind) {
  auto store = Open();
  ASSERT_NE(store, nullptr);
  auto info = store->CreateStream(Spec("s"));
  ASSERT_TRUE(info.ok());
  faults_.HoldSyncs(".ckpt.tmp");
  // 1 KB appends; the interval is 40 KiB, so the bound is about 160 appends after the
  // checkpoint began (about the 40th): 400 cannot all commit while it is held.
  constexpr int kAppends = 400;
  std::atomic<int> acked{0};
  auto more = std::async(std::launch::async, [&] {
    for (int i = 0; i < kAppends; ++i) {
      if (!AppendPayloads(*store, info->id, {std::string(1000, 'x')}).ok()) return false;
      acked.fetch_add(1);
    }
    return true;
  });
  // Waits until the acknowledgements stop for a while (the writer is waiting) or all arrive.
  int seen = -1;
  for (int i = 0; i < 200 && seen != acked.load() && acked.load() < kAppends; ++i) {
    seen = acked.load();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const int held_back_at = acked.load();
  EXPECT_EQ(faults_.HeldSyncs(), 1) << "the checkpoint is stalled in its fdatasync";
  EXPECT_LT(held_back_at, kAppends) << "commits went on with the checkpoint five intervals behind";
  // Stopped near the bound: 4 intervals (164 KB) since the store opened, less what the
  // stream's creation and frame headers took.
  EXPECT_GE(held_back_at, 140);
  EXPECT_LE(held_back_at, 170);
  EXPECT_EQ(store->CommitStats().checkpoint_waits, 0u) << "counted once the wait is over";
  faults_.ReleaseSyncs();
  ASSERT_EQ(more.wait_for(std::chrono::seconds(20)), std::future_status::ready);
  EXPECT_TRUE(more.get());
  EXPECT_EQ(acked.load(), kAppends);
  // The wait is in the commit stats (/metrics): it lasted at least the 100 ms in which the
  // acknowledgements were seen to stop.
  const StoreCommitStats stats = store->CommitStats();
  EXPECT_GE(stats.checkpoint_waits, 1u);
  EXPECT_GE(stats.checkpoint_wait_micros, 50000u);
  auto recs = store->Read(info->id, 1, kAppends + 1, 1 << 30);
  ASSERT_TRUE(recs.ok());
  EXPECT_EQ(recs->size(), static_cast<size_t>(kAppends));
}

}  // namespace
}  // namespace runnel::testing
