// The head checkpoint record codec (SEMANTICS V3; layout in core/channel/checkpoint_format.h):
// pinned bytes, round trips, and refusal of every malformed input.
#include <gtest/gtest.h>

#include <string>

#include "core/channel/checkpoint_format.h"
#include "runnel/channel.h"
#include "runnel/registry.h"

namespace runnel::channel {
namespace {

std::string U32(uint32_t v) {
  std::string out;
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
  return out;
}
std::string U64(uint64_t v) {
  std::string out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
  return out;
}

CheckpointRecord Sample() {
  CheckpointRecord r;
  r.from = {0, 3};
  r.head = {2, 7};
  r.fingerprint = {0x1111, 0};
  r.entries = {{0, 1, 0xAAAA}, {1, 6, 0xBBBB}};
  return r;
}

// Fingerprint64 values computed independently from the definition in checkpoint_format.h.
TEST(CheckpointFormatTest, V3_Fingerprint64MatchesItsDefinition) {
  EXPECT_EQ(Fingerprint64(""), 0x6d03b699ff17cdd6ull);
  EXPECT_EQ(Fingerprint64("abc"), 0xfd4f2447a4f4df0full);
  EXPECT_EQ(Fingerprint64("0123456789"), 0x9ed75b64e4539ebcull);
  EXPECT_NE(RowFingerprint(""), 0u);
}

TEST(CheckpointFormatTest, V3_EncodingIsTheDocumentedLayout) {
  const CheckpointRecord r = Sample();
  std::string expected = "RCK1";
  expected.push_back('\x01');
  expected += U32(2);
  expected += U64(0) + U64(3);       // from
  expected += U64(2) + U64(7);       // head
  expected += U64(0x1111) + U64(0);  // fingerprints
  expected += U32(2);                // entries
  expected += U32(0) + U64(1) + U64(0xAAAA);
  expected += U32(1) + U64(6) + U64(0xBBBB);
  expected += U64(Fingerprint64(expected));  // checksum of everything before it
  EXPECT_EQ(EncodeCheckpoint(r), expected);
  EXPECT_EQ(expected.size(), 13 + 24 * 2 + 20 * 2 + 8u);
}

TEST(CheckpointFormatTest, V3_RoundTripsAndTellsBaseRecords) {
  const CheckpointRecord r = Sample();
  auto decoded = DecodeCheckpoint(EncodeCheckpoint(r));
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(*decoded, r);
  EXPECT_FALSE(r.IsBase());
  CheckpointRecord base = r;
  base.from = {0, 0};
  EXPECT_TRUE(base.IsBase());
  CheckpointRecord empty;
  empty.from = {0};
  empty.head = {0};
  empty.fingerprint = {0};
  auto e = DecodeCheckpoint(EncodeCheckpoint(empty));
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(*e, empty);
}

TEST(CheckpointFormatTest, V3_EveryTruncationAndTrailingByteIsRefused) {
  const std::string bytes = EncodeCheckpoint(Sample());
  for (size_t len = 0; len < bytes.size(); ++len) {
    auto d = DecodeCheckpoint(std::string_view(bytes).substr(0, len));
    ASSERT_FALSE(d.ok()) << "length " << len;
    EXPECT_EQ(d.status().code(), StatusCode::kCorruption);
    EXPECT_NE(d.status().message().find("CheckpointError"), std::string_view::npos);
  }
  EXPECT_FALSE(DecodeCheckpoint(bytes + "x").ok());
}

TEST(CheckpointFormatTest, V3_EveryFlippedBitIsRefused) {
  const std::string bytes = EncodeCheckpoint(Sample());
  for (size_t i = 0; i < bytes.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string bad = bytes;
      bad[i] = static_cast<char>(bad[i] ^ (1 << bit));
      EXPECT_FALSE(DecodeCheckpoint(bad).ok()) << "byte " << i << " bit " << bit;
    }
  }
}

TEST(CheckpointFormatTest, V3_WellChecksummedButInconsistentRecordsAreRefused) {
  // Encode does not validate, so these carry correct checksums and only the checks on the
  // content can refuse them.
  CheckpointRecord outside = Sample();
  outside.entries[1].slot = 7;  // head of partition 1 is 7: slot 7 is not covered
  auto a = DecodeCheckpoint(EncodeCheckpoint(outside));
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("outside"), std::string_view::npos);

  CheckpointRecord below = Sample();
  below.entries[1].slot = 2;  // below from[1] = 3
  EXPECT_FALSE(DecodeCheckpoint(EncodeCheckpoint(below)).ok());

  CheckpointRecord bad_partition = Sample();
  bad_partition.entries[0].partition = 2;
  EXPECT_FALSE(DecodeCheckpoint(EncodeCheckpoint(bad_partition)).ok());

  CheckpointRecord backwards = Sample();
  backwards.from = {3, 3};  // from past head for partition 0
  backwards.entries = {};
  EXPECT_FALSE(DecodeCheckpoint(EncodeCheckpoint(backwards)).ok());

  CheckpointRecord none;  // zero partitions
  auto z = DecodeCheckpoint(EncodeCheckpoint(none));
  ASSERT_FALSE(z.ok());
  EXPECT_NE(z.status().message().find("partition count 0"), std::string_view::npos);
}

TEST(CheckpointFormatTest, V3_OtherMagicOrVersionIsRefused) {
  std::string bytes = EncodeCheckpoint(Sample());
  std::string magic = bytes;
  magic[0] = 'X';
  EXPECT_FALSE(DecodeCheckpoint(magic).ok());
  std::string version = bytes;
  version[4] = 2;
  auto v = DecodeCheckpoint(version);
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.status().message().find("version 2"), std::string_view::npos);
}

}  // namespace
}  // namespace runnel::channel

namespace runnel {
namespace {

// A base record over more than kMaxCheckpointEntries keyed rows is split into records appended
// in one batch, each continuing the previous one; a restart loads them all. Memory store only:
// it takes 70000 publishes.
TEST(CheckpointSplitTest, V3_ALargeBaseIsSplitIntoContinuingRecordsThatReloadExactly) {
  constexpr int kRows = static_cast<int>(channel::kMaxCheckpointEntries) + 4464;
  StreamRegistry registry;
  auto open = [&] {
    return DurableChannel::WithPartitionKey("big", 2, registry, HashKeyPartitioner);
  };
  auto env = [](int i) {
    MessageEnvelope e;
    e.payload = "p";
    e.publisher_id = "t";
    e.idempotency_key = "key-" + std::to_string(i);
    e.key = "user-" + std::to_string(i % 5);
    return e;
  };
  {
    auto ch = open();
    ASSERT_TRUE(ch.ok());
    for (int i = 0; i < kRows; ++i) ASSERT_TRUE(ch->Publish(env(i)).ok()) << i;
  }
  // Without the chain the next open walks everything and records one base for all the rows.
  auto info = registry.store().GetStream(StreamScope::Global().Label(), "big:checkpoint");
  ASSERT_TRUE(info.ok());
  ASSERT_TRUE(registry.store().DeleteStream(info->id).ok());
  {
    auto ch = open();
    ASSERT_TRUE(ch.ok());
    EXPECT_FALSE(ch->OpenedFromCheckpoint());
  }
  auto records = registry.ReadSince(StreamScope::Global(), "big:checkpoint", 1, 100);
  ASSERT_TRUE(records.ok());
  ASSERT_EQ(records->size(), 2u);
  auto first = channel::DecodeCheckpoint((*records)[0].payload);
  auto second = channel::DecodeCheckpoint((*records)[1].payload);
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_TRUE(first->IsBase());
  EXPECT_EQ(first->entries.size(), channel::kMaxCheckpointEntries);
  EXPECT_EQ(second->from, first->head);
  EXPECT_EQ(first->entries.size() + second->entries.size(), static_cast<size_t>(kRows));
  EXPECT_EQ(first->fingerprint, (std::vector<uint64_t>{0, 0}));  // only the last one claims

  auto ch = open();
  ASSERT_TRUE(ch.ok());
  EXPECT_TRUE(ch->OpenedFromCheckpoint());
  KeyLookup scan = ch->GetKeyLookup();
  for (int i : {0, 1, 40000, 65535, 65536, kRows - 1, kRows}) {
    const std::string key = "key-" + std::to_string(i);
    auto indexed = ch->FindIdempotencyKey(key);
    auto scanned = scan.Find(key, {});
    ASSERT_TRUE(indexed.ok() && scanned.ok());
    EXPECT_EQ(*indexed, *scanned) << key;
    EXPECT_EQ(indexed->committed(), i < kRows) << key;
  }
}

}  // namespace
}  // namespace runnel
