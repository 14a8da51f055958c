// The store contract's AppendGuard (include/runnel/store.h): every store hands the guard the
// stream as the append finds it inside its atomic step, after every append before it, and a
// refusal writes nothing. Run against every store, like store_contract_test.cc.
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "store/store_contract.h"

namespace runnel::testing {

namespace {

using ::runnel::testing::AppendSync;

// What a guard was shown, copied (the state's views live only during Admit).
struct Seen {
  uint64_t next_offset = 0;
  bool closed = false;
  std::string attributes;
  std::optional<std::pair<uint64_t, uint64_t>> producer;
};

// Records what the last Admit saw and answers through `decide`.
class RecordingGuard : public AppendGuard {
 public:
  using Decide = std::function<Status(const AppendState&, AppendRequest*)>;
  explicit RecordingGuard(Decide decide = nullptr) : decide_(std::move(decide)) {}

  Status Admit(const AppendState& state, AppendRequest* request) override {
    ++calls;
    seen = Seen{state.next_offset, state.closed, std::string(state.attributes), state.producer};
    return decide_ ? decide_(state, request) : Status::OK();
  }

  int calls = 0;
  Seen seen;

 private:
  Decide decide_;
};

AppendRequest OneRecord(StreamId id, std::string payload) {
  AppendRequest req;
  req.stream = id;
  req.now_ms = 1000;
  req.records.push_back(AppendRecord{std::nullopt, std::move(payload)});
  return req;
}

TEST_P(StoreContractTest, AGuardSeesTheStreamAsTheAppendFindsIt) {
  StreamInfo s = Create("s");
  AppendRequest first = OneRecord(s.id, "a");
  first.producer = ProducerState{"p", 1, 0, 0};
  first.attributes = "x";
  ASSERT_TRUE(AppendSync(*store_, std::move(first)).ok());

  // It sees the tail, the attributes and this producer's state, and may set the attributes the
  // append stores.
  RecordingGuard guard([](const AppendState&, AppendRequest* request) {
    request->attributes = "y";
    return Status::OK();
  });
  AppendRequest second = OneRecord(s.id, "b");
  second.producer = ProducerState{"p", 1, 1, 0};
  second.guard = &guard;
  auto appended = AppendSync(*store_, std::move(second));
  ASSERT_TRUE(appended.ok()) << appended.status().ToString();
  EXPECT_EQ(appended->first_offset, 2u);
  EXPECT_GE(guard.calls, 1);
  EXPECT_EQ(guard.seen.next_offset, 2u);
  EXPECT_FALSE(guard.seen.closed);
  EXPECT_EQ(guard.seen.attributes, "x");
  ASSERT_TRUE(guard.seen.producer.has_value());
  EXPECT_EQ(*guard.seen.producer, std::make_pair(uint64_t{1}, uint64_t{0}));
  EXPECT_EQ(store_->GetStreamById(s.id)->spec.attributes, "y");

  // A producer the stream has no state for is shown as none.
  RecordingGuard other;
  AppendRequest third = OneRecord(s.id, "c");
  third.producer = ProducerState{"q", 0, 0, 0};
  third.guard = &other;
  ASSERT_TRUE(AppendSync(*store_, std::move(third)).ok());
  EXPECT_FALSE(other.seen.producer.has_value());
  EXPECT_EQ(other.seen.next_offset, 3u);
}

TEST_P(StoreContractTest, AGuardsRefusalWritesNothing) {
  StreamInfo s = Create("s");
  AppendRequest first = OneRecord(s.id, "a");
  first.producer = ProducerState{"p", 1, 0, 0};
  ASSERT_TRUE(AppendSync(*store_, std::move(first)).ok());
  RecordingGuard guard([](const AppendState&, AppendRequest* request) {
    request->attributes = "never stored";
    return Status::PermissionDenied("refused by the rules");
  });
  AppendRequest refused = OneRecord(s.id, "b");
  refused.producer = ProducerState{"p", 1, 1, 0};
  refused.close = true;
  refused.guard = &guard;
  auto result = AppendSync(*store_, std::move(refused));
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(result.status().message(), "refused by the rules");
  StreamInfo after = *store_->GetStreamById(s.id);
  EXPECT_EQ(after.next_offset, 2u);
  EXPECT_FALSE(after.closed);
  EXPECT_EQ(after.spec.attributes, "");
  EXPECT_EQ((*store_->GetProducer(s.id, "p"))->seq, 0u);
  EXPECT_EQ(Offsets(s.id), (std::vector<uint64_t>{1}));
}

TEST_P(StoreContractTest, AGuardOnAClosedStreamSeesItClosedAndTheStoreStillRefuses) {
  StreamInfo s = Create("s");
  AppendRequest close = OneRecord(s.id, "last");
  close.close = true;
  ASSERT_TRUE(AppendSync(*store_, std::move(close)).ok());
  RecordingGuard guard;  // admits everything
  AppendRequest late = OneRecord(s.id, "late");
  late.guard = &guard;
  EXPECT_EQ(AppendSync(*store_, std::move(late)).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(guard.seen.closed);
  EXPECT_EQ(guard.seen.next_offset, 2u);
}

// Appends handed to the store back to back, without waiting (a store that commits them in one
// group decides each inside that group): each guard sees every append before it.
TEST_P(StoreContractTest, QueuedAppendsEachSeeTheOnesBeforeThem) {
  StreamInfo s = Create("s");
  constexpr int kAppends = 24;
  std::vector<std::unique_ptr<RecordingGuard>> guards;
  std::vector<std::future<Result<AppendResult>>> results;
  for (int i = 0; i < kAppends; ++i) {
    guards.push_back(
        std::make_unique<RecordingGuard>([i](const AppendState&, AppendRequest* request) {
          request->attributes = std::to_string(i);
          return Status::OK();
        }));
    AppendRequest req = OneRecord(s.id, "r" + std::to_string(i));
    req.producer = ProducerState{"p", 0, static_cast<uint64_t>(i), 0};
    req.guard = guards.back().get();
    auto done = std::make_shared<std::promise<Result<AppendResult>>>();
    results.push_back(done->get_future());
    store_->Append(std::move(req),
                   [done](Result<AppendResult> r) { done->set_value(std::move(r)); });
  }
  for (int i = 0; i < kAppends; ++i) {
    auto r = results[i].get();
    ASSERT_TRUE(r.ok()) << i << ": " << r.status().ToString();
    EXPECT_EQ(r->first_offset, static_cast<uint64_t>(i + 1));
    const Seen& seen = guards[i]->seen;
    EXPECT_EQ(seen.next_offset, static_cast<uint64_t>(i + 1)) << i;
    EXPECT_EQ(seen.attributes, i == 0 ? "" : std::to_string(i - 1)) << i;
    if (i == 0) {
      EXPECT_FALSE(seen.producer.has_value());
    } else {
      ASSERT_TRUE(seen.producer.has_value()) << i;
      EXPECT_EQ(seen.producer->second, static_cast<uint64_t>(i - 1)) << i;
    }
  }
  EXPECT_EQ(store_->GetStreamById(s.id)->spec.attributes, std::to_string(kAppends - 1));
}

}  // namespace

}  // namespace runnel::testing
