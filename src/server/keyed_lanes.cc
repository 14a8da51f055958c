#include "server/keyed_lanes.h"

namespace runnel::server {

net::awaitable<KeyedLanes::Turn> KeyedLanes::Enter(std::string key) {
  if (!TryEnter(key)) co_await WaitTurn(&key);
  co_return Turn(this, std::move(key));
}

bool KeyedLanes::TryEnter(const std::string& key) {
  MutexLock lock(mu_);
  auto [it, inserted] = lanes_.try_emplace(key);
  if (!inserted) return false;
  it->second.emplace_back();  // the holder
  return true;
}

void KeyedLanes::Queue(const std::string& key, std::function<void(bool)> resume) {
  {
    MutexLock lock(mu_);
    auto [it, inserted] = lanes_.try_emplace(key);
    if (!inserted) {
      it->second.push_back(std::move(resume));
      return;
    }
    it->second.emplace_back();  // the lane emptied since TryEnter: the caller holds it now
  }
  resume(true);
}

void KeyedLanes::Leave(const std::string& key) {
  std::function<void(bool)> next;
  {
    MutexLock lock(mu_);
    auto it = lanes_.find(key);
    it->second.pop_front();
    if (it->second.empty()) {
      lanes_.erase(it);
      return;
    }
    // The next waiter becomes the holder; its entry stays, emptied.
    next = std::exchange(it->second.front(), nullptr);
  }
  next(true);
}

}  // namespace runnel::server
