// CRC32C (Castagnoli, polynomial 0x1EDC6F41, reflected), as used by iSCSI, ext4 and the log.
// Uses the SSE4.2 crc32 instruction when the CPU has it, a table otherwise; both give the same
// value. Thread-safe (pure functions).
#ifndef RUNNEL_STORE_LOG_CRC32C_H_
#define RUNNEL_STORE_LOG_CRC32C_H_

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace runnel::log {

// The CRC32C of data, continuing from `crc` (the value of an earlier Crc32c call, 0 to start).
uint32_t Crc32cExtend(uint32_t crc, const char* data, size_t n);
inline uint32_t Crc32c(std::string_view data) {
  return Crc32cExtend(0, data.data(), data.size());
}

// Stored CRCs are masked so that a CRC computed over bytes that embed CRCs stays well mixed
// (the same rotation-and-add leveldb documents).
inline uint32_t MaskCrc(uint32_t crc) {
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}
inline uint32_t UnmaskCrc(uint32_t masked) {
  uint32_t rot = masked - 0xa282ead8u;
  return (rot >> 17) | (rot << 15);
}

}  // namespace runnel::log

#endif  // RUNNEL_STORE_LOG_CRC32C_H_
