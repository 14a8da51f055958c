// Fixtures of the registry rule suites (SEMANTICS section 2), run against every store.
#ifndef RUNNEL_TESTS_CORE_REGISTRY_SUITES_H_
#define RUNNEL_TESTS_CORE_REGISTRY_SUITES_H_

#include <string>
#include <vector>

#include "support/store_harness.h"

namespace runnel::testing {

class RegistryTestBase : public StoreTestBase {
 protected:
  const StreamScope global_ = StreamScope::Global();
  const StreamScope acme_ = StreamScope::Tenant("acme");
  const StreamScope globex_ = StreamScope::Tenant("globex");

  StreamRegistry& reg() { return *registry_; }

  void MustCreate(const StreamScope& scope, const std::string& name, StreamRetention r = {}) {
    Status s = reg().CreateStream(scope, name, r);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  uint64_t MustAppend(const StreamScope& scope, const std::string& name, std::string payload = "p",
                      uint64_t now_ms = 1000) {
    auto r = reg().Append(scope, name, std::nullopt, std::move(payload), now_ms);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : 0;
  }
  static std::vector<uint64_t> OffsetsOf(const Result<std::vector<StreamEvent>>& events) {
    EXPECT_TRUE(events.ok()) << events.status().ToString();
    std::vector<uint64_t> out;
    if (events.ok()) {
      for (const auto& e : *events) out.push_back(e.offset);
    }
    return out;
  }
  static std::vector<uint64_t> Range(uint64_t first, uint64_t last) {
    std::vector<uint64_t> out;
    for (uint64_t i = first; i <= last; ++i) out.push_back(i);
    return out;
  }
};

class RegistryRulesTest : public RegistryTestBase {};
class RegistryGroupsTest : public RegistryTestBase {};

}  // namespace runnel::testing

#endif  // RUNNEL_TESTS_CORE_REGISTRY_SUITES_H_
