// MemEnv: an in-memory Env that can simulate a power loss.
//
// Each file keeps its durable content (as of its last Sync) and the list of writes and
// truncations made since. Crash() rolls every file back to its durable content plus a chosen
// prefix of those later operations (the last kept write possibly torn), removes files whose
// creation was not made durable by SyncDir, and invalidates every open handle: later calls on a
// handle opened before the crash fail with kIOError, as a dead process would never see them.
//
// Simplification: renames and removals are durable at once (the log orders its renames after
// the synced writes they publish, so a rename that is rolled back would only lose a checkpoint,
// never data).
//
// Thread-safety: all methods are safe to call concurrently.
#ifndef RUNNEL_ENV_MEM_ENV_H_
#define RUNNEL_ENV_MEM_ENV_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "base/mutex.h"
#include "env/env.h"

namespace runnel::env {

class MemEnv final : public Env {
 public:
  MemEnv();
  ~MemEnv() override = default;

  Result<std::unique_ptr<File>> OpenFile(const std::string& path, bool create) override;
  Status RemoveFile(const std::string& path) override;
  Status RenameFile(const std::string& from, const std::string& to) override;
  Status CreateDir(const std::string& path) override;
  Status RemoveDir(const std::string& path) override;
  Status SyncDir(const std::string& dir) override;
  Result<std::vector<std::string>> ListDir(const std::string& dir) override;
  bool FileExists(const std::string& path) override;
  Result<uint64_t> FileSize(const std::string& path) override;
  Result<std::unique_ptr<FileLock>> LockFile(const std::string& path) override;

  // Simulates a power loss. For each file, `keep(path, pending)` says how many of its `pending`
  // unsynced operations survive; when `tear_bytes` is non-zero, the first operation that does
  // not survive is applied partially: its first min(tear_bytes, size-1) bytes land.
  void Crash(const std::function<size_t(const std::string& path, size_t pending)>& keep,
             size_t tear_bytes = 0);
  // Crash() keeping nothing unsynced.
  void DropUnsyncedData();
  // Number of unsynced operations over all files.
  size_t PendingOperations();

  struct Node;
  struct Liveness;

 private:
  Mutex mu_;
  std::map<std::string, std::shared_ptr<Node>> files_ RUNNEL_GUARDED_BY(mu_);
  std::set<std::string> dirs_ RUNNEL_GUARDED_BY(mu_);
  // Shared with open handles and locks, which may outlive the env.
  std::shared_ptr<Liveness> live_;
};

}  // namespace runnel::env

#endif  // RUNNEL_ENV_MEM_ENV_H_
