// Format tests: the golden segment, CRC32C known answers, and how recovery treats damage.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "env/env.h"
#include "log/log_harness.h"
#include "log/log_test_util.h"
#include "runnel/log_store.h"
#include "store/log/crc32c.h"
#include "store/log/log_check.h"
#include "store/log/log_codec.h"
#include "store/log/log_format.h"
#include "store/log/log_store.h"

namespace runnel::testing {
namespace {

using log::FrameType;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteFile(const std::string& path, const std::string& data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << data;
}

// Segment 1 of a small log, built from the codec alone: two streams, a keyed batch with
// producer state, a cursor commit, a truncation, a retention update, a close and a delete.
std::string BuildGoldenSegment() {
  std::string seg = log::EncodeSegmentHeader(1);
  StreamSpec orders = Spec("orders");
  orders.content_type = "application/json";
  orders.created_at_ms = 1700000000000;
  StreamSpec audit = Spec("audit");
  audit.ns = "tenant:acme";
  audit.retention.max_events = 2;
  log::AppendFrame(&seg, FrameType::kCreateStream, log::EncodeCreateStream(1, orders));
  log::AppendFrame(&seg, FrameType::kCreateStream, log::EncodeCreateStream(2, audit));
  std::string body;
  std::vector<AppendRecord> recs = {{std::string("k1"), "{\"n\":1}"}, {std::nullopt, "{\"n\":2}"}};
  log::EncodeAppendBatch(&body, 1, 1, 1700000000100, recs, false, ProducerState{"prod-a", 3, 7, 0});
  log::AppendFrame(&seg, FrameType::kAppendBatch, body);
  body.clear();
  log::EncodeAppendBatch(&body, 2, 1, 1700000000200,
                         {{std::nullopt, "a"}, {std::nullopt, "b"}, {std::nullopt, "c"}}, false,
                         std::nullopt);
  log::AppendFrame(&seg, FrameType::kAppendBatch, body);
  log::AppendFrame(&seg, FrameType::kCursorCommit,
                   log::EncodeCursorCommit(1, "billing", 1, 1700000000300));
  body.clear();
  log::EncodeAppendBatch(&body, 1, 3, 1700000000400, {{std::nullopt, "{\"n\":3}"}}, true,
                         std::nullopt);
  log::AppendFrame(&seg, FrameType::kAppendBatch, body);
  log::AppendFrame(&seg, FrameType::kTruncateHead, log::EncodeTruncateHead(1, 2));
  StreamRetention r;
  r.max_bytes = 100;
  log::AppendFrame(&seg, FrameType::kUpdateStream, log::EncodeUpdateStream(1, r, "ttl=60"));
  log::AppendFrame(&seg, FrameType::kDeleteStream, log::EncodeDeleteStream(2));
  log::AppendFrame(&seg, FrameType::kCheckpointMarker, log::EncodeCheckpointMarker(1));
  return seg;
}

std::string DescribeSegment(const std::string& seg) {
  std::string out;
  size_t pos = log::kSegmentHeaderSize;
  for (;;) {
    log::FrameView f;
    auto c = log::ParseFrame(std::string_view(seg).substr(pos), &f);
    if (c != log::FrameCheck::kOk) {
      out += "@" + std::to_string(pos) + " " + std::string(log::FrameCheckName(c)) + "\n";
      break;
    }
    out += "@" + std::to_string(pos) + " " + log::DescribeFrame(f.type, f.body) + "\n";
    pos += f.size;
  }
  return out;
}

const std::string kGoldenDir = RUNNEL_LOG_GOLDEN_DIR;

std::vector<std::string> ListNames(const std::string& dir) {
  auto names = env::Env::Posix()->ListDir(dir);
  EXPECT_TRUE(names.ok());
  return names.ok() ? *names : std::vector<std::string>{};
}

TEST(LogFormatTest, Crc32cMatchesKnownAnswers) {
  EXPECT_EQ(log::Crc32c(""), 0u);
  EXPECT_EQ(log::Crc32c("123456789"), 0xE3069283u);            // the standard CRC-32C check value
  EXPECT_EQ(log::Crc32c(std::string(32, '\0')), 0x8A9136AAu);  // RFC 3720 B.4
  EXPECT_EQ(log::Crc32c(std::string(32, '\xff')), 0x62A8AB43u);
  const std::string long_text(1000, 'q');
  EXPECT_EQ(log::Crc32cExtend(log::Crc32c(long_text.substr(0, 333)), long_text.data() + 333, 667),
            log::Crc32c(long_text));
  EXPECT_EQ(log::UnmaskCrc(log::MaskCrc(0x12345678u)), 0x12345678u);
}

// Bit 2 of an append batch's flags: new stream attributes, committed with the records.
TEST(LogFormatTest, AppendBatchCarriesAttributesWhenGiven) {
  std::string body;
  log::EncodeAppendBatch(&body, 7, 5, 1700000000500, {{std::nullopt, "x"}}, false,
                         ProducerState{"p", 1, 2, 0},
                         std::string("{\"ds\":{\"stream_seq\":\"9\"}}"));
  log::AppendBatchHeader h;
  std::vector<StoredRecord> records;
  ASSERT_TRUE(log::DecodeAppendBatch(body, &h, nullptr, &records));
  ASSERT_TRUE(h.attributes.has_value());
  EXPECT_EQ(*h.attributes, "{\"ds\":{\"stream_seq\":\"9\"}}");
  ASSERT_TRUE(h.producer.has_value());
  EXPECT_EQ(h.producer->seq, 2u);
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].offset, 5u);
  // Without the bit there are no attributes, and a truncated attribute string is malformed.
  std::string plain;
  log::EncodeAppendBatch(&plain, 7, 5, 1, {{std::nullopt, "x"}}, false, std::nullopt);
  ASSERT_TRUE(log::DecodeAppendBatch(plain, &h, nullptr, nullptr));
  EXPECT_FALSE(h.attributes.has_value());
  EXPECT_FALSE(log::DecodeAppendBatch(std::string_view(body).substr(0, 60), &h, nullptr, nullptr));
}

// A drop-records body: offsets as LEB128 deltas (about one byte each for a compaction's
// clustered offsets), decoded back exactly; anything not ascending and distinct, out of range,
// cut short or with bytes left over is malformed.
TEST(LogFormatTest, DropRecordsBodiesRoundTripAndMalformedOnesAreRefused) {
  const std::vector<uint64_t> offsets{1, 2, 300, 1ull << 40, UINT64_MAX - 1};
  const std::string body = log::EncodeDropRecords(7, offsets);
  StreamId id = 0;
  std::vector<uint64_t> decoded;
  ASSERT_TRUE(log::DecodeDropRecords(body, &id, &decoded));
  EXPECT_EQ(id, 7u);
  EXPECT_EQ(decoded, offsets);
  EXPECT_EQ(log::DescribeFrame(FrameType::kDropRecords, log::EncodeDropRecords(7, {2, 4, 5})),
            "drop-records id=7 count=3 offsets=2,4,5");
  std::vector<uint64_t> batch;
  for (uint64_t o = 1000; o < 1000 + 4096 * 3; o += 3) batch.push_back(o);
  EXPECT_LE(log::EncodeDropRecords(7, batch).size(), 12u + 2 + batch.size());
  ASSERT_TRUE(log::DecodeDropRecords(log::EncodeDropRecords(7, batch), &id, &decoded));
  EXPECT_EQ(decoded, batch);

  auto body_of = [](uint32_t count, const std::string& varints) {
    std::string b;
    log::PutU64(&b, 7);
    log::PutU32(&b, count);
    return b + varints;
  };
  EXPECT_TRUE(log::DecodeDropRecords(body_of(2, "\x05\x01"), &id, &decoded));
  EXPECT_FALSE(log::DecodeDropRecords(body_of(0, ""), &id, &decoded));  // none
  EXPECT_FALSE(
      log::DecodeDropRecords(body_of(2, std::string("\x05\x00", 2)), &id, &decoded));  // repeated
  EXPECT_FALSE(log::DecodeDropRecords(body_of(2, "\x05"), &id, &decoded));             // cut short
  EXPECT_FALSE(log::DecodeDropRecords(body_of(1, "\x05\x01"), &id, &decoded));         // left over
  EXPECT_FALSE(log::DecodeDropRecords(body_of(1, "\x85"), &id, &decoded));  // torn varint
  EXPECT_FALSE(log::DecodeDropRecords(
      body_of(log::kMaxDroppedPerFrame + 1, std::string(log::kMaxDroppedPerFrame + 1, '\x01')), &id,
      &decoded));
  // Past 2^64: a tenth byte above 1, and a delta that wraps.
  EXPECT_FALSE(log::DecodeDropRecords(body_of(1, std::string(9, '\xff') + "\x02"), &id, &decoded));
  std::string largest;
  log::PutVarint(&largest, UINT64_MAX);
  EXPECT_TRUE(log::DecodeDropRecords(body_of(1, largest), &id, &decoded));
  EXPECT_FALSE(log::DecodeDropRecords(body_of(2, largest + "\x01"), &id, &decoded));
}

// `runnel check` reads drop-records frames (and counts the offsets they name) as it reads the
// others: a compacted stream's directory is healthy.
TEST(LogFormatTest, CheckReadsDropRecordsFrames) {
  TempDir dir;
  {
    auto store = OpenLogStore(SmallLogOptions(dir.path()));
    ASSERT_TRUE(store.ok());
    auto info = (*store)->CreateStream(Spec("s"));
    ASSERT_TRUE(info.ok());
    ASSERT_TRUE(AppendPayloads(**store, info->id, {"a", "b", "c", "d", "e"}).ok());
    auto dropped = (*store)->DropRecords(info->id, {2, 3, 9});
    ASSERT_TRUE(dropped.ok());
    EXPECT_EQ(*dropped, 2u);
  }
  auto check = log::CheckLogDirectory(env::Env::Posix(), dir.path());
  ASSERT_TRUE(check.ok()) << check.status().ToString();
  EXPECT_TRUE(check->corruption.empty());
  EXPECT_TRUE(check->open.ok()) << check->open.ToString();
  EXPECT_EQ(check->dropped_records, 2u);  // the frame names only the records there were
  bool counted = false;
  for (const auto& line : check->lines)
    counted = counted || line.find("drop-records=1") != std::string::npos;
  EXPECT_TRUE(counted);
}

// ValidFrameAfter finds the first frame that verifies after a damaged position wherever it is:
// right after garbage, after zero runs of every length (it skips zero runs in strides), and far
// past one stride; and finds none in zeros or garbage alone.
TEST(LogFormatTest, ValidFrameAfterFindsTheNextFrameAcrossZeroRuns) {
  std::string frame;
  log::AppendFrame(&frame, FrameType::kCheckpointMarker, log::EncodeCheckpointMarker(7));
  auto find = [](const std::string& bytes) {
    auto view = [&bytes](uint64_t at, uint64_t n) -> Result<std::string_view> {
      return std::string_view(bytes).substr(static_cast<size_t>(at), static_cast<size_t>(n));
    };
    auto found = log::ValidFrameAfter(view, 0, bytes.size());
    EXPECT_TRUE(found.ok());
    return found.ok() ? *found : std::optional<uint64_t>();
  };
  for (size_t zeros :
       {size_t{0}, size_t{1}, size_t{3}, size_t{4}, size_t{5}, size_t{7}, size_t{8}, size_t{9},
        size_t{100}, size_t{65535}, size_t{65536}, size_t{65537}, size_t{200000}}) {
    const std::string garbage = "\x01garbage-bytes\xff";
    std::string bytes = garbage + std::string(zeros, '\0') + frame + std::string(50, '\0');
    EXPECT_EQ(find(bytes), std::optional<uint64_t>(garbage.size() + zeros)) << zeros;
  }
  EXPECT_EQ(find(std::string(1, '\x01') + std::string(300000, '\0')), std::nullopt);
  std::string noise(5000, '\0');
  for (size_t i = 0; i < noise.size(); ++i) noise[i] = static_cast<char>((i * 131 + 7) % 251);
  EXPECT_EQ(find(noise), std::nullopt);
}

TEST(LogFormatTest, GoldenSegmentIsByteIdenticalAndDecodes) {
  const std::string built = BuildGoldenSegment();
  const std::string described = DescribeSegment(built);
  if (std::getenv("RUNNEL_UPDATE_GOLDEN") != nullptr) {
    WriteFile(kGoldenDir + "/00000000000000000001.log", built);
    WriteFile(kGoldenDir + "/frames.txt", described);
  }
  const std::string golden = ReadFile(kGoldenDir + "/00000000000000000001.log");
  ASSERT_FALSE(golden.empty()) << "missing golden file in " << kGoldenDir;
  EXPECT_EQ(golden, built) << "the version-1 encoding changed; bump kFormatVersion instead";
  EXPECT_EQ(DescribeSegment(golden), ReadFile(kGoldenDir + "/frames.txt"));
}

TEST(LogFormatTest, StoreRecoversTheGoldenDirectory) {
  TempDir dir;
  WriteFile(dir.path() + "/00000000000000000001.log",
            ReadFile(kGoldenDir + "/00000000000000000001.log"));
  auto store = OpenLogStore(SmallLogOptions(dir.path()));
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto orders = (*store)->GetStream("global", "orders");
  ASSERT_TRUE(orders.ok());
  EXPECT_EQ(orders->head_offset, 2u);
  EXPECT_EQ(orders->next_offset, 4u);
  EXPECT_TRUE(orders->closed);
  EXPECT_EQ(orders->spec.attributes, "ttl=60");
  EXPECT_EQ(orders->spec.retention.max_bytes, 100u);
  EXPECT_EQ(orders->spec.content_type, "application/json");
  auto recs = (*store)->Read(orders->id, 1, 10, 1 << 20);
  ASSERT_TRUE(recs.ok());
  ASSERT_EQ(recs->size(), 2u);
  EXPECT_EQ((*recs)[0].payload, "{\"n\":2}");
  EXPECT_EQ((*recs)[1].appended_at_ms, 1700000000400u);
  auto producer = (*store)->GetProducer(orders->id, "prod-a");
  ASSERT_TRUE(producer.ok() && producer->has_value());
  EXPECT_EQ((*producer)->seq, 7u);
  EXPECT_EQ((*producer)->last_offset, 2u);
  auto cursor = (*store)->GetCursor(orders->id, "billing");
  ASSERT_TRUE(cursor.ok() && cursor->has_value());
  EXPECT_EQ((*cursor)->offset, 1u);
  EXPECT_EQ((*store)->GetStream("tenant:acme", "audit").status().code(), StatusCode::kNotFound);
  auto created = (*store)->CreateStream(Spec("new"));
  ASSERT_TRUE(created.ok());
  EXPECT_EQ(created->id, 3u) << "stream ids are never reused";
}

class LogDamageTest : public ::testing::Test {
 protected:
  // Writes `n` single-record batches of 100 bytes, closes the store, returns the segment path.
  std::string Populate(int n) {
    auto store = OpenLogStore(SmallLogOptions(dir_.path()));
    EXPECT_TRUE(store.ok());
    auto info = (*store)->CreateStream(Spec("s"));
    EXPECT_TRUE(info.ok());
    for (int i = 0; i < n; ++i) {
      EXPECT_TRUE(AppendPayloads(**store, info->id, {std::string(100, 'a' + i % 26)}).ok());
    }
    store->reset();
    // Remove the checkpoint so recovery replays (and checks) every frame.
    auto names = env::Env::Posix()->ListDir(dir_.path());
    for (const auto& name : *names) {
      if (name.rfind("checkpoint-", 0) == 0) std::remove((dir_.path() + "/" + name).c_str());
    }
    return dir_.path() + "/00000000000000000001.log";
  }
  void Poke(const std::string& path, size_t pos, char c) {
    std::string data = ReadFile(path);
    ASSERT_LT(pos, data.size());
    data[pos] = c;
    WriteFile(path, data);
  }
  // Byte position of frame #i (0-based) in the segment.
  size_t FramePos(const std::string& path, int i) {
    std::string data = ReadFile(path);
    size_t pos = log::kSegmentHeaderSize;
    for (int k = 0; k < i; ++k) pos += log::kFrameHeaderSize + log::LoadU32(data.data() + pos + 4);
    return pos;
  }
  TempDir dir_;
};

TEST_F(LogDamageTest, CorruptionBeforeTheTailIsReportedByNameAndRefused) {
  const std::string seg = Populate(10);
  const size_t pos = FramePos(seg, 4);  // frame 0 creates the stream; 4 is the 4th batch
  Poke(seg, pos + 40, 'X');
  auto store = OpenLogStore(SmallLogOptions(dir_.path()));
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kCorruption);
  const std::string msg(store.status().message());
  EXPECT_NE(msg.find("00000000000000000001.log"), std::string::npos) << msg;
  EXPECT_NE(msg.find("at byte " + std::to_string(pos)), std::string::npos) << msg;
  EXPECT_NE(msg.find("stream #1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("salvage"), std::string::npos) << msg;
  EXPECT_EQ(msg.find(dir_.path()), std::string::npos) << "files are named relative to it: " << msg;

  LogStoreOptions o = SmallLogOptions(dir_.path());
  o.salvage = true;
  auto salvaged = OpenLogStore(o);
  ASSERT_TRUE(salvaged.ok()) << salvaged.status().ToString();
  auto info = (*salvaged)->GetStream("global", "s");
  ASSERT_TRUE(info.ok());
  // Salvage goes on at the next frame that verifies, so the frames after the damage (of every
  // stream) are kept, and so are the damaged stream's records before it: the lost batch
  // (offset 4) becomes a hole that reads name, and the notes say so.
  EXPECT_EQ(info->next_offset, 11u) << "salvage keeps the frames after the corruption";
  const auto notes = dynamic_cast<log::LogStore&>(**salvaged).RecoveryNotes();
  ASSERT_EQ(notes.size(), 2u);
  EXPECT_NE(notes[0].find("salvage skipped bytes " + std::to_string(pos)), std::string::npos)
      << notes[0];
  EXPECT_NE(notes[1].find("stream 's' (#1) lost records 4 to 4"), std::string::npos) << notes[1];
  for (const std::string& note : notes) {
    EXPECT_EQ(note.find(dir_.path()), std::string::npos) << note;
  }
  auto offsets_from = [&](Store& store, uint64_t from) {
    std::vector<uint64_t> offsets;
    auto kept = store.Read(info->id, from, 100, 1 << 20);
    EXPECT_TRUE(kept.ok()) << kept.status().ToString();
    if (kept.ok()) {
      for (const auto& rec : *kept) offsets.push_back(rec.offset);
    }
    return offsets;
  };
  auto check_reads = [&](Store& store, std::vector<uint64_t> after_hole) {
    EXPECT_EQ(offsets_from(store, 1), (std::vector<uint64_t>{1, 2, 3}));
    auto hole = store.Read(info->id, 4, 100, 1 << 20);
    ASSERT_FALSE(hole.ok());
    ASSERT_TRUE(hole.status().unreadable_range().has_value()) << hole.status().ToString();
    EXPECT_EQ(*hole.status().unreadable_range(), std::make_pair(uint64_t{4}, uint64_t{5}));
    EXPECT_EQ(offsets_from(store, 5), after_hole);
  };
  check_reads(**salvaged, {5, 6, 7, 8, 9, 10});
  auto r = AppendPayloads(**salvaged, info->id, {"after salvage"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->first_offset, 11u);
  // The salvaging open checkpointed at once (Populate removed every checkpoint), so replay
  // starts past the damage even if this process dies before a clean close; the hole is in that
  // checkpoint, and a plain open reads as the salvaging one did.
  auto names = env::Env::Posix()->ListDir(dir_.path());
  ASSERT_TRUE(names.ok());
  EXPECT_TRUE(std::any_of(names->begin(), names->end(),
                          [](const std::string& n) { return n.rfind("checkpoint-", 0) == 0; }));
  salvaged->reset();
  auto plain = OpenLogStore(SmallLogOptions(dir_.path()));
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  check_reads(**plain, {5, 6, 7, 8, 9, 10, 11});
}

// A segment cut shorter than data a verified checkpoint recorded as durable lost acknowledged
// records: the open refuses (it used to pass over the checkpoint and replay from what was left,
// silently dropping them), and salvage opens without that checkpoint.
TEST_F(LogDamageTest, ASegmentShorterThanItsCheckpointSaysIsRefused) {
  {
    auto store = OpenLogStore(SmallLogOptions(dir_.path()));
    ASSERT_TRUE(store.ok());
    auto info = (*store)->CreateStream(Spec("s"));
    ASSERT_TRUE(info.ok());
    for (int i = 0; i < 10; ++i) {
      ASSERT_TRUE(AppendPayloads(**store, info->id, {std::string(100, 'a')}).ok());
    }
  }  // the clean close writes a checkpoint covering every frame
  const std::string seg = dir_.path() + "/00000000000000000001.log";
  ASSERT_EQ(::truncate(seg.c_str(), 300), 0);
  auto store = OpenLogStore(SmallLogOptions(dir_.path()));
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kCorruption);
  EXPECT_NE(store.status().message().find("shorter than data the checkpoint recorded"),
            std::string_view::npos)
      << store.status().ToString();
  LogStoreOptions o = SmallLogOptions(dir_.path());
  o.salvage = true;
  auto salvaged = OpenLogStore(o);
  ASSERT_TRUE(salvaged.ok()) << salvaged.status().ToString();
  EXPECT_FALSE(dynamic_cast<log::LogStore&>(**salvaged).RecoveryNotes().empty());
}

// Damage to written data in the last segment is not a torn tail when intact frames follow it:
// a flipped bit in a length, or a zeroed header, must not make recovery (or `runnel check`)
// truncate the acknowledged frames after it.
class LastSegmentDamageTest : public LogDamageTest {
 protected:
  enum class Damage { kLengthBit, kZeroedHeader, kHugeLength };
  void ExpectRefused(Damage damage) {
    const std::string seg = Populate(10);
    const size_t pos = FramePos(seg, 1);  // the first batch
    std::string data = ReadFile(seg);
    switch (damage) {
      case Damage::kLengthBit: data[pos + 4] = static_cast<char>(data[pos + 4] ^ 1); break;
      case Damage::kZeroedHeader:
        std::fill(data.begin() + static_cast<std::ptrdiff_t>(pos),
                  data.begin() + static_cast<std::ptrdiff_t>(pos + log::kFrameHeaderSize), '\0');
        break;
      case Damage::kHugeLength:
        for (size_t i = 4; i < 8; ++i) data[pos + i] = '\xff';
        break;
    }
    WriteFile(seg, data);
    auto check = log::CheckLogDirectory(env::Env::Posix(), dir_.path());
    ASSERT_TRUE(check.ok()) << check.status().ToString();
    EXPECT_FALSE(check->corruption.empty());
    EXPECT_FALSE(check->torn_tail);
    auto store = OpenLogStore(SmallLogOptions(dir_.path()));
    ASSERT_FALSE(store.ok());
    EXPECT_EQ(store.status().code(), StatusCode::kCorruption) << store.status().ToString();
    EXPECT_NE(store.status().message().find("at byte " + std::to_string(pos)), std::string::npos)
        << store.status().ToString();
    EXPECT_EQ(ReadFile(seg), data) << "a refused open changes nothing";
  }
};

TEST_F(LastSegmentDamageTest, AFlippedLengthBitIsRefused) {
  ExpectRefused(Damage::kLengthBit);
}
TEST_F(LastSegmentDamageTest, AZeroedHeaderIsRefused) {
  ExpectRefused(Damage::kZeroedHeader);
}
TEST_F(LastSegmentDamageTest, AnImpossibleLengthIsRefused) {
  ExpectRefused(Damage::kHugeLength);
}

TEST_F(LogDamageTest, TornTailIsTruncatedAndTheLogContinues) {
  const std::string seg = Populate(10);
  const size_t pos = FramePos(seg, 10);  // the last batch
  // A torn write: the batch's first 60 bytes landed, nothing after them (not even the
  // checkpoint marker the clean close wrote).
  std::string data = ReadFile(seg);
  std::fill(data.begin() + static_cast<std::ptrdiff_t>(pos + 60), data.end(), '\0');
  WriteFile(seg, data);
  auto store = OpenLogStore(SmallLogOptions(dir_.path()));
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto notes = dynamic_cast<log::LogStore&>(**store).RecoveryNotes();
  ASSERT_FALSE(notes.empty());
  EXPECT_NE(notes[0].find("torn tail at byte " + std::to_string(pos)), std::string::npos)
      << notes[0];
  auto info = (*store)->GetStream("global", "s");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->next_offset, 10u) << "the torn batch is wholly absent";
  auto r = AppendPayloads(**store, info->id, {"next"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->first_offset, 10u);
  store->reset();
  store = OpenLogStore(SmallLogOptions(dir_.path()));
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto recs = (*store)->Read(info->id, 9, 10, 1 << 20);
  ASSERT_TRUE(recs.ok());
  ASSERT_EQ(recs->size(), 2u);
  EXPECT_EQ((*recs)[1].payload, "next");
}

// Checkpoint versions: this binary writes version 2 and still reads version 1 (same layout);
// an unknown version is refused like a damaged checkpoint, and recovery replays the log instead.
// A group write that landed in part: the page holding one frame's header stayed zero (the
// pre-zeroed segment) while a later frame reached the disk. The log ends at the zeros, and
// recovery zeroes what lies beyond, so those unacknowledged bytes can never parse as frames
// once new writes end next to them.
TEST_F(LogDamageTest, BytesBeyondTheEndOfTheLogAreZeroedAtOpen) {
  const std::string seg = Populate(6);
  const size_t third = FramePos(seg, 3);  // the third batch: offset 3
  const size_t fifth = FramePos(seg, 5);
  std::string data = ReadFile(seg);
  // The sector holding the frame's header did not land: zeros from the header to its end.
  const size_t sector_end = (third / log::kTornSectorSize + 1) * log::kTornSectorSize;
  ASSERT_GT(fifth, sector_end);
  std::fill(data.begin() + static_cast<std::ptrdiff_t>(third),
            data.begin() + static_cast<std::ptrdiff_t>(sector_end), '\0');
  WriteFile(seg, data);
  ASSERT_NE(data.substr(fifth, 20), std::string(20, '\0')) << "the later batches are on disk";
  {
    auto store = OpenLogStore(SmallLogOptions(dir_.path()));
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    auto info = (*store)->GetStream("global", "s");
    ASSERT_TRUE(info.ok());
    EXPECT_EQ(info->next_offset, 3u) << "the log ends where the zeros start";
    const auto notes = dynamic_cast<log::LogStore&>(**store).RecoveryNotes();
    ASSERT_FALSE(notes.empty());
    EXPECT_NE(notes.back().find("at byte " + std::to_string(third)), std::string::npos)
        << notes.back();
    const std::string after = ReadFile(seg).substr(third);
    EXPECT_EQ(after.find_first_not_of('\0'), std::string::npos)
        << "bytes beyond the end of the log survived the open";
    ASSERT_TRUE(AppendPayloads(**store, info->id, {"new"}).ok());
  }
  auto store = OpenLogStore(SmallLogOptions(dir_.path()));
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto info = (*store)->GetStream("global", "s");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->next_offset, 4u);
  auto rec = (*store)->ReadAt(info->id, 3);
  ASSERT_TRUE(rec.ok() && rec->has_value());
  EXPECT_EQ((*rec)->payload, "new");
}

// Replay reads a segment through a window of a few MiB that moves with the frames (restart costs
// the log since the checkpoint, not the preallocated segment size). These use a 24 MiB segment,
// several windows long: frames that straddle a window edge, a frame larger than the window, a
// torn tail inside that large frame, and bytes beyond the end of the log far past the first
// window are all treated exactly as in a segment read whole.
class LogWindowTest : public LogDamageTest {
 protected:
  static constexpr size_t kBig = 6u << 20;  // larger than the replay window (4 MiB)

  LogStoreOptions Options() {
    LogStoreOptions o = SmallLogOptions(dir_.path());
    o.segment_size = 24u << 20;
    o.checkpoint_interval_bytes = 1u << 30;
    return o;
  }
  static std::string Payload(size_t i, size_t size) {
    std::string p(size, static_cast<char>('a' + i % 26));
    p.replace(0, std::min<size_t>(size, 8), std::to_string(i).substr(0, 8));
    return p;
  }
  // 40 records of 97-300 KB (their frames cross the window's edges), then one of kBig; returns
  // the payloads in offset order.
  std::vector<std::string> Fill() {
    std::vector<std::string> payloads;
    auto store = OpenLogStore(Options());
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    auto info = (*store)->CreateStream(Spec("s"));
    EXPECT_TRUE(info.ok());
    for (size_t i = 0; i < 40; ++i) payloads.push_back(Payload(i, 97'000 + (i * 7919) % 203'000));
    payloads.push_back(Payload(40, kBig));
    for (const auto& p : payloads) EXPECT_TRUE(AppendPayloads(**store, info->id, {p}).ok());
    store->reset();
    auto names = env::Env::Posix()->ListDir(dir_.path());
    for (const auto& name : *names) {
      if (name.rfind("checkpoint-", 0) == 0) std::remove((dir_.path() + "/" + name).c_str());
    }
    return payloads;
  }
  static std::string Segment1(const std::string& dir) { return dir + "/00000000000000000001.log"; }
};

TEST_F(LogWindowTest, FramesAcrossWindowEdgesAndLargerThanTheWindowReplayWhole) {
  const auto payloads = Fill();
  const std::string seg = Segment1(dir_.path());
  ASSERT_GT(FramePos(seg, 41), 4u << 20) << "the small frames alone cross a window edge";
  auto store = OpenLogStore(Options());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_TRUE(dynamic_cast<log::LogStore&>(**store).RecoveryNotes().empty());
  auto info = (*store)->GetStream("global", "s");
  ASSERT_TRUE(info.ok());
  ASSERT_EQ(info->next_offset, payloads.size() + 1);
  for (size_t i = 0; i < payloads.size(); ++i) {
    auto rec = (*store)->ReadAt(info->id, i + 1);
    ASSERT_TRUE(rec.ok() && rec->has_value()) << i;
    EXPECT_TRUE((*rec)->payload == payloads[i]) << "record " << i + 1 << " differs after replay";
  }
}

TEST_F(LogWindowTest, TornTailInsideAFrameLargerThanTheWindowIsTruncated) {
  const auto payloads = Fill();
  const std::string seg = Segment1(dir_.path());
  const size_t big = FramePos(seg, 41);  // frame 0 creates the stream
  std::string data = ReadFile(seg);
  // The large batch's first 5 MiB landed, its last MiB did not.
  std::fill(data.begin() + static_cast<std::ptrdiff_t>(big + (5u << 20)), data.end(), '\0');
  WriteFile(seg, data);
  auto store = OpenLogStore(Options());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  const auto notes = dynamic_cast<log::LogStore&>(**store).RecoveryNotes();
  ASSERT_FALSE(notes.empty());
  EXPECT_NE(notes[0].find("torn tail at byte " + std::to_string(big)), std::string::npos)
      << notes[0];
  auto info = (*store)->GetStream("global", "s");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->next_offset, payloads.size()) << "the torn batch is wholly absent";
  const std::string after = ReadFile(seg).substr(big);
  EXPECT_EQ(after.find_first_not_of('\0'), std::string::npos) << "the torn bytes survived the open";
}

TEST_F(LogWindowTest, BytesFarBeyondTheEndOfTheLogAreFoundAndZeroed) {
  const auto payloads = Fill();
  const std::string seg = Segment1(dir_.path());
  // The end of the log: after the large batch come the frames the clean close wrote.
  size_t end = FramePos(seg, 41);
  for (const std::string data = ReadFile(seg); log::LoadU32(data.data() + end + 4) != 0;) {
    end += log::kFrameHeaderSize + log::LoadU32(data.data() + end + 4);
  }
  const size_t stray = end + (5u << 20);  // more than one window past the end
  ASSERT_LT(stray + 100, 24u << 20);
  std::string data = ReadFile(seg);
  std::fill(data.begin() + static_cast<std::ptrdiff_t>(stray),
            data.begin() + static_cast<std::ptrdiff_t>(stray + 100), 'Z');
  WriteFile(seg, data);
  auto store = OpenLogStore(Options());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  const auto notes = dynamic_cast<log::LogStore&>(**store).RecoveryNotes();
  ASSERT_FALSE(notes.empty());
  EXPECT_NE(notes.back().find("after the end of the log at byte " + std::to_string(end)),
            std::string::npos)
      << notes.back();
  auto info = (*store)->GetStream("global", "s");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->next_offset, payloads.size() + 1) << "every record before the end is kept";
  const std::string after = ReadFile(seg).substr(end);
  EXPECT_EQ(after.find_first_not_of('\0'), std::string::npos)
      << "the stray bytes survived the open";
}

TEST_F(LogDamageTest, CheckpointVersionsOneToFourAreReadAndOthersRefused) {
  Populate(5);
  {
    auto store = OpenLogStore(SmallLogOptions(dir_.path()));
    ASSERT_TRUE(store.ok());
  }  // the clean close writes a checkpoint
  auto checkpoint = [&] {
    for (const auto& name : ListNames(dir_.path())) {
      if (name.rfind("checkpoint-", 0) == 0) return dir_.path() + "/" + name;
    }
    return std::string();
  };
  ASSERT_FALSE(checkpoint().empty());
  EXPECT_EQ(ReadFile(checkpoint()).substr(8, 4), std::string("\x02\0\0\0", 4));
  // Versions 3 (holes salvage left) and 4 (records DropRecords removed) have the same layout:
  // a checkpoint without either reads the same under them. Version 5 is unknown.
  for (char version : {'\x01', '\x03', '\x04', '\x05'}) {
    SCOPED_TRACE(static_cast<int>(version));
    Poke(checkpoint(), 8, version);
    auto store = OpenLogStore(SmallLogOptions(dir_.path()));
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    auto notes = dynamic_cast<log::LogStore&>(**store).RecoveryNotes();
    if (version != '\x05') {
      for (const auto& note : notes) EXPECT_EQ(note.find("checkpoint"), std::string::npos) << note;
    } else {
      ASSERT_FALSE(notes.empty());
      EXPECT_NE(notes[0].find("unsupported version 5"), std::string::npos) << notes[0];
    }
    auto info = (*store)->GetStream("global", "s");
    ASSERT_TRUE(info.ok());
    EXPECT_EQ(info->next_offset, 6u);
    auto recs = (*store)->Read(info->id, 1, 10, 1 << 20);
    ASSERT_TRUE(recs.ok());
    EXPECT_EQ(recs->size(), 5u);
  }
}

TEST_F(LogDamageTest, DamagedCheckpointFallsBackToFullReplayOrIsReported) {
  Populate(5);
  {
    auto store = OpenLogStore(SmallLogOptions(dir_.path()));
    ASSERT_TRUE(store.ok());
  }  // the clean close writes a checkpoint
  std::string ckpt;
  for (const auto& name : ListNames(dir_.path())) {
    if (name.rfind("checkpoint-", 0) == 0) ckpt = dir_.path() + "/" + name;
  }
  ASSERT_FALSE(ckpt.empty());
  Poke(ckpt, 50, '\x7f');
  {
    auto store = OpenLogStore(SmallLogOptions(dir_.path()));
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    auto notes = dynamic_cast<log::LogStore&>(**store).RecoveryNotes();
    ASSERT_GE(notes.size(), 2u);
    EXPECT_NE(notes[0].find("checksum mismatch"), std::string::npos) << notes[0];
    EXPECT_NE(notes[1].find("replaying the whole log"), std::string::npos) << notes[1];
    auto info = (*store)->GetStream("global", "s");
    ASSERT_TRUE(info.ok());
    EXPECT_EQ(info->next_offset, 6u);
  }
  // Once the history before the checkpoint is gone, a damaged checkpoint cannot be replaced.
  for (const auto& name : ListNames(dir_.path())) {
    if (name.rfind("checkpoint-", 0) == 0) Poke(dir_.path() + "/" + name, 50, '\x7f');
  }
  std::rename((dir_.path() + "/00000000000000000001.log").c_str(),
              (dir_.path() + "/00000000000000000002.log").c_str());
  auto store = OpenLogStore(SmallLogOptions(dir_.path()));
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kCorruption);
  EXPECT_NE(store.status().message().find("checkpoint"), std::string_view::npos)
      << store.status().ToString();
}

// The byte range of each stream entry in a checkpoint body, and the entry's stream id.
struct CheckpointEntry {
  size_t begin, end;
  uint64_t id;
};
std::vector<CheckpointEntry> CheckpointEntries(std::string_view body) {
  std::vector<CheckpointEntry> out;
  log::Reader r(body);
  uint64_t v, count;
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(r.U64(&v));
  EXPECT_TRUE(r.U64(&count));
  for (uint64_t s = 0; s < count; ++s) {
    CheckpointEntry e{body.size() - r.remaining(), 0, 0};
    std::string_view str;
    StreamRetention ret;
    uint8_t closed;
    uint32_t n32;
    uint64_t batches, records;
    EXPECT_TRUE(r.U64(&e.id) && r.String(&str) && r.String(&str) && r.String(&str) &&
                r.Retention(&ret) && r.U64(&v) && r.U64(&v) && r.String(&str) && r.U64(&v) &&
                r.U64(&v) && r.U8(&closed) && r.U64(&batches));
    for (uint64_t b = 0; b < batches; ++b) {
      EXPECT_TRUE(r.U64(&v) && r.U64(&v) && r.U32(&n32) && r.U32(&n32) && r.U32(&n32));
    }
    EXPECT_TRUE(r.U64(&records));
    for (uint64_t k = 0; k < records; ++k) EXPECT_TRUE(r.U32(&n32) && r.U32(&n32));
    EXPECT_TRUE(r.U32(&n32));  // no cursors in this test
    EXPECT_EQ(n32, 0u);
    EXPECT_TRUE(r.U32(&n32));  // no producers
    EXPECT_EQ(n32, 0u);
    e.end = body.size() - r.remaining();
    out.push_back(e);
  }
  EXPECT_TRUE(r.done());
  return out;
}

// Checkpoints list streams by (ns, name), the order loading indexes names fastest. One that
// lists them in another order (earlier writers used ascending id) loads all the same; one that
// names a stream id or a name twice is refused, and the log is replayed instead.
TEST_F(LogDamageTest, CheckpointEntriesLoadInAnyOrderAndDuplicatesAreRefused) {
  {
    auto store = OpenLogStore(SmallLogOptions(dir_.path()));
    ASSERT_TRUE(store.ok());
    for (const char* name : {"c", "b", "a"}) {  // ids 1, 2, 3
      auto info = (*store)->CreateStream(Spec(name));
      ASSERT_TRUE(info.ok());
      ASSERT_TRUE(AppendPayloads(**store, info->id, {std::string(name) + "!"}).ok());
    }
  }  // the clean close writes a checkpoint
  std::string ckpt;
  for (const auto& name : ListNames(dir_.path())) {
    if (name.rfind("checkpoint-", 0) == 0) ckpt = dir_.path() + "/" + name;
  }
  ASSERT_FALSE(ckpt.empty());
  const std::string original = ReadFile(ckpt);
  const std::string body = original.substr(log::kCheckpointHeaderSize);
  const std::vector<CheckpointEntry> entries = CheckpointEntries(body);
  ASSERT_EQ(entries.size(), 3u);
  EXPECT_EQ(entries[0].id, 3u);  // "a"
  EXPECT_EQ(entries[1].id, 2u);  // "b"
  EXPECT_EQ(entries[2].id, 1u);  // "c"
  // The checkpoint with its entries in `order` (the stream count unchanged) and `edit` applied
  // to the new body; the CRC is recomputed, so only the loader's own checks can refuse it.
  auto rewrite = [&](std::vector<size_t> order, const std::function<void(std::string*)>& edit) {
    std::string out = body.substr(0, entries[0].begin);
    for (size_t i : order) out += body.substr(entries[i].begin, entries[i].end - entries[i].begin);
    if (edit) edit(&out);
    std::string file = original.substr(0, log::kCheckpointHeaderSize);
    std::string crc;
    log::PutU32(&crc, log::MaskCrc(log::Crc32c(out)));
    file.replace(24, 4, crc);
    // Each open closes with a newer checkpoint of its own: only the rewritten one may remain.
    for (const auto& name : ListNames(dir_.path())) {
      if (name.rfind("checkpoint-", 0) == 0) std::remove((dir_.path() + "/" + name).c_str());
    }
    WriteFile(ckpt, file + out);
  };
  auto open_and_check = [&](const std::string& note) {
    auto store = OpenLogStore(SmallLogOptions(dir_.path()));
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    const auto notes = dynamic_cast<log::LogStore&>(**store).RecoveryNotes();
    if (note.empty()) {
      for (const auto& n : notes) EXPECT_EQ(n.find("checkpoint"), std::string::npos) << n;
    } else {
      ASSERT_FALSE(notes.empty());
      EXPECT_NE(notes[0].find(note), std::string::npos) << notes[0];
    }
    auto listed = (*store)->ListStreams("global", "", 10);
    ASSERT_TRUE(listed.ok());
    ASSERT_EQ(listed->size(), 3u);
    for (size_t i = 0; i < 3; ++i) {
      const std::string name(1, static_cast<char>('a' + i));
      EXPECT_EQ((*listed)[i].spec.name, name);
      EXPECT_EQ((*listed)[i].id, 3u - i);
      auto recs = (*store)->Read((*listed)[i].id, 1, 10, 1 << 20);
      ASSERT_TRUE(recs.ok());
      ASSERT_EQ(recs->size(), 1u);
      EXPECT_EQ((*recs)[0].payload, name + "!");
    }
  };
  {
    SCOPED_TRACE("ascending id, as earlier writers listed them");
    rewrite({2, 1, 0}, nullptr);
    ASSERT_NO_FATAL_FAILURE(open_and_check(""));
  }
  {
    SCOPED_TRACE("an id twice");
    rewrite({0, 1, 1}, nullptr);
    ASSERT_NO_FATAL_FAILURE(open_and_check("duplicate stream id"));
  }
  {
    SCOPED_TRACE("a name twice");
    // Entry "c" renamed "a": its name is the one-byte string after the id and "global".
    rewrite({0, 1, 2}, [&](std::string* out) {
      const size_t name_at = entries[2].begin + 8 + 4 + 6 + 4;
      ASSERT_EQ((*out)[name_at], 'c');
      (*out)[name_at] = 'a';
    });
    ASSERT_NO_FATAL_FAILURE(open_and_check("duplicate stream name"));
  }
}

TEST_F(LogDamageTest, CheckReportsHealthyTornAndCorruptDirectories) {
  const std::string seg = Populate(10);
  auto healthy = log::CheckLogDirectory(env::Env::Posix(), dir_.path());
  ASSERT_TRUE(healthy.ok()) << healthy.status().ToString();
  EXPECT_TRUE(healthy->corruption.empty());
  EXPECT_FALSE(healthy->torn_tail);
  EXPECT_EQ(healthy->records, 10u);
  EXPECT_EQ(healthy->streams_created, 1u);

  {
    auto store = OpenLogStore(SmallLogOptions(dir_.path()));
    ASSERT_TRUE(store.ok());
    auto busy = log::CheckLogDirectory(env::Env::Posix(), dir_.path());
    EXPECT_EQ(busy.status().code(), StatusCode::kUnavailable) << "a live store's directory";
  }
  const size_t pos = FramePos(seg, 3);
  Poke(seg, pos + 30, 'Q');
  auto corrupt = log::CheckLogDirectory(env::Env::Posix(), dir_.path());
  ASSERT_TRUE(corrupt.ok());
  ASSERT_EQ(corrupt->corruption.size(), 1u);
  EXPECT_NE(corrupt->corruption[0].find("at byte " + std::to_string(pos)), std::string::npos)
      << corrupt->corruption[0];
  EXPECT_EQ(log::CheckLogDirectory(env::Env::Posix(), dir_.path() + "/nope").status().code(),
            StatusCode::kNotFound);
}

// The real file system as a read-only mount shows it: every open for writing, lock, creation,
// rename and removal fails with EROFS's error; reads work.
class ReadOnlyEnv final : public env::Env {
 public:
  Result<std::unique_ptr<env::File>> OpenFile(const std::string& path, bool) override {
    return Refused("open", path);
  }
  Result<std::unique_ptr<env::File>> OpenFileForRead(const std::string& path) override {
    return env::Env::Posix()->OpenFileForRead(path);
  }
  Status RemoveFile(const std::string& path) override { return Refused("remove", path); }
  Status RenameFile(const std::string& from, const std::string&) override {
    return Refused("rename", from);
  }
  Status CreateDir(const std::string& path) override { return Refused("mkdir", path); }
  Status RemoveDir(const std::string& path) override { return Refused("rmdir", path); }
  Status SyncDir(const std::string&) override { return Status::OK(); }
  Result<std::vector<std::string>> ListDir(const std::string& dir) override {
    return env::Env::Posix()->ListDir(dir);
  }
  bool FileExists(const std::string& path) override { return env::Env::Posix()->FileExists(path); }
  Result<uint64_t> FileSize(const std::string& path) override {
    return env::Env::Posix()->FileSize(path);
  }
  Result<std::unique_ptr<env::FileLock>> LockFile(const std::string& path) override {
    return Refused("open lock file", path);
  }

 private:
  static Status Refused(std::string_view what, const std::string& path) {
    return Status::IOError(std::string(what) + " '" + path + "': Read-only file system");
  }
};

// `runnel check` on a backup or a read-only mount: it reads, never writes, and needs no lock
// it cannot take (no server can be writing there either).
TEST_F(LogDamageTest, CheckReadsADirectoryItCannotWrite) {
  const std::string seg = Populate(10);
  ReadOnlyEnv read_only;
  auto report = log::CheckLogDirectory(&read_only, dir_.path());
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_TRUE(report->corruption.empty());
  EXPECT_TRUE(report->open.ok()) << report->open.ToString();
  EXPECT_EQ(report->records, 10u);
  ASSERT_FALSE(report->lines.empty());
  EXPECT_NE(report->lines[0].find("without the data directory's lock"), std::string::npos)
      << report->lines[0];
  // Damage is still found.
  Poke(seg, FramePos(seg, 3) + 30, 'Q');
  auto corrupt = log::CheckLogDirectory(&read_only, dir_.path());
  ASSERT_TRUE(corrupt.ok()) << corrupt.status().ToString();
  EXPECT_EQ(corrupt->corruption.size(), 1u);
}

// Check runs recovery itself (over a copy-on-write view): a frame with a valid checksum that
// recovery refuses is reported with recovery's reason, and a torn tail that recovery would
// truncate is left exactly as it is on disk.
TEST_F(LogDamageTest, CheckReportsRecoverysVerdictAndChangesNothing) {
  const std::string seg = Populate(4);
  // Append a well-formed create frame (valid checksum) whose stream id is implausible.
  StreamSpec spec;
  spec.ns = "global";
  spec.name = "far";
  std::string data = ReadFile(seg);
  const size_t end = FramePos(seg, 5);
  std::string frame;
  log::AppendFrame(&frame, log::FrameType::kCreateStream,
                   log::EncodeCreateStream(uint64_t{1} << 40, spec));
  data.replace(end, frame.size(), frame);
  WriteFile(seg, data);
  auto refused = log::CheckLogDirectory(env::Env::Posix(), dir_.path());
  ASSERT_TRUE(refused.ok()) << refused.status().ToString();
  EXPECT_EQ(refused->open.code(), StatusCode::kCorruption);
  ASSERT_EQ(refused->corruption.size(), 1u);
  EXPECT_NE(refused->corruption[0].find("implausible id"), std::string::npos)
      << refused->corruption[0];
  EXPECT_EQ(OpenLogStore(SmallLogOptions(dir_.path())).status().code(), StatusCode::kCorruption)
      << "an open agrees";

  // A torn last frame instead: recovery would truncate it and write a checkpoint at close.
  data.replace(end, frame.size(), frame.substr(0, 20) + std::string(frame.size() - 20, '\0'));
  WriteFile(seg, data);
  const auto names_before = env::Env::Posix()->ListDir(dir_.path());
  auto torn = log::CheckLogDirectory(env::Env::Posix(), dir_.path());
  ASSERT_TRUE(torn.ok()) << torn.status().ToString();
  EXPECT_TRUE(torn->open.ok()) << torn->open.ToString();
  EXPECT_TRUE(torn->corruption.empty());
  EXPECT_FALSE(torn->recovery_notes.empty()) << "the truncation is reported";
  EXPECT_EQ(ReadFile(seg), data) << "check wrote to the segment";
  auto names_after = env::Env::Posix()->ListDir(dir_.path());
  ASSERT_TRUE(names_before.ok() && names_after.ok());
  std::vector<std::string> before = *names_before, after = *names_after;
  std::sort(before.begin(), before.end());
  std::sort(after.begin(), after.end());
  EXPECT_EQ(after, before) << "check created or removed files";
}

// Damage in bytes the newest checkpoint covers: an open trusts them (restart time does not grow
// with data size), a read of the damaged record reports it, and check finds it while saying
// that the store opens.
TEST_F(LogDamageTest, CheckFindsDamageACheckpointCoversThatAnOpenDoesNotRead) {
  auto store = OpenLogStore(SmallLogOptions(dir_.path()));
  ASSERT_TRUE(store.ok());
  auto info = (*store)->CreateStream(Spec("s"));
  ASSERT_TRUE(info.ok());
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(AppendPayloads(**store, info->id, {"payload"}).ok());
  store->reset();  // a clean close writes a checkpoint covering everything
  const std::string seg = dir_.path() + "/00000000000000000001.log";
  const std::string pristine = ReadFile(seg);
  const size_t pos = FramePos(seg, 2);  // the second batch: offset 2
  Poke(seg, pos + log::kFrameHeaderSize + 30, 'Z');
  auto report = log::CheckLogDirectory(env::Env::Posix(), dir_.path());
  ASSERT_TRUE(report.ok());
  EXPECT_TRUE(report->open.ok()) << report->open.ToString();
  ASSERT_EQ(report->corruption.size(), 1u);
  EXPECT_NE(report->corruption[0].find("at byte " + std::to_string(pos)), std::string::npos)
      << report->corruption[0];
  auto reopened = OpenLogStore(SmallLogOptions(dir_.path()));
  ASSERT_TRUE(reopened.ok()) << reopened.status().ToString();
  EXPECT_EQ((*reopened)->ReadAt(info->id, 2).status().code(), StatusCode::kCorruption);
  auto fine = (*reopened)->ReadAt(info->id, 1);
  ASSERT_TRUE(fine.ok() && fine->has_value());
  EXPECT_EQ((*fine)->payload, "payload");
  reopened->reset();

  // Damage in the last record before the checkpoint, with nothing valid after it, looks like a
  // torn tail to a scan, but the checkpoint says those bytes were whole: it is corruption.
  auto names = env::Env::Posix()->ListDir(dir_.path());
  ASSERT_TRUE(names.ok());
  for (const auto& name : *names) {
    if (name.rfind("checkpoint-", 0) == 0) continue;
    if (name.size() == 24 && name.substr(20) == ".log" && name != "00000000000000000001.log") {
      std::remove((dir_.path() + "/" + name).c_str());  // only segment 1 and the checkpoint
    }
  }
  std::string data = pristine;
  const size_t last = FramePos(seg, 4);  // the fourth batch: offset 4
  const size_t marker = FramePos(seg, 5);
  data[last + log::kFrameHeaderSize + 30] ^= 1;
  data.replace(marker, data.size() - marker, std::string(data.size() - marker, '\0'));
  WriteFile(seg, data);
  auto at_end = log::CheckLogDirectory(env::Env::Posix(), dir_.path());
  ASSERT_TRUE(at_end.ok());
  EXPECT_FALSE(at_end->torn_tail);
  ASSERT_FALSE(at_end->corruption.empty());
  EXPECT_NE(at_end->corruption[0].find("at byte " + std::to_string(last)), std::string::npos)
      << at_end->corruption[0];
}

// Damage a checkpoint covers, found where it sits: the scrub reports the damaged frame once,
// by segment, byte, stream and offsets; reads answer the records before it, a read that starts
// at it fails with the unreadable offsets, and reading from the end of that range goes on.
TEST_F(LogDamageTest, TheScrubFindsDamageACheckpointCoversAndReadsGoAroundIt) {
  auto store = OpenLogStore(SmallLogOptions(dir_.path()));
  ASSERT_TRUE(store.ok());
  auto info = (*store)->CreateStream(Spec("s"));
  ASSERT_TRUE(info.ok());
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(AppendPayloads(**store, info->id, {"payload"}).ok());
  store->reset();  // a clean close writes a checkpoint covering everything
  const std::string seg = dir_.path() + "/00000000000000000001.log";
  const size_t pos = FramePos(seg, 3);  // the third batch: offset 3
  Poke(seg, pos + log::kFrameHeaderSize + 30, 'Z');

  std::vector<std::string> reports;
  std::mutex reports_mu;
  LogStoreOptions options = SmallLogOptions(dir_.path());
  options.scrub_bytes_per_sec = 0;  // this test scrubs by hand
  options.on_damage = [&](const std::string& line) {
    std::lock_guard lock(reports_mu);
    reports.push_back(line);
  };
  auto reopened = OpenLogStore(options);
  ASSERT_TRUE(reopened.ok()) << reopened.status().ToString();
  auto& log_store = dynamic_cast<log::LogStore&>(**reopened);
  // More records after the damage, in segment 1 and the next (the one being written is
  // scrubbed too, up to what it holds).
  auto other = (*reopened)->CreateStream(Spec("other"));
  ASSERT_TRUE(other.ok());
  while (log_store.SegmentNumbers().back() == 1) {
    ASSERT_TRUE(AppendPayloads(**reopened, other->id, {std::string(4096, 'o')}).ok());
  }
  ASSERT_TRUE(log_store.ScrubOnce().ok());
  ASSERT_TRUE(log_store.ScrubOnce().ok());  // a second pass reports nothing new
  {
    std::lock_guard lock(reports_mu);
    ASSERT_EQ(reports.size(), 1u);
    EXPECT_NE(reports[0].find("00000000000000000001.log at byte " + std::to_string(pos)),
              std::string::npos)
        << reports[0];
    EXPECT_NE(reports[0].find("stream 's' records 3 to 3"), std::string::npos) << reports[0];
  }
  EXPECT_EQ((*reopened)->CommitStats().damaged_frames, 1u);
  EXPECT_EQ((*reopened)->CommitStats().scrub_passes, 2u);
  EXPECT_GT((*reopened)->CommitStats().scrubbed_bytes, 0u);

  // From the start: the records before the damage.
  auto head = (*reopened)->Read(info->id, 1, 100, 1 << 20);
  ASSERT_TRUE(head.ok()) << head.status().ToString();
  ASSERT_EQ(head->size(), 2u);
  EXPECT_EQ((*head)[1].offset, 2u);
  // At the damage: which offsets cannot be read, and where reading goes on.
  auto at = (*reopened)->Read(info->id, 3, 100, 1 << 20);
  ASSERT_FALSE(at.ok());
  EXPECT_EQ(at.status().code(), StatusCode::kCorruption);
  ASSERT_TRUE(at.status().unreadable_range().has_value()) << at.status().ToString();
  EXPECT_EQ(*at.status().unreadable_range(), std::make_pair(uint64_t{3}, uint64_t{4}));
  EXPECT_NE(at.status().message().find("stream 's'"), std::string::npos);
  EXPECT_EQ(at.status().message().find(dir_.path()), std::string::npos) << "no absolute paths";
  EXPECT_EQ((*reopened)->CommitStats().unreadable_reads, 1u);
  auto rest = (*reopened)->Read(info->id, 4, 100, 1 << 20);
  ASSERT_TRUE(rest.ok()) << rest.status().ToString();
  ASSERT_EQ(rest->size(), 2u);
  EXPECT_EQ((*rest)[0].offset, 4u);
  EXPECT_EQ((*rest)[1].payload, "payload");
}

}  // namespace
}  // namespace runnel::testing
