// Offline verification of a log data directory (`runnel check DIR`).
//
// Reads every segment and checkpoint without changing anything: verifies headers and CRCs,
// decodes every frame, checks that each stream's append batches continue at its next offset,
// and classifies damage the way recovery would (a torn tail is repaired at the next open;
// corruption before the tail makes open refuse without salvage).
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
  // Torn tail at the end of the last segment: harmless, recovery truncates it.
  bool torn_tail = false;
  // Problems that make Open refuse (without salvage), each naming file, byte and stream.
  std::vector<std::string> corruption;
};

// kNotFound when `dir` does not exist, kUnavailable when it is in use; otherwise a report.
Result<CheckReport> CheckLogDirectory(env::Env* env, const std::string& dir);

}  // namespace runnel::log

#endif  // RUNNEL_STORE_LOG_LOG_CHECK_H_
