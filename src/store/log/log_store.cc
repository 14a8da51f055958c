#include "store/log/log_store_internal.h"

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

LogStore::LogStore(const LogStoreOptions& options)
    : options_(options),
      relative_env_(options.env ? options.env : env::Env::Posix(), options.dir),
      env_(&relative_env_),
      // Saturates instead of wrapping (to 0: always behind) for a huge interval.
      checkpoint_backlog_bytes_(options.checkpoint_interval_bytes >
                                        UINT64_MAX / kMaxCheckpointBacklog
                                    ? UINT64_MAX
                                    : kMaxCheckpointBacklog * options.checkpoint_interval_bytes) {}

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

}  // namespace log
}  // namespace runnel
