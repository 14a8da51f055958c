// DurableChannel rules without injected faults: partitions and keys (K), idempotency keys (I),
// recovery (V) and flush/config (F). Rule ids are in the test names.
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "channel/channel_suites.h"
#include "channel/channel_test_base.h"

namespace runnel::testing {
namespace {

constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();

using ChannelRulesTest = ChannelTestBase;

uint64_t FirstByte(const MessageEnvelope& e) {
  return e.payload.empty() ? 0 : static_cast<unsigned char>(e.payload[0]);
}

// ---- K: partitions and partition keys ----

TEST_P(ChannelRulesTest, K1_ZeroPartitionsIsConfigErrorInEveryConstructor) {
  auto expect_config_error = [](const Status& s) {
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
    EXPECT_EQ(s.message().rfind("ConfigError: ", 0), 0u) << s.ToString();
  };
  expect_config_error(DurableChannel::Open("c", 0, registry()).status());
  expect_config_error(DurableChannel::WithPartitionKey("c", 0, registry(), FirstByte).status());
  expect_config_error(DurableChannel::FromRecoveredSequences("c", 0, registry(), {}).status());
  DurabilityConfig config;
  config.partition_count = 0;
  expect_config_error(DurableChannel::FromConfig("c", config, registry()).status());
  expect_config_error(EphemeralChannel::Create("c", 0).status());
  config.mode = DurabilityMode::kEphemeral;
  expect_config_error(EphemeralChannel::FromConfig("c", config).status());
  EXPECT_FALSE(registry().Exists(StreamScope::Global(), "c:0"));
}

TEST_P(ChannelRulesTest, K2_PartitionForIsZeroWithOnePartitionOrNoKeyFunction) {
  auto single = DurableChannel::WithPartitionKey("one", 1, registry(), FirstByte);
  ASSERT_TRUE(single.ok());
  auto no_fn = DurableChannel::Open("nofn", 4, registry());
  ASSERT_TRUE(no_fn.ok());
  for (const char* p : {"\x07", "\x03", "z"}) {
    EXPECT_EQ(single->PartitionFor(Env(p)), 0u);
    EXPECT_EQ(no_fn->PartitionFor(Env(p)), 0u);
  }
}

TEST_P(ChannelRulesTest, K2_PartitionForIsKeyModCountAlwaysBelowCountAndDoesNoIo) {
  uint64_t next_key = 0;
  auto ch = DurableChannel::WithPartitionKey(
      "mod", 4, registry(), [&next_key](const MessageEnvelope&) { return next_key; });
  ASSERT_TRUE(ch.ok());
  const uint64_t calls = faulty().calls();
  next_key = 7;
  EXPECT_EQ(ch->PartitionFor(Env("x")), 3u);
  for (uint64_t k : {uint64_t{0}, uint64_t{1}, uint64_t{7}, kMax - 1, kMax}) {
    next_key = k;
    EXPECT_LT(ch->PartitionFor(Env("x")), 4u) << k;
    EXPECT_EQ(ch->PartitionFor(Env("x")), k % 4) << k;
  }
  EXPECT_EQ(faulty().calls(), calls) << "PartitionFor touched the store";
}

TEST_P(ChannelRulesTest, K3_StreamKeyIsChannelColonIndexAndPartitionsExistAsStreams) {
  auto ch = DurableChannel::Open("orders", 3, registry());
  ASSERT_TRUE(ch.ok()) << ch.status().ToString();
  EXPECT_EQ(ch->StreamKeyFor(0), "orders:0");
  EXPECT_EQ(ch->StreamKeyFor(2), "orders:2");
  for (const char* name : {"orders:0", "orders:1", "orders:2"}) {
    EXPECT_TRUE(registry().Exists(StreamScope::Global(), name)) << name;
  }
  EXPECT_FALSE(registry().Exists(StreamScope::Global(), "orders:3"));
}

TEST_P(ChannelRulesTest, K3_PartitionsLiveInTheChosenScope) {
  ChannelOptions options;
  options.scope = StreamScope::Tenant("acme");
  auto ch = DurableChannel::Open("orders", 1, registry(), options);
  ASSERT_TRUE(ch.ok());
  ASSERT_TRUE(ch->Publish(Env("a")).ok());
  EXPECT_TRUE(registry().Exists(StreamScope::Tenant("acme"), "orders:0"));
  EXPECT_FALSE(registry().Exists(StreamScope::Global(), "orders:0"));
  EXPECT_EQ(ReadAll("orders:0", StreamScope::Tenant("acme")).size(), 1u);
}

TEST_P(ChannelRulesTest, K4_ThreePublishesOnTwoPartitionsWithoutKeyFunction) {
  auto ch = DurableChannel::Open("plain", 2, registry());
  ASSERT_TRUE(ch.ok());
  EXPECT_EQ(ch->NextSequences(), (std::vector<uint64_t>{0, 0}));
  const size_t before = faulty().expected_offsets().size();
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(ch->Publish(Env("m" + std::to_string(i))).ok());
  EXPECT_EQ(ch->NextSequences(), (std::vector<uint64_t>{3, 0}));
  auto expected = faulty().expected_offsets();
  ASSERT_EQ(expected.size(), before + 3);
  // Sequences 0, 1, 2 are offsets 1, 2, 3.
  EXPECT_EQ(expected[before], 1u);
  EXPECT_EQ(expected[before + 1], 2u);
  EXPECT_EQ(expected[before + 2], 3u);
}

TEST_P(ChannelRulesTest, K4_FirstPayloadByteKeysSpreadOverPartitions) {
  auto ch = DurableChannel::WithPartitionKey("independent", 2, registry(), FirstByte);
  ASSERT_TRUE(ch.ok());
  auto a =
      ch->PublishWithReceipt(Env("\x02"
                                 "a"));
  auto b =
      ch->PublishWithReceipt(Env("\x04"
                                 "b"));
  auto c =
      ch->PublishWithReceipt(Env("\x01"
                                 "c"));
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(ch->NextSequences(), (std::vector<uint64_t>{2, 1}));
  EXPECT_EQ(c->partition, 1u);
  EXPECT_EQ(c->sequence, 0u);
  EXPECT_EQ(c->offset, 1u);
  EXPECT_EQ(ch->StreamKeyFor(c->partition), "independent:1");
  EXPECT_EQ(ReadAll("independent:1").size(), 1u);
}

TEST_P(ChannelRulesTest, K5_NextExpectedSequenceOfMissingPartitionIsNone) {
  auto ch = DurableChannel::Open("k5", 2, registry());
  ASSERT_TRUE(ch.ok());
  EXPECT_EQ(ch->NextExpectedSequence(1), 0u);
  EXPECT_FALSE(ch->NextExpectedSequence(2).has_value());
  EXPECT_FALSE(ch->NextExpectedSequence(kMax).has_value());
}

TEST_P(ChannelRulesTest, K6_PublishReturnsPositionAndStoresTheEncodedEnvelope) {
  auto ch = DurableChannel::Open("k6", 1, registry());
  ASSERT_TRUE(ch.ok());
  MessageEnvelope e = Env("payload", "idem-1", "user-9");
  e.causal_context = CausalContext{"parent", 3};
  auto first = ch->Publish(Env("zero"));
  auto offset = ch->Publish(e);
  ASSERT_TRUE(first.ok() && offset.ok());
  EXPECT_EQ(*first, 1u);
  EXPECT_EQ(*offset, 2u);
  auto events = ReadAll("k6:0");
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1].offset, 2u);
  EXPECT_EQ(events[1].payload, EncodeEnvelope(e));
  EXPECT_EQ(events[1].key, std::optional<std::string>("user-9"));
  auto decoded = DecodeEnvelope(events[1].payload);
  ASSERT_TRUE(decoded.ok());
  EXPECT_EQ(*decoded, e);
}

TEST_P(ChannelRulesTest, K6_EnvelopeWithInvalidUtf8IsRefusedAndNothingIsWritten) {
  auto ch = DurableChannel::Open("utf", 1, registry());
  ASSERT_TRUE(ch.ok());
  MessageEnvelope e = Env("p");
  e.publisher_id = std::string("\xC0\x80", 2);
  const uint64_t appends = faulty().appends();
  auto r = ch->Publish(e);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(faulty().appends(), appends);
  EXPECT_FALSE(ch->PendingAppend().has_value());
}

TEST_P(ChannelRulesTest, K7_PartitionsAreReadableStreamsWithGroups) {
  auto ch = DurableChannel::WithPartitionKey("k7", 2, registry(), HashKeyPartitioner);
  ASSERT_TRUE(ch.ok());
  std::vector<PublishReceipt> receipts;
  for (int i = 0; i < 6; ++i) {
    auto r = ch->PublishWithReceipt(Env("m" + std::to_string(i), std::nullopt, "user-1"));
    ASSERT_TRUE(r.ok());
    receipts.push_back(*r);
  }
  // One key: one partition, in publish order.
  for (const auto& r : receipts) EXPECT_EQ(r.partition, receipts[0].partition);
  const std::string stream = ch->StreamKeyFor(receipts[0].partition);
  auto events = ReadAll(stream);
  ASSERT_EQ(events.size(), 6u);
  for (size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(events[i].offset, i + 1);
    EXPECT_EQ(DecodeEnvelope(events[i].payload)->payload, "m" + std::to_string(i));
  }
  ASSERT_TRUE(registry().Ack(StreamScope::Global(), stream, "g", 4).ok());
  auto next = registry().ReadNext(StreamScope::Global(), stream, "g", 10);
  ASSERT_TRUE(next.ok());
  ASSERT_EQ(next->size(), 2u);
  EXPECT_EQ((*next)[0].offset, 5u);
}

TEST_P(ChannelRulesTest, K8_EphemeralChannelMakesZeroStoreCalls) {
  const uint64_t calls = faulty().calls();
  auto ch = EphemeralChannel::Create("eph", 2, FirstByte);
  ASSERT_TRUE(ch.ok());
  auto a =
      ch->Publish(Env("\x01"
                      "a"));
  auto b =
      ch->Publish(Env("\x01"
                      "b"));
  auto c =
      ch->Publish(Env("\x02"
                      "c"));
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(*a, 1u);
  EXPECT_EQ(*b, 2u);
  EXPECT_EQ(*c, 1u);
  EXPECT_EQ(ch->NextExpectedSequence(1), 2u);
  EXPECT_FALSE(ch->NextExpectedSequence(2).has_value());
  EXPECT_EQ(ch->Partition(1).size(), 2u);
  EXPECT_EQ(faulty().calls(), calls);
  EXPECT_FALSE(registry().Exists(StreamScope::Global(), "eph:0"));
}

// ---- I: idempotency keys ----

TEST_P(ChannelRulesTest, I1_FindIdempotencyKeyReportsCommittedPositionOrAbsent) {
  auto ch = DurableChannel::WithPartitionKey("i1", 2, registry(), FirstByte);
  ASSERT_TRUE(ch.ok());
  ASSERT_TRUE(ch->Publish(Env("\x01"
                              "x",
                              "a"))
                  .ok());
  ASSERT_TRUE(ch->Publish(Env("\x01"
                              "y",
                              "b"))
                  .ok());
  auto b = ch->FindIdempotencyKey("b");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*b, AppendResolution::Committed(1, 1));
  EXPECT_EQ(b->offset, 2u);
  auto none = ch->FindIdempotencyKey("zzz");
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->kind, AppendResolution::Kind::kAbsent);
  // Reading partition 1 from slot 2 cannot see slot 1.
  auto from = ch->FindIdempotencyKey("b", {0, 2});
  ASSERT_TRUE(from.ok());
  EXPECT_FALSE(from->committed());
  auto scan = ch->GetKeyLookup().Find("b", {0, 2});
  ASSERT_TRUE(scan.ok());
  EXPECT_FALSE(scan->committed());
}

TEST_P(ChannelRulesTest, I1_IndexAgreesWithAScanOfThePartitions) {
  auto ch = DurableChannel::WithPartitionKey("agree", 3, registry(), FirstByte);
  ASSERT_TRUE(ch.ok());
  std::vector<std::string> keys;
  for (int i = 0; i < 60; ++i) {
    std::string key = "key-" + std::to_string(i);
    keys.push_back(key);
    std::string payload(1, static_cast<char>(i % 5));
    if (i % 4 == 0) {
      // Another writer's row, not written through this channel.
      MessageEnvelope e = Env(payload + "foreign", key);
      AppendRaw("agree:" + std::to_string(i % 3), EncodeEnvelope(e));
    } else {
      ASSERT_TRUE(ch->Publish(Env(payload, key)).ok());
    }
  }
  keys.push_back("never-published");
  KeyLookup scan = ch->GetKeyLookup();
  EXPECT_EQ(scan.stream_keys(), (std::vector<std::string>{"agree:0", "agree:1", "agree:2"}));
  for (const std::string& key : keys) {
    auto indexed = ch->FindIdempotencyKey(key);
    auto scanned = scan.Find(key, {});
    ASSERT_TRUE(indexed.ok() && scanned.ok()) << key;
    EXPECT_EQ(*indexed, *scanned) << key;
  }
}

TEST_P(ChannelRulesTest, I2_FailedReadNeverYieldsAbsent) {
  auto ch = DurableChannel::Open("i2", 2, registry());
  ASSERT_TRUE(ch.ok());
  // A row this channel has not seen, so the lookup must read the partition.
  AppendRaw("i2:1", EncodeEnvelope(Env("theirs", "their-key")));
  faulty().FailReads(1);
  auto indexed = ch->FindIdempotencyKey("missing");
  ASSERT_FALSE(indexed.ok());
  EXPECT_EQ(indexed.status().code(), StatusCode::kIOError);
  faulty().FailReads(1);
  auto scanned = ch->GetKeyLookup().Find("missing", {});
  ASSERT_FALSE(scanned.ok());
  EXPECT_EQ(scanned.status().code(), StatusCode::kIOError);
  // And once reads work, the answer is a definite Absent.
  auto later = ch->FindIdempotencyKey("missing");
  ASSERT_TRUE(later.ok());
  EXPECT_FALSE(later->committed());
  auto theirs = ch->FindIdempotencyKey("their-key");
  ASSERT_TRUE(theirs.ok());
  EXPECT_EQ(*theirs, AppendResolution::Committed(1, 0));
}

TEST_P(ChannelRulesTest, I4_WithAllPartitionChecksAKeyCommittedElsewhereByAnotherInstanceIsFound) {
  ChannelOptions options;
  options.partition_key = FirstByte;
  options.check_all_partitions_for_keys = true;
  auto a = DurableChannel::Open("wide", 4, registry(), options);
  auto b = DurableChannel::Open("wide", 4, registry(), options);
  ASSERT_TRUE(a.ok() && b.ok());
  auto original = a->PublishWithReceipt(Env("\x01", "k"));
  ASSERT_TRUE(original.ok());
  // b routes the retry to another partition; its index is caught up on all of them first.
  auto retry = b->PublishWithReceipt(Env("\x02", "k"));
  ASSERT_TRUE(retry.ok()) << retry.status().ToString();
  EXPECT_TRUE(retry->duplicate);
  EXPECT_EQ(retry->partition, 1u);
  EXPECT_TRUE(ReadAll("wide:2").empty());
}

TEST_P(ChannelRulesTest, I2_UndecodableRowFailsTheLookupInsteadOfBeingSkipped) {
  auto ch = DurableChannel::Open("i2c", 1, registry());
  ASSERT_TRUE(ch.ok());
  AppendRaw("i2c:0", "not an envelope");
  auto indexed = ch->FindIdempotencyKey("k");
  ASSERT_FALSE(indexed.ok());
  EXPECT_EQ(indexed.status().code(), StatusCode::kCorruption);
  auto scanned = ch->GetKeyLookup().Find("k", {});
  ASSERT_FALSE(scanned.ok());
  EXPECT_EQ(scanned.status().code(), StatusCode::kCorruption);
}

TEST_P(ChannelRulesTest, I4_CommittedKeyReturnsOriginalPositionAndAppendsNothing) {
  auto ch = DurableChannel::Open("i4", 1, registry());
  ASSERT_TRUE(ch.ok());
  ASSERT_TRUE(ch->Publish(Env("before")).ok());
  auto first = ch->PublishWithReceipt(Env("body", "once"));
  ASSERT_TRUE(first.ok());
  EXPECT_FALSE(first->duplicate);
  const uint64_t appends = faulty().appends();
  auto second = ch->PublishWithReceipt(Env("body again", "once"));
  ASSERT_TRUE(second.ok());
  EXPECT_TRUE(second->duplicate);
  EXPECT_EQ(second->offset, first->offset);
  EXPECT_EQ(second->partition, first->partition);
  EXPECT_EQ(faulty().appends(), appends);
  EXPECT_EQ(ReadAll("i4:0").size(), 2u);
}

TEST_P(ChannelRulesTest, I4_KeyCommittedInAnotherPartitionIsFound) {
  auto ch = DurableChannel::WithPartitionKey("i4p", 4, registry(), FirstByte);
  ASSERT_TRUE(ch.ok());
  auto first = ch->PublishWithReceipt(Env("\x01", "same"));
  auto second = ch->PublishWithReceipt(Env("\x02", "same"));
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_TRUE(second->duplicate);
  EXPECT_EQ(second->partition, 1u);
  EXPECT_TRUE(ReadAll("i4p:2").empty());
}

TEST_P(ChannelRulesTest, I4_KeySurvivesReopeningTheChannel) {
  {
    auto ch = DurableChannel::WithPartitionKey("i4r", 2, registry(), FirstByte);
    ASSERT_TRUE(ch.ok());
    ASSERT_TRUE(ch->Publish(Env("\x01"
                                "a",
                                "restart-key"))
                    .ok());
  }
  auto reopened = DurableChannel::WithPartitionKey("i4r", 2, registry(), FirstByte);
  ASSERT_TRUE(reopened.ok());
  auto again =
      reopened->PublishWithReceipt(Env("\x01"
                                       "a",
                                       "restart-key"));
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->duplicate);
  EXPECT_EQ(again->offset, 1u);
  EXPECT_EQ(ReadAll("i4r:1").size(), 1u);
}

TEST_P(ChannelRulesTest, I4_KeyCommittedByAnotherInstanceAfterThisOneOpenedIsFound) {
  auto a = DurableChannel::WithPartitionKey("shared", 2, registry(), FirstByte);
  auto b = DurableChannel::WithPartitionKey("shared", 2, registry(), FirstByte);
  ASSERT_TRUE(a.ok() && b.ok());
  auto original =
      a->PublishWithReceipt(Env("\x01"
                                "m",
                                "k"));
  ASSERT_TRUE(original.ok());
  // b's index predates the row; its guarded append conflicts, it reads the gap and finds it.
  auto retry =
      b->PublishWithReceipt(Env("\x01"
                                "m",
                                "k"));
  ASSERT_TRUE(retry.ok()) << retry.status().ToString();
  EXPECT_TRUE(retry->duplicate);
  EXPECT_EQ(retry->offset, original->offset);
  EXPECT_EQ(ReadAll("shared:1").size(), 1u);
  EXPECT_EQ(b->NextExpectedSequence(1), 1u);
}

TEST_P(ChannelRulesTest, I5_DistinctKeysAreNeverTakenForEachOther) {
  // Not applicable as such: the index is keyed by the whole key, not a hash, so there is no
  // hashed dedup stream to collide in (no DedupCollision). This pins that property.
  auto ch = DurableChannel::Open("i5", 1, registry());
  ASSERT_TRUE(ch.ok());
  auto a = ch->PublishWithReceipt(Env("a", "key"));
  auto b = ch->PublishWithReceipt(Env("b", "key "));
  auto c = ch->PublishWithReceipt(Env("c", std::string("key\0", 4)));
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_FALSE(b->duplicate);
  EXPECT_FALSE(c->duplicate);
  EXPECT_EQ(ReadAll("i5:0").size(), 3u);
}

// ---- V: recovery ----

TEST_P(ChannelRulesTest, V1_RecoveredSequencesMustMatchThePartitionCount) {
  EXPECT_EQ(DurableChannel::FromRecoveredSequences("v1", 2, registry(), {1}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(DurableChannel::FromRecoveredSequences("v1", 2, registry(), {1, 2, 3}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(DurableChannel::FromRecoveredSequences("v1", 0, registry(), {}).status().code(),
            StatusCode::kInvalidArgument);
  auto ok = DurableChannel::FromRecoveredSequences("v1", 2, registry(), {0, 0});
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->NextSequences(), (std::vector<uint64_t>{0, 0}));
}

TEST_P(ChannelRulesTest, V1_StaleRecoveredSequencesAreCorrectedByTheFirstConflict) {
  {
    auto ch = DurableChannel::Open("v1s", 1, registry());
    ASSERT_TRUE(ch.ok());
    for (int i = 0; i < 5; ++i) ASSERT_TRUE(ch->Publish(Env("m")).ok());
  }
  auto low = DurableChannel::FromRecoveredSequences("v1s", 1, registry(), {2});
  ASSERT_TRUE(low.ok());
  EXPECT_EQ(low->NextSequences(), (std::vector<uint64_t>{2}));
  auto r = low->Publish(Env("after"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, 6u);
  auto high = DurableChannel::FromRecoveredSequences("v1s", 1, registry(), {50});
  ASSERT_TRUE(high.ok());
  auto h = high->Publish(Env("after high"));
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(*h, 7u);
  EXPECT_EQ(ReadAll("v1s:0").size(), 7u);
}

TEST_P(ChannelRulesTest, V2_ReopenContinuesFromTheHighestStoredPosition) {
  {
    auto ch = DurableChannel::WithPartitionKey("v2", 3, registry(), FirstByte);
    ASSERT_TRUE(ch.ok());
    for (int i = 0; i < 10; ++i) {
      ASSERT_TRUE(ch->Publish(Env(std::string(1, static_cast<char>(i % 2)))).ok());
    }
    EXPECT_EQ(ch->NextSequences(), (std::vector<uint64_t>{5, 5, 0}));
  }
  auto reopened = DurableChannel::WithPartitionKey("v2", 3, registry(), FirstByte);
  ASSERT_TRUE(reopened.ok());
  EXPECT_EQ(reopened->NextSequences(), (std::vector<uint64_t>{5, 5, 0}));
  auto r = reopened->PublishWithReceipt(Env(std::string(1, '\0')));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->offset, 6u);
}

TEST_P(ChannelRulesTest, V2_RecoveryPagesThroughMoreThanOneReadBatch) {
  const int n = static_cast<int>(DurableChannel::kReadBatchSize) * 2 + 100;
  {
    auto ch = DurableChannel::Open("pages", 1, registry());
    ASSERT_TRUE(ch.ok());
    for (int i = 0; i < n; ++i) {
      ASSERT_TRUE(ch->Publish(Env("m", "k" + std::to_string(i))).ok());
    }
  }
  // Without its head checkpoint (V3) the channel walks the whole partition.
  auto checkpoint = faulty().inner().GetStream(StreamScope::Global().Label(), "pages:checkpoint");
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status().ToString();
  ASSERT_TRUE(faulty().inner().DeleteStream(checkpoint->id).ok());
  const uint64_t reads = faulty().reads();
  auto reopened = DurableChannel::Open("pages", 1, registry());
  ASSERT_TRUE(reopened.ok());
  EXPECT_FALSE(reopened->OpenedFromCheckpoint());
  EXPECT_EQ(reopened->NextSequences(), (std::vector<uint64_t>{static_cast<uint64_t>(n)}));
  EXPECT_GE(faulty().reads() - reads, 3u);
  auto last = reopened->PublishWithReceipt(Env("m", "k" + std::to_string(n - 1)));
  ASSERT_TRUE(last.ok());
  EXPECT_TRUE(last->duplicate);
  EXPECT_EQ(last->offset, static_cast<uint64_t>(n));
}

TEST_P(ChannelRulesTest, V2_ReopeningWithAnotherPartitionCountIsConfigError) {
  ASSERT_TRUE(DurableChannel::Open("count", 3, registry()).ok());
  auto fewer = DurableChannel::Open("count", 2, registry());
  ASSERT_FALSE(fewer.ok());
  EXPECT_EQ(fewer.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(fewer.status().message().find("partition count"), std::string_view::npos);
  EXPECT_FALSE(DurableChannel::Open("count", 4, registry()).ok());
  EXPECT_TRUE(DurableChannel::Open("count", 3, registry()).ok());
}

TEST_P(ChannelRulesTest, V2_StoredPartitionCountLetsACallerReopenWithoutKnowingIt) {
  EXPECT_EQ(DurableChannel::StoredPartitionCount(registry(), StreamScope::Global(), "later")
                .status()
                .code(),
            StatusCode::kNotFound);
  ASSERT_TRUE(DurableChannel::Open("later", 12, registry()).ok());
  auto count = DurableChannel::StoredPartitionCount(registry(), StreamScope::Global(), "later");
  ASSERT_TRUE(count.ok()) << count.status().ToString();
  EXPECT_EQ(*count, 12u);
  ASSERT_TRUE(registry().CreateStream(StreamScope::Global(), "plain:0", StreamRetention{}).ok());
  EXPECT_EQ(DurableChannel::StoredPartitionCount(registry(), StreamScope::Global(), "plain")
                .status()
                .code(),
            StatusCode::kInvalidArgument);
}

TEST_P(ChannelRulesTest, V2_AnUnrelatedStreamOfThatNameIsRefused) {
  CreateStreamOptions options;
  options.attributes = "ttl=60";
  ASSERT_TRUE(registry().CreateStream(StreamScope::Global(), "taken:0", options).ok());
  auto ch = DurableChannel::Open("taken", 1, registry());
  ASSERT_FALSE(ch.ok());
  EXPECT_EQ(ch.status().code(), StatusCode::kInvalidArgument);
}

TEST_P(ChannelRulesTest, V2_OverflowAtTheLargestSequenceIsRefusedWithoutAnAppend) {
  CreateStreamOptions options;
  options.first_offset = kMax - 1;  // the last offset a store can assign
  ASSERT_TRUE(registry().CreateStream(StreamScope::Global(), "edge:0", options).ok());
  auto ch = DurableChannel::Open("edge", 1, registry());
  ASSERT_TRUE(ch.ok()) << ch.status().ToString();
  EXPECT_EQ(ch->NextSequences(), (std::vector<uint64_t>{kMax - 2}));
  auto last = ch->Publish(Env("last"));
  ASSERT_TRUE(last.ok()) << last.status().ToString();
  EXPECT_EQ(*last, kMax - 1);
  const uint64_t appends = faulty().appends();
  auto over = ch->Publish(Env("one too many"));
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(over.status().message().rfind("Overflow: ", 0), 0u);
  EXPECT_EQ(faulty().appends(), appends);
  EXPECT_FALSE(ch->PendingAppend().has_value());
  ASSERT_TRUE(ch->LastError().has_value());
  EXPECT_EQ(ch->LastError()->kind, ChannelError::Kind::kOverflow);
}

TEST_P(ChannelRulesTest, V4_NextSequenceSurvivesRetentionEmptyingThePartition) {
  {
    auto ch = DurableChannel::Open("v4", 1, registry());
    ASSERT_TRUE(ch.ok());
    StreamRetention keep_one;
    keep_one.max_events = 1;
    ASSERT_TRUE(registry().SetRetention(StreamScope::Global(), "v4:0", keep_one).ok());
    for (int i = 0; i < 5; ++i) ASSERT_TRUE(ch->Publish(Env("m", "k" + std::to_string(i))).ok());
    ASSERT_TRUE(registry().Prune(StreamScope::Global(), "v4:0", 5).ok());
    EXPECT_TRUE(ReadAll("v4:0").empty());
  }
  auto reopened = DurableChannel::Open("v4", 1, registry());
  ASSERT_TRUE(reopened.ok());
  EXPECT_EQ(reopened->NextSequences(), (std::vector<uint64_t>{5}));
  auto r = reopened->Publish(Env("after"));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 6u);
}

TEST_P(ChannelRulesTest, V5_ConsumerOffsetsOnPartitionsOutliveTheChannel) {
  {
    auto ch = DurableChannel::Open("v5", 1, registry());
    ASSERT_TRUE(ch.ok());
    for (int i = 0; i < 4; ++i) ASSERT_TRUE(ch->Publish(Env("m")).ok());
    ASSERT_TRUE(registry().Ack(StreamScope::Global(), "v5:0", "worker", 3).ok());
  }
  auto reopened = DurableChannel::Open("v5", 1, registry());
  ASSERT_TRUE(reopened.ok());
  auto offset = registry().GetOffset(StreamScope::Global(), "v5:0", "worker");
  ASSERT_TRUE(offset.ok());
  EXPECT_EQ(*offset, 3u);
  auto next = registry().ReadNext(StreamScope::Global(), "v5:0", "worker", 10);
  ASSERT_TRUE(next.ok());
  ASSERT_EQ(next->size(), 1u);
  EXPECT_EQ((*next)[0].offset, 4u);
}

TEST_P(ChannelRulesTest, V6_AbsentCursorReplaysFromTheStartToTheHead) {
  auto ch = DurableChannel::Open("v6", 1, registry());
  ASSERT_TRUE(ch.ok());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(ch->Publish(Env("m" + std::to_string(i))).ok());
  auto offset = registry().GetOffset(StreamScope::Global(), "v6:0", "fresh");
  ASSERT_TRUE(offset.ok());
  EXPECT_EQ(*offset, 0u);
  auto all = registry().ReadNext(StreamScope::Global(), "v6:0", "fresh", 100);
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 3u);
  EXPECT_EQ(all->back().offset, ch->NextExpectedSequence(0));
}

TEST_P(ChannelRulesTest, V7_CorruptRowIsEnvelopeErrorNamingStreamAndSequence) {
  auto ch = DurableChannel::Open("v7", 1, registry());
  ASSERT_TRUE(ch.ok());
  ASSERT_TRUE(ch->Publish(Env("good")).ok());
  AppendRaw("v7:0", EncodeEnvelope(Env("good")) + "trailing");
  auto reopened = DurableChannel::Open("v7", 1, registry());
  ASSERT_FALSE(reopened.ok());
  EXPECT_EQ(reopened.status().code(), StatusCode::kCorruption);
  EXPECT_EQ(
      reopened.status().message().rfind("EnvelopeError: stream v7:0 sequence 1 (offset 2)", 0), 0u)
      << reopened.status().ToString();
}

// ---- F: durability config and flush ----

TEST_P(ChannelRulesTest, F1_DurabilityConfigValidation) {
  DurabilityConfig ok;
  EXPECT_TRUE(ok.Validate().ok());
  DurabilityConfig zero = ok;
  zero.partition_count = 0;
  EXPECT_EQ(zero.Validate().code(), StatusCode::kInvalidArgument);
  DurabilityConfig dedup = ok;
  dedup.mode = DurabilityMode::kDurableDedup;
  EXPECT_EQ(dedup.Validate().code(), StatusCode::kInvalidArgument);
  dedup.dedup_ttl_ms = 1;
  EXPECT_TRUE(dedup.Validate().ok());
  DurabilityConfig batch = ok;
  batch.checkpoint_policy = CheckpointPolicy::PerBatch(0);
  EXPECT_EQ(batch.Validate().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(batch.Validate().message().rfind("ConfigError: ", 0), 0u);
  batch.checkpoint_policy = CheckpointPolicy::PerBatch(1);
  EXPECT_TRUE(batch.Validate().ok());
  EXPECT_FALSE(DurableChannel::FromConfig("f1", zero, registry()).ok());
  EXPECT_FALSE(
      DurableChannel::FromConfig("f1", DurabilityConfig{DurabilityMode::kDurableDedup}, registry())
          .ok());
}

TEST_P(ChannelRulesTest, F2_ModesAreCheckedByEachChannelKind) {
  DurabilityConfig ephemeral;
  ephemeral.mode = DurabilityMode::kEphemeral;
  ephemeral.partition_count = 2;
  auto durable = DurableChannel::FromConfig("f2", ephemeral, registry());
  ASSERT_FALSE(durable.ok());
  EXPECT_EQ(durable.status().message().rfind("ConfigError: ", 0), 0u);
  EXPECT_FALSE(registry().Exists(StreamScope::Global(), "f2:0"));
  auto eph = EphemeralChannel::FromConfig("f2", ephemeral);
  ASSERT_TRUE(eph.ok());
  EXPECT_EQ(eph->PartitionCount(), 2u);
  for (DurabilityMode mode : {DurabilityMode::kDurable, DurabilityMode::kDurableConversation}) {
    DurabilityConfig config;
    config.mode = mode;
    config.partition_count = 2;
    EXPECT_FALSE(EphemeralChannel::FromConfig("f2", config).ok());
    auto ch = DurableChannel::FromConfig("f2", config, registry());
    ASSERT_TRUE(ch.ok()) << ch.status().ToString();
    EXPECT_EQ(ch->PartitionCount(), 2u);
  }
}

TEST_P(ChannelRulesTest, F3_FlushStoreCallsStoreFlushAndPropagatesItsError) {
  auto ch = DurableChannel::Open("f3", 1, registry());
  ASSERT_TRUE(ch.ok());
  ASSERT_TRUE(ch->Publish(Env("a")).ok());
  const uint64_t flushes = faulty().flushes();
  EXPECT_TRUE(ch->FlushStore().ok());
  EXPECT_EQ(faulty().flushes(), flushes + 1);
  EXPECT_EQ(ch->PublishesSinceFlush(), 0u);
  ASSERT_TRUE(ch->Publish(Env("b")).ok());
  faulty().FailFlushes(1);
  Status failed = ch->FlushStore();
  EXPECT_EQ(failed.code(), StatusCode::kIOError);
  EXPECT_EQ(ch->PublishesSinceFlush(), 1u);
  // After a successful flush, acknowledged appends are visible to a reopened channel.
  ASSERT_TRUE(ch->FlushStore().ok());
  auto reopened = DurableChannel::Open("f3", 1, registry());
  ASSERT_TRUE(reopened.ok());
  EXPECT_EQ(reopened->NextSequences(), (std::vector<uint64_t>{2}));
}

TEST_P(ChannelRulesTest, F4_CheckpointPolicyDecidesWhenTheStoreIsFlushed) {
  struct Case {
    CheckpointPolicy policy;
    uint64_t flushes_after_seven;
  };
  const Case cases[] = {{CheckpointPolicy::PerMessage(), 7},
                        {CheckpointPolicy::PerBatch(3), 2},
                        {CheckpointPolicy::ExplicitFlush(), 0}};
  int n = 0;
  for (const Case& c : cases) {
    ChannelOptions options;
    options.checkpoint_policy = c.policy;
    auto ch = DurableChannel::Open("f4-" + std::to_string(n++), 1, registry(), options);
    ASSERT_TRUE(ch.ok());
    const uint64_t before = faulty().flushes();
    for (int i = 0; i < 7; ++i) ASSERT_TRUE(ch->Publish(Env("m")).ok());
    EXPECT_EQ(faulty().flushes() - before, c.flushes_after_seven) << n;
    EXPECT_EQ(ch->FlushCount(), c.flushes_after_seven) << n;
    EXPECT_EQ(ch->PublishesSinceFlush(), 7 - c.flushes_after_seven * c.policy.batch) << n;
  }
}

TEST_P(ChannelRulesTest, F4_FailedPolicyFlushIsReportedAndTheRowStaysCommitted) {
  ChannelOptions options;
  options.checkpoint_policy = CheckpointPolicy::PerMessage();
  auto ch = DurableChannel::Open("f4f", 1, registry(), options);
  ASSERT_TRUE(ch.ok());
  faulty().FailFlushes(1);
  auto r = ch->Publish(Env("m", "k"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kIOError);
  EXPECT_EQ(ch->PublishesSinceFlush(), 1u);
  // The row committed; a retry with the same key learns where.
  auto retry = ch->PublishWithReceipt(Env("m", "k"));
  ASSERT_TRUE(retry.ok());
  EXPECT_TRUE(retry->duplicate);
  EXPECT_EQ(retry->offset, 1u);
}

TEST_P(ChannelRulesTest, F5_TheStoreDeclaresItsDurability) {
  EXPECT_FALSE(registry().store().Durability().empty());
  if (registry().store().Name() == "memory") {
    EXPECT_NE(registry().store().Durability().find("process-local"), std::string::npos);
  }
}

RUNNEL_CHANNEL_SUITE_INSTANCES(ChannelRulesTest);

}  // namespace
}  // namespace runnel::testing
