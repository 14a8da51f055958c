#include "runnel/clock.h"

#include <chrono>

namespace runnel {
namespace {

class SystemClock final : public Clock {
 public:
  uint64_t NowMs() override {
    return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                     std::chrono::system_clock::now().time_since_epoch())
                                     .count());
  }
};

}  // namespace

Clock* Clock::Real() {
  static SystemClock* clock = new SystemClock();
  return clock;
}

}  // namespace runnel
