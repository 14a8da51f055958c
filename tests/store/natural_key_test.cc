// The natural key (src/store/natural_key.h): its byte order is the natural order of names.
#include "store/natural_key.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "store/natural_reference.h"

namespace runnel::store {
namespace {

using runnel::testing::NaturalLessReference;

bool KeyLess(const std::string& a, const std::string& b) {
  return NaturalKey(a) < NaturalKey(b);
}

// A random name of 1..12 pieces: letters, separators, digit runs (some with leading zeros, some
// very long), zero bytes and bytes above 0x7F.
std::string RandomName(std::mt19937_64& rng) {
  static const std::string kText = std::string("ab-._/:Z~") + '\0' + "\x01\x7f\x80\xc3\xa9\xff";
  std::string name;
  const int pieces = 1 + static_cast<int>(rng() % 6);
  for (int p = 0; p < pieces; ++p) {
    switch (rng() % 4) {
      case 0:
      case 1: name.push_back(kText[rng() % kText.size()]); break;
      case 2: {
        const int zeros = rng() % 4 == 0 ? static_cast<int>(rng() % 3) : 0;
        name.append(static_cast<size_t>(zeros), '0');
        const int digits =
            rng() % 20 == 0 ? 30 + static_cast<int>(rng() % 300) : 1 + static_cast<int>(rng() % 3);
        for (int d = 0; d < digits; ++d) name.push_back(static_cast<char>('0' + rng() % 10));
        break;
      }
      default: name.append(rng() % 2 ? "s-" : "bench"); break;
    }
  }
  return name;
}

TEST(NaturalKeyTest, OrdersNumbersByValueAndTextByBytes) {
  const std::vector<std::string> sorted = {
      "a",     "a-1",   "a0",      "a007",    "a07",      "a7",        "a8",       "a10",
      "a10.b", "a10a",  "a10b",    "a11",     "a99",      "a100",      "a:",       "aA",
      "b",     "bench", "bench-2", "bench-9", "bench-10", "bench-10a", "bench-11", "s-1",
      "s-2",   "s-10",  "s-2100",  "x9y1",    "x9y10",    "x10y1",     "\xc3\xa9"};
  for (size_t i = 0; i + 1 < sorted.size(); ++i) {
    EXPECT_LT(NaturalKey(sorted[i]), NaturalKey(sorted[i + 1]))
        << "'" << sorted[i] << "' before '" << sorted[i + 1] << "'";
    EXPECT_TRUE(NaturalLessReference(sorted[i], sorted[i + 1])) << sorted[i];
  }
}

TEST(NaturalKeyTest, ZeroBytesNamesEndingAndVeryLongNumbers) {
  const std::string nul_a = std::string("a") + '\0';
  EXPECT_LT(NaturalKey("a"), NaturalKey(nul_a));                 // shorter first
  EXPECT_LT(NaturalKey(nul_a), NaturalKey("a\x01"));             // 0x00 < 0x01
  EXPECT_LT(NaturalKey(nul_a + "9"), NaturalKey(nul_a + "10"));  // a number after a zero byte
  EXPECT_LT(NaturalKey(nul_a), NaturalKey("a0"));                // 0x00 < a number
  const std::string big(500, '9');
  EXPECT_LT(NaturalKey("n" + big), NaturalKey("n1" + std::string(500, '0')));
  EXPECT_LT(NaturalKey("n" + std::string(300, '0') + "5"), NaturalKey("n6"));
}

TEST(NaturalKeyTest, TheNameComesBackFromItsKey) {
  std::mt19937_64 rng(7);
  for (int i = 0; i < 2000; ++i) {
    const std::string name = RandomName(rng);
    EXPECT_EQ(NameFromNaturalKey(NaturalKey(name)), name);
  }
  EXPECT_EQ(NameFromNaturalKey("no separator"), "");
}

// Random names sorted by key are in the order the reference comparator gives, and keys are
// unique per name.
TEST(NaturalKeyTest, SortingByKeyMatchesTheReferenceOrder) {
  std::mt19937_64 rng(20261206);
  for (int round = 0; round < 20; ++round) {
    std::set<std::string> unique;
    while (unique.size() < 500) unique.insert(RandomName(rng));
    std::vector<std::string> by_key(unique.begin(), unique.end());
    std::vector<std::string> by_reference = by_key;
    std::sort(by_key.begin(), by_key.end(), KeyLess);
    std::sort(by_reference.begin(), by_reference.end(),
              [](const auto& a, const auto& b) { return NaturalLessReference(a, b); });
    ASSERT_EQ(by_key, by_reference) << "round " << round;
    std::set<std::string> keys;
    for (const auto& n : by_key) keys.insert(NaturalKey(n));
    EXPECT_EQ(keys.size(), by_key.size());
  }
}

int Sign(int v) {
  return (v > 0) - (v < 0);
}

// NaturalCompare (on names, used by the stores' indexes) agrees with the keys' byte order.
TEST(NaturalKeyTest, NaturalCompareAgreesWithTheKeys) {
  std::mt19937_64 rng(99);
  std::vector<std::string> names;
  for (int i = 0; i < 3000; ++i) names.push_back(RandomName(rng));
  for (const char* extra : {"a7", "a007", "a07", "a", "a0", "a00", "b"}) names.push_back(extra);
  for (int i = 0; i < 200000; ++i) {
    const std::string& a = names[rng() % names.size()];
    // Half the pairs share a start, so that they differ late (in a number, or by leading zeros).
    std::string b = names[rng() % names.size()];
    if (rng() % 2) b = a.substr(0, rng() % (a.size() + 1)) + b;
    ASSERT_EQ(Sign(NaturalCompare(a, b)), Sign(NaturalKey(a).compare(NaturalKey(b))))
        << "'" << a << "' vs '" << b << "'";
  }
  EXPECT_EQ(NaturalCompare("a7", "a7"), 0);
  EXPECT_LT(NaturalCompare("a007", "a7"), 0);
  EXPECT_LT(NaturalCompare("s-2", "s-10"), 0);
}

// Every key of a name with the prefix is in the prefix's ranges, and NextCandidate never skips
// one: from any key at or below a matching key, the candidate is at or below it too.
TEST(NaturalKeyTest, PrefixRangesHoldEveryMatchingName) {
  std::mt19937_64 rng(41);
  std::vector<std::string> names;
  for (int i = 0; i < 3000; ++i) names.push_back(RandomName(rng));
  for (const char* extra : {"b1", "b12", "b100", "b01", "b0", "b05", "b1x2", "b2", "b"}) {
    names.push_back(extra);
  }
  std::vector<std::string> prefixes = {"", "b", "b1", "b0", "b00", "b01", "b12", "s-", "a9"};
  for (int i = 0; i < 200; ++i) {
    const std::string& n = names[rng() % names.size()];
    prefixes.push_back(n.substr(0, rng() % (n.size() + 1)));
  }
  for (const std::string& prefix : prefixes) {
    const NaturalPrefix range(prefix);
    for (const std::string& name : names) {
      if (!name.starts_with(prefix)) continue;
      const std::string key = NaturalKey(name);
      ASSERT_TRUE(range.InRange(key)) << "prefix '" << prefix << "' name '" << name << "'";
      auto from_start = range.NextCandidate("");
      ASSERT_TRUE(from_start.has_value());
      EXPECT_LE(*from_start, key);
      auto at = range.NextCandidate(key);
      ASSERT_TRUE(at.has_value());
      EXPECT_EQ(*at, key);
    }
  }
}

TEST(NaturalKeyTest, APrefixEndingInADigitHasOneRangePerDigitCount) {
  const NaturalPrefix range("b1");
  EXPECT_TRUE(range.by_length);
  EXPECT_TRUE(range.InRange(NaturalKey("b1")));
  EXPECT_TRUE(range.InRange(NaturalKey("b12")));
  EXPECT_TRUE(range.InRange(NaturalKey("b100x")));
  EXPECT_FALSE(range.InRange(NaturalKey("b2")));
  EXPECT_FALSE(range.InRange(NaturalKey("b20")));
  EXPECT_FALSE(range.InRange(NaturalKey("bx")));
  // Past "b1x" (one digit) the next candidate is the start of the two-digit range, below "b10".
  auto next = range.NextCandidate(NaturalKey("b2"));
  ASSERT_TRUE(next.has_value());
  EXPECT_GT(*next, NaturalKey("b9"));
  EXPECT_LE(*next, NaturalKey("b10"));
  EXPECT_FALSE(range.NextCandidate(NaturalKey("c")).has_value());
  EXPECT_FALSE(NaturalPrefix("b0").by_length);
  EXPECT_FALSE(NaturalPrefix("b").by_length);
}

}  // namespace
}  // namespace runnel::store
