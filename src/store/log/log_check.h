// Offline verification of a log data directory (`runnel check DIR`).
//
// Reads every segment and checkpoint without changing anything: verifies headers and CRCs,
// decodes every frame, checks that each stream's append batches continue at its next offset,
// and classifies damage (a torn tail is repaired at the next open; corruption before the tail
// makes open refuse without salvage).
//
// Then it runs the store's own recovery over a copy-on-write view of the directory
// (env::OverlayEnv: the torn-tail repair and the closing checkpoint land in memory, never in
// the directory), so the report says exactly whether an open succeeds and why not. The two can
// differ in one way: an open trusts the bytes the newest checkpoint covers (restart time is
// bounded by the checkpoint interval, not by data size), so damage there is found by this scan
// and by reads of those records, not by an open.
//
// Takes the directory's lock file while it runs, so it refuses (kUnavailable) to check a
// directory that a running store has open.
#ifndef RUNNEL_STORE_LOG_LOG_CHECK_H_
#define RUNNEL_STORE_LOG_LOG_CHECK_H_

#include <cstdint>
#include <string>
#include <vector>

#include "env/env.h"
#include "runnel/status.h"

namespace runnel::log {

struct CheckReport {
  // Human-readable findings, one per line, in directory order.
  std::vector<std::string> lines;
  uint64_t segments = 0;
  uint64_t frames = 0;
  uint64_t streams_created = 0;
  uint64_t records = 0;
  // Offsets named by drop-records frames (keyed compaction), whether or not they still held a
  // record when the frame was replayed.
  uint64_t dropped_records = 0;
  // Torn tail at the end of the last segment: harmless, recovery truncates it.
  bool torn_tail = false;
  // Damage, each naming file, byte and stream: what the scan found, and the reason recovery
  // gives when it refuses to open and the scan found nothing.
  std::vector<std::string> corruption;
  // Recovery's verdict on the directory as it is (without salvage): OK when it opens.
  Status open;
  // What that recovery reported (a truncated torn tail, an ignored checkpoint...).
  std::vector<std::string> recovery_notes;
};

// kNotFound when `dir` does not exist, kUnavailable when it is in use; otherwise a report.
Result<CheckReport> CheckLogDirectory(env::Env* env, const std::string& dir);

}  // namespace runnel::log

#endif  // RUNNEL_STORE_LOG_LOG_CHECK_H_
