// DecodeCheckpoint (a channel's checkpoint record, docs/formats/channel_checkpoint.md) must never
// crash or read out of bounds, and whatever it accepts must be a record EncodeCheckpoint can
// write, which encodes back to exactly the same bytes (one encoding per record).
//
// Input: the record without its trailing checksum; the harness appends the right one, so the
// decoder's structural checks are reached rather than stopped at the checksum. The first input
// byte, when odd, flips a bit of that checksum instead (a record that must be refused).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/channel/checkpoint_format.h"

namespace {

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "channel_checkpoint_fuzz: %s\n", what);
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool corrupt_checksum = (data[0] & 1) != 0;
  std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  uint64_t sum = runnel::channel::Fingerprint64(bytes);
  if (corrupt_checksum) sum ^= 1;
  for (int i = 0; i < 8; ++i) bytes.push_back(static_cast<char>((sum >> (8 * i)) & 0xff));
  auto record = runnel::channel::DecodeCheckpoint(bytes);
  if (!record.ok()) {
    Check(record.status().code() == runnel::StatusCode::kCorruption, "a non-corruption error");
    return 0;
  }
  Check(!corrupt_checksum, "a record with a wrong checksum was accepted");
  const auto& r = *record;
  Check(!r.from.empty() && r.head.size() == r.from.size() && r.fingerprint.size() == r.from.size(),
        "partition vectors of different sizes");
  Check(r.entries.size() <= runnel::channel::kMaxCheckpointEntries, "too many entries");
  for (const auto& e : r.entries) {
    Check(e.partition < r.from.size() && e.slot >= r.from[e.partition] &&
              e.slot < r.head[e.partition],
          "an entry outside its partition's range");
  }
  Check(runnel::channel::EncodeCheckpoint(r) == bytes, "the record does not encode back the same");
  return 0;
}
