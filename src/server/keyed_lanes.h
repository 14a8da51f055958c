// KeyedLanes: per-key FIFO turns for coroutines. A coroutine that enters a key's lane waits
// until every coroutine that entered it earlier has left, then holds the lane until its Turn is
// destroyed; waiters resume in the order they entered, each on its own executor (through
// server/await_call.h). Keys with nobody in their lane cost nothing.
//
// The stream service serialises the writes to one stream that validate against state they then
// change (PUT, DELETE, PATCH, and POSTs with Stream-Seq, Stream-Closed or producer headers) in
// the lane of that stream (PROTOCOL.md 5.2.1 "Concurrency Requirements").
//
// Limits: a lane's queue is bounded by its callers (the HTTP server has at most one request in
// flight per connection, and at most max_connections connections).
//
// Thread-safety: Enter may be called from any thread concurrently; a Turn may be destroyed on
// any thread. Every Turn must be destroyed before the KeyedLanes.
#ifndef RUNNEL_SERVER_KEYED_LANES_H_
#define RUNNEL_SERVER_KEYED_LANES_H_

#include <deque>
#include <functional>
#include <string>
#include <unordered_map>
#include <utility>

#include "base/mutex.h"
#include "server/await_call.h"

namespace runnel::server {

class KeyedLanes {
 public:
  // The caller's hold on a lane; leaving it (destruction) lets the next waiter in.
  class Turn {
   public:
    Turn() = default;
    Turn(KeyedLanes* lanes, std::string key) : lanes_(lanes), key_(std::move(key)) {}
    Turn(Turn&& other) noexcept
        : lanes_(std::exchange(other.lanes_, nullptr)), key_(std::move(other.key_)) {}
    Turn& operator=(Turn&& other) = delete;
    Turn(const Turn&) = delete;
    Turn& operator=(const Turn&) = delete;
    ~Turn() {
      if (lanes_ != nullptr) lanes_->Leave(key_);
    }

   private:
    KeyedLanes* lanes_ = nullptr;
    std::string key_;
  };

  KeyedLanes() = default;
  KeyedLanes(const KeyedLanes&) = delete;
  KeyedLanes& operator=(const KeyedLanes&) = delete;

  // Waits for the caller's turn in the lane of `key` (at once when the lane is empty).
  net::awaitable<Turn> Enter(std::string key);

 private:
  // Takes the lane of *key when it is empty.
  bool TryEnter(const std::string& key);
  // Queues the caller behind the lane's holder and resumes it when its turn comes (at once when
  // the lane emptied since TryEnter). Not a coroutine: see server/await_call.h.
  auto WaitTurn(const std::string* key) {
    return AwaitCallback<bool>(
        [this, key](std::function<void(bool)> resume) { Queue(*key, std::move(resume)); },
        Resume::kPost);
  }
  void Queue(const std::string& key, std::function<void(bool)> resume);
  void Leave(const std::string& key);

  Mutex mu_;
  // Per busy key: the holder first (its entry is empty), then the waiters in order.
  std::unordered_map<std::string, std::deque<std::function<void(bool)>>> lanes_
      RUNNEL_GUARDED_BY(mu_);
};

}  // namespace runnel::server

#endif  // RUNNEL_SERVER_KEYED_LANES_H_
