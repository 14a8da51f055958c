// Error bodies of store failures on the embedded log (a full disk, a damaged record) name the
// data directory's files relative to it: nothing an HTTP client receives holds the directory's
// path.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "env/env.h"
#include "env/fault_env.h"
#include "runnel/log_store.h"
#include "runnel/registry.h"
#include "server/http_types.h"
#include "server/stream_service.h"
#include "support/protocol_differential.h"

namespace runnel::server {
namespace {

using json = nlohmann::json;
using testing::Serve;

class StoreErrorBodyTest : public ::testing::Test {
 protected:
  StoreErrorBodyTest() {
    char pattern[] = "/tmp/runnel-error-body-XXXXXX";
    const char* made = ::mkdtemp(pattern);
    if (made != nullptr) dir_ = made;
  }
  ~StoreErrorBodyTest() override {
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  void SetUp() override { ASSERT_FALSE(dir_.empty()) << "mkdtemp failed"; }

  // A service over the log store in dir_, through faults_; segments made on demand.
  std::unique_ptr<StreamService> Start() {
    LogStoreOptions o;
    o.dir = dir_;
    o.env = &faults_;
    o.prezero_segments = false;
    o.segment_size = 64 << 10;
    auto store = OpenLogStore(o);
    if (!store.ok()) {
      ADD_FAILURE() << store.status().ToString();
      return nullptr;
    }
    return std::make_unique<StreamService>(StreamRegistry(std::move(*store)),
                                           StreamServiceOptions{}, nullptr);
  }
  static HttpResponse Send(StreamService& service, const std::string& method,
                           const std::string& path, const std::string& query = "",
                           const std::string& body = "") {
    HttpRequest r;
    r.method = method;
    r.path = path;
    EXPECT_TRUE(ParseQuery(query, &r.query)) << query;
    r.headers["content-type"] = "text/plain";
    r.body = body;
    return Serve(service, std::move(r));
  }
  // `r` is a 500 whose JSON error has `code` and a message holding `expected`, and no byte of
  // the answer names the data directory.
  void ExpectError(const HttpResponse& r, const std::string& code, const std::string& expected,
                   int status = 500) {
    EXPECT_EQ(r.status, status) << r.body;
    const json body = json::parse(r.body, nullptr, false);
    ASSERT_TRUE(body.is_object()) << r.body;
    EXPECT_EQ(body["error"].value("code", ""), code) << r.body;
    EXPECT_NE(body["error"].value("message", "").find(expected), std::string::npos) << r.body;
    EXPECT_EQ(r.body.find(dir_), std::string::npos) << r.body;
    for (const auto& [name, value] : r.headers) {
      EXPECT_EQ(value.find(dir_), std::string::npos) << name << ": " << value;
    }
  }

  std::string dir_;
  env::FaultInjectionEnv faults_{env::Env::Posix()};
};

TEST_F(StoreErrorBodyTest, AFullDiskAnswersWithTheSegmentNamedRelativeToTheDataDirectory) {
  auto service = Start();
  ASSERT_NE(service, nullptr);
  ASSERT_EQ(Send(*service, "PUT", "/v1/stream/s").status, 201);
  faults_.SetNoSpace(true);
  ExpectError(Send(*service, "POST", "/v1/stream/s", "", "no room"), "resource_exhausted",
              "write '00000000000000000001.log': No space left on device", 507);
  faults_.ClearFaults();
}

TEST_F(StoreErrorBodyTest, ADamagedRecordAnswersWithTheSegmentNamedRelativeToTheDataDirectory) {
  {
    auto service = Start();
    ASSERT_NE(service, nullptr);
    ASSERT_EQ(Send(*service, "PUT", "/v1/stream/s").status, 201);
    ASSERT_EQ(Send(*service, "POST", "/v1/stream/s", "", "the-damaged-record").status, 204);
  }  // a clean close: the checkpoint covers every frame, so the open does not read them again
  const std::string seg = env::JoinPath(dir_, "00000000000000000001.log");
  std::string data;
  {
    std::ifstream in(seg, std::ios::binary);
    data.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  const size_t at = data.find("the-damaged-record");
  ASSERT_NE(at, std::string::npos);
  data[at] = 'T';
  {
    std::ofstream out(seg, std::ios::binary | std::ios::trunc);
    out << data;
  }
  auto service = Start();
  ASSERT_NE(service, nullptr);
  ExpectError(Send(*service, "GET", "/v1/stream/s", "offset=-1"), "corruption",
              "segment 00000000000000000001.log at byte ");
}

}  // namespace
}  // namespace runnel::server
