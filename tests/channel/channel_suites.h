// The stores the parameterised channel suites run on. Each test binary that links the suites
// (the object library runnel_channel_suites) defines ChannelStoreParams() once: the memory and
// log stores in runnel_channel_tests, PostgreSQL in runnel_channel_postgres_tests. Every suite
// file ends with RUNNEL_CHANNEL_SUITE_INSTANCES(SuiteName).
#ifndef RUNNEL_TESTS_CHANNEL_CHANNEL_SUITES_H_
#define RUNNEL_TESTS_CHANNEL_CHANNEL_SUITES_H_

#include <vector>

#include <gtest/gtest.h>

#include "support/store_harness.h"

namespace runnel::testing {

std::vector<StoreParam> ChannelStoreParams();

}  // namespace runnel::testing

#define RUNNEL_CHANNEL_SUITE_INSTANCES(suite)                                            \
  INSTANTIATE_TEST_SUITE_P(Stores, suite,                                                \
                           ::testing::ValuesIn(::runnel::testing::ChannelStoreParams()), \
                           ::runnel::testing::StoreParamName)

#endif  // RUNNEL_TESTS_CHANNEL_CHANNEL_SUITES_H_
