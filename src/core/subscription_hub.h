// Fan-out of wake-up hints from the store's tail listener to subscriptions (SEMANTICS N1-N4).
//
// Hints are level-triggered flags, not queued items: several appends before a wait coalesce into
// one hint, so a slow subscriber can never make memory grow. Subscribers are held weakly; a
// destroyed Subscription simply stops receiving hints.
//
// Thread-safety: all methods may be called from any thread.
#ifndef RUNNEL_CORE_SUBSCRIPTION_HUB_H_
#define RUNNEL_CORE_SUBSCRIPTION_HUB_H_

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "base/mutex.h"
#include "runnel/store.h"

namespace runnel::internal {

class Subscriber {
 public:
  explicit Subscriber(std::function<void()> on_hint) : on_hint_(std::move(on_hint)) {}

  // Sets the pending flag, wakes a waiter and calls on_hint (outside the lock).
  void Hint();
  bool WaitFor(std::chrono::milliseconds timeout);
  bool TryConsume();

 private:
  Mutex mu_;
  std::condition_variable cv_;
  bool pending_ RUNNEL_GUARDED_BY(mu_) = false;
  const std::function<void()> on_hint_;
};

class SubscriptionHub {
 public:
  void Add(StreamId stream, const std::shared_ptr<Subscriber>& subscriber);
  // Hints every live subscriber of `stream`, and only of `stream` (N4).
  void Notify(StreamId stream);
  // The streams that have at least one live subscriber (drops expired ones on the way).
  std::vector<StreamId> Watched();
  // Live subscribers across all streams (for metrics and tests).
  size_t LiveCount();

 private:
  Mutex mu_;
  std::unordered_map<StreamId, std::vector<std::weak_ptr<Subscriber>>> subs_ RUNNEL_GUARDED_BY(mu_);
};

}  // namespace runnel::internal

#endif  // RUNNEL_CORE_SUBSCRIPTION_HUB_H_
