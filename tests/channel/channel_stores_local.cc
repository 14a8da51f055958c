// The stores of runnel_channel_tests: memory and the embedded log.
#include "channel/channel_suites.h"
#include "log/log_harness.h"

namespace runnel::testing {

std::vector<StoreParam> ChannelStoreParams() {
  return {MemoryStoreParam(), LogStoreParam()};
}

}  // namespace runnel::testing
