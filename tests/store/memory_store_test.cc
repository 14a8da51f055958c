// The shared suites on the memory store.
#include <gtest/gtest.h>

#include "core/protocol_streams_suite.h"
#include "core/registry_suites.h"
#include "core/state_compaction_suite.h"
#include "store/store_contract.h"

namespace runnel::testing {

INSTANTIATE_TEST_SUITE_P(Memory, StoreContractTest, ::testing::Values(MemoryStoreParam()),
                         StoreParamName);
INSTANTIATE_TEST_SUITE_P(Memory, RegistryRulesTest, ::testing::Values(MemoryStoreParam()),
                         StoreParamName);
INSTANTIATE_TEST_SUITE_P(Memory, RegistryGroupsTest, ::testing::Values(MemoryStoreParam()),
                         StoreParamName);
INSTANTIATE_TEST_SUITE_P(Memory, StateCompactionTest, ::testing::Values(MemoryStoreParam()),
                         StoreParamName);
INSTANTIATE_TEST_SUITE_P(Memory, ProtocolStreamsTest, ::testing::Values(MemoryStoreParam()),
                         StoreParamName);
// The memory store keeps nothing across a reopen, so the restart suite does not apply to it.
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(PersistentStoreTest);

TEST(MemoryStoreTest, DeclaresItselfProcessLocal) {
  auto store = NewMemoryStore();
  EXPECT_EQ(store->Name(), "memory");
  EXPECT_NE(store->Durability().find("process"), std::string::npos);
}

TEST(MemoryStoreTest, OpenByNameAndRefuseUnknownStores) {
  auto reg = StreamRegistry::Open(RegistryOptions{});
  ASSERT_TRUE(reg.ok());
  EXPECT_EQ(reg->store().Name(), "memory");
  RegistryOptions bad;
  bad.store = "carrier-pigeon";
  auto refused = StreamRegistry::Open(bad);
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("carrier-pigeon"), std::string_view::npos);
}

}  // namespace runnel::testing
