// RunAwaitable: a server coroutine (an Asio awaitable, e.g. StreamService::HandleWrite) run to
// completion on the calling thread, for tests. Its own io_context runs until the awaitable
// completes, with a work guard held meanwhile: a store callback from another thread (a log
// store's writer) resumes the coroutine there.
#ifndef RUNNEL_TESTS_SUPPORT_RUN_AWAITABLE_H_
#define RUNNEL_TESTS_SUPPORT_RUN_AWAITABLE_H_

#include <utility>  // first: Boost 1.74's awaitable.hpp needs std::exchange declared.

#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <exception>
#include <optional>

namespace runnel::testing {

template <typename T>
T RunAwaitable(boost::asio::awaitable<T> awaitable) {
  boost::asio::io_context ioc(1);
  auto guard = boost::asio::make_work_guard(ioc);
  std::optional<T> result;
  std::exception_ptr error;
  boost::asio::co_spawn(ioc, std::move(awaitable),
                        [&result, &error, &guard](std::exception_ptr e, T value) {
                          error = e;
                          if (!e) result.emplace(std::move(value));
                          guard.reset();
                        });
  ioc.run();
  if (error) std::rethrow_exception(error);
  return std::move(*result);
}

}  // namespace runnel::testing

#endif  // RUNNEL_TESTS_SUPPORT_RUN_AWAITABLE_H_
