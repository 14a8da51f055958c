// FaultInjectionEnv: wraps another Env and makes chosen file operations fail, the way a full
// disk or a failing device would.
//
// Faults apply to OpenFile, and to File::WriteAt and File::Sync of files opened through this env:
// - FailOpen(n): the n-th OpenFile from now fails with kIOError "Too many open files" (EMFILE),
//   like a process out of file descriptors, and opens nothing.
// - FailWrite(n): the n-th WriteAt from now (1 = the next one) fails with kIOError (EIO) and
//   writes nothing.
// - FailSync(n): the n-th Sync from now fails with kIOError (EIO); the data stays unsynced.
// - SetNoSpace(true): the disk is full, until SetNoSpace(false): a WriteAt that stays within the
//   file's current size succeeds (its blocks are allocated already, as in a pre-zeroed
//   segment); one that would grow the file writes the part within the current size and fails
//   with Status::NoSpace "No space left on device" (ENOSPC: kResourceExhausted).
// - SetSpaceLimit(bytes): a disk that holds `bytes` bytes, until ClearFaults(): the files opened
//   (or created) through this env may hold at most that much in all, counted by their sizes as
//   the base env reports them, so removing or truncating a file gives its bytes back (and a
//   base MemEnv's Crash takes back what it drops). A WriteAt that would grow them past the limit
//   writes what fits and fails with Status::NoSpace, as SetNoSpace does. Truncate never fails.
// - BeforeSyncDo(n, action): runs `action` just before the n-th Sync from now (tests use it to
//   pull the plug with MemEnv::Crash at an exact point: data written but not yet synced).
// - BeforeOpDo(n, action): runs `action` just before the n-th operation from now that changes
//   the disk: File::WriteAt, Sync and Truncate, creating a file, RemoveFile, RenameFile,
//   CreateDir, RemoveDir, SyncDir. With PowerOff() in the action, a test cuts the power at every
//   step of a sequence in turn.
// - PowerOff(): every later operation that changes the disk fails with kIOError and changes
//   nothing, until ClearFaults(): after MemEnv::Crash, the process that "died" must not go on
//   removing or renaming files in what is now the next boot's disk.
// - SetSyncDelay(d): every Sync takes at least `d` longer, like a slow device (the delay is
//   not a failure and does not count as an injected fault).
// - HoldSyncs(suffix): a Sync of a file whose path ends with `suffix` waits until
//   ReleaseSyncs(), like a device stalled on those files (HeldSyncs() counts the waiting ones).
// Power-loss simulation itself is the base env's business (see MemEnv::Crash).
//
// Thread-safety: all methods are safe to call concurrently.
#ifndef RUNNEL_ENV_FAULT_ENV_H_
#define RUNNEL_ENV_FAULT_ENV_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>

#include "base/mutex.h"
#include "env/env.h"

namespace runnel::env {

class FaultInjectionEnv final : public Env {
 public:
  // `base` is not owned and must outlive this env and every file opened through it.
  explicit FaultInjectionEnv(Env* base);

  void FailOpen(uint64_t n);
  void FailWrite(uint64_t n);
  void FailSync(uint64_t n);
  void SetNoSpace(bool on);
  void SetSpaceLimit(uint64_t bytes);
  // Bytes the files opened through this env hold now (what SetSpaceLimit counts).
  uint64_t SpaceUsed();
  void BeforeSyncDo(uint64_t n, std::function<void()> action);
  void BeforeOpDo(uint64_t n, std::function<void()> action);
  void PowerOff();
  void SetSyncDelay(std::chrono::microseconds delay) { sync_delay_us_ = delay.count(); }
  void HoldSyncs(std::string suffix);
  void ReleaseSyncs();
  int HeldSyncs();
  // Restricts FailOpen, FailWrite, FailSync and SetNoSpace to files whose path ends with `suffix`
  // (empty: every file). ClearFaults keeps it.
  void SetFaultPathSuffix(std::string suffix);
  // Files whose path ends with `suffix` are never faulted (empty: none exempt). ClearFaults
  // keeps it.
  void SetExemptPathSuffix(std::string suffix);
  // Clears every pending fault (the space limit and a power-off too) and releases held syncs.
  void ClearFaults();
  uint64_t writes() const { return writes_.load(); }
  uint64_t syncs() const { return syncs_.load(); }
  // Operations that changed (or would have changed) the disk, as BeforeOpDo counts them.
  uint64_t ops() const { return ops_.load(); }
  uint64_t injected_faults() const { return injected_.load(); }
  // How many times `path` has been opened through this env.
  int Opens(const std::string& path);

  Result<std::unique_ptr<File>> OpenFile(const std::string& path, bool create) override;
  Status RemoveFile(const std::string& path) override;
  Status RenameFile(const std::string& from, const std::string& to) override;
  Status CreateDir(const std::string& path) override;
  Status RemoveDir(const std::string& path) override;
  Status SyncDir(const std::string& dir) override;
  Result<std::vector<std::string>> ListDir(const std::string& dir) override {
    return base_->ListDir(dir);
  }
  bool FileExists(const std::string& path) override { return base_->FileExists(path); }
  Result<uint64_t> FileSize(const std::string& path) override { return base_->FileSize(path); }
  Result<std::unique_ptr<FileLock>> LockFile(const std::string& path) override {
    return base_->LockFile(path);
  }

  // Called by the wrapped files: whether this write/sync must fail, and how.
  // A write of `bytes` at `offset` into a file of `size` bytes: `allowed` is how many bytes may
  // still be written before the fault (`fits` of them fit within the file's current size).
  // REQUIRES: space_mu_ held by the caller when a space limit is set (see SpaceLock).
  Status BeforeWrite(const std::string& path, uint64_t offset, uint64_t size, size_t bytes,
                     size_t fits, size_t* allowed);
  Status BeforeSync(const std::string& path);
  // Every operation that changes the disk: counts it, runs a BeforeOpDo action that is due,
  // and fails once the power is off.
  Status BeforeOp();
  // Held by a write from before it measures the disk until it has written, so two writes never
  // both take the last free bytes; unlocked (and free) when no space limit is set.
  std::unique_lock<std::mutex> SpaceLock();

 private:
  // Sum of the sizes of tracked_ files that still exist.
  uint64_t SpaceUsedLocked() RUNNEL_REQUIRES(mu_);

  Env* base_;
  std::mutex space_mu_;  // orders writes with the space check; guards no field
  std::atomic<bool> space_limited_{false};
  Mutex mu_;
  uint64_t fail_open_in_ RUNNEL_GUARDED_BY(mu_) = 0;  // ; 0 = no fault armed
  uint64_t space_limit_ RUNNEL_GUARDED_BY(mu_) = 0;   // ; meaningful when space_limited_
  std::set<std::string> tracked_
      RUNNEL_GUARDED_BY(mu_);  // paths opened or created through this env
  uint64_t op_action_in_ RUNNEL_GUARDED_BY(mu_) = 0;
  std::function<void()> op_action_ RUNNEL_GUARDED_BY(mu_);
  bool powered_off_ RUNNEL_GUARDED_BY(mu_) = false;
  uint64_t fail_write_in_ RUNNEL_GUARDED_BY(mu_) = 0;  // ; 0 = no fault armed
  uint64_t fail_sync_in_ RUNNEL_GUARDED_BY(mu_) = 0;
  bool no_space_ RUNNEL_GUARDED_BY(mu_) = false;
  std::string suffix_ RUNNEL_GUARDED_BY(mu_);
  std::string exempt_ RUNNEL_GUARDED_BY(mu_);
  uint64_t sync_action_in_ RUNNEL_GUARDED_BY(mu_) = 0;
  std::function<void()> sync_action_ RUNNEL_GUARDED_BY(mu_);
  std::optional<std::string> hold_ RUNNEL_GUARDED_BY(mu_);  // the suffix of held syncs
  int held_ RUNNEL_GUARDED_BY(mu_) = 0;
  std::condition_variable released_;
  std::map<std::string, int> opens_ RUNNEL_GUARDED_BY(mu_);
  std::atomic<int64_t> sync_delay_us_{0};
  std::atomic<uint64_t> writes_{0};
  std::atomic<uint64_t> syncs_{0};
  std::atomic<uint64_t> ops_{0};
  std::atomic<uint64_t> injected_{0};
};

}  // namespace runnel::env

#endif  // RUNNEL_ENV_FAULT_ENV_H_
