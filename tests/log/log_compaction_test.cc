// Keyed compaction on the log store: DropRecords against the memory store as the model (through
// restarts with and without a checkpoint), the cleaner giving back the disk of dropped records,
// and a power cut at every disk operation of a compaction and the cleaner's pass after it.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "core/state_compaction.h"
#include "env/fault_env.h"
#include "env/mem_env.h"
#include "log/log_test_util.h"
#include "runnel/log_store.h"
#include "store/log/log_store.h"

namespace runnel::testing {
namespace {

using json = nlohmann::json;
using State = std::map<std::pair<std::string, std::string>, std::string>;

std::string Change(int key, const std::string& op, int value, size_t pad) {
  json m = {{"type", "row"}, {"key", "k" + std::to_string(key)}, {"headers", {{"operation", op}}}};
  if (op != "delete") m["value"] = {{"n", value}, {"pad", std::string(pad, 'x')}};
  return m.dump();
}

// The State Protocol fold: the latest value per (type, key); deletes remove it.
State Fold(const std::vector<StoredRecord>& records) {
  State state;
  for (const auto& r : records) {
    json m = json::parse(r.payload);
    auto id = std::make_pair(m["type"].get<std::string>(), m["key"].get<std::string>());
    if (m["headers"]["operation"] == "delete") {
      state.erase(id);
    } else {
      state[id] = m["value"].dump();
    }
  }
  return state;
}

std::vector<StoredRecord> ReadAll(Store& store, StreamId id) {
  std::vector<StoredRecord> out;
  uint64_t from = 0;
  for (;;) {
    auto page = store.Read(id, from, 500, 1u << 20);
    EXPECT_TRUE(page.ok()) << page.status().ToString();
    if (!page.ok() || page->empty()) return out;
    from = page->back().offset + 1;
    for (auto& r : *page) out.push_back(std::move(r));
  }
}

StreamId CreateCompacted(Store& store, const std::string& name) {
  compaction::Config config;
  config.tombstone_ms = 0;
  StreamSpec spec = Spec(name);
  spec.content_type = "application/json";
  spec.attributes = *compaction::WithConfig("", config);
  auto info = store.CreateStream(spec);
  EXPECT_TRUE(info.ok()) << info.status().ToString();
  return info.ok() ? info->id : 0;
}

// `n` changes over `keys` keys, about one in ten a delete, each appended alone.
std::vector<std::string> History(int n, int keys, size_t pad, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::string> out;
  std::map<int, bool> live;
  for (int i = 0; i < n; ++i) {
    const int key = static_cast<int>(rng() % static_cast<uint32_t>(keys));
    const std::string op = !live[key] ? "insert" : (rng() % 10 == 0 ? "delete" : "update");
    live[key] = op != "delete";
    out.push_back(Change(key, op, i, pad));
  }
  return out;
}

uint64_t SegmentBytes(env::MemEnv& mem) {
  uint64_t total = 0;
  auto names = mem.ListDir("/data");
  EXPECT_TRUE(names.ok());
  if (!names.ok()) return 0;
  for (const std::string& name : *names) {
    if (name.size() == 24 && name.ends_with(".log")) {
      auto size = mem.FileSize("/data/" + name);
      total += size.ok() ? *size : 0;
    }
  }
  return total;
}

void ExpectSameStream(Store& log, StreamId log_id, Store& model, StreamId model_id) {
  auto a = log.GetStreamById(log_id);
  auto b = model.GetStreamById(model_id);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->head_offset, b->head_offset);
  EXPECT_EQ(a->tail_offset, b->tail_offset);
  EXPECT_EQ(a->next_offset, b->next_offset);
  EXPECT_EQ(a->event_count, b->event_count);
  EXPECT_EQ(a->retained_bytes, b->retained_bytes);
  auto x = ReadAll(log, log_id);
  auto y = ReadAll(model, model_id);
  ASSERT_EQ(x.size(), y.size());
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(x[i].offset, y[i].offset);
    EXPECT_EQ(x[i].payload, y[i].payload);
    EXPECT_EQ(x[i].key, y[i].key);
  }
}

// Random appends (some with keys), drops (of present, dropped, trimmed and future offsets),
// truncations and retention (by bytes, by count) on the log store and the memory store: every
// answer, every stream's head, tail, count and bytes, and every read (whole, and paged by count
// and bytes from random offsets) agree, also after the cleaner's passes (which copy partly
// dropped frames compacted), after restarts that replay the drop frames and relocations from the
// log (a power cut: no closing checkpoint) and restarts from a checkpoint that holds dropped
// records.
TEST(LogCompactionTest, DropRecordsMatchesTheMemoryStoreAcrossRestartsAndCheckpoints) {
  env::MemEnv mem;
  env::FaultInjectionEnv faults(&mem);
  LogStoreOptions o;
  o.dir = "/data";
  o.env = &faults;
  o.segment_size = 32 << 10;
  o.checkpoint_interval_bytes = 64 << 10;
  auto opened = OpenLogStore(o);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  std::unique_ptr<Store> log = std::move(*opened);
  std::unique_ptr<Store> model = NewMemoryStore();
  std::vector<StreamId> log_ids, model_ids;
  for (int s = 0; s < 3; ++s) {
    StreamSpec spec = Spec("s" + std::to_string(s));
    if (s == 1) spec.retention.max_bytes = 3000;
    if (s == 2) spec.retention.max_events = 25;
    auto a = log->CreateStream(spec);
    auto b = model->CreateStream(spec);
    ASSERT_TRUE(a.ok() && b.ok());
    log_ids.push_back(a->id);
    model_ids.push_back(b->id);
  }
  std::mt19937_64 rng(7);
  for (int step = 0; step < 1500; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    const size_t s = rng() % 3;
    const int what = static_cast<int>(rng() % 100);
    if (what < 55) {
      AppendRequest req;
      req.now_ms = 1000 + static_cast<uint64_t>(step);
      const int n = 1 + static_cast<int>(rng() % 3);
      for (int i = 0; i < n; ++i) {
        std::optional<std::string> key;
        if (rng() % 8 == 0) key = "key" + std::to_string(rng() % 5);
        req.records.push_back(AppendRecord{key, std::string(1 + rng() % 120, 'a' + step % 26)});
      }
      AppendRequest copy = req;
      req.stream = log_ids[s];
      copy.stream = model_ids[s];
      auto a = AppendSync(*log, std::move(req));
      auto b = AppendSync(*model, std::move(copy));
      ASSERT_TRUE(a.ok() && b.ok());
      EXPECT_EQ(a->first_offset, b->first_offset);
    } else if (what < 85) {
      auto info = model->GetStreamById(model_ids[s]);
      ASSERT_TRUE(info.ok());
      std::vector<uint64_t> offsets;
      const uint64_t span = info->next_offset + 3;
      for (uint64_t o = 1; o < span; ++o) {
        if (rng() % 3 == 0) offsets.push_back(o);
      }
      auto a = log->DropRecords(log_ids[s], offsets);
      auto b = model->DropRecords(model_ids[s], offsets);
      ASSERT_TRUE(a.ok()) << a.status().ToString();
      ASSERT_TRUE(b.ok());
      EXPECT_EQ(*a, *b);
    } else if (what < 90) {
      auto info = model->GetStreamById(model_ids[s]);
      ASSERT_TRUE(info.ok());
      const uint64_t through = info->head_offset + rng() % 6;
      auto a = log->TruncatePrefix(log_ids[s], through, false);
      auto b = model->TruncatePrefix(model_ids[s], through, false);
      ASSERT_TRUE(a.ok() && b.ok());
      EXPECT_EQ(*a, *b);
    } else if (what < 94) {
      auto info = model->GetStreamById(model_ids[s]);
      ASSERT_TRUE(info.ok());
      const uint64_t from = rng() % (info->next_offset + 2);
      const size_t limit = 1 + rng() % 7;
      const size_t max_bytes = 1 + rng() % 400;
      auto a = log->Read(log_ids[s], from, limit, max_bytes);
      auto b = model->Read(model_ids[s], from, limit, max_bytes);
      ASSERT_TRUE(a.ok() && b.ok());
      ASSERT_EQ(a->size(), b->size()) << "from " << from << " limit " << limit;
      for (size_t i = 0; i < a->size(); ++i) EXPECT_EQ((*a)[i].offset, (*b)[i].offset);
      auto at = log->ReadAt(log_ids[s], from);
      auto bt = model->ReadAt(model_ids[s], from);
      ASSERT_TRUE(at.ok() && bt.ok());
      EXPECT_EQ(at->has_value(), bt->has_value());
    } else if (what < 95) {
      ASSERT_TRUE(dynamic_cast<log::LogStore&>(*log).CheckpointNow().ok());
    } else if (what < 97) {
      // The cleaner: survivors of partly dropped frames are copied compacted.
      ASSERT_TRUE(dynamic_cast<log::LogStore&>(*log).CleanNow().ok());
    } else {
      // A restart: a clean close (a closing checkpoint), or a power cut after everything
      // acknowledged was synced (the next open replays the drop frames since the last one).
      const bool cut = rng() % 2 == 0;
      if (cut) {
        ASSERT_TRUE(log->Flush().ok());
        faults.PowerOff();
      }
      log.reset();
      faults.ClearFaults();
      auto again = OpenLogStore(o);
      ASSERT_TRUE(again.ok()) << again.status().ToString();
      log = std::move(*again);
    }
    for (size_t t = 0; t < 3; ++t) {
      ASSERT_NO_FATAL_FAILURE(ExpectSameStream(*log, log_ids[t], *model, model_ids[t]));
    }
    if (::testing::Test::HasFailure()) return;
  }
}

// One call is one frame: more offsets than a frame names, or offsets out of order, are refused
// and change nothing; an empty call removes nothing; an unknown stream is kNotFound.
TEST(LogCompactionTest, DropRecordsRefusesWhatOneFrameCannotHold) {
  env::MemEnv mem;
  LogStoreOptions o;
  o.dir = "/data";
  o.env = &mem;
  auto opened = OpenLogStore(o);
  ASSERT_TRUE(opened.ok());
  Store& store = **opened;
  auto info = store.CreateStream(Spec("s"));
  ASSERT_TRUE(info.ok());
  ASSERT_TRUE(AppendPayloads(store, info->id, {"a", "b", "c"}).ok());
  std::vector<uint64_t> many(log::kMaxDroppedPerFrame + 1);
  for (size_t i = 0; i < many.size(); ++i) many[i] = i + 1;
  EXPECT_EQ(store.DropRecords(info->id, many).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store.DropRecords(info->id, {3, 1}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store.DropRecords(info->id + 1, {1}).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(*store.DropRecords(info->id, {}), 0u);
  EXPECT_EQ(store.GetStreamById(info->id)->event_count, 3u);
  many.resize(log::kMaxDroppedPerFrame);
  EXPECT_EQ(*store.DropRecords(info->id, many), 3u);
  auto after = store.GetStreamById(info->id);
  EXPECT_EQ(after->event_count, 0u);
  EXPECT_EQ(after->head_offset, 0u);
  EXPECT_EQ(after->next_offset, 4u);
}

// A stream whose records are mostly superseded: once compaction drops them, the cleaner
// relocates the survivors and the checkpoint deletes the old segments, so the segments on disk
// shrink to about the survivors' bytes; the survivors read back whole after a restart. Appended
// one record per frame, and 25 per frame (most frames then keep a survivor or two: the cleaner
// copies them compacted).
class LogCompactionCleanerTest : public ::testing::TestWithParam<int> {};

TEST_P(LogCompactionCleanerTest, TheCleanerGivesBackTheDiskOfDroppedRecords) {
  const size_t per_append = static_cast<size_t>(GetParam());
  env::MemEnv mem;
  LogStoreOptions o;
  o.dir = "/data";
  o.env = &mem;
  o.segment_size = 64 << 10;
  o.checkpoint_interval_bytes = 128 << 10;
  o.durability.mode = LogDurability::kNone;  // the space, not the sync, is under test
  auto opened = OpenLogStore(o);
  ASSERT_TRUE(opened.ok());
  std::unique_ptr<Store> store = std::move(*opened);
  const StreamId id = CreateCompacted(*store, "state");
  const std::vector<std::string> history = History(6000, 100, 200, 11);
  for (size_t i = 0; i < history.size(); i += per_append) {
    const auto end =
        history.begin() + static_cast<std::ptrdiff_t>(std::min(history.size(), i + per_append));
    ASSERT_TRUE(AppendPayloads(
                    *store, id,
                    std::vector<std::string>(history.begin() + static_cast<std::ptrdiff_t>(i), end))
                    .ok());
  }
  const State full = Fold(ReadAll(*store, id));
  ASSERT_TRUE(dynamic_cast<log::LogStore&>(*store).CheckpointNow().ok());
  const uint64_t before = SegmentBytes(mem);

  auto report = compaction::Compact(*store, id, /*now_ms=*/1u << 30);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_GT(report->dropped_records, 5500u);
  // The cleaner's pass (it runs before each periodic checkpoint), and the checkpoint after it.
  ASSERT_TRUE(dynamic_cast<log::LogStore&>(*store).CleanNow().ok());
  const uint64_t after = SegmentBytes(mem);

  const std::vector<StoredRecord> survivors = ReadAll(*store, id);
  uint64_t live = 0;
  for (const auto& r : survivors) live += r.payload.size() + 64;  // and its frame's header
  std::cout << per_append << " per frame: segments " << before << " bytes before, " << after
            << " after; survivors " << survivors.size() << " of " << history.size() << ", about "
            << live << " bytes\n";
  EXPECT_EQ(Fold(survivors), full);
  EXPECT_GT(store->CommitStats().cleaner_bytes, 0u);
  // The survivors' segment, the active segment and the one prepared ahead, and one to spare.
  EXPECT_LE(after, 2 * live + 4 * o.segment_size) << "before: " << before;
  EXPECT_LT(after * 4, before);

  store.reset();
  opened = OpenLogStore(o);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  store = std::move(*opened);
  const std::vector<StoredRecord> again = ReadAll(*store, id);
  ASSERT_EQ(again.size(), survivors.size());
  for (size_t i = 0; i < again.size(); ++i) EXPECT_EQ(again[i].offset, survivors[i].offset);
  EXPECT_EQ(Fold(again), full);
}

INSTANTIATE_TEST_SUITE_P(RecordsPerFrame, LogCompactionCleanerTest, ::testing::Values(1, 25));

// Frames of 100 records that each keep exactly one survivor (a key written once) among updates
// of a few hot keys: every frame stays live, yet the cleaner picks their segments by what its
// compacted copies take, and the disk comes back.
TEST(LogCompactionTest, TheCleanerEmptiesSegmentsWhoseFramesEachKeepOneSurvivor) {
  env::MemEnv mem;
  LogStoreOptions o;
  o.dir = "/data";
  o.env = &mem;
  o.segment_size = 64 << 10;
  o.checkpoint_interval_bytes = 128 << 10;
  o.durability.mode = LogDurability::kNone;
  auto opened = OpenLogStore(o);
  ASSERT_TRUE(opened.ok());
  std::unique_ptr<Store> store = std::move(*opened);
  const StreamId id = CreateCompacted(*store, "state");
  std::vector<std::string> all;
  for (int frame = 0; frame < 80; ++frame) {
    std::vector<std::string> batch{Change(1000 + frame, "insert", frame, 200)};
    for (int i = 1; i < 100; ++i) {
      batch.push_back(Change(i % 10, frame == 0 && i < 10 ? "insert" : "update", i, 200));
    }
    all.insert(all.end(), batch.begin(), batch.end());
    ASSERT_TRUE(AppendPayloads(*store, id, batch).ok());
  }
  const State full = Fold(ReadAll(*store, id));
  auto report = compaction::Compact(*store, id, /*now_ms=*/1u << 30);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->kept_records, 90u);
  ASSERT_TRUE(dynamic_cast<log::LogStore&>(*store).CheckpointNow().ok());
  const uint64_t before = SegmentBytes(mem);
  for (int pass = 0; pass < 4; ++pass) {
    ASSERT_TRUE(dynamic_cast<log::LogStore&>(*store).CleanNow().ok());
  }
  const uint64_t after = SegmentBytes(mem);
  std::cout << "one survivor a frame: segments " << before << " bytes after compacting, " << after
            << " after the cleaner\n";
  EXPECT_GE(before, 20u * o.segment_size);
  EXPECT_LE(after, 4u * o.segment_size);
  EXPECT_EQ(Fold(ReadAll(*store, id)), full);
  store.reset();
  opened = OpenLogStore(o);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  EXPECT_EQ(Fold(ReadAll(**opened, id)), full);
}

// A power cut before each disk operation of a compaction (its horizon, the drop frames) and of
// the cleaner's pass and checkpoint after it: the reopened stream folds from the beginning to
// the state of the full history, and every record the compaction keeps (the latest of each key
// that is not a delete) is there at its offset. LOG_COMPACTION_CUTS raises the number of cut points
// tried.
TEST(LogCompactionCrashTest, PowerCutAtEveryStepOfACompactionAndItsCleaningLosesNoSurvivor) {
  const char* env_cuts = std::getenv("LOG_COMPACTION_CUTS");
  const uint64_t max_cuts = env_cuts != nullptr ? std::strtoull(env_cuts, nullptr, 10) : 400;
  const std::vector<std::string> history = History(600, 30, 100, 5);
  int cuts = 0;
  bool finished = false;
  for (uint64_t cut = 1; cut < max_cuts && !finished; ++cut) {
    SCOPED_TRACE("power cut before disk operation " + std::to_string(cut));
    env::MemEnv mem;
    env::FaultInjectionEnv faults(&mem);
    LogStoreOptions o;
    o.dir = "/data";
    o.env = &faults;
    o.segment_size = 16 << 10;
    o.checkpoint_interval_bytes = 24 << 10;
    auto opened = OpenLogStore(o);
    ASSERT_TRUE(opened.ok());
    std::unique_ptr<Store> store = std::move(*opened);
    const StreamId id = CreateCompacted(*store, "state");
    // Three records a frame: frames that keep a survivor are copied compacted.
    for (size_t i = 0; i < history.size(); i += 3) {
      ASSERT_TRUE(AppendPayloads(*store, id, {history[i], history[i + 1], history[i + 2]}).ok());
    }
    const std::vector<StoredRecord> all = ReadAll(*store, id);
    const State full = Fold(all);
    // The records a compaction keeps: the latest of each key, unless it is a delete (an
    // expired tombstone, with a tombstone time of 0).
    std::map<std::string, uint64_t> latest;
    for (const auto& r : all) latest[json::parse(r.payload)["key"].get<std::string>()] = r.offset;
    std::erase_if(latest, [&all](const auto& entry) {
      return json::parse(all[entry.second - 1].payload)["headers"]["operation"] == "delete";
    });
    // Another stream's records fill the active segment: the survivors are all in old ones.
    const StreamId other = store->CreateStream(Spec("other"))->id;
    for (int i = 0; i < 48; ++i) {
      ASSERT_TRUE(AppendPayloads(*store, other, {std::string(400, 'o')}).ok());
    }

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
    (void)compaction::Compact(*store, id, /*now_ms=*/1u << 30);
    // The cleaner's pass (which periodic checkpoints bring on too) and its checkpoint.
    if (!crashed) (void)dynamic_cast<log::LogStore&>(*store).CleanNow();
    for (int i = 0; i < 10 && !crashed; ++i) (void)AppendPayloads(*store, other, {"after"});
    const uint64_t cleaned = store->CommitStats().cleaner_bytes;
    store.reset();
    finished = !crashed;
    if (finished) {
      EXPECT_GT(cleaned, 0u) << "the cleaner never ran: the cuts did not reach it";
    }
    cuts += crashed ? 1 : 0;
    faults.ClearFaults();

    opened = OpenLogStore(o);
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    store = std::move(*opened);
    const std::vector<StoredRecord> got = ReadAll(*store, id);
    EXPECT_EQ(Fold(got), full);
    std::map<uint64_t, const StoredRecord*> by_offset;
    for (const auto& r : got) by_offset[r.offset] = &r;
    for (const auto& [key, offset] : latest) {
      auto it = by_offset.find(offset);
      ASSERT_NE(it, by_offset.end())
          << "the latest record of " << key << " (" << offset << ") is gone";
      EXPECT_EQ(it->second->payload, all[offset - 1].payload);
    }
    if (::testing::Test::HasFailure()) return;
  }
  std::cout << cuts << " power cuts, the sequence " << (finished ? "covered" : "not finished")
            << "\n";
  EXPECT_TRUE(finished || max_cuts < 400) << "the sequence did not end within the cut points";
  EXPECT_GE(cuts, 20) << "the cut points must cover the compaction and the cleaner";
}

}  // namespace
}  // namespace runnel::testing
