// Natural order of stream names, and the byte string that sorts in it (the natural key).
//
// The order. A name is read as pieces: each maximal run of ASCII digits ('0'..'9') is one
// number piece; every other byte is a text piece of its own. Two names compare piece by piece,
// from the first:
//   - two text pieces compare as unsigned bytes;
//   - two number pieces compare by value (leading zeros do not count: "007" equals "7" here),
//     which for numbers of any size is: fewer significant digits first, then digit by digit;
//   - a number piece sorts where the byte '0' (0x30) sorts among text pieces: after '-', '.' and
//     '/', before ':', 'A' and 'a';
//   - a name that runs out of pieces first sorts first ("a" before "a-1").
// Names equal in every piece ("a7", "a007", "a07") are then ordered by their bytes ("a007",
// "a07", "a7"), so the order is total and two names are equal only when they are the same.
// Examples: "bench-2" < "bench-10" < "bench-10a" < "bench-10b" < "bench-11"; "x9" < "x10";
// "file-1.txt" < "file-1a" (a number piece, then '.' 0x2E < 'a' 0x61).
//
// The natural key of a name is a byte string whose unsigned byte order (memcmp, PostgreSQL's
// bytea order) is exactly that order. It is the primary part followed by 0x00 0x00 and the name
// itself:
//   - a text byte is written as it is, except 0x00, written 0x00 0x01;
//   - a number piece is written 0x30, then its count of significant digits (leading zeros
//     stripped; 0 for a run of zeros only) as 4 bytes big-endian, then those digits.
// A text byte is never 0x30..0x39 (digits always belong to number pieces), so the marker 0x30
// cannot be confused with text and sorts among text exactly where the digit '0' would; the
// separator 0x00 0x00 sorts below every text byte (0x00 is escaped as 0x00 0x01), below the marker
// and so below anything a longer name continues with.
//
// Prefix filtering: the names that start with a prefix p are not one key range when p ends in
// a digit ("b1" matches "b1", "b12" and "b100", whose numbers have different digit counts).
// NaturalPrefix describes where they lie: every matching key starts with `stem`; when
// `by_length` is set, a matching key also has, right after the stem, a digit count n >= the
// length of `digits` followed by `digits` (one range per digit count). Keys in those ranges whose
// names do not start with p (a leading zero elsewhere: "b01" for "b1") must still be filtered
// out by the caller; so must every number for a prefix ending in zeros only ("b0" matches "b05"
// but not "b5": the number piece's value does not tell).
#ifndef RUNNEL_STORE_NATURAL_KEY_H_
#define RUNNEL_STORE_NATURAL_KEY_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace runnel::store {

// The natural key of `name` (see above): unique per name, ordered as the names' natural order.
std::string NaturalKey(std::string_view name);

// Natural order of two names: negative, zero (the same name) or positive, exactly as their
// natural keys compare, without building them (no allocation).
int NaturalCompare(std::string_view a, std::string_view b);

// The name a natural key was made from (the bytes after the separator). Empty for a string that
// is not a natural key.
std::string NameFromNaturalKey(std::string_view key);

// Where the keys of the names starting with a prefix lie (see the header comment).
struct NaturalPrefix {
  std::string stem;
  bool by_length = false;
  std::string digits;  // significant digits of the prefix's last number; by_length only

  explicit NaturalPrefix(std::string_view prefix);

  // The smallest key >= `from` that may belong to a matching name, or nullopt when no key from
  // there on can (past the stem's range, or past the largest digit count).
  std::optional<std::string> NextCandidate(std::string_view from) const;
  // Whether `key` lies in the ranges above (the name may still not start with the prefix).
  bool InRange(std::string_view key) const;
};

}  // namespace runnel::store

#endif  // RUNNEL_STORE_NATURAL_KEY_H_
