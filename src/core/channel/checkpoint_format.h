// The head checkpoint of a DurableChannel (SEMANTICS V3): the records of its companion stream
// `<channel_id>:checkpoint`. Prose and the restart procedure: docs/formats/channel_checkpoint.md.
//
// The companion stream holds a chain of records. Each record says: "every keyed row of
// partition p in slots [from[p], head[p]) is one of my entries" — the idempotency-key index
// restricted to those slots. A *base* record has from[p] = 0 for every p; each later record
// of the chain starts where the previous one ended (its from equals the previous head). So the
// entries of a chain, from its last base record to its end, are exactly the key index of slots
// [0, head[p]) of the last record, and a restart loads them instead of reading those rows.
//
// All integers little-endian. n = partition count, m = entry count.
//
//   offset      size   field
//   0           4      magic "RCK1"
//   4           1      version = kCheckpointVersion (1)
//   5           4      n u32 (>= 1)
//   9           8n     from[p] u64
//   9+8n        8n     head[p] u64                (from[p] <= head[p])
//   9+16n       8n     fingerprint[p] u64         Fingerprint64 of the payload of the row at
//                                                 slot head[p]-1; 0 = no claim (head[p] = 0,
//                                                 the row was removed by retention, or the
//                                                 record is not the last of its batch)
//   9+24n       4      m u32 (<= kMaxCheckpointEntries)
//   13+24n      20m    entries: partition u32, slot u64, key hash u64 (KeyIndex::Hash)
//                      partition < n and from[partition] <= slot < head[partition]
//   13+24n+20m  8      checksum u64 = Fingerprint64 of every byte before it
//   end                nothing may follow
//
// Fingerprint64(bytes): h = 0x9E3779B97F4A7C15 ^ len; for each whole 8-byte little-endian
// word w: h = (h ^ w) * 0xBF58476D1CE4E5B9, h ^= h >> 29; the 0..7 remaining bytes form one
// last little-endian word (zero-padded) mixed the same way; then h ^= h >> 32,
// h *= 0x94D049BB133111EB, h ^= h >> 31. A row fingerprint that comes out 0 is stored as 1.
//
// A reader that meets another magic or version, a bad checksum, an entry outside its range,
// truncation or trailing bytes refuses the record (kCorruption "CheckpointError: ...").
#ifndef RUNNEL_CORE_CHANNEL_CHECKPOINT_FORMAT_H_
#define RUNNEL_CORE_CHANNEL_CHECKPOINT_FORMAT_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runnel/status.h"

namespace runnel::channel {

inline constexpr std::string_view kCheckpointMagic = "RCK1";
inline constexpr uint8_t kCheckpointVersion = 1;
// The name suffix of the companion stream: `<channel_id>` + kCheckpointStreamSuffix.
inline constexpr std::string_view kCheckpointStreamSuffix = ":checkpoint";
// A checkpoint is recorded after this many appends committed by one channel instance.
inline constexpr uint64_t kCheckpointInterval = 256;
// Entries per record; a larger delta is split into several records appended in one batch.
inline constexpr uint32_t kMaxCheckpointEntries = 65536;
inline constexpr size_t kCheckpointEntrySize = 4 + 8 + 8;

struct CheckpointEntry {
  uint32_t partition = 0;
  uint64_t slot = 0;
  uint64_t hash = 0;
  friend bool operator==(const CheckpointEntry&, const CheckpointEntry&) = default;
};

struct CheckpointRecord {
  std::vector<uint64_t> from;
  std::vector<uint64_t> head;
  std::vector<uint64_t> fingerprint;
  std::vector<CheckpointEntry> entries;

  bool IsBase() const;
  friend bool operator==(const CheckpointRecord&, const CheckpointRecord&) = default;
};

uint64_t Fingerprint64(std::string_view bytes);
// The fingerprint of a row's payload as stored in a record (never 0).
inline uint64_t RowFingerprint(std::string_view payload) {
  const uint64_t h = Fingerprint64(payload);
  return h == 0 ? 1 : h;
}

// REQUIRES: from, head and fingerprint have the same size n >= 1, entries.size() <=
// kMaxCheckpointEntries, every entry within its range.
std::string EncodeCheckpoint(const CheckpointRecord& record);
// The same for the record (from, head, fingerprint, entries); same requirements.
std::string EncodeCheckpoint(const std::vector<uint64_t>& from, const std::vector<uint64_t>& head,
                             const std::vector<uint64_t>& fingerprint,
                             std::span<const CheckpointEntry> entries);
Result<CheckpointRecord> DecodeCheckpoint(std::string_view bytes);

}  // namespace runnel::channel

#endif  // RUNNEL_CORE_CHANNEL_CHECKPOINT_FORMAT_H_
