// OverlayEnv: a copy-on-write view of another Env that never changes it.
//
// Reads see the base Env's files. The first change to a file (a write, a truncate, a rename)
// copies it into memory, and from then on every handle of that path reads and writes the copy;
// new files live in memory only, and removals only hide files. Directory listings and sizes
// reflect the overlay. Locks always succeed (the caller is expected to hold the base
// directory's real lock). Nothing ever reaches the base Env.
//
// It lets `runnel check` run the log store's real recovery (which truncates torn tails and
// writes a checkpoint when it closes) over a data directory without touching it, so check
// reports exactly what an open would decide. Whole files are copied on their first change: it
// is meant for that one-off use, not for serving.
//
// Thread-safety: all methods are safe to call concurrently.
#ifndef RUNNEL_ENV_OVERLAY_ENV_H_
#define RUNNEL_ENV_OVERLAY_ENV_H_

#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "base/mutex.h"
#include "env/env.h"
#include "env/mem_env.h"

namespace runnel::env {

class OverlayEnv final : public Env {
 public:
  // `base` is not owned and must outlive this Env and every file it opened.
  explicit OverlayEnv(Env* base);
  ~OverlayEnv() override = default;

  Result<std::unique_ptr<File>> OpenFile(const std::string& path, bool create) override;
  Status RemoveFile(const std::string& path) override;
  Status RenameFile(const std::string& from, const std::string& to) override;
  Status CreateDir(const std::string& path) override;
  // Removes an empty directory made in the overlay; a directory of the base is never removed.
  Status RemoveDir(const std::string& path) override;
  Status SyncDir(const std::string& dir) override;
  Result<std::vector<std::string>> ListDir(const std::string& dir) override;
  bool FileExists(const std::string& path) override;
  Result<uint64_t> FileSize(const std::string& path) override;
  Result<std::unique_ptr<FileLock>> LockFile(const std::string& path) override;

  // Paths whose bytes differ from the base now (changed, created, renamed or removed), sorted.
  std::vector<std::string> ChangedPaths();

 private:
  class OverlayFile;

  // Copies `path` from the base into memory if it is not there yet. The path must be visible
  // (not hidden).
  Status CopyUp(const std::string& path) RUNNEL_REQUIRES(mu_);
  // True when `path` is served from memory; false when from the base.
  bool InMemory(const std::string& path) const RUNNEL_REQUIRES(mu_) {
    return copied_.count(path) != 0;
  }

  Env* const base_;
  MemEnv mem_;
  Mutex mu_;
  std::set<std::string> copied_ RUNNEL_GUARDED_BY(mu_);  // paths whose current bytes live in mem_
  std::set<std::string> hidden_ RUNNEL_GUARDED_BY(mu_);  // base paths removed or renamed away
};

}  // namespace runnel::env

#endif  // RUNNEL_ENV_OVERLAY_ENV_H_
