#include "server/offset_token.h"

#include <cstdio>

namespace runnel::server {

namespace {
constexpr size_t kFieldDigits = 16;
constexpr size_t kTokenLength = 2 * kFieldDigits + 1;

bool ParseDigits(std::string_view digits, uint64_t* out) {
  uint64_t value = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return false;
    value = value * 10 + static_cast<uint64_t>(c - '0');
  }
  *out = value;
  return true;
}
}  // namespace

std::string FormatOffset(uint64_t position) {
  char buf[kTokenLength + 1];
  std::snprintf(buf, sizeof(buf), "%016llu_%016llu", 0ULL,
                static_cast<unsigned long long>(position));
  return std::string(buf, kTokenLength);
}

Result<OffsetQuery> ParseOffset(std::string_view text) {
  if (text == "-1") return OffsetQuery{OffsetQuery::Kind::kBeginning, 0};
  if (text == "now") return OffsetQuery{OffsetQuery::Kind::kNow, 0};
  uint64_t reserved = 0;
  uint64_t position = 0;
  if (text.size() != kTokenLength || text[kFieldDigits] != '_' ||
      !ParseDigits(text.substr(0, kFieldDigits), &reserved) ||
      !ParseDigits(text.substr(kFieldDigits + 1), &position) || reserved != 0) {
    return Status::InvalidArgument("malformed offset '" + std::string(text.substr(0, 64)) + "'");
  }
  return OffsetQuery{OffsetQuery::Kind::kPosition, position};
}

}  // namespace runnel::server
