#include "base/log.h"

#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace runnel {
namespace {

// True when `text` is a UTC time as the log writes it: 2026-12-05T23:06:01.123Z.
bool IsLogTimestamp(std::string_view text) {
  const std::string_view shape = "dddd-dd-ddTdd:dd:dd.dddZ";
  if (text.size() != shape.size()) return false;
  for (size_t i = 0; i < shape.size(); ++i) {
    const bool digit = text[i] >= '0' && text[i] <= '9';
    if (shape[i] == 'd' ? !digit : text[i] != shape[i]) return false;
  }
  return true;
}

// True when `line` is one text log line: a timestamp, a level in capitals, a message, a newline
// at its end and nowhere else.
bool IsTextLine(std::string_view line) {
  if (line.size() < 26 || line.back() != '\n' || line.find('\n') != line.size() - 1) return false;
  if (!IsLogTimestamp(line.substr(0, 24)) || line[24] != ' ') return false;
  const std::string_view rest = line.substr(25);
  for (std::string_view level : {"ERROR ", "WARN ", "INFO ", "DEBUG "}) {
    if (rest.starts_with(level)) return true;
  }
  return false;
}

// Captures every line Log writes, and restores the defaults afterwards.
class LogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SetLogSink([this](std::string_view line) { lines_.emplace_back(line); });
  }
  void TearDown() override {
    SetLogSink(nullptr);
    ConfigureLog(LogLevel::kInfo, LogFormat::kText);
  }
  std::vector<std::string> lines_;
};

TEST_F(LogTest, LevelNamesParseAndPrint) {
  for (LogLevel level : {LogLevel::kError, LogLevel::kWarn, LogLevel::kInfo, LogLevel::kDebug}) {
    EXPECT_EQ(ParseLogLevel(LogLevelName(level)), level);
  }
  EXPECT_FALSE(ParseLogLevel("warning").has_value());
  EXPECT_FALSE(ParseLogLevel("INFO").has_value());
  EXPECT_EQ(ParseLogFormat("json"), LogFormat::kJson);
  EXPECT_EQ(ParseLogFormat("text"), LogFormat::kText);
  EXPECT_FALSE(ParseLogFormat("logfmt").has_value());
}

TEST_F(LogTest, LinesBelowTheLevelAreDropped) {
  ConfigureLog(LogLevel::kWarn, LogFormat::kText);
  Log(LogLevel::kDebug, "d");
  Log(LogLevel::kInfo, "i");
  Log(LogLevel::kWarn, "w");
  Log(LogLevel::kError, "e");
  LogF(LogLevel::kInfo, "i%d", 2);
  LogF(LogLevel::kError, "e%d", 2);
  ASSERT_EQ(lines_.size(), 3u);
  EXPECT_NE(lines_[0].find(" WARN w\n"), std::string::npos) << lines_[0];
  EXPECT_NE(lines_[1].find(" ERROR e\n"), std::string::npos) << lines_[1];
  EXPECT_NE(lines_[2].find(" ERROR e2\n"), std::string::npos) << lines_[2];

  lines_.clear();
  ConfigureLog(LogLevel::kError, LogFormat::kText);
  Log(LogLevel::kWarn, "w");
  EXPECT_TRUE(lines_.empty());
  ConfigureLog(LogLevel::kDebug, LogFormat::kText);
  Log(LogLevel::kDebug, "d");
  ASSERT_EQ(lines_.size(), 1u);
  EXPECT_NE(lines_[0].find(" DEBUG d\n"), std::string::npos);
}

TEST_F(LogTest, TextLinesHaveOneShapeAndNeverSplit) {
  ConfigureLog(LogLevel::kDebug, LogFormat::kText);
  Log(LogLevel::kInfo, "two\nlines\r and an \x1b[2J escape");
  ASSERT_EQ(lines_.size(), 1u);
  EXPECT_TRUE(IsTextLine(lines_[0])) << lines_[0];
  EXPECT_NE(lines_[0].find("two\\x0alines\\x0d and an \\x1b[2J escape"), std::string::npos)
      << lines_[0];
}

TEST_F(LogTest, JsonLinesAreValidJsonWhateverTheMessage) {
  ConfigureLog(LogLevel::kDebug, LogFormat::kJson);
  const std::vector<std::string> messages = {
      "plain",
      "quotes \" and \\ backslashes",
      std::string("controls \n\t\r\x01\x7f and a NUL \0 inside", 33),
      "caf\xc3\xa9 \xe6\x97\xa5",  // UTF-8, kept
      "bad \xff\xfe bytes \xc3(",  // not UTF-8: replaced, still valid JSON
  };
  for (const std::string& m : messages) Log(LogLevel::kWarn, m);
  ASSERT_EQ(lines_.size(), messages.size());
  for (size_t i = 0; i < lines_.size(); ++i) {
    const std::string& line = lines_[i];
    ASSERT_EQ(line.back(), '\n');
    EXPECT_EQ(line.find('\n'), line.size() - 1) << line;
    const auto parsed = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    ASSERT_FALSE(parsed.is_discarded()) << line;
    EXPECT_EQ(parsed["level"], "warn");
    EXPECT_TRUE(IsLogTimestamp(parsed["time"].get<std::string>())) << line;
    if (i < 4) {
      EXPECT_EQ(parsed["msg"], messages[i]) << line;
    }
  }
  EXPECT_EQ(nlohmann::json::parse(lines_[4])["msg"],
            "bad \xef\xbf\xbd\xef\xbf\xbd bytes \xef\xbf\xbd(");
}

TEST_F(LogTest, TimestampIsUtcWithMilliseconds) {
  // 2026-12-05T23:06:01.123Z.
  const std::chrono::system_clock::time_point t{std::chrono::milliseconds(1796511961123)};
  EXPECT_EQ(LogTimestamp(t), "2026-12-05T23:06:01.123Z");
  EXPECT_EQ(FormatLogLine(LogFormat::kText, LogLevel::kError, t, "m"),
            "2026-12-05T23:06:01.123Z ERROR m\n");
  EXPECT_EQ(FormatLogLine(LogFormat::kJson, LogLevel::kInfo, t, "m"),
            "{\"time\":\"2026-12-05T23:06:01.123Z\",\"level\":\"info\",\"msg\":\"m\"}\n");
}

}  // namespace
}  // namespace runnel
