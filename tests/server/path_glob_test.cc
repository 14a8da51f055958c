#include "server/path_glob.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>
#include <utility>

namespace runnel::server {
namespace {

TEST(PathGlobTest, StarsMatchWithinASegmentAndDoubleStarsAcrossSegments) {
  EXPECT_TRUE(PathGlobMatch("events/*", "events/a"));
  EXPECT_FALSE(PathGlobMatch("events/*", "events/a/b"));
  EXPECT_FALSE(PathGlobMatch("events/*", "events"));
  EXPECT_TRUE(PathGlobMatch("events/**", "events"));
  EXPECT_TRUE(PathGlobMatch("events/**", "events/a/b/c"));
  EXPECT_TRUE(PathGlobMatch("**/c", "c"));
  EXPECT_TRUE(PathGlobMatch("**/c", "a/b/c"));
  EXPECT_FALSE(PathGlobMatch("**/c", "a/b/cd"));
  EXPECT_TRUE(PathGlobMatch("a/**/b/**/c", "a/b/c"));
  EXPECT_TRUE(PathGlobMatch("a/**/b/**/c", "a/x/b/y/b/z/c"));
  EXPECT_FALSE(PathGlobMatch("a/**/b/**/c", "a/x/c/b"));
  EXPECT_TRUE(PathGlobMatch("user-*/orders", "user-42/orders"));
  EXPECT_TRUE(PathGlobMatch("*-*-*", "a-b-c-d"));
  EXPECT_FALSE(PathGlobMatch("*-*-*", "a-b"));
  EXPECT_TRUE(PathGlobMatch("a//b", "a//b"));
  EXPECT_FALSE(PathGlobMatch("a/b", "a//b"));
}

// "**" repeated with a literal that never matches: a search over every way to split the path
// between the "**" runs in time exponential in their number; the matcher answers at once.
TEST(PathGlobTest, ManyDoubleStarsAgainstADeepPathAnswerWithoutASearch) {
  std::string pattern;
  for (int i = 0; i < 300; ++i) pattern += "**/";
  pattern += "z";
  std::string path = "a";
  for (int i = 0; i < 500; ++i) path += "/a";
  EXPECT_FALSE(PathGlobMatch(pattern, path));
  EXPECT_TRUE(PathGlobMatch(pattern, path + "/z"));
  std::string stars(500, '*');
  EXPECT_FALSE(SegmentMatch(stars + "z", std::string(1000, 'a')));
}

// The reference: the definition, as a memoized search over every split.
bool Reference(const std::vector<std::string_view>& pat, size_t pi,
               const std::vector<std::string_view>& path, size_t si,
               std::map<std::pair<size_t, size_t>, bool>& memo) {
  auto key = std::make_pair(pi, si);
  if (auto it = memo.find(key); it != memo.end()) return it->second;
  bool r;
  if (pi == pat.size()) {
    r = si == path.size();
  } else if (pat[pi] == "**") {
    r = false;
    for (size_t k = si; k <= path.size() && !r; ++k) r = Reference(pat, pi + 1, path, k, memo);
  } else {
    r = si < path.size() && SegmentMatch(pat[pi], path[si]) &&
        Reference(pat, pi + 1, path, si + 1, memo);
  }
  return memo[key] = r;
}

bool SegmentReference(std::string_view p, std::string_view t) {
  if (p.empty()) return t.empty();
  if (p[0] == '*') {
    for (size_t k = 0; k <= t.size(); ++k) {
      if (SegmentReference(p.substr(1), t.substr(k))) return true;
    }
    return false;
  }
  return !t.empty() && p[0] == t[0] && SegmentReference(p.substr(1), t.substr(1));
}

TEST(PathGlobTest, AgreesWithTheDefinitionOnRandomPatterns) {
  std::mt19937 rng(20261201);
  auto pick = [&](std::initializer_list<const char*> from) {
    return std::string(*(from.begin() + rng() % from.size()));
  };
  int matches = 0;
  for (int round = 0; round < 20000; ++round) {
    std::string pattern, path;
    const int np = 1 + static_cast<int>(rng() % 6), ns = 1 + static_cast<int>(rng() % 7);
    for (int i = 0; i < np; ++i)
      pattern += (i ? "/" : "") + pick({"**", "*", "a", "b", "a*", "*b", "a*b"});
    for (int i = 0; i < ns; ++i) path += (i ? "/" : "") + pick({"a", "b", "ab", "ba", "aab", ""});
    auto pat = PathSegments(pattern), segs = PathSegments(path);
    std::map<std::pair<size_t, size_t>, bool> memo;
    const bool want = Reference(pat, 0, segs, 0, memo);
    ASSERT_EQ(PathGlobMatch(pat, segs), want) << pattern << " vs " << path;
    matches += want;
    for (size_t i = 0; i < pat.size() && i < segs.size(); ++i) {
      ASSERT_EQ(SegmentMatch(pat[i], segs[i]), SegmentReference(pat[i], segs[i]))
          << pat[i] << " vs " << segs[i];
    }
  }
  EXPECT_GT(matches, 1000) << "the random cases must exercise matches too";
  EXPECT_LT(matches, 19000) << "and non-matches";
}

}  // namespace
}  // namespace runnel::server
