#include "base/log.h"

#include <atomic>
#include <cstdarg>
#include <ctime>
#include <mutex>

#include "base/utf8.h"

namespace runnel {

namespace {

std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};
std::atomic<int> g_format{static_cast<int>(LogFormat::kText)};

std::mutex& SinkMutex() {
  static std::mutex mu;
  return mu;
}
std::function<void(std::string_view)>& Sink() {
  static std::function<void(std::string_view)> sink;
  return sink;
}

constexpr char kHex[] = "0123456789abcdef";

}  // namespace

std::optional<LogLevel> ParseLogLevel(std::string_view name) {
  if (name == "error") return LogLevel::kError;
  if (name == "warn") return LogLevel::kWarn;
  if (name == "info") return LogLevel::kInfo;
  if (name == "debug") return LogLevel::kDebug;
  return std::nullopt;
}

std::optional<LogFormat> ParseLogFormat(std::string_view name) {
  if (name == "text") return LogFormat::kText;
  if (name == "json") return LogFormat::kJson;
  return std::nullopt;
}

std::string_view LogLevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kError: return "error";
    case LogLevel::kWarn: return "warn";
    case LogLevel::kInfo: return "info";
    case LogLevel::kDebug: return "debug";
  }
  return "info";
}

void ConfigureLog(LogLevel level, LogFormat format) {
  g_level.store(static_cast<int>(level), std::memory_order_relaxed);
  g_format.store(static_cast<int>(format), std::memory_order_relaxed);
}

LogLevel CurrentLogLevel() {
  return static_cast<LogLevel>(g_level.load(std::memory_order_relaxed));
}

LogFormat CurrentLogFormat() {
  return static_cast<LogFormat>(g_format.load(std::memory_order_relaxed));
}

bool LogEnabled(LogLevel level) {
  return static_cast<int>(level) <= g_level.load(std::memory_order_relaxed);
}

std::string LogTimestamp(std::chrono::system_clock::time_point time) {
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(time.time_since_epoch()).count();
  const std::time_t seconds = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&seconds, &tm);
  char buf[80];  // room for any int in each field
  std::snprintf(buf, sizeof(buf), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<int>(ms % 1000));
  return buf;
}

void AppendJsonEscaped(std::string* out, std::string_view text) {
  const bool utf8 = IsValidUtf8(text);
  for (size_t i = 0; i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c == '"' || c == '\\') {
      out->push_back('\\');
      out->push_back(static_cast<char>(c));
    } else if (c == '\n') {
      out->append("\\n");
    } else if (c == '\r') {
      out->append("\\r");
    } else if (c == '\t') {
      out->append("\\t");
    } else if (c < 0x20 || c == 0x7f) {
      out->append("\\u00");
      out->push_back(kHex[c >> 4]);
      out->push_back(kHex[c & 0xf]);
    } else if (c >= 0x80 && !utf8) {
      out->append("\\ufffd");
    } else {
      out->push_back(static_cast<char>(c));
    }
  }
}

void AppendLineSafe(std::string* out, std::string_view text) {
  for (char ch : text) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c == 0x7f) {
      out->append("\\x");
      out->push_back(kHex[c >> 4]);
      out->push_back(kHex[c & 0xf]);
    } else {
      out->push_back(ch);
    }
  }
}

std::string FormatLogLine(LogFormat format, LogLevel level,
                          std::chrono::system_clock::time_point time, std::string_view message) {
  std::string line;
  line.reserve(message.size() + 64);
  if (format == LogFormat::kJson) {
    line += "{\"time\":\"";
    line += LogTimestamp(time);
    line += "\",\"level\":\"";
    line += LogLevelName(level);
    line += "\",\"msg\":\"";
    AppendJsonEscaped(&line, message);
    line += "\"}\n";
    return line;
  }
  line += LogTimestamp(time);
  line += ' ';
  for (char c : LogLevelName(level)) line += static_cast<char>(c - 'a' + 'A');
  line += ' ';
  AppendLineSafe(&line, message);
  line += '\n';
  return line;
}

void Log(LogLevel level, std::string_view message) {
  if (!LogEnabled(level)) return;
  const std::string line =
      FormatLogLine(CurrentLogFormat(), level, std::chrono::system_clock::now(), message);
  std::lock_guard<std::mutex> lock(SinkMutex());
  if (Sink()) {
    Sink()(line);
  } else {
    std::fwrite(line.data(), 1, line.size(), stderr);
  }
}

void LogF(LogLevel level, const char* format, ...) {
  if (!LogEnabled(level)) return;
  std::va_list args;
  va_start(args, format);
  std::va_list copy;
  va_copy(copy, args);
  const int n = std::vsnprintf(nullptr, 0, format, copy);
  va_end(copy);
  std::string message(n > 0 ? static_cast<size_t>(n) : 0, '\0');
  if (n > 0) std::vsnprintf(message.data(), message.size() + 1, format, args);
  va_end(args);
  Log(level, message);
}

void SetLogSink(std::function<void(std::string_view line)> sink) {
  std::lock_guard<std::mutex> lock(SinkMutex());
  Sink() = std::move(sink);
}

}  // namespace runnel
