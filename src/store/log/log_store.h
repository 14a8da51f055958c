// LogStore: the embedded log store (see include/runnel/log_store.h for what it promises).
//
// Structure:
// - One writer thread owns every mutation. Callers enqueue Ops; the writer validates them
//   against its "reserved" view (what the stream will look like once everything queued before
//   commits), encodes frames, writes a group with one vectored write, syncs it (per the
//   durability mode), then applies the frames to the visible state under state_mu_ and
//   completes the waiters. The visible state is changed by applying frame bytes, the same code
//   recovery uses to replay the log, so a live store and a recovered one agree by construction.
// - Update, delete and truncate are barriers: the writer commits the group before them and
//   commits them alone. Appends, cursor commits and stream creations share groups.
// - The index per stream is a vector of BatchRefs (one per append frame still holding retained
//   records: first offset, segment, byte position, frame length) plus per-record payload sizes
//   (and key sizes, in streams that have keys). A read is a binary search, then one pread per
//   run of adjacent frames.
//
// Thread-safety: all public methods may be called from any thread. state_mu_ guards the visible
// state (readers share it, the writer takes it exclusively to apply). Fields marked
// "writer-only" are touched by the writer thread alone (and by Open before it starts).
// The lock analysis (base/mutex.h) checks every function but two kinds, marked
// RUNNEL_NO_THREAD_SAFETY_ANALYSIS: the recovery that Open runs before any other thread exists
// (Open, Recover, LoadCheckpoint, ReplaySegment, UndoCreation), and the writer thread's own
// steps (EncodeOp, CommitGroup, Relocate), which read state_mu_'s fields without the lock
// because that thread is their only writer, and take it exclusively to change them. The
// analysis cannot express "guarded, except for the one thread that writes".
// Callbacks and the tail listener run on the writer thread: they must not call the store's
// synchronous writing methods (CreateStream, UpdateStream, DeleteStream, TruncatePrefix,
// CommitCursor, Flush), which wait for that thread.
//
// Files. This class is a facade: its state lives here, its member functions in files named for
// their concerns, and the parts with state and rules of their own are classes of their own.
// - log_store.cc: options, Open and the destructor, UndoCreation, CommitStats and the public
//   methods that queue an op or read the state.
// - log_recovery.cc: Recover, LoadCheckpoint, ReplaySegment, ScrubTail, SalvageNote.
// - log_apply.cc: the visible state: lookups, naming (Adopt, Forget), Snapshot, and applying
//   frames (ApplyFrame, DropHead, ApplyDrops, ReferenceLeft, Compact).
// - log_writer.cc: the writer thread: the queue, WriterLoop, group commit waits, Prepare and
//   EncodeOp, CommitGroup, FinishOp.
// - log_segments.cc: segment files: the preparer thread and the space reserve, WriteFrames,
//   Repair, RollSegment, SyncActive, SyncLog.
// - log_checkpoint.cc: checkpoints (foreground and background) and DeleteDeadSegments.
// - log_cleaner.cc: Clean, Relocate, and reclaiming space on a full disk.
// - log_read.cc: Read, ReadAt, UnreadableAt.
// - log_scrub.cc: the background scrub and damage reports.
// - stream_table.{h,cc}: StreamState (one stream's state and index) and StreamTable (streams by
//   id). tail_cache.{h,cc}: TailCache. checkpoint_file.{h,cc}: CheckpointJob and writing its
//   file. cleaner_policy.{h,cc}: which segments the cleaner and a reclamation take.
//   log_store_internal.h: what those files share (file names, buffers, the writer's limits,
//   SegmentWindow, Op).
#ifndef RUNNEL_STORE_LOG_LOG_STORE_H_
#define RUNNEL_STORE_LOG_LOG_STORE_H_

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/mutex.h"
#include "env/env.h"
#include "env/relative_errors_env.h"
#include "runnel/log_store.h"
#include "runnel/store.h"
#include "store/log/checkpoint_file.h"
#include "store/log/log_codec.h"
#include "store/log/log_format.h"
#include "store/log/stream_table.h"
#include "store/log/tail_cache.h"
#include "store/natural_index.h"

namespace runnel::log {

class LogStore final : public Store {
 public:
  static Result<std::unique_ptr<LogStore>> Open(const LogStoreOptions& options)
      RUNNEL_NO_THREAD_SAFETY_ANALYSIS;
  // Stops the writer after it drains the queue, writes a final checkpoint, releases the lock.
  ~LogStore() override;

  std::string_view Name() const override { return "log"; }
  std::string Durability() const override;

  Result<StreamInfo> CreateStream(const StreamSpec& spec) override;
  Result<StreamInfo> GetStream(std::string_view ns, std::string_view name) override;
  Result<StreamInfo> GetStreamById(StreamId id) override;
  Result<std::vector<StreamInfo>> ListStreamsByNaturalKey(std::string_view ns,
                                                          std::string_view from_key,
                                                          size_t limit) override;
  Result<std::vector<StreamInfo>> ListStreams(std::string_view ns, std::string_view start_after,
                                              size_t limit) override;
  Status UpdateStream(StreamId id, const std::optional<StreamRetention>& retention,
                      std::string_view attributes,
                      std::optional<std::string_view> expected_attributes,
                      std::optional<uint64_t> expected_next_offset) override;
  Status DeleteStream(StreamId id) override;
  void Append(AppendRequest request, AppendCallback done) override;
  Result<std::vector<StoredRecord>> Read(StreamId id, uint64_t from, size_t limit,
                                         size_t max_bytes) override;
  Result<std::optional<StoredRecord>> ReadAt(StreamId id, uint64_t offset) override;
  Result<uint64_t> TruncatePrefix(StreamId id, uint64_t through, bool respect_cursors) override;
  // At most kMaxDroppedPerFrame offsets per call (kInvalidArgument beyond): one frame, so the
  // call is atomic across a crash. Committed alone, like a truncation.
  Result<uint64_t> DropRecords(StreamId id, const std::vector<uint64_t>& offsets) override;
  bool SupportsDropRecords() const override { return true; }
  Result<uint64_t> CommitCursor(StreamId id, std::string_view consumer, uint64_t offset,
                                uint64_t now_ms) override;
  Result<std::optional<CursorState>> GetCursor(StreamId id, std::string_view consumer) override;
  Result<std::vector<CursorState>> ListCursors(StreamId id) override;
  Result<bool> DeleteCursor(StreamId id, std::string_view consumer) override;
  Result<std::optional<ProducerState>> GetProducer(StreamId id,
                                                   std::string_view producer_id) override;
  // Waits until everything acknowledged before the call is durable (fdatasync), in every mode.
  Status Flush() override;
  void SetTailListener(TailListener listener) override;
  StoreCommitStats CommitStats() const override;

  // --- introspection for tests and `runnel check` ---
  // What recovery found and did (truncated tail, salvaged corruption), one line each.
  std::vector<std::string> RecoveryNotes() const;
  // How many reads were served (partly) from the tail cache, and how many batches needed a pread.
  uint64_t cache_hits() const { return cache_hits_.load(); }
  uint64_t cache_misses() const { return cache_misses_.load(); }
  // Tests: how many batch references the stream's index holds (0 for an unknown stream).
  size_t BatchRefsForTesting(StreamId id);
  // Writes a checkpoint now and deletes segments nothing needs any more.
  Status CheckpointNow();
  // Runs the cleaner's pass now (as before a periodic checkpoint), then CheckpointNow.
  Status CleanNow();
  // Numbers of the segment files currently in the directory.
  std::vector<uint64_t> SegmentNumbers() const;
  // Verifies every written segment now, without the rate limit, reporting damage as the
  // background scrub does (LogStoreOptions::on_damage, CommitStats().damaged_frames). Tests
  // and tools; safe to call while the store serves.
  Status ScrubOnce();

 private:
  // The per-stream state and the table of streams by id (stream_table.h).
  using BatchRef = log::BatchRef;
  using StreamExtras = log::StreamExtras;
  using PackedName = log::PackedName;
  using StreamState = log::StreamState;
  using StreamTable = log::StreamTable;
  static constexpr uint32_t kLostSegment = log::kLostSegment;
  static constexpr uint32_t kDroppedBit = log::kDroppedBit;
  // The widest hole salvage indexes (4 bytes per record); past it the stream starts over after
  // the damage, as if its earlier records had been trimmed.
  static constexpr uint64_t kMaxHoleRecords = 1u << 24;
  // A live read of one record at the end of a reference walks at most this many bytes of frames.
  static constexpr uint32_t kMaxMergedBatchBytes = 16u << 10;
  struct Segment {
    uint64_t number = 0;
    std::shared_ptr<env::File> file;
    uint64_t live_bytes = 0;  // bytes of frames still referenced by some BatchRef
    // Of those, about how many are payloads and keys of records DropRecords removed (the
    // cleaner leaves them behind when it copies the frames). An estimate (records below the
    // head are not taken out again), used to choose what the cleaner copies; never to decide
    // that a segment can be deleted, which live_bytes alone does.
    uint64_t dropped_bytes = 0;
    // What the cleaner's copy of the segment's live frames would take, about.
    uint64_t CleanableBytes() const { return live_bytes - std::min(dropped_bytes, live_bytes); }
    uint64_t end = 0;  // end of written frames (known for replayed and written ones)
  };
  enum class OpKind {
    kAppend,
    kCursor,
    kCursorDelete,
    kCreate,
    kUpdate,
    kDelete,
    kTruncate,
    kDropRecords,
    kFlush,
    kCheckpoint
  };
  struct Op;

  explicit LogStore(const LogStoreOptions& options);

  // --- recovery (log_recovery.cc; SegmentPath in log_segments.cc) ---
  Status Recover() RUNNEL_NO_THREAD_SAFETY_ANALYSIS;
  // Records a recovery note about damage salvage skipped, and that it did.
  void SalvageNote(std::string note);
  // Loads the checkpoint file numbered `file_seq`. *segment_short is set when the checkpoint
  // verifies but names bytes past the end of a segment file: the segment lost synced data (the
  // checkpoint is written after its frames are durable), which is damage, not a checkpoint to
  // pass over.
  Status LoadCheckpoint(uint64_t file_seq, uint64_t* replay_segment, uint64_t* replay_pos,
                        bool* segment_short) RUNNEL_NO_THREAD_SAFETY_ANALYSIS;
  Status ReplaySegment(uint64_t number, uint64_t from, bool last) RUNNEL_NO_THREAD_SAFETY_ANALYSIS;
  Status ScrubTail(Segment& seg, uint64_t from);
  std::string SegmentPath(uint64_t number) const;

  // --- applying frames, live and replay (log_apply.cc) ---
  Status ApplyFrame(FrameType type, std::string_view body, uint32_t segment, uint32_t pos,
                    uint32_t len, bool replay) RUNNEL_REQUIRES(state_mu_);
  // An append batch's frame at (segment, pos, len), from its decoded header and record sizes;
  // the writer calls it with what it encoded, without decoding the frame again.
  Status ApplyAppendBatch(StreamState* s, AppendBatchHeader h,
                          const std::vector<std::pair<uint32_t, uint32_t>>& sizes, uint32_t segment,
                          uint32_t pos, uint32_t len, bool replay) RUNNEL_REQUIRES(state_mu_);
  // Removes the n oldest records of `s` (dropped ones count), then any dropped records that
  // would be its new head, and releases the references below the new head.
  void DropHead(StreamState& s, uint64_t n) RUNNEL_REQUIRES(state_mu_);
  // Applies a drop-records frame: marks the records at `offsets` (ascending) dropped, takes
  // their bytes out of the stream's and their segment's counts, turns a reference whose records
  // are all dropped into a dead one (kLostSegment) and moves the head past dropped records.
  // Offsets that hold no record are ignored. Returns how many records it removed.
  uint64_t ApplyDrops(StreamState& s, const std::vector<uint64_t>& offsets)
      RUNNEL_REQUIRES(state_mu_);
  // The offset one past batches[ref]'s records.
  static uint64_t RefEnd(const StreamState& s, size_t ref) {
    return ref + 1 < s.batches.size() ? s.batches[ref + 1].first_offset : s.next;
  }
  // A reference left segment `segment` (released below the head, or all its records dropped):
  // its `len` bytes are no longer live, and `dropped` bytes leave the segment's dropped_bytes.
  // For an old segment the space counts toward the cleaner and the checkpoint.
  void ReferenceLeft(uint32_t segment, uint64_t len, uint64_t dropped) RUNNEL_REQUIRES(state_mu_);
  // store::RecordBytes of the dropped records of `s` in [lo, hi) at or above the head.
  static uint64_t DroppedBytesIn(const StreamState& s, uint64_t lo, uint64_t hi);
  static void Compact(StreamState& s);
  StreamState* FindLocked(StreamId id) const RUNNEL_REQUIRES_SHARED(state_mu_);
  StreamState* FindByNameLocked(std::string_view ns, std::string_view name) const
      RUNNEL_REQUIRES_SHARED(state_mu_);
  // Fills the spec fields of `s` (interning ns and content type) and indexes it by name; the
  // caller inserts it into streams_. Undone by Forget. False when another stream has the name
  // (`s` is then not indexed by name; the caller refuses what it was loading).
  [[nodiscard]] bool Adopt(StreamState& s, StreamSpec spec) RUNNEL_REQUIRES(state_mu_);
  void Forget(StreamState& s) RUNNEL_REQUIRES(state_mu_);
  static StreamInfo Snapshot(const StreamState& s);

  // --- writer (log_writer.cc; writing, syncing and rolling segments in log_segments.cc) ---
  Status Submit(const std::shared_ptr<Op>& op);  // enqueue and wait
  void Enqueue(std::shared_ptr<Op> op);
  void WriterLoop();
  // Writer thread, after each round of groups: the interval mode's sync, reclaiming space on a
  // full disk, and periodic checkpoints (a background one finished or waited for first).
  void AfterRound();
  // fsync mode: waits briefly (see LogStoreOptions::group_commit_wait_us) until the queue holds
  // last_group_ops_ ops. `lock` holds queue_mu_.
  void WaitForFullerGroup(MutexLock& lock) RUNNEL_REQUIRES(queue_mu_);
  // Checks `op` against the reserved state and appends its frame (if any) to group_buf_.
  void Prepare(Op& op);
  void EncodeOp(Op& op) RUNNEL_NO_THREAD_SAFETY_ANALYSIS;  // Prepare's work, less the bookkeeping
  // The writer's apply of an append it encoded and committed (ApplyAppendBatch from the op,
  // the frame not decoded again); moves the producer and attributes out of op.append.
  Status ApplyEncodedAppend(Op& op, uint32_t segment, uint32_t pos, uint32_t len)
      RUNNEL_REQUIRES(state_mu_);
  // of where the frame is
  // A cursor's offset as the group being prepared leaves it (nullopt: none, or removed).
  std::optional<uint64_t> PendingCursor(const StreamState& s,
                                        const std::pair<StreamId, std::string>& key) const;
  // The stream's next offset as the group being prepared leaves it.
  uint64_t ReservedNext(const StreamState& s) const;
  void CommitGroup(std::vector<std::shared_ptr<Op>>& group,
                   bool force_sync) RUNNEL_NO_THREAD_SAFETY_ANALYSIS;
  // Writes `pieces` (`total` bytes holding `records` appended records) at the end of the log,
  // syncing when `sync` (or when the interval mode's deadline passed). With `leave_tail`
  // (frames carrying records, relocated ones included) the last TailReserve() bytes of a
  // segment are left to the other frames. A full disk is Status::NoSpace.
  Status WriteFrames(const std::vector<std::string_view>& pieces, uint64_t total, uint64_t records,
                     bool sync, bool leave_tail, uint64_t* pos_out);
  // Bytes at the end of each segment that frames carrying records leave to the others
  // (deletes, truncations, cursor commits, checkpoint markers), so they fit on a full disk.
  uint64_t TailReserve() const;
  Status Repair();
  Status RollSegment(uint64_t min_capacity);
  Status SyncActive();
  // fdatasync of the active segment on the commit path: counts it (and the records and bytes it
  // made durable) in the commit stats.
  Status SyncLog(env::File& file);
  // --- checkpoints (log_checkpoint.cc) ---
  // A checkpoint in three steps. Begin (writer thread): the marker frame, then the body built
  // from the state as of the marker. WriteCheckpointFile (checkpoint_file.h, any thread): the
  // file written, synced and renamed into place, older checkpoints removed. Finish (writer
  // thread, once the file is durable): the bookkeeping and the segments that were dead at
  // Begin are deleted.
  using CheckpointJob = log::CheckpointJob;  // checkpoint_file.h
  Status BeginCheckpoint(CheckpointJob* job);
  void FinishCheckpoint(const CheckpointJob& job);
  // All three on the calling (writer) thread, after any checkpoint in the background is done.
  Status WriteCheckpoint();
  // Periodic checkpoints (writer thread): Begin here, the file in the background (a million
  // streams make a 100+ MB file, which appends need not wait for), Finish at a later round.
  // Once this many checkpoint intervals are logged since the last durable checkpoint, the
  // writer waits for the one in the background before it commits more.
  static constexpr uint64_t kMaxCheckpointBacklog = 4;
  void StartBackgroundCheckpoint();
  // Writer thread: finishes a background checkpoint that is done (or, with `wait`, waits for
  // it). False while one is still being written.
  bool PollBackgroundCheckpoint(bool wait);
  // Writer thread, with a checkpoint in the background: waits for it to be written and
  // finished, counts the wait in the commit stats, and warns (at most once a minute).
  void WaitForBackgroundCheckpoint();
  void CheckpointFailed(const Status& s);
  void DeleteDeadSegments(const std::vector<uint64_t>& dead);
  // --- the cleaner (log_cleaner.cc) ---
  // The cleaner, before each periodic checkpoint: copies the live batches of the emptiest old
  // segments below options_.cleaner_live_ratio (at most one checkpoint interval of live bytes
  // per pass) to the head of the log, grouped by stream, so the checkpoint can delete them.
  Status Clean();
  // Writer thread: copies every live batch of `victims` (old segments) to the head of the log
  // as relocated-batch frames, in stream and offset order, synced; the index then points at
  // the copies. Offsets do not change, and a crash at any point leaves every record reachable
  // (each relocated frame carves its frame off the front of its reference).
  Status Relocate(const std::vector<uint64_t>& victims) RUNNEL_NO_THREAD_SAFETY_ANALYSIS;

  // --- space on a full disk (ReclaimSpace and ReclaimVictims in log_cleaner.cc, the reserve in
  // log_segments.cc) ---
  // The writer found the disk full (disk_full_) and something may be reclaimable
  // (reclaim_due_). Relocates the live records of the emptiest old segments that fit in one
  // segment, writes a checkpoint that no longer needs them and deletes them, giving up the
  // reserve when a step needs space the disk does not have; the preparer, paused meanwhile,
  // then makes the reserve again before anything else. Writer thread. True when it deleted
  // segments.
  bool ReclaimSpace();
  // Old segments at most 7/8 live, emptiest first, as many as one segment holds the live
  // bytes of; by segment number.
  std::vector<uint64_t> ReclaimVictims() const;
  std::string ReservePath() const;
  // Writer thread: asks the preparer to make (or grow, or shrink) the reserve when it holds
  // less than a segment plus 9/8 of the last checkpoint file (or more than twice its target):
  // then it is made a segment plus 3/2 of that checkpoint.
  void RequestReserve();
  // Preparer thread: makes the reserve `target` bytes of zeros, synced (stopping early when
  // halted); returns its size on disk afterwards.
  uint64_t MakeReserve(uint64_t target);
  // Writer thread: the preparer drops what it is writing and starts nothing until
  // ResumePreparer (a request made meanwhile is held), so that the space a reclamation frees
  // goes to the reclamation. Resume asks for the reserve first, then the next segment.
  void PausePreparer();
  void ResumePreparer();
  // Writer thread, preparer paused: gives up `bytes` of the reserve (truncating it; all of it
  // removes the file); false when there is none to give.
  bool ShrinkReserve(uint64_t bytes);
  // Room for a checkpoint like the last one, with a margin: the part of the reserve a
  // reclamation keeps for the checkpoint after its copies.
  uint64_t CheckpointRoom() const;
  // log_store.cc. Open failed, or a store opened on a new directory closes without having written a
  // frame: removes what the open created (the first segment, LOCK, the directory).
  void UndoCreation() RUNNEL_NO_THREAD_SAFETY_ANALYSIS;
  // log_writer.cc. Completes `op`: runs its callback (after the tail listener, for a committed
  // append) or wakes its waiter.
  void FinishOp(Op& op);
  void FinishOp(Op& op, const std::shared_ptr<const TailListener>& listener);
  std::shared_ptr<const TailListener> Listener() const;

  const LogStoreOptions options_;
  // options_.env (or the real file system) with its errors naming files relative to
  // options_.dir; every file access goes through it (env_ points at it).
  env::RelativeErrorsEnv relative_env_;
  env::Env* const env_;
  std::unique_ptr<env::FileLock> lock_;
  std::vector<std::string> recovery_notes_;  // written by Open only

  mutable SharedMutex state_mu_;
  StreamTable streams_ RUNNEL_GUARDED_BY(state_mu_);
  // Streams of one namespace ordered by name; lookups take the name.
  struct NameLess {
    using is_transparent = void;
    bool operator()(const StreamState* a, const StreamState* b) const {
      return a->name.view() < b->name.view();
    }
    bool operator()(const StreamState* a, std::string_view b) const { return a->name.view() < b; }
    bool operator()(std::string_view a, const StreamState* b) const { return a < b->name.view(); }
  };
  using NameSet = std::set<const StreamState*, NameLess>;
  // ns -> its streams by name. An ns entry lives while it has streams (StreamState::ns points
  // at its key).
  std::map<std::string, NameSet, std::less<>> names_ RUNNEL_GUARDED_BY(state_mu_);
  // The same streams by (ns, natural key), for ListStreamsByNaturalKey; kept by Adopt and Forget.
  struct StateName {
    std::string_view operator()(const StreamState* s) const { return s->name.view(); }
  };
  store::NaturalIndex<const StreamState*, StateName> natural_ RUNNEL_GUARDED_BY(state_mu_);
  // Content types in use -> how many streams use them (StreamState::content_type points here).
  std::map<std::string, uint64_t, std::less<>> content_types_ RUNNEL_GUARDED_BY(state_mu_);
  std::map<uint64_t, Segment> segments_ RUNNEL_GUARDED_BY(state_mu_);
  StreamId next_stream_id_ RUNNEL_GUARDED_BY(state_mu_) = 1;
  // The tail cache (tail_cache.h): the groups most recently written, for reads.
  TailCache cache_ RUNNEL_GUARDED_BY(state_mu_);
  // ApplyFrame's scratch space for the record sizes of one batch.
  std::vector<std::pair<uint32_t, uint32_t>> apply_sizes_ RUNNEL_GUARDED_BY(state_mu_);
  // Live appends merge a frame into the stream's last reference only when that reference starts
  // inside the group being applied (at or after this position of the active segment), so a
  // reference never spans two cached groups and live reads keep hitting the tail cache. Replay
  // never merges: every frame it applies starts a reference, so the cleaner's relocations
  // (which move whole live references, frame by frame) always find their frame at the start of
  // one. Only what was appended since the last checkpoint is indexed frame by frame.
  uint32_t merge_floor_pos_ RUNNEL_GUARDED_BY(state_mu_) = 0;

  // writer-only
  std::string group_buf_;  // the frames of the group being prepared, in log order
  uint64_t active_segment_ = 0;
  uint64_t active_pos_ = 0;
  uint64_t active_capacity_ = 0;
  uint64_t dirty_end_ = 0;  // > active_pos_ when a failed write may have left bytes behind
  bool repair_needed_ = false;
  bool unsynced_ = false;
  uint64_t unsynced_records_ = 0;  // appended records written since the last SyncLog
  uint64_t unsynced_bytes_ = 0;    // log bytes written since the last SyncLog
  std::chrono::steady_clock::time_point last_sync_;
  uint64_t sync_mean_us_ = 0;  // moving mean of fdatasync time, for the group-commit wait
  // The group size the next round waits for: the ops of the previous round plus those that
  // queued while it was written and synced. Counting the latter lets two groups that split
  // apart (after one slow client) merge again instead of alternating for good.
  size_t last_group_ops_ = 0;
  size_t queued_at_ack_ = 0;  // queue size when the last group's acknowledgements began
  uint64_t bytes_since_checkpoint_ = 0;
  // Writer thread only. A segment other than the active one lost its last live record
  // (delete, retention, prune): a checkpoint lets it be deleted without waiting for the
  // interval's worth of new log, which a full disk would never let come.
  bool segment_freed_ = false;
  // Writer thread only: bytes of batches that died in segments other than the active one since
  // the last periodic checkpoint began; they count toward its interval.
  uint64_t freed_since_checkpoint_ = 0;
  std::chrono::steady_clock::time_point last_freeing_checkpoint_{};
  // Writer thread only: a failed periodic checkpoint is retried after a growing delay (1 s,
  // doubling to 64 s), not after every group, and said once per attempt on stderr.
  uint32_t checkpoint_failures_ = 0;
  // Set during recovery when salvage skipped damage (SalvageNote): Open then checkpoints at once.
  bool salvaged_ = false;
  // Set by Open: what it created (for UndoCreation), and whether it failed. fresh_: the
  // directory held no log, so recovery made segment 1.
  bool created_dir_ = false;
  bool created_lock_ = false;
  bool fresh_ = false;
  bool open_failed_ = false;
  // Writer thread only: a frame has been written to the log since Open.
  bool wrote_ = false;
  // Writer thread only. disk_full_: a write, a segment or a checkpoint was refused for lack of
  // space, and no segment was made since. reclaim_due_: live bytes left an old segment (or a
  // segment was sealed, or a checkpoint failed for space) since the last ReclaimSpace, or that
  // one failed and is to be tried again.
  bool disk_full_ = false;
  bool reclaim_due_ = true;
  // After a reclamation that failed: when the next may run without new deaths, and how many
  // failed in a row (the delay doubles).
  std::chrono::steady_clock::time_point reclaim_retry_at_{};
  uint32_t reclaim_failures_ = 0;
  bool reserve_requested_ = false;  // the first write after Open asks for the reserve
  uint64_t segments_deleted_ = 0;   // writer thread only: by DeleteDeadSegments
  // Writer thread only: the last failure to make a new segment, and when (RollSegment).
  Status roll_failure_;
  std::chrono::steady_clock::time_point roll_failed_at_{};
  std::chrono::steady_clock::time_point checkpoint_retry_at_{};
  uint64_t checkpoint_seq_ = 0;
  // Writer thread only: the checkpoint whose file is being written in the background, and the
  // result of that write.
  std::unique_ptr<CheckpointJob> background_checkpoint_;
  std::future<Status> background_checkpoint_done_;
  std::thread background_checkpoint_thread_;
  std::chrono::steady_clock::time_point last_checkpoint_wait_warning_{};  // writer thread
  // kMaxCheckpointBacklog checkpoint intervals, in bytes.
  const uint64_t checkpoint_backlog_bytes_;
  // Body size of the last checkpoint loaded or written: the next one reserves about that much.
  uint64_t checkpoint_body_bytes_ = 0;
  // nullopt: removed by an op of the group.
  std::map<std::pair<StreamId, std::string>, std::optional<uint64_t>> pending_cursors_;
  // Creates queued in the current group: their names, and the id the next one gets.
  std::set<std::pair<std::string, std::string>> pending_names_;
  // Attributes set by appends queued in the current group, for expected_attributes.
  std::unordered_map<StreamId, std::string> pending_attributes_;
  // Producer (epoch, seq) of appends queued in the current group, for their compare-and-set.
  std::map<std::pair<StreamId, std::string>, std::pair<uint64_t, uint64_t>> pending_producers_;
  // What the appends queued in the current group reserve in their streams: the next offset
  // after them, and whether one of them closes the stream. StreamState holds the committed
  // values; a stream with no append in the group has no entry (ReservedNext).
  struct Reservation {
    uint64_t next;
    bool closed;
  };
  std::unordered_map<StreamId, Reservation> reserved_;
  StreamId reserved_next_id_ = 1;

  Mutex queue_mu_;
  std::condition_variable queue_cv_;
  std::vector<std::shared_ptr<Op>> queue_ RUNNEL_GUARDED_BY(queue_mu_);
  bool stopping_ RUNNEL_GUARDED_BY(queue_mu_) = false;
  // A background checkpoint's file is written: the writer wakes to finish it.
  bool checkpoint_written_ RUNNEL_GUARDED_BY(queue_mu_) = false;
  // While the writer waits for a fuller group: the queue size that wakes it (0 = not waiting).
  size_t group_target_ RUNNEL_GUARDED_BY(queue_mu_) = 0;
  std::thread writer_;

  // log_segments.cc. The helper thread "log-prepare": it creates the next segment (header + zeros,
  // synced) as
  // "<segment>.log.prep" ahead of time (when options_.prezero_segments), so a roll is a rename
  // instead of a segment-sized write on the writer's path, and it makes the space reserve
  // (RESERVE), which comes first when both are asked for.
  void PreparerLoop();
  void RequestPreparedSegment(uint64_t number);
  // The prepared file for `number`, waiting for it while the preparer is still writing it; null
  // when no preparation of `number` is under way or it failed (the caller creates it).
  std::shared_ptr<env::File> TakePreparedSegment(uint64_t number);
  // Each request is served by one preparation at most: the preparer consumes prep_wanted_ as
  // it starts (prep_busy_ names the segment it is writing), so a segment handed to a roll is
  // never wanted again and never written a second time under the roll's feet.
  Mutex prep_mu_;
  std::condition_variable prep_cv_;
  uint64_t prep_wanted_ RUNNEL_GUARDED_BY(prep_mu_) = 0;  // asked for, not started; 0 = none
  uint64_t prep_busy_ RUNNEL_GUARDED_BY(prep_mu_) = 0;    // being written; 0 = none
  uint64_t prep_ready_ RUNNEL_GUARDED_BY(prep_mu_) = 0;   // prep_file_'s segment
  std::shared_ptr<env::File> prep_file_ RUNNEL_GUARDED_BY(prep_mu_);
  bool prep_stop_ RUNNEL_GUARDED_BY(prep_mu_) = false;
  bool prep_paused_ RUNNEL_GUARDED_BY(prep_mu_) = false;
  uint64_t prep_held_ RUNNEL_GUARDED_BY(prep_mu_) = 0;  // a segment asked for while paused
  // The reserve: wanted (at reserve_target_ bytes), being written, and its size on disk.
  bool reserve_wanted_ RUNNEL_GUARDED_BY(prep_mu_) = false;
  uint64_t reserve_target_ RUNNEL_GUARDED_BY(prep_mu_) = 0;
  bool reserve_busy_ RUNNEL_GUARDED_BY(prep_mu_) = false;
  uint64_t reserve_size_ RUNNEL_GUARDED_BY(prep_mu_) = 0;
  // Set to make the preparer drop the file it is writing (a pause, the close).
  std::atomic<bool> prep_halt_{false};
  std::thread preparer_;

  // log_scrub.cc. The background scrub (LogStoreOptions::scrub_bytes_per_sec).
  void ScrubLoop();
  // Verifies segment `number` (if it is still sealed and present); `rate` bytes per second at
  // most (0: no limit). Returns false when the store is stopping.
  bool ScrubSegment(uint64_t number, uint64_t rate);
  // Counts the bytes of a segment scrubbed up to `pos` (past *counted) every MiB and, with a
  // `rate`, waits until they are due. False when the store is stopping.
  bool Pace(std::chrono::steady_clock::time_point started, uint64_t pos, uint64_t rate,
            uint64_t* counted);
  // Reports the damaged frame at (`segment`, `pos`) once: names the streams and offsets whose
  // live records it held.
  void ReportDamage(uint64_t segment, uint64_t pos, std::string_view why);
  // The Status of a read that starts at record `first` of stream `id`, which lies in a damaged
  // frame at (`segment`, `pos`).
  Status UnreadableAt(StreamId id, uint64_t first, uint64_t segment, uint64_t pos,
                      std::string_view why);
  Mutex scrub_mu_;
  std::condition_variable scrub_cv_;
  bool scrub_stop_ RUNNEL_GUARDED_BY(scrub_mu_) = false;
  std::thread scrubber_;
  mutable Mutex damage_mu_;
  std::set<std::pair<uint64_t, uint64_t>> damage_seen_ RUNNEL_GUARDED_BY(damage_mu_);
  std::atomic<uint64_t> scrubbed_bytes_{0};
  std::atomic<uint64_t> scrub_passes_{0};
  std::atomic<uint64_t> unreadable_reads_{0};

  mutable Mutex stats_mu_;
  StoreCommitStats stats_ RUNNEL_GUARDED_BY(stats_mu_);

  std::atomic<uint64_t> cache_hits_{0};
  std::atomic<uint64_t> cache_misses_{0};

  mutable Mutex listener_mu_;
  std::shared_ptr<const TailListener> listener_ RUNNEL_GUARDED_BY(listener_mu_);
};

}  // namespace runnel::log

#endif  // RUNNEL_STORE_LOG_LOG_STORE_H_
