#include "env/overlay_env.h"

#include <algorithm>

namespace runnel::env {

namespace {

std::string Parent(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? std::string() : path.substr(0, slash);
}

std::string Normalize(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

class NoLock final : public FileLock {};

}  // namespace

// A handle names a path (not an inode, unlike POSIX): once the path is copied into memory, the
// handle reads and writes the copy.
class OverlayEnv::OverlayFile final : public File {
 public:
  OverlayFile(OverlayEnv* env, std::string path, std::unique_ptr<File> base)
      : env_(env), path_(std::move(path)), base_(std::move(base)) {}

  Status WriteAt(uint64_t offset, std::span<const std::string_view> pieces) override {
    RUNNEL_ASSIGN_OR_RETURN(File * f, Writable());
    return f->WriteAt(offset, pieces);
  }
  Result<size_t> ReadAt(uint64_t offset, size_t n, char* dst) const override {
    RUNNEL_ASSIGN_OR_RETURN(File * f, Current());
    return f->ReadAt(offset, n, dst);
  }
  // The overlay is memory: there is nothing to make durable, and the base must not be synced.
  Status Sync() override { return Status::OK(); }
  Status Truncate(uint64_t size) override {
    RUNNEL_ASSIGN_OR_RETURN(File * f, Writable());
    return f->Truncate(size);
  }
  Result<uint64_t> Size() const override {
    RUNNEL_ASSIGN_OR_RETURN(File * f, Current());
    return f->Size();
  }

 private:
  // The memory copy once the path has one, else the base file.
  Result<File*> Current() const {
    MutexLock lock(env_->mu_);
    if (env_->InMemory(path_)) return Memory();
    if (base_ == nullptr) return Status::NotFound("'" + path_ + "' was removed");
    return base_.get();
  }
  Result<File*> Writable() {
    MutexLock lock(env_->mu_);
    if (!env_->InMemory(path_)) {
      if (base_ == nullptr) return Status::NotFound("'" + path_ + "' was removed");
      RUNNEL_RETURN_IF_ERROR(env_->CopyUp(path_));
    }
    return Memory();
  }
  // The path must be in memory.
  Result<File*> Memory() const RUNNEL_REQUIRES(env_->mu_) {
    if (mem_ == nullptr) {
      RUNNEL_ASSIGN_OR_RETURN(mem_, env_->mem_.OpenFile(path_, false));
    }
    return mem_.get();
  }

  OverlayEnv* const env_;
  const std::string path_;
  const std::unique_ptr<File> base_;  // null for a file created in the overlay
  mutable std::unique_ptr<File> mem_ RUNNEL_GUARDED_BY(env_->mu_);
};

OverlayEnv::OverlayEnv(Env* base) : base_(base) {}

Status OverlayEnv::CopyUp(const std::string& path) {
  RUNNEL_ASSIGN_OR_RETURN(auto from, base_->OpenFileForRead(path));
  RUNNEL_ASSIGN_OR_RETURN(uint64_t size, from->Size());
  std::string bytes(size, '\0');
  RUNNEL_ASSIGN_OR_RETURN(size_t got, from->ReadAt(0, bytes.size(), bytes.data()));
  bytes.resize(got);
  RUNNEL_RETURN_IF_ERROR(mem_.CreateDir(Parent(path)));
  RUNNEL_ASSIGN_OR_RETURN(auto to, mem_.OpenFile(path, true));
  RUNNEL_RETURN_IF_ERROR(to->Truncate(0));
  RUNNEL_RETURN_IF_ERROR(to->WriteAt(0, bytes));
  copied_.insert(path);
  return Status::OK();
}

Result<std::unique_ptr<File>> OverlayEnv::OpenFile(const std::string& raw_path, bool create) {
  const std::string path = Normalize(raw_path);
  MutexLock lock(mu_);
  if (InMemory(path)) return std::unique_ptr<File>(new OverlayFile(this, path, nullptr));
  if (!hidden_.count(path)) {
    auto file = base_->OpenFileForRead(path);
    if (file.ok()) return std::unique_ptr<File>(new OverlayFile(this, path, std::move(*file)));
    if (file.status().code() != StatusCode::kNotFound || !create) return file.status();
  } else if (!create) {
    return Status::NotFound("open '" + path + "': No such file or directory");
  }
  RUNNEL_RETURN_IF_ERROR(mem_.CreateDir(Parent(path)));
  RUNNEL_ASSIGN_OR_RETURN(auto file, mem_.OpenFile(path, true));
  RUNNEL_RETURN_IF_ERROR(file->Truncate(0));
  copied_.insert(path);
  return std::unique_ptr<File>(new OverlayFile(this, path, nullptr));
}

Status OverlayEnv::RemoveFile(const std::string& raw_path) {
  const std::string path = Normalize(raw_path);
  MutexLock lock(mu_);
  if (InMemory(path)) {
    RUNNEL_RETURN_IF_ERROR(mem_.RemoveFile(path));
    copied_.erase(path);
    hidden_.insert(path);
    return Status::OK();
  }
  if (hidden_.count(path) || !base_->FileExists(path)) {
    return Status::NotFound("remove '" + path + "': No such file or directory");
  }
  hidden_.insert(path);
  return Status::OK();
}

Status OverlayEnv::RenameFile(const std::string& raw_from, const std::string& raw_to) {
  const std::string from = Normalize(raw_from), to = Normalize(raw_to);
  MutexLock lock(mu_);
  if (!InMemory(from)) {
    if (hidden_.count(from) || !base_->FileExists(from)) {
      return Status::NotFound("rename '" + from + "': No such file");
    }
    RUNNEL_RETURN_IF_ERROR(CopyUp(from));
  }
  RUNNEL_RETURN_IF_ERROR(mem_.CreateDir(Parent(to)));
  RUNNEL_RETURN_IF_ERROR(mem_.RenameFile(from, to));
  copied_.erase(from);
  hidden_.insert(from);
  copied_.insert(to);
  return Status::OK();
}

Status OverlayEnv::CreateDir(const std::string& path) {
  return mem_.CreateDir(Normalize(path));
}

Status OverlayEnv::RemoveDir(const std::string& raw_path) {
  const std::string path = Normalize(raw_path);
  if (base_->FileExists(path)) {
    return Status::IOError("remove directory '" + path + "': the overlay never changes the base");
  }
  return mem_.RemoveDir(path);
}

Status OverlayEnv::SyncDir(const std::string& dir) {
  (void)dir;
  return Status::OK();
}

Result<std::vector<std::string>> OverlayEnv::ListDir(const std::string& raw_dir) {
  const std::string dir = Normalize(raw_dir);
  MutexLock lock(mu_);
  std::set<std::string> names;
  auto base = base_->ListDir(dir);
  if (base.ok()) {
    for (const std::string& name : *base) {
      const std::string path = JoinPath(dir, name);
      if (!hidden_.count(path) || InMemory(path)) names.insert(name);
    }
  }
  auto mem = mem_.ListDir(dir);
  if (mem.ok()) names.insert(mem->begin(), mem->end());
  if (!base.ok() && !mem.ok()) return base.status();
  return std::vector<std::string>(names.begin(), names.end());
}

bool OverlayEnv::FileExists(const std::string& raw_path) {
  const std::string path = Normalize(raw_path);
  MutexLock lock(mu_);
  if (InMemory(path)) return true;
  if (hidden_.count(path)) return false;
  return base_->FileExists(path) || mem_.FileExists(path);
}

Result<uint64_t> OverlayEnv::FileSize(const std::string& raw_path) {
  const std::string path = Normalize(raw_path);
  MutexLock lock(mu_);
  if (InMemory(path)) return mem_.FileSize(path);
  if (hidden_.count(path)) return Status::NotFound("size of '" + path + "': No such file");
  return base_->FileSize(path);
}

Result<std::unique_ptr<FileLock>> OverlayEnv::LockFile(const std::string& path) {
  (void)path;
  return std::unique_ptr<FileLock>(new NoLock());
}

std::vector<std::string> OverlayEnv::ChangedPaths() {
  MutexLock lock(mu_);
  std::set<std::string> all(copied_.begin(), copied_.end());
  all.insert(hidden_.begin(), hidden_.end());
  return std::vector<std::string>(all.begin(), all.end());
}

}  // namespace runnel::env
