// The keyed-compaction suite (tests/core/state_compaction_test.cc), parameterised by store. A
// store that supports Store::DropRecords instantiates it:
//
//   INSTANTIATE_TEST_SUITE_P(Memory, StateCompactionTest, ::testing::Values(MemoryStoreParam()),
//                            runnel::testing::StoreParamName);
#ifndef RUNNEL_TESTS_CORE_STATE_COMPACTION_SUITE_H_
#define RUNNEL_TESTS_CORE_STATE_COMPACTION_SUITE_H_

#include "support/store_harness.h"

namespace runnel::testing {

class StateCompactionTest : public StoreTestBase {};

}  // namespace runnel::testing

#endif  // RUNNEL_TESTS_CORE_STATE_COMPACTION_SUITE_H_
