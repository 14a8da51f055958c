#include "server/http_errors.h"

#include <gtest/gtest.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "env/fault_env.h"
#include "env/mem_env.h"
#include "runnel/log_store.h"
#include "runnel/registry.h"
#include "server/stream_service.h"
#include "support/write_sync.h"

namespace runnel::server {
namespace {

TEST(HttpErrorsTest, MapsEveryCode) {
  EXPECT_EQ(HttpStatusFor(Status::NotFound("x")), 404);
  EXPECT_EQ(HttpStatusFor(Status::AlreadyExists("x")), 409);
  EXPECT_EQ(HttpStatusFor(Status::Conflict("x", 1, 2)), 409);
  EXPECT_EQ(HttpStatusFor(Status::FailedPrecondition("x")), 409);
  EXPECT_EQ(HttpStatusFor(Status::InvalidArgument("x")), 400);
  EXPECT_EQ(HttpStatusFor(Status::OutOfRange("x")), 400);
  EXPECT_EQ(HttpStatusFor(Status::PermissionDenied("x")), 403);
  EXPECT_EQ(HttpStatusFor(Status::Unauthenticated("x")), 401);
  EXPECT_EQ(HttpStatusFor(Status::ResourceExhausted("x")), 429);
  EXPECT_EQ(HttpStatusFor(Status::ResourceExhausted("x"), /*payload_limit=*/true), 413);
  // A full disk is no rate limit or payload limit: 507 Insufficient Storage.
  EXPECT_EQ(HttpStatusFor(Status::NoSpace("x")), 507);
  EXPECT_EQ(HttpStatusFor(Status::NoSpace("x").Annotate("append"), true), 507);
  EXPECT_EQ(HttpStatusFor(Status::Unavailable("x")), 503);
  EXPECT_EQ(HttpStatusFor(Status::OutcomeUnknown("x")), 504);
  EXPECT_EQ(HttpStatusFor(Status::Corruption("x")), 500);
  EXPECT_EQ(HttpStatusFor(Status::IOError("x")), 500);
  EXPECT_EQ(HttpStatusFor(Status::Internal("x")), 500);
}

TEST(HttpErrorsTest, BodyCarriesStableCodeAndMessage) {
  auto body = nlohmann::json::parse(ErrorBody(Status::NotFound("stream 'a' does not exist")));
  EXPECT_EQ(body["error"]["code"], "not_found");
  EXPECT_EQ(body["error"]["message"], "stream 'a' does not exist");
}

TEST(HttpErrorsTest, BodyIsValidJsonForAnyMessageBytes) {
  std::string message = "quote\" backslash\\ newline\n bad utf8 \xff";
  auto body = nlohmann::json::parse(ErrorBody(Status::InvalidArgument(message)));
  EXPECT_EQ(body["error"]["code"], "invalid_argument");
}

// A full disk over HTTP, through the embedded log: the append that needs a new segment is
// refused with 507 and the store's reason (not a bare 500), and appends work again once there
// is space.
TEST(HttpErrorsTest, AnAppendOnAFullDiskIs507WithTheReason) {
  env::MemEnv mem;
  env::FaultInjectionEnv faults(&mem);
  LogStoreOptions o;
  o.dir = "/data";
  o.env = &faults;
  o.segment_size = 16 << 10;
  auto store = OpenLogStore(o);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  StreamService service(StreamRegistry(std::move(*store)), StreamServiceOptions{}, nullptr);
  auto write = [&](const std::string& method, const std::string& body) {
    HttpRequest request;
    request.method = method;
    request.path = "/v1/stream/s";
    request.headers["content-type"] = "text/plain";
    request.body = body;
    return testing::WriteSync(service, std::move(request));
  };
  ASSERT_EQ(write("PUT", "").status, 201);
  faults.SetNoSpace(true);
  HttpResponse refused;
  for (int i = 0; i < 100; ++i) {
    refused = write("POST", std::string(1000, 'x'));
    if (refused.status != 204) break;
  }
  EXPECT_EQ(refused.status, 507) << refused.body;
  auto body = nlohmann::json::parse(refused.body);
  EXPECT_EQ(body["error"]["code"], "resource_exhausted");
  EXPECT_NE(body["error"]["message"].get<std::string>().find("disk full"), std::string::npos)
      << refused.body;
  faults.ClearFaults();
  EXPECT_EQ(write("POST", "space again").status, 204);
}

}  // namespace
}  // namespace runnel::server
