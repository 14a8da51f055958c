#include "store/log/log_check.h"

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <utility>

#include "env/overlay_env.h"
#include "store/log/crc32c.h"
#include "store/log/log_codec.h"
#include "store/log/log_format.h"
#include "store/log/log_store.h"

namespace runnel::log {
namespace {

bool ParseNumber(std::string_view digits, uint64_t* out) {
  if (digits.size() != 20) return false;
  uint64_t v = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  *out = v;
  return true;
}

Result<std::string> ReadWhole(env::Env* env, const std::string& path) {
  RUNNEL_ASSIGN_OR_RETURN(auto file, env->OpenFileForRead(path));
  RUNNEL_ASSIGN_OR_RETURN(uint64_t size, file->Size());
  std::string buf(size, '\0');
  RUNNEL_ASSIGN_OR_RETURN(size_t got, file->ReadAt(0, size, buf.data()));
  buf.resize(got);
  return buf;
}

std::string_view TypeName(FrameType t) {
  switch (t) {
    case FrameType::kCreateStream: return "create";
    case FrameType::kUpdateStream: return "update";
    case FrameType::kDeleteStream: return "delete";
    case FrameType::kAppendBatch: return "append";
    case FrameType::kCursorCommit: return "cursor";
    case FrameType::kCursorDelete: return "cursor-delete";
    case FrameType::kTruncateHead: return "truncate";
    case FrameType::kCheckpointMarker: return "checkpoint-marker";
    case FrameType::kRelocatedBatch: return "relocated";
    case FrameType::kDropRecords: return "drop-records";
  }
  return "?";
}

}  // namespace

// Long on purpose: one pass over the directory (files, the newest checkpoint's replay point,
// every segment's frames, then recovery's own verdict) whose steps share the report and the
// per-stream offsets.
Result<CheckReport> CheckLogDirectory(env::Env* env, const std::string& dir) {
  if (!env->FileExists(dir)) return Status::NotFound("data directory '" + dir + "' does not exist");
  CheckReport report;
  auto lock = env->LockFile(env::JoinPath(dir, "LOCK"));
  if (!lock.ok()) {
    // Held by a running server: refuse. Not writable (a read-only mount, a backup owned by
    // someone else): a server could not be writing there either, so read it without the lock.
    if (lock.status().code() == StatusCode::kUnavailable) return lock.status();
    report.lines.push_back("note: checking without the data directory's lock (" +
                           std::string(lock.status().message()) + ")");
  }
  RUNNEL_ASSIGN_OR_RETURN(auto names, env->ListDir(dir));
  std::sort(names.begin(), names.end());
  std::vector<uint64_t> segs;
  // The replay point (segment, byte) of the newest checkpoint: everything before it was whole
  // when that checkpoint was written, so damage there is never a torn tail.
  std::optional<std::pair<uint64_t, uint64_t>> covered;
  for (const std::string& name : names) {
    uint64_t n;
    if (name.size() == 24 && name.substr(20) == ".log" && ParseNumber(name.substr(0, 20), &n)) {
      segs.push_back(n);
    } else if (name.rfind("checkpoint-", 0) == 0 && name.size() == 36 &&
               name.substr(31) == ".ckpt") {
      const std::string path = env::JoinPath(dir, name);
      RUNNEL_ASSIGN_OR_RETURN(std::string data, ReadWhole(env, path));
      std::string verdict = "ok";
      if (data.size() < kCheckpointHeaderSize ||
          std::string_view(data).substr(0, 8) != kCheckpointMagic) {
        verdict = "bad header";
      } else if (LoadU64(data.data() + 16) != data.size() - kCheckpointHeaderSize ||
                 UnmaskCrc(LoadU32(data.data() + 24)) !=
                     Crc32c(std::string_view(data).substr(kCheckpointHeaderSize))) {
        verdict = "checksum or length mismatch";
      } else if (data.size() < kCheckpointHeaderSize + 40) {
        // The body starts with five u64: sequence, replay segment and byte, next id, streams.
        verdict = "truncated body";
      } else {
        const char* b = data.data() + kCheckpointHeaderSize;
        verdict = "ok, replay from segment " + std::to_string(LoadU64(b + 8)) + " byte " +
                  std::to_string(LoadU64(b + 16)) + ", " + std::to_string(LoadU64(b + 32)) +
                  " streams";
        // Names come in ascending order: the newest checkpoint's replay point wins.
        covered = {LoadU64(b + 8), LoadU64(b + 16)};
      }
      report.lines.push_back(name + ": " + verdict + " (" + std::to_string(data.size()) +
                             " bytes)");
      if (verdict.rfind("ok", 0) != 0) {
        report.corruption.push_back(path + ": checkpoint " + verdict);
      }
    } else if (name == "RESERVE") {
      auto size = env->FileSize(env::JoinPath(dir, name));
      report.lines.push_back(name + ": space reserve (" +
                             (size.ok() ? std::to_string(*size) : std::string("?")) +
                             " bytes), not part of the log");
    } else if (name != "LOCK") {
      report.lines.push_back(name + ": not part of the log (ignored)");
    }
  }
  for (size_t i = 1; i < segs.size(); ++i) {
    if (segs[i] != segs[i - 1] + 1) {
      report.lines.push_back("note: segments " + std::to_string(segs[i - 1] + 1) + " to " +
                             std::to_string(segs[i] - 1) +
                             " are absent (deleted once nothing in them was live)");
    }
  }
  // Per-stream next offsets, for streams whose create frame is in the remaining segments.
  std::map<uint64_t, uint64_t> next;
  for (size_t i = 0; i < segs.size(); ++i) {
    const bool last = i + 1 == segs.size();
    char fname[32];
    std::snprintf(fname, sizeof fname, "%020llu.log", static_cast<unsigned long long>(segs[i]));
    const std::string path = env::JoinPath(dir, fname);
    RUNNEL_ASSIGN_OR_RETURN(std::string data, ReadWhole(env, path));
    ++report.segments;
    Status header = CheckSegmentHeader(data, segs[i], path);
    if (!header.ok()) {
      report.corruption.push_back(std::string(header.message()));
      report.lines.push_back(std::string(fname) + ": " + std::string(header.message()));
      continue;
    }
    std::map<std::string_view, uint64_t> counts;
    size_t pos = kSegmentHeaderSize;
    std::string problem;
    for (;;) {
      FrameView f;
      FrameCheck c = ParseFrame(std::string_view(data).substr(pos), &f);
      if (c == FrameCheck::kEnd) {
        // The same rule as recovery (log_recovery.cc, ReplaySegment): past the end only zeros, or
        // in the last segment a write that landed in part, whose zeros run to a sector's end.
        const std::string_view rest = std::string_view(data).substr(pos);
        if (rest.find_first_not_of('\0') != std::string_view::npos) {
          if (last && ZeroToSectorEnd(rest, pos)) {
            report.torn_tail = true;
            report.lines.push_back(
                std::string(fname) + ": bytes after the end of the log at byte " +
                std::to_string(pos) + " (a write that landed in part); the next open zeroes them");
          } else {
            problem = path + " at byte " + std::to_string(pos) +
                      ": zero frame header followed by written bytes";
          }
        }
        break;
      }
      if (c != FrameCheck::kOk) {
        auto view = [&data](uint64_t at, uint64_t n) -> Result<std::string_view> {
          return std::string_view(data).substr(static_cast<size_t>(at), static_cast<size_t>(n));
        };
        RUNNEL_ASSIGN_OR_RETURN(std::optional<uint64_t> next,
                                ValidFrameAfter(view, pos, data.size()));
        const bool valid_after = next.has_value();
        const bool before_checkpoint =
            covered && std::make_pair(segs[i], static_cast<uint64_t>(pos)) < *covered;
        if (last && !valid_after && !before_checkpoint) {
          report.torn_tail = true;
          report.lines.push_back(std::string(fname) + ": torn tail at byte " + std::to_string(pos) +
                                 " (" + std::string(FrameCheckName(c)) +
                                 "); the next open truncates it");
        } else {
          std::string who;
          if (pos + kFrameHeaderSize + 8 <= data.size()) {
            who = ", stream #" + std::to_string(LoadU64(data.data() + pos + kFrameHeaderSize)) +
                  " (unverified)";
          }
          problem = path + " at byte " + std::to_string(pos) + ": " +
                    std::string(FrameCheckName(c)) + who +
                    (last && !valid_after ? " (before the newest checkpoint's replay point)" : "");
        }
        break;
      }
      ++report.frames;
      ++counts[TypeName(f.type)];
      StreamId id = 0;
      BodyStreamId(f.type, f.body, &id);
      if (f.type == FrameType::kCreateStream) {
        Reader r(f.body);
        uint64_t sid;
        std::string_view ns, name, ct;
        StreamRetention ret;
        uint64_t first = 0;
        if (r.U64(&sid) && r.String(&ns) && r.String(&name) && r.String(&ct) && r.Retention(&ret) &&
            r.U64(&first)) {
          next[sid] = first;
          ++report.streams_created;
        } else {
          problem = path + " at byte " + std::to_string(pos) + ": malformed create-stream";
          break;
        }
      } else if (f.type == FrameType::kAppendBatch) {
        AppendBatchHeader h;
        if (!DecodeAppendBatch(f.body, &h, nullptr, nullptr) || h.source_len != 0) {
          problem = path + " at byte " + std::to_string(pos) +
                    ": malformed append batch of stream #" + std::to_string(id);
          break;
        }
        report.records += h.count;
        auto it = next.find(h.stream);
        if (it != next.end()) {
          if (h.first_offset != it->second) {
            problem = path + " at byte " + std::to_string(pos) + ": stream #" +
                      std::to_string(h.stream) + " continues at offset " +
                      std::to_string(h.first_offset) + ", expected " + std::to_string(it->second);
            break;
          }
          it->second += h.count;
        }
      } else if (f.type == FrameType::kDropRecords) {
        std::vector<uint64_t> offsets;
        if (!DecodeDropRecords(f.body, &id, &offsets)) {
          problem = path + " at byte " + std::to_string(pos) +
                    ": malformed drop-records frame of stream #" + std::to_string(id);
          break;
        }
        report.dropped_records += offsets.size();
      } else if (f.type == FrameType::kDeleteStream) {
        next.erase(id);
      }
      pos += f.size;
    }
    std::string summary = std::string(fname) + ": " + std::to_string(data.size()) +
                          " bytes, data ends at byte " + std::to_string(pos) + ";";
    for (const auto& [type, n] : counts) {
      summary.append(" ").append(type).append("=").append(std::to_string(n));
    }
    report.lines.push_back(summary);
    if (!problem.empty()) {
      report.corruption.push_back(problem);
      report.lines.push_back(std::string(fname) + ": CORRUPT: " + problem);
    }
  }

  // Recovery's own verdict, over a view of the directory that keeps every change in memory.
  env::OverlayEnv overlay(env);
  LogStoreOptions options;
  options.dir = dir;
  options.env = &overlay;
  options.prezero_segments = false;
  options.tail_cache_bytes = 0;
  options.cleaner_live_ratio = 0;
  options.keep_space_reserve = false;  // it would be a segment's worth of zeros in memory
  options.group_commit_wait_us = 0;
  auto store = LogStore::Open(options);
  report.open = store.ok() ? Status::OK() : store.status();
  if (store.ok()) {
    report.recovery_notes = (*store)->RecoveryNotes();
    report.lines.push_back("recovery: opens" +
                           std::string(report.recovery_notes.empty() ? "" : ", noting:"));
    for (const std::string& note : report.recovery_notes) {
      report.lines.push_back("recovery:   " + note);
    }
  } else {
    report.lines.push_back("recovery: refuses to open: " + report.open.ToString());
    if (report.corruption.empty()) report.corruption.push_back(report.open.ToString());
  }
  return report;
}

}  // namespace runnel::log
