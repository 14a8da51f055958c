// RelativeErrorsEnv: wraps another Env so that the errors it returns name the files under one
// root directory relative to that root.
//
// A store keeps its files in a data directory and returns the errors of its Env to its callers,
// who may pass them on to remote clients (the HTTP server puts a Status message in the error
// body). Where the data directory lives is the operator's business, not a client's. Through
// this wrapper "open '/var/lib/runnel/data/00000000000000000002.log': Too many open files"
// reads "open '00000000000000000002.log': Too many open files", and the root itself is ".".
//
// Only the messages of failed calls change (codes are kept). Paths go to the wrapped Env as
// given, and names come back from it (ListDir) as it gives them.
//
// Thread-safety: as the wrapped Env; the wrapper's own state (the root) is immutable.
#ifndef RUNNEL_ENV_RELATIVE_ERRORS_ENV_H_
#define RUNNEL_ENV_RELATIVE_ERRORS_ENV_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "env/env.h"

namespace runnel::env {

// `text` with every path under `root` written relative to it: "<root>/a/b" becomes "a/b", and
// `root` itself (alone or with a trailing '/') becomes ".". A path is recognised only where it
// starts a word (at the start of `text`, or after a space, a quote, '(' or '=') and where `root`
// ends at a '/' or at a word end (the end of `text`, a space, a quote, ':', ',' or ')'), so a
// root of "/data" leaves "/database" alone. `root` may carry trailing slashes; an empty root
// changes nothing.
std::string RelativizePaths(std::string_view text, std::string_view root);

// `status` with its message passed through RelativizePaths (same code and details).
Status RelativizePaths(const Status& status, std::string_view root);

class RelativeErrorsEnv final : public Env {
 public:
  // `base` is not owned and must outlive this env and every file opened through it. `root` is
  // the directory as the caller passes it in paths (absolute or relative).
  RelativeErrorsEnv(Env* base, std::string root);

  Result<std::unique_ptr<File>> OpenFile(const std::string& path, bool create) override;
  Result<std::unique_ptr<File>> OpenFileForRead(const std::string& path) override;
  Status RemoveFile(const std::string& path) override;
  Status RenameFile(const std::string& from, const std::string& to) override;
  Status CreateDir(const std::string& path) override;
  Status RemoveDir(const std::string& path) override;
  Status SyncDir(const std::string& dir) override;
  Result<std::vector<std::string>> ListDir(const std::string& dir) override;
  bool FileExists(const std::string& path) override { return base_->FileExists(path); }
  Result<uint64_t> FileSize(const std::string& path) override;
  Result<std::unique_ptr<FileLock>> LockFile(const std::string& path) override;

  // `status` with the paths under the root made relative.
  Status Relative(const Status& status) const { return RelativizePaths(status, root_); }

 private:
  Env* const base_;
  const std::string root_;
};

}  // namespace runnel::env

#endif  // RUNNEL_ENV_RELATIVE_ERRORS_ENV_H_
