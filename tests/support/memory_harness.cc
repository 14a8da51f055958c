#include "support/store_harness.h"

namespace runnel::testing {
namespace {

class MemoryHarness final : public StoreHarness {
 public:
  Result<std::unique_ptr<Store>> Open(Clock*) override { return NewMemoryStore(); }
};

}  // namespace

StoreParam MemoryStoreParam() {
  return {"Memory", [] { return std::make_unique<MemoryHarness>(); }};
}

}  // namespace runnel::testing
