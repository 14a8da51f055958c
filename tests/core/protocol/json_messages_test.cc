// JSON mode and content types (core/protocol/json_messages.h), by rule id (docs/semantics.md).
#include "core/protocol/json_messages.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/json_bounded.h"
#include "base/json_depth.h"

namespace runnel::protocol {
namespace {

TEST(JsonMessagesTest, E6_SingleValueIsOneMessage) {
  auto m = SplitJsonMessages(R"({"event": "created"})", false);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(*m, std::vector<std::string>{R"({"event":"created"})"});
}

TEST(JsonMessagesTest, E6_FlattensExactlyOneLevel) {
  EXPECT_EQ(*SplitJsonMessages(R"([{"a":1},{"b":2}])", false),
            (std::vector<std::string>{R"({"a":1})", R"({"b":2})"}));
  EXPECT_EQ(*SplitJsonMessages("[[1,2],[3,4]]", false),
            (std::vector<std::string>{"[1,2]", "[3,4]"}));
  EXPECT_EQ(*SplitJsonMessages("[[[1,2,3]]]", false), (std::vector<std::string>{"[[1,2,3]]"}));
  EXPECT_EQ(*SplitJsonMessages(R"("text")", false), (std::vector<std::string>{R"("text")"}));
}

TEST(JsonMessagesTest, E6_EmptyArrayIsRejectedForAppendsOnly) {
  auto append = SplitJsonMessages("[]", false);
  ASSERT_FALSE(append.ok());
  EXPECT_EQ(append.status().code(), StatusCode::kInvalidArgument);
  auto create = SplitJsonMessages("[]", true);
  ASSERT_TRUE(create.ok());
  EXPECT_TRUE(create->empty());
}

// The message limit counts the elements of a top-level array only: an object's members and
// nested arrays are one message each.
TEST(JsonMessagesTest, E6_TheMessageLimitCountsTopLevelArrayElementsOnly) {
  auto at_limit = SplitJsonMessages("[1, 2, 3]", false, 3);
  ASSERT_TRUE(at_limit.ok()) << at_limit.status().ToString();
  EXPECT_EQ(at_limit->size(), 3u);
  auto over = SplitJsonMessages("[1, 2, 3, 4]", false, 3);
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(over.status().message().find("more than 3 messages"), std::string::npos);
  EXPECT_TRUE(SplitJsonMessages(R"({"a":1,"b":2,"c":3,"d":4})", false, 1).ok());
  EXPECT_TRUE(SplitJsonMessages("[[1,2,3,4,5]]", false, 1).ok());
  EXPECT_TRUE(SplitJsonMessages(R"(  [{"a":[1,2,3]},{"b":{"c":1,"d":2}}])", false, 2).ok());
  // Far past the limit: refused, not split.
  std::string many = "[1";
  for (int i = 0; i < 100000; ++i) many += ",1";
  many += "]";
  EXPECT_EQ(SplitJsonMessages(many, false, 1000).status().code(), StatusCode::kResourceExhausted);
}

TEST(JsonMessagesTest, E6_InvalidJsonIsRejected) {
  for (std::string_view bad : {"{", "[1,", "nope", "{\"a\":}", ""}) {
    auto m = SplitJsonMessages(bad, false);
    ASSERT_FALSE(m.ok()) << bad;
    EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
  }
}

// The parser takes a NUL byte for the end of its input; a NUL is never valid JSON, so a body with
// one anywhere is refused (stored, it would make every read of the stream invalid JSON).
TEST(JsonMessagesTest, E6_ANulByteAnywhereIsRejected) {
  using namespace std::string_view_literals;
  for (std::string_view bad : {"{\"b\":2}\0"sv, "1\0"sv, "\"a\"\0\0\0"sv, "1 \0 "sv, "[1,2]\0"sv,
                               "\0{}"sv, "{\"a\":\"x\0y\"}"sv}) {
    auto m = SplitJsonMessages(bad, false);
    ASSERT_FALSE(m.ok()) << "a body of " << bad.size() << " bytes";
    EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
  }
  EXPECT_TRUE(ParseJsonBounded("{\"a\":1}\0"sv).is_discarded());
  EXPECT_FALSE(ParseJsonBounded("{\"a\":1}"sv).is_discarded());
}

// nlohmann::json serializes recursively: a body nested a few hundred thousand levels deep must be
// refused before it is parsed, not crash the thread that writes the messages back out.
TEST(JsonMessagesTest, E6_NestingPastTheLimitIsRefusedNotACrash) {
  for (size_t depth : {kMaxJsonDepth + 1, size_t{300000}}) {
    auto m = SplitJsonMessages(std::string(depth, '[') + std::string(depth, ']'), false);
    ASSERT_FALSE(m.ok()) << depth;
    EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(m.status().message().find("deeper than 512 levels"), std::string::npos)
        << m.status().ToString();
  }
  std::string deepest =
      "{\"a\":" + std::string(kMaxJsonDepth - 1, '[') + std::string(kMaxJsonDepth - 1, ']') + "}";
  auto m = SplitJsonMessages(deepest, false);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->size(), 1u);
}

// A message is the client's own text minus the whitespace between tokens: numbers keep every
// digit (no rounding to double), objects their key order, strings their escapes and spaces.
TEST(JsonMessagesTest, E6_MessagesKeepTheClientsTextExactlyButForWhitespace) {
  auto m = SplitJsonMessages(
      "[ 123456789012345678901234567890 , -0, 1E2, 1.0e-400,\n"
      "  {\"b\": 1, \"a\" : [ \"x, y]\" , \"\\\"q\\\"\" ] },\t\"\\u00e9 \\/ \" ]",
      false);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(*m, (std::vector<std::string>{"123456789012345678901234567890", "-0", "1E2", "1.0e-400",
                                          R"({"b":1,"a":["x, y]","\"q\""]})", R"("\u00e9 \/ ")"}));
  auto bom = SplitJsonMessages("\xEF\xBB\xBF{\"k\": 1}", false);
  ASSERT_TRUE(bom.ok()) << bom.status().ToString();
  EXPECT_EQ(*bom, std::vector<std::string>{R"({"k":1})"});
  // What the parser refuses stays refused: trailing text, a lone surrogate, a number past the
  // range of a double.
  for (std::string_view bad : {"[1] x", "\"\\ud800\"", "[1e400]"}) {
    EXPECT_FALSE(SplitJsonMessages(bad, false).ok()) << bad;
  }
}

TEST(JsonMessagesTest, E6_JoinsIntoOneArray) {
  EXPECT_EQ(JoinJsonMessages({}), "[]");
  EXPECT_EQ(JoinJsonMessages({"1", R"({"a":2})"}), R"([1,{"a":2}])");
}

TEST(JsonMessagesTest, E5_ContentTypeNormalisation) {
  EXPECT_TRUE(IsJsonContentType("application/json"));
  EXPECT_TRUE(IsJsonContentType("APPLICATION/JSON; charset=utf-8"));
  EXPECT_FALSE(IsJsonContentType("application/ndjson"));
  EXPECT_EQ(NormalizeContentType("Text/Plain ; charset=UTF-8"), "text/plain");
  EXPECT_FALSE(IsJsonContentType("application/jso"));
  EXPECT_FALSE(IsJsonContentType("application/json+x"));
  EXPECT_FALSE(IsJsonContentType(""));
}

// SameContentType agrees with comparing the normalized forms, on every pair below.
TEST(JsonMessagesTest, E5_SameContentTypeMatchesNormalizedComparison) {
  const std::vector<std::string> types = {"text/plain",
                                          "Text/Plain ; charset=UTF-8",
                                          "text/plain;",
                                          " text / plain",
                                          "text/plai",
                                          "text/plainx",
                                          "",
                                          ";",
                                          " ",
                                          "application/json",
                                          "APPLICATION/JSON;q=1",
                                          "\xc3\xa9/x",
                                          "\xc3\x89/x"};
  for (const std::string& a : types) {
    for (const std::string& b : types) {
      EXPECT_EQ(SameContentType(a, b), NormalizeContentType(a) == NormalizeContentType(b))
          << "'" << a << "' vs '" << b << "'";
    }
  }
  EXPECT_TRUE(SameContentType("TEXT/plain; charset=utf-8", "text/plain"));
  EXPECT_FALSE(SameContentType("text/plain", "text/html"));
}

}  // namespace
}  // namespace runnel::protocol
