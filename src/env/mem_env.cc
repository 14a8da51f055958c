#include "env/mem_env.h"

#include <algorithm>
#include <cstring>
#include <vector>

namespace runnel::env {

struct MemEnv::Node {
  struct Op {
    bool truncate = false;
    uint64_t offset = 0;  // write position, or the new size for a truncate
    std::string bytes;
  };
  Mutex mu;
  std::string data RUNNEL_GUARDED_BY(mu);         // what reads see
  std::string durable RUNNEL_GUARDED_BY(mu);      // what survives a crash
  std::vector<Op> pending RUNNEL_GUARDED_BY(mu);  // operations since the last Sync
  // Guarded by the owning MemEnv's mu_, which the analysis cannot name from here.
  bool creation_durable = false;

  static void Apply(std::string& s, const Op& op, size_t limit) {
    if (op.truncate) {
      s.resize(op.offset);
      return;
    }
    const size_t n = std::min(limit, op.bytes.size());
    if (s.size() < op.offset + n) s.resize(op.offset + n);
    std::memcpy(s.data() + op.offset, op.bytes.data(), n);
  }
};

struct MemEnv::Liveness {
  Mutex mu;
  uint64_t generation RUNNEL_GUARDED_BY(mu) = 1;
  std::set<std::string> locks RUNNEL_GUARDED_BY(mu);
};

namespace {

std::string Parent(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? std::string() : path.substr(0, slash);
}

std::string Normalize(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

class MemFile final : public File {
 public:
  MemFile(std::string path, std::shared_ptr<MemEnv::Node> node,
          std::shared_ptr<MemEnv::Liveness> live, uint64_t gen)
      : path_(std::move(path)), node_(std::move(node)), live_(std::move(live)), gen_(gen) {}

  Status WriteAt(uint64_t offset, std::span<const std::string_view> pieces) override {
    RUNNEL_RETURN_IF_ERROR(CheckAlive());
    MemEnv::Node::Op op;
    op.offset = offset;
    for (std::string_view p : pieces) op.bytes.append(p);
    MutexLock lock(node_->mu);
    MemEnv::Node::Apply(node_->data, op, op.bytes.size());
    node_->pending.push_back(std::move(op));
    return Status::OK();
  }

  Result<size_t> ReadAt(uint64_t offset, size_t n, char* dst) const override {
    RUNNEL_RETURN_IF_ERROR(CheckAlive());
    MutexLock lock(node_->mu);
    if (offset >= node_->data.size()) return size_t{0};
    const size_t len = std::min<uint64_t>(n, node_->data.size() - offset);
    std::memcpy(dst, node_->data.data() + offset, len);
    return len;
  }

  Status Sync() override {
    RUNNEL_RETURN_IF_ERROR(CheckAlive());
    MutexLock lock(node_->mu);
    for (const auto& op : node_->pending) MemEnv::Node::Apply(node_->durable, op, op.bytes.size());
    node_->pending.clear();
    return Status::OK();
  }

  Status Truncate(uint64_t size) override {
    RUNNEL_RETURN_IF_ERROR(CheckAlive());
    MemEnv::Node::Op op;
    op.truncate = true;
    op.offset = size;
    MutexLock lock(node_->mu);
    MemEnv::Node::Apply(node_->data, op, 0);
    node_->pending.push_back(std::move(op));
    return Status::OK();
  }

  Result<uint64_t> Size() const override {
    RUNNEL_RETURN_IF_ERROR(CheckAlive());
    MutexLock lock(node_->mu);
    return static_cast<uint64_t>(node_->data.size());
  }

 private:
  Status CheckAlive() const {
    MutexLock lock(live_->mu);
    if (live_->generation != gen_) {
      return Status::IOError("'" + path_ + "': handle invalidated by a simulated crash");
    }
    return Status::OK();
  }

  std::string path_;
  std::shared_ptr<MemEnv::Node> node_;
  std::shared_ptr<MemEnv::Liveness> live_;
  uint64_t gen_;
};

class MemLock final : public FileLock {
 public:
  MemLock(std::shared_ptr<MemEnv::Liveness> live, std::string path)
      : live_(std::move(live)), path_(std::move(path)) {}
  ~MemLock() override {
    MutexLock lock(live_->mu);
    live_->locks.erase(path_);
  }

 private:
  std::shared_ptr<MemEnv::Liveness> live_;
  std::string path_;
};

}  // namespace

MemEnv::MemEnv() : live_(std::make_shared<Liveness>()) {
  dirs_.insert("/");
}

Result<std::unique_ptr<File>> MemEnv::OpenFile(const std::string& raw_path, bool create) {
  const std::string path = Normalize(raw_path);
  MutexLock lock(mu_);
  auto it = files_.find(path);
  if (it == files_.end()) {
    if (!create) return Status::NotFound("open '" + path + "': No such file or directory");
    if (!dirs_.count(Parent(path)) && !Parent(path).empty()) {
      return Status::NotFound("open '" + path + "': No such file or directory");
    }
    it = files_.emplace(path, std::make_shared<Node>()).first;
  }
  uint64_t gen;
  {
    MutexLock live_lock(live_->mu);
    gen = live_->generation;
  }
  return std::unique_ptr<File>(std::make_unique<MemFile>(path, it->second, live_, gen));
}

Status MemEnv::RemoveFile(const std::string& raw_path) {
  const std::string path = Normalize(raw_path);
  MutexLock lock(mu_);
  if (files_.erase(path) == 0) {
    return Status::NotFound("remove '" + path + "': No such file or directory");
  }
  return Status::OK();
}

Status MemEnv::RenameFile(const std::string& raw_from, const std::string& raw_to) {
  const std::string from = Normalize(raw_from), to = Normalize(raw_to);
  MutexLock lock(mu_);
  auto it = files_.find(from);
  if (it == files_.end()) return Status::NotFound("rename '" + from + "': No such file");
  auto node = it->second;
  files_.erase(it);
  node->creation_durable = true;
  files_[to] = std::move(node);
  return Status::OK();
}

Status MemEnv::CreateDir(const std::string& raw_path) {
  MutexLock lock(mu_);
  dirs_.insert(Normalize(raw_path));
  return Status::OK();
}

Status MemEnv::RemoveDir(const std::string& raw_path) {
  const std::string path = Normalize(raw_path);
  MutexLock lock(mu_);
  if (!dirs_.count(path)) {
    return Status::NotFound("remove directory '" + path + "': No such file or directory");
  }
  for (const auto& [file, node] : files_) {
    if (Parent(file) == path) {
      return Status::IOError("remove directory '" + path + "': Directory not empty");
    }
  }
  for (const std::string& dir : dirs_) {
    if (Parent(dir) == path) {
      return Status::IOError("remove directory '" + path + "': Directory not empty");
    }
  }
  dirs_.erase(path);
  return Status::OK();
}

Status MemEnv::SyncDir(const std::string& raw_dir) {
  const std::string dir = Normalize(raw_dir);
  MutexLock lock(mu_);
  if (!dirs_.count(dir)) return Status::NotFound("sync directory '" + dir + "': No such directory");
  for (auto& [path, node] : files_) {
    if (Parent(path) == dir) node->creation_durable = true;
  }
  return Status::OK();
}

Result<std::vector<std::string>> MemEnv::ListDir(const std::string& raw_dir) {
  const std::string dir = Normalize(raw_dir);
  MutexLock lock(mu_);
  if (!dirs_.count(dir)) return Status::NotFound("list '" + dir + "': No such directory");
  std::vector<std::string> out;
  for (const auto& [path, node] : files_) {
    if (Parent(path) == dir) out.push_back(path.substr(dir.size() + 1));
  }
  return out;
}

bool MemEnv::FileExists(const std::string& raw_path) {
  const std::string path = Normalize(raw_path);
  MutexLock lock(mu_);
  return files_.count(path) > 0 || dirs_.count(path) > 0;
}

Result<uint64_t> MemEnv::FileSize(const std::string& raw_path) {
  const std::string path = Normalize(raw_path);
  std::shared_ptr<Node> node;
  {
    MutexLock lock(mu_);
    auto it = files_.find(path);
    if (it == files_.end()) return Status::NotFound("stat '" + path + "': No such file");
    node = it->second;
  }
  MutexLock lock(node->mu);
  return static_cast<uint64_t>(node->data.size());
}

Result<std::unique_ptr<FileLock>> MemEnv::LockFile(const std::string& raw_path) {
  const std::string path = Normalize(raw_path);
  MutexLock lock(mu_);
  MutexLock live_lock(live_->mu);
  if (!live_->locks.insert(path).second) {
    return Status::Unavailable("data directory is in use: lock file '" + path +
                               "' is held by another process or store");
  }
  if (!files_.count(path)) {
    auto node = std::make_shared<Node>();
    node->creation_durable = true;
    files_.emplace(path, std::move(node));
  }
  return std::unique_ptr<FileLock>(std::make_unique<MemLock>(live_, path));
}

void MemEnv::Crash(const std::function<size_t(const std::string&, size_t)>& keep,
                   size_t tear_bytes) {
  MutexLock lock(mu_);
  {
    MutexLock live_lock(live_->mu);
    ++live_->generation;
  }
  for (auto it = files_.begin(); it != files_.end();) {
    if (!it->second->creation_durable) {
      it = files_.erase(it);
      continue;
    }
    Node& node = *it->second;
    MutexLock node_lock(node.mu);
    const size_t kept = std::min(keep(it->first, node.pending.size()), node.pending.size());
    std::string content = node.durable;
    for (size_t i = 0; i < kept; ++i) Node::Apply(content, node.pending[i], SIZE_MAX);
    if (tear_bytes > 0 && kept < node.pending.size() && !node.pending[kept].truncate &&
        node.pending[kept].bytes.size() > 1) {
      Node::Apply(content, node.pending[kept],
                  std::min(tear_bytes, node.pending[kept].bytes.size() - 1));
    }
    node.durable = content;
    node.data = std::move(content);
    node.pending.clear();
    ++it;
  }
}

void MemEnv::DropUnsyncedData() {
  Crash([](const std::string&, size_t) { return size_t{0}; });
}

size_t MemEnv::PendingOperations() {
  MutexLock lock(mu_);
  size_t n = 0;
  for (auto& [path, node] : files_) {
    MutexLock node_lock(node->mu);
    n += node->pending.size();
  }
  return n;
}

}  // namespace runnel::env
