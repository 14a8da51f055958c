// The process's log: one line per event, in one format, filtered by level.
//
// Every log line of the library and the server goes through here (the server's spdlog calls
// are routed here too, see cli/log_setup.h). A line is either text,
//
//   2026-12-05T23:06:01.123Z WARN log store data: checkpoint failed (...); retrying in 5s
//
// (UTC time with milliseconds, the level in capitals, the message; control characters in the
// message become "\xNN" so a line never splits), or, with LogFormat::kJson, one JSON object
//
//   {"time":"2026-12-05T23:06:01.123Z","level":"warn","msg":"log store data: ..."}
//
// Lines go to standard error by default, each written whole. Levels, most to least severe:
// error, warn, info (the default), debug; a line below the configured level is not formatted.
//
// Thread-safety: every function may be called from any thread.
#ifndef RUNNEL_BASE_LOG_H_
#define RUNNEL_BASE_LOG_H_

#include <chrono>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace runnel {

enum class LogLevel { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };
enum class LogFormat { kText, kJson };

// "error", "warn", "info", "debug"; nullopt for anything else.
std::optional<LogLevel> ParseLogLevel(std::string_view name);
// "text", "json"; nullopt for anything else.
std::optional<LogFormat> ParseLogFormat(std::string_view name);
// "error", "warn", "info", "debug".
std::string_view LogLevelName(LogLevel level);

// Sets the level below which lines are dropped, and the format of every line after.
void ConfigureLog(LogLevel level, LogFormat format);
LogLevel CurrentLogLevel();
LogFormat CurrentLogFormat();
// True when a line at `level` would be written.
bool LogEnabled(LogLevel level);

// Writes one line at `level` (when enabled).
void Log(LogLevel level, std::string_view message);
// printf-style: the message is formatted only when the level is enabled.
void LogF(LogLevel level, const char* format, ...) __attribute__((format(printf, 2, 3)));

// Where lines go: a function given each line with its newline; none (the default) writes to
// standard error. Tests capture lines with it.
void SetLogSink(std::function<void(std::string_view line)> sink);

// The line Log writes, without reading the configuration: for tests and for other logs (the
// access log) that share the format.
std::string FormatLogLine(LogFormat format, LogLevel level,
                          std::chrono::system_clock::time_point time, std::string_view message);

// `time` as 2026-12-05T23:06:01.123Z.
std::string LogTimestamp(std::chrono::system_clock::time_point time);

// `text` as the inside of a JSON string (quotes, backslashes and control characters escaped;
// bytes that are not well-formed UTF-8 become U+FFFD), so a line is always valid JSON.
void AppendJsonEscaped(std::string* out, std::string_view text);

// `text` with C0 controls and DEL as "\xNN": what a text line holds of a message.
void AppendLineSafe(std::string* out, std::string_view text);

}  // namespace runnel

#endif  // RUNNEL_BASE_LOG_H_
