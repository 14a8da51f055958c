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

// Appends that a deadlock or serialization failure refused are retried this often, alone.
constexpr int kMaxSoloAttempts = 3;
// How long a stream whose optimistic attempt failed (another node appended to it meanwhile)
// takes the locking path before the next optimistic try.
constexpr std::chrono::seconds kContendedBackoff{2};

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

// Long on purpose: one worker's loop, each pass taking a group (the prelock, or the wait for a
// fuller group while other nodes append), committing it, and handing the outcomes out, with the
// connection and the moving means that carry over between passes as locals.
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
      optimistic_groups_.fetch_add(1, std::memory_order_relaxed);
      if (prelocked) prelocked_groups_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    stale_groups_.fetch_add(1, std::memory_order_relaxed);
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

}  // namespace runnel::store
