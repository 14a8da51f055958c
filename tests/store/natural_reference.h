// A reference for the natural order of names (src/store/natural_key.h), written from the order's
// definition and not from the key: names are cut into pieces and compared piece by piece.
#ifndef RUNNEL_TESTS_STORE_NATURAL_REFERENCE_H_
#define RUNNEL_TESTS_STORE_NATURAL_REFERENCE_H_

#include <string>
#include <string_view>
#include <vector>

namespace runnel::testing {

struct NaturalPiece {
  bool number = false;
  unsigned char byte = 0;  // a text piece
  std::string digits;      // a number piece, without leading zeros
};

inline std::vector<NaturalPiece> NaturalPieces(std::string_view name) {
  std::vector<NaturalPiece> pieces;
  for (size_t i = 0; i < name.size();) {
    NaturalPiece p;
    if (name[i] >= '0' && name[i] <= '9') {
      p.number = true;
      size_t j = i;
      while (j < name.size() && name[j] >= '0' && name[j] <= '9') ++j;
      std::string run(name.substr(i, j - i));
      run.erase(0, run.find_first_not_of('0') == std::string::npos ? run.size()
                                                                   : run.find_first_not_of('0'));
      p.digits = run;
      i = j;
    } else {
      p.byte = static_cast<unsigned char>(name[i]);
      ++i;
    }
    pieces.push_back(std::move(p));
  }
  return pieces;
}

// True when `a` comes before `b` in natural order.
inline bool NaturalLessReference(std::string_view a, std::string_view b) {
  const auto pa = NaturalPieces(a);
  const auto pb = NaturalPieces(b);
  for (size_t i = 0; i < pa.size() && i < pb.size(); ++i) {
    const NaturalPiece& x = pa[i];
    const NaturalPiece& y = pb[i];
    if (x.number && y.number) {
      if (x.digits.size() != y.digits.size()) return x.digits.size() < y.digits.size();
      if (x.digits != y.digits) return x.digits < y.digits;
      continue;
    }
    // A number sorts where the byte '0' does; a text byte is never a digit.
    const unsigned char bx = x.number ? '0' : x.byte;
    const unsigned char by = y.number ? '0' : y.byte;
    if (bx != by) return bx < by;
  }
  if (pa.size() != pb.size()) return pa.size() < pb.size();
  return a < b;  // equal in every piece: by bytes
}

}  // namespace runnel::testing

#endif  // RUNNEL_TESTS_STORE_NATURAL_REFERENCE_H_
