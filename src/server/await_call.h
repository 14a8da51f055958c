// Awaiting from the server's coroutines (Boost.Asio C++20 coroutines): the one adapter that turns
// an operation reporting to a callback (a store append, a turn in a lane, a job on the blocking
// pool) into an awaitable, and the one way a coroutine runs a blocking call on the blocking pool.
//
// The awaiting coroutine resumes on its own executor, never on the thread that ran the
// callback (a store's writer thread, a pool thread). The adapter keeps no work guard on that
// executor: its event loop must stay running until the callback comes (the HTTP server's io
// contexts hold work guards; RunAwaitable in tests/support holds one).
//
// GCC 12 mishandles lambda captures of coroutine parameters and temporaries that live across a
// co_await: the functions here that build lambdas are deliberately not coroutines, and take
// pointers to objects the awaiting coroutine keeps alive.
#ifndef RUNNEL_SERVER_AWAIT_CALL_H_
#define RUNNEL_SERVER_AWAIT_CALL_H_

#include <utility>  // first: Boost 1.74's awaitable.hpp needs std::exchange declared.

#include <atomic>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <functional>
#include <memory>

// GCC reports Asio's coroutine frames (a class-specific operator new, a sized operator delete)
// as -Wmismatched-new-delete in some out-of-line coroutines once it inlines both: a known false
// positive (GCC PR middle-end/109224); the pair is well-formed. Every file with server
// coroutines includes this header.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

namespace runnel::server {

namespace net = boost::asio;

// Runs a job on a pool of threads that may block (the HTTP server's blocking pool, `store-N`).
using BlockingExecutor = std::function<void(std::function<void()>)>;

// How a callback that arrives after its operation started resumes the awaiting coroutine.
enum class Resume {
  // Right there when the callback runs on the coroutine's own event-loop thread, else posted.
  kDispatch,
  // Always posted: for callbacks made while their caller still holds something the resumed
  // coroutine may want (a lane being handed on), so it resumes after the caller is done.
  kPost,
};

// Starts an operation that reports a T to a callback (exactly once, on any thread) and resumes
// the awaiting coroutine with it. A callback made while `start` is still running is always
// posted, so the coroutine never resumes inside its own initiation.
template <typename T>
struct CallbackInitiation {
  std::function<void(std::function<void(T)>)> start;
  Resume resume = Resume::kDispatch;
  // The awaiting coroutine's handler and whether `start` is still running, in one allocation
  // shared by the callback and the resumption it posts.
  template <typename Handler>
  struct Pending {
    explicit Pending(Handler h) : handler(std::move(h)) {}
    Handler handler;
    std::atomic<bool> starting{true};
  };
  template <typename Handler>
  void operator()(Handler handler) {
    auto ex = net::get_associated_executor(handler);
    auto pending = std::make_shared<Pending<Handler>>(std::move(handler));
    start([pending, ex, post = resume == Resume::kPost](T value) {
      const bool starting = pending->starting.load(std::memory_order_acquire);
      auto resumption = [pending, value = std::move(value)]() mutable {
        pending->handler(std::move(value));
      };
      if (starting || post) {
        net::post(ex, std::move(resumption));
      } else {
        net::dispatch(ex, std::move(resumption));
      }
    });
    pending->starting.store(false, std::memory_order_release);
  }
};

// The awaitable for an operation started by `start` (see CallbackInitiation).
template <typename T>
auto AwaitCallback(std::function<void(std::function<void(T)>)> start,
                   Resume resume = Resume::kDispatch) {
  return net::async_initiate<decltype(net::use_awaitable), void(T)>(
      CallbackInitiation<T>{std::move(start), resume}, net::use_awaitable);
}

// Runs *fn on *pool and resumes the awaiting coroutine with its result. Both must outlive the
// wait (they belong to the awaiting coroutine's frame).
template <typename T>
auto AwaitOnPool(const BlockingExecutor* pool, const std::function<T()>* fn) {
  return AwaitCallback<T>([pool, fn](std::function<void(T)> done) {
    (*pool)([fn, done = std::move(done)] { done((*fn)()); });
  });
}

// A blocking call from a coroutine: `fn` on `pool`, or right here when there is no pool (tests,
// and callers that were told their store calls do not block).
template <typename T>
net::awaitable<T> OnPool(const BlockingExecutor& pool, const std::function<T()>& fn) {
  if (!pool) co_return fn();
  co_return co_await AwaitOnPool<T>(&pool, &fn);
}

}  // namespace runnel::server

#endif  // RUNNEL_SERVER_AWAIT_CALL_H_
