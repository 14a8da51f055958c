#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "env/mem_env.h"
#include "log/log_harness.h"
#include "log/log_test_util.h"
#include "runnel/log_store.h"
#include "store/log/log_store.h"

namespace runnel::testing {
namespace {

class LogStoreTest : public ::testing::Test {
 protected:
  Result<std::unique_ptr<Store>> Open() {
    LogStoreOptions o = SmallLogOptions(dir_.path());
    return OpenLogStore(o);
  }
  TempDir dir_;
};

TEST_F(LogStoreTest, AppendsAreReadableAndSurviveReopen) {
  StreamId id;
  {
    auto store = Open();
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    auto info = (*store)->CreateStream(Spec("s"));
    ASSERT_TRUE(info.ok()) << info.status().ToString();
    id = info->id;
    auto r = AppendPayloads(**store, id, {"a", "bb", "ccc"});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->first_offset, 1u);
    EXPECT_EQ(r->last_offset, 3u);
    auto recs = (*store)->Read(id, 2, 10, 1 << 20);
    ASSERT_TRUE(recs.ok());
    ASSERT_EQ(recs->size(), 2u);
    EXPECT_EQ((*recs)[0].payload, "bb");
    EXPECT_EQ((*recs)[1].offset, 3u);
  }
  auto store = Open();
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto info = (*store)->GetStream("global", "s");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->next_offset, 4u);
  EXPECT_EQ(info->retained_bytes, 6u);
  auto recs = (*store)->Read(id, 1, 10, 1 << 20);
  ASSERT_TRUE(recs.ok());
  ASSERT_EQ(recs->size(), 3u);
  EXPECT_EQ((*recs)[2].payload, "ccc");
}

TEST_F(LogStoreTest, SecondOpenOfTheSameDirectoryIsRefused) {
  auto first = Open();
  ASSERT_TRUE(first.ok());
  auto second = Open();
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kUnavailable) << second.status().ToString();
  EXPECT_NE(second.status().message().find("in use"), std::string_view::npos);
}

TEST_F(LogStoreTest, DurabilityModesParseAndAreReported) {
  EXPECT_EQ(ParseLogDurability("fsync")->mode, LogDurability::kFsync);
  EXPECT_EQ(ParseLogDurability("none")->mode, LogDurability::kNone);
  auto iv = ParseLogDurability("interval:25");
  ASSERT_TRUE(iv.ok());
  EXPECT_EQ(iv->interval_ms, 25u);
  EXPECT_EQ(LogDurabilityName(*iv), "interval:25");
  EXPECT_FALSE(ParseLogDurability("interval:0").ok());
  EXPECT_FALSE(ParseLogDurability("sometimes").ok());
  auto store = Open();
  ASSERT_TRUE(store.ok());
  EXPECT_EQ((*store)->Name(), "log");
  EXPECT_NE((*store)->Durability().find("fsync"), std::string::npos);
}

}  // namespace
}  // namespace runnel::testing
