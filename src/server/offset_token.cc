#include "server/offset_token.h"

namespace runnel::server {

namespace {
constexpr size_t kFieldDigits = 16;
constexpr size_t kTokenLength = 2 * kFieldDigits + 1;
// The second field holds the position modulo 10^16, the first the rest (at most 1844).
constexpr uint64_t kFieldBase = 10'000'000'000'000'000ULL;

void PutDigits(uint64_t value, char* field) {
  for (size_t i = kFieldDigits; i-- > 0;) {
    field[i] = static_cast<char>('0' + value % 10);
    value /= 10;
  }
}

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
  std::string token(kTokenLength, '_');
  PutDigits(position / kFieldBase, token.data());
  PutDigits(position % kFieldBase, token.data() + kFieldDigits + 1);
  return token;
}

Result<OffsetQuery> ParseOffset(std::string_view text) {
  if (text == "-1") return OffsetQuery{OffsetQuery::Kind::kBeginning, 0};
  if (text == "now") return OffsetQuery{OffsetQuery::Kind::kNow, 0};
  uint64_t high = 0;
  uint64_t low = 0;
  constexpr uint64_t kMaxHigh = UINT64_MAX / kFieldBase;  // 1844
  if (text.size() != kTokenLength || text[kFieldDigits] != '_' ||
      !ParseDigits(text.substr(0, kFieldDigits), &high) ||
      !ParseDigits(text.substr(kFieldDigits + 1), &low) || high > kMaxHigh ||
      (high == kMaxHigh && low > UINT64_MAX % kFieldBase)) {
    return Status::InvalidArgument("malformed offset '" + std::string(text.substr(0, 64)) + "'");
  }
  return OffsetQuery{OffsetQuery::Kind::kPosition, high * kFieldBase + low};
}

}  // namespace runnel::server
