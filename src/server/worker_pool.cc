#include "server/worker_pool.h"

#include <string>
#include <utility>

#include "base/thread_name.h"

namespace runnel::server {

WorkerPool::WorkerPool(size_t threads, std::string_view name) {
  if (threads == 0) threads = 1;
  for (size_t i = 0; i < threads; ++i) {
    threads_.emplace_back([this] {
      for (;;) {
        std::function<void()> job;
        {
          MutexLock lock(mu_);
          while (!stopping_ && queue_.empty()) lock.Wait(cv_);
          if (queue_.empty()) return;
          job = std::move(queue_.front());
          queue_.pop_front();
        }
        job();
      }
    });
    SetThreadName(threads_.back(), std::string(name) + "-" + std::to_string(i));
  }
}

WorkerPool::~WorkerPool() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void WorkerPool::Post(std::function<void()> job) {
  {
    MutexLock lock(mu_);
    queue_.push_back(std::move(job));
  }
  cv_.notify_one();
}

}  // namespace runnel::server
