#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "env/env.h"

namespace runnel::env {
namespace {

Status PosixError(std::string_view what, const std::string& path, int err) {
  std::string msg = std::string(what) + " '" + path + "': " + std::strerror(err);
  if (err == ENOENT) return Status::NotFound(msg);
  if (err == ENOSPC || err == EDQUOT) return Status::NoSpace(msg);
  return Status::IOError(msg);
}

class PosixFile final : public File {
 public:
  PosixFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  ~PosixFile() override { ::close(fd_); }

  Status WriteAt(uint64_t offset, std::span<const std::string_view> pieces) override {
    std::vector<iovec> iov;
    iov.reserve(pieces.size());
    for (std::string_view p : pieces) {
      if (!p.empty()) iov.push_back({const_cast<char*>(p.data()), p.size()});
    }
    size_t i = 0;
    while (i < iov.size()) {
      const int count = static_cast<int>(std::min<size_t>(iov.size() - i, IOV_MAX));
      ssize_t n = ::pwritev(fd_, &iov[i], count, static_cast<off_t>(offset));
      if (n < 0) {
        if (errno == EINTR) continue;
        return PosixError("write", path_, errno);
      }
      if (n == 0) return Status::IOError("write '" + path_ + "': wrote nothing");
      offset += static_cast<uint64_t>(n);
      size_t left = static_cast<size_t>(n);
      while (i < iov.size() && left >= iov[i].iov_len) {
        left -= iov[i].iov_len;
        ++i;
      }
      if (left > 0) {
        iov[i].iov_base = static_cast<char*>(iov[i].iov_base) + left;
        iov[i].iov_len -= left;
      }
    }
    return Status::OK();
  }

  Result<size_t> ReadAt(uint64_t offset, size_t n, char* dst) const override {
    size_t done = 0;
    while (done < n) {
      ssize_t r = ::pread(fd_, dst + done, n - done, static_cast<off_t>(offset + done));
      if (r < 0) {
        if (errno == EINTR) continue;
        return PosixError("read", path_, errno);
      }
      if (r == 0) break;
      done += static_cast<size_t>(r);
    }
    return done;
  }

  Status Sync() override {
    if (::fdatasync(fd_) != 0) return PosixError("fdatasync", path_, errno);
    return Status::OK();
  }

  Status Truncate(uint64_t size) override {
    if (::ftruncate(fd_, static_cast<off_t>(size)) != 0) {
      return PosixError("truncate", path_, errno);
    }
    return Status::OK();
  }

  Result<uint64_t> Size() const override {
    struct stat st;
    if (::fstat(fd_, &st) != 0) return PosixError("stat", path_, errno);
    return static_cast<uint64_t>(st.st_size);
  }

 private:
  std::string path_;
  int fd_;
};

// Holds flock()s on the lock file and on the directory that contains it.
class PosixLock final : public FileLock {
 public:
  PosixLock(int fd, int dir_fd) : fd_(fd), dir_fd_(dir_fd) {}
  ~PosixLock() override {
    ::flock(dir_fd_, LOCK_UN);
    ::close(dir_fd_);
    ::flock(fd_, LOCK_UN);
    ::close(fd_);
  }

 private:
  int fd_;
  int dir_fd_;
};

class PosixEnv final : public Env {
 public:
  Result<std::unique_ptr<File>> OpenFile(const std::string& path, bool create) override {
    int flags = O_RDWR | O_CLOEXEC | (create ? O_CREAT : 0);
    int fd = ::open(path.c_str(), flags, 0644);
    if (fd < 0) return PosixError("open", path, errno);
    return std::unique_ptr<File>(std::make_unique<PosixFile>(path, fd));
  }

  Result<std::unique_ptr<File>> OpenFileForRead(const std::string& path) override {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return PosixError("open", path, errno);
    return std::unique_ptr<File>(std::make_unique<PosixFile>(path, fd));
  }

  Status RemoveFile(const std::string& path) override {
    if (::unlink(path.c_str()) != 0) return PosixError("remove", path, errno);
    return Status::OK();
  }

  Status RenameFile(const std::string& from, const std::string& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0) return PosixError("rename", from, errno);
    return Status::OK();
  }

  Status CreateDir(const std::string& path) override {
    if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) {
      return PosixError("mkdir", path, errno);
    }
    return Status::OK();
  }

  Status RemoveDir(const std::string& path) override {
    if (::rmdir(path.c_str()) != 0) return PosixError("remove directory", path, errno);
    return Status::OK();
  }

  Status SyncDir(const std::string& dir) override {
    int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return PosixError("open directory", dir, errno);
    Status s;
    if (::fsync(fd) != 0) s = PosixError("fsync directory", dir, errno);
    ::close(fd);
    return s;
  }

  Result<std::vector<std::string>> ListDir(const std::string& dir) override {
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr) return PosixError("list", dir, errno);
    std::vector<std::string> out;
    while (struct dirent* e = ::readdir(d)) {
      std::string_view name(e->d_name);
      if (name != "." && name != "..") out.emplace_back(name);
    }
    ::closedir(d);
    return out;
  }

  bool FileExists(const std::string& path) override { return ::access(path.c_str(), F_OK) == 0; }

  Result<uint64_t> FileSize(const std::string& path) override {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) return PosixError("stat", path, errno);
    return static_cast<uint64_t>(st.st_size);
  }

  Result<std::unique_ptr<FileLock>> LockFile(const std::string& path) override {
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return PosixError("open lock file", path, errno);
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      int err = errno;
      ::close(fd);
      if (err == EWOULDBLOCK) {
        return Status::Unavailable("data directory is in use: lock file '" + path +
                                   "' is held by another process or store");
      }
      return PosixError("lock", path, err);
    }
    // The directory itself is locked too: a lock file removed while its holder runs (by hand,
    // or by a cleanup script) would otherwise let a second opener create a new one and lock it.
    const size_t slash = path.rfind('/');
    const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash + 1);
    int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir_fd < 0) {
      int err = errno;
      ::close(fd);
      return PosixError("open directory", dir, err);
    }
    if (::flock(dir_fd, LOCK_EX | LOCK_NB) != 0) {
      int err = errno;
      ::close(dir_fd);
      ::close(fd);
      if (err == EWOULDBLOCK) {
        return Status::Unavailable("data directory '" + dir +
                                   "' is in use: another process or store has it locked (its "
                                   "lock file '" +
                                   path + "' may have been removed)");
      }
      return PosixError("lock", dir, err);
    }
    return std::unique_ptr<FileLock>(std::make_unique<PosixLock>(fd, dir_fd));
  }
};

}  // namespace

Env* Env::Posix() {
  static PosixEnv* env = new PosixEnv();
  return env;
}

std::string JoinPath(std::string_view dir, std::string_view name) {
  std::string out(dir);
  if (!out.empty() && out.back() != '/') out.push_back('/');
  out.append(name);
  return out;
}

}  // namespace runnel::env
