// Small helpers shared by the log store tests.
#ifndef RUNNEL_TESTS_LOG_LOG_TEST_UTIL_H_
#define RUNNEL_TESTS_LOG_LOG_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "runnel/store.h"
#include "store/store_contract.h"  // AppendSync

namespace runnel::testing {

inline Result<AppendResult> AppendPayloads(Store& store, StreamId id,
                                           const std::vector<std::string>& payloads,
                                           uint64_t now_ms = 1000) {
  AppendRequest req;
  req.stream = id;
  req.now_ms = now_ms;
  for (const auto& p : payloads) req.records.push_back(AppendRecord{std::nullopt, p});
  return AppendSync(store, std::move(req));
}

inline StreamSpec Spec(std::string name) {
  StreamSpec s;
  s.ns = "global";
  s.name = std::move(name);
  return s;
}

// Creates streams "s0", "s1", ... in the global scope and appends their ids to *ids. Call it
// through ASSERT_NO_FATAL_FAILURE.
inline void CreateStreams(Store& store, int n, std::vector<StreamId>* ids) {
  for (int i = 0; i < n; ++i) {
    auto info = store.CreateStream(Spec("s" + std::to_string(i)));
    ASSERT_TRUE(info.ok()) << info.status().ToString();
    ids->push_back(info->id);
  }
}

}  // namespace runnel::testing

#endif  // RUNNEL_TESTS_LOG_LOG_TEST_UTIL_H_
