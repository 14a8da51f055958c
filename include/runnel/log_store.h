// The embedded log: runnel's default durable store.
//
// One write-ahead log, shared by every stream and cut into segment files, lives in a data
// directory together with checkpoint files (the byte layout is in docs/formats/log.md). All
// writes (appends, catalog changes, cursor commits, truncations) go through one writer thread
// that groups whatever is queued into one vectored write and one fdatasync (group commit), then
// completes every waiter.
//
// What an acknowledged write survives depends on the durability mode of the directory:
//   kFsync    (default) the write is on disk (fdatasync returned) before it is acknowledged;
//   kInterval acknowledged once written to the OS; synced at least every sync_interval_ms, so a
//             process crash loses nothing and a power loss at most that window;
//   kNone     acknowledged once written to the OS; synced only by Flush() and at close.
// Flush() always makes everything acknowledged so far durable, in every mode.
//
// Crash recovery (at Open): load the newest valid checkpoint, replay the log after it, truncate
// a torn tail (a write cut short by a crash, with no valid frame after it: a batch whose bytes
// were not all written is wholly absent); any other damage is reported by segment file, byte
// position and stream, and Open refuses with kCorruption unless `salvage` is set, in which case
// the damaged bytes are skipped (replay goes on at the next frame that verifies) and reported by
// RecoveryNotes() of the store. Offsets never go backwards across a restart.
//
// Damage in bytes a checkpoint covers is not read at Open. A background scrub re-reads sealed
// segments at a bounded rate and reports damaged frames (LogStoreOptions::on_damage, and
// CommitStats().damaged_frames). A read that meets damage answers the records before it; a read
// that starts at damaged records fails with Status::Unreadable naming the offsets that cannot be
// read and where reading goes on.
//
// A data directory can be opened by one store at a time: a second Open (in this or another
// process) fails with kUnavailable while the first is alive.
//
// An Open that fails leaves the directory as it found it: options are checked before anything
// is touched, and what a failing Open created (the directory, its LOCK file, the first segment
// of a new directory) is removed again. A store opened on a new directory that never writes a
// frame (a server that fails to start after opening it) removes the same things when it
// closes.
//
// A full disk: a write that needs space the disk does not have fails with kResourceExhausted
// (Status::no_space(); HTTP 507) and leaves no trace; the log stays intact and readable. Space
// comes back without a restart: once deletes, truncations or retention leave segments partly
// or wholly dead, the writer copies the live records of the emptiest of them into a new
// segment, writes a checkpoint that no longer needs them and deletes them. So it can do that on
// a disk with no free byte, the store keeps a reserve file (RESERVE, one segment plus room for
// a checkpoint) that appends never use and only this reclamation gives up, made again as soon
// as space allows. A crash at any step loses nothing acknowledged and duplicates nothing.
#ifndef RUNNEL_LOG_STORE_H_
#define RUNNEL_LOG_STORE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "runnel/clock.h"
#include "runnel/status.h"
#include "runnel/store.h"

namespace runnel {

namespace env {
class Env;
}  // namespace env

enum class LogDurability { kFsync, kInterval, kNone };

struct LogDurabilityMode {
  LogDurability mode = LogDurability::kFsync;
  // For kInterval: the longest time acknowledged data may stay unsynced.
  uint32_t interval_ms = 100;
};

// Parses "fsync", "interval:<ms>" (ms >= 1) or "none"; kInvalidArgument otherwise.
Result<LogDurabilityMode> ParseLogDurability(std::string_view text);
// The inverse of ParseLogDurability.
std::string LogDurabilityName(const LogDurabilityMode& mode);

struct LogStoreOptions {
  // The data directory; created when missing. Required. The store's Status messages and
  // recovery notes name the files in it relative to it ("00000000000000000002.log", the
  // directory itself as "."), never by this path, so that a caller may hand them to remote
  // clients; its own warnings on stderr name the directory.
  std::string dir;
  LogDurabilityMode durability;
  // Not owned; null means Clock::Real(). Used for stream creation times.
  Clock* clock = nullptr;
  // Not owned, must outlive the store; null means the real file system. Tests pass in-memory or
  // fault-injecting envs (src/env/).
  env::Env* env = nullptr;
  // Open a directory with corruption before the tail anyway, skipping the corrupt bytes.
  bool salvage = false;
  // Size of one segment file, from 1056 bytes to 2 GiB. Segments are pre-filled with zeros so
  // syncs do not grow files. The reserve (keep_space_reserve) is about one segment too.
  uint64_t segment_size = 64ull << 20;
  // Pre-fill new segments with zeros (faster syncs later; costs one sequential write).
  bool prezero_segments = true;
  // A checkpoint is written after this many log bytes, and at close. Restart time is bounded by
  // replaying about this much. A periodic checkpoint's file is written in the background; if
  // appends outrun it, so that four times this much is logged since the last checkpoint that
  // landed, commits wait for it. So a restart never replays more than about four times this
  // much, and old segments are never kept for longer than that.
  uint64_t checkpoint_interval_bytes = 64ull << 20;
  // Old segments whose live bytes fall below this fraction of a segment are compacted by the
  // cleaner, which copies their live records to the head of the log (grouped by stream) before
  // each periodic checkpoint, so the segments hold about 1 / cleaner_live_ratio times the live
  // bytes at most, plus a checkpoint interval (log_bench's churn section measures it). In
  // [0, 1); 0 disables it. On a full disk, segments at most 7/8 live are compacted whatever
  // this says (see above).
  double cleaner_live_ratio = 0.5;
  // Written segments (and the written part of the one being written) are re-read in the
  // background and their frames' checksums verified, at most this many bytes per second, so
  // damage in data that a checkpoint covers (which a restart never reads) is found where it
  // sits rather than by the first reader. The first pass starts at open; the next one
  // scrub_pass_interval_ms after the last one ended. 0 turns the scrub off.
  uint64_t scrub_bytes_per_sec = 16ull << 20;
  uint64_t scrub_pass_interval_ms = 3600000;
  // Called on the scrub's thread with one sentence per damaged frame it finds (the segment file,
  // the byte, and the streams and offsets whose records it held), once per frame for the life
  // of the store. The count is in CommitStats().damaged_frames either way.
  std::function<void(const std::string&)> on_damage;
  // Keep the RESERVE file that lets a full disk give space back (see above). Off, a full disk
  // frees only what needs no new segment (segments with nothing live, when a checkpoint fits).
  bool keep_space_reserve = true;
  // Bytes of recently written batches kept in memory, so live readers (long-poll, SSE) are
  // served without a pread. 0 disables the cache.
  uint64_t tail_cache_bytes = 32ull << 20;
  // fsync durability only: before writing a group, the writer waits up to this many
  // microseconds for the queue to hold as many ops as were in flight during the previous group
  // (its own ops plus those queued while it was synced). Appenders it has just acknowledged
  // usually come straight back, and one fdatasync then covers all of them instead of half of
  // them. The wait never exceeds half the recent mean fdatasync time, ends after
  // group_arrival_gap_us without a new arrival, and a lone appender (previous group of one op,
  // nothing else queued) never waits. 0 disables the wait. It pays off for in-process
  // appenders; `runnel serve` defaults to 0 (its clients come back after a network round trip).
  uint32_t group_commit_wait_us = 200;
  // The group-commit wait ends early when no op arrived for this many microseconds: returning
  // appenders arrive back to back, and a gap means the rest are not coming soon.
  uint32_t group_arrival_gap_us = 30;
};

// Opens (creating if needed) the log store in options.dir, recovering it as described above.
Result<std::unique_ptr<Store>> OpenLogStore(const LogStoreOptions& options);

}  // namespace runnel

#endif  // RUNNEL_LOG_STORE_H_
