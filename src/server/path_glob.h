// Stream-path globs of the subscription API (PROTOCOL.md section 6): a pattern is a '/'-separated
// path whose segment "**" matches any number of segments (zero included) and whose '*' inside a
// segment matches any run of characters of that segment.
//
// Matching backtracks to the last wildcard only (never a search over every way
// to split the path): at most pattern length x path length steps, so no pattern can make a
// match expensive; with a recursive search,
// "**/**/**/.../z" against a deep path took time exponential in the number of "**".
//
// Thread-safety: pure functions.
#ifndef RUNNEL_SERVER_PATH_GLOB_H_
#define RUNNEL_SERVER_PATH_GLOB_H_

#include <string_view>
#include <vector>

namespace runnel::server {

// "a/b/c" -> {"a", "b", "c"}; "" -> {""}; "a//b" -> {"a", "", "b"}.
std::vector<std::string_view> PathSegments(std::string_view path);

// True when `text` matches the segment pattern `pattern` ('*' = any run of characters).
bool SegmentMatch(std::string_view pattern, std::string_view text);

// True when the path's segments match the pattern's.
bool PathGlobMatch(const std::vector<std::string_view>& pattern,
                   const std::vector<std::string_view>& path);
inline bool PathGlobMatch(std::string_view pattern, std::string_view path) {
  return PathGlobMatch(PathSegments(pattern), PathSegments(path));
}

}  // namespace runnel::server

#endif  // RUNNEL_SERVER_PATH_GLOB_H_
