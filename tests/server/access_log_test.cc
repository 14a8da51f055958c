#include "server/access_log.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace runnel::server {
namespace {

std::vector<std::string> ReadLines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

class AccessLogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/runnel_access_log_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/access.log";
  }
  void TearDown() override {
    std::remove(path_.c_str());
    rmdir(dir_.c_str());
  }
  std::string dir_;
  std::string path_;
};

TEST_F(AccessLogTest, TextLineHasMethodTargetProtocolStatusBytesAndDuration) {
  AccessEntry e;
  e.method = "GET";
  e.target = "/v1/stream/a?offset=-1";
  e.status = 200;
  e.bytes = 1532;
  const std::chrono::system_clock::time_point t{std::chrono::milliseconds(1796511961123)};
  EXPECT_EQ(
      AccessLog::FormatLine(LogFormat::kText, e, t, 412),
      "2026-12-05T23:06:01.123Z ACCESS GET /v1/stream/a?offset=-1 HTTP/1.1 200 1532 0.412ms\n");
  EXPECT_EQ(
      AccessLog::FormatLine(LogFormat::kText, e, t, 2000123),
      "2026-12-05T23:06:01.123Z ACCESS GET /v1/stream/a?offset=-1 HTTP/1.1 200 1532 2000.123ms\n");
  e.protocol = "HTTP/2";
  EXPECT_EQ(AccessLog::FormatLine(LogFormat::kText, e, t, 412),
            "2026-12-05T23:06:01.123Z ACCESS GET /v1/stream/a?offset=-1 HTTP/2 200 1532 0.412ms\n");
}

TEST_F(AccessLogTest, JsonLineIsValidJsonWithEveryField) {
  AccessEntry e;
  e.method = "PO\"ST";
  e.target = "/v1/stream/\x01\xff\"x";
  e.status = 404;
  e.bytes = 7;
  e.protocol = "HTTP/2";
  const std::string line =
      AccessLog::FormatLine(LogFormat::kJson, e, std::chrono::system_clock::now(), 1500);
  ASSERT_EQ(line.find('\n'), line.size() - 1);
  const auto j = nlohmann::json::parse(line, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << line;
  EXPECT_EQ(j["method"], "PO\"ST");
  EXPECT_EQ(j["protocol"], "HTTP/2");
  EXPECT_EQ(j["status"], 404);
  EXPECT_EQ(j["bytes"], 7);
  EXPECT_DOUBLE_EQ(j["duration_ms"].get<double>(), 1.5);
  EXPECT_TRUE(j["time"].is_string());
  EXPECT_TRUE(j["target"].is_string());
}

TEST_F(AccessLogTest, ScopesWriteOneLinePerAnsweredRequest) {
  auto log = AccessLog::Open(path_, LogFormat::kJson);
  ASSERT_TRUE(log.ok()) << log.status().ToString();
  int connection_a = 0;
  int connection_b = 0;
  {
    AccessScope a(log->get(), &connection_a, "GET", "/a");
    AccessScope b(log->get(), &connection_b, "PUT", "/b");
    AccessScope::Record(&connection_a, 200, 10);
    AccessScope::Record(&connection_a, 0, 5);  // a later chunk of the same body
    AccessScope::Record(&connection_b, 201, 0);
    int unknown = 0;
    AccessScope::Record(&unknown, 500, 1);  // no scope: ignored
  }
  {
    // A request whose response was never written has no line.
    AccessScope none(log->get(), &connection_a, "GET", "/never");
  }
  AccessScope moved;
  {
    AccessScope sse(log->get(), &connection_a, "GET", "/sse");
    AccessScope::Record(&connection_a, 200, 0);
    moved = std::move(sse);
  }
  AccessScope::Record(&connection_a, 0, 99);  // still reaches the moved scope
  moved = AccessScope();                      // ends it
  AccessScope inert(nullptr, &connection_a, "GET", "/off");
  AccessScope::Record(&connection_a, 200, 1);

  const std::vector<std::string> lines = ReadLines(path_);
  ASSERT_EQ(lines.size(), 3u);
  std::vector<nlohmann::json> parsed;
  for (const std::string& line : lines) parsed.push_back(nlohmann::json::parse(line));
  // Destruction order: b, then a.
  EXPECT_EQ(parsed[0]["target"], "/b");
  EXPECT_EQ(parsed[0]["status"], 201);
  EXPECT_EQ(parsed[1]["target"], "/a");
  EXPECT_EQ(parsed[1]["bytes"], 15);
  EXPECT_EQ(parsed[2]["target"], "/sse");
  EXPECT_EQ(parsed[2]["bytes"], 99);
}

TEST_F(AccessLogTest, OpenAppendsAndNamesAFileItCannotOpen) {
  {
    auto log = AccessLog::Open(path_, LogFormat::kText);
    ASSERT_TRUE(log.ok());
    AccessEntry e{"GET", "/x", 200, 1, std::chrono::steady_clock::now()};
    (*log)->Write(e, std::chrono::steady_clock::now());
  }
  {
    auto log = AccessLog::Open(path_, LogFormat::kText);
    ASSERT_TRUE(log.ok());
    AccessEntry e{"GET", "/y", 200, 1, std::chrono::steady_clock::now()};
    (*log)->Write(e, std::chrono::steady_clock::now());
  }
  const std::vector<std::string> lines = ReadLines(path_);
  ASSERT_EQ(lines.size(), 2u);
  // "<time>Z ACCESS GET /y HTTP/1.1 200 1 <ms>.<3 digits>ms"
  const std::string& line = lines[1];
  constexpr std::string_view kFields = "Z ACCESS GET /y HTTP/1.1 200 1 ";
  const size_t z = line.find(kFields);
  ASSERT_NE(z, std::string::npos) << line;
  EXPECT_EQ(line.find(' '), z + 1) << line;
  std::string_view ms = std::string_view(line).substr(z + kFields.size());
  ASSERT_TRUE(ms.ends_with("ms")) << line;
  ms.remove_suffix(2);
  const size_t dot = ms.find('.');
  ASSERT_NE(dot, std::string_view::npos) << line;
  EXPECT_GT(dot, 0u) << line;
  EXPECT_EQ(ms.size() - dot, 4u) << line;
  EXPECT_EQ(ms.find_first_not_of("0123456789."), std::string_view::npos) << line;
  auto bad = AccessLog::Open(dir_ + "/missing/dir/access.log", LogFormat::kText);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().ToString().find("cannot open the access log"), std::string::npos);
}

}  // namespace
}  // namespace runnel::server
