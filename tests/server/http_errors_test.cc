#include "server/http_errors.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

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

}  // namespace
}  // namespace runnel::server
