#include "server/path_glob.h"

namespace runnel::server {

std::vector<std::string_view> PathSegments(std::string_view path) {
  std::vector<std::string_view> out;
  size_t start = 0;
  for (;;) {
    size_t slash = path.find('/', start);
    out.push_back(path.substr(start, slash - start));
    if (slash == std::string_view::npos) return out;
    start = slash + 1;
  }
}

// Both matchers are the same algorithm at two levels: walk pattern and text together; at a
// wildcard remember where it is and let it match nothing; on a mismatch go back to the last
// wildcard and let it take one more element. Every other token takes exactly one element, so the
// earliest place each run between wildcards fits is always a safe choice, and only the last
// wildcard ever needs to grow.
bool SegmentMatch(std::string_view pattern, std::string_view text) {
  constexpr size_t kNone = std::string_view::npos;
  size_t p = 0, t = 0, star = kNone, mark = 0;
  while (t < text.size()) {
    if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      mark = t;
    } else if (p < pattern.size() && pattern[p] == text[t]) {
      ++p;
      ++t;
    } else if (star != kNone) {
      p = star + 1;
      t = ++mark;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

bool PathGlobMatch(const std::vector<std::string_view>& pattern,
                   const std::vector<std::string_view>& path) {
  constexpr size_t kNone = static_cast<size_t>(-1);
  size_t p = 0, s = 0, star = kNone, mark = 0;
  while (s < path.size()) {
    if (p < pattern.size() && pattern[p] == "**") {
      star = p++;
      mark = s;
    } else if (p < pattern.size() && SegmentMatch(pattern[p], path[s])) {
      ++p;
      ++s;
    } else if (star != kNone) {
      p = star + 1;
      s = ++mark;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == "**") ++p;
  return p == pattern.size();
}

}  // namespace runnel::server
