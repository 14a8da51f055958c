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
// any thread, also after the KeyedLanes (a coroutine frame destroyed with its event loop at
// shutdown): the lanes' state lives as long as any Turn, and once the KeyedLanes is gone a Turn
// leaves without letting anyone in. Destroying the KeyedLanes drops the coroutines still
// waiting in its lanes (their frames, never resumed).
#ifndef RUNNEL_SERVER_KEYED_LANES_H_
#define RUNNEL_SERVER_KEYED_LANES_H_

#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>

#include "base/mutex.h"
#include "server/await_call.h"

namespace runnel::server {

class KeyedLanes {
  struct State;

 public:
  // The caller's hold on a lane; leaving it (destruction) lets the next waiter in.
  class Turn {
   public:
    Turn() = default;
    Turn(std::shared_ptr<State> state, std::string key)
        : state_(std::move(state)), key_(std::move(key)) {}
    Turn(Turn&& other) noexcept = default;
    Turn& operator=(Turn&& other) = delete;
    Turn(const Turn&) = delete;
    Turn& operator=(const Turn&) = delete;
    ~Turn() {
      if (state_ != nullptr) Leave(*state_, key_);
    }

   private:
    std::shared_ptr<State> state_;
    std::string key_;
  };

  KeyedLanes() : state_(std::make_shared<State>()) {}
  ~KeyedLanes();
  KeyedLanes(const KeyedLanes&) = delete;
  KeyedLanes& operator=(const KeyedLanes&) = delete;

  // Waits for the caller's turn in the lane of `key` (at once when the lane is empty).
  net::awaitable<Turn> Enter(std::string key);

 private:
  struct State {
    Mutex mu;
    // Set when the KeyedLanes is destroyed: Turns still held leave without handing on.
    bool closed RUNNEL_GUARDED_BY(mu) = false;
    // Per busy key: the holder first (its entry is empty), then the waiters in order.
    std::unordered_map<std::string, std::deque<std::function<void(bool)>>> lanes
        RUNNEL_GUARDED_BY(mu);
  };

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
  static void Leave(State& state, const std::string& key);

  const std::shared_ptr<State> state_;
};

}  // namespace runnel::server

#endif  // RUNNEL_SERVER_KEYED_LANES_H_
