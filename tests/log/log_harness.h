// Test support for the log store: temporary directories and StoreHarness implementations.
#ifndef RUNNEL_TESTS_LOG_LOG_HARNESS_H_
#define RUNNEL_TESTS_LOG_LOG_HARNESS_H_

#include <memory>
#include <string>

#include "runnel/log_store.h"
#include "support/store_harness.h"

namespace runnel::testing {

// A fresh directory under /tmp, removed with everything in it on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// The log store on the real file system in a temporary directory; Open() reopens it.
StoreParam LogStoreParam();

// Options for tests: small segments so rolls, checkpoints and deletions happen quickly.
LogStoreOptions SmallLogOptions(const std::string& dir);

}  // namespace runnel::testing

#endif  // RUNNEL_TESTS_LOG_LOG_HARNESS_H_
