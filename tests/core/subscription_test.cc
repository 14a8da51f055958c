// The hint hub under the registry's subscriptions (SEMANTICS N2, N4).
#include "core/subscription_hub.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>

namespace runnel::internal {
namespace {

using std::chrono::milliseconds;

TEST(SubscriptionHubTest, NotifyReachesOnlyTheStreamsSubscribers) {
  SubscriptionHub hub;
  auto a = std::make_shared<Subscriber>(nullptr);
  auto b = std::make_shared<Subscriber>(nullptr);
  hub.Add(1, a);
  hub.Add(2, b);
  hub.Notify(1);
  EXPECT_TRUE(a->TryConsume());
  EXPECT_FALSE(b->TryConsume());
  hub.Notify(3);  // nobody listens: no effect
  EXPECT_FALSE(a->TryConsume());
}

TEST(SubscriptionHubTest, HintsCoalesceIntoOnePendingFlag) {
  SubscriptionHub hub;
  auto a = std::make_shared<Subscriber>(nullptr);
  hub.Add(1, a);
  for (int i = 0; i < 1000; ++i) hub.Notify(1);
  EXPECT_TRUE(a->WaitFor(milliseconds(0)));
  EXPECT_FALSE(a->WaitFor(milliseconds(1)));
}

TEST(SubscriptionHubTest, ExpiredSubscribersArePrunedAndNeverCalled) {
  SubscriptionHub hub;
  std::atomic<int> calls{0};
  {
    auto gone = std::make_shared<Subscriber>([&] { calls.fetch_add(1); });
    hub.Add(1, gone);
    EXPECT_EQ(hub.LiveCount(), 1u);
  }
  EXPECT_EQ(hub.LiveCount(), 0u);
  hub.Notify(1);
  EXPECT_EQ(calls.load(), 0);
}

TEST(SubscriptionHubTest, CallbacksRunForEveryHint) {
  SubscriptionHub hub;
  std::atomic<int> calls{0};
  auto s = std::make_shared<Subscriber>([&] { calls.fetch_add(1); });
  hub.Add(7, s);
  hub.Notify(7);
  hub.Notify(7);
  EXPECT_EQ(calls.load(), 2);
}

}  // namespace
}  // namespace runnel::internal
