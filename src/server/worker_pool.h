// WorkerPool: a fixed set of threads running queued jobs in order of submission, for work that
// blocks on the store (catalog writes that wait for their group commit, channel publishes, and on
// PostgreSQL any round trip) and so must never run on an io thread.
//
// Thread-safety: Submit may be called from any thread. The destructor finishes every queued job,
// then joins the threads; Submit after destruction began is a programming error.
#ifndef RUNNEL_SERVER_WORKER_POOL_H_
#define RUNNEL_SERVER_WORKER_POOL_H_

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace runnel::server {

class WorkerPool {
 public:
  // At least one thread.
  explicit WorkerPool(size_t threads);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  void Submit(std::function<void()> job);
  // An executor for options that take one (StreamServiceOptions::blocking_executor).
  std::function<void(std::function<void()>)> Executor() {
    return [this](std::function<void()> job) { Submit(std::move(job)); };
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;  // GUARDED_BY(mu_)
  bool stopping_ = false;                    // GUARDED_BY(mu_)
  std::vector<std::thread> threads_;
};

}  // namespace runnel::server

#endif  // RUNNEL_SERVER_WORKER_POOL_H_
