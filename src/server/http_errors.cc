#include "server/http_errors.h"

#include <nlohmann/json.hpp>

#include "server/offset_token.h"

namespace runnel::server {

int HttpStatusFor(const Status& status, bool payload_limit) {
  switch (status.code()) {
    case StatusCode::kOk: return 200;
    case StatusCode::kNotFound: return 404;
    case StatusCode::kAlreadyExists:
    case StatusCode::kConflict:
    case StatusCode::kFailedPrecondition: return 409;
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange: return 400;
    case StatusCode::kPermissionDenied: return 403;
    case StatusCode::kUnauthenticated: return 401;
    case StatusCode::kResourceExhausted:
      // A full disk is no rate limit: 507 Insufficient Storage.
      if (status.no_space()) return 507;
      return payload_limit ? 413 : 429;
    case StatusCode::kUnavailable: return 503;
    case StatusCode::kOutcomeUnknown:
      // The write may or may not have happened: like a gateway that got no answer upstream.
      return 504;
    case StatusCode::kCorruption:
    case StatusCode::kIOError:
    case StatusCode::kInternal: return 500;
  }
  return 500;
}

std::string ErrorBody(const Status& status) {
  nlohmann::json body = {{"error",
                          {{"code", std::string(StatusCodeName(status.code()))},
                           {"message", std::string(status.message())}}}};
  if (auto range = status.unreadable_range()) {
    // Records [first, end) cannot be read: reading at the offset before `first` fails, and
    // reading from the offset before `end` goes on past them.
    body["error"]["unreadable"] = {{"offset", FormatOffset(range->first - 1)},
                                   {"next_offset", FormatOffset(range->second - 1)}};
  }
  return body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

HttpResponse JsonResponse(int status, const nlohmann::json& body) {
  HttpResponse r;
  r.status = status;
  r.Set("Content-Type", "application/json");
  r.Set("Cache-Control", "no-store");
  r.body = body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return r;
}

}  // namespace runnel::server
