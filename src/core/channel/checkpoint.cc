#include <bit>
#include <cstring>
#include <string>

#include "core/channel/checkpoint_format.h"

namespace runnel::channel {
namespace {

uint64_t LoadU64(const char* p, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v |= uint64_t{static_cast<unsigned char>(p[i])} << (8 * i);
  return v;
}

// One whole little-endian word, as a single load where the host is little-endian.
uint64_t LoadWord(const char* p) {
  if constexpr (std::endian::native == std::endian::little) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    return v;
  } else {
    return LoadU64(p, 8);
  }
}

Status Corrupt(std::string_view what) {
  return Status::Corruption("CheckpointError: " + std::string(what));
}

}  // namespace

uint64_t Fingerprint64(std::string_view bytes) {
  auto mix = [](uint64_t h, uint64_t w) {
    h = (h ^ w) * 0xBF58476D1CE4E5B9ull;
    return h ^ (h >> 29);
  };
  uint64_t h = 0x9E3779B97F4A7C15ull ^ static_cast<uint64_t>(bytes.size());
  const char* p = bytes.data();
  size_t n = bytes.size();
  for (; n >= 8; p += 8, n -= 8) h = mix(h, LoadWord(p));
  if (n > 0) h = mix(h, LoadU64(p, n));
  h ^= h >> 32;
  h *= 0x94D049BB133111EBull;
  h ^= h >> 31;
  return h;
}

bool CheckpointRecord::IsBase() const {
  for (uint64_t f : from) {
    if (f != 0) return false;
  }
  return true;
}

std::string EncodeCheckpoint(const CheckpointRecord& r) {
  return EncodeCheckpoint(r.from, r.head, r.fingerprint, r.entries);
}

std::string EncodeCheckpoint(const std::vector<uint64_t>& from, const std::vector<uint64_t>& head,
                             const std::vector<uint64_t>& fingerprint,
                             std::span<const CheckpointEntry> entries) {
  const size_t n = head.size();
  const size_t size =
      kCheckpointMagic.size() + 1 + 4 + 24 * n + 4 + kCheckpointEntrySize * entries.size() + 8;
  std::string out(size, '\0');
  char* p = out.data();
  auto put = [&p](uint64_t v, int bytes) {
    if constexpr (std::endian::native == std::endian::little) {
      std::memcpy(p, &v, static_cast<size_t>(bytes));  // one store, not one per byte
      p += bytes;
    } else {
      for (int i = 0; i < bytes; ++i) *p++ = static_cast<char>((v >> (8 * i)) & 0xFF);
    }
  };
  std::memcpy(p, kCheckpointMagic.data(), kCheckpointMagic.size());
  p += kCheckpointMagic.size();
  *p++ = static_cast<char>(kCheckpointVersion);
  put(n, 4);
  for (uint64_t v : from) put(v, 8);
  for (uint64_t v : head) put(v, 8);
  for (uint64_t v : fingerprint) put(v, 8);
  put(entries.size(), 4);
  for (const CheckpointEntry& e : entries) {
    put(e.partition, 4);
    put(e.slot, 8);
    put(e.hash, 8);
  }
  put(Fingerprint64(std::string_view(out.data(), size - 8)), 8);
  return out;
}

Result<CheckpointRecord> DecodeCheckpoint(std::string_view in) {
  constexpr size_t kHeader = 4 + 1 + 4;
  if (in.size() < kHeader + 4 + 8)
    return Corrupt("truncated: " + std::to_string(in.size()) + " bytes");
  if (in.substr(0, 4) != kCheckpointMagic) return Corrupt("bad magic");
  const auto version = static_cast<uint8_t>(in[4]);
  if (version != kCheckpointVersion) {
    return Corrupt("unknown version " + std::to_string(version));
  }
  const size_t body = in.size() - 8;
  if (LoadU64(in.data() + body, 8) != Fingerprint64(in.substr(0, body))) {
    return Corrupt("checksum mismatch");
  }
  const uint64_t n = LoadU64(in.data() + 5, 4);
  if (n == 0) return Corrupt("partition count 0");
  // Everything after the header except the entry count and checksum: 24n + 20m bytes.
  if (n > (body - kHeader - 4) / 24) return Corrupt("truncated partition vectors");
  size_t pos = kHeader;
  auto u64s = [&](std::vector<uint64_t>& v) {
    v.resize(n);
    for (uint64_t& x : v) {
      x = LoadU64(in.data() + pos, 8);
      pos += 8;
    }
  };
  CheckpointRecord r;
  u64s(r.from);
  u64s(r.head);
  u64s(r.fingerprint);
  for (size_t p = 0; p < n; ++p) {
    if (r.from[p] > r.head[p]) {
      return Corrupt("partition " + std::to_string(p) + ": from " + std::to_string(r.from[p]) +
                     " is past head " + std::to_string(r.head[p]));
    }
  }
  const uint64_t m = LoadU64(in.data() + pos, 4);
  pos += 4;
  if (m > kMaxCheckpointEntries) return Corrupt("too many entries: " + std::to_string(m));
  if (body - pos != m * kCheckpointEntrySize) {
    return Corrupt(body - pos < m * kCheckpointEntrySize ? "truncated entries" : "trailing bytes");
  }
  r.entries.resize(m);
  for (CheckpointEntry& e : r.entries) {
    e.partition = static_cast<uint32_t>(LoadU64(in.data() + pos, 4));
    e.slot = LoadU64(in.data() + pos + 4, 8);
    e.hash = LoadU64(in.data() + pos + 12, 8);
    pos += kCheckpointEntrySize;
    if (e.partition >= n || e.slot < r.from[e.partition] || e.slot >= r.head[e.partition]) {
      return Corrupt("entry (partition " + std::to_string(e.partition) + ", slot " +
                     std::to_string(e.slot) + ") is outside the record's range");
    }
  }
  return r;
}

}  // namespace runnel::channel
