// Random operations on the log store while writes and fdatasyncs fail now and then, the disk
// fills up and empties, and the power fails (unsynced data dropped, the store reopened): every
// operation the log store acknowledged is applied to the memory store too, every one it
// refused with an I/O error is not, and after each step both hold the same streams, records,
// cursors and producer state. So a failed write or sync is a definite refusal that leaves no
// trace (not even after a power loss), nothing acknowledged is lost, and the store goes on
// working once the fault clears. The operations are the differential driver's
// (support/store_differential.h). RUNNEL_LOG_FAULT_STEPS raises the default 400 steps per seed.
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "env/fault_env.h"
#include "env/mem_env.h"
#include "log/log_test_util.h"
#include "runnel/clock.h"
#include "runnel/log_store.h"
#include "support/store_differential.h"

namespace runnel::testing {
namespace {

class LogFaultDifferentialTest : public ::testing::TestWithParam<int> {
 protected:
  LogFaultDifferentialTest() : faults_(&mem_) {}

  void Open() {
    log_.reset();
    LogStoreOptions o;
    o.dir = "/data";
    o.env = &faults_;
    o.segment_size = 8 << 10;
    o.checkpoint_interval_bytes = 24 << 10;
    auto opened = OpenLogStore(o);
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    log_ = std::move(*opened);
  }

  env::MemEnv mem_;
  env::FaultInjectionEnv faults_;
  std::unique_ptr<Store> log_;
};

// An I/O failure the test injected (a full disk included): the only refusal the reference does
// not share. A write whose repair failed too is kOutcomeUnknown ("may reappear after a
// restart"); in this env unsynced bytes never survive a power loss and the log repairs the range
// before it writes again, so such a batch is never seen either, and the comparisons below hold
// it to that.
bool Injected(const Status& s) {
  return s.code() == StatusCode::kIOError || s.code() == StatusCode::kOutcomeUnknown ||
         s.no_space();
}

TEST_P(LogFaultDifferentialTest, RefusedWritesLeaveNoTraceAndAcknowledgedOnesSurvive) {
  const char* steps_env = std::getenv("RUNNEL_LOG_FAULT_STEPS");
  // Even seeds: faults hit the log's segments only. Odd seeds: every file, so also a segment
  // being prepared (a full disk then shows as a segment that cannot be created) and the
  // checkpoint files.
  if (GetParam() % 2 == 0) faults_.SetFaultPathSuffix(".log");
  ASSERT_NO_FATAL_FAILURE(Open());
  ManualClock clock(10'000);
  auto ref = NewMemoryStore();
  int power_losses = 0;
  bool no_space = false;

  DifferentialSubject subject;
  subject.store = [this](uint64_t) -> Store& { return *log_; };
  subject.all = [this] { return std::vector<Store*>{log_.get()}; };
  // A clean restart, once the disk works again.
  subject.reopen = [&](uint64_t) {
    faults_.ClearFaults();
    no_space = false;
    Open();
  };
  subject.before_step = [&](const std::function<uint64_t(uint64_t)>& pick) {
    const uint64_t fault = pick(100);
    if (fault < 6) {
      faults_.FailWrite(1 + pick(2));
    } else if (fault < 12) {
      faults_.FailSync(1 + pick(2));
    } else if (fault < 15) {
      no_space = !no_space;
      faults_.SetNoSpace(no_space);
    } else if (fault < 19) {
      // Power loss: what was not synced is gone (the open store's handles die with it, so its
      // close writes nothing); the store recovers from what was.
      mem_.DropUnsyncedData();
      faults_.ClearFaults();
      no_space = false;
      Open();
      ++power_losses;
    }
  };
  subject.refused = Injected;
  DifferentialOptions run;
  run.seed = static_cast<uint64_t>(GetParam()) * 104729 + 5;
  run.steps = steps_env != nullptr ? std::atoi(steps_env) : 400;
  run.max_payload = 900;
  run.clock = &clock;
  const DifferentialCounts counts = RunDifferential(*ref, subject, run);
  // The run meant something: writes were refused and the power failed.
  EXPECT_EQ(counts.steps, run.steps);
  EXPECT_GT(counts.refused, 0);
  EXPECT_GT(power_losses, 0);
}

INSTANTIATE_TEST_SUITE_P(Seeds, LogFaultDifferentialTest, ::testing::Range(0, 4));

}  // namespace
}  // namespace runnel::testing
