// SEMANTICS V3: the head checkpoint. Recorded every 256 appends and at a clean stop; a restart
// verifies it and reads only the rows after it; a missing record means a full walk and then a
// record; a record that overclaims, disagrees with the rows or is corrupt is refused with a
// warning, then a full walk. Reads are counted through the FaultyStore.
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "channel/channel_suites.h"
#include "channel/channel_test_base.h"
#include "core/channel/checkpoint_format.h"

namespace runnel::testing {

class ChannelCheckpointTest : public ChannelTestBase {
 protected:
  static constexpr size_t kParts = 4;
  static constexpr const char* kCheckpointStream = "orders:checkpoint";

  Result<DurableChannel> OpenOrders() {
    ChannelOptions options;
    options.partition_key = HashKeyPartitioner;
    options.warn = [this](std::string_view w) { warnings_.emplace_back(w); };
    return DurableChannel::Open("orders", kParts, registry(), std::move(options));
  }

  static MessageEnvelope Keyed(int i) {
    return Env("payload-" + std::to_string(i), "req-" + std::to_string(i),
               "user-" + std::to_string(i % 37));
  }

  // Publishes envelopes [from, to), each with its own idempotency key.
  void PublishRange(DurableChannel& ch, int from, int to) {
    for (int i = from; i < to; ++i) {
      auto r = ch.Publish(Keyed(i));
      ASSERT_TRUE(r.ok()) << i << ": " << r.status().ToString();
    }
  }

  StreamId IdOf(const std::string& name) {
    auto info = faulty().inner().GetStream(StreamScope::Global().Label(), name);
    EXPECT_TRUE(info.ok()) << name << ": " << info.status().ToString();
    return info.ok() ? info->id : 0;
  }

  // Rows the FaultyStore's Read calls returned from the partitions (not the companion stream).
  uint64_t PartitionRowsRead() {
    uint64_t n = 0;
    for (size_t p = 0; p < kParts; ++p)
      n += faulty().rows_read(IdOf("orders:" + std::to_string(p)));
    return n;
  }

  std::vector<channel::CheckpointRecord> StoredRecords() {
    std::vector<channel::CheckpointRecord> out;
    for (const StreamEvent& e : ReadAll(kCheckpointStream)) {
      auto r = channel::DecodeCheckpoint(e.payload);
      EXPECT_TRUE(r.ok()) << r.status().ToString();
      if (r.ok()) out.push_back(std::move(*r));
    }
    return out;
  }

  uint64_t TotalRows() {
    uint64_t n = 0;
    for (size_t p = 0; p < kParts; ++p) n += ReadAll("orders:" + std::to_string(p)).size();
    return n;
  }

  // Every key in `keys` resolves in `ch` exactly as a scan of the partitions does.
  void ExpectIndexAgreesWithScan(DurableChannel& ch, const std::vector<std::string>& keys) {
    KeyLookup scan = ch.GetKeyLookup();
    for (const std::string& key : keys) {
      auto indexed = ch.FindIdempotencyKey(key);
      auto scanned = scan.Find(key, {});
      ASSERT_TRUE(indexed.ok()) << key << ": " << indexed.status().ToString();
      ASSERT_TRUE(scanned.ok()) << key << ": " << scanned.status().ToString();
      EXPECT_EQ(*indexed, *scanned) << key;
    }
  }

  bool Warned(std::string_view what) const {
    for (const std::string& w : warnings_) {
      if (w.find(what) != std::string::npos) return true;
    }
    return false;
  }

  std::vector<std::string> warnings_;
};

TEST_P(ChannelCheckpointTest, V3_RecordedEvery256AppendsAndAtACleanStop) {
  {
    auto ch = OpenOrders();
    ASSERT_TRUE(ch.ok()) << ch.status().ToString();
    EXPECT_FALSE(ch->OpenedFromCheckpoint());
    PublishRange(*ch, 0, 255);
    EXPECT_EQ(ch->CheckpointCount(), 0u);
    // The companion stream exists from the open on (so its name cannot be taken), still empty.
    auto companion = registry().Describe(StreamScope::Global(), kCheckpointStream);
    ASSERT_TRUE(companion.has_value());
    EXPECT_EQ(companion->event_count, 0u);
    PublishRange(*ch, 255, 256);
    EXPECT_EQ(ch->CheckpointCount(), 1u);
    PublishRange(*ch, 256, 300);
    EXPECT_EQ(ch->CheckpointCount(), 1u);
    ASSERT_TRUE(ch->FlushStore().ok());
    EXPECT_EQ(ch->CheckpointCount(), 2u);
    PublishRange(*ch, 300, 310);
  }  // the destructor is the clean stop: a third record
  std::vector<channel::CheckpointRecord> records = StoredRecords();
  ASSERT_EQ(records.size(), 3u);
  EXPECT_TRUE(records[0].IsBase());
  uint64_t keyed = 0;
  for (size_t i = 0; i < records.size(); ++i) {
    if (i > 0) {
      EXPECT_EQ(records[i].from, records[i - 1].head);
    }
    keyed += records[i].entries.size();
  }
  uint64_t covered = 0;
  for (uint64_t h : records.back().head) covered += h;
  EXPECT_EQ(covered, 310u);
  EXPECT_EQ(keyed, 310u);  // every row has a key, every key is recorded once
  {
    // Nothing new since the clean stop: reopening and closing again records nothing.
    auto ch = OpenOrders();
    ASSERT_TRUE(ch.ok());
    EXPECT_TRUE(ch->OpenedFromCheckpoint());
  }
  EXPECT_EQ(StoredRecords().size(), 3u);
  EXPECT_TRUE(warnings_.empty());
}

TEST_P(ChannelCheckpointTest, V3_ReopenAfter1000PublishesReadsOnlyTheTailRows) {
  std::optional<DurableChannel> first;
  {
    auto opened = OpenOrders();
    ASSERT_TRUE(opened.ok());
    first.emplace(std::move(*opened));
  }
  PublishRange(*first, 0, 1000);
  ASSERT_EQ(first->CheckpointCount(), 3u);  // at 256, 512 and 768 appends

  // A restart without a clean stop (the first instance is still open and has not recorded
  // its last 232 appends): the rows after the 768-append checkpoint are read, no others.
  const uint64_t rows_before = PartitionRowsRead();
  const uint64_t read_ats_before = faulty().read_ats();
  {
    auto second = OpenOrders();
    ASSERT_TRUE(second.ok()) << second.status().ToString();
    EXPECT_TRUE(second->OpenedFromCheckpoint());
    EXPECT_EQ(PartitionRowsRead() - rows_before, 1000u - 768u);
    // Verification: one ReadAt per non-empty partition, of the row just below its head.
    EXPECT_LE(faulty().read_ats() - read_ats_before, kParts);
    EXPECT_EQ(second->NextSequences(), first->NextSequences());
    ExpectIndexAgreesWithScan(*second, {"req-0", "req-700", "req-999", "req-1000", "nope"});
  }
  first.reset();  // the first instance's clean stop

  const uint64_t rows_mid = PartitionRowsRead();
  auto third = OpenOrders();
  ASSERT_TRUE(third.ok());
  EXPECT_TRUE(third->OpenedFromCheckpoint());
  EXPECT_EQ(PartitionRowsRead() - rows_mid, 0u);
  uint64_t total = 0;
  for (uint64_t n : third->NextSequences()) total += n;
  EXPECT_EQ(total, 1000u);
  EXPECT_TRUE(warnings_.empty());
}

TEST_P(ChannelCheckpointTest, V3_KeysPublishedBeforeTheCheckpointStillDeduplicateAfterReopen) {
  std::vector<uint64_t> offsets;
  {
    auto ch = OpenOrders();
    ASSERT_TRUE(ch.ok());
    for (int i = 0; i < 600; ++i) {
      auto r = ch->Publish(Keyed(i));
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      offsets.push_back(*r);
    }
  }
  auto ch = OpenOrders();
  ASSERT_TRUE(ch.ok());
  ASSERT_TRUE(ch->OpenedFromCheckpoint());
  const uint64_t appends = faulty().appends();
  for (int i : {0, 1, 255, 256, 511, 599}) {
    auto again = ch->PublishWithReceipt(Keyed(i));
    ASSERT_TRUE(again.ok()) << again.status().ToString();
    EXPECT_TRUE(again->duplicate) << i;
    EXPECT_EQ(again->offset, offsets[static_cast<size_t>(i)]) << i;
    EXPECT_EQ(again->partition, ch->PartitionFor(Keyed(i))) << i;
  }
  EXPECT_EQ(faulty().appends(), appends);
  EXPECT_EQ(TotalRows(), 600u);
  ExpectIndexAgreesWithScan(*ch, {"req-3", "req-300", "req-598", "req-600"});
  auto fresh = ch->PublishWithReceipt(Keyed(600));
  ASSERT_TRUE(fresh.ok());
  EXPECT_FALSE(fresh->duplicate);
}

TEST_P(ChannelCheckpointTest, V3_MissingRecordMeansAFullWalkThenARecord) {
  {
    auto ch = OpenOrders();
    ASSERT_TRUE(ch.ok());
    PublishRange(*ch, 0, 300);
  }
  // Lose the companion stream: as for rows written before checkpoints existed.
  ASSERT_TRUE(faulty().inner().DeleteStream(IdOf(kCheckpointStream)).ok());
  const uint64_t rows_before = PartitionRowsRead();
  {
    auto ch = OpenOrders();
    ASSERT_TRUE(ch.ok()) << ch.status().ToString();
    EXPECT_FALSE(ch->OpenedFromCheckpoint());
    EXPECT_EQ(PartitionRowsRead() - rows_before, 300u);  // the full walk
    EXPECT_EQ(ch->CheckpointCount(), 1u);                // then the record
    std::vector<channel::CheckpointRecord> records = StoredRecords();
    ASSERT_EQ(records.size(), 1u);
    EXPECT_TRUE(records[0].IsBase());
    EXPECT_EQ(records[0].entries.size(), 300u);
    auto dup = ch->PublishWithReceipt(Keyed(17));
    ASSERT_TRUE(dup.ok());
    EXPECT_TRUE(dup->duplicate);
  }
  const uint64_t rows_mid = PartitionRowsRead();
  auto ch = OpenOrders();
  ASSERT_TRUE(ch.ok());
  EXPECT_TRUE(ch->OpenedFromCheckpoint());
  EXPECT_EQ(PartitionRowsRead() - rows_mid, 0u);
  ExpectIndexAgreesWithScan(*ch, {"req-0", "req-17", "req-299", "req-300"});
  EXPECT_TRUE(warnings_.empty());
}

// Closes a channel after 300 publishes and returns the last stored record.
#define PREPARE_300(last)                                          \
  do {                                                             \
    auto ch = OpenOrders();                                        \
    ASSERT_TRUE(ch.ok());                                          \
    PublishRange(*ch, 0, 300);                                     \
  } while (0);                                                     \
  std::vector<channel::CheckpointRecord> stored = StoredRecords(); \
  ASSERT_FALSE(stored.empty());                                    \
  channel::CheckpointRecord last = stored.back()

TEST_P(ChannelCheckpointTest, V3_OverclaimingRecordIsRefusedWithAWarningThenAFullWalk) {
  PREPARE_300(last);
  // A well-formed record continuing the chain that claims 50 rows partition 0 does not hold.
  channel::CheckpointRecord over;
  over.from = last.head;
  over.head = last.head;
  over.head[0] += 50;
  over.fingerprint = last.fingerprint;
  AppendRaw(kCheckpointStream, channel::EncodeCheckpoint(over));

  const uint64_t rows_before = PartitionRowsRead();
  {
    auto ch = OpenOrders();
    ASSERT_TRUE(ch.ok()) << ch.status().ToString();
    EXPECT_FALSE(ch->OpenedFromCheckpoint());
    EXPECT_TRUE(Warned("overclaims")) << (warnings_.empty() ? "" : warnings_[0]);
    EXPECT_EQ(PartitionRowsRead() - rows_before, 300u);
    // The walk's sequences, not the record's claim.
    uint64_t total = 0;
    for (uint64_t n : ch->NextSequences()) total += n;
    EXPECT_EQ(total, 300u);
    ExpectIndexAgreesWithScan(*ch, {"req-0", "req-299", "req-300"});
  }
  // The new base replaced the refused chain: the next open trusts it.
  std::vector<channel::CheckpointRecord> records = StoredRecords();
  ASSERT_FALSE(records.empty());
  EXPECT_TRUE(records.front().IsBase());
  warnings_.clear();
  const uint64_t rows_mid = PartitionRowsRead();
  auto ch = OpenOrders();
  ASSERT_TRUE(ch.ok());
  EXPECT_TRUE(ch->OpenedFromCheckpoint());
  EXPECT_EQ(PartitionRowsRead() - rows_mid, 0u);
  EXPECT_TRUE(warnings_.empty());
}

TEST_P(ChannelCheckpointTest, V3_RecordThatDisagreesWithTheRowsIsRefusedThenAFullWalk) {
  PREPARE_300(last);
  // Same heads, but the fingerprint of the row below a head is not that row's.
  channel::CheckpointRecord wrong;
  wrong.from = last.head;
  wrong.head = last.head;
  wrong.fingerprint = last.fingerprint;
  size_t p = 0;
  while (p < kParts && last.head[p] == 0) ++p;
  ASSERT_LT(p, kParts);
  wrong.fingerprint[p] ^= 0x5555;
  AppendRaw(kCheckpointStream, channel::EncodeCheckpoint(wrong));

  const uint64_t rows_before = PartitionRowsRead();
  auto ch = OpenOrders();
  ASSERT_TRUE(ch.ok()) << ch.status().ToString();
  EXPECT_FALSE(ch->OpenedFromCheckpoint());
  EXPECT_TRUE(Warned("disagrees with the rows"));
  EXPECT_EQ(PartitionRowsRead() - rows_before, 300u);
  ExpectIndexAgreesWithScan(*ch, {"req-1", "req-250", "req-299"});
}

TEST_P(ChannelCheckpointTest, V3_CorruptRecordIsRefusedThenAFullWalk) {
  PREPARE_300(last);
  // A record whose bytes were damaged (one flipped bit: the checksum no longer matches).
  channel::CheckpointRecord next;
  next.from = last.head;
  next.head = last.head;
  next.fingerprint = last.fingerprint;
  std::string bytes = channel::EncodeCheckpoint(next);
  bytes[10] = static_cast<char>(bytes[10] ^ 0x04);
  AppendRaw(kCheckpointStream, bytes);

  const uint64_t rows_before = PartitionRowsRead();
  {
    auto ch = OpenOrders();
    ASSERT_TRUE(ch.ok()) << ch.status().ToString();
    EXPECT_FALSE(ch->OpenedFromCheckpoint());
    EXPECT_TRUE(Warned("corrupt"));
    EXPECT_EQ(PartitionRowsRead() - rows_before, 300u);
    auto dup = ch->PublishWithReceipt(Keyed(42));
    ASSERT_TRUE(dup.ok());
    EXPECT_TRUE(dup->duplicate);
  }
  // Garbage that is not a record at all is refused the same way.
  AppendRaw(kCheckpointStream, "not a checkpoint");
  warnings_.clear();
  auto ch = OpenOrders();
  ASSERT_TRUE(ch.ok());
  EXPECT_FALSE(ch->OpenedFromCheckpoint());
  EXPECT_TRUE(Warned("bad magic") || Warned("truncated") || Warned("checksum"));
  ExpectIndexAgreesWithScan(*ch, {"req-42", "req-299", "req-300"});
}

// A stream of the companion's name that holds records of its own refuses the channel before
// anything is created; an empty one is adopted and tagged, as an empty partition stream is.
TEST_P(ChannelCheckpointTest, V3_ACompanionStreamOfAnotherKindIsRefused) {
  ASSERT_TRUE(registry()
                  .CreateStream(StreamScope::Global(), kCheckpointStream, CreateStreamOptions{})
                  .ok());
  ASSERT_TRUE(registry()
                  .Append(StreamScope::Global(), kCheckpointStream, std::nullopt, "not mine", 1)
                  .ok());
  auto ch = OpenOrders();
  ASSERT_FALSE(ch.ok());
  EXPECT_EQ(ch.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(ch.status().message().find("ConfigError"), std::string_view::npos);
  EXPECT_FALSE(registry().Exists(StreamScope::Global(), "orders:0"));

  ASSERT_TRUE(registry().DeleteStream(StreamScope::Global(), kCheckpointStream).ok());
  ASSERT_TRUE(registry()
                  .CreateStream(StreamScope::Global(), kCheckpointStream, CreateStreamOptions{})
                  .ok());
  {
    auto adopted = OpenOrders();
    ASSERT_TRUE(adopted.ok()) << adopted.status().ToString();
    PublishRange(*adopted, 0, 10);
  }  // the clean stop records into the adopted stream
  auto reopened = OpenOrders();
  ASSERT_TRUE(reopened.ok());
  EXPECT_TRUE(reopened->OpenedFromCheckpoint());
}

TEST_P(ChannelCheckpointTest, V3_TwoInstancesRecordingInTurnKeepOneValidChain) {
  std::optional<DurableChannel> a;
  std::optional<DurableChannel> b;
  {
    auto opened_a = OpenOrders();
    auto opened_b = OpenOrders();
    ASSERT_TRUE(opened_a.ok() && opened_b.ok());
    a.emplace(std::move(*opened_a));
    b.emplace(std::move(*opened_b));
  }
  // Alternate so both instances record checkpoints, each conflicting with the other's.
  for (int round = 0; round < 3; ++round) {
    PublishRange(*a, round * 600, round * 600 + 300);
    PublishRange(*b, round * 600 + 300, round * 600 + 600);
  }
  ASSERT_TRUE(a->FlushStore().ok());
  ASSERT_TRUE(b->FlushStore().ok());
  a.reset();
  b.reset();
  auto c = OpenOrders();
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->OpenedFromCheckpoint()) << (warnings_.empty() ? "" : warnings_[0]);
  EXPECT_EQ(TotalRows(), 1800u);
  ExpectIndexAgreesWithScan(*c,
                            {"req-0", "req-299", "req-300", "req-1234", "req-1799", "req-1800"});
  for (int i : {5, 650, 1500}) {
    auto dup = c->PublishWithReceipt(Keyed(i));
    ASSERT_TRUE(dup.ok());
    EXPECT_TRUE(dup->duplicate) << i;
  }
}

RUNNEL_CHANNEL_SUITE_INSTANCES(ChannelCheckpointTest);

}  // namespace runnel::testing
