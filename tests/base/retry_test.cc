#include "base/retry.h"

#include <gtest/gtest.h>

#include <string>

namespace runnel {
namespace {

TEST(RetryOnConflictTest, RunsAgainOnlyWhileTheStepLosesACompareAndSet) {
  int calls = 0;
  Status s = RetryOnConflict([&]() -> Status {
    ++calls;
    return calls < 3 ? Status::Conflict("lost", 0, 0) : Status();
  });
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(calls, 3);

  calls = 0;
  s = RetryOnConflict([&]() -> Status {
    ++calls;
    return Status::NotFound("gone");
  });
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(calls, 1);
}

TEST(RetryOnConflictTest, GivesUpWithTheLastConflictAfterTheBound) {
  int calls = 0;
  Result<int> r = RetryOnConflict([&]() -> Result<int> {
    ++calls;
    return Status::Conflict("lost " + std::to_string(calls), 0, 0);
  });
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kConflict);
  EXPECT_EQ(calls, kMaxCompareAndSetAttempts);
  EXPECT_NE(r.status().message().find("lost " + std::to_string(kMaxCompareAndSetAttempts)),
            std::string::npos);

  calls = 0;
  r = RetryOnConflict([&]() -> Result<int> { return ++calls; });
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 1);
}

}  // namespace
}  // namespace runnel
