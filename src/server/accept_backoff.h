// Pacing and reporting of failed accept() calls in the server's accept loop.
//
// A failed accept (out of descriptors, out of memory) is retried after a delay that starts at
// kFirstDelay and doubles with each failure in a row up to kMaxDelay; a successful accept
// resets it. Failures are reported (logged) at most once per kReportEvery: the first failure
// is reported at once, later ones only when kReportEvery has passed since the last report,
// together with the number of failures not reported in between.
//
// Thread-safety: none; one accept loop owns an instance.
#ifndef RUNNEL_SERVER_ACCEPT_BACKOFF_H_
#define RUNNEL_SERVER_ACCEPT_BACKOFF_H_

#include <chrono>
#include <cstdint>
#include <optional>

namespace runnel::server {

class AcceptBackoff {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::milliseconds kFirstDelay{10};
  static constexpr std::chrono::milliseconds kMaxDelay{1000};
  static constexpr std::chrono::seconds kReportEvery{10};

  struct Decision {
    // How long to wait before accepting again.
    std::chrono::milliseconds delay;
    // Set when this failure is to be reported: the failures since the previous report that
    // were not reported.
    std::optional<uint64_t> report_with_suppressed;
  };

  // One failed accept at `now`.
  Decision Failed(Clock::time_point now);
  // One successful accept: the next failure waits kFirstDelay again.
  void Succeeded() { delay_ = kFirstDelay; }

 private:
  std::chrono::milliseconds delay_ = kFirstDelay;
  std::optional<Clock::time_point> last_report_;
  uint64_t suppressed_ = 0;
};

}  // namespace runnel::server

#endif  // RUNNEL_SERVER_ACCEPT_BACKOFF_H_
