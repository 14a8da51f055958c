#include "log/log_harness.h"

#include <cstdlib>
#include <filesystem>

namespace runnel::testing {

TempDir::TempDir() {
  std::string tmpl = "/tmp/runnel-log-test-XXXXXX";
  char* p = ::mkdtemp(tmpl.data());
  if (p == nullptr) std::abort();
  path_ = p;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

LogStoreOptions SmallLogOptions(const std::string& dir) {
  LogStoreOptions o;
  o.dir = dir;
  o.segment_size = 64 << 10;
  o.checkpoint_interval_bytes = 256 << 10;
  return o;
}

namespace {

class LogHarness final : public StoreHarness {
 public:
  Result<std::unique_ptr<Store>> Open(Clock* clock) override {
    LogStoreOptions o = SmallLogOptions(dir_.path());
    o.clock = clock;
    return OpenLogStore(o);
  }

 private:
  TempDir dir_;
};

}  // namespace

StoreParam LogStoreParam() {
  return {"Log", [] { return std::make_unique<LogHarness>(); }};
}

}  // namespace runnel::testing
