// Status and Result<T>: how every runnel API reports success or failure.
//
// runnel never throws across its API. A call that can fail returns a Status (or a Result<T> that
// holds either a value or a non-OK Status). The set of codes is closed; each one is documented
// below with when it is used, and one function per surface maps it to an HTTP status or a CLI
// exit code.
//
// An OK Status holds no allocation, so returning it is as cheap as returning a pointer.
//
// Thread-safety: Status and Result are values; distinct objects may be used from distinct
// threads, one object needs external synchronisation like any std type.
#ifndef RUNNEL_STATUS_H_
#define RUNNEL_STATUS_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace runnel {

enum class StatusCode : int {
  // Success.
  kOk = 0,
  // The named stream, consumer, key or slot does not exist.
  kNotFound = 1,
  // A create named something that already exists (SEMANTICS R1).
  kAlreadyExists = 2,
  // The caller passed something malformed: an empty name, a zero retention cap, bad bytes.
  kInvalidArgument = 3,
  // The caller is known but not allowed to do this (cross-tenant denial, SEMANTICS Z2).
  kPermissionDenied = 4,
  // A position-guarded write found the position taken (the seed-003 sequence conflict). The
  // Status carries the expected and actual positions; see conflict_expected()/conflict_actual().
  kConflict = 5,
  // A write was sent but no definite outcome came back (timeout, lost connection). It may or
  // may not have been applied; settle it by reading the exact slot, never by resending.
  kOutcomeUnknown = 6,
  // The system is not in a state that allows the call: appending to a closed stream, publishing
  // while an earlier uncertain append cannot be settled.
  kFailedPrecondition = 7,
  // A number left its range: an offset would pass 2^64-1 (SEMANTICS A7).
  kOutOfRange = 8,
  // Stored data failed verification (checksum, bad magic, truncated or trailing bytes).
  kCorruption = 9,
  // The operating system refused an I/O call (a failing device, a permission). A full disk is
  // kResourceExhausted instead (Status::NoSpace).
  kIOError = 10,
  // A configured limit or quota was reached (body size, connection cap, tenant quota), or the
  // disk holding the data is full (ENOSPC, EDQUOT: made by Status::NoSpace, no_space() is set).
  kResourceExhausted = 11,
  // A dependency is down or the engine is shutting down; retrying later may succeed.
  kUnavailable = 12,
  // A broken invariant inside runnel. Always a bug worth reporting.
  kInternal = 13,
  // No credentials, or credentials that do not identify anyone.
  kUnauthenticated = 14,
};

// Stable lower-case name of a code, e.g. "not_found". Used as the machine-readable error code
// on the wire; never changes once released.
std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  // OK.
  Status() noexcept = default;
  Status(StatusCode code, std::string_view message);

  Status(const Status& other);
  Status& operator=(const Status& other);
  Status(Status&& other) noexcept = default;
  Status& operator=(Status&& other) noexcept = default;
  ~Status() = default;

  static Status OK() { return Status(); }
  static Status NotFound(std::string_view msg) { return {StatusCode::kNotFound, msg}; }
  static Status AlreadyExists(std::string_view msg) { return {StatusCode::kAlreadyExists, msg}; }
  static Status InvalidArgument(std::string_view msg) {
    return {StatusCode::kInvalidArgument, msg};
  }
  static Status PermissionDenied(std::string_view msg) {
    return {StatusCode::kPermissionDenied, msg};
  }
  // A definite refusal of a position-guarded write: `expected` is the position the caller
  // asked for, `actual` the position the store holds next (public, 1-based offsets).
  static Status Conflict(std::string_view msg, uint64_t expected, uint64_t actual);
  static Status OutcomeUnknown(std::string_view msg) { return {StatusCode::kOutcomeUnknown, msg}; }
  static Status FailedPrecondition(std::string_view msg) {
    return {StatusCode::kFailedPrecondition, msg};
  }
  static Status OutOfRange(std::string_view msg) { return {StatusCode::kOutOfRange, msg}; }
  static Status Corruption(std::string_view msg) { return {StatusCode::kCorruption, msg}; }
  // kCorruption for stored records that cannot be read: offsets [first, end) of one stream
  // (1-based record offsets). A read from `end` on goes past them.
  static Status Unreadable(std::string_view msg, uint64_t first, uint64_t end);
  static Status IOError(std::string_view msg) { return {StatusCode::kIOError, msg}; }
  static Status ResourceExhausted(std::string_view msg) {
    return {StatusCode::kResourceExhausted, msg};
  }
  // kResourceExhausted because the disk holding the data is full (ENOSPC, EDQUOT): a definite
  // refusal that a retry may pass once space is freed. no_space() is set.
  static Status NoSpace(std::string_view msg);
  static Status Unavailable(std::string_view msg) { return {StatusCode::kUnavailable, msg}; }
  static Status Internal(std::string_view msg) { return {StatusCode::kInternal, msg}; }
  static Status Unauthenticated(std::string_view msg) {
    return {StatusCode::kUnauthenticated, msg};
  }

  bool ok() const noexcept { return rep_ == nullptr; }
  StatusCode code() const noexcept { return rep_ ? rep_->code : StatusCode::kOk; }
  // The human sentence; empty when OK.
  std::string_view message() const noexcept;

  // For kConflict: the expected and actual positions. Empty for every other code.
  std::optional<uint64_t> conflict_expected() const noexcept;
  std::optional<uint64_t> conflict_actual() const noexcept;
  // For a Status made by Unreadable(): the offsets [first, end) that cannot be read.
  std::optional<std::pair<uint64_t, uint64_t>> unreadable_range() const noexcept;
  // True for a Status made by NoSpace (kept through copies and Annotate).
  bool no_space() const noexcept { return rep_ != nullptr && rep_->no_space; }

  // "not_found: stream 'orders' does not exist in tenant:acme", or "ok".
  std::string ToString() const;

  // A copy whose message is prefixed with `context: `. The code and details are kept.
  Status Annotate(std::string_view context) const;
  // A copy whose message is `message`. The code and details are kept.
  Status WithMessage(std::string_view message) const;

  friend bool operator==(const Status& a, const Status& b) {
    return a.code() == b.code() && a.message() == b.message();
  }

 private:
  struct Rep {
    StatusCode code;
    std::string message;
    std::optional<uint64_t> expected;
    std::optional<uint64_t> actual;
    bool no_space = false;
  };
  std::unique_ptr<Rep> rep_;
};

// Holds either a T or a non-OK Status. Accessing value() of a failed Result aborts the process
// with the status message (a programming error, checked in release builds too).
template <typename T>
class [[nodiscard]] Result {
 public:
  // NOLINTNEXTLINE(google-explicit-constructor): implicit by design, like absl::StatusOr.
  Result(T value) : state_(std::in_place_index<1>, std::move(value)) {}
  // NOLINTNEXTLINE(google-explicit-constructor)
  Result(Status status) : state_(std::in_place_index<0>, std::move(status)) {
    if (std::get<0>(state_).ok()) {
      state_.template emplace<0>(StatusCode::kInternal, "Result constructed from an OK Status");
    }
  }

  bool ok() const noexcept { return state_.index() == 1; }
  const Status& status() const& noexcept {
    static const Status kOkStatus;
    return ok() ? kOkStatus : std::get<0>(state_);
  }
  Status status() && { return ok() ? Status() : std::move(std::get<0>(state_)); }

  const T& value() const& {
    CheckOk();
    return std::get<1>(state_);
  }
  T& value() & {
    CheckOk();
    return std::get<1>(state_);
  }
  T&& value() && {
    CheckOk();
    return std::move(std::get<1>(state_));
  }
  template <typename U>
  T value_or(U&& fallback) const& {
    return ok() ? std::get<1>(state_) : static_cast<T>(std::forward<U>(fallback));
  }

  const T& operator*() const& { return value(); }
  T& operator*() & { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  const T* operator->() const { return &value(); }
  T* operator->() { return &value(); }

 private:
  void CheckOk() const;
  std::variant<Status, T> state_;
};

namespace internal {
[[noreturn]] void DieOnBadResultAccess(const Status& status);
}  // namespace internal

template <typename T>
void Result<T>::CheckOk() const {
  if (!ok()) internal::DieOnBadResultAccess(std::get<0>(state_));
}

}  // namespace runnel

#define RUNNEL_STATUS_CONCAT_INNER_(a, b) a##b
#define RUNNEL_STATUS_CONCAT_(a, b) RUNNEL_STATUS_CONCAT_INNER_(a, b)

// Returns the Status from the enclosing function when `expr` is not OK.
#define RUNNEL_RETURN_IF_ERROR(expr)                         \
  do {                                                       \
    ::runnel::Status runnel_status_tmp_ = (expr);            \
    if (!runnel_status_tmp_.ok()) return runnel_status_tmp_; \
  } while (false)

// `RUNNEL_ASSIGN_OR_RETURN(auto x, Foo());` declares x from a Result, or returns its Status.
#define RUNNEL_ASSIGN_OR_RETURN(lhs, expr) \
  RUNNEL_ASSIGN_OR_RETURN_IMPL_(RUNNEL_STATUS_CONCAT_(runnel_result_, __LINE__), lhs, expr)
#define RUNNEL_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.ok()) return std::move(tmp).status();      \
  lhs = std::move(tmp).value()

#endif  // RUNNEL_STATUS_H_
