#include "store/natural_key.h"

#include <cstddef>

namespace runnel::store {
namespace {

constexpr char kMarker = '0';
constexpr size_t kCountBytes = 4;
constexpr uint64_t kMaxCount = 0xFFFFFFFFu;

bool IsDigit(char c) {
  return c >= '0' && c <= '9';
}

void PutCount(uint64_t n, std::string* out) {
  for (size_t i = kCountBytes; i-- > 0;) out->push_back(static_cast<char>((n >> (8 * i)) & 0xFF));
}

uint64_t GetCount(std::string_view bytes) {
  uint64_t n = 0;
  for (size_t i = 0; i < kCountBytes; ++i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  return n;
}

// Appends the number piece of the digit run `run`: the marker, the count of significant digits
// and those digits.
void PutNumber(std::string_view run, std::string* out) {
  size_t first = 0;
  while (first < run.size() && run[first] == '0') ++first;
  out->push_back(kMarker);
  PutCount(run.size() - first, out);
  out->append(run.substr(first));
}

// Appends the primary part of `name`'s key (no separator, no name).
void PutPrimary(std::string_view name, std::string* out) {
  size_t i = 0;
  while (i < name.size()) {
    if (IsDigit(name[i])) {
      size_t end = i;
      while (end < name.size() && IsDigit(name[end])) ++end;
      PutNumber(name.substr(i, end - i), out);
      i = end;
      continue;
    }
    out->push_back(name[i]);
    if (name[i] == '\0') out->push_back('\x01');
    ++i;
  }
}

}  // namespace

std::string NaturalKey(std::string_view name) {
  std::string key;
  key.reserve(name.size() * 2 + 2);
  PutPrimary(name, &key);
  key.push_back('\0');
  key.push_back('\0');
  key.append(name);
  return key;
}

int NaturalCompare(std::string_view a, std::string_view b) {
  size_t i = 0;
  size_t j = 0;
  while (i < a.size() && j < b.size()) {
    if (IsDigit(a[i]) && IsDigit(b[j])) {
      // Two number pieces: significant digit counts, then the digits (as the key writes them).
      size_t ai = i;
      while (ai < a.size() && a[ai] == '0') ++ai;
      size_t ae = ai;
      while (ae < a.size() && IsDigit(a[ae])) ++ae;
      size_t bj = j;
      while (bj < b.size() && b[bj] == '0') ++bj;
      size_t be = bj;
      while (be < b.size() && IsDigit(b[be])) ++be;
      if (ae - ai != be - bj) return ae - ai < be - bj ? -1 : 1;
      if (int c = a.substr(ai, ae - ai).compare(b.substr(bj, be - bj)); c != 0) return c;
      i = ae;
      j = be;
      continue;
    }
    // A number piece is written from the marker '0'; a text byte as itself (0x00 followed by
    // 0x01, which orders the same as the byte alone here: the other side differs at this byte).
    const auto ca = static_cast<unsigned char>(IsDigit(a[i]) ? kMarker : a[i]);
    const auto cb = static_cast<unsigned char>(IsDigit(b[j]) ? kMarker : b[j]);
    if (ca != cb) return ca < cb ? -1 : 1;
    ++i;
    ++j;
  }
  // The name whose pieces ran out first has the separator where the other goes on.
  if (i < a.size()) return 1;
  if (j < b.size()) return -1;
  return a.compare(b) < 0 ? -1 : (a == b ? 0 : 1);
}

std::string NameFromNaturalKey(std::string_view key) {
  size_t i = 0;
  while (i < key.size()) {
    if (key[i] == kMarker) {
      if (key.size() - i < 1 + kCountBytes) return {};
      const uint64_t count = GetCount(key.substr(i + 1));
      if (count > key.size() - i - 1 - kCountBytes) return {};
      i += 1 + kCountBytes + static_cast<size_t>(count);
    } else if (key[i] == '\0') {
      if (i + 1 >= key.size()) return {};
      if (key[i + 1] == '\0') return std::string(key.substr(i + 2));
      i += 2;
    } else {
      ++i;
    }
  }
  return {};
}

NaturalPrefix::NaturalPrefix(std::string_view prefix) {
  size_t run = prefix.size();
  while (run > 0 && IsDigit(prefix[run - 1])) --run;
  PutPrimary(prefix.substr(0, run), &stem);
  if (run == prefix.size()) return;
  // The prefix ends in a number: a matching name continues that number with more digits or not.
  stem.push_back(kMarker);
  std::string_view tail = prefix.substr(run);
  while (!tail.empty() && tail.front() == '0') tail.remove_prefix(1);
  // Zeros only: the matching numbers have any value, so only the stem is known.
  if (tail.empty()) return;
  by_length = true;
  digits = std::string(tail);
}

std::optional<std::string> NaturalPrefix::NextCandidate(std::string_view from) const {
  if (from < std::string_view(stem)) from = stem;
  if (!from.starts_with(stem)) return std::nullopt;
  if (!by_length) return std::string(from);
  // The digit count `from` has (padded with zero bytes when shorter), at least the prefix's.
  std::string count_bytes(from.substr(stem.size(), kCountBytes));
  count_bytes.resize(kCountBytes, '\0');
  uint64_t count = GetCount(count_bytes);
  if (count < digits.size()) count = digits.size();
  std::string low = stem;
  PutCount(count, &low);
  low.append(digits);
  if (from <= std::string_view(low)) return low;
  if (from.starts_with(low)) return std::string(from);
  // Past this digit count's range: the next count's range begins above `from`.
  if (count == kMaxCount) return std::nullopt;
  low.resize(stem.size());
  PutCount(count + 1, &low);
  low.append(digits);
  return low;
}

bool NaturalPrefix::InRange(std::string_view key) const {
  if (!key.starts_with(stem)) return false;
  if (!by_length) return true;
  if (key.size() - stem.size() < kCountBytes + digits.size()) return false;
  const uint64_t count = GetCount(key.substr(stem.size()));
  return count >= digits.size() &&
         key.substr(stem.size() + kCountBytes, digits.size()) == std::string_view(digits);
}

}  // namespace runnel::store
