#include "env/fault_env.h"

#include <algorithm>
#include <string_view>
#include <thread>
#include <vector>

namespace runnel::env {
namespace {

class FaultFile final : public File {
 public:
  FaultFile(FaultInjectionEnv* env, std::string path, std::unique_ptr<File> base)
      : env_(env), path_(std::move(path)), base_(std::move(base)) {}

  Status WriteAt(uint64_t offset, std::span<const std::string_view> pieces) override {
    RUNNEL_RETURN_IF_ERROR(env_->BeforeOp());
    size_t total = 0;
    for (std::string_view p : pieces) total += p.size();
    std::unique_lock<std::mutex> space = env_->SpaceLock();
    size_t allowed = total;
    size_t fits = 0;
    auto size = base_->Size();
    if (size.ok() && *size > offset)
      fits = static_cast<size_t>(std::min<uint64_t>(total, *size - offset));
    Status fault = env_->BeforeWrite(path_, offset, size.ok() ? *size : 0, total, fits, &allowed);
    if (fault.ok()) return base_->WriteAt(offset, pieces);
    if (allowed > 0) {
      std::vector<std::string_view> prefix;
      for (std::string_view p : pieces) {
        if (allowed == 0) break;
        const size_t n = std::min(allowed, p.size());
        prefix.push_back(p.substr(0, n));
        allowed -= n;
      }
      RUNNEL_RETURN_IF_ERROR(base_->WriteAt(offset, prefix));
    }
    return fault;
  }
  Result<size_t> ReadAt(uint64_t offset, size_t n, char* dst) const override {
    return base_->ReadAt(offset, n, dst);
  }
  Status Sync() override {
    RUNNEL_RETURN_IF_ERROR(env_->BeforeOp());
    RUNNEL_RETURN_IF_ERROR(env_->BeforeSync(path_));
    return base_->Sync();
  }
  Status Truncate(uint64_t size) override {
    RUNNEL_RETURN_IF_ERROR(env_->BeforeOp());
    return base_->Truncate(size);
  }
  Result<uint64_t> Size() const override { return base_->Size(); }

 private:
  FaultInjectionEnv* env_;
  std::string path_;
  std::unique_ptr<File> base_;
};

}  // namespace

FaultInjectionEnv::FaultInjectionEnv(Env* base) : base_(base) {}

void FaultInjectionEnv::FailOpen(uint64_t n) {
  MutexLock lock(mu_);
  fail_open_in_ = n;
}

void FaultInjectionEnv::FailWrite(uint64_t n) {
  MutexLock lock(mu_);
  fail_write_in_ = n;
}

void FaultInjectionEnv::FailSync(uint64_t n) {
  MutexLock lock(mu_);
  fail_sync_in_ = n;
}

void FaultInjectionEnv::SetNoSpace(bool on) {
  MutexLock lock(mu_);
  no_space_ = on;
}

void FaultInjectionEnv::SetSpaceLimit(uint64_t bytes) {
  MutexLock lock(mu_);
  space_limit_ = bytes;
  space_limited_ = true;
}

uint64_t FaultInjectionEnv::SpaceUsed() {
  MutexLock lock(mu_);
  return SpaceUsedLocked();
}

uint64_t FaultInjectionEnv::SpaceUsedLocked() {
  uint64_t used = 0;
  for (auto it = tracked_.begin(); it != tracked_.end();) {
    auto size = base_->FileSize(*it);
    if (!size.ok()) {
      it = tracked_.erase(it);  // removed, or dropped by a crash
      continue;
    }
    used += *size;
    ++it;
  }
  return used;
}

std::unique_lock<std::mutex> FaultInjectionEnv::SpaceLock() {
  if (!space_limited_.load()) return std::unique_lock<std::mutex>();
  return std::unique_lock<std::mutex>(space_mu_);
}

void FaultInjectionEnv::BeforeOpDo(uint64_t n, std::function<void()> action) {
  MutexLock lock(mu_);
  op_action_in_ = n;
  op_action_ = std::move(action);
}

void FaultInjectionEnv::PowerOff() {
  MutexLock lock(mu_);
  powered_off_ = true;
}

Status FaultInjectionEnv::BeforeOp() {
  ops_.fetch_add(1);
  std::function<void()> action;
  {
    MutexLock lock(mu_);
    if (op_action_in_ > 0 && --op_action_in_ == 0) action = std::move(op_action_);
  }
  if (action) action();
  MutexLock lock(mu_);
  if (powered_off_) {
    injected_.fetch_add(1);
    return Status::IOError("the power is off (injected)");
  }
  return Status::OK();
}

void FaultInjectionEnv::BeforeSyncDo(uint64_t n, std::function<void()> action) {
  MutexLock lock(mu_);
  sync_action_in_ = n;
  sync_action_ = std::move(action);
}

void FaultInjectionEnv::SetFaultPathSuffix(std::string suffix) {
  MutexLock lock(mu_);
  suffix_ = std::move(suffix);
}

void FaultInjectionEnv::SetExemptPathSuffix(std::string suffix) {
  MutexLock lock(mu_);
  exempt_ = std::move(suffix);
}

namespace {
bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
}  // namespace

void FaultInjectionEnv::ClearFaults() {
  {
    MutexLock lock(mu_);
    sync_action_in_ = 0;
    sync_action_ = nullptr;
    fail_open_in_ = 0;
    fail_write_in_ = 0;
    fail_sync_in_ = 0;
    no_space_ = false;
    space_limited_ = false;
    op_action_in_ = 0;
    op_action_ = nullptr;
    powered_off_ = false;
    hold_.reset();
  }
  released_.notify_all();
}

Result<std::unique_ptr<File>> FaultInjectionEnv::OpenFile(const std::string& path, bool create) {
  if (create && !base_->FileExists(path)) RUNNEL_RETURN_IF_ERROR(BeforeOp());
  {
    MutexLock lock(mu_);
    ++opens_[path];
    const bool faultable = EndsWith(path, suffix_) && (exempt_.empty() || !EndsWith(path, exempt_));
    if (faultable && fail_open_in_ > 0 && --fail_open_in_ == 0) {
      injected_.fetch_add(1);
      return Status::IOError("open '" + path + "': Too many open files (injected)");
    }
  }
  RUNNEL_ASSIGN_OR_RETURN(auto file, base_->OpenFile(path, create));
  {
    // Counted once it exists: SpaceUsed drops a name it does not find.
    MutexLock lock(mu_);
    tracked_.insert(path);
  }
  return std::unique_ptr<File>(std::make_unique<FaultFile>(this, path, std::move(file)));
}

Status FaultInjectionEnv::RemoveFile(const std::string& path) {
  RUNNEL_RETURN_IF_ERROR(BeforeOp());
  return base_->RemoveFile(path);
}

Status FaultInjectionEnv::RenameFile(const std::string& from, const std::string& to) {
  RUNNEL_RETURN_IF_ERROR(BeforeOp());
  // Under the lock that SpaceUsed holds: between the rename and the update, it would find
  // `from` gone, stop counting it, and `to` would never be counted (the disk would look emptier
  // than it is, and fuller after a reopen that opens `to` again).
  MutexLock lock(mu_);
  RUNNEL_RETURN_IF_ERROR(base_->RenameFile(from, to));
  if (tracked_.erase(from) > 0) tracked_.insert(to);
  return Status::OK();
}

Status FaultInjectionEnv::CreateDir(const std::string& path) {
  RUNNEL_RETURN_IF_ERROR(BeforeOp());
  return base_->CreateDir(path);
}

Status FaultInjectionEnv::RemoveDir(const std::string& path) {
  RUNNEL_RETURN_IF_ERROR(BeforeOp());
  return base_->RemoveDir(path);
}

Status FaultInjectionEnv::SyncDir(const std::string& dir) {
  RUNNEL_RETURN_IF_ERROR(BeforeOp());
  return base_->SyncDir(dir);
}

int FaultInjectionEnv::Opens(const std::string& path) {
  MutexLock lock(mu_);
  const auto it = opens_.find(path);
  return it == opens_.end() ? 0 : it->second;
}

Status FaultInjectionEnv::BeforeWrite(const std::string& path, uint64_t offset, uint64_t size,
                                      size_t bytes, size_t fits, size_t* allowed) {
  writes_.fetch_add(1);
  MutexLock lock(mu_);
  if (!EndsWith(path, suffix_) || (!exempt_.empty() && EndsWith(path, exempt_))) {
    return Status::OK();
  }
  if (no_space_ && fits < bytes) {
    injected_.fetch_add(1);
    *allowed = fits;
    return Status::NoSpace("write '" + path + "': No space left on device (injected)");
  }
  if (space_limited_.load() && offset + bytes > size) {
    const uint64_t growth = offset + bytes - size;  // sizes count, holes included
    const uint64_t used = SpaceUsedLocked();
    const uint64_t free = used < space_limit_ ? space_limit_ - used : 0;
    if (growth > free) {
      injected_.fetch_add(1);
      // What lies within the file, and as much of the rest as the free space holds (a write
      // that starts past the end would leave a hole first: only what fits in the file then).
      *allowed = offset <= size ? static_cast<size_t>(fits + free) : fits;
      return Status::NoSpace("write '" + path + "': No space left on device (injected)");
    }
  }
  if (fail_write_in_ > 0 && --fail_write_in_ == 0) {
    injected_.fetch_add(1);
    *allowed = 0;
    return Status::IOError("write '" + path + "': Input/output error (injected)");
  }
  return Status::OK();
}

void FaultInjectionEnv::HoldSyncs(std::string suffix) {
  MutexLock lock(mu_);
  hold_ = std::move(suffix);
}

void FaultInjectionEnv::ReleaseSyncs() {
  {
    MutexLock lock(mu_);
    hold_.reset();
  }
  released_.notify_all();
}

int FaultInjectionEnv::HeldSyncs() {
  MutexLock lock(mu_);
  return held_;
}

Status FaultInjectionEnv::BeforeSync(const std::string& path) {
  syncs_.fetch_add(1);
  std::function<void()> action;
  {
    MutexLock lock(mu_);
    if (sync_action_in_ > 0 && --sync_action_in_ == 0) action = std::move(sync_action_);
  }
  if (action) action();
  if (const int64_t us = sync_delay_us_.load(); us > 0) {
    std::this_thread::sleep_for(std::chrono::microseconds(us));
  }
  MutexLock lock(mu_);
  if (hold_ && EndsWith(path, *hold_)) {
    ++held_;
    while (hold_ && EndsWith(path, *hold_)) lock.Wait(released_);
    --held_;
  }
  if (!EndsWith(path, suffix_) || (!exempt_.empty() && EndsWith(path, exempt_))) {
    return Status::OK();
  }
  if (fail_sync_in_ > 0 && --fail_sync_in_ == 0) {
    injected_.fetch_add(1);
    return Status::IOError("fdatasync '" + path + "': Input/output error (injected)");
  }
  return Status::OK();
}

}  // namespace runnel::env
