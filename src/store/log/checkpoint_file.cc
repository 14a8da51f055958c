#include "store/log/checkpoint_file.h"

#include "store/log/log_store_internal.h"

namespace runnel::log {

Status WriteCheckpointFile(env::Env* env, const std::string& dir, const CheckpointJob& job) {
  const std::string final_path = env::JoinPath(dir, CheckpointName(job.seq));
  const std::string tmp_path = final_path + ".tmp";
  Status written = [&]() -> Status {
    RUNNEL_ASSIGN_OR_RETURN(auto file, env->OpenFile(tmp_path, true));
    RUNNEL_RETURN_IF_ERROR(file->Truncate(0));
    std::string_view parts[] = {job.header, job.body};
    RUNNEL_RETURN_IF_ERROR(file->WriteAt(0, parts));
    RUNNEL_RETURN_IF_ERROR(file->Sync());
    return env->RenameFile(tmp_path, final_path);
  }();
  if (!written.ok()) {
    // A partial file would hold on to the space a full disk is short of until the next open.
    Status removed = env->RemoveFile(tmp_path);
    (void)removed;
    return written;
  }
  RUNNEL_RETURN_IF_ERROR(env->SyncDir(dir));
  // Older checkpoints are no longer needed.
  auto names = env->ListDir(dir);
  if (names.ok()) {
    for (const std::string& name : *names) {
      uint64_t n;
      if (ParseNumbered(name, "checkpoint-", ".ckpt", &n) && n < job.seq) {
        Status s = env->RemoveFile(env::JoinPath(dir, name));
        (void)s;
      }
    }
  }
  return Status::OK();
}

}  // namespace runnel::log
