// The group-commit wait shared by the stores' writers: before taking the next group, a writer
// may wait briefly for the appenders it just acknowledged to queue again, so they share one
// commit instead of splitting into two alternating half-size groups.
#ifndef RUNNEL_STORE_GROUP_WAIT_H_
#define RUNNEL_STORE_GROUP_WAIT_H_

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <type_traits>

namespace runnel::store {

// With `lock` held on the queue's mutex, waits on `cv` until `queued()` reaches `target` or
// `stop()` holds, for at most `bound`, and ends early once `gap` passes without the queue
// growing (the rest are slow, or gone). `*published_target` is `target` while waiting and 0
// after: producers notify `cv` when the queue size reaches it. `lock` is a
// std::unique_lock<std::mutex> or a runnel::MutexLock (base/mutex.h).
template <typename Lock, typename Queued, typename Stop>
void WaitForFullerGroup(std::condition_variable& cv, Lock& lock, size_t target,
                        std::chrono::microseconds bound, std::chrono::microseconds gap,
                        size_t* published_target, Queued queued, Stop stop) {
  using std::chrono::steady_clock;
  const steady_clock::time_point deadline = steady_clock::now() + bound;
  gap = std::max(gap, std::chrono::microseconds(1));
  *published_target = target;
  for (size_t seen = queued();;) {
    const steady_clock::time_point until = std::min(deadline, steady_clock::now() + gap);
    bool timed_out = false;
    while (queued() < target && !stop() && !timed_out) {
      if constexpr (std::is_same_v<Lock, std::unique_lock<std::mutex>>) {
        timed_out = cv.wait_until(lock, until) == std::cv_status::timeout;
      } else {
        timed_out = lock.WaitUntil(cv, until) == std::cv_status::timeout;
      }
    }
    if (queued() >= target || stop()) break;
    if (steady_clock::now() >= deadline || queued() == seen) break;
    seen = queued();
  }
  *published_target = 0;
}

}  // namespace runnel::store

#endif  // RUNNEL_STORE_GROUP_WAIT_H_
