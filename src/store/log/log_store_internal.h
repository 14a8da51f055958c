// Internal to the log store: what its source files (log_*.cc, listed in log_store.h) share:
// file names, buffers, limits of the writer, and the Op that callers queue for the writer.
// Not for use outside src/store/log.
#ifndef RUNNEL_STORE_LOG_LOG_STORE_INTERNAL_H_
#define RUNNEL_STORE_LOG_LOG_STORE_INTERNAL_H_

#include "store/log/log_store.h"

#include <sys/mman.h>
#include <sys/prctl.h>

#include <algorithm>
#include <bit>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>

#include "base/log.h"
#include "base/thread_name.h"
#include "store/group_wait.h"
#include "store/log/crc32c.h"
#include "store/log/log_codec.h"
#include "store/retention.h"
#include "store/store_status.h"

namespace runnel::log {

inline Status StreamNotFound(StreamId id) {
  return Status::NotFound("stream #" + std::to_string(id) + " does not exist");
}

inline std::string SegmentName(uint64_t number) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%020" PRIu64 ".log", number);
  return buf;
}

inline std::string CheckpointName(uint64_t seq) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "checkpoint-%020" PRIu64 ".ckpt", seq);
  return buf;
}

// Parses "<20 digits><suffix>" after `prefix`.
inline bool ParseNumbered(std::string_view name, std::string_view prefix, std::string_view suffix,
                          uint64_t* out) {
  if (name.size() != prefix.size() + 20 + suffix.size()) return false;
  if (name.substr(0, prefix.size()) != prefix) return false;
  if (name.substr(prefix.size() + 20) != suffix) return false;
  uint64_t v = 0;
  for (char c : name.substr(prefix.size(), 20)) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  *out = v;
  return true;
}

// Offers the 2 MiB-aligned interior of [p, p + n) to the kernel for transparent huge pages: a
// 100+ MB buffer (a million streams' checkpoint) is then filled at a fault per 2 MiB instead of
// per 4 KiB. A hint only.
inline void OfferHugePages(void* p, size_t n) {
  constexpr uintptr_t kHuge = 2u << 20;
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(p) + kHuge - 1) & ~(kHuge - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + n) & ~(kHuge - 1);
  if (end > begin) (void)::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
}

// A buffer for a whole file read at once, not zero-filled first (the read overwrites it).
inline std::unique_ptr<char[]> NewReadBuffer(size_t n) {
  auto buf = std::make_unique_for_overwrite<char[]>(n);
  OfferHugePages(buf.get(), n);
  return buf;
}

inline constexpr size_t kZeroChunk = 1u << 20;
inline constexpr uint64_t kMaxGroupBytes = 64u << 20;
// Capacity of the writer's group buffer kept from one group to the next.
inline constexpr size_t kKeptGroupBufferBytes = 4u << 20;

// The preparer thread writes its zeros (the next segment, the space reserve) in steps of this
// size, each synced before the next. Written at once and synced at the end, 64 MiB of zeros
// fill the disk's queue with writeback for 0.1-0.4 s, and every log sync issued meanwhile waits
// behind it (4 ms typical on the reference disk instead of 0.2 ms): as the reserve is made at
// the first write after Open and a segment after each roll, that window alone held a few
// percent of a steady load's appends. In steps, a log sync waits behind one step at most.
inline constexpr size_t kPreparerStep = 256u << 10;
static_assert(kPreparerStep <= kZeroChunk);

inline const std::string& Zeros() {
  static const std::string* zeros = new std::string(kZeroChunk, '\0');
  return *zeros;
}

// True when every byte of `bytes` is zero; compared a chunk at a time against Zeros() (memcmp
// is several times faster than a byte loop over a 64 MiB segment tail).
inline bool AllZero(std::string_view bytes) {
  for (size_t p = 0; p < bytes.size(); p += kZeroChunk) {
    const size_t n = std::min(kZeroChunk, bytes.size() - p);
    if (std::memcmp(bytes.data() + p, Zeros().data(), n) != 0) return false;
  }
  return true;
}

// Replay reads a segment through a window that moves forward with the frames: restart costs
// the log written since the checkpoint, not the segment's preallocated size, and a 64 MiB
// segment holding a few frames is not copied into a 64 MiB buffer.
class SegmentWindow {
 public:
  static constexpr uint64_t kSpan = 4u << 20;

  SegmentWindow(env::File& file, uint64_t size) : file_(file), size_(size) {}

  // Bytes [at, min(at + n, size)) of the file as one view (shorter only after a short read),
  // valid until the next call.
  Result<std::string_view> View(uint64_t at, uint64_t n) {
    if (at >= size_) return std::string_view();
    n = std::min(n, size_ - at);
    if (at >= base_ && at + n <= base_ + len_) {
      return std::string_view(buf_.data() + (at - base_), n);
    }
    const uint64_t want = std::min(std::max(n, kSpan), size_ - at);
    if (buf_.size() < want) buf_.resize(static_cast<size_t>(want));
    base_ = at;
    len_ = 0;
    RUNNEL_ASSIGN_OR_RETURN(len_, file_.ReadAt(at, static_cast<size_t>(want), buf_.data()));
    return std::string_view(buf_.data(), static_cast<size_t>(std::min<uint64_t>(n, len_)));
  }

  // ParseFrame at `at`, with the whole frame in view when the file holds it. Reads only when
  // the frame is not in the window already, so replay reads each window once.
  Result<FrameCheck> ParseAt(uint64_t at, FrameView* f) {
    RUNNEL_ASSIGN_OR_RETURN(std::string_view v, View(at, kFrameHeaderSize));
    if (v.size() == kFrameHeaderSize) {
      const uint32_t len = LoadU32(v.data() + 4);
      if (len >= kMinBodySize && len <= kMaxBodySize) {
        RUNNEL_ASSIGN_OR_RETURN(v, View(at, kFrameHeaderSize + len));
      }
    }
    return ParseFrame(v, f);
  }

  // True when [at, size) holds only zero bytes.
  Result<bool> ZeroFrom(uint64_t at) {
    for (; at < size_; at += kSpan) {
      RUNNEL_ASSIGN_OR_RETURN(std::string_view v, View(at, kSpan));
      if (!AllZero(v)) return false;
      if (v.empty()) break;
    }
    return true;
  }

 private:
  env::File& file_;
  const uint64_t size_;
  std::string buf_;
  uint64_t base_ = 0;
  uint64_t len_ = 0;
};

struct LogStore::Op {
  OpKind kind = OpKind::kAppend;
  // Inputs.
  // kUpdate: only its expected_attributes and expected_offset (the stream's expected next offset).
  AppendRequest append;
  AppendCallback append_done;
  StreamSpec spec;
  StreamId stream = 0;
  StreamRetention retention;
  std::string attributes;
  std::string consumer;
  uint64_t offset = 0;
  uint64_t now_ms = 0;
  bool respect_cursors = false;
  // kDropRecords: the offsets named (ascending); the writer keeps those that hold a record.
  std::vector<uint64_t> offsets;
  // kCheckpoint: the cleaner runs first (CleanNow).
  bool clean = false;
  // kUpdate: the stream's retention is kept (the writer encodes it as it finds it).
  bool keep_retention = false;
  // Prepared by the writer.
  // This op's frame within the writer's group buffer; frame_len 0 when nothing is written.
  uint64_t frame_at = 0;
  uint64_t frame_len = 0;
  bool refused = false;
  // Outputs.
  Status status;
  AppendResult append_result;
  uint64_t u64_result = 0;
  StreamInfo info;
  // Completion for synchronous callers.
  Mutex mu;
  std::condition_variable cv;
  bool finished = false;
};

}  // namespace runnel::log

#endif  // RUNNEL_STORE_LOG_LOG_STORE_INTERNAL_H_
