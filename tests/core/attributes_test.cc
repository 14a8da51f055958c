// The attributes convention: each layer owns one top-level key and keeps the others.
#include "core/attributes.h"

#include <gtest/gtest.h>

#include "runnel/channel.h"
#include "runnel/registry.h"

namespace runnel {
namespace {

TEST(AttributesTest, GetAndSetTouchOnlyTheirKey) {
  auto a = attributes::Set("", "ds", R"({"ttl_s":60})");
  ASSERT_TRUE(a.ok());
  auto b = attributes::Set(*a, "runnel.channel", R"({"partition":0,"partitions":2})");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*attributes::Get(*b, "ds"), R"({"ttl_s":60})");
  EXPECT_EQ(*attributes::Get(*b, "runnel.channel"), R"({"partition":0,"partitions":2})");
  EXPECT_FALSE(attributes::Get(*b, "other")->has_value());
  auto c = attributes::Set(*b, "ds", std::nullopt);
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(attributes::Get(*c, "ds")->has_value());
  EXPECT_TRUE(attributes::Get(*c, "runnel.channel")->has_value());
}

TEST(AttributesTest, RemovingTheLastKeyLeavesEmptyAttributes) {
  // Empty attributes, not "{}": a store keeps nothing for a stream without attributes.
  auto a = attributes::Set("", "ds", R"({"ttl_s":60})");
  ASSERT_TRUE(a.ok());
  auto b = attributes::Set(*a, "ds", std::nullopt);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*b, "");
  auto c = attributes::Set("", "ds", std::nullopt);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(*c, "");
}

TEST(AttributesTest, GetEachReadsSeveralKeysInOrder) {
  auto both = attributes::GetEach(R"({"ds":{"ttl_s":60},"runnel.channel":1})",
                                  {"runnel.channel", "missing", "ds"});
  ASSERT_TRUE(both.ok());
  ASSERT_EQ(both->size(), 3u);
  EXPECT_EQ((*both)[0], std::optional<std::string>("1"));
  EXPECT_FALSE((*both)[1].has_value());
  EXPECT_EQ((*both)[2], std::optional<std::string>(R"({"ttl_s":60})"));
  auto none = attributes::GetEach("", {"a", "b"});
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->size(), 2u);
  EXPECT_FALSE((*none)[0].has_value() || (*none)[1].has_value());
  EXPECT_EQ(attributes::GetEach("[1]", {"a"}).status().code(), StatusCode::kCorruption);
}

TEST(AttributesTest, NonObjectsAndBadValuesAreRefused) {
  EXPECT_EQ(attributes::Get("not json", "k").status().code(), StatusCode::kCorruption);
  EXPECT_EQ(attributes::Get("[1,2]", "k").status().code(), StatusCode::kCorruption);
  EXPECT_EQ(attributes::Set("{}", "k", "{oops").status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(attributes::Get("", "k")->has_value());
}

TEST(AttributesTest, AChannelAdoptsAStreamAndKeepsItsOtherAttributes) {
  StreamRegistry reg;
  CreateStreamOptions options;
  options.attributes = R"({"ds":{"ttl_s":60}})";
  ASSERT_TRUE(reg.CreateStream(StreamScope::Global(), "orders:0", options).ok());
  auto ch = DurableChannel::Open("orders", 1, reg);
  ASSERT_TRUE(ch.ok()) << ch.status().ToString();
  auto info = reg.store().GetStream("global", "orders:0");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(*attributes::Get(info->spec.attributes, "ds"), R"({"ttl_s":60})");
  EXPECT_TRUE(attributes::Get(info->spec.attributes, "runnel.channel")->has_value());
  auto count = DurableChannel::StoredPartitionCount(reg, StreamScope::Global(), "orders");
  ASSERT_TRUE(count.ok());
  EXPECT_EQ(*count, 1u);
  // Reopening with another partition count is refused by name.
  auto other = DurableChannel::Open("orders", 2, reg);
  EXPECT_EQ(other.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(other.status().message().find("partition count"), std::string_view::npos);
}

}  // namespace
}  // namespace runnel
