// Text for a human's terminal: what the CLI prints in its tables and messages.
//
// Names and messages that come from a server (stream, group, consumer and tenant names, token
// notes, error messages, header values) are chosen by whoever created them. Printed raw, an ESC
// or a C1 CSI could set the terminal's title, clear the screen or move the cursor, and a CR, LF
// or TAB could fake lines or columns of a table. Every piece of such text the CLI prints for
// humans goes through TerminalSafe(); --json output does not (JSON escaping keeps it one JSON
// value), and neither does the payload that `runnel read` writes byte for byte.
//
// Thread-safety: pure functions.
#ifndef RUNNEL_CLI_TERMINAL_TEXT_H_
#define RUNNEL_CLI_TERMINAL_TEXT_H_

#include <cstdint>
#include <string>
#include <string_view>

namespace runnel::cli {

// `text` with nothing a terminal acts on, every character still readable:
// - C0 controls (U+0000-U+001F: NUL, BEL, TAB, LF, CR, ESC...) and DEL become "\xNN" (two
//   lower-case hex digits, e.g. ESC is "\x1b");
// - C1 controls (U+0080-U+009F, encoded in UTF-8 as C2 80-C2 9F) become "\u00NN" (e.g. "\u009b");
// - a byte that is not part of well-formed UTF-8 becomes "\xNN";
// - a backslash becomes "\\", so the output maps back to exactly one input;
// - everything else (printable ASCII, and printable UTF-8 such as "café" or "日本") is kept.
std::string TerminalSafe(std::string_view text);

// A time for a table: milliseconds since the Unix epoch as "2026-12-05 23:10:00Z" (UTC, to the
// second, rounded down).
std::string HumanTime(uint64_t unix_ms);

}  // namespace runnel::cli

#endif  // RUNNEL_CLI_TERMINAL_TEXT_H_
