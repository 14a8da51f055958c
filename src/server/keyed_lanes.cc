#include "server/keyed_lanes.h"

namespace runnel::server {

KeyedLanes::~KeyedLanes() {
  std::unordered_map<std::string, std::deque<std::function<void(bool)>>> dropped;
  {
    MutexLock lock(state_->mu);
    state_->closed = true;
    dropped.swap(state_->lanes);
  }
  // `dropped` goes here, outside the lock: destroying a waiter destroys its coroutine's frames.
}

net::awaitable<KeyedLanes::Turn> KeyedLanes::Enter(std::string key) {
  if (!TryEnter(key)) co_await WaitTurn(&key);
  co_return Turn(state_, std::move(key));
}

bool KeyedLanes::TryEnter(const std::string& key) {
  MutexLock lock(state_->mu);
  auto [it, inserted] = state_->lanes.try_emplace(key);
  if (!inserted) return false;
  it->second.emplace_back();  // the holder
  return true;
}

void KeyedLanes::Queue(const std::string& key, std::function<void(bool)> resume) {
  {
    MutexLock lock(state_->mu);
    auto [it, inserted] = state_->lanes.try_emplace(key);
    if (!inserted) {
      it->second.push_back(std::move(resume));
      return;
    }
    it->second.emplace_back();  // the lane emptied since TryEnter: the caller holds it now
  }
  resume(true);
}

void KeyedLanes::Leave(State& state, const std::string& key) {
  std::function<void(bool)> next;
  {
    MutexLock lock(state.mu);
    if (state.closed) return;
    auto it = state.lanes.find(key);
    it->second.pop_front();
    if (it->second.empty()) {
      state.lanes.erase(it);
      return;
    }
    // The next waiter becomes the holder; its entry stays, emptied.
    next = std::exchange(it->second.front(), nullptr);
  }
  next(true);
}

}  // namespace runnel::server
