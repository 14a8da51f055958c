#include "core/subscription_hub.h"

#include <algorithm>

namespace runnel::internal {

void Subscriber::Hint() {
  {
    MutexLock lock(mu_);
    pending_ = true;
  }
  cv_.notify_all();
  if (on_hint_) on_hint_();
}

bool Subscriber::WaitFor(std::chrono::milliseconds timeout) {
  MutexLock lock(mu_);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!pending_) {
    if (lock.WaitUntil(cv_, deadline) == std::cv_status::timeout) break;
  }
  if (!pending_) return false;
  pending_ = false;
  return true;
}

bool Subscriber::TryConsume() {
  MutexLock lock(mu_);
  const bool had = pending_;
  pending_ = false;
  return had;
}

void SubscriptionHub::Add(StreamId stream, const std::shared_ptr<Subscriber>& subscriber) {
  MutexLock lock(mu_);
  auto& list = subs_[stream];
  std::erase_if(list, [](const std::weak_ptr<Subscriber>& w) { return w.expired(); });
  list.push_back(subscriber);
}

void SubscriptionHub::Notify(StreamId stream) {
  std::vector<std::shared_ptr<Subscriber>> live;
  {
    MutexLock lock(mu_);
    auto it = subs_.find(stream);
    if (it == subs_.end()) return;
    auto& list = it->second;
    live.reserve(list.size());
    std::erase_if(list, [&live](const std::weak_ptr<Subscriber>& w) {
      auto s = w.lock();
      if (!s) return true;
      live.push_back(std::move(s));
      return false;
    });
    if (list.empty()) subs_.erase(it);
  }
  for (const auto& s : live) s->Hint();
}

std::vector<StreamId> SubscriptionHub::Watched() {
  std::vector<StreamId> out;
  MutexLock lock(mu_);
  for (auto it = subs_.begin(); it != subs_.end();) {
    std::erase_if(it->second, [](const std::weak_ptr<Subscriber>& w) { return w.expired(); });
    if (it->second.empty()) {
      it = subs_.erase(it);
    } else {
      out.push_back(it->first);
      ++it;
    }
  }
  return out;
}

size_t SubscriptionHub::LiveCount() {
  MutexLock lock(mu_);
  size_t n = 0;
  for (const auto& [id, list] : subs_) {
    n += static_cast<size_t>(
        std::count_if(list.begin(), list.end(), [](const auto& w) { return !w.expired(); }));
  }
  return n;
}

}  // namespace runnel::internal
