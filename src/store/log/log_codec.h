// Encoding and decoding of the frames and headers described in log_format.h.
// Pure functions; thread-safe.
#ifndef RUNNEL_STORE_LOG_LOG_CODEC_H_
#define RUNNEL_STORE_LOG_LOG_CODEC_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runnel/status.h"
#include "runnel/store.h"
#include "store/log/log_format.h"

namespace runnel::log {

// --- primitive coding ---
void PutU8(std::string* dst, uint8_t v);
void PutU32(std::string* dst, uint32_t v);
void PutU64(std::string* dst, uint64_t v);
void PutVarint(std::string* dst, uint64_t v);
void PutString(std::string* dst, std::string_view s);
void PutRetention(std::string* dst, const StreamRetention& r);
uint32_t LoadU32(const char* p);
uint64_t LoadU64(const char* p);

// Reads primitives from a byte range; every getter returns false (and leaves the reader
// failed) when the range is too short.
class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  bool U8(uint8_t* v);
  bool U32(uint32_t* v);
  bool U64(uint64_t* v);
  // A LEB128 varint of at most 10 bytes that fits in 64 bits.
  bool Varint(uint64_t* v);
  bool String(std::string_view* v);
  bool String(std::string* v);
  bool Retention(StreamRetention* r);
  bool done() const { return in_.empty(); }
  size_t remaining() const { return in_.size(); }

 private:
  std::string_view in_;
};

// --- segment header ---
std::string EncodeSegmentHeader(uint64_t segment);
// kCorruption naming `what` when the header is not a valid version-1 header of `segment`.
Status CheckSegmentHeader(std::string_view header, uint64_t segment, std::string_view what);

// --- frames ---
// Appends one frame (header + body) to dst.
void AppendFrame(std::string* dst, FrameType type, std::string_view body);
// The same frame built in place: BeginFrame appends a header to be completed and returns where
// the frame starts; the caller appends the body to *dst, then FinishFrame fills in the length
// and the checksum. Saves the copy of a body encoded separately.
size_t BeginFrame(std::string* dst, FrameType type);
void FinishFrame(std::string* dst, size_t start);

enum class FrameCheck { kOk, kEnd, kTruncated, kBadLength, kBadCrc };
struct FrameView {
  FrameType type{};
  std::string_view body;
  size_t size = 0;  // header + body
};
// Parses the frame at the start of `in`. kEnd for an all-zero header (the pre-zeroed end of a
// segment) or fewer than kFrameHeaderSize bytes of zeros. `verify_crc` false skips the checksum
// (kBadCrc then only reports an unknown type): only for frames this process built and still
// holds in memory (the log store's tail cache), never for bytes read from a file.
FrameCheck ParseFrame(std::string_view in, FrameView* out, bool verify_crc = true);
std::string_view FrameCheckName(FrameCheck c);

// --- telling a torn tail from corruption ---
//
// A crash cuts the last write short: what follows the cut never reached the file (zeros in a
// pre-zeroed segment, or the file's end), or, when the device persisted a later sector and not
// an earlier one, the cut sits at a sector boundary. Corruption of written data (a flipped bit, a
// zeroed header) leaves the frames written after the damaged one intact. So the damage at `pos`
// is a torn tail only when no valid frame starts anywhere after it, and a zero frame header with
// bytes after it only when the rest of its 512-byte sector is zero too.
inline constexpr uint64_t kTornSectorSize = 512;
// Most body bytes ValidFrameAfter checksums before it answers "found" without looking further
// (its scan tries every byte position; only adversarial payloads come near the bound).
inline constexpr uint64_t kMaxTornScanBytes = 1ull << 30;

// The first position in (pos, size) that holds a frame whose checksum verifies, if any (past the
// scan's budget, pos + 1: "assume one"). `view(at, n)` returns the file's bytes
// [at, min(at + n, size)) (shorter only at the file's end); a failed read returns the error.
template <typename View>
Result<std::optional<uint64_t>> ValidFrameAfter(View&& view, uint64_t pos, uint64_t size) {
  uint64_t budget = kMaxTornScanBytes;
  for (uint64_t p = pos + 1; p + kFrameHeaderSize + kMinBodySize <= size; ++p) {
    Result<std::string_view> head = view(p, kFrameHeaderSize);
    if (!head.ok()) return head.status();
    if (head->size() < kFrameHeaderSize) break;
    const uint32_t len = static_cast<uint32_t>(static_cast<uint8_t>((*head)[4])) |
                         static_cast<uint32_t>(static_cast<uint8_t>((*head)[5])) << 8 |
                         static_cast<uint32_t>(static_cast<uint8_t>((*head)[6])) << 16 |
                         static_cast<uint32_t>(static_cast<uint8_t>((*head)[7])) << 24;
    const uint8_t type = static_cast<uint8_t>((*head)[8]);
    if (len == 0) {
      // A zero run (the pre-zeroed rest of a segment, mostly): a frame's length is never zero,
      // so no frame starts before 7 bytes ahead of the run's next non-zero byte. Skip to there.
      constexpr uint64_t kStride = 64u << 10;
      Result<std::string_view> run = view(p + 4, kStride);
      if (!run.ok()) return run.status();
      size_t k = 0;
      while (k < run->size() && (*run)[k] == 0) ++k;
      if (k == run->size() && run->size() < kStride) break;  // zeros to the end of the file
      if (k >= 4) p += k - 4;  // the next candidate, p + k - 3, comes from the loop's ++p
      continue;
    }
    if (len < kMinBodySize || len > kMaxBodySize || p + kFrameHeaderSize + len > size || type < 1 ||
        type > kMaxFrameType) {
      continue;
    }
    if (len > budget) return std::optional<uint64_t>(pos + 1);
    budget -= len;
    Result<std::string_view> whole = view(p, kFrameHeaderSize + len);
    if (!whole.ok()) return whole.status();
    FrameView f;
    if (ParseFrame(*whole, &f) == FrameCheck::kOk) return std::optional<uint64_t>(p);
  }
  return std::optional<uint64_t>();
}

// True when `rest` (the bytes from a zero frame header at `pos` up to at least the end of its
// 512-byte sector, or to the file's end) is zero through that sector's end.
bool ZeroToSectorEnd(std::string_view rest, uint64_t pos);

// --- bodies ---
std::string EncodeCreateStream(StreamId id, const StreamSpec& spec);
std::string EncodeUpdateStream(StreamId id, const StreamRetention& r, std::string_view attrs);
std::string EncodeDeleteStream(StreamId id);
std::string EncodeCursorCommit(StreamId id, std::string_view consumer, uint64_t offset,
                               uint64_t now_ms);
std::string EncodeCursorDelete(StreamId id, std::string_view consumer);
std::string EncodeTruncateHead(StreamId id, uint64_t new_head);
std::string EncodeCheckpointMarker(uint64_t seq);
// `offsets`: 1 to kMaxDroppedPerFrame of them, ascending and distinct.
std::string EncodeDropRecords(StreamId id, const std::vector<uint64_t>& offsets);
// False when `body` is not a well-formed drop-records body (see log_format.h).
bool DecodeDropRecords(std::string_view body, StreamId* id, std::vector<uint64_t>* offsets);
// Appends the kAppendBatch body to dst.
void EncodeAppendBatch(std::string* dst, StreamId id, uint64_t first_offset, uint64_t ts,
                       const std::vector<AppendRecord>& records, bool close,
                       const std::optional<ProducerState>& producer,
                       const std::optional<std::string>& attributes = std::nullopt);

// A compacted relocated batch (kBatchCompacted): `source_len` is the length of the frame it
// replaces; `records` are the source's, those that are gone with empty payloads and no keys.
void EncodeCompactedBatch(std::string* dst, StreamId id, uint64_t first_offset, uint64_t ts,
                          uint32_t source_len, const std::vector<AppendRecord>& records);

struct AppendBatchHeader {
  StreamId stream = 0;
  uint64_t first_offset = 0;
  uint64_t timestamp = 0;
  uint32_t count = 0;
  uint32_t source_len = 0;  // kBatchCompacted: the replaced frame's length; 0 otherwise
  bool close = false;
  std::optional<ProducerState> producer;  // last_offset left 0
  std::optional<std::string> attributes;  // replaces the stream's attributes when set
};
// Decodes an append batch body. `sizes` (if not null) receives (payload size, key size) of each
// record;
// `records` (if not null) receives the records with offset >= min_offset, at most `limit`.
bool DecodeAppendBatch(std::string_view body, AppendBatchHeader* header,
                       std::vector<std::pair<uint32_t, uint32_t>>* sizes,
                       std::vector<StoredRecord>* records, uint64_t min_offset = 0,
                       size_t limit = SIZE_MAX);

// The stream id every body starts with (0 for a checkpoint marker).
bool BodyStreamId(FrameType type, std::string_view body, StreamId* id);
// A one-line human description of a frame, for `runnel check` and the golden test.
std::string DescribeFrame(FrameType type, std::string_view body);

}  // namespace runnel::log

#endif  // RUNNEL_STORE_LOG_LOG_CODEC_H_
