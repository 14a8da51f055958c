// How the shared suites get stores: every store implementation provides a StoreParam, and the
// contract suite (tests/store/store_contract_test.cc) and the registry rule suites
// (tests/core/registry_*_test.cc) are instantiated once per store with it.
//
//   INSTANTIATE_TEST_SUITE_P(Log, StoreContractTest, ::testing::Values(LogStoreParam()),
//                            runnel::testing::StoreParamName);
#ifndef RUNNEL_TESTS_SUPPORT_STORE_HARNESS_H_
#define RUNNEL_TESTS_SUPPORT_STORE_HARNESS_H_

#include <functional>
#include <memory>
#include <ostream>
#include <string>

#include <gtest/gtest.h>

#include "runnel/clock.h"
#include "runnel/registry.h"
#include "runnel/store.h"

namespace runnel::testing {

// One test's worth of storage. Open() may be called again after the previous store was
// destroyed; a persistent store then sees the same data (the restart suites rely on it).
class StoreHarness {
 public:
  virtual ~StoreHarness() = default;
  virtual Result<std::unique_ptr<Store>> Open(Clock* clock) = 0;
};

struct StoreParam {
  std::string name;
  std::function<std::unique_ptr<StoreHarness>()> make;
};

inline std::string StoreParamName(const ::testing::TestParamInfo<StoreParam>& info) {
  return info.param.name;
}

inline void PrintTo(const StoreParam& p, std::ostream* os) {
  *os << p.name;
}

StoreParam MemoryStoreParam();

// A fixture giving each test a fresh harness, a manual clock and a registry over the store.
class StoreTestBase : public ::testing::TestWithParam<StoreParam> {
 protected:
  void SetUp() override {
    harness_ = GetParam().make();
    auto store = harness_->Open(&clock_);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = store->get();
    registry_ = std::make_unique<StreamRegistry>(std::move(*store), &clock_);
  }
  void TearDown() override {
    registry_.reset();
    harness_.reset();
  }

  // Destroys the registry (and its store) and opens the same storage again.
  void Reopen() {
    registry_.reset();
    store_ = nullptr;
    auto store = harness_->Open(&clock_);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = store->get();
    registry_ = std::make_unique<StreamRegistry>(std::move(*store), &clock_);
  }

  ManualClock clock_{1'000'000};
  std::unique_ptr<StoreHarness> harness_;
  Store* store_ = nullptr;  // owned by registry_
  std::unique_ptr<StreamRegistry> registry_;
};

}  // namespace runnel::testing

#endif  // RUNNEL_TESTS_SUPPORT_STORE_HARNESS_H_
