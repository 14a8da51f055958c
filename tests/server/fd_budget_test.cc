// The descriptor budget of `runnel serve` (server/fd_budget.h): the connection cap derived from
// RLIMIT_NOFILE, and the limit and descriptor probes it is computed from.
#include "server/fd_budget.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

namespace runnel::server {
namespace {

TEST(FdBudgetTest, ASmallLimitLowersTheCapAndKeepsTheStoreReserve) {
  // ulimit -n 128 with 18 descriptors open when the server starts (measured for the log store
  // with two io threads).
  const FdBudget b = PlanFdBudget(128, 18, 10000);
  EXPECT_EQ(b.store_reserve, kStoreReserveFixed + 128 / kStoreReserveDivisor);
  EXPECT_EQ(b.store_reserve, 48u);
  EXPECT_EQ(b.reject_slots, kRejectSlots);
  EXPECT_EQ(b.fitting_connections, 128u - 18 - 48 - 16);
  EXPECT_EQ(b.max_connections, 46u);
  EXPECT_TRUE(b.lowered);
}

TEST(FdBudgetTest, ALargeLimitKeepsTheConfiguredCap) {
  const FdBudget b = PlanFdBudget(1u << 20, 30, 10000);
  EXPECT_EQ(b.max_connections, 10000u);
  EXPECT_FALSE(b.lowered);
  EXPECT_EQ(b.store_reserve, kStoreReserveFixed + (1u << 17));
}

TEST(FdBudgetTest, AConfiguredCapBelowWhatFitsIsKept) {
  const FdBudget b = PlanFdBudget(1024, 20, 100);
  EXPECT_EQ(b.max_connections, 100u);
  EXPECT_FALSE(b.lowered);
  EXPECT_GT(b.fitting_connections, 100u);
}

TEST(FdBudgetTest, ALimitTooSmallForAnyConnectionFitsNone) {
  const FdBudget b = PlanFdBudget(64, 20, 10000);
  EXPECT_EQ(b.fitting_connections, 0u);
  EXPECT_EQ(b.max_connections, 0u);
  EXPECT_TRUE(b.lowered);
  EXPECT_EQ(PlanFdBudget(10, 20, 10000).fitting_connections, 0u);  // more in use than allowed
}

TEST(FdBudgetTest, ClientsNeverGetTheReserveAtAnyLimit) {
  for (uint64_t limit = 1; limit <= 70000; limit += 7) {
    for (uint64_t in_use : {0u, 3u, 17u, 200u}) {
      const FdBudget b = PlanFdBudget(limit, in_use, 1u << 30);
      ASSERT_GE(b.store_reserve, kStoreReserveFixed + limit / kStoreReserveDivisor);
      if (b.max_connections > 0) {
        ASSERT_LE(in_use + b.store_reserve + b.reject_slots + b.max_connections, limit)
            << "limit " << limit << ", in use " << in_use;
      }
    }
  }
}

TEST(FdBudgetTest, FdLimitNeededIsTheSmallestLimitThatFits) {
  for (uint64_t in_use : {0u, 18u, 500u}) {
    for (uint64_t connections : {1u, 46u, 10000u}) {
      const uint64_t limit = FdLimitNeeded(in_use, connections);
      EXPECT_GE(PlanFdBudget(limit, in_use, connections).fitting_connections, connections);
      EXPECT_LT(PlanFdBudget(limit - 1, in_use, connections).fitting_connections, connections);
    }
  }
  EXPECT_EQ(FdLimitNeeded(18, 46), 127u);  // 127 - 18 - (32 + 15) - 16 = 46
}

TEST(FdBudgetTest, RaiseFdLimitRaisesTheSoftLimitToTheHardLimit) {
  rlimit before{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &before), 0);
  // Below the hard limit whatever it is (a process always has room for at least stdio).
  ASSERT_GE(before.rlim_max, 4u);
  rlimit lowered = before;
  lowered.rlim_cur = std::min<rlim_t>(100, before.rlim_max - 1);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &lowered), 0);
  const FdLimit got = RaiseFdLimit();
  EXPECT_TRUE(got.error.empty()) << got.error;
  EXPECT_EQ(got.soft_before, lowered.rlim_cur);
  EXPECT_EQ(got.soft, before.rlim_max);
  EXPECT_EQ(got.hard, before.rlim_max);
  rlimit now{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &now), 0);
  EXPECT_EQ(now.rlim_cur, before.rlim_max);
  // Already at the hard limit: nothing changes.
  const FdLimit again = RaiseFdLimit();
  EXPECT_EQ(again.soft_before, again.soft);
  EXPECT_EQ(again.soft, before.rlim_max);
}

TEST(FdBudgetTest, CountOpenFdsCountsEveryOpenDescriptor) {
  const uint64_t before = CountOpenFds();
  EXPECT_GE(before, 3u);  // at least stdin, stdout and stderr, or what replaced them
  std::vector<int> fds;
  for (int i = 0; i < 5; ++i) {
    fds.push_back(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    ASSERT_GE(fds.back(), 0);
  }
  EXPECT_EQ(CountOpenFds(), before + 5);
  for (int fd : fds) ::close(fd);
  EXPECT_EQ(CountOpenFds(), before);
}

}  // namespace
}  // namespace runnel::server
