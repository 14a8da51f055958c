#include "base/json_depth.h"

#include <gtest/gtest.h>

#include <string>

namespace runnel {
namespace {

std::string Nested(size_t depth, char open = '[', char close = ']') {
  return std::string(depth, open) + std::string(depth, close);
}

TEST(JsonDepthTest, CountsArraysAndObjectsUpToTheLimit) {
  EXPECT_TRUE(JsonDepthWithin("1"));
  EXPECT_TRUE(JsonDepthWithin(""));
  EXPECT_TRUE(JsonDepthWithin(Nested(kMaxJsonDepth)));
  EXPECT_FALSE(JsonDepthWithin(Nested(kMaxJsonDepth + 1)));
  EXPECT_TRUE(JsonDepthWithin(R"({"a":{"b":[1,{"c":2}]}})", 4));
  EXPECT_FALSE(JsonDepthWithin(R"({"a":{"b":[1,{"c":2}]}})", 3));
  // Siblings do not add up: depth, not count.
  std::string wide = "[";
  for (int i = 0; i < 10000; ++i) wide += "[],";
  wide += "[]]";
  EXPECT_TRUE(JsonDepthWithin(wide, 2));
}

TEST(JsonDepthTest, BracketsInsideStringsDoNotCount) {
  EXPECT_TRUE(JsonDepthWithin(R"(["[[[[{{{{", "]]]"])", 1));
  // An escaped quote does not end the string; an escaped backslash before a quote does.
  EXPECT_TRUE(JsonDepthWithin(R"(["\"[[[[", "x"])", 1));
  EXPECT_FALSE(JsonDepthWithin(R"(["\\", [[1]]])", 2));
  EXPECT_TRUE(JsonDepthWithin(R"(["\\", [[1]]])", 3));
}

}  // namespace
}  // namespace runnel
