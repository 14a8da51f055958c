// An injectable source of wall-clock time, so retention and timestamps are testable.
#ifndef RUNNEL_CLOCK_H_
#define RUNNEL_CLOCK_H_

#include <atomic>
#include <cstdint>

namespace runnel {

// Thread-safety: implementations must be safe to call from any thread.
class Clock {
 public:
  virtual ~Clock() = default;
  // Milliseconds since the Unix epoch.
  virtual uint64_t NowMs() = 0;

  // The system clock. Never null; lives for the whole process.
  static Clock* Real();
};

// A clock that moves only when told to. For tests and simulations.
class ManualClock final : public Clock {
 public:
  explicit ManualClock(uint64_t start_ms = 0) : now_ms_(start_ms) {}
  uint64_t NowMs() override { return now_ms_.load(std::memory_order_relaxed); }
  void Set(uint64_t ms) { now_ms_.store(ms, std::memory_order_relaxed); }
  void Advance(uint64_t ms) { now_ms_.fetch_add(ms, std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> now_ms_;
};

}  // namespace runnel

#endif  // RUNNEL_CLOCK_H_
