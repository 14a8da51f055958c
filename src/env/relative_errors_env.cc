#include "env/relative_errors_env.h"

#include <utility>

namespace runnel::env {
namespace {

bool StartsWord(std::string_view text, size_t i) {
  if (i == 0) return true;
  const char c = text[i - 1];
  return c == ' ' || c == '\'' || c == '"' || c == '(' || c == '=';
}

bool EndsWord(std::string_view text, size_t i) {
  if (i >= text.size()) return true;
  const char c = text[i];
  return c == ' ' || c == '\'' || c == '"' || c == ':' || c == ',' || c == ')';
}

template <typename T>
Result<T> RelativeResult(const RelativeErrorsEnv& env, Result<T> result) {
  if (result.ok()) return result;
  return env.Relative(result.status());
}

class RelativeErrorsFile final : public File {
 public:
  RelativeErrorsFile(const RelativeErrorsEnv* env, std::unique_ptr<File> base)
      : env_(env), base_(std::move(base)) {}

  Status WriteAt(uint64_t offset, std::span<const std::string_view> pieces) override {
    return env_->Relative(base_->WriteAt(offset, pieces));
  }
  Result<size_t> ReadAt(uint64_t offset, size_t n, char* dst) const override {
    return RelativeResult(*env_, base_->ReadAt(offset, n, dst));
  }
  Status Sync() override { return env_->Relative(base_->Sync()); }
  Status Truncate(uint64_t size) override { return env_->Relative(base_->Truncate(size)); }
  Result<uint64_t> Size() const override { return RelativeResult(*env_, base_->Size()); }

 private:
  const RelativeErrorsEnv* const env_;
  const std::unique_ptr<File> base_;
};

}  // namespace

std::string RelativizePaths(std::string_view text, std::string_view root) {
  while (root.size() > 1 && root.back() == '/') root.remove_suffix(1);
  if (root.empty()) return std::string(text);
  const std::string prefix = root == "/" ? std::string(root) : std::string(root) + "/";
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    if (StartsWord(text, i)) {
      const std::string_view rest = text.substr(i);
      if (rest.starts_with(prefix)) {
        // "<root>/name" loses its prefix; "<root>/" alone is the root.
        if (EndsWord(text, i + prefix.size())) out += '.';
        i += prefix.size();
        continue;
      }
      if (rest.starts_with(root) && EndsWord(text, i + root.size())) {
        out += '.';
        i += root.size();
        continue;
      }
    }
    out += text[i];
    ++i;
  }
  return out;
}

Status RelativizePaths(const Status& status, std::string_view root) {
  if (status.ok()) return status;
  std::string message = RelativizePaths(status.message(), root);
  if (message == status.message()) return status;
  return status.WithMessage(message);
}

RelativeErrorsEnv::RelativeErrorsEnv(Env* base, std::string root)
    : base_(base), root_(std::move(root)) {}

Result<std::unique_ptr<File>> RelativeErrorsEnv::OpenFile(const std::string& path, bool create) {
  auto file = base_->OpenFile(path, create);
  if (!file.ok()) return Relative(file.status());
  return std::unique_ptr<File>(std::make_unique<RelativeErrorsFile>(this, std::move(*file)));
}

Result<std::unique_ptr<File>> RelativeErrorsEnv::OpenFileForRead(const std::string& path) {
  auto file = base_->OpenFileForRead(path);
  if (!file.ok()) return Relative(file.status());
  return std::unique_ptr<File>(std::make_unique<RelativeErrorsFile>(this, std::move(*file)));
}

Status RelativeErrorsEnv::RemoveFile(const std::string& path) {
  return Relative(base_->RemoveFile(path));
}

Status RelativeErrorsEnv::RenameFile(const std::string& from, const std::string& to) {
  return Relative(base_->RenameFile(from, to));
}

Status RelativeErrorsEnv::CreateDir(const std::string& path) {
  return Relative(base_->CreateDir(path));
}

Status RelativeErrorsEnv::RemoveDir(const std::string& path) {
  return Relative(base_->RemoveDir(path));
}

Status RelativeErrorsEnv::SyncDir(const std::string& dir) {
  return Relative(base_->SyncDir(dir));
}

Result<std::vector<std::string>> RelativeErrorsEnv::ListDir(const std::string& dir) {
  return RelativeResult(*this, base_->ListDir(dir));
}

Result<uint64_t> RelativeErrorsEnv::FileSize(const std::string& path) {
  return RelativeResult(*this, base_->FileSize(path));
}

Result<std::unique_ptr<FileLock>> RelativeErrorsEnv::LockFile(const std::string& path) {
  return RelativeResult(*this, base_->LockFile(path));
}

}  // namespace runnel::env
