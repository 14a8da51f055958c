// Pacing and reporting of failed accepts (server/accept_backoff.h).
#include "server/accept_backoff.h"

#include <gtest/gtest.h>

#include <chrono>
#include <vector>

namespace runnel::server {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

TEST(AcceptBackoffTest, DelaysDoubleFrom10MsTo1SAndResetAfterASuccess) {
  AcceptBackoff backoff;
  const auto now = AcceptBackoff::Clock::time_point{} + seconds(100);
  std::vector<int64_t> delays;
  for (int i = 0; i < 10; ++i) delays.push_back(backoff.Failed(now).delay.count());
  EXPECT_EQ(delays, (std::vector<int64_t>{10, 20, 40, 80, 160, 320, 640, 1000, 1000, 1000}));
  backoff.Succeeded();
  EXPECT_EQ(backoff.Failed(now).delay, milliseconds(10));
  EXPECT_EQ(backoff.Failed(now).delay, milliseconds(20));
}

TEST(AcceptBackoffTest, FailuresAreReportedAtMostOncePer10SWithTheCountLeftOut) {
  AcceptBackoff backoff;
  const auto t0 = AcceptBackoff::Clock::time_point{} + seconds(100);
  auto first = backoff.Failed(t0);
  ASSERT_TRUE(first.report_with_suppressed.has_value());
  EXPECT_EQ(*first.report_with_suppressed, 0u);
  // 20 failures a second (the old 50 ms pace) for 9.95 s: none reported.
  for (int i = 1; i < 200; ++i) {
    EXPECT_FALSE(backoff.Failed(t0 + milliseconds(50 * i)).report_with_suppressed) << i;
  }
  auto second = backoff.Failed(t0 + seconds(10));
  ASSERT_TRUE(second.report_with_suppressed.has_value());
  EXPECT_EQ(*second.report_with_suppressed, 199u);
  // The window runs from the last report; a success in between does not reopen it.
  backoff.Succeeded();
  EXPECT_FALSE(backoff.Failed(t0 + seconds(15)).report_with_suppressed);
  auto third = backoff.Failed(t0 + seconds(25));
  ASSERT_TRUE(third.report_with_suppressed.has_value());
  EXPECT_EQ(*third.report_with_suppressed, 1u);
}

}  // namespace
}  // namespace runnel::server
