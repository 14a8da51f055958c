// WorkerPool: a fixed set of threads that run jobs which may block on the store, so the io
// threads never do. The HTTP server has one, its blocking pool (`store-N`): catalog writes,
// offloaded stream calls, channel and group requests, each awaited by the request's coroutine
// through server/await_call.h's OnPool.
//
// Limits: the queue is not capped by the pool itself; each caller bounds it (the HTTP server
// has at most one request in flight per connection, and at most max_connections connections).
//
// Lifecycle: the destructor runs every job already queued, then joins the threads. Post after
// destruction has begun is a programming error.
//
// Thread-safety: Post may be called from any thread; jobs run on one of the pool's threads.
#ifndef RUNNEL_SERVER_WORKER_POOL_H_
#define RUNNEL_SERVER_WORKER_POOL_H_

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <string_view>
#include <thread>
#include <vector>

#include "base/mutex.h"

namespace runnel::server {

class WorkerPool {
 public:
  // Starts `threads` threads (at least one), named "<name>-<index>" (see base/thread_name.h).
  WorkerPool(size_t threads, std::string_view name);
  // Finishes queued jobs, then joins the threads.
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Queues `job` to run once on a pool thread.
  void Post(std::function<void()> job);

 private:
  Mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_ RUNNEL_GUARDED_BY(mu_);
  bool stopping_ RUNNEL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace runnel::server

#endif  // RUNNEL_SERVER_WORKER_POOL_H_
