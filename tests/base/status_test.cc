#include "runnel/status.h"

#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <string>

namespace runnel {
namespace {

TEST(StatusTest, OkIsCheapAndEmpty) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kOk);
  EXPECT_TRUE(s.message().empty());
  EXPECT_EQ(s.ToString(), "ok");
  EXPECT_EQ(sizeof(Status), sizeof(void*));
}

TEST(StatusTest, ErrorsCarryCodeAndMessage) {
  Status s = Status::NotFound("stream 'x' does not exist in global");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "stream 'x' does not exist in global");
  EXPECT_EQ(s.ToString(), "not_found: stream 'x' does not exist in global");
  EXPECT_FALSE(s.conflict_expected().has_value());
}

TEST(StatusTest, ConstructingWithOkCodeGivesOk) {
  EXPECT_TRUE(Status(StatusCode::kOk, "ignored").ok());
}

TEST(StatusTest, ConflictCarriesPositionsThroughCopiesAndAnnotations) {
  Status s = Status::Conflict("taken", 4, 7);
  Status copy = s;
  Status annotated = copy.Annotate("publish");
  EXPECT_EQ(annotated.code(), StatusCode::kConflict);
  EXPECT_EQ(annotated.message(), "publish: taken");
  EXPECT_EQ(annotated.conflict_expected(), 4u);
  EXPECT_EQ(annotated.conflict_actual(), 7u);
  EXPECT_EQ(s.message(), "taken");
}

TEST(StatusTest, NoSpaceIsResourceExhaustedAndMarkedThroughCopiesAndAnnotations) {
  Status s = Status::NoSpace("write '/d/1.log': No space left on device");
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(s.no_space());
  Status annotated = Status(s).Annotate("log write failed");
  EXPECT_EQ(annotated.code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(annotated.no_space());
  EXPECT_EQ(annotated.message(), "log write failed: write '/d/1.log': No space left on device");
  EXPECT_FALSE(Status::ResourceExhausted("quota").no_space());
  EXPECT_FALSE(Status::IOError("x").no_space());
  EXPECT_FALSE(Status().no_space());
}

TEST(StatusTest, EveryCodeHasAStableDistinctName) {
  std::set<std::string_view> names;
  for (int c = 0; c <= static_cast<int>(StatusCode::kUnauthenticated); ++c) {
    auto name = StatusCodeName(static_cast<StatusCode>(c));
    EXPECT_NE(name, "unknown") << c;
    names.insert(name);
  }
  EXPECT_EQ(names.size(), static_cast<size_t>(StatusCode::kUnauthenticated) + 1);
  EXPECT_EQ(StatusCodeName(StatusCode::kOutcomeUnknown), "outcome_unknown");
}

Result<int> Half(int x) {
  if (x % 2) return Status::InvalidArgument("odd");
  return x / 2;
}

Result<int> Quarter(int x) {
  RUNNEL_ASSIGN_OR_RETURN(int h, Half(x));
  RUNNEL_ASSIGN_OR_RETURN(int q, Half(h));
  return q;
}

Status CheckEven(int x) {
  RUNNEL_RETURN_IF_ERROR(Half(x).status());
  return Status::OK();
}

TEST(ResultTest, HoldsValueOrStatusAndMacrosPropagate) {
  EXPECT_EQ(*Quarter(8), 2);
  EXPECT_EQ(Quarter(6).status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(CheckEven(2).ok());
  EXPECT_FALSE(CheckEven(3).ok());
  Result<std::string> r = std::string("abc");
  EXPECT_EQ(r->size(), 3u);
  EXPECT_TRUE(r.status().ok());
  EXPECT_EQ(Result<int>(Status::NotFound("x")).value_or(9), 9);
  Result<std::unique_ptr<int>> owned = std::make_unique<int>(5);
  std::unique_ptr<int> moved = std::move(owned).value();
  EXPECT_EQ(*moved, 5);
}

TEST(ResultTest, AnOkStatusIsNotAValue) {
  Result<int> r = Status::OK();
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInternal);
}

TEST(ResultDeathTest, ValueOfAFailedResultAborts) {
  Result<int> r = Status::NotFound("missing thing");
  EXPECT_DEATH({ (void)r.value(); }, "missing thing");
}

}  // namespace
}  // namespace runnel
