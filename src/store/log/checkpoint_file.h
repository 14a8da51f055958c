// The checkpoint file: a checkpoint the writer thread has encoded (a CheckpointJob), and
// putting it on disk.
//
// Thread-safety: WriteCheckpointFile keeps no state; it may run on any thread (the log store
// runs it on a thread of its own for periodic checkpoints) while nothing else writes the job.
// It touches only checkpoint files of the directory, through the env.
#ifndef RUNNEL_STORE_LOG_CHECKPOINT_FILE_H_
#define RUNNEL_STORE_LOG_CHECKPOINT_FILE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "env/env.h"
#include "runnel/status.h"

namespace runnel::log {

// One checkpoint, as LogStore::BeginCheckpoint leaves it for the file to be written and for
// LogStore::FinishCheckpoint after that.
struct CheckpointJob {
  uint64_t seq = 0;
  uint64_t log_bytes = 0;  // bytes_since_checkpoint_ that this checkpoint covers
  std::string header, body;
  std::vector<uint64_t> dead_segments;
};

// Writes `job` as checkpoint file job.seq of `dir`: written to a temporary file, synced and
// renamed into place, the directory synced, then older checkpoint files removed. A failed
// write removes its temporary file (on a full disk it holds space the store is short of).
Status WriteCheckpointFile(env::Env* env, const std::string& dir, const CheckpointJob& job);

}  // namespace runnel::log

#endif  // RUNNEL_STORE_LOG_CHECKPOINT_FILE_H_
