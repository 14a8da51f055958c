#include "runnel/status.h"

#include <cstdio>
#include <cstdlib>

#include "base/log.h"

namespace runnel {

std::string_view StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kNotFound: return "not_found";
    case StatusCode::kAlreadyExists: return "already_exists";
    case StatusCode::kInvalidArgument: return "invalid_argument";
    case StatusCode::kPermissionDenied: return "permission_denied";
    case StatusCode::kConflict: return "conflict";
    case StatusCode::kOutcomeUnknown: return "outcome_unknown";
    case StatusCode::kFailedPrecondition: return "failed_precondition";
    case StatusCode::kOutOfRange: return "out_of_range";
    case StatusCode::kCorruption: return "corruption";
    case StatusCode::kIOError: return "io_error";
    case StatusCode::kResourceExhausted: return "resource_exhausted";
    case StatusCode::kUnavailable: return "unavailable";
    case StatusCode::kInternal: return "internal";
    case StatusCode::kUnauthenticated: return "unauthenticated";
  }
  return "unknown";
}

Status::Status(StatusCode code, std::string_view message) {
  if (code != StatusCode::kOk) {
    rep_ = std::make_unique<Rep>(
        Rep{code, std::string(message), std::nullopt, std::nullopt, /*no_space=*/false});
  }
}

Status::Status(const Status& other)
    : rep_(other.rep_ ? std::make_unique<Rep>(*other.rep_) : nullptr) {}

Status& Status::operator=(const Status& other) {
  if (this != &other) rep_ = other.rep_ ? std::make_unique<Rep>(*other.rep_) : nullptr;
  return *this;
}

Status Status::Conflict(std::string_view msg, uint64_t expected, uint64_t actual) {
  Status s(StatusCode::kConflict, msg);
  s.rep_->expected = expected;
  s.rep_->actual = actual;
  return s;
}

Status Status::Unreadable(std::string_view msg, uint64_t first, uint64_t end) {
  Status s(StatusCode::kCorruption, msg);
  s.rep_->expected = first;
  s.rep_->actual = end;
  return s;
}

Status Status::NoSpace(std::string_view msg) {
  Status s(StatusCode::kResourceExhausted, msg);
  s.rep_->no_space = true;
  return s;
}

std::string_view Status::message() const noexcept {
  return rep_ ? std::string_view(rep_->message) : std::string_view();
}

std::optional<uint64_t> Status::conflict_expected() const noexcept {
  return rep_ && rep_->code == StatusCode::kConflict ? rep_->expected : std::nullopt;
}

std::optional<uint64_t> Status::conflict_actual() const noexcept {
  return rep_ && rep_->code == StatusCode::kConflict ? rep_->actual : std::nullopt;
}

std::optional<std::pair<uint64_t, uint64_t>> Status::unreadable_range() const noexcept {
  if (!rep_ || rep_->code != StatusCode::kCorruption || !rep_->expected || !rep_->actual) {
    return std::nullopt;
  }
  return std::pair<uint64_t, uint64_t>(*rep_->expected, *rep_->actual);
}

std::string Status::ToString() const {
  if (ok()) return "ok";
  std::string out(StatusCodeName(rep_->code));
  out += ": ";
  out += rep_->message;
  return out;
}

Status Status::WithMessage(std::string_view message) const {
  if (ok()) return Status();
  Status s(*this);
  s.rep_->message = std::string(message);
  return s;
}

Status Status::Annotate(std::string_view context) const {
  if (ok()) return Status();
  Status s(*this);
  s.rep_->message = std::string(context) + ": " + rep_->message;
  return s;
}

namespace internal {
void DieOnBadResultAccess(const Status& status) {
  LogF(LogLevel::kError, "value() of a failed Result: %s", status.ToString().c_str());
  std::abort();
}
}  // namespace internal

}  // namespace runnel
