// Retrying a compare-and-set that lost to a concurrent writer.
//
// A read-modify-write of a stream's catalog entry (its attributes, retention or tag) reads the
// entry, computes the new one and writes it on the condition that what it read is still
// stored. Another writer sharing the store (a thread of this process, or another node on
// PostgreSQL) may change the entry in between; the store then refuses with kConflict and
// nothing is written, so the whole step is safe to run again over a fresh read.
//
// Thread-safety: pure functions.
#ifndef RUNNEL_BASE_RETRY_H_
#define RUNNEL_BASE_RETRY_H_

#include "runnel/status.h"

namespace runnel {

// How often such a step is tried before its last kConflict is returned to the caller. Each
// lost attempt means another writer's change committed, so the system as a whole progresses;
// the bound only keeps one caller from spinning behind a writer that never pauses.
inline constexpr int kMaxCompareAndSetAttempts = 8;

namespace internal {
inline StatusCode CodeOf(const Status& s) {
  return s.code();
}
template <typename T>
StatusCode CodeOf(const Result<T>& r) {
  return r.status().code();
}
}  // namespace internal

// Runs `step` (returning Status or Result<T>, reading afresh each time) until it ends in
// anything but kConflict, at most kMaxCompareAndSetAttempts times, and returns its last answer.
template <typename Step>
auto RetryOnConflict(Step&& step) -> decltype(step()) {
  for (int attempt = 1;; ++attempt) {
    auto answer = step();
    if (internal::CodeOf(answer) != StatusCode::kConflict || attempt == kMaxCompareAndSetAttempts) {
      return answer;
    }
  }
}

}  // namespace runnel

#endif  // RUNNEL_BASE_RETRY_H_
