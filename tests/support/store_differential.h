// The differential driver: the same random operations (creates with retention and first
// offsets; appends with keys, offset and attribute conditions, producers, attribute changes and
// closes; reads; prefix truncation; cursor commits and deletes; retention and attribute changes,
// plain or compare-and-set; deletes; reopening) against a reference store and the stores under
// test, requiring identical answers after every step. Stream ids are each store's own and are not
// compared; names are. A subject may inject faults between steps and have some of its
// refusals (the injected ones) not shared by the reference: such an operation is not applied
// to the reference, so a refused write must leave no trace in the subject either.
#ifndef RUNNEL_TESTS_SUPPORT_STORE_DIFFERENTIAL_H_
#define RUNNEL_TESTS_SUPPORT_STORE_DIFFERENTIAL_H_

#include <gtest/gtest.h>

#include <functional>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "runnel/clock.h"
#include "runnel/store.h"
#include "store/store_contract.h"  // AppendSync
#include "support/store_show.h"

namespace runnel::testing {

// The stores under test as the driver sees them: one store, or several nodes over one storage.
struct DifferentialSubject {
  // The store that takes one step's operation; `pick` is a random number to choose a node by.
  std::function<Store&(uint64_t pick)> store;
  // Every store that must agree with the reference after each step.
  std::function<std::vector<Store*>()> all;
  // Closes one store (chosen by `pick`) and opens the same storage again.
  std::function<void(uint64_t pick)> reopen;
  // Optional: runs before each step with the driver's random numbers (to inject faults, or to
  // lose power and reopen).
  std::function<void(const std::function<uint64_t(uint64_t)>& pick)> before_step;
  // Optional: true for a subject's refusal that the reference does not share (an injected I/O
  // fault). The operation is then skipped on the reference and counted.
  std::function<bool(const Status&)> refused;
};

struct DifferentialCounts {
  int steps = 0;
  int refused = 0;  // operations the subject refused with a status `refused` accepted
};

struct DifferentialOptions {
  uint64_t seed = 1;
  int steps = 300;
  // Payloads are 0..max_payload-1 bytes.
  uint64_t max_payload = 300;
  std::vector<std::string> names = {"a", "b", "c"};
  // Advanced by the driver; appends and cursor commits carry its time.
  ManualClock* clock = nullptr;
};

namespace differential_internal {

inline StreamId IdOf(const Result<StreamInfo>& info) {
  return info.ok() ? info->id : 999'999;
}

// One random operation on `name`, through `subject` (the reference does the same).
// The subject answers first; an answer `refused` accepts is counted and not repeated on the
// reference.
inline void Step(Store& reference, Store& subject, const std::string& name, int step,
                 const std::function<uint64_t(uint64_t)>& pick, uint64_t now, uint64_t max_payload,
                 const std::function<bool(const Status&)>& refused, DifferentialCounts* counts) {
  auto skip = [&](const Status& s) {
    if (s.ok() || !refused || !refused(s)) return false;
    ++counts->refused;
    return true;
  };
  auto ref_info = reference.GetStream("global", name);
  auto sub_info = subject.GetStream("global", name);
  ASSERT_EQ(Show(ref_info, false), Show(sub_info, false));
  const StreamId rid = IdOf(ref_info);
  const StreamId sid = IdOf(sub_info);
  const uint64_t bound = ref_info.ok() ? ref_info->next_offset + 2 : 5;
  const uint64_t dice = pick(100);
  if (dice < 8) {
    StreamSpec spec;
    spec.ns = "global";
    spec.name = name;
    spec.content_type = "text/plain";
    spec.attributes = "attr" + std::to_string(step);
    if (pick(3) == 0) spec.retention.max_events = 1 + pick(6);
    if (pick(4) == 0) spec.retention.max_bytes = 1 + pick(40);
    if (pick(4) == 0) spec.retention.max_age_ms = pick(200);
    if (pick(5) == 0) spec.first_offset = 1 + pick(1000);
    auto got = subject.CreateStream(spec);
    if (skip(got.status())) return;
    ASSERT_EQ(Show(reference.CreateStream(spec), false), Show(got, false));
  } else if (dice < 55) {
    AppendRequest req;
    req.now_ms = now;
    const uint64_t n = pick(5);
    for (uint64_t i = 0; i < n; ++i) {
      AppendRecord r;
      if (pick(3) == 0) r.key = "k" + std::to_string(pick(10));
      r.payload = std::string(pick(max_payload), static_cast<char>('a' + pick(26)));
      req.records.push_back(std::move(r));
    }
    if (pick(4) == 0 && ref_info.ok()) req.expected_offset = ref_info->next_offset + pick(2);
    if (pick(5) == 0) {
      req.producer = ProducerState{"p" + std::to_string(pick(2)), pick(3), pick(100), 0};
    }
    if (pick(6) == 0) req.attributes = "set" + std::to_string(step);
    req.close = pick(90) == 0;
    if (pick(8) == 0 && ref_info.ok()) {
      // Conditional on the catalog row's attributes: the current ones, or stale ones.
      req.expected_attributes = pick(2) == 0 ? ref_info->spec.attributes : "stale";
    }
    AppendRequest copy = req;
    req.stream = rid;
    copy.stream = sid;
    auto got = AppendSync(subject, std::move(copy));
    if (skip(got.status())) return;
    ASSERT_EQ(Show(AppendSync(reference, std::move(req))), Show(got));
    ASSERT_EQ(ShowProducer(reference, rid, "p0"), ShowProducer(subject, sid, "p0"));
    ASSERT_EQ(ShowProducer(reference, rid, "p1"), ShowProducer(subject, sid, "p1"));
  } else if (dice < 68) {
    const uint64_t from = pick(bound);
    const size_t limit = pick(12);
    const size_t max_bytes = pick(3) == 0 ? pick(2 * max_payload + 200) : (1u << 20);
    ASSERT_EQ(Show(reference.Read(rid, from, limit, max_bytes)),
              Show(subject.Read(sid, from, limit, max_bytes)));
    auto a = reference.ReadAt(rid, from);
    auto b = subject.ReadAt(sid, from);
    ASSERT_EQ(a.ok(), b.ok());
    if (a.ok()) {
      ASSERT_EQ(a->has_value(), b->has_value());
      if (a->has_value()) {
        ASSERT_EQ((*a)->payload, (*b)->payload);
      }
    }
  } else if (dice < 74) {
    const uint64_t through = pick(bound);
    const bool respect = pick(2) == 0;
    auto got = subject.TruncatePrefix(sid, through, respect);
    if (skip(got.status())) return;
    ASSERT_EQ(Show(reference.TruncatePrefix(rid, through, respect)), Show(got));
  } else if (dice < 82) {
    const std::string consumer = "g" + std::to_string(pick(3));
    const uint64_t offset = pick(bound - 1);
    auto got = subject.CommitCursor(sid, consumer, offset, now);
    if (skip(got.status())) return;
    ASSERT_EQ(Show(reference.CommitCursor(rid, consumer, offset, now)), Show(got));
  } else if (dice < 84) {
    const std::string consumer = "g" + std::to_string(pick(3));
    auto got = subject.DeleteCursor(sid, consumer);
    if (skip(got.status())) return;
    auto want = reference.DeleteCursor(rid, consumer);
    ASSERT_EQ(want.status().code(), got.status().code());
    if (want.ok()) {
      ASSERT_EQ(*want, *got) << consumer;
    }
  } else if (dice < 90) {
    StreamRetention r;
    if (pick(2) == 0) r.max_events = 1 + pick(8);
    if (pick(3) == 0) r.max_bytes = 1 + pick(100);
    const std::string attributes = "upd" + std::to_string(step);
    std::optional<std::string> expected;
    if (pick(3) == 0 && ref_info.ok()) {
      expected = pick(2) == 0 ? ref_info->spec.attributes : "stale";
    }
    // The tail condition: the current next offset, or one records would have to reach.
    std::optional<uint64_t> next;
    if (pick(3) == 0 && ref_info.ok()) {
      next = ref_info->next_offset + (pick(2) == 0 ? 0 : 1 + pick(3));
    }
    // An update of the attributes alone keeps the stored retention.
    const std::optional<StreamRetention> caps =
        pick(4) == 0 ? std::nullopt : std::optional<StreamRetention>(r);
    const Status got = subject.UpdateStream(sid, caps, attributes, expected, next);
    if (skip(got)) return;
    ASSERT_EQ(reference.UpdateStream(rid, caps, attributes, expected, next).code(), got.code());
  } else if (dice < 95) {
    const Status got = subject.DeleteStream(sid);
    if (skip(got)) return;
    ASSERT_EQ(reference.DeleteStream(rid).code(), got.code());
  }
}

// Every store of the subject holds what the reference holds for `name`: catalog row, records,
// cursors and producer state.
inline void Agree(Store& reference, const std::vector<Store*>& stores, const std::string& name) {
  auto want = reference.GetStream("global", name);
  for (Store* store : stores) {
    auto seen = store->GetStream("global", name);
    ASSERT_EQ(Show(want, false), Show(seen, false));
    if (want.ok() && seen.ok()) {
      ASSERT_EQ(Show(reference.Read(want->id, 0, 1000, 1 << 30)),
                Show(store->Read(seen->id, 0, 1000, 1 << 30)));
      ASSERT_EQ(ShowCursors(reference, want->id), ShowCursors(*store, seen->id));
      ASSERT_EQ(ShowProducer(reference, want->id, "p0"), ShowProducer(*store, seen->id, "p0"));
      ASSERT_EQ(ShowProducer(reference, want->id, "p1"), ShowProducer(*store, seen->id, "p1"));
    }
  }
}

}  // namespace differential_internal

// Runs options.steps random steps; after each, every name must agree (the step's own name
// only, unless the subject injects faults, which may touch any stream).
inline DifferentialCounts RunDifferential(Store& reference, const DifferentialSubject& subject,
                                          const DifferentialOptions& options) {
  DifferentialCounts counts;
  std::mt19937_64 rng(options.seed * 7919 + 1);
  const std::function<uint64_t(uint64_t)> pick = [&rng](uint64_t n) {
    return n == 0 ? 0 : rng() % n;
  };
  for (int step = 0; step < options.steps; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    options.clock->Advance(pick(50));
    if (subject.before_step) subject.before_step(pick);
    if (::testing::Test::HasFatalFailure()) return counts;
    const std::string& name = options.names[pick(options.names.size())];
    if (pick(100) < 5) {
      subject.reopen(pick(1u << 20));
    } else {
      differential_internal::Step(reference, subject.store(pick(1u << 20)), name, step, pick,
                                  options.clock->NowMs(), options.max_payload, subject.refused,
                                  &counts);
    }
    if (::testing::Test::HasFatalFailure()) return counts;
    for (const std::string& each : options.names) {
      if (each != name && !subject.before_step) continue;
      SCOPED_TRACE("stream " + each);
      differential_internal::Agree(reference, subject.all(), each);
      if (::testing::Test::HasFatalFailure()) return counts;
    }
    ++counts.steps;
  }
  auto want = reference.ListStreams("global", "", 100);
  EXPECT_TRUE(want.ok());
  if (!want.ok()) return counts;
  for (Store* store : subject.all()) {
    auto seen = store->ListStreams("global", "", 100);
    EXPECT_TRUE(seen.ok());
    if (!seen.ok()) return counts;
    EXPECT_EQ(want->size(), seen->size());
    if (want->size() != seen->size()) return counts;
    for (size_t i = 0; i < want->size(); ++i) {
      EXPECT_EQ((*want)[i].spec.name, (*seen)[i].spec.name);
      EXPECT_EQ(Show((*want)[i], false), Show((*seen)[i], false));
    }
  }
  return counts;
}

}  // namespace runnel::testing

#endif  // RUNNEL_TESTS_SUPPORT_STORE_DIFFERENTIAL_H_
