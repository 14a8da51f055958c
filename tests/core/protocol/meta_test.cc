// The protocol's per-stream metadata (core/protocol/meta.h): what it stores, and how it reads
// what it or an older version stored.
#include "core/protocol/meta.h"

#include <gtest/gtest.h>

#include "core/attributes.h"
#include "runnel/channel.h"

namespace runnel::protocol {
namespace {

TEST(ProtocolMetaTest, E10_AStreamWithoutMetadataStoresNothing) {
  Meta m;
  EXPECT_EQ(m.Serialize(), "{}");
  EXPECT_FALSE(m.Stored().has_value());
  Meta parsed = Meta::Parse("");
  EXPECT_FALSE(parsed.ttl_s || parsed.expires_at_ms || parsed.stream_seq || parsed.fork_ns);
  EXPECT_FALSE(parsed.soft_deleted || parsed.creating || parsed.channel);
}

TEST(ProtocolMetaTest, E10_EveryFieldRoundTripsThroughTheAttributes) {
  Meta m;
  m.ttl_s = 60;
  m.expires_at = "2030-01-02T03:04:05Z";
  m.expires_at_ms = 1893553445000;
  m.stream_seq = "0007";
  m.fork_ns = "tenant:a";
  m.fork_name = "source";
  m.fork_position = 5;
  m.fork_sub_offset = 2;
  m.fork_source_id = 17;
  m.fork_ids = {3, 9};
  m.fork_refs = 1;
  m.soft_deleted = true;
  m.creating = true;
  m.touched_ms = 1234;
  auto attrs = attributes::Set("", Meta::kAttributeKey, m.Stored());
  ASSERT_TRUE(attrs.ok());
  Meta back = Meta::Parse(*attrs);
  EXPECT_EQ(back.ttl_s, m.ttl_s);
  EXPECT_EQ(back.expires_at, m.expires_at);
  EXPECT_EQ(back.expires_at_ms, m.expires_at_ms);
  EXPECT_EQ(back.stream_seq, m.stream_seq);
  EXPECT_EQ(back.fork_ns, m.fork_ns);
  EXPECT_EQ(back.fork_name, m.fork_name);
  EXPECT_EQ(back.fork_position, 5u);
  EXPECT_EQ(back.fork_sub_offset, 2u);
  EXPECT_EQ(back.fork_source_id, m.fork_source_id);
  EXPECT_EQ(back.fork_ids, m.fork_ids);
  EXPECT_EQ(back.fork_refs, 1u);
  EXPECT_TRUE(back.soft_deleted);
  EXPECT_TRUE(back.creating);
  EXPECT_EQ(back.touched_ms, 1234u);
  EXPECT_FALSE(back.channel);
}

TEST(ProtocolMetaTest, E10_ForksCountListedAndCountedReferences) {
  Meta m;
  EXPECT_FALSE(m.HasForks());
  m.fork_ids = {4, 8};
  EXPECT_EQ(m.Forks(), 2u);
  m.fork_refs = 3;  // forks from before sources listed their forks
  EXPECT_EQ(m.Forks(), 5u);
  EXPECT_TRUE(m.HasForks());
  m.fork_ids.clear();
  m.fork_refs = 0;
  EXPECT_FALSE(m.HasForks());
}

TEST(ProtocolMetaTest, E3_TheChannelKeyMarksAChannelStreamWhateverTheProtocolKeyHolds) {
  auto attrs = attributes::Set("", DurableChannel::kAttributeKey, R"({"partition":0})");
  ASSERT_TRUE(attrs.ok());
  auto with_ds = attributes::Set(*attrs, Meta::kAttributeKey, R"({"ttl_s":5})");
  ASSERT_TRUE(with_ds.ok());
  Meta m = Meta::Parse(*with_ds);
  EXPECT_TRUE(m.channel);
  EXPECT_EQ(m.ttl_s, 5u);
  EXPECT_FALSE(Meta::Parse("").channel);
}

TEST(ProtocolMetaTest, E10_UnreadableMetadataReadsAsNoneButKeepsOtherLayersKeys) {
  auto attrs = attributes::Set("", DurableChannel::kAttributeKey, R"({"partition":0})");
  ASSERT_TRUE(attrs.ok());
  // A field of the wrong type: the whole "ds" value reads as absent.
  auto bad = attributes::Set(*attrs, Meta::kAttributeKey, R"({"ttl_s":"sixty","creating":true})");
  ASSERT_TRUE(bad.ok());
  Meta m = Meta::Parse(*bad);
  EXPECT_FALSE(m.ttl_s.has_value());
  EXPECT_FALSE(m.creating);
  EXPECT_TRUE(m.channel);
  // Attributes that are no JSON object at all read as nothing.
  Meta none = Meta::Parse("not json");
  EXPECT_FALSE(none.channel || none.ttl_s);
}

}  // namespace
}  // namespace runnel::protocol
