// Recovery of the embedded log must never crash, hang or read out of bounds, whatever bytes a
// segment holds. The input is turned into frames with valid checksums, so every body decoder and
// the replay of every frame type are reached, not only the checksum test. Checked on each input:
//   - `runnel check` (CheckLogDirectory) reports without failing, and its recovery verdict (the
//     store's recovery over a copy-on-write view) is the one an Open then reaches;
//   - Open without salvage refuses only with kCorruption, and only when check found corruption;
//     without a checkpoint it also succeeds exactly when check found none (check classifies
//     damage the way recovery does). With a checkpoint, Open trusts the bytes before the
//     checkpoint's replay position (restart time is bounded by the checkpoint interval, not by
//     data size): damage there is found by check, and by a read of that record (kCorruption);
//   - Open with salvage succeeds whenever the segment header is valid (always, without a
//     checkpoint: the harness writes it);
//   - whatever opened can be read in full (with a checkpoint, a read may instead fail with
//     kCorruption: an open does not re-read the frames a checkpoint's index names), and
//     after a clean close it reopens (without salvage) with the same streams and offsets
//     (SEMANTICS V4: offsets never go backwards).
//
// Input, by the low bit of byte 0:
//   0: chunks of [u8 frame type][u16 body length, little-endian][body], written as frames after
//      a valid segment header; a last chunk shorter than its declared length is written as raw
//      bytes after the frames (a torn or garbage tail);
//   1: [u32 length n, little-endian][n bytes: the whole segment file][the rest: the body of a
//      checkpoint], the checkpoint written with a valid header and checksum, so what recovery
//      trusts a checkpoint for is reached too.
#include <algorithm>
#include <cinttypes>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "env/mem_env.h"
#include "runnel/log_store.h"
#include "store/log/crc32c.h"
#include "store/log/log_check.h"
#include "store/log/log_codec.h"

namespace {

using runnel::StatusCode;
using runnel::StreamInfo;
using runnel::log::FrameType;

constexpr char kDir[] = "/fuzz";
// Ids the harness looks up after an open: the store assigns 1, 2, ... and a replayed create
// frame must carry the next one, so a few dozen ids cover every stream an input can create.
constexpr uint64_t kMaxId = 64;

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "log_replay_fuzz: %s\n", what);
    std::abort();
  }
}

std::string Segment(std::string_view in) {
  std::string segment = runnel::log::EncodeSegmentHeader(1);
  while (in.size() >= 3) {
    const auto type = static_cast<uint8_t>(in[0]);
    const size_t len = static_cast<uint8_t>(in[1]) | (size_t{static_cast<uint8_t>(in[2])} << 8);
    if (in.size() - 3 < len) break;
    runnel::log::AppendFrame(&segment, static_cast<FrameType>(type), in.substr(3, len));
    in.remove_prefix(3 + len);
  }
  segment.append(in);
  return segment;
}

// A checkpoint file around `body`: magic, version, length and checksum as the store writes them.
std::string Checkpoint(std::string_view body) {
  std::string file(runnel::log::kCheckpointMagic);
  runnel::log::PutU32(&file, runnel::log::kCheckpointVersion);
  runnel::log::PutU32(&file, 0);
  runnel::log::PutU64(&file, body.size());
  runnel::log::PutU32(&file, runnel::log::MaskCrc(runnel::log::Crc32c(body)));
  runnel::log::PutU32(&file, 0);
  file.append(body);
  return file;
}

runnel::LogStoreOptions Options(runnel::env::Env* env, bool salvage) {
  runnel::LogStoreOptions o;
  o.dir = kDir;
  o.env = env;
  o.salvage = salvage;
  o.prezero_segments = false;
  o.segment_size = 1 << 20;
  o.group_commit_wait_us = 0;
  return o;
}

// Every stream the store knows among ids 1..kMaxId, read in full. `rot_possible`: bytes the
// store trusted without checking may be damaged, so a read may fail with kCorruption.
std::vector<StreamInfo> ReadAll(runnel::Store& store, bool rot_possible) {
  std::vector<StreamInfo> out;
  for (uint64_t id = 1; id <= kMaxId; ++id) {
    auto info = store.GetStreamById(id);
    if (!info.ok()) {
      Check(info.status().code() == StatusCode::kNotFound, "GetStreamById failed");
      continue;
    }
    if (info->head_offset == 0) {  // empty
      Check(info->tail_offset == 0, "an empty stream with a tail");
      out.push_back(*info);
      continue;
    }
    // Records after the tail can only be ones DropRecords removed.
    Check(info->head_offset <= info->tail_offset && info->tail_offset < info->next_offset,
          "head, tail and next disagree");
    uint64_t from = info->head_offset;
    uint64_t count = 0;
    bool complete = true;
    while (from <= info->tail_offset) {
      auto records = store.Read(id, from, 256, 1 << 20);
      if (!records.ok() && rot_possible && records.status().code() == StatusCode::kCorruption) {
        complete = false;
        break;
      }
      if (!records.ok()) std::fprintf(stderr, "%s\n", records.status().ToString().c_str());
      Check(records.ok(), "Read of a recovered stream failed");
      Check(!records->empty(), "Read returned nothing up to the tail");
      // Ascending from the head; the gaps are records DropRecords removed.
      Check(count > 0 || records->front().offset == info->head_offset,
            "Read did not start at the head");
      for (const auto& r : *records) {
        Check(r.offset >= from && r.offset <= info->tail_offset,
              "Read repeated an offset or passed the tail");
        from = r.offset + 1;
        ++count;
      }
    }
    Check(!complete || count == info->event_count, "Read and the record count disagree");
    out.push_back(*info);
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::string segment;
  std::optional<std::string> checkpoint;
  if ((data[0] & 1) == 0) {
    segment = Segment(in);
  } else {
    if (in.size() < 4) return 0;
    const size_t n = std::min<size_t>(runnel::log::LoadU32(in.data()), in.size() - 4);
    segment = std::string(in.substr(4, n));
    checkpoint = Checkpoint(in.substr(4 + n));
  }
  runnel::env::MemEnv env;
  Check(env.CreateDir(kDir).ok(), "CreateDir");
  auto write = [&](const std::string& name, std::string_view bytes) {
    auto file = env.OpenFile(std::string(kDir) + "/" + name, true);
    Check(file.ok(), "OpenFile");
    Check((*file)->WriteAt(0, bytes).ok(), "WriteAt");
    Check((*file)->Sync().ok(), "Sync");
  };
  write("00000000000000000001.log", segment);
  if (checkpoint) write("checkpoint-00000000000000000001.ckpt", *checkpoint);
  Check(env.SyncDir(kDir).ok(), "SyncDir");

  auto report = runnel::log::CheckLogDirectory(&env, kDir);
  Check(report.ok(), "runnel check failed instead of reporting");
  const bool corrupt = !report->corruption.empty();

  auto strict = runnel::OpenLogStore(Options(&env, false));
  if (std::getenv("RUNNEL_FUZZ_VERBOSE") != nullptr) {  // when replaying one input by hand
    for (const std::string& line : report->lines) std::fprintf(stderr, "check: %s\n", line.c_str());
    for (const std::string& c : report->corruption)
      std::fprintf(stderr, "corrupt: %s\n", c.c_str());
    std::fprintf(stderr, "open: %s\n", strict.ok() ? "OK" : strict.status().ToString().c_str());
  }
  Check(report->open.ok() == strict.ok(), "runnel check's recovery and Open disagree");
  if (!strict.ok()) {
    Check(strict.status().code() == StatusCode::kCorruption, "Open failed with a non-corruption");
    Check(corrupt, "Open refused a directory that runnel check found sound");
  } else {
    Check(!corrupt || checkpoint, "Open accepted a directory that runnel check found corrupt");
    strict->reset();
  }
  // An open trusts a checkpoint's index (checked for shape, not against every frame it names):
  // with one, a read may meet damage (or a wrong reference) and must then say kCorruption.
  const bool rot_possible = checkpoint.has_value();
  std::vector<StreamInfo> before;
  {
    auto store = strict.ok() ? runnel::OpenLogStore(Options(&env, false))
                             : runnel::OpenLogStore(Options(&env, true));
    if (!store.ok() && checkpoint) {
      // Salvage skips damaged frames; it cannot stand in for a damaged segment header or a
      // segment the checkpoint names.
      Check(store.status().code() == StatusCode::kCorruption, "salvage failed oddly");
      return 0;
    }
    Check(store.ok(), "Open with salvage failed on a valid segment header");
    before = ReadAll(**store, rot_possible);
  }
  auto reopened = runnel::OpenLogStore(Options(&env, false));
  if (!reopened.ok()) std::fprintf(stderr, "%s\n", reopened.status().ToString().c_str());
  Check(reopened.ok(), "a cleanly closed store did not reopen");
  const std::vector<StreamInfo> after = ReadAll(**reopened, rot_possible);
  Check(after.size() == before.size(), "streams changed across a clean close");
  for (size_t i = 0; i < after.size(); ++i) {
    Check(after[i].id == before[i].id && after[i].head_offset == before[i].head_offset &&
              after[i].next_offset == before[i].next_offset,
          "a stream's offsets changed across a clean close");
  }
  return 0;
}
