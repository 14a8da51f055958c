// The server's one pool for blocking store calls: the group and channel services run their
// requests on the pool they are given, not on threads of their own.
#include "server/worker_pool.h"

#include <gtest/gtest.h>

#include <future>
#include <thread>

#include "runnel/registry.h"
#include "runnel/store.h"
#include "server/channel_service.h"
#include "server/group_service.h"
#include "server/http_types.h"
#include "server/stream_service.h"

namespace runnel::server {
namespace {

struct Answered {
  std::thread::id thread;
  int status = 0;
};

TEST(SharedWorkerPoolTest, GroupAndChannelRequestsRunOnTheGivenPool) {
  // Declared first, so destroyed last: every request below is answered before the services go.
  WorkerPool pool(1, "store");
  std::promise<std::thread::id> pool_thread;
  pool.Post([&] { pool_thread.set_value(std::this_thread::get_id()); });
  const std::thread::id pool_id = pool_thread.get_future().get();

  StreamService streams(StreamRegistry(NewMemoryStore()), {}, nullptr);
  ChannelService channels(streams.registry(), &pool);
  GroupService groups(&streams, &pool);

  HttpRequest describe;
  describe.method = "GET";
  describe.path = "/v1/channels/missing";
  std::promise<Answered> channel_answer;
  channels.Handle(ParseRoute(describe.path), describe, [&](HttpResponse r) {
    channel_answer.set_value({std::this_thread::get_id(), r.status});
  });

  HttpRequest list;
  list.method = "GET";
  list.path = "/v1/groups/stream/missing";
  std::promise<Answered> group_answer;
  groups.Handle(Principal::Platform(), list, [&](GroupAnswer a) {
    group_answer.set_value({std::this_thread::get_id(), a.response.status});
  });

  const Answered channel = channel_answer.get_future().get();
  const Answered group = group_answer.get_future().get();
  EXPECT_EQ(channel.thread, pool_id);
  EXPECT_EQ(channel.status, 404);
  EXPECT_EQ(group.thread, pool_id);
  EXPECT_EQ(group.status, 404);
  EXPECT_NE(pool_id, std::this_thread::get_id());
}

TEST(SharedWorkerPoolTest, AServiceWithoutAPoolRunsOnThreadsOfItsOwn) {
  StreamService streams(StreamRegistry(NewMemoryStore()), {}, nullptr);
  GroupService groups(&streams, size_t{1});
  HttpRequest list;
  list.method = "GET";
  list.path = "/v1/groups/stream/missing";
  std::promise<Answered> answer;
  groups.Handle(Principal::Platform(), list, [&](GroupAnswer a) {
    answer.set_value({std::this_thread::get_id(), a.response.status});
  });
  const Answered got = answer.get_future().get();
  EXPECT_NE(got.thread, std::this_thread::get_id());
  EXPECT_EQ(got.status, 404);
}

}  // namespace
}  // namespace runnel::server
