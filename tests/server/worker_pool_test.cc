// The server's one pool for blocking store calls: the group and channel services run their
// requests on the blocking pool they are given, not on threads of their own.
#include "server/worker_pool.h"

#include <gtest/gtest.h>

#include <future>
#include <thread>
#include <vector>

#include "base/mutex.h"
#include "runnel/registry.h"
#include "runnel/store.h"
#include "server/channel_service.h"
#include "server/group_service.h"
#include "server/http_types.h"
#include "server/stream_service.h"
#include "support/run_awaitable.h"

namespace runnel::server {
namespace {

TEST(SharedWorkerPoolTest, GroupAndChannelRequestsRunOnTheGivenPool) {
  // Declared first, so destroyed last: every request below is answered before the services go.
  WorkerPool pool(1, "store");
  std::promise<std::thread::id> pool_thread;
  pool.Post([&] { pool_thread.set_value(std::this_thread::get_id()); });
  const std::thread::id pool_id = pool_thread.get_future().get();
  // The pool as the services' blocking executor, noting the thread of each job it runs.
  Mutex ran_mu;
  std::vector<std::thread::id> ran_on;
  BlockingExecutor blocking = [&pool, &ran_mu, &ran_on](std::function<void()> job) {
    pool.Post([job = std::move(job), &ran_mu, &ran_on] {
      {
        MutexLock lock(ran_mu);
        ran_on.push_back(std::this_thread::get_id());
      }
      job();
    });
  };

  StreamService streams(StreamRegistry(NewMemoryStore()), {}, nullptr);
  ChannelService channels(streams.registry(), blocking);
  GroupService groups(&streams, blocking);

  HttpRequest describe;
  describe.method = "GET";
  describe.path = "/v1/channels/missing";
  const Route route = ParseRoute(describe.path);
  const HttpResponse channel = testing::RunAwaitable(channels.Handle(route, describe));

  HttpRequest list;
  list.method = "GET";
  list.path = "/v1/groups/stream/missing";
  const Principal platform = Principal::Platform();
  const GroupAnswer group = testing::RunAwaitable(groups.Handle(platform, list));

  EXPECT_EQ(channel.status, 404);
  EXPECT_EQ(group.response.status, 404);
  MutexLock lock(ran_mu);
  EXPECT_EQ(ran_on, (std::vector<std::thread::id>{pool_id, pool_id}));
  EXPECT_NE(pool_id, std::this_thread::get_id());
}

}  // namespace
}  // namespace runnel::server
