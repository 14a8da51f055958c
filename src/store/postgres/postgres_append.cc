// The PostgreSQL store's appends: per-worker queues, group transactions and their commit (see
// PostgresStore in postgres_store.h).
#include "store/postgres/postgres_store.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <limits>
#include <map>
#include <string>
#include <utility>

#include "base/thread_name.h"
#include "store/group_wait.h"
#include "store/postgres/pg_schema.h"
#include "store/postgres/postgres_internal.h"
#include "store/retention.h"
#include "store/store_status.h"

namespace runnel::store {
namespace {

using pg::BitsFromDb;
using pg::BitsToDb;
using pg::OffsetFromDb;
using pg::OffsetToDb;
using pg::Params;
using pg::Rows;
using pg_internal::kMaxOffset;
using pg_internal::Ns;
using pg_internal::OptInt8;
using pg_internal::SteadyNs;
using pg_internal::StreamNotFound;

// Appends that a deadlock or serialization failure refused are retried this often, alone.
constexpr int kMaxSoloAttempts = 3;
// Rows fetched at a time when retention needs the timestamps or sizes of old records.
constexpr int64_t kRetentionPage = 1000;
// How long a stream whose optimistic attempt failed (another node appended to it meanwhile)
// takes the locking path before the next optimistic try.
constexpr std::chrono::seconds kContendedBackoff{2};

// One stream's state while a group transaction is being built.
struct GroupStream {
  bool deleted = false;
  bool closed = false;
  StreamRetention retention;
  uint64_t next = 0;   // next offset after the appends simulated so far
  uint64_t head = 0;   // oldest retained offset after them (== next when empty)
  uint64_t bytes = 0;  // retained bytes after them
  uint64_t next0 = 0;  // next offset at the start of the transaction
  uint64_t head0 = 0;  // head at the start of the transaction
  // Records this group adds, offsets next0, next0+1, ...: (appended_at_ms, bytes).
  std::vector<std::pair<uint64_t, uint64_t>> added;
  // Records read back from the table for retention, by offset: (appended_at_ms, bytes).
  std::map<uint64_t, std::pair<uint64_t, uint64_t>> fetched;
  // New attributes from the group's last append that set them (AppendRequest::attributes).
  std::optional<std::string> attributes;
  // The attributes read under the row lock (locking path only).
  std::string stored_attributes;
  bool touched = false;
};

}  // namespace

// ---- appends ---------------------------------------------------------------------------------

void PostgresStore::Append(AppendRequest request, AppendCallback done) {
  {
    MutexLock lock(queue_mu_);
    if (!stopping_) {
      WorkerQueue& q = queues_[request.stream % options_.append_workers];
      q.pending.push_back(Pending{std::move(request), std::move(done)});
      // The worker sleeps on an empty queue, or waits for `target` appends.
      if (q.pending.size() == 1 || q.pending.size() == q.target) q.cv.notify_one();
      return;
    }
  }
  done(Status::Unavailable("postgres: the store is shutting down"));
}

bool PostgresStore::OtherNodesAppending() const {
  const int64_t at = foreign_append_ns_.load(std::memory_order_relaxed);
  return at != 0 && SteadyNs() - at < Ns(std::chrono::seconds(1));
}

bool PostgresStore::OtherNodesReading() const {
  const int64_t at = foreign_readers_ns_.load(std::memory_order_relaxed);
  return at != 0 && SteadyNs() - at < Ns(3 * options_.announce_interval);
}

void PostgresStore::RequestAnnounce(const std::atomic<int64_t>& last_announced) {
  // Within an interval of the last announcement the periodic one covers it.
  if (SteadyNs() - last_announced.load(std::memory_order_relaxed) <=
      Ns(options_.announce_interval)) {
    return;
  }
  if (announce_now_.exchange(true)) return;  // already asked
  if (wake_fd_ >= 0) {
    const uint64_t one = 1;
    (void)!::write(wake_fd_, &one, sizeof(one));
  }
}

void PostgresStore::ReaderWaiting(StreamId id) {
  (void)id;
  // A first reader is announced at once, so that other nodes start notifying before it could
  // miss anything.
  RequestAnnounce(last_readers_announce_ns_);
}

void PostgresStore::OwnBackend(int pid, bool own) {
  MutexLock lock(pids_mu_);
  if (own) {
    own_pids_.insert(pid);
  } else {
    own_pids_.erase(pid);
  }
}

bool PostgresStore::Optimistic(const AppendRequest& request, const StreamCache& cache,
                               std::chrono::steady_clock::time_point now) {
  // Producer appends always take the locking path: their (epoch, seq) is checked against the
  // stored state under the stream's row lock; so do appends with expected attributes.
  auto c = cache.find(request.stream);
  return c != cache.end() && now >= c->second.optimistic_after && !request.producer &&
         !request.expected_attributes;
}

std::vector<int64_t> PostgresStore::PrelockIds(const std::deque<Pending>& pending,
                                               const std::vector<StreamId>& recent,
                                               const StreamCache& cache) const {
  const auto now = std::chrono::steady_clock::now();
  if (options_.prelock_max_streams == 0 || !Optimistic(pending.front().request, cache, now)) {
    return {};
  }
  std::set<StreamId> ids;
  for (const Pending& p : pending) {
    if (ids.size() >= options_.prelock_max_streams) break;
    if (Optimistic(p.request, cache, now)) ids.insert(p.request.stream);
  }
  for (StreamId id : recent) {
    if (ids.size() >= options_.prelock_max_streams) break;
    auto c = cache.find(id);
    if (c != cache.end() && now >= c->second.optimistic_after) ids.insert(id);
  }
  std::vector<int64_t> out;
  for (StreamId id : ids) out.push_back(BitsToDb(id));
  std::sort(out.begin(), out.end());  // the database's order of the ids
  return out;
}

std::vector<PostgresStore::Pending> PostgresStore::TakeLocked(std::deque<Pending>& pending,
                                                              const std::set<StreamId>& locked,
                                                              const StreamCache& cache) const {
  // Everything queued by now on the locked streams, in queue order per stream: once an append
  // of a stream stays behind, so do the later ones of that stream.
  std::vector<Pending> group;
  std::set<StreamId> held_back;
  std::deque<Pending> rest;
  size_t records = 0;
  const auto now = std::chrono::steady_clock::now();
  for (Pending& p : pending) {
    const StreamId id = p.request.stream;
    const bool take = group.size() < options_.max_group_appends &&
                      records + p.request.records.size() <= options_.max_group_records &&
                      locked.count(id) > 0 && held_back.count(id) == 0 &&
                      Optimistic(p.request, cache, now);
    if (take) {
      records += p.request.records.size();
      group.push_back(std::move(p));
    } else {
      held_back.insert(id);
      rest.push_back(std::move(p));
    }
  }
  pending = std::move(rest);
  return group;
}

Result<std::set<StreamId>> PostgresStore::Prelock(pg::Conn& conn, const std::vector<int64_t>& ids) {
  std::vector<pg::Conn::Statement> st(2);
  st[0].sql = "BEGIN";
  // In id order, as every transaction here locks catalog rows: no deadlock between nodes.
  st[1].sql = "SELECT id FROM streams WHERE id = ANY($1) ORDER BY id FOR NO KEY UPDATE";
  st[1].params.Int8Array(ids);
  auto replies = conn.Pipeline(st);
  for (auto& r : replies) {
    if (!r.ok()) {
      if (!conn.broken() && !conn.Exec("ROLLBACK").ok()) conn.Sever();
      return r.status();
    }
  }
  std::set<StreamId> locked;
  const Rows& rows = replies[1].value();
  for (int r = 0; r < rows.size(); ++r) locked.insert(static_cast<StreamId>(rows.Int8(r, 0)));
  return locked;
}

void PostgresStore::WorkerLoop(WorkerQueue& queue) {
  std::unique_ptr<pg::Conn> conn;
  StreamCache cache;
  int pid = 0;
  size_t in_flight = 0;          // appends in flight during the previous transaction
  uint64_t round_trip_us = 0;    // moving mean of a group's commit round trip
  std::vector<StreamId> recent;  // the streams of the previous group (for the prelock)
  for (;;) {
    std::vector<Pending> group;
    bool prelocked = false;
    {
      MutexLock lock(queue_mu_);
      while (!stopping_ && queue.pending.empty()) lock.Wait(queue.cv);
      if (queue.pending.empty()) break;  // stopping and drained
      const bool shared = OtherNodesAppending();
      // See PostgresStoreOptions::prelock_max_streams.
      std::vector<int64_t> lock_ids;
      if (shared && conn != nullptr && !conn->broken()) {
        lock_ids = PrelockIds(queue.pending, recent, cache);
      }
      std::optional<std::set<StreamId>> locked;
      if (!lock_ids.empty() && !conn->IdleButDead()) {
        lock.Unlock();
        auto got = Prelock(*conn, lock_ids);
        lock.Lock();
        if (got.ok()) locked = std::move(*got);
      }
      if (locked) {
        group = TakeLocked(queue.pending, *locked, cache);
        prelocked = !group.empty();
        if (!prelocked) {  // nothing to write under these locks: close the transaction
          lock.Unlock();
          if (!conn->Exec("ROLLBACK").ok()) conn->Sever();
          lock.Lock();
        }
      } else {
        // See PostgresStoreOptions::group_wait_us.
        const uint64_t bound = std::min<uint64_t>(options_.group_wait_us, round_trip_us / 2);
        if (bound > 0 && queue.pending.size() < in_flight && shared) {
          WaitForFullerGroup(
              queue.cv, lock, in_flight, std::chrono::microseconds(bound),
              std::chrono::microseconds(options_.group_arrival_gap_us), &queue.target,
              [&] { return queue.pending.size(); },
              [&] {
                queue_mu_.AssertHeld();  // called by WaitForFullerGroup under `lock`
                return stopping_;
              });
        }
      }
      size_t records = 0;
      while (!prelocked && !queue.pending.empty() && group.size() < options_.max_group_appends &&
             (group.empty() || records + queue.pending.front().request.records.size() <=
                                   options_.max_group_records)) {
        records += queue.pending.front().request.records.size();
        group.push_back(std::move(queue.pending.front()));
        queue.pending.pop_front();
      }
    }
    if (group.empty()) continue;
    std::vector<std::optional<Result<AppendResult>>> outcomes(group.size());
    if (conn == nullptr || conn->IdleButDead()) {
      prelocked = false;  // that transaction went with its session
      if (conn != nullptr) OwnBackend(pid, false);
      conn.reset();
      auto fresh = Connect();
      if (fresh.ok()) {
        conn = std::move(*fresh);
        pid = conn->backend_pid();
        OwnBackend(pid, true);
      } else {
        for (auto& o : outcomes) o.emplace(fresh.status());
      }
    }
    const auto started = std::chrono::steady_clock::now();
    if (conn != nullptr) CommitGroup(conn, group, outcomes, cache, prelocked);
    if (std::any_of(outcomes.begin(), outcomes.end(), [](const auto& o) { return o && o->ok(); })) {
      own_append_ns_.store(SteadyNs(), std::memory_order_relaxed);
      // Other nodes learn that this one appends (their group wait and prelock) at once.
      RequestAnnounce(last_append_announce_ns_);
    }
    recent.clear();
    for (const Pending& p : group) {
      if (recent.size() >= options_.prelock_max_streams) break;
      if (std::find(recent.begin(), recent.end(), p.request.stream) == recent.end()) {
        recent.push_back(p.request.stream);
      }
    }
    if (options_.group_wait_us > 0) {  // only the group wait reads them
      const auto us = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                                std::chrono::steady_clock::now() - started)
                                                .count());
      round_trip_us = round_trip_us == 0 ? us : (round_trip_us * 7 + us) / 8;
      MutexLock lock(queue_mu_);
      in_flight = group.size() + queue.pending.size();
    }
    for (size_t i = 0; i < group.size(); ++i) {
      Result<AppendResult> r =
          outcomes[i]
              ? std::move(*outcomes[i])
              : Result<AppendResult>(Status::Internal("postgres: append left without an outcome"));
      if (r.ok()) CallListener(group[i].request.stream, r->next_offset);
      group[i].done(std::move(r));
    }
  }
  if (conn != nullptr) OwnBackend(pid, false);
}

StoreCommitStats PostgresStore::CommitStats() const {
  MutexLock lock(stats_mu_);
  StoreCommitStats out = stats_;
  out.available = true;
  return out;
}

void PostgresStore::CommitGroup(std::unique_ptr<pg::Conn>& conn, std::vector<Pending>& group,
                                std::vector<std::optional<Result<AppendResult>>>& outcomes,
                                StreamCache& cache, bool prelocked) {
  std::vector<size_t> all(group.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  const auto now = std::chrono::steady_clock::now();
  const bool all_cached = std::all_of(group.begin(), group.end(), [&](const Pending& p) {
    return Optimistic(p.request, cache, now);
  });
  bool stale = false;
  if (prelocked && !all_cached) {  // (not taken so) close the transaction, go on as usual
    if (!conn->Exec("ROLLBACK").ok()) conn->Sever();
    prelocked = false;
  }
  if (all_cached) {
    const GroupEnd fast =
        TryGroup(*conn, group, all, outcomes, cache, /*optimistic=*/true, prelocked);
    if (fast != GroupEnd::kStale) {
      if (prelocked) prelocked_groups_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    stale = true;
    for (auto& o : outcomes) o.reset();
    // A refusal predicted from the cache returns before anything is sent: end the open
    // transaction (after a failed write it is already over; ROLLBACK then only warns).
    if (prelocked && !conn->broken() && !conn->Exec("ROLLBACK").ok()) conn->Sever();
    if (conn->broken()) {
      for (auto& o : outcomes) o.emplace(Status::Unavailable("postgres: connection lost"));
      return;
    }
  }
  const GroupEnd end = TryGroup(*conn, group, all, outcomes, cache, /*optimistic=*/false);
  if (stale) {
    for (const Pending& p : group) {
      auto c = cache.find(p.request.stream);
      if (c != cache.end()) c->second.optimistic_after = now + kContendedBackoff;
    }
  }
  if (end != GroupEnd::kSqlError) return;
  // Something in the group failed and everything was rolled back. Commit each append alone, so
  // one bad append cannot fail the others, and so its own error is reported precisely.
  for (size_t i : all) {
    // kSqlError from a one-append group means a deadlock or serialization failure: retry.
    for (int attempt = 1; attempt <= kMaxSoloAttempts; ++attempt) {
      outcomes[i].reset();
      if (TryGroup(*conn, group, {i}, outcomes, cache, /*optimistic=*/false) !=
          GroupEnd::kSqlError) {
        break;
      }
    }
    if (conn->broken()) {
      // Later members were not sent at all.
      for (size_t j : all) {
        if (!outcomes[j]) outcomes[j].emplace(Status::Unavailable("postgres: connection lost"));
      }
      return;
    }
  }
}

PostgresStore::GroupEnd PostgresStore::TryGroup(
    pg::Conn& conn, std::vector<Pending>& group, const std::vector<size_t>& members,
    std::vector<std::optional<Result<AppendResult>>>& outcomes, StreamCache& cache, bool optimistic,
    bool locked) {
  // Any failure forgets what this group's streams looked like.
  struct Forget {
    StreamCache& cache;
    const std::vector<Pending>& group;
    const std::vector<size_t>& members;
    bool armed = true;
    ~Forget() {
      if (!armed) return;
      for (size_t i : members) cache.erase(group[i].request.stream);
    }
  } forget{cache, group, members};
  std::vector<size_t> written;  // members whose records this transaction writes
  // Marks every member still without an outcome (the ones being written) with `status`.
  auto fail_written = [&](const Status& status) {
    for (size_t i : written) outcomes[i].emplace(status);
  };
  auto sql_error = [&](const Status& status) -> GroupEnd {
    if (conn.broken()) {
      fail_written(Status::Unavailable(std::string(status.message()) +
                                       " before COMMIT was sent; nothing was written"));
      return GroupEnd::kLostBefore;
    }
    const std::string state = conn.last_sqlstate();
    (void)conn.Exec("ROLLBACK");
    const bool transient = state == pg::kDeadlockDetected || state == pg::kSerializationFailure;
    if (members.size() == 1) {
      const Pending& p = group[members[0]];
      if (state == pg::kUniqueViolation) {
        // Someone else holds a slot of this batch: a definite conflict.
        auto info = GetStreamById(p.request.stream);
        const uint64_t actual = info.ok() ? info->next_offset : 0;
        const uint64_t expected = p.request.expected_offset.value_or(0);
        outcomes[members[0]].emplace(Status::Conflict(
            "an offset of this batch is already taken (expected " + std::to_string(expected) +
                ", stream's next offset " + std::to_string(actual) + ")",
            expected, actual));
      } else {
        outcomes[members[0]].emplace(status);
      }
      // A transient failure keeps its outcome in case the caller does not retry.
      return transient ? GroupEnd::kSqlError : GroupEnd::kDone;
    }
    for (size_t i : members) outcomes[i].reset();
    return GroupEnd::kSqlError;
  };

  std::map<StreamId, GroupStream> streams;
  // Stored (epoch, seq) of the group's producers, read under the row locks.
  std::map<std::pair<StreamId, std::string>, std::pair<uint64_t, uint64_t>> stored_producers;
  // Optimistic groups without expected offsets let the database place the records: offsets
  // are simulated relative to 0 and the write adds each stream's next offset as it finds it
  // under the row lock, so appends made through other nodes meanwhile cannot make the group
  // stale. (An expected offset needs the absolute tail: those groups use the cached one.)
  const bool assign_in_db =
      optimistic && std::none_of(members.begin(), members.end(), [&](size_t i) {
        return group[i].request.expected_offset.has_value();
      });
  if (optimistic) {
    for (size_t i : members) {
      const CachedStream& c = cache.at(group[i].request.stream);
      GroupStream s;
      s.next = s.next0 = assign_in_db ? 0 : c.next;
      s.head = s.head0 = 0;  // unused without retention; the guarded write leaves head alone
      s.bytes = assign_in_db ? 0 : c.bytes;
      streams.emplace(group[i].request.stream, s);
    }
  } else {
    std::vector<int64_t> ids;
    for (size_t i : members) ids.push_back(BitsToDb(group[i].request.stream));
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    // One round trip: open the transaction and lock every stream of the group in id order (no
    // deadlock between nodes doing the same).
    std::vector<pg::Conn::Statement> opening(2);
    opening[0].sql = "BEGIN";
    opening[1].sql =
        "SELECT id, next_offset, head_offset, retained_bytes, closed, deleted, max_events, "
        "max_age_ms, max_bytes, attributes FROM streams WHERE id = ANY($1) ORDER BY id "
        "FOR NO KEY UPDATE";
    opening[1].params.Int8Array(ids);
    std::vector<int64_t> pk_stream;
    std::vector<std::optional<std::string_view>> pk_id;
    for (size_t i : members) {
      const AppendRequest& req = group[i].request;
      if (!req.producer) continue;
      pk_stream.push_back(BitsToDb(req.stream));
      pk_id.push_back(std::string_view(req.producer->producer_id));
    }
    if (!pk_stream.empty()) {
      // After the lock statement in the same transaction: sees every producer commit that
      // preceded the lock.
      pg::Conn::Statement st;
      st.sql =
          "SELECT stream_id, producer_id, epoch, seq FROM producers WHERE (stream_id, "
          "producer_id) IN (SELECT * FROM unnest($1::bigint[], $2::bytea[]))";
      st.params.Int8Array(pk_stream).ByteaArray(pk_id);
      opening.push_back(std::move(st));
    }
    auto opened = conn.Pipeline(opening);
    for (auto& r : opened) {
      if (!r.ok()) {
        written = members;
        return sql_error(r.status());
      }
    }
    Rows* locked = &opened[1].value();
    for (int r = 0; r < locked->size(); ++r) {
      GroupStream s;
      s.next = s.next0 = OffsetFromDb(locked->Int8(r, 1));
      s.head = s.head0 = OffsetFromDb(locked->Int8(r, 2));
      s.bytes = BitsFromDb(locked->Int8(r, 3));
      s.closed = locked->Bool(r, 4);
      s.deleted = locked->Bool(r, 5);
      auto opt = [&](int c) -> std::optional<uint64_t> {
        auto v = locked->OptInt8(r, c);
        return v ? std::optional<uint64_t>(BitsFromDb(*v)) : std::nullopt;
      };
      s.retention.max_events = opt(6);
      s.retention.max_age_ms = opt(7);
      s.retention.max_bytes = opt(8);
      s.stored_attributes = std::string(locked->Bytes(r, 9));
      streams.emplace(static_cast<StreamId>(locked->Int8(r, 0)), std::move(s));
    }
    if (opened.size() > 2) {
      const Rows& prows = opened[2].value();
      for (int r = 0; r < prows.size(); ++r) {
        stored_producers[{static_cast<StreamId>(prows.Int8(r, 0)),
                          std::string(prows.Bytes(r, 1))}] = {BitsFromDb(prows.Int8(r, 2)),
                                                              BitsFromDb(prows.Int8(r, 3))};
      }
    }
  }

  // Simulate the appends in queue order against the locked rows.
  std::vector<int64_t> ins_stream, ins_off, ins_ts;
  std::vector<std::optional<std::string_view>> ins_key, ins_payload;
  std::map<std::pair<StreamId, std::string>, ProducerState> producers;
  std::vector<AppendResult> results(group.size());
  Status fetch_error;
  for (size_t i : members) {
    AppendRequest& req = group[i].request;
    auto it = streams.find(req.stream);
    if (it == streams.end() || it->second.deleted) {
      outcomes[i].emplace(StreamNotFound(req.stream));
      continue;
    }
    GroupStream& s = it->second;
    if (s.closed) {
      outcomes[i].emplace(
          Status::FailedPrecondition("stream #" + std::to_string(req.stream) + " is closed"));
      continue;
    }
    // Checked after existence and closure, in the memory and log stores' order.
    if (req.records.empty() && !req.close) {
      outcomes[i].emplace(Status::InvalidArgument("an append needs at least one record"));
      continue;
    }
    if (req.expected_offset && *req.expected_offset != s.next) {
      outcomes[i].emplace(
          Status::Conflict("expected offset " + std::to_string(*req.expected_offset) +
                               " but the stream's next offset is " + std::to_string(s.next),
                           *req.expected_offset, s.next));
      continue;
    }
    // After the offset condition, as in the memory and log stores.
    if (req.expected_attributes &&
        (optimistic || *req.expected_attributes != s.attributes.value_or(s.stored_attributes))) {
      outcomes[i].emplace(AttributesChanged("#" + std::to_string(req.stream)));
      continue;
    }
    const uint64_t n = req.records.size();
    // next_offset itself must stay representable, so the last usable offset is 2^64-2.
    if (n > kMaxOffset - s.next) {
      outcomes[i].emplace(Status::OutOfRange("stream #" + std::to_string(req.stream) +
                                             " would pass the largest offset"));
      continue;
    }
    if (req.producer) {
      // Compare-and-set on the producer's state: the node that took this request checked it
      // against the stored state before queueing it, but another node may have committed the
      // same or a later (epoch, seq) since. Only a strictly newer one may be written.
      const auto key = std::make_pair(req.stream, req.producer->producer_id);
      std::optional<std::pair<uint64_t, uint64_t>> current;
      if (auto p = producers.find(key); p != producers.end()) {
        current.emplace(p->second.epoch, p->second.seq);
      } else if (auto d = stored_producers.find(key); d != stored_producers.end()) {
        current = d->second;
      }
      if (Status checked = CheckProducer(current, *req.producer); !checked.ok()) {
        outcomes[i].emplace(std::move(checked));
        continue;
      }
    }
    AppendResult& res = results[i];
    res.first_offset = n ? s.next : 0;
    for (const AppendRecord& rec : req.records) {
      const uint64_t b = RecordBytes(rec.key ? rec.key->size() : 0, rec.payload.size());
      ins_stream.push_back(BitsToDb(req.stream));
      ins_off.push_back(OffsetToDb(s.next));
      ins_ts.push_back(BitsToDb(req.now_ms));
      ins_key.push_back(rec.key ? std::optional<std::string_view>(*rec.key) : std::nullopt);
      ins_payload.push_back(std::string_view(rec.payload));
      s.added.emplace_back(req.now_ms, b);
      s.bytes += b;
      ++s.next;
    }
    res.last_offset = n ? s.next - 1 : 0;
    if (req.producer) {
      ProducerState ps = *req.producer;
      ps.last_offset = res.last_offset;
      producers[{req.stream, ps.producer_id}] = std::move(ps);
    }
    if (req.close) s.closed = true;
    if (req.attributes) s.attributes = *req.attributes;
    if (s.retention.max_events || s.retention.max_age_ms || s.retention.max_bytes) {
      // The retained records are [head, next): those before next0 are in the table (read back
      // a page at a time, as the shared retention pass asks for them), the rest are s.added.
      auto record_at = [&, sid = req.stream](size_t idx) -> std::pair<uint64_t, uint64_t> {
        const uint64_t off = s.head + idx;
        if (off >= s.next0) return s.added[off - s.next0];
        auto f = s.fetched.find(off);
        if (f == s.fetched.end() && fetch_error.ok()) {
          auto page = conn.Exec(
              "SELECT off, appended_at_ms, (coalesce(octet_length(key), 0) + "
              "octet_length(payload))::bigint FROM events WHERE stream_id = $1 AND off >= $2 AND "
              "off < $3 "
              "ORDER BY off LIMIT $4",
              Params()
                  .Int8(BitsToDb(sid))
                  .Int8(OffsetToDb(off))
                  .Int8(OffsetToDb(s.next0))
                  .Int8(kRetentionPage));
          if (!page.ok()) {
            fetch_error = page.status();
          } else {
            for (int r = 0; r < page->size(); ++r) {
              s.fetched[OffsetFromDb(page->Int8(r, 0))] = {BitsFromDb(page->Int8(r, 1)),
                                                           static_cast<uint64_t>(page->Int8(r, 2))};
            }
          }
          f = s.fetched.find(off);
          if (f == s.fetched.end() && fetch_error.ok()) {
            fetch_error = Status::Corruption("postgres: stream #" + std::to_string(sid) +
                                             " misses record " + std::to_string(off));
          }
        }
        return f == s.fetched.end() ? std::pair<uint64_t, uint64_t>{0, 0} : f->second;
      };
      RetainedView view;
      view.count = static_cast<size_t>(s.next - s.head);
      view.total_bytes = s.bytes;
      view.timestamp_at = [&](size_t idx) { return record_at(idx).first; };
      view.bytes_at = [&](size_t idx) { return record_at(idx).second; };
      const size_t drop = RetentionDropCount(s.retention, req.now_ms, view);
      for (size_t d = 0; d < drop; ++d) s.bytes -= record_at(d).second;
      s.head += drop;
      for (auto f = s.fetched.begin(); f != s.fetched.end() && f->first < s.head;) {
        f = s.fetched.erase(f);
      }
    }
    // An empty stream keeps head == next.
    if (s.head > s.next) s.head = s.next;
    res.next_offset = s.next;
    s.touched = true;
    written.push_back(i);
  }
  if (optimistic && written.size() != members.size()) {
    // A refusal decided from cached state is not definite: decide it under the row locks.
    for (size_t i : members) outcomes[i].reset();
    return GroupEnd::kStale;
  }
  if (!fetch_error.ok()) return sql_error(fetch_error);
  if (written.empty()) {
    auto rb = conn.Exec("ROLLBACK");
    if (!rb.ok()) conn.Sever();
    return GroupEnd::kDone;
  }

  // Everything is written by one statement: the records that survive retention, the
  // retention cut of older rows, the catalog rows, the producers and the notifications. (Its
  // parts see one snapshot, so records this group adds and retention drops at once are simply
  // not inserted.)
  Params wp;
  std::string sql = "WITH ";
  std::vector<int64_t> up_id;
  if (assign_in_db) {
    // The catalog rows move first and return where each stream's records start (`base`, the
    // next offset found); the records are inserted at base + their relative offset. Applies
    // only to open, live streams without retention caps and with room for the records;
    // otherwise the division by zero aborts the transaction and the group takes the locking
    // path. The database form of offsets (pg::OffsetToDb) is the offset minus 2^63, so adding
    // a count to it adds to the offset.
    std::vector<int64_t> up_n, up_bytes;
    std::vector<bool> up_closed;
    std::vector<std::optional<std::string_view>> up_attrs;
    for (auto& [id, st] : streams) {
      if (!st.touched) continue;
      up_id.push_back(BitsToDb(id));
      up_n.push_back(static_cast<int64_t>(st.next));
      up_bytes.push_back(BitsToDb(st.bytes));
      up_closed.push_back(st.closed);
      up_attrs.push_back(st.attributes ? std::optional<std::string_view>(*st.attributes)
                                       : std::nullopt);
    }
    std::vector<int64_t> rel_off;
    rel_off.reserve(ins_off.size());
    for (int64_t off : ins_off) rel_off.push_back(static_cast<int64_t>(OffsetFromDb(off)));
    sql +=
        "upd AS (UPDATE streams s SET next_offset = s.next_offset + u.n, retained_bytes = "
        "s.retained_bytes + u.bytes, closed = u.closed, attributes = coalesce(u.attrs, "
        "s.attributes) FROM ";
    sql += Params::Unnest(
        {wp.Bind(up_id), wp.Bind(up_n), wp.Bind(up_bytes), wp.Bind(up_closed), wp.Bind(up_attrs)});
    sql +=
        " AS u(id, n, bytes, closed, attrs) WHERE s.id = u.id AND NOT s.closed AND NOT "
        "s.deleted AND s.max_events IS NULL AND s.max_age_ms IS NULL AND s.max_bytes IS NULL "
        "AND s.next_offset <= 9223372036854775807 - u.n RETURNING s.id, s.next_offset - u.n "
        "AS base, s.retained_bytes AS bytes), ";
    if (!ins_stream.empty()) {
      sql +=
          "ins AS (INSERT INTO events (stream_id, off, appended_at_ms, key, payload) SELECT "
          "r.sid, b.base + r.off, r.ts, r.key, r.payload FROM ";
      sql += Params::Unnest({wp.Bind(ins_stream), wp.Bind(rel_off), wp.Bind(ins_ts),
                             wp.Bind(ins_key), wp.Bind(ins_payload)});
      sql += " AS r(sid, off, ts, key, payload) JOIN upd b ON b.id = r.sid), ";
    }
    // With no row moved, the LEFT JOIN still yields one row, so the check still runs.
    sql +=
        "counted AS (SELECT count(*) AS c FROM upd) SELECT u.id, u.base, u.bytes, 1 / (CASE "
        "WHEN counted.c = ";
    sql += wp.Bind(static_cast<int64_t>(up_id.size())) +
           " THEN 1 ELSE 0 END) FROM counted LEFT JOIN upd u ON true";
  } else {
    {
      std::vector<int64_t> keep_stream, keep_off, keep_ts;
      std::vector<std::optional<std::string_view>> keep_key, keep_payload;
      for (size_t r = 0; r < ins_stream.size(); ++r) {
        const GroupStream& s = streams.at(static_cast<StreamId>(ins_stream[r]));
        if (OffsetFromDb(ins_off[r]) < s.head) continue;
        keep_stream.push_back(ins_stream[r]);
        keep_off.push_back(ins_off[r]);
        keep_ts.push_back(ins_ts[r]);
        keep_key.push_back(ins_key[r]);
        keep_payload.push_back(ins_payload[r]);
      }
      if (!keep_stream.empty()) {
        sql +=
            "ins AS (INSERT INTO events (stream_id, off, appended_at_ms, key, payload) "
            "SELECT * FROM ";
        sql += Params::Unnest({wp.Bind(keep_stream), wp.Bind(keep_off), wp.Bind(keep_ts),
                               wp.Bind(keep_key), wp.Bind(keep_payload)});
        sql += "), ";
      }
    }
    std::vector<int64_t> up_next, up_head, up_bytes, del_id, del_lo, del_hi;
    std::vector<bool> up_closed;
    std::vector<std::optional<std::string_view>> up_attrs;  // NULL keeps the stored attributes
    for (auto& [id, s] : streams) {
      if (!s.touched) continue;
      if (s.head > s.head0) {
        // Rows already in the table that retention cut: [head0, min(head, next0)).
        del_id.push_back(BitsToDb(id));
        del_lo.push_back(OffsetToDb(s.head0));
        del_hi.push_back(OffsetToDb(std::min(s.head, s.next0)));
      }
      up_id.push_back(BitsToDb(id));
      up_next.push_back(OffsetToDb(s.next));
      up_head.push_back(OffsetToDb(s.head));
      up_bytes.push_back(BitsToDb(s.bytes));
      up_closed.push_back(s.closed);
      up_attrs.push_back(s.attributes ? std::optional<std::string_view>(*s.attributes)
                                      : std::nullopt);
    }
    if (!del_id.empty()) {
      sql += "del AS (DELETE FROM events e USING ";
      sql += Params::Unnest({wp.Bind(del_id), wp.Bind(del_lo), wp.Bind(del_hi)});
      sql += " AS d(sid, lo, hi) WHERE e.stream_id = d.sid AND e.off >= d.lo AND e.off < d.hi), ";
    }
    if (!producers.empty()) {
      std::vector<int64_t> p_stream, p_epoch, p_seq, p_last;
      std::vector<std::optional<std::string_view>> p_id;
      for (const auto& [key, ps] : producers) {
        p_stream.push_back(BitsToDb(key.first));
        p_id.push_back(std::string_view(ps.producer_id));
        p_epoch.push_back(BitsToDb(ps.epoch));
        p_seq.push_back(BitsToDb(ps.seq));
        p_last.push_back(OffsetToDb(ps.last_offset));
      }
      sql +=
          "prod AS (INSERT INTO producers (stream_id, producer_id, epoch, seq, last_offset) "
          "SELECT * FROM ";
      sql += Params::Unnest(
          {wp.Bind(p_stream), wp.Bind(p_id), wp.Bind(p_epoch), wp.Bind(p_seq), wp.Bind(p_last)});
      sql +=
          " ON CONFLICT (stream_id, producer_id) DO UPDATE SET epoch = EXCLUDED.epoch, "
          "seq = EXCLUDED.seq, last_offset = EXCLUDED.last_offset), ";
    }
    if (optimistic) {
      // Applies only where the row is exactly as cached (same next offset and bytes, open, live,
      // no retention caps); otherwise the division by zero aborts the whole transaction.
      std::vector<int64_t> old_next, old_bytes;
      for (auto& [id, s] : streams) {
        if (!s.touched) continue;
        old_next.push_back(OffsetToDb(s.next0));
        old_bytes.push_back(BitsToDb(cache.at(id).bytes));
      }
      sql +=
          "upd AS (UPDATE streams s SET next_offset = u.next, retained_bytes = u.bytes, "
          "closed = u.closed, attributes = coalesce(u.attrs, s.attributes) FROM ";
      sql +=
          Params::Unnest({wp.Bind(up_id), wp.Bind(up_next), wp.Bind(up_bytes), wp.Bind(up_closed),
                          wp.Bind(up_attrs), wp.Bind(old_next), wp.Bind(old_bytes)});
      sql +=
          " AS u(id, next, bytes, closed, attrs, old_next, old_bytes) WHERE s.id = u.id "
          "AND s.next_offset = u.old_next AND s.retained_bytes = u.old_bytes AND NOT s.closed "
          "AND NOT s.deleted AND s.max_events IS NULL AND s.max_age_ms IS NULL "
          "AND s.max_bytes IS NULL RETURNING 1) "
          "SELECT 1 / (CASE WHEN count(*) = ";
      sql += wp.Bind(static_cast<int64_t>(up_id.size())) + " THEN 1 ELSE 0 END) FROM upd";
    } else {
      sql +=
          "upd AS (UPDATE streams s SET next_offset = u.next, head_offset = u.head, "
          "retained_bytes = u.bytes, closed = u.closed, attributes = coalesce(u.attrs, "
          "s.attributes) FROM ";
      sql += Params::Unnest({wp.Bind(up_id), wp.Bind(up_next), wp.Bind(up_head), wp.Bind(up_bytes),
                             wp.Bind(up_closed), wp.Bind(up_attrs)});
      sql +=
          " AS u(id, next, head, bytes, closed, attrs) WHERE s.id = u.id RETURNING 1) "
          "SELECT count(*) FROM upd";
    }

  }  // !assign_in_db

  if (options_.fault_hook &&
      options_.fault_hook(PostgresFaultPoint::kBeforeCommit, conn.backend_pid())) {
    conn.Sever();
  }
  // The write and the COMMIT travel together; a failed write makes the server skip COMMIT.
  // Optimistically, BEGIN and the row locks travel in the same round trip too. Other nodes hear
  // of the new tails from the notifier (QueueNotify), not from this transaction.
  std::vector<pg::Conn::Statement> closing;
  if (optimistic && !locked) {
    closing.push_back(pg::Conn::Statement{"BEGIN", Params()});
    // Lock the rows in id order before the write, as the locking path does: the write's parts
    // (inserts under a unique index, the catalog update) would otherwise take their locks in
    // whatever order the plan visits them, and two nodes writing the same streams could
    // deadlock (each waiting out deadlock_timeout).
    pg::Conn::Statement lock;
    lock.sql = "SELECT id FROM streams WHERE id = ANY($1) ORDER BY id FOR NO KEY UPDATE";
    lock.params.Int8Array(up_id);
    closing.push_back(std::move(lock));
  }
  const size_t w = closing.size();
  closing.push_back(pg::Conn::Statement{std::move(sql), std::move(wp)});
  closing.push_back(pg::Conn::Statement{"COMMIT", Params()});
  const auto sent_at = std::chrono::steady_clock::now();
  auto replies = conn.Pipeline(closing, [&] {
    if (options_.fault_hook &&
        options_.fault_hook(PostgresFaultPoint::kAfterCommitSent, conn.backend_pid())) {
      conn.Sever();
    }
  });
  for (size_t k = 0; k <= w; ++k) {
    if (replies[k].ok() || replies[k].status().code() == StatusCode::kUnavailable) continue;
    // The write (or BEGIN) failed definitely; the transaction is aborted and COMMIT skipped.
    if (!optimistic) return sql_error(replies[k].status());
    for (size_t i : members) outcomes[i].reset();
    if (!conn.Exec("ROLLBACK").ok()) conn.Sever();
    return GroupEnd::kStale;
  }
  if (!replies[w].ok() || !replies[w + 1].ok()) {
    if (conn.broken()) {
      fail_written(Status::OutcomeUnknown(
          "postgres: connection lost after COMMIT was sent; the append may or may not have been "
          "committed: read its slot to settle it"));
      return GroupEnd::kUnknown;
    }
    // The server answered COMMIT with an error and kept the session: it rolled back.
    if (members.size() == 1) {
      outcomes[members[0]].reset();
      outcomes[members[0]].emplace(replies[w + 1].status());
      return GroupEnd::kDone;
    }
    for (size_t i : members) outcomes[i].reset();
    return GroupEnd::kSqlError;
  }
  if (assign_in_db) {
    // Make the relative offsets absolute: base = the stream's next offset before the group.
    // The statement's check guarantees a row per touched stream.
    std::map<StreamId, std::pair<uint64_t, uint64_t>> placed;  // id -> (base, retained bytes)
    const Rows& rows = replies[w].value();
    for (int r = 0; r < rows.size(); ++r) {
      placed[static_cast<StreamId>(rows.Int8(r, 0))] = {OffsetFromDb(rows.Int8(r, 1)),
                                                        BitsFromDb(rows.Int8(r, 2))};
    }
    for (auto& [id, st] : streams) {
      if (!st.touched) continue;
      auto p = placed.find(id);
      if (p == placed.end()) {
        fail_written(Status::Internal(
            "postgres: the append committed but its offsets were not reported; read the "
            "stream's tail to find them"));
        return GroupEnd::kDone;
      }
      st.next += p->second.first;
      st.bytes = p->second.second;
    }
    for (size_t i : written) {
      const uint64_t b = placed.at(group[i].request.stream).first;
      AppendResult& res = results[i];
      if (!group[i].request.records.empty()) {
        res.first_offset += b;
        res.last_offset += b;
      }
      res.next_offset += b;
    }
  }
  {
    uint64_t records = 0, bytes = 0;
    for (size_t i : written) {
      for (const AppendRecord& r : group[i].request.records) {
        ++records;
        bytes += r.payload.size() + (r.key ? r.key->size() : 0);
      }
    }
    const auto micros = std::chrono::duration_cast<std::chrono::microseconds>(
        std::chrono::steady_clock::now() - sent_at);
    MutexLock lock(stats_mu_);
    stats_.CountSync(records, bytes, static_cast<uint64_t>(micros.count()));
  }
  for (size_t i : written) outcomes[i].emplace(results[i]);
  forget.armed = false;
  {
    std::vector<std::pair<StreamId, uint64_t>> tails;
    for (const auto& [id, st] : streams) {
      if (st.touched) tails.emplace_back(id, st.next);
    }
    QueueNotify(tails);
  }
  for (const auto& [id, st] : streams) {
    const bool plain = !st.deleted && !st.closed && !st.retention.max_events &&
                       !st.retention.max_age_ms && !st.retention.max_bytes;
    if (plain) {
      CachedStream& c = cache[id];  // keeps optimistic_after
      c.next = st.next;
      c.bytes = st.bytes;
    } else {
      cache.erase(id);
    }
  }
  return GroupEnd::kDone;
}

}  // namespace runnel::store
