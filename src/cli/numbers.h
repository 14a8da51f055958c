// A CLI11 validator for unsigned integer options.
//
// CLI11 2.1 converts unsigned options with strtoull in base 0: "-1" wraps to 2^64-1, a value
// past 2^64-1 saturates to it, and "010" is read as octal 8. For offsets and limits every one of
// these is a silent, dangerous misreading (`runnel group prune s -1` would prune everything).
// Options validated with Unsigned() accept decimal digits only, within [0, max].
#ifndef RUNNEL_CLI_NUMBERS_H_
#define RUNNEL_CLI_NUMBERS_H_

#include <CLI/CLI.hpp>
#include <cstdint>
#include <limits>
#include <string>

namespace runnel::cli {

inline CLI::Validator Unsigned(uint64_t max = std::numeric_limits<uint64_t>::max()) {
  return CLI::Validator(
      [max](std::string& text) -> std::string {
        const std::string bound = std::to_string(max);
        if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos) {
          return "must be a whole number from 0 to " + bound + ", in decimal digits";
        }
        const size_t first = text.find_first_not_of('0');
        const std::string digits = first == std::string::npos ? "0" : text.substr(first);
        if (digits.size() > bound.size() || (digits.size() == bound.size() && digits > bound)) {
          return "must be at most " + bound;
        }
        text = digits;  // "010" is ten, not octal eight
        return "";
      },
      "UINT");
}

}  // namespace runnel::cli

#endif  // RUNNEL_CLI_NUMBERS_H_
