// Keyed compaction of State Protocol streams (core/state_compaction.h), a shared suite run on
// every store that supports it (Store::SupportsDropRecords): folding the survivors gives the
// state the full history gives, readers resuming from before a compaction end in the same state
// or stand below the horizon, and offsets never change.
#include "core/state_compaction.h"

#include <gtest/gtest.h>

#include <future>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "core/state_compaction_suite.h"
#include "runnel/store.h"
#include "support/forwarding_store.h"

namespace runnel::testing {
namespace {

using json = nlohmann::json;
using State = std::map<std::pair<std::string, std::string>, std::string>;

// The State Protocol fold: inserts and updates set (type, key), deletes remove it, a reset
// clears everything; snapshot markers change nothing.
void Apply(State* state, const std::string& payload) {
  json m = json::parse(payload);
  const json& h = m["headers"];
  if (h.contains("control")) {
    if (h["control"] == "reset") state->clear();
    return;
  }
  auto id = std::make_pair(m["type"].get<std::string>(), m["key"].get<std::string>());
  if (h["operation"] == "delete") {
    state->erase(id);
  } else {
    (*state)[id] = m["value"].dump();
  }
}

std::vector<StoredRecord> ReadAll(Store& store, StreamId id, uint64_t from) {
  std::vector<StoredRecord> out;
  for (;;) {
    auto page = store.Read(id, from, 1000, 1u << 20);
    EXPECT_TRUE(page.ok()) << page.status().ToString();
    if (!page.ok() || page->empty()) return out;
    from = page->back().offset + 1;
    for (auto& r : *page) out.push_back(std::move(r));
  }
}

State Fold(const std::vector<StoredRecord>& records, State state = {}) {
  for (const auto& r : records) Apply(&state, r.payload);
  return state;
}

std::string Change(const std::string& type, const std::string& key, const std::string& op,
                   int value) {
  json m = {{"type", type}, {"key", key}, {"headers", {{"operation", op}}}};
  if (op != "delete") m["value"] = {{"n", value}, {"pad", std::string(40, 'x')}};
  return m.dump();
}

std::string Control(const std::string& control) {
  return json({{"headers", {{"control", control}}}}).dump();
}

// Appends `payloads` one batch at time `now_ms`.
void AppendAll(Store& store, StreamId id, const std::vector<std::string>& payloads,
               uint64_t now_ms) {
  AppendRequest req;
  req.stream = id;
  req.now_ms = now_ms;
  for (const auto& p : payloads) req.records.push_back(AppendRecord{std::nullopt, p});
  // Stores may answer on a thread of their own: wait for the answer.
  std::promise<Status> answered;
  auto answer = answered.get_future();
  store.Append(std::move(req),
               [&answered](Result<AppendResult> r) { answered.set_value(r.status()); });
  const Status status = answer.get();
  ASSERT_TRUE(status.ok()) << status.ToString();
}

StreamId CreateCompacted(Store& store, const std::string& name, uint64_t tombstone_ms) {
  compaction::Config config;
  config.tombstone_ms = tombstone_ms;
  StreamSpec spec;
  spec.ns = "test";
  spec.name = name;
  spec.content_type = "application/json";
  spec.attributes = *compaction::WithConfig("", config);
  auto info = store.CreateStream(spec);
  EXPECT_TRUE(info.ok()) << info.status().ToString();
  return info->id;
}

// A random history of `n` changes over `keys` keys of two types, about 10% deletes.
std::vector<std::string> History(size_t n, int keys, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::string> out;
  std::map<std::string, bool> live;
  for (size_t i = 0; i < n; ++i) {
    const std::string type = rng() % 2 ? "user" : "order";
    const std::string key = "k" + std::to_string(rng() % keys);
    const bool exists = live[type + key];
    std::string op = !exists ? "insert" : (rng() % 10 == 0 ? "delete" : "update");
    live[type + key] = op != "delete";
    out.push_back(Change(type, key, op, static_cast<int>(i)));
  }
  return out;
}

}  // namespace

// A binary whose store has no DropRecords does not instantiate the suite.
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(StateCompactionTest);

TEST_P(StateCompactionTest, ParseMessageAcceptsTheProtocolAndNamesWhatIsWrong) {
  EXPECT_TRUE(compaction::ParseMessage(Change("user", "1", "insert", 1)).ok());
  EXPECT_TRUE(compaction::ParseMessage(Change("user", "1", "delete", 1)).ok());
  EXPECT_TRUE(compaction::ParseMessage(Control("snapshot-start")).ok());
  EXPECT_EQ(compaction::ParseMessage(Control("reset"))->kind, compaction::Message::Kind::kReset);
  for (const char* bad : {"42", "{}", R"({"headers":{}})",
                          R"({"type":"u","key":"1","headers":{"operation":"upsert"},"value":1})",
                          R"({"type":"u","key":"1","headers":{"operation":"insert"}})",
                          R"({"type":"u","key":2,"headers":{"operation":"delete"}})",
                          R"({"headers":{"control":"rewind"}})", "not json"}) {
    auto m = compaction::ParseMessage(bad);
    EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_FALSE(m.status().message().empty());
  }
  // (type, key) identities do not collide across the type/key boundary.
  EXPECT_NE(compaction::ParseMessage(Change("ab", "c", "insert", 1))->identity,
            compaction::ParseMessage(Change("a", "bc", "insert", 1))->identity);
}

TEST_P(StateCompactionTest, SurvivorsFoldToTheFullHistorysStateAtTheirOriginalOffsets) {
  const StreamId id = CreateCompacted(*store_, "s", /*tombstone_ms=*/0);
  const auto history = History(5000, 200, 1);
  AppendAll(*store_, id, history, 1000);
  const auto full = ReadAll(*store_, id, 1);
  const State expected = Fold(full);

  auto report = compaction::Compact(*store_, id, 2000);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  const auto survivors = ReadAll(*store_, id, 1);
  EXPECT_EQ(Fold(survivors), expected);
  // One survivor per live key (expired tombstones dropped), each the very record it was.
  EXPECT_EQ(survivors.size(), expected.size());
  EXPECT_EQ(report->kept_records, survivors.size());
  EXPECT_EQ(report->dropped_records, full.size() - survivors.size());
  for (const auto& r : survivors) {
    ASSERT_GE(r.offset, 1u);
    EXPECT_EQ(r.payload, full[r.offset - 1].payload);
  }
  auto info = store_->GetStreamById(id);
  EXPECT_EQ(info->next_offset, history.size() + 1);  // offsets never move
  EXPECT_EQ(info->head_offset, survivors.front().offset);
  // The memory store counts the records it holds; PostgreSQL counts from the head to the tail,
  // gaps included (its streams row keeps no record count).
  if (store_->Name() == "memory") {
    EXPECT_EQ(info->event_count, survivors.size());
  }
  // A second compaction finds nothing more to drop.
  auto again = compaction::Compact(*store_, id, 2000);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->dropped_records, 0u);
  EXPECT_EQ(Fold(ReadAll(*store_, id, 1)), expected);
}

TEST_P(StateCompactionTest, ResumedReadersEndInTheSameStateOrStandBelowTheHorizon) {
  const StreamId id = CreateCompacted(*store_, "s", /*tombstone_ms=*/0);
  AppendAll(*store_, id, History(3000, 100, 2), 1000);
  const auto full = ReadAll(*store_, id, 1);
  const State expected = Fold(full);
  auto report = compaction::Compact(*store_, id, 2000);
  ASSERT_TRUE(report.ok());
  ASSERT_GT(report->horizon, 0u);  // tombstones were dropped
  // A reader that folded through p before the compaction and reads the survivors after p.
  size_t resumed = 0;
  for (uint64_t p = 1; p <= full.size(); p += 37) {
    State before(Fold(std::vector<StoredRecord>(full.begin(), full.begin() + p)));
    State after = Fold(ReadAll(*store_, id, p + 1), before);
    // Below the horizon a delete was dropped: such a reader may differ, and the server
    // refuses it (410); at or past it, the survivors bring it to the same state.
    if (p >= report->horizon) {
      EXPECT_EQ(after, expected) << "resumed from " << p;
      ++resumed;
    }
  }
  EXPECT_GT(resumed, 0u);
  // Readers at or past the horizon are exactly those that reach the same state: at least one
  // reader just below it would miss the delete at the horizon.
  const uint64_t h = report->horizon;
  State before(Fold(std::vector<StoredRecord>(full.begin(), full.begin() + (h - 1))));
  EXPECT_NE(Fold(ReadAll(*store_, id, h), before), expected);
}

TEST_P(StateCompactionTest, YoungTombstonesStayAndSetNoHorizon) {
  const StreamId id = CreateCompacted(*store_, "s", /*tombstone_ms=*/60000);
  AppendAll(*store_, id,
            {Change("u", "a", "insert", 1), Change("u", "a", "update", 2),
             Change("u", "b", "insert", 3), Change("u", "b", "delete", 0)},
            1000);
  auto report = compaction::Compact(*store_, id, 1000 + 59999);
  ASSERT_TRUE(report.ok());
  EXPECT_EQ(report->horizon, 0u);
  auto survivors = ReadAll(*store_, id, 1);
  ASSERT_EQ(survivors.size(), 2u);
  EXPECT_EQ(survivors[0].offset, 2u);
  EXPECT_EQ(survivors[1].offset, 4u);  // the tombstone, kept
  // Once it is old enough it goes, and the horizon moves to it.
  report = compaction::Compact(*store_, id, 1000 + 60000);
  ASSERT_TRUE(report.ok());
  EXPECT_EQ(report->horizon, 4u);
  survivors = ReadAll(*store_, id, 1);
  ASSERT_EQ(survivors.size(), 1u);
  EXPECT_EQ(survivors[0].offset, 2u);
  auto config = compaction::ConfigOf(store_->GetStreamById(id)->spec.attributes);
  ASSERT_TRUE(config.ok() && config->has_value());
  EXPECT_EQ((*config)->horizon, 4u);
  EXPECT_EQ((*config)->compacted_through, 4u);
}

TEST_P(StateCompactionTest, EverythingBeforeTheLastResetGoesAndLaterRecordsAreUntouched) {
  const StreamId id = CreateCompacted(*store_, "s", 0);
  AppendAll(*store_, id,
            {Change("u", "a", "insert", 1), Control("snapshot-start"),
             Change("u", "b", "insert", 2), Control("snapshot-end"), Control("reset"),
             Change("u", "c", "insert", 3), Change("u", "c", "update", 4)},
            1000);
  auto report = compaction::Compact(*store_, id, 2000);
  ASSERT_TRUE(report.ok());
  // Appended after the compaction point: not looked at, even though it supersedes offset 7.
  AppendAll(*store_, id, {Change("u", "c", "update", 5)}, 3000);
  const auto survivors = ReadAll(*store_, id, 1);
  std::vector<uint64_t> offsets;
  for (const auto& r : survivors) offsets.push_back(r.offset);
  EXPECT_EQ(offsets, (std::vector<uint64_t>{5, 7, 8}));
  EXPECT_EQ(report->horizon, 0u);  // a reset drops no tombstone a reader needs
}

TEST_P(StateCompactionTest, ReadsSkipTheGapsAndReadAtSeesThem) {
  const StreamId id = CreateCompacted(*store_, "s", 0);
  AppendAll(
      *store_, id,
      {Change("u", "a", "insert", 1), Change("u", "a", "update", 2), Change("u", "b", "insert", 3)},
      1000);
  ASSERT_TRUE(compaction::Compact(*store_, id, 2000).ok());
  EXPECT_FALSE(store_->ReadAt(id, 1)->has_value());
  EXPECT_TRUE(store_->ReadAt(id, 2)->has_value());
  auto page = store_->Read(id, 1, 1, 1u << 20);
  ASSERT_TRUE(page.ok());
  ASSERT_EQ(page->size(), 1u);
  EXPECT_EQ(page->front().offset, 2u);
  auto info = store_->GetStreamById(id);
  EXPECT_EQ(info->head_offset, 2u);
  EXPECT_EQ(info->tail_offset, 3u);
}

TEST_P(StateCompactionTest, AStreamWithoutCompactionIsRefused) {
  StreamSpec spec;
  spec.ns = "test";
  spec.name = "plain";
  auto info = store_->CreateStream(spec);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(compaction::Compact(*store_, info->id, 0).status().code(),
            StatusCode::kFailedPrecondition);
}

// A memory store whose `fail_at`-th write of a compaction (0: the horizon's attributes update,
// then each DropRecords call) fails as a crash there would leave it: not done.
class FailingStore final : public ForwardingStore {
 public:
  int fail_at = -1;
  int writes = 0;
  Status UpdateStream(StreamId id, const std::optional<StreamRetention>& retention,
                      std::string_view attributes,
                      std::optional<std::string_view> expected_attributes,
                      std::optional<uint64_t> expected_next_offset) override {
    if (writes++ == fail_at) return Status::IOError("injected failure");
    return ForwardingStore::UpdateStream(id, retention, attributes, expected_attributes,
                                         expected_next_offset);
  }
  Result<uint64_t> DropRecords(StreamId id, const std::vector<uint64_t>& offsets) override {
    if (writes++ == fail_at) return Status::IOError("injected failure");
    return ForwardingStore::DropRecords(id, offsets);
  }
};

TEST(StateCompactionFaultTest, AFailureAtAnyStepLosesNoSurvivorAndTheNextCompactionFinishes) {
  // Enough records for several DropRecords batches (kDropBatch offsets each).
  const auto history = History(5 * compaction::kDropBatch, 50, 3);
  for (int fail_at = 0;; ++fail_at) {
    FailingStore store;
    const StreamId id = CreateCompacted(store, "s", 0);
    AppendAll(store, id, history, 1000);
    const State expected = Fold(ReadAll(store, id, 1));
    store.fail_at = fail_at;
    store.writes = 0;
    auto failed = compaction::Compact(store, id, 2000);
    if (failed.ok()) {
      // Past the last write: every step has had its failure.
      EXPECT_GT(fail_at, 2);
      break;
    }
    EXPECT_EQ(failed.status().code(), StatusCode::kIOError);
    // Whatever was dropped before the failure, the survivors still fold to the same state...
    EXPECT_EQ(Fold(ReadAll(store, id, 1)), expected) << "failed at write " << fail_at;
    // ...and the next compaction finishes the job.
    store.fail_at = -1;
    auto again = compaction::Compact(store, id, 2000);
    ASSERT_TRUE(again.ok()) << again.status().ToString();
    const auto survivors = ReadAll(store, id, 1);
    EXPECT_EQ(Fold(survivors), expected);
    EXPECT_EQ(survivors.size(), expected.size()) << "failed at write " << fail_at;
    ASSERT_LT(fail_at, 100);
  }
}

}  // namespace runnel::testing
