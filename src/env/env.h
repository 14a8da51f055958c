// Env: the narrow file-system interface under the durable stores.
//
// Every byte the embedded log reads or writes goes through an Env, so tests can swap the real
// file system (PosixEnv) for an in-memory one (MemEnv) that can simulate a crash, or wrap either
// in a FaultInjectionEnv that fails chosen opens, writes and syncs or reports a full disk. A
// RelativeErrorsEnv wraps an Env so that its errors name files relative to a data directory.
//
// Durability vocabulary, used by every implementation:
// - File::WriteAt() puts bytes in the file's volatile state (the page cache). They are visible
//   to ReadAt() at once but may be lost by a crash until a later File::Sync() returns OK.
// - File::Sync() (fdatasync) makes the file's data and size durable.
// - Creating, renaming or removing a file is durable once Env::SyncDir() of its directory
//   returns OK.
//
// Errors: every call returns Status/Result. Operating-system failures are kIOError with the
// path and the errno text; a missing file is kNotFound; a full disk (ENOSPC, EDQUOT) is
// kResourceExhausted with Status::no_space() set; a lock held elsewhere is kUnavailable.
//
// Thread-safety: an Env may be used from any thread concurrently. A File may be used
// concurrently for ReadAt() while one thread writes and syncs it.
#ifndef RUNNEL_ENV_ENV_H_
#define RUNNEL_ENV_ENV_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runnel/status.h"

namespace runnel::env {

// An open regular file, readable and writable at any position.
class File {
 public:
  virtual ~File() = default;

  // Writes the concatenation of `pieces` at `offset`, extending the file if needed. Either all
  // bytes are written (OK) or an error is returned; after an error an unknown prefix of the
  // bytes may be in the file.
  virtual Status WriteAt(uint64_t offset, std::span<const std::string_view> pieces) = 0;
  Status WriteAt(uint64_t offset, std::string_view data) {
    return WriteAt(offset, std::span<const std::string_view>(&data, 1));
  }
  // Reads up to n bytes at `offset` into dst; returns how many were read (fewer only at the end
  // of the file).
  virtual Result<size_t> ReadAt(uint64_t offset, size_t n, char* dst) const = 0;
  // fdatasync: when it returns OK, all data written so far and the file size are durable.
  virtual Status Sync() = 0;
  // Sets the file size (volatile until Sync()).
  virtual Status Truncate(uint64_t size) = 0;
  virtual Result<uint64_t> Size() const = 0;
};

// Held while the process owns a lock file; released on destruction.
class FileLock {
 public:
  virtual ~FileLock() = default;
};

class Env {
 public:
  virtual ~Env() = default;

  // The real file system. Never null; lives for the whole process.
  static Env* Posix();

  // Opens `path` for reading and writing; creates an empty file when `create` is set and it
  // does not exist (the creation is durable after SyncDir of its directory).
  virtual Result<std::unique_ptr<File>> OpenFile(const std::string& path, bool create) = 0;
  // Opens an existing `path` for reading only (writes through it fail), so that files on a
  // read-only mount or without write permission can be read. Envs whose files are always
  // writable may keep this default.
  virtual Result<std::unique_ptr<File>> OpenFileForRead(const std::string& path) {
    return OpenFile(path, false);
  }
  virtual Status RemoveFile(const std::string& path) = 0;
  // Atomically replaces `to` with `from`.
  virtual Status RenameFile(const std::string& from, const std::string& to) = 0;
  // Creates a directory; OK when it already exists.
  virtual Status CreateDir(const std::string& path) = 0;
  // Removes an empty directory; an error when it holds anything (it is never emptied first).
  virtual Status RemoveDir(const std::string& path) = 0;
  // Makes creations, renames and removals of entries of `dir` durable.
  virtual Status SyncDir(const std::string& dir) = 0;
  // The names (not paths) of the entries of `dir`, without "." and "..", in no fixed order.
  virtual Result<std::vector<std::string>> ListDir(const std::string& dir) = 0;
  virtual bool FileExists(const std::string& path) = 0;
  virtual Result<uint64_t> FileSize(const std::string& path) = 0;
  // Takes an exclusive lock on `path` (creating it). kUnavailable when another holder (another
  // process, or another open in this process) has it.
  virtual Result<std::unique_ptr<FileLock>> LockFile(const std::string& path) = 0;
};

// Joins a directory and a file name.
std::string JoinPath(std::string_view dir, std::string_view name);

}  // namespace runnel::env

#endif  // RUNNEL_ENV_ENV_H_
