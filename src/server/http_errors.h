// The one mapping from runnel::Status to an HTTP status and JSON error body.
//
// Thread-safety: pure functions.
#ifndef RUNNEL_SERVER_HTTP_ERRORS_H_
#define RUNNEL_SERVER_HTTP_ERRORS_H_

#include <nlohmann/json_fwd.hpp>
#include <string>

#include "runnel/status.h"
#include "server/http_types.h"

namespace runnel::server {

// kNotFound -> 404, kAlreadyExists/kConflict/kFailedPrecondition -> 409, kInvalidArgument -> 400,
// kPermissionDenied -> 403, kUnauthenticated -> 401, kResourceExhausted -> 507 for a full disk
// (Status::no_space()), else 413 when `payload_limit`, else 429, kUnavailable -> 503,
// kOutOfRange -> 400, kOutcomeUnknown -> 504, everything else -> 500.
int HttpStatusFor(const Status& status, bool payload_limit = false);

// {"error":{"code":"<StatusCodeName>","message":"<message>"}}
std::string ErrorBody(const Status& status);

// A `status` response with `body` as JSON (invalid UTF-8 replaced), not cacheable.
HttpResponse JsonResponse(int status, const nlohmann::json& body);

}  // namespace runnel::server

#endif  // RUNNEL_SERVER_HTTP_ERRORS_H_
