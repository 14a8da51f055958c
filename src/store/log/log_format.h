// The on-disk format of the embedded log, version 1. Prose and examples: docs/formats/log.md.
//
// A data directory holds:
//   LOCK                          flock()ed while a store has the directory open
//   <20-digit segment>.log        segments of the one write-ahead log shared by all streams
//   checkpoint-<20-digit seq>.ckpt  snapshots of the in-memory state (see checkpoint layout)
//
// All integers are little-endian. A "string" is a u32 byte length followed by the bytes.
// CRCs are CRC32C (Castagnoli), stored masked (see crc32c.h: MaskCrc).
//
// Segment file: a 32-byte header, then frames back to back, then zero bytes (segments are
// pre-filled with zeros so a sync never grows the file; a zero frame header marks the end).
//   header  0  8  magic "RUNNELWL"
//           8  4  format version (1)
//          12  4  header size (32)
//          16  8  segment number (equals the file name)
//          24  4  masked crc32c of header bytes [0, 24)
//          28  4  zero
// Frame (one record of the log; the unit of atomicity — a frame is wholly present or absent):
//           0  4  masked crc32c of frame bytes [4, 9 + length)
//           4  4  length of the body (u32), >= 8
//           8  1  type (FrameType)
//           9  -  body (length bytes), layout by type below
// A batch written by the group-commit writer is several frames written with one vectored write
// and made durable by one fdatasync; each append batch of the API is exactly one frame.
//
// Checkpoint file: a 32-byte header then a body.
//   header  0  8  magic "RUNNELCP"
//           8  4  format version (1)
//          12  4  zero
//          16  8  body length
//          24  4  masked crc32c of the body
//          28  4  zero
//   body: see checkpoint layout in log_codec.cc (EncodeCheckpoint) and docs/formats/log.md.
#ifndef RUNNEL_STORE_LOG_LOG_FORMAT_H_
#define RUNNEL_STORE_LOG_LOG_FORMAT_H_

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace runnel::log {

inline constexpr uint32_t kFormatVersion = 1;  // segments
// Checkpoints. 2: a batch entry may cover several adjacent append frames of its stream (version 1
// entries cover exactly one). The layout is the same, so version 1 is still read; a binary that
// knows only version 1 refuses version 2 (its cleaner would move one frame of such an entry and
// lose the rest) and replays the log instead, or reports the directory. 3: a batch entry in
// segment 0 with position and length 0 is a hole, records salvage found lost to damage (their
// sizes are 0). Only a checkpoint whose index holds a hole is written as version 3; the layout
// is the same. 4: a record's payload size may have bit 31 set: DropRecords removed the record
// (keyed compaction; the low bits keep its size); a batch entry whose records are all dropped is
// written as a hole (segment 0, position and length 0). Only a checkpoint whose index holds a
// dropped record is written as version 4; the layout is the same.
inline constexpr uint32_t kCheckpointVersion = 4;
inline constexpr uint32_t kCheckpointVersionWithDrops = 4;
inline constexpr uint32_t kCheckpointVersionWithHoles = 3;
inline constexpr uint32_t kCheckpointVersionWithoutHoles = 2;
inline constexpr uint32_t kOldestCheckpointVersion = 1;
inline constexpr std::string_view kSegmentMagic = "RUNNELWL";
inline constexpr std::string_view kCheckpointMagic = "RUNNELCP";
inline constexpr size_t kSegmentHeaderSize = 32;
inline constexpr size_t kCheckpointHeaderSize = 32;
inline constexpr size_t kFrameHeaderSize = 9;
inline constexpr size_t kMinBodySize = 8;
// Bodies larger than this are refused at append (kInvalidArgument) and treated as corrupt.
inline constexpr size_t kMaxBodySize = 1u << 30;

enum class FrameType : uint8_t {
  // u64 stream id, string ns, string name, string content_type, retention, u64 first_offset,
  // u64 created_at_ms, string attributes.
  kCreateStream = 1,
  // u64 stream id, retention, string attributes.
  kUpdateStream = 2,
  // u64 stream id.
  kDeleteStream = 3,
  // u64 stream id, u64 first offset, u64 timestamp ms, u32 record count, u8 flags
  // (bit 0: close the stream after the records; bit 1: producer state follows; bit 2: new
  // stream attributes follow), [string producer id, u64 epoch, u64 seq], [string attributes],
  // then per record: u8 has_key, [string key], string payload. Producer state, attributes, the
  // close and the records commit together.
  kAppendBatch = 4,
  // u64 stream id, string consumer, u64 offset, u64 timestamp ms. Replay max-merges it.
  kCursorCommit = 5,
  // u64 stream id, u64 new head: every record below it is removed (TruncatePrefix).
  kTruncateHead = 6,
  // u64 checkpoint sequence: written just before the checkpoint of that sequence is saved;
  // that checkpoint's replay position is the end of this frame.
  kCheckpointMarker = 7,
  // The body of an append batch (type 4), copied unchanged by the cleaner out of an old
  // segment. Replay points the stream's index entry for that first offset at this frame (and
  // ignores it when those records are gone by then); offsets do not change. A source frame
  // holding records that are gone is copied compacted instead (flag kBatchCompacted): without
  // its producer, attributes and close, the gone records' payloads and keys empty.
  kRelocatedBatch = 8,
  // u64 stream id, string consumer: the cursor is removed (Store::DeleteCursor). Binaries
  // that predate it refuse a segment holding one as damaged.
  kCursorDelete = 9,
  // u64 stream id, u32 count (1 to kMaxDroppedPerFrame), then `count` offsets, ascending and
  // distinct, as LEB128 varints: the first offset itself, then each one's distance from the one
  // before (at least 1). The records at those offsets are removed from the middle of the stream
  // (Store::DropRecords, keyed compaction); the others keep their offsets. The writer names only
  // offsets that held a record when it encoded the frame; replay ignores any that hold none.
  // Binaries that predate it refuse a segment holding one as damaged.
  kDropRecords = 10,
};
inline constexpr uint8_t kMaxFrameType = 10;
// The most offsets one drop-records frame names (Store::DropRecords takes at most this many per
// call; keyed compaction sends 4096).
inline constexpr uint32_t kMaxDroppedPerFrame = 1u << 16;

// Retention: u8 flags (bit 0 max_events, bit 1 max_age_ms, bit 2 max_bytes), then a u64 for
// each set flag, in that order.
inline constexpr uint8_t kRetentionMaxEvents = 1;
inline constexpr uint8_t kRetentionMaxAge = 2;
inline constexpr uint8_t kRetentionMaxBytes = 4;

inline constexpr uint8_t kBatchClose = 1;
inline constexpr uint8_t kBatchProducer = 2;
inline constexpr uint8_t kBatchAttributes = 4;
// Only in a relocated batch (kRelocatedBatch) the cleaner wrote for a frame holding records that
// are gone (dropped or below the head): a u32 follows the flags, the length of the frame it
// replaces, and those records are written with an empty payload and no key. Offsets and record
// count are the source frame's.
inline constexpr uint8_t kBatchCompacted = 8;

}  // namespace runnel::log

#endif  // RUNNEL_STORE_LOG_LOG_FORMAT_H_
