// The shared store and registry suites, run on the embedded log store.
#include <gtest/gtest.h>

#include "core/protocol_streams_suite.h"
#include "core/registry_suites.h"
#include "core/state_compaction_suite.h"
#include "log/log_harness.h"
#include "store/store_contract.h"

namespace runnel::testing {

INSTANTIATE_TEST_SUITE_P(Log, StoreContractTest, ::testing::Values(LogStoreParam()),
                         StoreParamName);
INSTANTIATE_TEST_SUITE_P(Log, PersistentStoreTest, ::testing::Values(LogStoreParam()),
                         StoreParamName);
INSTANTIATE_TEST_SUITE_P(Log, RegistryRulesTest, ::testing::Values(LogStoreParam()),
                         StoreParamName);
INSTANTIATE_TEST_SUITE_P(Log, RegistryGroupsTest, ::testing::Values(LogStoreParam()),
                         StoreParamName);
INSTANTIATE_TEST_SUITE_P(Log, StateCompactionTest, ::testing::Values(LogStoreParam()),
                         StoreParamName);
INSTANTIATE_TEST_SUITE_P(Log, ProtocolStreamsTest, ::testing::Values(LogStoreParam()),
                         StoreParamName);

}  // namespace runnel::testing
