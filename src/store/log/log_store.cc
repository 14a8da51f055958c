#include "store/log/log_store.h"

#include <sys/mman.h>
#include <sys/prctl.h>

#include <algorithm>
#include <bit>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>

#include "base/log.h"
#include "base/thread_name.h"
#include "store/group_wait.h"
#include "store/log/crc32c.h"
#include "store/log/log_codec.h"
#include "store/retention.h"
#include "store/store_status.h"

namespace runnel {

Result<LogDurabilityMode> ParseLogDurability(std::string_view text) {
  LogDurabilityMode m;
  if (text == "fsync") return m;
  if (text == "none") {
    m.mode = LogDurability::kNone;
    return m;
  }
  constexpr std::string_view kInterval = "interval:";
  if (text.substr(0, kInterval.size()) == kInterval) {
    std::string_view num = text.substr(kInterval.size());
    if (!num.empty() && num.size() <= 6 &&
        std::all_of(num.begin(), num.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      uint32_t ms = static_cast<uint32_t>(std::stoul(std::string(num)));
      if (ms >= 1) {
        m.mode = LogDurability::kInterval;
        m.interval_ms = ms;
        return m;
      }
    }
  }
  return Status::InvalidArgument("durability must be 'fsync', 'interval:<ms>' or 'none', not '" +
                                 std::string(text) + "'");
}

std::string LogDurabilityName(const LogDurabilityMode& mode) {
  switch (mode.mode) {
    case LogDurability::kFsync: return "fsync";
    case LogDurability::kInterval: return "interval:" + std::to_string(mode.interval_ms);
    case LogDurability::kNone: return "none";
  }
  return "fsync";
}

Result<std::unique_ptr<Store>> OpenLogStore(const LogStoreOptions& options) {
  RUNNEL_ASSIGN_OR_RETURN(auto store, log::LogStore::Open(options));
  return std::unique_ptr<Store>(std::move(store));
}

namespace log {
namespace {

Status StreamNotFound(StreamId id) {
  return Status::NotFound("stream #" + std::to_string(id) + " does not exist");
}

std::string SegmentName(uint64_t number) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%020" PRIu64 ".log", number);
  return buf;
}

std::string CheckpointName(uint64_t seq) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "checkpoint-%020" PRIu64 ".ckpt", seq);
  return buf;
}

// Parses "<20 digits><suffix>" after `prefix`.
bool ParseNumbered(std::string_view name, std::string_view prefix, std::string_view suffix,
                   uint64_t* out) {
  if (name.size() != prefix.size() + 20 + suffix.size()) return false;
  if (name.substr(0, prefix.size()) != prefix) return false;
  if (name.substr(prefix.size() + 20) != suffix) return false;
  uint64_t v = 0;
  for (char c : name.substr(prefix.size(), 20)) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  *out = v;
  return true;
}

// Offers the 2 MiB-aligned interior of [p, p + n) to the kernel for transparent huge pages: a
// 100+ MB buffer (a million streams' checkpoint) is then filled at a fault per 2 MiB instead of
// per 4 KiB. A hint only.
void OfferHugePages(void* p, size_t n) {
  constexpr uintptr_t kHuge = 2u << 20;
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(p) + kHuge - 1) & ~(kHuge - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + n) & ~(kHuge - 1);
  if (end > begin) (void)::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
}

// A buffer for a whole file read at once, not zero-filled first (the read overwrites it).
std::unique_ptr<char[]> NewReadBuffer(size_t n) {
  auto buf = std::make_unique_for_overwrite<char[]>(n);
  OfferHugePages(buf.get(), n);
  return buf;
}

constexpr size_t kZeroChunk = 1u << 20;
constexpr uint64_t kMaxGroupBytes = 64u << 20;
// Capacity of the writer's group buffer kept from one group to the next.
constexpr size_t kKeptGroupBufferBytes = 4u << 20;

const std::string& Zeros() {
  static const std::string* zeros = new std::string(kZeroChunk, '\0');
  return *zeros;
}

// True when every byte of `bytes` is zero; compared a chunk at a time against Zeros() (memcmp
// is several times faster than a byte loop over a 64 MiB segment tail).
bool AllZero(std::string_view bytes) {
  for (size_t p = 0; p < bytes.size(); p += kZeroChunk) {
    const size_t n = std::min(kZeroChunk, bytes.size() - p);
    if (std::memcmp(bytes.data() + p, Zeros().data(), n) != 0) return false;
  }
  return true;
}

}  // namespace

struct LogStore::Op {
  OpKind kind = OpKind::kAppend;
  // Inputs.
  // kUpdate: only its expected_attributes and expected_offset (the stream's expected next offset).
  AppendRequest append;
  AppendCallback append_done;
  StreamSpec spec;
  StreamId stream = 0;
  StreamRetention retention;
  std::string attributes;
  std::string consumer;
  uint64_t offset = 0;
  uint64_t now_ms = 0;
  bool respect_cursors = false;
  // kDropRecords: the offsets named (ascending); the writer keeps those that hold a record.
  std::vector<uint64_t> offsets;
  // kCheckpoint: the cleaner runs first (CleanNow).
  bool clean = false;
  // kUpdate: the stream's retention is kept (the writer encodes it as it finds it).
  bool keep_retention = false;
  // Prepared by the writer.
  // This op's frame within the writer's group buffer; frame_len 0 when nothing is written.
  uint64_t frame_at = 0;
  uint64_t frame_len = 0;
  bool refused = false;
  // Outputs.
  Status status;
  AppendResult append_result;
  uint64_t u64_result = 0;
  StreamInfo info;
  // Completion for synchronous callers.
  Mutex mu;
  std::condition_variable cv;
  bool finished = false;
};

LogStore::LogStore(const LogStoreOptions& options)
    : options_(options),
      relative_env_(options.env ? options.env : env::Env::Posix(), options.dir),
      env_(&relative_env_),
      // Saturates instead of wrapping (to 0: always behind) for a huge interval.
      checkpoint_backlog_bytes_(options.checkpoint_interval_bytes >
                                        UINT64_MAX / kMaxCheckpointBacklog
                                    ? UINT64_MAX
                                    : kMaxCheckpointBacklog * options.checkpoint_interval_bytes) {}

LogStore::StreamState* LogStore::StreamTable::Insert(std::unique_ptr<StreamState> s) {
  if ((count_ + 1) * 4 > slots_.size() * 3) Rehash(std::max<size_t>(16, slots_.size() * 2));
  for (size_t i = Home(s->id);; i = (i + 1) & mask()) {
    if (slots_[i] == nullptr) {
      slots_[i] = std::move(s);
      ++count_;
      return slots_[i].get();
    }
    if (slots_[i]->id == s->id) return nullptr;
  }
}

void LogStore::StreamTable::Reserve(size_t n) {
  size_t capacity = 16;
  while (capacity * 3 < n * 4) capacity *= 2;
  if (capacity > slots_.size()) Rehash(capacity);
}

void LogStore::StreamTable::Erase(StreamId id) {
  if (slots_.empty()) return;
  size_t i = Home(id);
  for (;; i = (i + 1) & mask()) {
    if (slots_[i] == nullptr) return;
    if (slots_[i]->id == id) break;
  }
  slots_[i].reset();
  --count_;
  // Backward-shift deletion: move up every later entry of the run that may live in the hole
  // (its home is not cyclically within (i, j]), so lookups never meet a false gap.
  for (size_t j = (i + 1) & mask(); slots_[j] != nullptr; j = (j + 1) & mask()) {
    const size_t home = Home(slots_[j]->id);
    if (((j - home) & mask()) >= ((j - i) & mask())) {
      slots_[i] = std::move(slots_[j]);
      i = j;
    }
  }
  if (slots_.size() > 16 && count_ * 8 < slots_.size()) Rehash(slots_.size() / 2);
}

void LogStore::StreamTable::Rehash(size_t capacity) {
  std::vector<std::unique_ptr<StreamState>> old = std::move(slots_);
  slots_.clear();
  slots_.resize(capacity);
  bits_ = static_cast<unsigned>(std::countr_zero(capacity));
  for (auto& p : old) {
    if (!p) continue;
    size_t i = Home(p->id);
    while (slots_[i] != nullptr) i = (i + 1) & mask();
    slots_[i] = std::move(p);
  }
}

std::string LogStore::SegmentPath(uint64_t number) const {
  return env::JoinPath(options_.dir, SegmentName(number));
}

std::string LogStore::Durability() const {
  switch (options_.durability.mode) {
    case LogDurability::kFsync:
      return "fsync: an acknowledged append is on disk (fdatasync before acknowledgement)";
    case LogDurability::kInterval:
      return "interval:" + std::to_string(options_.durability.interval_ms) +
             ": acknowledged appends survive a process crash; a power loss may lose the last " +
             std::to_string(options_.durability.interval_ms) + " ms";
    case LogDurability::kNone:
      return "none: acknowledged appends survive a process crash; a power loss may lose "
             "everything since the last Flush";
  }
  return "";
}

namespace {

// Every option is checked before Open touches the disk.
Status ValidateOptions(const LogStoreOptions& o) {
  if (o.dir.empty()) return Status::InvalidArgument("log store needs a data directory");
  if (o.segment_size < kSegmentHeaderSize + 1024 || o.segment_size > (1ull << 31)) {
    return Status::InvalidArgument("segment_size must be between 1056 bytes and 2 GiB, not " +
                                   std::to_string(o.segment_size));
  }
  if (!(o.cleaner_live_ratio >= 0 && o.cleaner_live_ratio < 1)) {
    return Status::InvalidArgument("cleaner_live_ratio must be at least 0 and below 1, not " +
                                   std::to_string(o.cleaner_live_ratio));
  }
  if (o.checkpoint_interval_bytes == 0) {
    return Status::InvalidArgument("checkpoint_interval_bytes must be at least 1");
  }
  if (o.durability.mode == LogDurability::kInterval && o.durability.interval_ms == 0) {
    return Status::InvalidArgument("durability interval must be at least 1 ms");
  }
  return Status::OK();
}

}  // namespace

Result<std::unique_ptr<LogStore>> LogStore::Open(const LogStoreOptions& options) {
  RUNNEL_RETURN_IF_ERROR(ValidateOptions(options));
  std::unique_ptr<LogStore> store(new LogStore(options));
  const std::string lock_path = env::JoinPath(options.dir, "LOCK");
  Status opened = [&]() -> Status {
    store->created_dir_ = !store->env_->FileExists(options.dir);
    RUNNEL_RETURN_IF_ERROR(store->env_->CreateDir(options.dir));
    store->created_lock_ = !store->env_->FileExists(lock_path);
    RUNNEL_ASSIGN_OR_RETURN(store->lock_, store->env_->LockFile(lock_path));
    return store->Recover();
  }();
  if (!opened.ok()) {
    store->open_failed_ = true;  // the destructor undoes what was created
    return opened;
  }
  if (store->salvaged_) {
    // Move replay past what salvage skipped, so the next open (without salvage) does not meet
    // the same damage again. Failing that, salvage is needed again until a checkpoint lands.
    Status s = store->WriteCheckpoint();
    if (!s.ok()) {
      store->recovery_notes_.push_back("checkpoint after salvage not written: " + s.ToString());
    }
  }
  store->last_sync_ = std::chrono::steady_clock::now();
  store->reserved_next_id_ = store->next_stream_id_;
  store->writer_ = std::thread([s = store.get()] { s->WriterLoop(); });
  SetThreadName(store->writer_, "log-writer");
  store->preparer_ = std::thread([s = store.get()] { s->PreparerLoop(); });
  SetThreadName(store->preparer_, "log-prepare");
  // A log that exists has its reserve made whole before the next segment is prepared: after a
  // crash in the middle of a reclamation, the space the reserve gave up is free again, and the
  // reserve must take it back before a segment does. (A new directory asks at its first write.)
  if (!store->fresh_) store->RequestReserve();
  store->RequestPreparedSegment(store->active_segment_ + 1);
  if (options.scrub_bytes_per_sec > 0) {
    store->scrubber_ = std::thread([s = store.get()] { s->ScrubLoop(); });
    SetThreadName(store->scrubber_, "log-scrub");
  }
  return store;
}

LogStore::~LogStore() {
  {
    MutexLock lock(scrub_mu_);
    scrub_stop_ = true;
  }
  scrub_cv_.notify_all();
  if (scrubber_.joinable()) scrubber_.join();
  {
    MutexLock lock(queue_mu_);
    stopping_ = true;
  }
  queue_cv_.notify_all();
  if (writer_.joinable()) writer_.join();
  uint64_t unused = 0;
  prep_halt_ = true;
  {
    MutexLock lock(prep_mu_);
    prep_stop_ = true;
    if (prep_file_) unused = prep_ready_;
    prep_file_.reset();
  }
  prep_cv_.notify_all();
  if (preparer_.joinable()) preparer_.join();
  if (unused != 0) {
    Status s = env_->RemoveFile(SegmentPath(unused) + ".prep");
    (void)s;  // a leftover is removed at the next open
  }
  if (open_failed_ || (fresh_ && !wrote_)) UndoCreation();
}

void LogStore::UndoCreation() {
  // Best effort: what stays behind (a file another process put in the directory) is harmless,
  // and the next open of a directory without a log starts afresh anyway.
  if (fresh_) {
    segments_.clear();
    Status s = env_->RemoveFile(SegmentPath(1));
    (void)s;
  }
  if (created_lock_ && lock_ != nullptr) {
    Status s = env_->RemoveFile(env::JoinPath(options_.dir, "LOCK"));
    (void)s;
  }
  lock_.reset();
  if (created_dir_) {
    Status s = env_->RemoveDir(options_.dir);
    (void)s;
  }
}

void LogStore::RequestPreparedSegment(uint64_t number) {
  if (!options_.prezero_segments) return;
  uint64_t stale = 0;
  {
    MutexLock lock(prep_mu_);
    // Asked for twice (by the first roll of a new directory and by the open): served once.
    if (number == prep_busy_ || (prep_file_ && number == prep_ready_)) return;
    if (prep_paused_) {
      prep_held_ = number;
    } else {
      prep_wanted_ = number;
    }
    // A segment prepared after the roll that needed it had already created the segment itself
    // is of no use any more: remove it, or it stays behind as a 64 MiB file until the next open
    // (and the next preparation would drop the handle without removing the file).
    if (prep_file_ && prep_ready_ < number) {
      stale = prep_ready_;
      prep_file_.reset();
      prep_ready_ = 0;
    }
  }
  prep_cv_.notify_all();
  if (stale != 0) {
    Status removed = env_->RemoveFile(SegmentPath(stale) + ".prep");
    (void)removed;  // a leftover is removed at the next open
  }
}

std::shared_ptr<env::File> LogStore::TakePreparedSegment(uint64_t number) {
  MutexLock lock(prep_mu_);
  // A preparation of this very segment still under way is waited for: it is further along than
  // a second zeroing of the same segment here would be, and the two would share the disk.
  while (!prep_stop_ && (prep_wanted_ == number || prep_busy_ == number)) lock.Wait(prep_cv_);
  if (prep_ready_ != number || !prep_file_) return nullptr;
  prep_ready_ = 0;
  return std::move(prep_file_);
}

void LogStore::PreparerLoop() {
  for (;;) {
    uint64_t number = 0;
    uint64_t reserve = 0;
    {
      MutexLock lock(prep_mu_);
      while (!prep_stop_ && (prep_paused_ || (!reserve_wanted_ && prep_wanted_ == 0))) {
        lock.Wait(prep_cv_);
      }
      if (prep_stop_) return;
      // The reserve first: on a disk filling up, it is what lets space come back later.
      if (reserve_wanted_) {
        reserve_wanted_ = false;
        reserve_busy_ = true;
        reserve = reserve_target_;
      } else {
        number = prep_wanted_;
        prep_wanted_ = 0;  // served by this preparation, whatever becomes of it
        prep_busy_ = number;
      }
    }
    if (reserve != 0) {
      const uint64_t size = MakeReserve(reserve);
      {
        MutexLock lock(prep_mu_);
        reserve_busy_ = false;
        reserve_size_ = size;
      }
      prep_cv_.notify_all();
      continue;
    }
    const std::string path = SegmentPath(number) + ".prep";
    std::shared_ptr<env::File> file;
    auto opened = env_->OpenFile(path, true);
    Status s = opened.status();
    if (s.ok()) {
      file = std::move(*opened);
      s = file->Truncate(0);
    }
    if (s.ok()) s = file->WriteAt(0, EncodeSegmentHeader(number));
    for (uint64_t p = kSegmentHeaderSize; s.ok() && p < options_.segment_size; p += kZeroChunk) {
      if (prep_halt_) {
        s = Status::Unavailable("preparation stopped");
        break;
      }
      const size_t n =
          static_cast<size_t>(std::min<uint64_t>(kZeroChunk, options_.segment_size - p));
      s = file->WriteAt(p, std::string_view(Zeros()).substr(0, n));
    }
    if (s.ok()) s = file->Sync();
    bool keep = false;
    {
      MutexLock lock(prep_mu_);
      prep_busy_ = 0;
      // A newer request means the segment was rolled to without it (a roll that creates its
      // own segment): it is of no use any more. A failure leaves the roll to create it itself
      // (and report why).
      if (s.ok() && prep_wanted_ == 0 && prep_held_ == 0 && !prep_stop_) {
        prep_ready_ = number;
        prep_file_ = std::move(file);
        keep = true;
      }
    }
    prep_cv_.notify_all();  // a roll may be waiting for this segment
    if (!keep) {
      file.reset();
      Status removed = env_->RemoveFile(path);
      (void)removed;
    }
  }
}

std::string LogStore::ReservePath() const {
  return env::JoinPath(options_.dir, "RESERVE");
}

void LogStore::RequestReserve() {
  if (!options_.keep_space_reserve) return;
  reserve_requested_ = true;
  const uint64_t checkpoint_file = kCheckpointHeaderSize + checkpoint_body_bytes_;
  const uint64_t need = options_.segment_size + CheckpointRoom();
  const uint64_t target =
      options_.segment_size +
      ((std::max<uint64_t>(checkpoint_file + checkpoint_file / 2, 4096) + 4095) & ~uint64_t{4095});
  {
    MutexLock lock(prep_mu_);
    if (reserve_busy_ || reserve_wanted_) return;
    if (reserve_size_ >= need && reserve_size_ <= 2 * target) return;
    reserve_target_ = target;
    reserve_wanted_ = true;
  }
  prep_cv_.notify_all();
}

uint64_t LogStore::MakeReserve(uint64_t target) {
  const std::string path = ReservePath();
  const bool created = !env_->FileExists(path);
  auto opened = env_->OpenFile(path, true);
  Status s = opened.status();
  uint64_t size = 0;
  if (s.ok()) {
    std::unique_ptr<env::File>& file = *opened;
    size = file->Size().value_or(0);
    if (size > target) {
      s = file->Truncate(target);
    } else {
      for (uint64_t p = size; s.ok() && p < target && !prep_halt_; p += kZeroChunk) {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(kZeroChunk, target - p));
        s = file->WriteAt(p, std::string_view(Zeros()).substr(0, n));
      }
    }
    // Even a reserve cut short by a full disk keeps what it got.
    Status synced = file->Sync();
    if (s.ok()) s = synced;
    if (s.ok() && created) s = env_->SyncDir(options_.dir);
    size = file->Size().value_or(0);
  }
  if (!s.ok()) {
    LogF(LogLevel::kWarn,
         "log store %s: the space reserve holds %llu of %llu bytes (%s); "
         "until it is whole, a full disk may not be able to give space back",
         options_.dir.c_str(), static_cast<unsigned long long>(size),
         static_cast<unsigned long long>(target), s.ToString().c_str());
  }
  return size;
}

void LogStore::PausePreparer() {
  MutexLock lock(prep_mu_);
  prep_paused_ = true;
  prep_halt_ = true;
  if (prep_wanted_ != 0) {
    prep_held_ = prep_wanted_;
    prep_wanted_ = 0;
  }
  prep_cv_.notify_all();
  while (prep_busy_ != 0 || reserve_busy_) lock.Wait(prep_cv_);
}

void LogStore::ResumePreparer() {
  {
    MutexLock lock(prep_mu_);
    prep_paused_ = false;
    prep_halt_ = false;
    prep_held_ = 0;
  }
  RequestReserve();
  RequestPreparedSegment(active_segment_ + 1);
}

uint64_t LogStore::CheckpointRoom() const {
  const uint64_t checkpoint_file = kCheckpointHeaderSize + checkpoint_body_bytes_;
  return (std::max<uint64_t>(checkpoint_file + checkpoint_file / 8, 4096) + 4095) & ~uint64_t{4095};
}

bool LogStore::ShrinkReserve(uint64_t bytes) {
  uint64_t size;
  {
    MutexLock lock(prep_mu_);
    size = reserve_size_;
  }
  if (size == 0 || bytes == 0) return false;
  const uint64_t keep = bytes >= size ? 0 : size - bytes;
  Status s;
  if (keep == 0) {
    s = env_->RemoveFile(ReservePath());
    if (s.code() == StatusCode::kNotFound) s = Status::OK();
  } else {
    auto file = env_->OpenFile(ReservePath(), false);
    s = file.status();
    if (s.ok()) s = (*file)->Truncate(keep);
    if (s.ok()) s = (*file)->Sync();
  }
  if (!s.ok()) {
    LogF(LogLevel::kWarn, "log store %s: cannot give up the space reserve: %s",
         options_.dir.c_str(), s.ToString().c_str());
    return false;
  }
  {
    MutexLock lock(prep_mu_);
    reserve_size_ = keep;
  }
  roll_failure_ = Status::OK();  // a segment may fit now
  LogF(LogLevel::kWarn,
       "log store %s: the disk is full; gave up %llu bytes of the space "
       "reserve to reclaim the space of dead records",
       options_.dir.c_str(), static_cast<unsigned long long>(size - keep));
  return true;
}

// ------------------------------------------------------------------------------------------
// Recovery

void LogStore::SalvageNote(std::string note) {
  salvaged_ = true;
  recovery_notes_.push_back(std::move(note));
}

Status LogStore::Recover() {
  RUNNEL_ASSIGN_OR_RETURN(auto names, env_->ListDir(options_.dir));
  std::vector<uint64_t> segs, ckpts;
  for (const std::string& name : names) {
    uint64_t n;
    if (ParseNumbered(name, "", ".log", &n)) {
      segs.push_back(n);
    } else if (ParseNumbered(name, "checkpoint-", ".ckpt", &n)) {
      ckpts.push_back(n);
    } else if ((name.size() > 4 && name.substr(name.size() - 4) == ".tmp") ||
               (name.size() > 5 && name.substr(name.size() - 5) == ".prep")) {
      RUNNEL_RETURN_IF_ERROR(env_->RemoveFile(env::JoinPath(options_.dir, name)));
    }
  }
  std::sort(segs.begin(), segs.end());
  std::sort(ckpts.rbegin(), ckpts.rend());

  uint64_t replay_seg = segs.empty() ? 1 : segs.front();
  uint64_t replay_pos = kSegmentHeaderSize;
  bool have_checkpoint = false;
  for (uint64_t seq : ckpts) {
    bool segment_short = false;
    Status s = LoadCheckpoint(seq, &replay_seg, &replay_pos, &segment_short);
    if (s.ok()) {
      have_checkpoint = true;
      checkpoint_seq_ = seq;
      break;
    }
    if (segment_short) {
      if (!options_.salvage) {
        return Status::Corruption(
            std::string(s.message()) +
            ": a segment is shorter than data the checkpoint recorded as durable; open with "
            "salvage to replay the log without this checkpoint");
      }
      salvaged_ = true;
    }
    recovery_notes_.push_back("ignored checkpoint: " + s.ToString());
    streams_.clear();
    names_.clear();
    natural_.Clear();
    content_types_.clear();
    next_stream_id_ = 1;
  }
  if (have_checkpoint) {
    // Older checkpoints are removed once a newer one is in place; a crash between the two
    // leaves them. They are of no use (the segments they would replay from may be gone), and on
    // a full disk their bytes are part of what lets the store write again.
    for (uint64_t seq : ckpts) {
      if (seq < checkpoint_seq_) {
        Status removed = env_->RemoveFile(env::JoinPath(options_.dir, CheckpointName(seq)));
        (void)removed;  // tried again at the next open
      }
    }
  }
  if (!ckpts.empty() && !have_checkpoint) {
    // Without a checkpoint the whole history must still be there (segment 1 on).
    if (segs.empty() || segs.front() != 1) {
      return Status::Corruption("no valid checkpoint, and older segments are gone (" +
                                recovery_notes_.back() + ")");
    }
    recovery_notes_.push_back("no valid checkpoint: replaying the whole log");
    replay_seg = 1;
    replay_pos = kSegmentHeaderSize;
  }

  // Every segment from the replay point on must be present and consecutive.
  std::vector<uint64_t> replay;
  for (uint64_t n : segs) {
    if (n >= replay_seg) replay.push_back(n);
  }
  if (have_checkpoint && !replay.empty() && replay.front() != replay_seg) {
    return Status::Corruption("segment " + SegmentName(replay_seg) +
                              " named by the checkpoint is missing");
  }
  for (size_t i = 1; i < replay.size(); ++i) {
    if (replay[i] != replay[i - 1] + 1) {
      return Status::Corruption("segment " + SegmentName(replay[i - 1] + 1) +
                                " is missing between " + SegmentName(replay[i - 1]) + " and " +
                                SegmentName(replay[i]));
    }
  }
  // Old segments the checkpoint's index names: replay can only take records out of them.
  std::set<uint64_t> named;
  streams_.ForEach([&](const StreamState& s) {
    for (size_t i = s.batch_begin; i < s.batches.size(); ++i) named.insert(s.batches[i].segment);
  });
  // Older segments are kept open for reads of the records they still hold.
  for (uint64_t n : segs) {
    if (n >= replay_seg) break;
    RUNNEL_ASSIGN_OR_RETURN(auto file, env_->OpenFile(SegmentPath(n), false));
    Segment& seg = segments_[n];
    seg.number = n;
    seg.file = std::move(file);
  }
  for (size_t i = 0; i < replay.size(); ++i) {
    RUNNEL_RETURN_IF_ERROR(ReplaySegment(replay[i],
                                         replay[i] == replay_seg ? replay_pos : kSegmentHeaderSize,
                                         i + 1 == replay.size()));
  }
  segment_freed_ = false;  // replay's own head moves free nothing new
  freed_since_checkpoint_ = 0;
  // Live bytes per segment, from the index.
  for (auto& [n, seg] : segments_) seg.live_bytes = seg.dropped_bytes = 0;
  Status missing;
  streams_.ForEach([&](StreamState& s) {
    state_mu_.AssertHeld();  // recovery: no other thread exists yet
    for (size_t i = s.batch_begin; i < s.batches.size(); ++i) {
      if (s.batches[i].lost()) continue;
      auto it = segments_.find(s.batches[i].segment);
      if (it == segments_.end()) {
        missing = Status::Corruption("stream '" + s.name.str() + "' (#" + std::to_string(s.id) +
                                     ") has records in missing segment " +
                                     SegmentName(s.batches[i].segment));
        return;
      }
      it->second.live_bytes += s.batches[i].len;
      it->second.dropped_bytes += DroppedBytesIn(s, s.batches[i].first_offset, RefEnd(s, i));
    }
    s.reserved_next = s.next;
    s.reserved_closed = s.closed;
  });
  RUNNEL_RETURN_IF_ERROR(missing);
  if (auto reserve = env_->FileSize(ReservePath()); reserve.ok()) reserve_size_ = *reserve;
  if (replay.empty()) {
    if (have_checkpoint) {
      return Status::Corruption("segment " + SegmentName(replay_seg) +
                                " named by the checkpoint is missing");
    }
    fresh_ = true;
    RUNNEL_RETURN_IF_ERROR(RollSegment(0));
  } else {
    active_segment_ = replay.back();
    Segment& seg = segments_[active_segment_];
    active_pos_ = seg.end;
    RUNNEL_ASSIGN_OR_RETURN(uint64_t size, seg.file->Size());
    active_capacity_ =
        options_.prezero_segments ? std::max(size, active_pos_) : options_.segment_size;
    dirty_end_ = active_pos_;
  }
  // Segments before the replay point that the checkpoint just loaded does not name were freed
  // by it, and a crash came before they were deleted: delete them now (on a full disk they are
  // the space that lets the store write again). No open from that checkpoint reads them.
  std::vector<uint64_t> leftovers;
  for (const auto& [n, seg] : segments_) {
    if (n < replay_seg && seg.live_bytes == 0 && named.count(n) == 0) leftovers.push_back(n);
  }
  DeleteDeadSegments(leftovers);
  return Status::OK();
}

Status LogStore::LoadCheckpoint(uint64_t file_seq, uint64_t* replay_segment, uint64_t* replay_pos,
                                bool* segment_short) {
  const std::string name = CheckpointName(file_seq);
  RUNNEL_ASSIGN_OR_RETURN(auto file, env_->OpenFile(env::JoinPath(options_.dir, name), false));
  RUNNEL_ASSIGN_OR_RETURN(uint64_t size, file->Size());
  const auto bytes = NewReadBuffer(static_cast<size_t>(size));
  RUNNEL_ASSIGN_OR_RETURN(size_t got, file->ReadAt(0, size, bytes.get()));
  const std::string_view buf(bytes.get(), got);
  auto bad = [&](std::string_view why) {
    return Status::Corruption("checkpoint '" + name + "': " + std::string(why));
  };
  if (got != size || size < kCheckpointHeaderSize) return bad("shorter than its header");
  if (std::string_view(buf).substr(0, 8) != kCheckpointMagic) return bad("wrong magic");
  const uint32_t version = LoadU32(buf.data() + 8);
  if (version < kOldestCheckpointVersion || version > kCheckpointVersion) {
    return bad("unsupported version " + std::to_string(version));
  }
  const uint64_t body_len = LoadU64(buf.data() + 16);
  if (body_len != size - kCheckpointHeaderSize) return bad("length mismatch");
  std::string_view body = std::string_view(buf).substr(kCheckpointHeaderSize);
  if (UnmaskCrc(LoadU32(buf.data() + 24)) != Crc32c(body)) return bad("checksum mismatch");
  checkpoint_body_bytes_ = body.size();

  Reader r(body);
  uint64_t seq, nstreams, next_id;
  if (!r.U64(&seq) || !r.U64(replay_segment) || !r.U64(replay_pos) || !r.U64(&next_id) ||
      !r.U64(&nstreams)) {
    return bad("truncated body");
  }
  if (*replay_segment == 0 || *replay_pos < kSegmentHeaderSize) {
    return bad("replay point inside a segment header");
  }
  next_stream_id_ = next_id;
  // Segment file sizes, for checking batch entries; most entries of a stream name one segment.
  std::map<uint32_t, uint64_t> segment_sizes;
  std::pair<uint32_t, uint64_t> last_size{0, 0};  // a cache of one segment_sizes entry
  auto segment_size = [&](uint32_t segment) {
    if (segment != last_size.first) {
      auto it = segment_sizes.find(segment);
      if (it == segment_sizes.end()) {
        // A missing segment is reported once recovery is done.
        auto got = env_->FileSize(SegmentPath(segment));
        it = segment_sizes.emplace(segment, got.ok() ? *got : UINT64_MAX).first;
      }
      last_size = *it;
    }
    return last_size.second;
  };
  if (*replay_segment <= UINT32_MAX) {
    const uint64_t replay_size = segment_size(static_cast<uint32_t>(*replay_segment));
    if (replay_size != UINT64_MAX && *replay_pos > replay_size) {
      *segment_short = true;
      return bad("replay point past its segment's end");
    }
  }
  // Sized once: a checkpoint may hold millions of streams.
  if (nstreams <= r.remaining()) streams_.Reserve(static_cast<size_t>(nstreams));
  for (uint64_t i = 0; i < nstreams; ++i) {
    auto s = std::make_unique<StreamState>();
    StreamSpec spec;
    uint8_t closed;
    uint64_t nbatches, nrecords;
    if (!r.U64(&s->id) || !r.String(&spec.ns) || !r.String(&spec.name) ||
        !r.String(&spec.content_type) || !r.Retention(&spec.retention) ||
        !r.U64(&spec.first_offset) || !r.U64(&spec.created_at_ms) || !r.String(&spec.attributes) ||
        !r.U64(&s->head) || !r.U64(&s->next) || !r.U8(&closed) || !r.U64(&nbatches) ||
        nbatches > r.remaining() / 20) {
      return bad("truncated stream entry");
    }
    s->closed = closed != 0;
    s->batches.resize(nbatches);
    for (auto& b : s->batches) {
      if (!r.U64(&b.first_offset) || !r.U64(&b.timestamp) || !r.U32(&b.segment) || !r.U32(&b.pos) ||
          !r.U32(&b.len)) {
        return bad("truncated batch entry");
      }
    }
    // The index must cover [head, next) in order, so that every read finds its records.
    if (s->head > s->next || s->head < spec.first_offset) return bad("bad head or next offset");
    if (s->head < s->next && (s->batches.empty() || s->batches.front().first_offset > s->head ||
                              s->batches.back().first_offset >= s->next)) {
      return bad("batch entries do not cover the stream's records");
    }
    for (size_t i = 0; i < s->batches.size(); ++i) {
      const BatchRef& b = s->batches[i];
      if (b.lost()) {  // a hole salvage left (version 3), or records all dropped (version 4)
        if (version < 3 || b.pos != 0 || b.len != 0 ||
            (i > 0 && b.first_offset <= s->batches[i - 1].first_offset)) {
          return bad("bad batch entry");
        }
        continue;
      }
      if ((i > 0 && b.first_offset <= s->batches[i - 1].first_offset) ||
          b.pos < kSegmentHeaderSize || b.len < kFrameHeaderSize + kMinBodySize ||
          b.len > kFrameHeaderSize + kMaxBodySize) {
        return bad("bad batch entry");
      }
      if (uint64_t{b.pos} + b.len > segment_size(b.segment)) {
        *segment_short = true;
        return bad("batch entry past its segment's end");
      }
      // Everything a checkpoint indexes was written before its replay point.
      if (b.segment > *replay_segment ||
          (b.segment == *replay_segment && uint64_t{b.pos} + b.len > *replay_pos)) {
        return bad("batch entry past the checkpoint's replay point");
      }
    }
    if (!r.U64(&nrecords) || nrecords != s->next - s->head || nrecords > r.remaining() / 8) {
      return bad("bad record count");
    }
    s->sizes.reserve(nrecords);
    for (uint64_t i = 0; i < nrecords; ++i) {
      uint32_t payload, key;
      if (!r.U32(&payload) || !r.U32(&key)) return bad("truncated sizes");
      // A dropped record (version 4) is never the head.
      if ((payload & kDroppedBit) != 0 && (version < kCheckpointVersionWithDrops || i == 0 ||
                                           (payload & ~kDroppedBit) > kMaxBodySize)) {
        return bad("bad dropped record");
      }
      s->PushSize(payload, key);
    }
    uint32_t ncursors, nproducers;
    if (!r.U32(&ncursors)) return bad("truncated cursors");
    for (uint32_t c = 0; c < ncursors; ++c) {
      CursorState cs;
      if (!r.String(&cs.consumer) || !r.U64(&cs.offset) || !r.U64(&cs.updated_at_ms)) {
        return bad("truncated cursor");
      }
      s->mut().cursors.emplace(cs.consumer, cs);
    }
    if (!r.U32(&nproducers)) return bad("truncated producers");
    for (uint32_t p = 0; p < nproducers; ++p) {
      ProducerState ps;
      if (!r.String(&ps.producer_id) || !r.U64(&ps.epoch) || !r.U64(&ps.seq) ||
          !r.U64(&ps.last_offset)) {
        return bad("truncated producer");
      }
      s->mut().producers.emplace(ps.producer_id, ps);
    }
    if (s->id == 0 || s->id >= next_stream_id_) return bad("bad stream id");
    // One probe each for the id and the name: the table and the name index refuse a duplicate.
    StreamState* added = streams_.Insert(std::move(s));
    if (added == nullptr) return bad("duplicate stream id");
    if (!Adopt(*added, std::move(spec))) return bad("duplicate stream name");
  }
  if (!r.done()) return bad("trailing bytes");
  return Status::OK();
}

namespace {

// Replay reads a segment through a window that moves forward with the frames: restart costs
// the log written since the checkpoint, not the segment's preallocated size, and a 64 MiB
// segment holding a few frames is not copied into a 64 MiB buffer.
class SegmentWindow {
 public:
  static constexpr uint64_t kSpan = 4u << 20;

  SegmentWindow(env::File& file, uint64_t size) : file_(file), size_(size) {}

  // Bytes [at, min(at + n, size)) of the file as one view (shorter only after a short read),
  // valid until the next call.
  Result<std::string_view> View(uint64_t at, uint64_t n) {
    if (at >= size_) return std::string_view();
    n = std::min(n, size_ - at);
    if (at >= base_ && at + n <= base_ + len_) {
      return std::string_view(buf_.data() + (at - base_), n);
    }
    const uint64_t want = std::min(std::max(n, kSpan), size_ - at);
    if (buf_.size() < want) buf_.resize(static_cast<size_t>(want));
    base_ = at;
    len_ = 0;
    RUNNEL_ASSIGN_OR_RETURN(len_, file_.ReadAt(at, static_cast<size_t>(want), buf_.data()));
    return std::string_view(buf_.data(), static_cast<size_t>(std::min<uint64_t>(n, len_)));
  }

  // ParseFrame at `at`, with the whole frame in view when the file holds it. Reads only when
  // the frame is not in the window already, so replay reads each window once.
  Result<FrameCheck> ParseAt(uint64_t at, FrameView* f) {
    RUNNEL_ASSIGN_OR_RETURN(std::string_view v, View(at, kFrameHeaderSize));
    if (v.size() == kFrameHeaderSize) {
      const uint32_t len = LoadU32(v.data() + 4);
      if (len >= kMinBodySize && len <= kMaxBodySize) {
        RUNNEL_ASSIGN_OR_RETURN(v, View(at, kFrameHeaderSize + len));
      }
    }
    return ParseFrame(v, f);
  }

  // True when [at, size) holds only zero bytes.
  Result<bool> ZeroFrom(uint64_t at) {
    for (; at < size_; at += kSpan) {
      RUNNEL_ASSIGN_OR_RETURN(std::string_view v, View(at, kSpan));
      if (!AllZero(v)) return false;
      if (v.empty()) break;
    }
    return true;
  }

 private:
  env::File& file_;
  const uint64_t size_;
  std::string buf_;
  uint64_t base_ = 0;
  uint64_t len_ = 0;
};

}  // namespace

Status LogStore::ReplaySegment(uint64_t number, uint64_t from, bool last) {
  // Messages and notes name the file relative to the data directory.
  const std::string name = SegmentName(number);
  RUNNEL_ASSIGN_OR_RETURN(auto file, env_->OpenFile(SegmentPath(number), false));
  RUNNEL_ASSIGN_OR_RETURN(uint64_t size, file->Size());
  // The header (and the first frame header after it), then frames from `from` on: the frames
  // before `from` were replayed before the checkpoint was taken, so restart reads at most one
  // checkpoint interval of log, however large the segment.
  std::string head(std::min<uint64_t>(size, kSegmentHeaderSize + kFrameHeaderSize), '\0');
  RUNNEL_ASSIGN_OR_RETURN(size_t got, file->ReadAt(0, head.size(), head.data()));
  head.resize(got);
  Segment& seg = segments_[number];
  seg.number = number;
  seg.file = std::move(file);
  seg.end = kSegmentHeaderSize;
  auto untouched = [&] {
    for (size_t i = kSegmentHeaderSize; i < head.size(); ++i) {
      if (head[i] != 0) return false;
    }
    return true;
  };
  if (last && (head.size() < kSegmentHeaderSize ||
               (!CheckSegmentHeader(head, number, name).ok() && untouched()))) {
    // A crash while creating the segment: its header never became durable, and no frame can
    // have been written after it (frames follow only once the header is synced).
    recovery_notes_.push_back(name + ": incomplete header, segment reinitialised");
    std::string header = EncodeSegmentHeader(number);
    RUNNEL_RETURN_IF_ERROR(seg.file->WriteAt(0, header));
    return ScrubTail(seg, kSegmentHeaderSize);
  }
  RUNNEL_RETURN_IF_ERROR(CheckSegmentHeader(head, number, name));
  SegmentWindow window(*seg.file, size);
  uint64_t pos = std::max<uint64_t>(from, kSegmentHeaderSize);
  while (pos <= size) {
    FrameView f;
    RUNNEL_ASSIGN_OR_RETURN(FrameCheck c, window.ParseAt(pos, &f));
    if (c == FrameCheck::kEnd) {
      // Past the end of the log there must be nothing but zeros. In the last segment, bytes
      // there are a group write that landed in part (a later sector reached the disk, an
      // earlier one did not, so the zeros run to a sector's end): never acknowledged, and left
      // in place they could parse as frames once new writes end next to them. Zero them, as for
      // a torn tail. Anything else (a zeroed header amid written bytes, bytes after the end of
      // a sealed segment) is damage to written data.
      RUNNEL_ASSIGN_OR_RETURN(bool zero, window.ZeroFrom(pos));
      if (!zero) {
        RUNNEL_ASSIGN_OR_RETURN(std::string_view sector, window.View(pos, kTornSectorSize));
        if (!last || !ZeroToSectorEnd(sector, pos)) {
          Status corrupt = Status::Corruption(
              "segment " + name + " at byte " + std::to_string(pos) +
              ": zero frame header followed by written bytes; open with salvage to skip them");
          if (!options_.salvage) return corrupt;
          SalvageNote("salvage dropped the rest of the segment: " + corrupt.ToString());
          seg.end = pos;
          if (last) return ScrubTail(seg, pos);
          return Status::OK();
        }
        recovery_notes_.push_back(name + ": bytes after the end of the log at byte " +
                                  std::to_string(pos) + " (a write that landed in part), zeroed");
        seg.end = pos;
        return ScrubTail(seg, pos);
      }
      break;
    }
    if (c == FrameCheck::kOk) {
      Status s = ApplyFrame(f.type, f.body, static_cast<uint32_t>(number),
                            static_cast<uint32_t>(pos), static_cast<uint32_t>(f.size), true);
      if (!s.ok()) {
        s = Status::Corruption(name + " at byte " + std::to_string(pos) + ": " +
                               std::string(s.message()));
        if (!options_.salvage) return s;
        SalvageNote("salvage skipped a frame: " + s.ToString());
      }
      pos += f.size;
      continue;
    }
    // A bad frame. At the tail of the last segment it is a torn write: truncate it away.
    RUNNEL_ASSIGN_OR_RETURN(std::string_view at, window.View(pos, kFrameHeaderSize + kMinBodySize));
    std::string who;
    if (at.size() == kFrameHeaderSize + kMinBodySize) {
      who = ", stream #" + std::to_string(LoadU64(at.data() + kFrameHeaderSize)) + " (unverified)";
    }
    // A torn write leaves no valid frame after it; a damaged frame among written ones does
    // (log_codec.h, ValidFrameAfter).
    RUNNEL_ASSIGN_OR_RETURN(
        std::optional<uint64_t> next,
        ValidFrameAfter([&](uint64_t a, uint64_t n) { return window.View(a, n); }, pos, size));
    if (last && !next) {
      recovery_notes_.push_back(name + ": torn tail at byte " + std::to_string(pos) + " (" +
                                std::string(FrameCheckName(c)) + "), truncated");
      seg.end = pos;
      return ScrubTail(seg, pos);
    }
    Status corrupt =
        Status::Corruption("segment " + name + " at byte " + std::to_string(pos) + ": " +
                           std::string(FrameCheckName(c)) + who + "; open with salvage to skip it");
    if (!options_.salvage) return corrupt;
    if (next) {
      // Salvage keeps what is intact: replay goes on at the next frame that verifies.
      SalvageNote("salvage skipped bytes " + std::to_string(pos) + " to " + std::to_string(*next) +
                  ": " + corrupt.ToString());
      pos = *next;
      continue;
    }
    SalvageNote("salvage dropped the rest of the segment: " + corrupt.ToString());
    seg.end = pos;
    return Status::OK();
  }
  seg.end = pos;
  return Status::OK();
}

Status LogStore::ScrubTail(Segment& seg, uint64_t from) {
  RUNNEL_ASSIGN_OR_RETURN(uint64_t size, seg.file->Size());
  if (!options_.prezero_segments) {
    RUNNEL_RETURN_IF_ERROR(seg.file->Truncate(from));
    return seg.file->Sync();
  }
  std::string chunk;
  for (uint64_t pos = from; pos < size; pos += kZeroChunk) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(kZeroChunk, size - pos));
    chunk.resize(n);
    RUNNEL_ASSIGN_OR_RETURN(size_t got, seg.file->ReadAt(pos, n, chunk.data()));
    if (!AllZero(std::string_view(chunk.data(), got))) {
      RUNNEL_RETURN_IF_ERROR(seg.file->WriteAt(pos, std::string_view(Zeros()).substr(0, got)));
    }
  }
  return seg.file->Sync();
}

// ------------------------------------------------------------------------------------------
// Applying frames

LogStore::StreamState* LogStore::FindLocked(StreamId id) const {
  return streams_.Find(id);
}

LogStore::StreamState* LogStore::FindByNameLocked(std::string_view ns,
                                                  std::string_view name) const {
  auto ns_it = names_.find(ns);
  if (ns_it == names_.end()) return nullptr;
  auto it = ns_it->second.find(name);
  return it == ns_it->second.end() ? nullptr : const_cast<StreamState*>(*it);
}

bool LogStore::Adopt(StreamState& s, StreamSpec spec) {
  s.name = spec.name;
  s.first_offset = spec.first_offset;
  s.created_at_ms = spec.created_at_ms;
  auto ct = content_types_.try_emplace(std::move(spec.content_type), 0).first;
  ++ct->second;
  s.content_type = &ct->first;
  const StreamRetention& ret = spec.retention;
  if (ret.max_events || ret.max_age_ms || ret.max_bytes || !spec.attributes.empty()) {
    s.mut().retention = ret;
    s.mut().attributes = std::move(spec.attributes);
  }
  auto ns = names_.try_emplace(std::move(spec.ns)).first;
  s.ns = &ns->first;
  // Checkpoints list streams in name order, so the end is the right place as a rule (constant
  // time); elsewhere the hint costs one comparison before the usual search.
  const bool added = *ns->second.insert(ns->second.end(), &s) == &s;
  if (added) natural_.Add(ns->first, &s);
  return added;
}

void LogStore::Forget(StreamState& s) {
  natural_.Remove(*s.ns, &s);
  auto ns_it = names_.find(*s.ns);
  if (ns_it != names_.end()) {
    ns_it->second.erase(&s);
    if (ns_it->second.empty()) names_.erase(ns_it);
  }
  s.ns = nullptr;
  auto ct = content_types_.find(*s.content_type);
  if (ct != content_types_.end() && --ct->second == 0) content_types_.erase(ct);
  s.content_type = nullptr;
}

StreamSpec LogStore::StreamState::Spec() const {
  StreamSpec spec;
  spec.ns = *ns;
  spec.name = name.str();
  spec.content_type = *content_type;
  spec.first_offset = first_offset;
  spec.created_at_ms = created_at_ms;
  if (extras) {
    spec.retention = extras->retention;
    spec.attributes = extras->attributes;
  }
  return spec;
}

StreamInfo LogStore::Snapshot(const StreamState& s) {
  StreamInfo info;
  info.id = s.id;
  info.spec = s.Spec();
  info.next_offset = s.next;
  info.event_count = s.next - s.head - s.Dropped();
  info.retained_bytes = s.bytes;
  info.closed = s.closed;
  if (s.next > s.head) {
    // The head is never a dropped record; the tail is the last record not dropped.
    info.head_offset = s.head;
    uint64_t tail = s.next - 1;
    if (s.Dropped() > 0) {
      while (tail > s.head && s.DroppedAt(s.size_begin + (tail - s.head))) --tail;
    }
    info.tail_offset = tail;
  }
  return info;
}

void LogStore::Compact(StreamState& s) {
  if (s.batch_begin > 16 && s.batch_begin * 2 > s.batches.size()) {
    s.batches.erase(s.batches.begin(),
                    s.batches.begin() + static_cast<std::ptrdiff_t>(s.batch_begin));
    s.batch_begin = 0;
  }
  std::vector<uint32_t>* key_sizes =
      s.extras && !s.extras->key_sizes.empty() ? &s.extras->key_sizes : nullptr;
  if (s.size_begin > 64 && s.size_begin * 2 > s.sizes.size()) {
    const auto n = static_cast<std::ptrdiff_t>(s.size_begin);
    s.sizes.erase(s.sizes.begin(), s.sizes.begin() + n);
    if (key_sizes != nullptr) key_sizes->erase(key_sizes->begin(), key_sizes->begin() + n);
    s.size_begin = 0;
  }
  if (s.batch_begin == s.batches.size()) {
    std::vector<BatchRef>().swap(s.batches);
    s.batch_begin = 0;
  }
  if (s.size_begin == s.sizes.size()) {
    std::vector<uint32_t>().swap(s.sizes);
    if (key_sizes != nullptr) std::vector<uint32_t>().swap(*key_sizes);
    s.size_begin = 0;
  }
}

uint64_t LogStore::StreamState::RecordBytesAt(size_t i) const {
  return DroppedAt(i) ? 0 : store::RecordBytes(KeySize(i), sizes[i]);
}

void LogStore::StreamState::PushSize(uint32_t payload, uint32_t key) {
  if ((payload & kDroppedBit) != 0) {
    ++mut().dropped;
  } else {
    bytes += store::RecordBytes(key, payload);
  }
  sizes.push_back(payload);
  if (extras && !extras->key_sizes.empty()) {
    extras->key_sizes.push_back(key);
  } else if (key != 0) {
    // The stream's first record with a key: the records before it have none.
    std::vector<uint32_t>& keys = mut().key_sizes;
    keys.assign(sizes.size(), 0);
    keys.back() = key;
  }
}

void LogStore::DropHead(StreamState& s, uint64_t n) {
  n = std::min(n, s.next - s.head);
  const uint64_t had_dropped = s.Dropped();
  if (had_dropped > 0) {
    // The new head is never a dropped record.
    while (s.head + n < s.next && s.DroppedAt(s.size_begin + n)) ++n;
  }
  if (n == 0) return;
  uint64_t dropped = 0;
  for (uint64_t i = 0; i < n; ++i) {
    s.bytes -= s.RecordBytesAt(s.size_begin + i);
    if (had_dropped > 0 && s.DroppedAt(s.size_begin + i)) ++dropped;
  }
  const uint64_t new_head = s.head + n;
  // Release every batch whose records are all below the new head.
  while (s.batch_begin < s.batches.size()) {
    if (RefEnd(s, s.batch_begin) > new_head) break;
    const BatchRef& b = s.batches[s.batch_begin];
    if (!b.lost()) {
      ReferenceLeft(
          b.segment, b.len,
          had_dropped > 0 ? DroppedBytesIn(s, b.first_offset, RefEnd(s, s.batch_begin)) : 0);
    }
    ++s.batch_begin;
  }
  s.size_begin += static_cast<uint32_t>(n);
  s.head = new_head;
  if (dropped > 0) s.extras->dropped -= dropped;
  Compact(s);
}

uint64_t LogStore::DroppedBytesIn(const StreamState& s, uint64_t lo, uint64_t hi) {
  if (s.Dropped() == 0) return 0;
  uint64_t bytes = 0;
  for (uint64_t o = std::max(lo, s.head); o < std::min(hi, s.next); ++o) {
    const size_t i = s.size_begin + (o - s.head);
    if (s.DroppedAt(i)) bytes += store::RecordBytes(s.KeySize(i), s.sizes[i] & ~kDroppedBit);
  }
  return bytes;
}

void LogStore::ReferenceLeft(uint32_t segment, uint64_t len, uint64_t dropped) {
  auto it = segments_.find(segment);
  if (it == segments_.end()) return;
  Segment& seg = it->second;
  seg.live_bytes -= std::min<uint64_t>(len, seg.live_bytes);
  seg.dropped_bytes -= std::min<uint64_t>(dropped, seg.dropped_bytes);
  if (it->first != active_segment_) {
    reclaim_due_ = true;
    reclaim_retry_at_ = {};  // something new to reclaim: no waiting out an earlier failure
    freed_since_checkpoint_ += len;
    if (seg.live_bytes == 0) segment_freed_ = true;
  }
}

uint64_t LogStore::ApplyDrops(StreamState& s, const std::vector<uint64_t>& offsets) {
  uint64_t removed = 0;
  auto first = std::lower_bound(offsets.begin(), offsets.end(), s.head);
  if (first == offsets.end() || *first >= s.next) return 0;
  // The reference holding *first, then each later one as the offsets reach it.
  size_t ref = static_cast<size_t>(
      std::upper_bound(s.batches.begin() + static_cast<std::ptrdiff_t>(s.batch_begin),
                       s.batches.end(), *first,
                       [](uint64_t o, const BatchRef& b) { return o < b.first_offset; }) -
      s.batches.begin() - 1);
  bool touched = false;  // a record of batches[ref] was dropped by this frame
  // A reference whose records are now all dropped holds nothing live: it becomes a dead one
  // (kLostSegment), its frames' bytes leave the segment's live bytes.
  auto finish = [&]() {
    state_mu_.AssertHeld();  // a lambda of this function, which holds it
    if (!touched) return;
    touched = false;
    BatchRef& b = s.batches[ref];
    if (b.lost()) return;
    const uint64_t begin = std::max(b.first_offset, s.head);
    const uint64_t end = RefEnd(s, ref);
    for (uint64_t o = begin; o < end; ++o) {
      if (!s.DroppedAt(s.size_begin + (o - s.head))) return;
    }
    ReferenceLeft(b.segment, b.len, DroppedBytesIn(s, b.first_offset, end));
    b.segment = kLostSegment;
    b.pos = 0;
    b.len = 0;
  };
  for (auto it = first; it != offsets.end() && *it < s.next; ++it) {
    const uint64_t o = *it;
    const size_t i = s.size_begin + (o - s.head);
    if (s.DroppedAt(i)) continue;
    while (RefEnd(s, ref) <= o) {
      finish();
      ++ref;
    }
    if (!s.batches[ref].lost()) {
      auto seg = segments_.find(s.batches[ref].segment);
      if (seg != segments_.end()) seg->second.dropped_bytes += s.RecordBytesAt(i);
    }
    s.bytes -= s.RecordBytesAt(i);
    s.sizes[i] |= kDroppedBit;
    ++s.mut().dropped;
    ++removed;
    touched = true;
  }
  finish();
  // The head moves past dropped records (DropHead(0) does only that).
  DropHead(s, 0);
  return removed;
}

Status LogStore::ApplyFrame(FrameType type, std::string_view body, uint32_t segment, uint32_t pos,
                            uint32_t len, bool replay) {
  Reader r(body);
  StreamId id = 0;
  switch (type) {
    case FrameType::kCreateStream: {
      auto s = std::make_unique<StreamState>();
      StreamSpec spec;
      if (!r.U64(&s->id) || !r.String(&spec.ns) || !r.String(&spec.name) ||
          !r.String(&spec.content_type) || !r.Retention(&spec.retention) ||
          !r.U64(&spec.first_offset) || !r.U64(&spec.created_at_ms) ||
          !r.String(&spec.attributes) || !r.done()) {
        return Status::Corruption("malformed create-stream frame");
      }
      if (s->id == 0 || s->id > next_stream_id_ + (1u << 20)) {
        return Status::Corruption("create-stream with implausible id " + std::to_string(s->id));
      }
      if (streams_.Find(s->id) != nullptr) {
        return Status::Corruption("create-stream of existing stream #" + std::to_string(s->id));
      }
      if (FindByNameLocked(spec.ns, spec.name) != nullptr) {
        return Status::Corruption("create-stream of existing name '" + spec.name + "'");
      }
      s->head = s->next = s->reserved_next = spec.first_offset;
      next_stream_id_ = std::max(next_stream_id_, s->id + 1);
      StreamState* added = streams_.Insert(std::move(s));
      if (added == nullptr || !Adopt(*added, std::move(spec))) {
        return Status::Internal("create-stream replay: the stream's id or name was taken");
      }
      return Status::OK();
    }
    case FrameType::kCheckpointMarker: return Status::OK();
    default: break;
  }
  if (!r.U64(&id)) return Status::Corruption("frame too short for a stream id");
  StreamState* s = FindLocked(id);
  if (s == nullptr) {
    return Status::Corruption("frame for unknown stream #" + std::to_string(id));
  }
  switch (type) {
    case FrameType::kUpdateStream: {
      StreamRetention ret;
      std::string attrs;
      if (!r.Retention(&ret) || !r.String(&attrs) || !r.done()) {
        return Status::Corruption("malformed update-stream frame");
      }
      if (s->extras || ret.max_events || ret.max_age_ms || ret.max_bytes || !attrs.empty()) {
        s->mut().retention = ret;
        s->mut().attributes = std::move(attrs);
      }
      return Status::OK();
    }
    case FrameType::kDeleteStream: {
      if (!r.done()) return Status::Corruption("malformed delete-stream frame");
      DropHead(*s, s->next - s->head);
      Forget(*s);
      streams_.Erase(id);
      return Status::OK();
    }
    case FrameType::kAppendBatch: {
      AppendBatchHeader h;
      std::vector<std::pair<uint32_t, uint32_t>>& sizes = apply_sizes_;
      sizes.clear();
      if (!DecodeAppendBatch(body, &h, &sizes, nullptr) || h.source_len != 0) {
        return Status::Corruption("malformed append-batch frame");
      }
      // The writer never passes the largest offset; a frame that would is damage (and salvage,
      // which accepts a batch that skips ahead, must not wrap the stream's offsets around).
      if (h.count > std::numeric_limits<uint64_t>::max() - h.first_offset) {
        return Status::Corruption("append-batch of stream #" + std::to_string(id) + " at " +
                                  std::to_string(h.first_offset) + " passes the largest offset");
      }
      if (h.first_offset != s->next) {
        if (!(replay && options_.salvage)) {
          return Status::Corruption("append-batch of stream #" + std::to_string(id) +
                                    " starts at " + std::to_string(h.first_offset) +
                                    " but the stream's next offset is " + std::to_string(s->next));
        }
        if (h.first_offset < s->next) return Status::OK();  // already present
        // The records between were in the damaged bytes: they become a hole (offsets kept,
        // reads of them fail), and every intact record before and after stays readable.
        SalvageNote("salvage: stream '" + s->name.str() + "' (#" + std::to_string(id) +
                    ") lost records " + std::to_string(s->next) + " to " +
                    std::to_string(h.first_offset - 1) + " to the damage; the records before " +
                    "and after them are kept");
        if (s->head == s->next || h.first_offset - s->next > kMaxHoleRecords) {
          // Nothing retained before (no hole needed), or a gap too wide to index record by
          // record: the stream starts over at the intact frame.
          DropHead(*s, s->next - s->head);
          s->head = s->next = h.first_offset;
        } else {
          s->batches.push_back(BatchRef{s->next, h.timestamp, kLostSegment, 0, 0});
          for (uint64_t o = s->next; o < h.first_offset; ++o) s->PushSize(0, 0);
          s->next = h.first_offset;
        }
      }
      if (h.count > 0) {
        for (const auto& [payload, key] : sizes) {
          s->PushSize(payload, key);
        }
        BatchRef* last = s->batch_begin < s->batches.size() ? &s->batches.back() : nullptr;
        if (last != nullptr && last->segment == segment && last->pos + last->len == pos &&
            last->timestamp == h.timestamp && last->len + len <= kMaxMergedBatchBytes && !replay &&
            last->pos >= merge_floor_pos_) {
          last->len += len;  // the next adjacent frame of this stream: same reference
        } else {
          s->batches.push_back(BatchRef{h.first_offset, h.timestamp, segment, pos, len});
        }
        auto it = segments_.find(segment);
        if (it != segments_.end()) it->second.live_bytes += len;
        s->next += h.count;
      }
      if (h.producer) {
        ProducerState p = std::move(*h.producer);
        p.last_offset = h.count ? s->next - 1 : 0;
        s->mut().producers[p.producer_id] = std::move(p);
      }
      if (h.close) s->closed = true;
      if (h.attributes && (s->extras || !h.attributes->empty())) {
        s->mut().attributes = std::move(*h.attributes);
      }
      // Retention, exactly as every store applies it.
      const StreamRetention& retention = s->view().retention;
      if (retention.max_events || retention.max_bytes || retention.max_age_ms) {
        store::RetainedView view;
        view.count = static_cast<size_t>(s->next - s->head - s->Dropped());
        view.total_bytes = s->bytes;
        // The i-th retained record's offset: the i-th one not dropped. Retention asks for the
        // oldest ones in order, so a walk from the last answer finds it (a stream without
        // dropped records maps i to head + i).
        auto at = std::make_shared<std::pair<size_t, uint64_t>>(0, s->head);
        auto offset_of = [s, at](size_t i) {
          if (s->Dropped() == 0) return s->head + i;
          if (i < at->first) *at = {0, s->head};
          while (at->first < i || s->DroppedAt(s->size_begin + (at->second - s->head))) {
            if (!s->DroppedAt(s->size_begin + (at->second - s->head))) ++at->first;
            ++at->second;
          }
          return at->second;
        };
        view.timestamp_at = [s, offset_of](size_t i) {
          const uint64_t off = offset_of(i);
          auto it = std::upper_bound(
              s->batches.begin() + static_cast<std::ptrdiff_t>(s->batch_begin), s->batches.end(),
              off, [](uint64_t o, const BatchRef& b) { return o < b.first_offset; });
          return std::prev(it)->timestamp;
        };
        view.bytes_at = [s, offset_of](size_t i) {
          return s->RecordBytesAt(s->size_begin + (offset_of(i) - s->head));
        };
        const size_t cut = store::RetentionDropCount(retention, h.timestamp, view);
        // DropHead counts dropped records too: the cut ends after the cut-th retained record.
        DropHead(*s, cut == 0 ? 0 : offset_of(cut - 1) + 1 - s->head);
      }
      if (replay) {
        s->reserved_next = s->next;
        s->reserved_closed = s->closed;
      }
      return Status::OK();
    }
    case FrameType::kCursorCommit: {
      std::string consumer;
      uint64_t offset, now;
      if (!r.String(&consumer) || !r.U64(&offset) || !r.U64(&now) || !r.done()) {
        return Status::Corruption("malformed cursor-commit frame");
      }
      auto& cursors = s->mut().cursors;
      auto it = cursors.find(consumer);
      if (it == cursors.end()) {
        cursors.emplace(consumer, CursorState{consumer, offset, now});
      } else if (offset > it->second.offset) {
        it->second.offset = offset;
        it->second.updated_at_ms = now;
      }
      return Status::OK();
    }
    case FrameType::kCursorDelete: {
      std::string consumer;
      if (!r.String(&consumer) || !r.done()) {
        return Status::Corruption("malformed cursor-delete frame");
      }
      auto& cursors = s->mut().cursors;
      if (auto it = cursors.find(consumer); it != cursors.end()) cursors.erase(it);
      return Status::OK();
    }
    case FrameType::kRelocatedBatch: {
      AppendBatchHeader h;
      if (!DecodeAppendBatch(body, &h, nullptr, nullptr) ||
          h.count > std::numeric_limits<uint64_t>::max() - h.first_offset) {
        return Status::Corruption("malformed relocated-batch frame");
      }
      auto begin = s->batches.begin() + static_cast<std::ptrdiff_t>(s->batch_begin);
      auto it = std::lower_bound(begin, s->batches.end(), h.first_offset,
                                 [](const BatchRef& b, uint64_t o) { return b.first_offset < o; });
      if (it == s->batches.end() || it->first_offset != h.first_offset) return Status::OK();
      // A reference whose records were all dropped since stays dead.
      if (it->lost()) return Status::OK();
      // The frame is the first of its reference (the cleaner moves a reference's frames in
      // order; a relocated frame is exactly as long as the one it copies, or names that length
      // when it is compacted). When the reference holds more frames, the moved one is carved off
      // the front and the rest stay where they are, so a cleaner cut short by a crash leaves
      // every record reachable.
      const uint32_t source = h.source_len != 0 ? h.source_len : len;
      const uint32_t moved = std::min(source, it->len);
      // The dropped records' payloads stay behind in a compacted copy.
      const uint64_t moved_dropped = DroppedBytesIn(*s, h.first_offset, h.first_offset + h.count);
      auto old_seg = segments_.find(it->segment);
      if (old_seg != segments_.end()) {
        old_seg->second.live_bytes -= std::min<uint64_t>(moved, old_seg->second.live_bytes);
        old_seg->second.dropped_bytes -=
            std::min<uint64_t>(moved_dropped, old_seg->second.dropped_bytes);
      }
      std::optional<BatchRef> rest;
      if (source < it->len && h.count > 0) {
        rest = BatchRef{h.first_offset + h.count, it->timestamp, it->segment, it->pos + source,
                        it->len - source};
      }
      it->segment = segment;
      it->pos = pos;
      it->len = len;
      auto new_seg = segments_.find(segment);
      if (new_seg != segments_.end()) {
        new_seg->second.live_bytes += len;
        if (h.source_len == 0) new_seg->second.dropped_bytes += moved_dropped;
      }
      if (rest) s->batches.insert(std::next(it), *rest);
      return Status::OK();
    }
    case FrameType::kDropRecords: {
      StreamId named;
      std::vector<uint64_t> offsets;
      if (!DecodeDropRecords(body, &named, &offsets)) {
        return Status::Corruption("malformed drop-records frame");
      }
      ApplyDrops(*s, offsets);
      return Status::OK();
    }
    case FrameType::kTruncateHead: {
      uint64_t new_head;
      if (!r.U64(&new_head) || !r.done()) return Status::Corruption("malformed truncate frame");
      if (new_head > s->head) DropHead(*s, std::min(new_head, s->next) - s->head);
      return Status::OK();
    }
    default:
      return Status::Corruption("unknown frame type " + std::to_string(static_cast<int>(type)));
  }
}

// ------------------------------------------------------------------------------------------
// The writer

void LogStore::Enqueue(std::shared_ptr<Op> op) {
  {
    MutexLock lock(queue_mu_);
    if (!stopping_) {
      // The writer only waits when the queue is empty, so only the first op needs to wake it.
      const bool was_empty = queue_.empty();
      queue_.push_back(std::move(op));
      if (was_empty || queue_.size() == group_target_) queue_cv_.notify_one();
      return;
    }
  }
  op->status = Status::Unavailable("the log store is closing");
  op->refused = true;
  FinishOp(*op);
}

Status LogStore::Submit(const std::shared_ptr<Op>& op) {
  Enqueue(op);
  MutexLock lock(op->mu);
  while (!op->finished) lock.Wait(op->cv);
  return op->status;
}

std::shared_ptr<const TailListener> LogStore::Listener() const {
  MutexLock lock(listener_mu_);
  return listener_;
}

void LogStore::FinishOp(Op& op) {
  FinishOp(op, op.kind == OpKind::kAppend ? Listener() : nullptr);
}

void LogStore::FinishOp(Op& op, const std::shared_ptr<const TailListener>& listener) {
  if (op.kind == OpKind::kAppend) {
    if (op.status.ok()) {
      if (listener && *listener) (*listener)(op.append.stream, op.append_result.next_offset);
      op.append_done(op.append_result);
    } else {
      op.append_done(op.status);
    }
    return;
  }
  MutexLock lock(op.mu);
  op.finished = true;
  op.cv.notify_all();
}

void LogStore::WriterLoop() {
  // The group-commit wait is tens of microseconds: the default 50 us timer slack would double it.
  ::prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL);
  std::vector<std::shared_ptr<Op>> ops;
  for (;;) {
    bool stop = false;
    {
      MutexLock lock(queue_mu_);
      if (queue_.empty() && !stopping_) {
        if (unsynced_ && options_.durability.mode == LogDurability::kInterval) {
          lock.WaitUntil(queue_cv_,
                         last_sync_ + std::chrono::milliseconds(options_.durability.interval_ms));
        } else {
          while (queue_.empty() && !stopping_ && !checkpoint_written_) lock.Wait(queue_cv_);
        }
      }
      checkpoint_written_ = false;
      WaitForFullerGroup(lock);
      ops.swap(queue_);
      stop = stopping_ && ops.empty();
    }
    if (stop) break;
    const size_t taken = ops.size();
    queued_at_ack_ = 0;
    std::vector<std::shared_ptr<Op>> group;
    uint64_t group_bytes = 0;
    for (auto& op : ops) {
      if (op->kind == OpKind::kAppend || op->kind == OpKind::kCursor ||
          op->kind == OpKind::kCursorDelete || op->kind == OpKind::kCreate) {
        Prepare(*op);
        group_bytes += op->frame_len;
        group.push_back(std::move(op));
        // Bounded groups keep frame positions within a segment's 32-bit range.
        if (group_bytes >= kMaxGroupBytes) {
          CommitGroup(group, false);
          group.clear();
          group_bytes = 0;
        }
        continue;
      }
      group_bytes = 0;
      CommitGroup(group, false);
      group.clear();
      if (op->kind == OpKind::kCheckpoint) {
        if (op->clean) {
          PollBackgroundCheckpoint(true);  // the cleaner runs with no checkpoint under way
          op->status = Clean();
        }
        if (op->status.ok()) op->status = WriteCheckpoint();
        FinishOp(*op);
        continue;
      }
      Prepare(*op);
      const bool force = op->kind == OpKind::kFlush;
      group.push_back(std::move(op));
      CommitGroup(group, force);
      group.clear();
    }
    CommitGroup(group, false);
    ops.clear();
    last_group_ops_ = taken + queued_at_ack_;
    if (unsynced_ && options_.durability.mode == LogDurability::kInterval &&
        std::chrono::steady_clock::now() - last_sync_ >=
            std::chrono::milliseconds(options_.durability.interval_ms)) {
      Status s = SyncActive();
      (void)s;  // a failure leaves unsynced_ set; the next group or Flush retries and reports
    }
    auto now = std::chrono::steady_clock::now();
    // A full disk gives space back as soon as something in an old segment died (a delete, a
    // truncation, retention), without waiting for appends or the checkpoint interval.
    if (disk_full_ && reclaim_due_ && now >= reclaim_retry_at_) {
      ReclaimSpace();
      now = std::chrono::steady_clock::now();
    }
    const bool freeing = segment_freed_ && bytes_since_checkpoint_ > 0 &&
                         now - last_freeing_checkpoint_ >= std::chrono::seconds(10);
    // A checkpoint written in the background is finished first; none starts while it is not.
    // Appends that outrun it (kMaxCheckpointBacklog intervals logged since the last durable
    // one) wait for it here: otherwise what a restart replays, and the dead segments only a
    // checkpoint can delete, would grow without bound while its file is slow to land.
    if (background_checkpoint_ != nullptr && bytes_since_checkpoint_ >= checkpoint_backlog_bytes_) {
      WaitForBackgroundCheckpoint();
    }
    const bool checkpoint_idle = PollBackgroundCheckpoint(false);
    // Records that died in old segments count toward the interval as appended bytes do: under
    // churn, the space they leave is reclaimed (by the cleaner, then the checkpoint) at the pace
    // it appears, not one whole interval of appends later.
    const bool periodic =
        bytes_since_checkpoint_ > 0 &&
        bytes_since_checkpoint_ + freed_since_checkpoint_ >= options_.checkpoint_interval_bytes;
    if ((periodic || freeing) && now >= checkpoint_retry_at_ && checkpoint_idle) {
      if (freeing) last_freeing_checkpoint_ = now;
      segment_freed_ = false;
      if (periodic) freed_since_checkpoint_ = 0;
      // The cleaner copies live records forward: not for a checkpoint that only frees space.
      Status s = periodic ? Clean() : Status::OK();
      if (s.ok()) {
        StartBackgroundCheckpoint();
      } else {
        CheckpointFailed(s);
      }
    }
  }
  // Clean shutdown: make everything durable and checkpoint so the next open replays nothing
  // (after the checkpoint being written in the background, if any, is done). A store opened on
  // a new directory that wrote nothing leaves nothing (UndoCreation): no checkpoint either.
  PollBackgroundCheckpoint(true);
  if (fresh_ && !wrote_) return;
  Status s = SyncActive();
  if (s.ok()) s = WriteCheckpoint();
  if (!s.ok()) {
    // Nothing is lost (the log holds it all); the next open replays more.
    LogF(LogLevel::kWarn, "log store %s: closing checkpoint not written (%s)", options_.dir.c_str(),
         s.ToString().c_str());
  }
}

void LogStore::WaitForFullerGroup(MutexLock& lock) {
  if (options_.durability.mode != LogDurability::kFsync || options_.group_commit_wait_us == 0 ||
      stopping_ || queue_.empty() || queue_.size() >= last_group_ops_) {
    return;
  }
  const uint64_t bound = std::min<uint64_t>(options_.group_commit_wait_us, sync_mean_us_ / 2);
  if (bound == 0) return;
  store::WaitForFullerGroup(
      queue_cv_, lock, last_group_ops_, std::chrono::microseconds(bound),
      std::chrono::microseconds(options_.group_arrival_gap_us), &group_target_,
      [&] {
        queue_mu_.AssertHeld();  // called by WaitForFullerGroup under `lock`
        return queue_.size();
      },
      [&] {
        queue_mu_.AssertHeld();
        return stopping_;
      });
}

std::optional<uint64_t> LogStore::PendingCursor(const StreamState& s,
                                                const std::pair<StreamId, std::string>& key) const {
  if (auto pit = pending_cursors_.find(key); pit != pending_cursors_.end()) return pit->second;
  if (auto it = s.view().cursors.find(key.second); it != s.view().cursors.end()) {
    return it->second.offset;
  }
  return std::nullopt;
}

void LogStore::Prepare(Op& op) {
  op.frame_at = group_buf_.size();
  EncodeOp(op);
  op.frame_len = group_buf_.size() - op.frame_at;
}

void LogStore::EncodeOp(Op& op) {
  auto refuse = [&](Status s) {
    op.status = std::move(s);
    op.refused = true;
  };
  switch (op.kind) {
    case OpKind::kAppend: {
      AppendRequest& req = op.append;
      StreamState* s = FindLocked(req.stream);
      if (s == nullptr) return refuse(StreamNotFound(req.stream));
      if (s->reserved_closed) {
        return refuse(Status::FailedPrecondition("stream '" + s->name.str() + "' is closed"));
      }
      if (req.records.empty() && !req.close) {
        return refuse(Status::InvalidArgument("an append needs at least one record"));
      }
      if (req.expected_offset && *req.expected_offset != s->reserved_next) {
        return refuse(Status::Conflict("expected offset " + std::to_string(*req.expected_offset) +
                                           " but the stream's next offset is " +
                                           std::to_string(s->reserved_next),
                                       *req.expected_offset, s->reserved_next));
      }
      if (req.expected_attributes) {
        // An append earlier in this group may have set them (not applied before the write).
        auto pending = pending_attributes_.find(req.stream);
        const std::string& current =
            pending != pending_attributes_.end() ? pending->second : s->view().attributes;
        if (*req.expected_attributes != current)
          return refuse(store::AttributesChanged(s->name.str()));
      }
      if (req.producer) {
        // Against an append earlier in this group first, then the applied state.
        std::optional<std::pair<uint64_t, uint64_t>> stored;
        const auto key = std::make_pair(req.stream, req.producer->producer_id);
        if (auto p = pending_producers_.find(key); p != pending_producers_.end()) {
          stored = p->second;
        } else if (auto v = s->view().producers.find(req.producer->producer_id);
                   v != s->view().producers.end()) {
          stored.emplace(v->second.epoch, v->second.seq);
        }
        if (Status checked = store::CheckProducer(stored, *req.producer); !checked.ok()) {
          return refuse(std::move(checked));
        }
      }
      const uint64_t n = req.records.size();
      if (n > std::numeric_limits<uint64_t>::max() - s->reserved_next) {
        return refuse(
            Status::OutOfRange("stream '" + s->name.str() + "' would pass the largest offset"));
      }
      size_t estimate = 64;
      for (const auto& r : req.records)
        estimate += 9 + r.payload.size() + (r.key ? r.key->size() : 0);
      if (req.producer) estimate += 24 + req.producer->producer_id.size();
      if (req.attributes) estimate += 4 + req.attributes->size();
      if (estimate > kMaxBodySize) {
        return refuse(Status::InvalidArgument("append batch of " + std::to_string(estimate) +
                                              " bytes is larger than the 1 GiB limit"));
      }
      group_buf_.reserve(group_buf_.size() + kFrameHeaderSize + estimate);
      const size_t frame = BeginFrame(&group_buf_, FrameType::kAppendBatch);
      EncodeAppendBatch(&group_buf_, req.stream, s->reserved_next, req.now_ms, req.records,
                        req.close, req.producer, req.attributes);
      FinishFrame(&group_buf_, frame);
      op.append_result.first_offset = n ? s->reserved_next : 0;
      op.append_result.last_offset = n ? s->reserved_next + n - 1 : 0;
      s->reserved_next += n;
      op.append_result.next_offset = s->reserved_next;
      if (req.close) s->reserved_closed = true;
      if (req.attributes) pending_attributes_[req.stream] = *req.attributes;
      if (req.producer) {
        pending_producers_[{req.stream, req.producer->producer_id}] = {req.producer->epoch,
                                                                       req.producer->seq};
      }
      return;
    }
    case OpKind::kCursor: {
      StreamState* s = FindLocked(op.stream);
      if (s == nullptr) return refuse(StreamNotFound(op.stream));
      auto key = std::make_pair(op.stream, op.consumer);
      const std::optional<uint64_t> current = PendingCursor(*s, key);
      if (current && *current >= op.offset) {
        op.u64_result = *current;
        return;  // nothing changes, nothing to write
      }
      op.u64_result = op.offset;
      pending_cursors_[key] = op.offset;
      AppendFrame(&group_buf_, FrameType::kCursorCommit,
                  EncodeCursorCommit(op.stream, op.consumer, op.offset, op.now_ms));
      return;
    }
    case OpKind::kCursorDelete: {
      StreamState* s = FindLocked(op.stream);
      if (s == nullptr) return refuse(StreamNotFound(op.stream));
      auto key = std::make_pair(op.stream, op.consumer);
      if (!PendingCursor(*s, key)) {
        op.u64_result = 0;
        return;  // there is none: nothing to write
      }
      op.u64_result = 1;
      pending_cursors_[key] = std::nullopt;
      AppendFrame(&group_buf_, FrameType::kCursorDelete,
                  EncodeCursorDelete(op.stream, op.consumer));
      return;
    }
    case OpKind::kCreate: {
      if (FindByNameLocked(op.spec.ns, op.spec.name) != nullptr ||
          !pending_names_.emplace(op.spec.ns, op.spec.name).second) {
        return refuse(
            Status::AlreadyExists("stream '" + op.spec.name + "' already exists in " + op.spec.ns));
      }
      op.stream = reserved_next_id_++;
      AppendFrame(&group_buf_, FrameType::kCreateStream, EncodeCreateStream(op.stream, op.spec));
      return;
    }
    case OpKind::kUpdate: {
      StreamState* s = FindLocked(op.stream);
      if (s == nullptr) return refuse(StreamNotFound(op.stream));
      // Committed alone: every earlier write of the stream is applied (view()).
      if (op.append.expected_attributes && *op.append.expected_attributes != s->view().attributes) {
        return refuse(store::AttributesChanged(s->name.str()));
      }
      if (op.append.expected_offset && *op.append.expected_offset != s->reserved_next) {
        return refuse(
            store::NextOffsetChanged(s->name.str(), *op.append.expected_offset, s->reserved_next));
      }
      // Committed alone, so view() is the stream as this frame replaces it.
      if (op.keep_retention) op.retention = s->view().retention;
      AppendFrame(&group_buf_, FrameType::kUpdateStream,
                  EncodeUpdateStream(op.stream, op.retention, op.attributes));
      return;
    }
    case OpKind::kDelete: {
      if (FindLocked(op.stream) == nullptr) return refuse(StreamNotFound(op.stream));
      AppendFrame(&group_buf_, FrameType::kDeleteStream, EncodeDeleteStream(op.stream));
      return;
    }
    case OpKind::kTruncate: {
      StreamState* s = FindLocked(op.stream);
      if (s == nullptr) return refuse(StreamNotFound(op.stream));
      uint64_t cut = op.offset;
      if (op.respect_cursors) {
        for (const auto& [name, c] : s->view().cursors) cut = std::min(cut, c.offset);
      }
      const uint64_t new_head = cut >= s->next ? s->next : std::max(s->head, cut + 1);
      // The records removed: dropped ones are gone already.
      op.u64_result = new_head - s->head;
      if (s->Dropped() > 0) {
        for (uint64_t o = s->head; o < new_head; ++o) {
          if (s->DroppedAt(s->size_begin + (o - s->head))) --op.u64_result;
        }
      }
      if (new_head > s->head) {
        AppendFrame(&group_buf_, FrameType::kTruncateHead, EncodeTruncateHead(op.stream, new_head));
      }
      return;
    }
    case OpKind::kDropRecords: {
      StreamState* s = FindLocked(op.stream);
      if (s == nullptr) return refuse(StreamNotFound(op.stream));
      // Committed alone: every earlier write of the stream is applied. The frame names only the
      // records there are, so its count is the call's answer.
      std::vector<uint64_t> present;
      present.reserve(op.offsets.size());
      for (uint64_t o : op.offsets) {
        if (o < s->head || o >= s->next || (!present.empty() && present.back() == o)) continue;
        if (s->DroppedAt(s->size_begin + (o - s->head))) continue;
        present.push_back(o);
      }
      op.u64_result = present.size();
      if (!present.empty()) {
        AppendFrame(&group_buf_, FrameType::kDropRecords, EncodeDropRecords(op.stream, present));
      }
      return;
    }
    case OpKind::kFlush:
    case OpKind::kCheckpoint: return;
  }
}

void LogStore::CommitGroup(std::vector<std::shared_ptr<Op>>& group, bool force_sync) {
  if (group.empty()) return;
  uint64_t records = 0;
  bool appended = false;
  for (const auto& op : group) {
    if (op->kind == OpKind::kAppend && op->frame_len > 0) {
      records += op->append.records.size();
      appended = appended || !op->append.records.empty();
    }
  }
  const uint64_t total = group_buf_.size();
  uint64_t pos = 0;
  Status written;
  if (total > 0 || force_sync) {
    const bool sync = force_sync || options_.durability.mode == LogDurability::kFsync;
    std::vector<std::string_view> pieces;
    if (total > 0) pieces.push_back(group_buf_);
    written = WriteFrames(pieces, total, records, sync, records > 0, &pos);
    if (written.no_space()) {
      // Nothing of the group was written. Space dead records left behind comes back first,
      // then the group gets one more try.
      disk_full_ = true;
      if (reclaim_due_ && std::chrono::steady_clock::now() >= reclaim_retry_at_ && ReclaimSpace()) {
        written = WriteFrames(pieces, total, records, sync, records > 0, &pos);
      }
    }
  }
  if (!written.ok()) {
    if (written.no_space()) {
      written = Status::NoSpace("disk full: nothing was written to the log (" +
                                std::string(written.message()) +
                                "); deleting or trimming streams gives space back");
    }
    for (auto& op : group) {
      if (!op->refused) op->status = written;
    }
    // Forget what the failed group reserved.
    streams_.ForEach([](StreamState& s) {
      s.reserved_next = s.next;
      s.reserved_closed = s.closed;
    });
  } else if (total > 0) {
    WriterLock lock(state_mu_);
    merge_floor_pos_ = static_cast<uint32_t>(pos);
    for (auto& op : group) {
      if (op->frame_len == 0) continue;
      // The writer encoded this frame itself: its header is known good, no CRC check needed.
      const std::string_view frame(group_buf_.data() + op->frame_at, op->frame_len);
      Status s = ApplyFrame(static_cast<FrameType>(frame[8]), frame.substr(kFrameHeaderSize),
                            static_cast<uint32_t>(active_segment_),
                            static_cast<uint32_t>(pos + op->frame_at),
                            static_cast<uint32_t>(frame.size()), false);
      if (!s.ok()) {
        op->status = Status::Internal("applying a committed frame failed: " + s.ToString());
        continue;
      }
      if (op->kind == OpKind::kCreate || op->kind == OpKind::kUpdate ||
          op->kind == OpKind::kTruncate) {
        if (StreamState* st = FindLocked(op->stream)) op->info = Snapshot(*st);
      }
    }
    if (appended && options_.tail_cache_bytes > 0) {
      // The whole group is cached as written: one allocation per group, not per batch. A copy
      // of exactly its size, not the buffer itself: the buffer grew by doubling, so its
      // capacity can be twice its size, memory the cache's bound would not count; and the
      // writer keeps reusing its capacity.
      cache_bytes_ += total;
      cache_.push_back(CachedGroup{(active_segment_ << 32) | pos,
                                   std::make_shared<const std::string>(group_buf_)});
      while (cache_bytes_ > options_.tail_cache_bytes && !cache_.empty()) {
        cache_bytes_ -= cache_.front().bytes->size();
        cache_.pop_front();
      }
    }
    bytes_since_checkpoint_ += total;
    if (!reserve_requested_) RequestReserve();
  }
  // Keep the buffer's capacity for the next group, unless one huge group grew it.
  group_buf_.clear();
  if (group_buf_.capacity() > kKeptGroupBufferBytes) group_buf_.shrink_to_fit();
  pending_cursors_.clear();
  pending_names_.clear();
  pending_attributes_.clear();
  pending_producers_.clear();
  reserved_next_id_ = next_stream_id_;
  if (options_.durability.mode == LogDurability::kFsync && options_.group_commit_wait_us > 0) {
    MutexLock lock(queue_mu_);  // only WaitForFullerGroup reads it
    queued_at_ack_ = queue_.size();
  }
  const std::shared_ptr<const TailListener> listener = Listener();
  for (auto& op : group) {
    if (op->kind == OpKind::kCreate && op->status.ok() && op->info.id == 0) {
      ReaderLock lock(state_mu_);
      if (StreamState* st = FindLocked(op->stream)) op->info = Snapshot(*st);
    }
    FinishOp(*op, listener);
  }
}

Status LogStore::SyncActive() {
  if (!unsynced_) return Status::OK();
  Segment* seg;
  {
    ReaderLock lock(state_mu_);
    seg = &segments_.at(active_segment_);
  }
  return SyncLog(*seg->file);
}

Status LogStore::SyncLog(env::File& file) {
  const auto t0 = std::chrono::steady_clock::now();
  RUNNEL_RETURN_IF_ERROR(file.Sync());
  last_sync_ = std::chrono::steady_clock::now();
  unsynced_ = false;
  const auto micros =
      std::chrono::duration_cast<std::chrono::microseconds>(last_sync_ - t0).count();
  const auto sync_us = static_cast<uint64_t>(micros);
  sync_mean_us_ = sync_mean_us_ == 0 ? sync_us : (sync_mean_us_ * 7 + sync_us) / 8;
  {
    MutexLock lock(stats_mu_);
    stats_.CountSync(unsynced_records_, unsynced_bytes_, sync_us);
  }
  unsynced_records_ = 0;
  unsynced_bytes_ = 0;
  return Status::OK();
}

StoreCommitStats LogStore::CommitStats() const {
  StoreCommitStats out;
  {
    MutexLock lock(stats_mu_);
    out = stats_;
  }
  out.available = true;
  out.scrubbed_bytes = scrubbed_bytes_.load(std::memory_order_relaxed);
  out.scrub_passes = scrub_passes_.load(std::memory_order_relaxed);
  out.unreadable_reads = unreadable_reads_.load(std::memory_order_relaxed);
  {
    MutexLock lock(damage_mu_);
    out.damaged_frames = damage_seen_.size();
  }
  return out;
}

Status LogStore::Repair() {
  std::shared_ptr<env::File> file;
  {
    ReaderLock lock(state_mu_);
    file = segments_.at(active_segment_).file;
  }
  if (options_.prezero_segments) {
    for (uint64_t p = active_pos_; p < dirty_end_; p += kZeroChunk) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(kZeroChunk, dirty_end_ - p));
      RUNNEL_RETURN_IF_ERROR(file->WriteAt(p, std::string_view(Zeros()).substr(0, n)));
    }
  } else {
    RUNNEL_RETURN_IF_ERROR(file->Truncate(active_pos_));
  }
  RUNNEL_RETURN_IF_ERROR(file->Sync());
  dirty_end_ = active_pos_;
  repair_needed_ = false;
  return Status::OK();
}

uint64_t LogStore::TailReserve() const {
  return std::min<uint64_t>(4096, options_.segment_size / 16);
}

Status LogStore::WriteFrames(const std::vector<std::string_view>& pieces, uint64_t total,
                             uint64_t records, bool sync, bool leave_tail, uint64_t* pos_out) {
  if (repair_needed_) {
    Status s = Repair();
    if (!s.ok()) {
      return Status::IOError("log is not writable until an earlier failed write is repaired: " +
                             std::string(s.message()));
    }
  }
  // Frames carrying records leave the last bytes of a segment to the others (deletes,
  // truncations, cursor commits, checkpoint markers): on a full disk, where no new segment can
  // be made, a delete still fits, and so does the checkpoint that lets its space go.
  const uint64_t reserve = leave_tail ? TailReserve() : 0;
  if (total > 0 && active_pos_ + total + reserve > active_capacity_ &&
      active_pos_ > kSegmentHeaderSize) {
    RUNNEL_RETURN_IF_ERROR(SyncActive());
    RUNNEL_RETURN_IF_ERROR(RollSegment(total));
  }
  std::shared_ptr<env::File> file;
  {
    ReaderLock lock(state_mu_);
    file = segments_.at(active_segment_).file;
  }
  Status s;
  if (total > 0) {
    s = file->WriteAt(active_pos_, pieces);
    unsynced_ = true;
  }
  const bool written = s.ok();
  if (written) {
    unsynced_bytes_ += total;
    unsynced_records_ += records;
  }
  if (s.ok() && (sync || (unsynced_ && options_.durability.mode == LogDurability::kInterval &&
                          std::chrono::steady_clock::now() - last_sync_ >=
                              std::chrono::milliseconds(options_.durability.interval_ms)))) {
    s = SyncLog(*file);
  }
  if (!s.ok()) {
    // Nothing of this group is acknowledged or counted.
    if (written) {
      unsynced_bytes_ -= std::min(unsynced_bytes_, total);
      unsynced_records_ -= std::min(unsynced_records_, records);
    }
    // The bytes may or may not have reached the disk. Zero them again so that nothing of this
    // group can ever be recovered; if that works the failure is definite.
    dirty_end_ = std::max(dirty_end_, active_pos_ + total);
    repair_needed_ = true;
    Status repaired = Repair();
    if (repaired.ok()) {
      const std::string what = "log write failed, nothing was written: " + std::string(s.message());
      return s.no_space() ? Status::NoSpace(what) : Status::IOError(what);
    }
    return Status::OutcomeUnknown("log write failed (" + std::string(s.message()) +
                                  ") and could not be undone (" + std::string(repaired.message()) +
                                  "); the batch may reappear after a restart");
  }
  *pos_out = active_pos_;
  active_pos_ += total;
  if (total > 0) wrote_ = true;
  dirty_end_ = std::max(dirty_end_, active_pos_);
  {
    WriterLock lock(state_mu_);
    segments_.at(active_segment_).end = active_pos_;
  }
  return Status::OK();
}

Status LogStore::RollSegment(uint64_t min_capacity) {
  const auto started = std::chrono::steady_clock::now();
  const uint64_t number = active_segment_ + 1;
  const std::string path = SegmentPath(number);
  const uint64_t capacity =
      std::max<uint64_t>(options_.segment_size, kSegmentHeaderSize + min_capacity);
  auto install = [&](std::shared_ptr<env::File> file, bool prepared) {
    {
      WriterLock lock(state_mu_);
      Segment& seg = segments_[number];
      seg.number = number;
      seg.file = std::move(file);
      seg.end = kSegmentHeaderSize;
    }
    active_segment_ = number;
    active_pos_ = kSegmentHeaderSize;
    dirty_end_ = active_pos_;
    active_capacity_ = capacity;
    unsynced_ = false;
    disk_full_ = false;
    reclaim_due_ = true;  // the segment just sealed may hold dead records
    RequestPreparedSegment(number + 1);
    MutexLock lock(stats_mu_);
    ++stats_.segment_rolls;
    if (!prepared) ++stats_.segment_rolls_unprepared;
    stats_.segment_roll_micros +=
        static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                  std::chrono::steady_clock::now() - started)
                                  .count());
  };
  if (capacity == options_.segment_size) {
    if (auto prepared = TakePreparedSegment(number)) {
      Status s = env_->RenameFile(path + ".prep", path);
      if (s.ok()) s = env_->SyncDir(options_.dir);
      if (s.ok()) {
        install(std::move(prepared), true);
        return Status::OK();
      }
      Status removed = env_->RemoveFile(env_->FileExists(path) ? path : path + ".prep");
      (void)removed;  // fall back to creating the segment here
    }
  }
  // After a failure (a full disk, say), appends that need a new segment fail fast with the
  // same error for a second, instead of each writing zeros until the disk refuses again.
  const auto now = std::chrono::steady_clock::now();
  if (!roll_failure_.ok() && now - roll_failed_at_ < std::chrono::seconds(1)) {
    return roll_failure_;
  }
  auto fail = [&](Status s) {
    Status removed = env_->RemoveFile(path);
    (void)removed;
    roll_failure_ = s;
    roll_failed_at_ = now;
    return s;
  };
  roll_failure_ = Status::OK();
  RUNNEL_ASSIGN_OR_RETURN(auto file, env_->OpenFile(path, true));
  std::shared_ptr<env::File> shared(std::move(file));
  Status s = shared->WriteAt(0, EncodeSegmentHeader(number));
  if (s.ok() && options_.prezero_segments) {
    for (uint64_t p = kSegmentHeaderSize; p < capacity && s.ok(); p += kZeroChunk) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(kZeroChunk, capacity - p));
      s = shared->WriteAt(p, std::string_view(Zeros()).substr(0, n));
    }
  }
  if (s.ok()) s = shared->Sync();
  if (s.ok()) s = env_->SyncDir(options_.dir);
  if (!s.ok()) return fail(s);
  install(std::move(shared), false);
  return Status::OK();
}

Status LogStore::BeginCheckpoint(CheckpointJob* job) {
  // The marker frame closes the replayed range; the checkpoint replays from just after it.
  const uint64_t seq = checkpoint_seq_ + 1;
  job->seq = seq;
  job->log_bytes = bytes_since_checkpoint_;
  std::string marker;
  AppendFrame(&marker, FrameType::kCheckpointMarker, EncodeCheckpointMarker(seq));
  std::vector<std::string_view> pieces{marker};
  uint64_t pos;
  RUNNEL_RETURN_IF_ERROR(WriteFrames(pieces, marker.size(), 0, true, false, &pos));
  const uint64_t replay_segment = active_segment_;
  const uint64_t replay_pos = active_pos_;

  const auto build_started = std::chrono::steady_clock::now();
  std::string& body = job->body;
  body.clear();
  // Grown once instead of doubling through a 100+ MB body (a copy and fresh pages each time).
  body.reserve(static_cast<size_t>(checkpoint_body_bytes_ + checkpoint_body_bytes_ / 8));
  bool has_holes = false;    // a version 3 checkpoint is needed
  bool has_dropped = false;  // a version 4 checkpoint is needed
  OfferHugePages(body.data(), body.capacity());
  {
    ReaderLock lock(state_mu_);
    PutU64(&body, seq);
    PutU64(&body, replay_segment);
    PutU64(&body, replay_pos);
    PutU64(&body, next_stream_id_);
    PutU64(&body, streams_.size());
    // In (ns, name) order, as the name index holds them: not the id table's order, which
    // depends on its history, and the order in which loading indexes names fastest.
    uint64_t written = 0;
    for (const auto& [ns, named] : names_) {
      for (const StreamState* s : named) {
        ++written;
        has_dropped = has_dropped || s->Dropped() > 0;
        if (s->batch_begin < s->batches.size()) {
          has_holes =
              has_holes || std::any_of(s->batches.begin() + s->batch_begin, s->batches.end(),
                                       [](const BatchRef& b) { return b.lost(); });
        }
        PutU64(&body, s->id);
        PutString(&body, *s->ns);
        PutString(&body, s->name.view());
        PutString(&body, *s->content_type);
        PutRetention(&body, s->view().retention);
        PutU64(&body, s->first_offset);
        PutU64(&body, s->created_at_ms);
        PutString(&body, s->view().attributes);
        PutU64(&body, s->head);
        PutU64(&body, s->next);
        PutU8(&body, s->closed ? 1 : 0);
        PutU64(&body, s->batches.size() - s->batch_begin);
        for (size_t i = s->batch_begin; i < s->batches.size(); ++i) {
          const BatchRef& b = s->batches[i];
          PutU64(&body, b.first_offset);
          PutU64(&body, b.timestamp);
          PutU32(&body, b.segment);
          PutU32(&body, b.pos);
          PutU32(&body, b.len);
        }
        PutU64(&body, s->sizes.size() - s->size_begin);
        for (size_t i = s->size_begin; i < s->sizes.size(); ++i) {
          PutU32(&body, s->sizes[i]);
          PutU32(&body, s->KeySize(i));
        }
        PutU32(&body, static_cast<uint32_t>(s->view().cursors.size()));
        for (const auto& [name, c] : s->view().cursors) {
          PutString(&body, c.consumer);
          PutU64(&body, c.offset);
          PutU64(&body, c.updated_at_ms);
        }
        PutU32(&body, static_cast<uint32_t>(s->view().producers.size()));
        for (const auto& [name, p] : s->view().producers) {
          PutString(&body, p.producer_id);
          PutU64(&body, p.epoch);
          PutU64(&body, p.seq);
          PutU64(&body, p.last_offset);
        }
      }
    }
    // Every stream has a name: a count that disagrees would make a checkpoint that cannot load.
    if (written != streams_.size()) {
      return Status::Internal("checkpoint not written: " + std::to_string(streams_.size()) +
                              " streams but " + std::to_string(written) + " names");
    }
  }
  checkpoint_body_bytes_ = body.size();
  {
    MutexLock lock(stats_mu_);
    ++stats_.checkpoints;
    stats_.checkpoint_build_micros +=
        static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                  std::chrono::steady_clock::now() - build_started)
                                  .count());
  }
  job->header.assign(kCheckpointMagic);
  // Version 2 unless the index holds a hole (which only salvage makes) or a dropped record
  // (keyed compaction): binaries that know neither keep reading every other checkpoint.
  PutU32(&job->header, has_dropped ? kCheckpointVersion
                       : has_holes ? kCheckpointVersionWithHoles
                                   : kCheckpointVersionWithoutHoles);
  PutU32(&job->header, 0);
  PutU64(&job->header, body.size());
  PutU32(&job->header, MaskCrc(Crc32c(body)));
  PutU32(&job->header, 0);
  // Segments before the replay point without live records: deleted once this checkpoint is
  // durable (the ones that die later wait for the next, which no longer names them).
  job->dead_segments.clear();
  ReaderLock lock(state_mu_);
  for (const auto& [n, seg] : segments_) {
    if (n < replay_segment && seg.live_bytes == 0) {
      job->dead_segments.push_back(n);
    }
  }
  return Status::OK();
}

Status LogStore::WriteCheckpointFile(const CheckpointJob& job) const {
  const std::string& dir = options_.dir;
  env::Env* env = env_;
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

void LogStore::FinishCheckpoint(const CheckpointJob& job) {
  checkpoint_seq_ = job.seq;
  // What was logged while the file was written counts toward the next checkpoint.
  bytes_since_checkpoint_ -= std::min(bytes_since_checkpoint_, job.log_bytes);
  checkpoint_failures_ = 0;
  DeleteDeadSegments(job.dead_segments);
  // The reserve keeps room for a checkpoint like this one.
  if (reserve_requested_) RequestReserve();
}

Status LogStore::WriteCheckpoint() {
  PollBackgroundCheckpoint(true);
  CheckpointJob job;
  RUNNEL_RETURN_IF_ERROR(BeginCheckpoint(&job));
  RUNNEL_RETURN_IF_ERROR(WriteCheckpointFile(job));
  FinishCheckpoint(job);
  return Status::OK();
}

void LogStore::StartBackgroundCheckpoint() {
  auto job = std::make_unique<CheckpointJob>();
  Status s = BeginCheckpoint(job.get());
  if (!s.ok()) return CheckpointFailed(s);
  background_checkpoint_ = std::move(job);
  std::promise<Status> written;
  background_checkpoint_done_ = written.get_future();
  background_checkpoint_thread_ = std::thread([this, written = std::move(written)]() mutable {
    written.set_value(WriteCheckpointFile(*background_checkpoint_));
    {
      // Wakes an idle writer to finish it (the result is set first, so the writer finds it):
      // deleting dead segments must not wait for traffic (on a full disk there may be none
      // until they are gone).
      MutexLock lock(queue_mu_);
      checkpoint_written_ = true;
    }
    queue_cv_.notify_all();
  });
  SetThreadName(background_checkpoint_thread_, "log-checkpoint");
}

bool LogStore::PollBackgroundCheckpoint(bool wait) {
  if (!background_checkpoint_) return true;
  if (!wait &&
      background_checkpoint_done_.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
    return false;
  }
  const Status s = background_checkpoint_done_.get();
  background_checkpoint_thread_.join();
  if (s.ok()) {
    FinishCheckpoint(*background_checkpoint_);
  } else {
    CheckpointFailed(s);
  }
  background_checkpoint_.reset();
  return true;
}

void LogStore::WaitForBackgroundCheckpoint() {
  const auto start = std::chrono::steady_clock::now();
  const uint64_t behind = bytes_since_checkpoint_;  // what a crash now would replay
  PollBackgroundCheckpoint(true);
  const auto now = std::chrono::steady_clock::now();
  const uint64_t waited_us = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(now - start).count());
  {
    MutexLock lock(stats_mu_);
    ++stats_.checkpoint_waits;
    stats_.checkpoint_wait_micros += waited_us;
  }
  // Said at most once a minute: a disk too slow for the checkpoints of this append rate.
  if (now - last_checkpoint_wait_warning_ >= std::chrono::minutes(1)) {
    last_checkpoint_wait_warning_ = now;
    LogF(LogLevel::kWarn,
         "log store %s: appends waited %.1f ms for a checkpoint being "
         "written (%llu bytes had been logged since the last one that landed, which a "
         "restart would have replayed)",
         options_.dir.c_str(), static_cast<double>(waited_us) / 1000.0,
         static_cast<unsigned long long>(behind));
  }
}

void LogStore::CheckpointFailed(const Status& s) {
  if (s.no_space()) {
    // Dead segments may be waiting for this checkpoint: ReclaimSpace can write it on the
    // reserve.
    disk_full_ = true;
    reclaim_due_ = true;
  }
  // Recovery just replays more meanwhile; nothing acknowledged depends on it.
  const auto delay = std::chrono::seconds(1u << std::min<uint32_t>(checkpoint_failures_, 6));
  ++checkpoint_failures_;
  checkpoint_retry_at_ = std::chrono::steady_clock::now() + delay;
  LogF(LogLevel::kWarn, "log store %s: checkpoint failed (%s); retrying in %llds",
       options_.dir.c_str(), s.ToString().c_str(), static_cast<long long>(delay.count()));
}

void LogStore::DeleteDeadSegments(const std::vector<uint64_t>& candidates) {
  std::vector<uint64_t> dead;
  {
    WriterLock lock(state_mu_);
    for (uint64_t n : candidates) {
      auto it = segments_.find(n);
      // Dead segments stay dead: live records are only ever copied forward, never into them.
      if (it != segments_.end() && n != active_segment_ && it->second.live_bytes == 0) {
        dead.push_back(n);
        segments_.erase(it);
      }
    }
  }
  for (uint64_t n : dead) {
    Status s = env_->RemoveFile(SegmentPath(n));
    (void)s;  // a leftover dead segment is removed again at the next open
  }
  segments_deleted_ += dead.size();
  if (!dead.empty()) {
    Status s = env_->SyncDir(options_.dir);
    (void)s;
  }
}

Status LogStore::Clean() {
  if (options_.cleaner_live_ratio <= 0) return Status::OK();
  // The emptiest old segments below the ratio, as many as one checkpoint interval of live bytes
  // (one segment at least): a pass copies at most about what was appended since the last one,
  // so the cleaner keeps pace with segments that decay as fast as the log grows, and the
  // writer's pause for it stays bounded.
  const double threshold = options_.cleaner_live_ratio * static_cast<double>(options_.segment_size);
  std::vector<std::pair<uint64_t, uint64_t>> candidates;  // (live bytes, segment)
  {
    ReaderLock lock(state_mu_);
    for (const auto& [n, seg] : segments_) {
      if (n >= active_segment_) break;
      // By what its copy would take: records DropRecords removed are not copied.
      if (seg.live_bytes > 0 && static_cast<double>(seg.CleanableBytes()) < threshold) {
        candidates.emplace_back(seg.CleanableBytes(), n);
      }
    }
  }
  std::sort(candidates.begin(), candidates.end());
  const uint64_t budget = std::max(options_.checkpoint_interval_bytes, options_.segment_size);
  std::vector<uint64_t> victims;
  uint64_t total = 0;
  for (const auto& [live, n] : candidates) {
    if (!victims.empty() && total + live > budget) break;
    total += live;
    victims.push_back(n);
  }
  if (victims.empty()) return Status::OK();
  std::sort(victims.begin(), victims.end());
  return Relocate(victims);
}

Status LogStore::Relocate(const std::vector<uint64_t>& victims) {
  constexpr uint64_t kGroupBytes = 1u << 20;
  struct Item {
    StreamId stream;
    uint64_t first_offset;
    uint32_t segment, pos, len;
    std::shared_ptr<env::File> file;
  };
  std::vector<Item> items;
  {
    ReaderLock lock(state_mu_);
    streams_.ForEach([&](const StreamState& s) {
      state_mu_.AssertReaderHeld();  // a lambda run under `lock`
      const StreamId id = s.id;
      for (size_t i = s.batch_begin; i < s.batches.size(); ++i) {
        const BatchRef& b = s.batches[i];
        if (std::binary_search(victims.begin(), victims.end(), uint64_t{b.segment})) {
          auto seg = segments_.find(b.segment);
          if (seg == segments_.end()) continue;
          items.push_back(Item{id, b.first_offset, b.segment, b.pos, b.len, seg->second.file});
        }
      }
    });
  }
  // Grouped by stream, in offset order, so each stream's history becomes contiguous.
  std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) {
    return a.stream != b.stream ? a.stream < b.stream : a.first_offset < b.first_offset;
  });
  std::vector<std::string> frames;
  uint64_t group_bytes = 0;
  auto flush = [&]() -> Status {
    if (frames.empty()) return Status::OK();
    std::vector<std::string_view> pieces(frames.begin(), frames.end());
    uint64_t pos;
    // Not synced group by group: the segments they come from stay until a checkpoint after
    // them, whose marker is synced after them (a roll syncs the segment it leaves).
    RUNNEL_RETURN_IF_ERROR(WriteFrames(pieces, group_bytes, 0, false, true, &pos));
    {
      MutexLock lock(stats_mu_);
      stats_.cleaner_bytes += group_bytes;
    }
    WriterLock lock(state_mu_);
    for (const std::string& frame : frames) {
      FrameView f;
      if (ParseFrame(frame, &f) == FrameCheck::kOk) {
        Status s = ApplyFrame(f.type, f.body, static_cast<uint32_t>(active_segment_),
                              static_cast<uint32_t>(pos), static_cast<uint32_t>(f.size), false);
        (void)s;  // a relocation of records that are gone by now is a no-op
      }
      pos += frame.size();
    }
    frames.clear();
    group_bytes = 0;
    return Status::OK();
  };
  std::string buf;
  for (const Item& item : items) {
    buf.resize(item.len);
    RUNNEL_ASSIGN_OR_RETURN(size_t got, item.file->ReadAt(item.pos, item.len, buf.data()));
    if (got != item.len) {
      return Status::Corruption("segment " + SegmentName(item.segment) + " at byte " +
                                std::to_string(item.pos) + ", stream #" +
                                std::to_string(item.stream) + ": live batch is cut short");
    }
    // A reference may hold several adjacent frames: each is relocated, in order.
    for (uint64_t at = 0; at < item.len;) {
      FrameView f;
      if (ParseFrame(std::string_view(buf.data() + at, item.len - at), &f) != FrameCheck::kOk ||
          (f.type != FrameType::kAppendBatch && f.type != FrameType::kRelocatedBatch)) {
        return Status::Corruption("segment " + SegmentName(item.segment) + " at byte " +
                                  std::to_string(item.pos + at) + ", stream #" +
                                  std::to_string(item.stream) + ": live batch is unreadable");
      }
      std::string frame;
      // Records that are gone (dropped, or below the head) are not copied: their frame is
      // written compacted, naming its source's length for the carving of its reference.
      AppendBatchHeader h;
      if (!DecodeAppendBatch(f.body, &h, nullptr, nullptr)) {
        return Status::Corruption("segment " + SegmentName(item.segment) + " at byte " +
                                  std::to_string(item.pos + at) + ", stream #" +
                                  std::to_string(item.stream) + ": live batch is unreadable");
      }
      std::vector<bool> gone(h.count, false);
      bool any_gone = false;
      {
        ReaderLock lock(state_mu_);
        if (const StreamState* s = FindLocked(item.stream); s != nullptr && s->Dropped() > 0) {
          for (uint32_t i = 0; i < h.count; ++i) {
            const uint64_t o = h.first_offset + i;
            gone[i] = o < s->head || (o < s->next && s->DroppedAt(s->size_begin + (o - s->head)));
            any_gone = any_gone || gone[i];
          }
        }
      }
      if (any_gone || h.source_len != 0) {
        std::vector<StoredRecord> records;
        DecodeAppendBatch(f.body, &h, nullptr, &records);
        std::vector<AppendRecord> kept;
        kept.reserve(records.size());
        for (size_t i = 0; i < records.size(); ++i) {
          if (gone[i]) {
            kept.push_back(AppendRecord{std::nullopt, std::string()});
          } else {
            kept.push_back(AppendRecord{std::move(records[i].key), std::move(records[i].payload)});
          }
        }
        std::string body;
        EncodeCompactedBatch(&body, h.stream, h.first_offset, h.timestamp,
                             static_cast<uint32_t>(f.size), kept);
        AppendFrame(&frame, FrameType::kRelocatedBatch, body);
      } else {
        AppendFrame(&frame, FrameType::kRelocatedBatch, f.body);
      }
      group_bytes += frame.size();
      frames.push_back(std::move(frame));
      at += f.size;
      if (group_bytes >= kGroupBytes) RUNNEL_RETURN_IF_ERROR(flush());
    }
  }
  RUNNEL_RETURN_IF_ERROR(flush());
  return SyncActive();
}

std::vector<uint64_t> LogStore::ReclaimVictims() const {
  // One segment holds the copies (the last group of them may need a fresh one), so the
  // reclamation needs at most one new segment, which the reserve provides.
  const uint64_t room = options_.segment_size - kSegmentHeaderSize - TailReserve();
  const uint64_t most_live = options_.segment_size - options_.segment_size / 8;
  std::vector<std::pair<uint64_t, uint64_t>> candidates;  // (live bytes, segment)
  {
    ReaderLock lock(state_mu_);
    for (const auto& [n, seg] : segments_) {
      if (n >= active_segment_) break;
      if (seg.live_bytes > 0 && seg.live_bytes <= most_live)
        candidates.emplace_back(seg.live_bytes, n);
    }
  }
  std::sort(candidates.begin(), candidates.end());
  std::vector<uint64_t> victims;
  uint64_t total = 0;
  for (const auto& [live, n] : candidates) {
    if (total + live > room) break;
    total += live;
    victims.push_back(n);
  }
  std::sort(victims.begin(), victims.end());
  return victims;
}

bool LogStore::ReclaimSpace() {
  reclaim_due_ = false;
  PollBackgroundCheckpoint(true);
  const std::vector<uint64_t> victims = ReclaimVictims();
  const uint64_t deleted_before = segments_deleted_;
  bool dead = false;
  {
    ReaderLock lock(state_mu_);
    for (const auto& [n, seg] : segments_) {
      if (n >= active_segment_) break;
      dead = dead || seg.live_bytes == 0;
    }
  }
  if (victims.empty() && !dead) return false;
  PausePreparer();
  bool drew = false;
  // Runs `step`; when the disk has no room for it, again after giving up `give` bytes of the
  // reserve (and, for a checkpoint, once more after giving up all of it).
  auto with_reserve = [&](const std::function<Status()>& step, uint64_t give, bool last) {
    Status s = step();
    if (!s.no_space()) return s;
    if (ShrinkReserve(give)) {
      drew = true;
      s = step();
    }
    if (s.no_space() && last && ShrinkReserve(UINT64_MAX)) {
      drew = true;
      s = step();
    }
    return s;
  };
  auto checkpoint = [&] { return WriteCheckpoint(); };
  Status s;
  // What is wholly dead goes first: it needs only a checkpoint (a segment's worth of room for
  // the copies below must not leave too little for it, as a crash in the middle of an earlier
  // reclamation may have).
  if (dead) s = with_reserve(checkpoint, CheckpointRoom(), true);
  if (s.ok() && !victims.empty()) {
    // The copies may use the reserve but for the room of the checkpoint that must follow them.
    uint64_t reserve;
    {
      MutexLock lock(prep_mu_);
      reserve = reserve_size_;
    }
    const uint64_t keep = CheckpointRoom();
    s = with_reserve([&] { return Relocate(victims); }, reserve > keep ? reserve - keep : 0, false);
    // The checkpoint that no longer needs the emptied segments; FinishCheckpoint deletes them.
    if (s.ok()) s = with_reserve(checkpoint, UINT64_MAX, true);
  }
  if (drew) {
    MutexLock lock(stats_mu_);
    ++stats_.reserve_draws;
  }
  ResumePreparer();
  if (!s.ok()) {
    // Tried again after a delay that doubles up to 64 s (what the disk lacked may come back: a
    // file removed by hand, the reserve made whole), and at once when more records die.
    const auto delay = std::chrono::seconds(1u << std::min<uint32_t>(reclaim_failures_, 6));
    ++reclaim_failures_;
    reclaim_due_ = true;
    reclaim_retry_at_ = std::chrono::steady_clock::now() + delay;
    LogF(LogLevel::kWarn,
         "log store %s: the disk is full and space could not be "
         "reclaimed (%s); retrying in %llds, or once more records die",
         options_.dir.c_str(), s.ToString().c_str(), static_cast<long long>(delay.count()));
  } else {
    reclaim_failures_ = 0;
  }
  if (segments_deleted_ == deleted_before) return false;
  {
    MutexLock lock(stats_mu_);
    ++stats_.space_reclaims;
  }
  disk_full_ = false;
  roll_failure_ = Status::OK();
  return true;
}

// ------------------------------------------------------------------------------------------
// Public methods

Result<StreamInfo> LogStore::CreateStream(const StreamSpec& spec) {
  RUNNEL_RETURN_IF_ERROR(store::ValidateStreamName(spec.name));
  RUNNEL_RETURN_IF_ERROR(store::ValidateRetention(spec.retention));
  if (spec.first_offset == 0 || spec.first_offset == std::numeric_limits<uint64_t>::max()) {
    return Status::InvalidArgument("first_offset must be between 1 and 2^64-2");
  }
  auto op = std::make_shared<Op>();
  op->kind = OpKind::kCreate;
  op->spec = spec;
  RUNNEL_RETURN_IF_ERROR(Submit(op));
  return op->info;
}

Result<StreamInfo> LogStore::GetStream(std::string_view ns, std::string_view name) {
  ReaderLock lock(state_mu_);
  if (const StreamState* s = FindByNameLocked(ns, name)) return Snapshot(*s);
  return Status::NotFound("stream '" + std::string(name) + "' does not exist in " +
                          std::string(ns));
}

Result<StreamInfo> LogStore::GetStreamById(StreamId id) {
  ReaderLock lock(state_mu_);
  StreamState* s = FindLocked(id);
  if (s == nullptr) return StreamNotFound(id);
  return Snapshot(*s);
}

Result<std::vector<StreamInfo>> LogStore::ListStreams(std::string_view ns,
                                                      std::string_view start_after, size_t limit) {
  ReaderLock lock(state_mu_);
  std::vector<StreamInfo> out;
  auto ns_it = names_.find(ns);
  if (ns_it == names_.end()) return out;
  for (auto it = ns_it->second.upper_bound(start_after);
       it != ns_it->second.end() && out.size() < limit; ++it) {
    out.push_back(Snapshot(**it));
  }
  return out;
}

Result<std::vector<StreamInfo>> LogStore::ListStreamsByNaturalKey(std::string_view ns,
                                                                  std::string_view from_key,
                                                                  size_t limit) {
  ReaderLock lock(state_mu_);
  std::vector<StreamInfo> out;
  natural_.Scan(ns, from_key, limit, [&](const StreamState* s) {
    out.push_back(Snapshot(*s));
    return true;
  });
  return out;
}

Status LogStore::UpdateStream(StreamId id, const std::optional<StreamRetention>& retention,
                              std::string_view attributes,
                              std::optional<std::string_view> expected_attributes,
                              std::optional<uint64_t> expected_next_offset) {
  if (retention) RUNNEL_RETURN_IF_ERROR(store::ValidateRetention(*retention));
  auto op = std::make_shared<Op>();
  op->kind = OpKind::kUpdate;
  op->append.expected_offset = expected_next_offset;
  op->stream = id;
  op->keep_retention = !retention.has_value();
  if (retention) op->retention = *retention;
  op->attributes = std::string(attributes);
  if (expected_attributes) op->append.expected_attributes = std::string(*expected_attributes);
  return Submit(op);
}

Status LogStore::DeleteStream(StreamId id) {
  auto op = std::make_shared<Op>();
  op->kind = OpKind::kDelete;
  op->stream = id;
  return Submit(op);
}

void LogStore::Append(AppendRequest request, AppendCallback done) {
  auto op = std::make_shared<Op>();
  op->kind = OpKind::kAppend;
  op->append = std::move(request);
  op->append_done = std::move(done);
  Enqueue(std::move(op));
}

Result<std::vector<StoredRecord>> LogStore::Read(StreamId id, uint64_t from, size_t limit,
                                                 size_t max_bytes) {
  // A run of adjacent frames to pread, or to take from a cached group (`cached` holds the
  // group's bytes, which start at `cached_pos` of the segment).
  struct Run {
    std::shared_ptr<env::File> file;
    uint64_t segment;
    uint64_t pos;
    uint64_t len;
    std::shared_ptr<const std::string> cached;
    uint64_t cached_pos = 0;
  };
  std::vector<Run> runs;
  uint64_t start = 0;
  size_t count = 0;  // the offsets [start, start + count) the read covers
  // The stream holds records DropRecords removed: within the frames the read decodes, those are
  // `dropped` (ascending), decoded with the others and then left out of the answer.
  bool has_dropped = false;
  std::vector<uint64_t> dropped;
  {
    ReaderLock lock(state_mu_);
    StreamState* s = FindLocked(id);
    if (s == nullptr) return StreamNotFound(id);
    if (limit == 0 || s->head >= s->next) return std::vector<StoredRecord>{};
    start = std::max(from, s->head);
    if (start >= s->next) return std::vector<StoredRecord>{};
    // Decide exactly which records the read returns, from the in-memory sizes.
    size_t bytes = 0;
    if (s->Dropped() == 0) {
      for (uint64_t o = start; o < s->next && count < limit; ++o) {
        const size_t size = s->sizes[s->size_begin + (o - s->head)];
        if (count > 0 && bytes + size > max_bytes) break;
        bytes += size;
        ++count;
      }
    } else {
      // Dropped records are skipped: they count toward neither the limit nor the bytes, and
      // the read starts at the first record not dropped.
      size_t returned = 0;
      uint64_t o = start;
      while (o < s->next && s->DroppedAt(s->size_begin + (o - s->head))) ++o;
      start = o;
      uint64_t last = start;  // one past the last record returned
      for (; o < s->next && returned < limit; ++o) {
        const size_t i = s->size_begin + (o - s->head);
        if (s->DroppedAt(i)) continue;
        const size_t size = s->sizes[i];
        if (returned > 0 && bytes + size > max_bytes) break;
        bytes += size;
        ++returned;
        last = o + 1;
      }
      if (returned == 0) return std::vector<StoredRecord>{};
      count = static_cast<size_t>(last - start);
      has_dropped = true;
    }
    const uint64_t end = start + count;
    auto it = std::upper_bound(s->batches.begin() + static_cast<std::ptrdiff_t>(s->batch_begin),
                               s->batches.end(), start,
                               [](uint64_t o, const BatchRef& b) { return o < b.first_offset; });
    for (--it; it != s->batches.end() && it->first_offset < end; ++it) {
      if (has_dropped) {
        const uint64_t lo = std::max(it->first_offset, start);
        const uint64_t hi = std::min(RefEnd(*s, static_cast<size_t>(it - s->batches.begin())), end);
        if (it->lost()) {
          // A dead reference (its records all dropped) is not read; a hole is, below.
          bool all = true;
          for (uint64_t o = lo; o < hi && all; ++o)
            all = s->DroppedAt(s->size_begin + (o - s->head));
          if (all) continue;
        } else {
          for (uint64_t o = lo; o < hi; ++o) {
            if (s->DroppedAt(s->size_begin + (o - s->head))) dropped.push_back(o);
          }
        }
      }
      if (it->lost()) {
        // A hole salvage left: the read stops before it, or fails when it starts there.
        const auto after = std::next(it);
        const uint64_t lost_end = after == s->batches.end() ? s->next : after->first_offset;
        if (it->first_offset > start) {
          count = static_cast<size_t>(it->first_offset - start);
          break;
        }
        unreadable_reads_.fetch_add(1, std::memory_order_relaxed);
        return Status::Unreadable("records " + std::to_string(start) + " to " +
                                      std::to_string(lost_end - 1) + " of stream '" +
                                      s->name.str() +
                                      "' were lost to damage (salvage skipped them); reading "
                                      "goes on from record " +
                                      std::to_string(lost_end),
                                  start, lost_end);
      }
      if (const CachedGroup* hit = FindCachedLocked(it->segment, it->pos, it->len)) {
        cache_hits_.fetch_add(1, std::memory_order_relaxed);
        if (!runs.empty() && runs.back().cached == hit->bytes &&
            runs.back().pos + runs.back().len == it->pos) {
          runs.back().len += it->len;
        } else {
          runs.push_back(
              Run{nullptr, it->segment, it->pos, it->len, hit->bytes, hit->key & 0xffffffffu});
        }
        continue;
      }
      cache_misses_.fetch_add(1, std::memory_order_relaxed);
      if (!runs.empty() && !runs.back().cached && runs.back().segment == it->segment &&
          runs.back().pos + runs.back().len == it->pos) {
        runs.back().len += it->len;
        continue;
      }
      auto seg = segments_.find(it->segment);
      if (seg == segments_.end()) {
        return Status::Internal("stream #" + std::to_string(id) + " refers to missing segment " +
                                SegmentName(it->segment));
      }
      runs.push_back(Run{seg->second.file, it->segment, it->pos, it->len, nullptr});
    }
  }
  std::vector<StoredRecord> out;
  out.reserve(count);
  std::string buf;
  for (const Run& run : runs) {
    std::string_view data;
    if (run.cached) {
      data = std::string_view(*run.cached).substr(run.pos - run.cached_pos, run.len);
    } else {
      buf.resize(run.len);
      RUNNEL_ASSIGN_OR_RETURN(size_t got, run.file->ReadAt(run.pos, run.len, buf.data()));
      data = std::string_view(buf.data(), got);
    }
    uint64_t at = 0;
    while (at < run.len && out.size() < count) {
      FrameView f;
      // Cached frames are the bytes this process framed at append time; only file bytes can
      // have rotted, so only they pay for the checksum.
      FrameCheck c = ParseFrame(data.substr(at), &f, /*verify_crc=*/!run.cached);
      AppendBatchHeader h;
      const size_t decoded = out.size();
      if (c != FrameCheck::kOk ||
          (f.type != FrameType::kAppendBatch && f.type != FrameType::kRelocatedBatch) ||
          !DecodeAppendBatch(f.body, &h, nullptr, &out, start, count) || h.stream != id) {
        out.resize(decoded);
        // The records read before the damage are answered; a read that starts at it learns
        // which offsets cannot be read, and where reading goes on.
        if (!out.empty()) return out;
        return UnreadableAt(id, start + decoded, run.segment, run.pos + at,
                            c == FrameCheck::kOk ? "unexpected frame" : FrameCheckName(c));
      }
      at += f.size;
    }
  }
  if (has_dropped) {
    // Leave out the dropped records, and the records past the read that the frame after a
    // skipped dead reference brought (one pass, both lists ascending).
    auto d = dropped.begin();
    const uint64_t end = start + count;
    std::erase_if(out, [&](const StoredRecord& r) {
      while (d != dropped.end() && *d < r.offset) ++d;
      return r.offset >= end || (d != dropped.end() && *d == r.offset);
    });
  }
  return out;
}

Status LogStore::UnreadableAt(StreamId id, uint64_t first, uint64_t segment, uint64_t pos,
                              std::string_view why) {
  unreadable_reads_.fetch_add(1, std::memory_order_relaxed);
  uint64_t end = first + 1;
  std::string name = "#" + std::to_string(id);
  {
    ReaderLock lock(state_mu_);
    if (const StreamState* s = FindLocked(id)) {
      name = "'" + s->name.str() + "'";
      // The damage reaches as far as the reference holding it: the next reference starts
      // where reading can go on.
      auto it = std::upper_bound(s->batches.begin() + static_cast<std::ptrdiff_t>(s->batch_begin),
                                 s->batches.end(), first,
                                 [](uint64_t o, const BatchRef& b) { return o < b.first_offset; });
      end = it == s->batches.end() ? s->next : it->first_offset;
      end = std::max(end, first + 1);
    }
  }
  return Status::Unreadable(
      "records " + std::to_string(first) + " to " + std::to_string(end - 1) + " of stream " + name +
          " cannot be read (segment " + SegmentName(segment) + " at byte " + std::to_string(pos) +
          ": " + std::string(why) + "); reading goes on from record " + std::to_string(end),
      first, end);
}

const LogStore::CachedGroup* LogStore::FindCachedLocked(uint64_t segment, uint64_t pos,
                                                        uint64_t len) const {
  if (cache_.empty()) return nullptr;
  const uint64_t key = (segment << 32) | pos;
  // The last group starting at or before `key`.
  auto it = std::upper_bound(cache_.begin(), cache_.end(), key,
                             [](uint64_t k, const CachedGroup& g) { return k < g.key; });
  if (it == cache_.begin()) return nullptr;
  --it;
  if ((it->key >> 32) != segment || pos + len > (it->key & 0xffffffffu) + it->bytes->size()) {
    return nullptr;
  }
  return &*it;
}

Result<std::optional<StoredRecord>> LogStore::ReadAt(StreamId id, uint64_t offset) {
  RUNNEL_ASSIGN_OR_RETURN(auto recs, Read(id, offset, 1, std::numeric_limits<size_t>::max()));
  if (recs.empty() || recs.front().offset != offset) return std::optional<StoredRecord>();
  return std::optional<StoredRecord>(std::move(recs.front()));
}

Result<uint64_t> LogStore::TruncatePrefix(StreamId id, uint64_t through, bool respect_cursors) {
  auto op = std::make_shared<Op>();
  op->kind = OpKind::kTruncate;
  op->stream = id;
  op->offset = through;
  op->respect_cursors = respect_cursors;
  RUNNEL_RETURN_IF_ERROR(Submit(op));
  return op->u64_result;
}

Result<uint64_t> LogStore::DropRecords(StreamId id, const std::vector<uint64_t>& offsets) {
  if (offsets.empty()) {
    ReaderLock lock(state_mu_);
    if (FindLocked(id) == nullptr) return StreamNotFound(id);
    return uint64_t{0};
  }
  if (offsets.size() > kMaxDroppedPerFrame) {
    return Status::InvalidArgument("at most " + std::to_string(kMaxDroppedPerFrame) +
                                   " records can be dropped in one call, not " +
                                   std::to_string(offsets.size()));
  }
  if (!std::is_sorted(offsets.begin(), offsets.end())) {
    return Status::InvalidArgument("the offsets to drop must be in ascending order");
  }
  auto op = std::make_shared<Op>();
  op->kind = OpKind::kDropRecords;
  op->stream = id;
  op->offsets = offsets;
  RUNNEL_RETURN_IF_ERROR(Submit(op));
  return op->u64_result;
}

Result<uint64_t> LogStore::CommitCursor(StreamId id, std::string_view consumer, uint64_t offset,
                                        uint64_t now_ms) {
  auto op = std::make_shared<Op>();
  op->kind = OpKind::kCursor;
  op->stream = id;
  op->consumer = std::string(consumer);
  op->offset = offset;
  op->now_ms = now_ms;
  RUNNEL_RETURN_IF_ERROR(Submit(op));
  return op->u64_result;
}

Result<bool> LogStore::DeleteCursor(StreamId id, std::string_view consumer) {
  auto op = std::make_shared<Op>();
  op->kind = OpKind::kCursorDelete;
  op->stream = id;
  op->consumer = std::string(consumer);
  RUNNEL_RETURN_IF_ERROR(Submit(op));
  return op->u64_result != 0;
}

Result<std::optional<CursorState>> LogStore::GetCursor(StreamId id, std::string_view consumer) {
  ReaderLock lock(state_mu_);
  StreamState* s = FindLocked(id);
  if (s == nullptr) return StreamNotFound(id);
  auto it = s->view().cursors.find(consumer);
  if (it == s->view().cursors.end()) return std::optional<CursorState>();
  return std::optional<CursorState>(it->second);
}

Result<std::vector<CursorState>> LogStore::ListCursors(StreamId id) {
  ReaderLock lock(state_mu_);
  StreamState* s = FindLocked(id);
  if (s == nullptr) return StreamNotFound(id);
  std::vector<CursorState> out;
  for (const auto& [name, c] : s->view().cursors) out.push_back(c);
  return out;
}

Result<std::optional<ProducerState>> LogStore::GetProducer(StreamId id,
                                                           std::string_view producer_id) {
  ReaderLock lock(state_mu_);
  StreamState* s = FindLocked(id);
  if (s == nullptr) return StreamNotFound(id);
  auto it = s->view().producers.find(producer_id);
  if (it == s->view().producers.end()) return std::optional<ProducerState>();
  return std::optional<ProducerState>(it->second);
}

Status LogStore::Flush() {
  auto op = std::make_shared<Op>();
  op->kind = OpKind::kFlush;
  return Submit(op);
}

void LogStore::SetTailListener(TailListener listener) {
  auto shared = listener ? std::make_shared<const TailListener>(std::move(listener)) : nullptr;
  MutexLock lock(listener_mu_);
  listener_ = std::move(shared);
}

std::vector<std::string> LogStore::RecoveryNotes() const {
  return recovery_notes_;
}

Status LogStore::CheckpointNow() {
  auto op = std::make_shared<Op>();
  op->kind = OpKind::kCheckpoint;
  return Submit(op);
}

Status LogStore::CleanNow() {
  auto op = std::make_shared<Op>();
  op->kind = OpKind::kCheckpoint;
  op->clean = true;
  return Submit(op);
}

size_t LogStore::BatchRefsForTesting(StreamId id) {
  ReaderLock lock(state_mu_);
  const StreamState* s = FindLocked(id);
  return s == nullptr ? 0 : s->batches.size() - s->batch_begin;
}

std::vector<uint64_t> LogStore::SegmentNumbers() const {
  ReaderLock lock(state_mu_);
  std::vector<uint64_t> out;
  for (const auto& [n, seg] : segments_) out.push_back(n);
  return out;
}

// ------------------------------------------------------------------------------------------
// The scrub

Status LogStore::ScrubOnce() {
  std::vector<uint64_t> numbers = SegmentNumbers();
  for (uint64_t n : numbers) ScrubSegment(n, 0);
  scrub_passes_.fetch_add(1, std::memory_order_relaxed);
  return Status::OK();
}

void LogStore::ScrubLoop() {
  const auto pause = std::chrono::milliseconds(options_.scrub_pass_interval_ms);
  // The first pass starts at once: damage a checkpoint covers is found soon after a start.
  auto next_pass = std::chrono::steady_clock::now();
  for (;;) {
    {
      MutexLock lock(scrub_mu_);
      while (!scrub_stop_ && lock.WaitUntil(scrub_cv_, next_pass) != std::cv_status::timeout) {
      }
      if (scrub_stop_) return;
    }
    for (uint64_t n : SegmentNumbers()) {
      if (!ScrubSegment(n, options_.scrub_bytes_per_sec)) return;
    }
    scrub_passes_.fetch_add(1, std::memory_order_relaxed);
    next_pass = std::chrono::steady_clock::now() + pause;
  }
}

bool LogStore::ScrubSegment(uint64_t number, uint64_t rate) {
  std::shared_ptr<env::File> file;
  uint64_t end = 0;
  {
    ReaderLock lock(state_mu_);
    // A segment is listed once it exists; of the one being written, the frames written so far
    // (`end` when the scrub starts) are verified.
    auto it = segments_.find(number);
    if (it == segments_.end() || !it->second.file) return true;
    file = it->second.file;  // keeps the file readable if the segment is deleted meanwhile
    end = it->second.end;
  }
  if (end == 0) {  // a segment the checkpoint covers: its end is where the zeros begin
    Result<uint64_t> size = file->Size();
    if (!size.ok()) {
      ReportDamage(number, 0, "cannot be read: " + size.status().ToString());
      return true;
    }
    end = *size;
  }
  SegmentWindow window(*file, end);
  auto view = [&](uint64_t a, uint64_t n) { return window.View(a, n); };
  const auto started = std::chrono::steady_clock::now();
  uint64_t pos = kSegmentHeaderSize;
  uint64_t counted = pos;  // bytes of this segment added to scrubbed_bytes_ so far
  while (pos < end) {
    FrameView f;
    Result<FrameCheck> c = window.ParseAt(pos, &f);
    if (!c.ok()) {
      ReportDamage(number, pos, "cannot be read: " + c.status().ToString());
      break;
    }
    if (*c == FrameCheck::kOk) {
      pos += f.size;
    } else if (*c == FrameCheck::kEnd) {
      // Zeros: the end of the written frames, if only zeros follow (segments are zero-filled
      // ahead of their frames). Checked at the same pace as frames.
      const uint64_t zeros_from = pos;
      bool zero = true;
      while (zero && pos < end) {
        Result<std::string_view> v = window.View(pos, 1u << 20);
        if (!v.ok() || v->empty()) break;
        zero = AllZero(*v);
        pos += v->size();
        if (!Pace(started, pos, rate, &counted)) return false;
      }
      if (!zero) ReportDamage(number, zeros_from, "a zero frame header amid written bytes");
      break;
    } else {
      ReportDamage(number, pos, FrameCheckName(*c));
      Result<std::optional<uint64_t>> next = ValidFrameAfter(view, pos, end);
      if (!next.ok() || !next->has_value()) break;
      pos = **next;
    }
    if (!Pace(started, pos, rate, &counted)) return false;
  }
  scrubbed_bytes_.fetch_add(pos > counted ? pos - counted : 0, std::memory_order_relaxed);
  MutexLock lock(scrub_mu_);
  return !scrub_stop_;
}

bool LogStore::Pace(std::chrono::steady_clock::time_point started, uint64_t pos, uint64_t rate,
                    uint64_t* counted) {
  if (pos - *counted < (1u << 20)) return true;
  scrubbed_bytes_.fetch_add(pos - *counted, std::memory_order_relaxed);
  *counted = pos;
  if (rate == 0) return true;
  // At most `rate` bytes per second: wait until this segment's bytes so far are due.
  const auto due = started + std::chrono::microseconds(pos * 1000000 / rate);
  MutexLock lock(scrub_mu_);
  while (!scrub_stop_ && lock.WaitUntil(scrub_cv_, due) != std::cv_status::timeout) {
  }
  return !scrub_stop_;
}

void LogStore::ReportDamage(uint64_t segment, uint64_t pos, std::string_view why) {
  {
    MutexLock lock(damage_mu_);
    if (!damage_seen_.insert({segment, pos}).second) return;
  }
  // Which live records the damaged frame held: the references that start at or before it in
  // this segment and reach past it (a reference may span several frames).
  std::string held;
  {
    ReaderLock lock(state_mu_);
    streams_.ForEach([&](const StreamState& st) {
      for (size_t i = st.batch_begin; i < st.batches.size(); ++i) {
        const BatchRef& b = st.batches[i];
        if (b.segment != segment || b.pos > pos || uint64_t{b.pos} + b.len <= pos) continue;
        const uint64_t last =
            (i + 1 < st.batches.size() ? st.batches[i + 1].first_offset : st.next) - 1;
        if (!held.empty()) held += ", ";
        held += "stream '" + st.name.str() + "' records " + std::to_string(b.first_offset) +
                " to " + std::to_string(last);
      }
    });
  }
  if (options_.on_damage) {
    options_.on_damage(
        "damaged log data: segment " + SegmentName(segment) + " at byte " + std::to_string(pos) +
        ": " + std::string(why) + "; " +
        (held.empty() ? std::string("no live record is in it") : "it holds " + held));
  }
}

}  // namespace log
}  // namespace runnel
