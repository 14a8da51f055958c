#include "server/accept_backoff.h"

#include <algorithm>

namespace runnel::server {

AcceptBackoff::Decision AcceptBackoff::Failed(Clock::time_point now) {
  Decision decision{delay_, std::nullopt};
  delay_ = std::min(delay_ * 2, kMaxDelay);
  if (!last_report_ || now - *last_report_ >= kReportEvery) {
    decision.report_with_suppressed = suppressed_;
    suppressed_ = 0;
    last_report_ = now;
  } else {
    ++suppressed_;
  }
  return decision;
}

}  // namespace runnel::server
