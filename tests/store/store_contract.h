// Fixtures of the store contract suites. Each store's test binary instantiates them:
//
//   INSTANTIATE_TEST_SUITE_P(Log, StoreContractTest, ::testing::Values(LogStoreParam()),
//                            runnel::testing::StoreParamName);
//   INSTANTIATE_TEST_SUITE_P(Log, PersistentStoreTest, ...);  // persistent stores only
#ifndef RUNNEL_TESTS_STORE_STORE_CONTRACT_H_
#define RUNNEL_TESTS_STORE_STORE_CONTRACT_H_

#include <condition_variable>
#include <limits>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "support/store_harness.h"

namespace runnel::testing {

// Appends through the callback interface and waits for the outcome.
inline Result<AppendResult> AppendSync(Store& store, AppendRequest request) {
  std::optional<Result<AppendResult>> out;
  std::mutex mu;
  std::condition_variable cv;
  store.Append(std::move(request), [&](Result<AppendResult> r) {
    std::lock_guard lock(mu);
    out.emplace(std::move(r));
    cv.notify_all();
  });
  std::unique_lock lock(mu);
  cv.wait(lock, [&] { return out.has_value(); });
  return std::move(*out);
}

class StoreContractTest : public StoreTestBase {
 protected:
  StreamInfo Create(std::string name, StreamRetention retention = {}, std::string ns = "global",
                    uint64_t first_offset = 1) {
    StreamSpec spec;
    spec.ns = std::move(ns);
    spec.name = std::move(name);
    spec.retention = retention;
    spec.first_offset = first_offset;
    auto info = store_->CreateStream(spec);
    EXPECT_TRUE(info.ok()) << info.status().ToString();
    return info.ok() ? *info : StreamInfo{};
  }

  Result<AppendResult> Append(StreamId id, std::vector<std::string> payloads, uint64_t now = 1000,
                              std::optional<uint64_t> expected = std::nullopt) {
    AppendRequest req;
    req.stream = id;
    req.now_ms = now;
    req.expected_offset = expected;
    for (auto& p : payloads) req.records.push_back(AppendRecord{std::nullopt, std::move(p)});
    return AppendSync(*store_, std::move(req));
  }

  std::vector<uint64_t> Offsets(StreamId id, uint64_t from = 1, size_t limit = 1000) {
    auto r = store_->Read(id, from, limit, std::numeric_limits<size_t>::max());
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    std::vector<uint64_t> out;
    if (r.ok()) {
      for (const auto& rec : *r) out.push_back(rec.offset);
    }
    return out;
  }
};

// Restart semantics; Reopen() must see the same data.
class PersistentStoreTest : public StoreContractTest {};

}  // namespace runnel::testing

#endif  // RUNNEL_TESTS_STORE_STORE_CONTRACT_H_
