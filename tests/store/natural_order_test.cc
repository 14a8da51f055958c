// Store contract: ListStreamsNatural lists a namespace's streams in natural order
// (src/store/natural_key.h), filtered by prefix and paged by a name cursor, on every store.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "store/natural_reference.h"
#include "store/store_contract.h"

namespace runnel::testing {
namespace {

// The names of `ns` with the prefix after `after`, by the reference order.
std::vector<std::string> Expected(const std::set<std::string>& names, const std::string& prefix,
                                  const std::string& after) {
  std::vector<std::string> out;
  for (const auto& n : names) {
    if (!n.starts_with(prefix)) continue;
    if (!after.empty() && !NaturalLessReference(after, n)) continue;
    out.push_back(n);
  }
  std::sort(out.begin(), out.end(),
            [](const auto& a, const auto& b) { return NaturalLessReference(a, b); });
  return out;
}

// Every page of at most `limit`, each starting after the last name of the one before.
std::vector<std::string> Paged(Store& store, const std::string& prefix, const std::string& after,
                               size_t limit) {
  std::vector<std::string> out;
  std::string cursor = after;
  for (int pages = 0; pages < 10000; ++pages) {
    auto page = store.ListStreamsNatural("global", prefix, cursor, limit);
    EXPECT_TRUE(page.ok()) << page.status().ToString();
    if (!page.ok()) break;
    EXPECT_LE(page->size(), limit);
    for (const auto& info : *page) out.push_back(info.spec.name);
    if (page->size() < limit) break;
    cursor = page->back().spec.name;
  }
  return out;
}

TEST_P(StoreContractTest, NaturalOrderListsNumbersByValueAcrossPages) {
  const std::set<std::string> names = {"bench-1",  "bench-2",   "bench-10", "bench-11", "bench-100",
                                       "bench-9a", "bench-10a", "bench",    "other-3",  "b1",
                                       "b12",      "b100",      "b01",      "b2",       "b0",
                                       "b05",      "b1x2"};
  for (const auto& n : names) Create(n);
  Create("bench-5", {}, "tenant:other");  // another namespace is not listed
  auto all = store_->ListStreamsNatural("global", "bench-", "", 100);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  std::vector<std::string> got;
  for (const auto& info : *all) got.push_back(info.spec.name);
  EXPECT_EQ(got, (std::vector<std::string>{"bench-1", "bench-2", "bench-9a", "bench-10",
                                           "bench-10a", "bench-11", "bench-100"}));
  // Prefix ending in a digit: "b1" matches "b1", "b1x2", "b12", "b100", not "b01" or "b2".
  auto b1 = store_->ListStreamsNatural("global", "b1", "", 100);
  ASSERT_TRUE(b1.ok());
  got.clear();
  for (const auto& info : *b1) got.push_back(info.spec.name);
  EXPECT_EQ(got, (std::vector<std::string>{"b1", "b1x2", "b12", "b100"}));
  // Prefix ending in zeros only: "b0" matches "b0" and "b01" and "b05", not "b1".
  auto b0 = store_->ListStreamsNatural("global", "b0", "", 100);
  ASSERT_TRUE(b0.ok());
  got.clear();
  for (const auto& info : *b0) got.push_back(info.spec.name);
  EXPECT_EQ(got, (std::vector<std::string>{"b0", "b01", "b05"}));
  // A cursor that is not a stream's name, and one past everything.
  auto mid = store_->ListStreamsNatural("global", "bench-", "bench-3", 2);
  ASSERT_TRUE(mid.ok());
  ASSERT_EQ(mid->size(), 2u);
  EXPECT_EQ((*mid)[0].spec.name, "bench-9a");
  EXPECT_EQ((*mid)[1].spec.name, "bench-10");
  auto none = store_->ListStreamsNatural("global", "", "zzz", 10);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
  auto zero = store_->ListStreamsNatural("global", "", "", 0);
  ASSERT_TRUE(zero.ok());
  EXPECT_TRUE(zero->empty());
}

TEST_P(StoreContractTest, NaturalOrderForgetsDeletedStreams) {
  StreamInfo a = Create("s-2");
  Create("s-10");
  ASSERT_TRUE(store_->DeleteStream(a.id).ok());
  auto page = store_->ListStreamsNatural("global", "s-", "", 10);
  ASSERT_TRUE(page.ok());
  ASSERT_EQ(page->size(), 1u);
  EXPECT_EQ((*page)[0].spec.name, "s-10");
  Create("s-2");
  page = store_->ListStreamsNatural("global", "s-", "", 10);
  ASSERT_TRUE(page.ok());
  ASSERT_EQ(page->size(), 2u);
  EXPECT_EQ((*page)[0].spec.name, "s-2");
}

// Random names (several digit runs, leading zeros, long numbers, zero bytes, bytes above 0x7F),
// every prefix kind, pages of 1, 3 and 50: the same names in the same order as the reference.
TEST_P(StoreContractTest, NaturalOrderMatchesAReferenceSortOverRandomNames) {
  std::mt19937_64 rng(1206);
  static const std::string kText = std::string("ab-._Z") + '\0' + "\x80\xff";
  std::set<std::string> names;
  while (names.size() < 250) {
    std::string n = rng() % 3 == 0 ? "b" : "";
    const int pieces = 1 + static_cast<int>(rng() % 4);
    for (int p = 0; p < pieces; ++p) {
      if (rng() % 2) {
        n.push_back(kText[rng() % kText.size()]);
      } else {
        if (rng() % 5 == 0) n.append(1 + rng() % 2, '0');
        const int digits =
            rng() % 25 == 0 ? 25 + static_cast<int>(rng() % 40) : 1 + static_cast<int>(rng() % 3);
        for (int d = 0; d < digits; ++d) n.push_back(static_cast<char>('0' + rng() % 10));
      }
    }
    names.insert(n);
  }
  names.insert({"b1", "b01", "b001", "b10", "b1b", "b0"});
  for (const auto& n : names) Create(n);
  std::vector<std::string> prefixes = {"", "b", "b1", "b0", "b00", "b01", "b12", "a", "b-"};
  for (int i = 0; i < 12; ++i) {
    auto it = names.begin();
    std::advance(it, static_cast<long>(rng() % names.size()));
    prefixes.push_back(it->substr(0, 1 + rng() % it->size()));
  }
  for (const std::string& prefix : prefixes) {
    const auto want = Expected(names, prefix, "");
    for (size_t limit : {1u, 3u, 50u}) {
      EXPECT_EQ(Paged(*store_, prefix, "", limit), want)
          << "prefix '" << prefix << "' limit " << limit;
    }
    // From a cursor inside the list.
    if (want.size() > 2) {
      const std::string& after = want[want.size() / 2];
      EXPECT_EQ(Paged(*store_, prefix, after, 4), Expected(names, prefix, after))
          << "prefix '" << prefix << "' after '" << after << "'";
    }
  }
}

TEST_P(PersistentStoreTest, NaturalOrderSurvivesAReopen) {
  for (const char* n : {"s-10", "s-2", "s-1", "t-3"}) Create(n);
  StreamInfo gone = Create("s-5");
  ASSERT_TRUE(store_->DeleteStream(gone.id).ok());
  ASSERT_TRUE(store_->Flush().ok());
  Reopen();
  auto page = store_->ListStreamsNatural("global", "s-", "", 10);
  ASSERT_TRUE(page.ok()) << page.status().ToString();
  std::vector<std::string> got;
  for (const auto& info : *page) got.push_back(info.spec.name);
  EXPECT_EQ(got, (std::vector<std::string>{"s-1", "s-2", "s-10"}));
}

}  // namespace
}  // namespace runnel::testing
