// KeyedLanes: the per-stream turns of the stream service's validating writes. One holder per
// key at a time, waiters admitted in the order they entered, other keys never held up, and a
// waiter resumed on its own executor whichever thread let it in.
#include "server/keyed_lanes.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace runnel::server {
namespace {

struct Log {
  std::vector<std::string> events;
  // Holders of the lane of key "s" at once, now and at most.
  int holders = 0;
  int most_holders = 0;
};

// Enters `key`'s lane, notes it, holds the lane until *gate is cancelled (when given), leaves.
net::awaitable<void> Writer(KeyedLanes* lanes, std::string name, std::string key, Log* log,
                            net::steady_timer* gate) {
  const bool counted = key == "s";
  KeyedLanes::Turn turn = co_await lanes->Enter(std::move(key));
  log->events.push_back("in " + name);
  if (counted) log->most_holders = std::max(log->most_holders, ++log->holders);
  if (gate != nullptr) {
    boost::system::error_code ec;
    co_await gate->async_wait(net::redirect_error(net::use_awaitable, ec));
  }
  if (counted) --log->holders;
  log->events.push_back("out " + name);
}

TEST(KeyedLanesTest, OneHolderPerKeyInEntryOrderAndOtherKeysPass) {
  net::io_context ioc(1);
  KeyedLanes lanes;
  Log log;
  net::steady_timer gate(ioc, std::chrono::steady_clock::time_point::max());
  net::co_spawn(ioc, Writer(&lanes, "a", "s", &log, &gate), net::detached);
  for (const char* name : {"b", "c", "d"}) {
    net::co_spawn(ioc, Writer(&lanes, name, "s", &log, nullptr), net::detached);
  }
  net::co_spawn(ioc, Writer(&lanes, "other", "t", &log, nullptr), net::detached);
  // Runs until every coroutine waits: "a" on the gate, b-d in the lane behind it.
  while (ioc.poll() > 0) {
  }
  EXPECT_EQ(log.events, (std::vector<std::string>{"in a", "in other", "out other"}));
  gate.cancel();
  ioc.run();
  EXPECT_EQ(log.events, (std::vector<std::string>{"in a", "in other", "out other", "out a", "in b",
                                                  "out b", "in c", "out c", "in d", "out d"}));
  EXPECT_EQ(log.most_holders, 1);
}

net::awaitable<void> HoldThenLeave(KeyedLanes* lanes, std::promise<void>* holding,
                                   std::future<void>* leave) {
  std::string key = "s";
  KeyedLanes::Turn turn = co_await lanes->Enter(std::move(key));
  holding->set_value();
  leave->wait();  // blocks this io thread: the other executor must resume the waiter
}

net::awaitable<void> WaitThenNote(KeyedLanes* lanes, std::promise<std::thread::id>* resumed_on) {
  std::string key = "s";
  KeyedLanes::Turn turn = co_await lanes->Enter(std::move(key));
  resumed_on->set_value(std::this_thread::get_id());
}

TEST(KeyedLanesTest, AWaiterResumesOnItsOwnExecutor) {
  KeyedLanes lanes;
  net::io_context holder_ioc(1);
  net::io_context waiter_ioc(1);
  auto waiter_work = net::make_work_guard(waiter_ioc);
  std::promise<void> holding;
  std::promise<void> leave;
  std::future<void> leave_signal = leave.get_future();
  std::promise<std::thread::id> resumed_on;
  net::co_spawn(holder_ioc, HoldThenLeave(&lanes, &holding, &leave_signal), net::detached);
  std::thread holder_thread([&] { holder_ioc.run(); });
  holding.get_future().wait();
  std::promise<std::thread::id> waiter_id;
  net::co_spawn(waiter_ioc, WaitThenNote(&lanes, &resumed_on), net::detached);
  std::thread waiter_thread([&] {
    waiter_id.set_value(std::this_thread::get_id());
    waiter_ioc.run();
  });
  auto resumed = resumed_on.get_future();
  // The waiter queued behind the holder and is not let in while the holder stays.
  EXPECT_EQ(resumed.wait_for(std::chrono::milliseconds(50)), std::future_status::timeout);
  leave.set_value();
  EXPECT_EQ(resumed.get(), waiter_id.get_future().get());
  waiter_work.reset();
  holder_thread.join();
  waiter_thread.join();
}

// Sets *flag when destroyed: shows a coroutine's frame went.
struct SetOnDestroy {
  bool* flag;
  ~SetOnDestroy() { *flag = true; }
};

net::awaitable<void> EnterAndKeep(KeyedLanes* lanes, std::optional<KeyedLanes::Turn>* kept) {
  std::string key = "s";
  kept->emplace(co_await lanes->Enter(std::move(key)));
}

net::awaitable<void> EnterAndNote(KeyedLanes* lanes, bool* entered, bool* frame_gone) {
  SetOnDestroy guard{frame_gone};
  std::string key = "s";
  KeyedLanes::Turn turn = co_await lanes->Enter(std::move(key));
  *entered = true;
}

// At shutdown a Turn can outlive the lanes (a coroutine frame destroyed with its event loop):
// the waiters go with the lanes, never let in, and the late Turn leaves without handing on.
TEST(KeyedLanesTest, ATurnMayOutliveTheLanesAndTheirWaitersGoWithThem) {
  net::io_context ioc(1);
  std::optional<KeyedLanes::Turn> kept;
  auto lanes = std::make_unique<KeyedLanes>();
  bool entered = false;
  bool frame_gone = false;
  net::co_spawn(ioc, EnterAndKeep(lanes.get(), &kept), net::detached);
  net::co_spawn(ioc, EnterAndNote(lanes.get(), &entered, &frame_gone), net::detached);
  while (ioc.poll() > 0) {
  }
  ASSERT_TRUE(kept.has_value());
  EXPECT_FALSE(entered);
  EXPECT_FALSE(frame_gone);
  lanes.reset();
  // Asio unwinds a dropped coroutine through its own executor.
  while (ioc.poll() > 0) {
  }
  EXPECT_TRUE(frame_gone);
  EXPECT_FALSE(entered);
  kept.reset();
  EXPECT_EQ(ioc.poll(), 0u);
  EXPECT_FALSE(entered);
}

}  // namespace
}  // namespace runnel::server
