// The PostgreSQL store's tail notification: LISTEN/NOTIFY across nodes, the safety poll and
// the listener callbacks (see PostgresStore in postgres_store.h).
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

// Records that `id`'s tail reached at least `next` (tails are lower bounds: keep the highest).
void MergeTail(std::map<StreamId, uint64_t>& tails, StreamId id, uint64_t next) {
  uint64_t& n = tails[id];
  n = std::max(n, next);
}

}  // namespace

// ---- tail notification -----------------------------------------------------------------------

void PostgresStore::QueueNotify(const std::vector<std::pair<StreamId, uint64_t>>& tails) {
  if (tails.empty()) return;
  {
    MutexLock lock(notify_mu_);
    for (const auto& [id, next] : tails) MergeTail(notes_, id, next);
  }
  notify_cv_.notify_one();
}

void PostgresStore::NotifyLoop() {
  std::unique_ptr<pg::Conn> conn;
  int pid = 0;
  auto forget_conn = [&] {
    if (conn == nullptr) return;
    OwnBackend(pid, false);
    conn.reset();
  };
  std::chrono::steady_clock::time_point last_sent{};
  for (;;) {
    std::map<StreamId, uint64_t> notes;
    {
      MutexLock lock(notify_mu_);
      while (!notify_stop_ && notes_.empty() && !replay_) lock.Wait(notify_cv_);
      if (notes_.empty() && !replay_) break;  // stopping, and the last tails are sent
      const auto now = std::chrono::steady_clock::now();
      if (now - skipped_since_ >= std::chrono::seconds(1)) {
        skipped_prev_ = std::move(skipped_);
        skipped_.clear();
        skipped_since_ = now;
      }
      if (!replay_ && !OtherNodesReading()) {
        // No other node has waiting readers (PostgresStoreOptions::announce_interval): keep
        // the tails for a while instead of sending them.
        for (const auto& [id, next] : notes_) MergeTail(skipped_, id, next);
        notes_.clear();
        continue;
      }
      // See PostgresStoreOptions::notify_interval: what arrives meanwhile goes in the same one.
      const auto due = last_sent + options_.notify_interval;
      while (!notify_stop_ && lock.WaitUntil(notify_cv_, due) != std::cv_status::timeout) {
      }
      notes.swap(notes_);
      if (replay_) {  // readers appeared on another node: what they may have missed
        replay_ = false;
        for (auto* skipped : {&skipped_prev_, &skipped_}) {
          for (const auto& [id, next] : *skipped) MergeTail(notes, id, next);
          skipped->clear();
        }
      }
      if (notes.empty()) continue;
    }
    if (conn == nullptr || conn->IdleButDead()) {
      forget_conn();
      {
        MutexLock lock(notify_mu_);
        if (notify_stop_) break;  // no new connection just for the last hints
      }
      auto fresh = Connect();
      // Hints only: without a connection they are dropped, and readers on other nodes are
      // woken by their safety poll instead.
      if (!fresh.ok() || !(*fresh)->Exec("SET synchronous_commit = off").ok()) continue;
      conn = std::move(*fresh);
      pid = conn->backend_pid();
      OwnBackend(pid, true);
    }
    // Payloads of "<id>:<next>" entries joined by ',', each under the server's 8000-byte cap.
    // One statement, its own transaction: a notifying transaction holds a database-wide lock
    // from its pre-commit until its commit is done, so notifying inside the append
    // transactions would serialize all of them; synchronous_commit is off (nothing to flush).
    std::vector<std::string> payloads(1);
    for (const auto& [id, next] : notes) {
      std::string entry = std::to_string(id) + ":" + std::to_string(next);
      if (payloads.back().size() + entry.size() + 1 > 7000) payloads.emplace_back();
      if (!payloads.back().empty()) payloads.back() += ',';
      payloads.back() += entry;
    }
    last_sent = std::chrono::steady_clock::now();
    auto sent = conn->Exec("SELECT pg_notify($1, n) FROM unnest($2::text[]) AS n",
                           Params().Text(channel_).TextArray(payloads));
    if (sent.ok()) notifications_sent_.fetch_add(1, std::memory_order_relaxed);
    if (!sent.ok() && conn->broken()) forget_conn();
  }
  forget_conn();
}

void PostgresStore::SetTailListener(TailListener listener) {
  auto shared = listener ? std::make_shared<const TailListener>(std::move(listener)) : nullptr;
  MutexLock lock(listener_mu_);
  listener_ = std::move(shared);
}

void PostgresStore::SetWatchedStreams(WatchedStreams watched) {
  auto shared = watched ? std::make_shared<const WatchedStreams>(std::move(watched)) : nullptr;
  MutexLock lock(listener_mu_);
  watched_ = std::move(shared);
}

void PostgresStore::SafetyPoll(pg::Conn& conn, std::map<StreamId, uint64_t>& last_seen) {
  std::shared_ptr<const WatchedStreams> watched;
  {
    MutexLock lock(listener_mu_);
    watched = watched_;
  }
  std::vector<StreamId> ids;
  if (watched && *watched) ids = (*watched)();
  if (ids.empty()) {
    last_seen.clear();
    return;
  }
  std::vector<int64_t> db_ids;
  db_ids.reserve(ids.size());
  for (StreamId id : ids) db_ids.push_back(BitsToDb(id));
  auto rows = conn.Exec("SELECT id, next_offset FROM streams WHERE id = ANY($1) AND NOT deleted",
                        Params().Int8Array(db_ids));
  if (!rows.ok()) return;  // a lost connection is noticed and re-established by the caller
  std::map<StreamId, uint64_t> now;
  for (int r = 0; r < rows->size(); ++r) {
    now[static_cast<StreamId>(rows->Int8(r, 0))] = OffsetFromDb(rows->Int8(r, 1));
  }
  for (const auto& [id, next] : now) {
    auto it = last_seen.find(id);
    // A stream seen for the first time is woken once: a notification may have been lost
    // between its reader's last read and now. Spurious wake-ups are harmless (readers re-read).
    if (it == last_seen.end() || it->second != next) CallListener(id, next);
  }
  // A watched stream that is gone was deleted (through another node: a delete sends no
  // notification): its readers re-read, find it missing and end now, not at their timeout.
  for (StreamId id : ids) {
    if (now.count(id) == 0) CallListener(id, 0);
  }
  last_seen = std::move(now);
}

void PostgresStore::CallListener(StreamId id, uint64_t next) {
  std::shared_ptr<const TailListener> listener;
  {
    MutexLock lock(listener_mu_);
    listener = listener_;
  }
  if (listener && *listener) (*listener)(id, next);
}

bool PostgresStore::IsOwnBackend(int pid) {
  MutexLock lock(pids_mu_);
  return own_pids_.count(pid) != 0;
}

void PostgresStore::Announce(pg::Conn& conn) {
  std::shared_ptr<const WatchedStreams> watched;
  {
    MutexLock lock(listener_mu_);
    watched = watched_;
  }
  const int64_t now_ns = SteadyNs();
  const int64_t appended = own_append_ns_.load(std::memory_order_relaxed);
  const bool appending = appended != 0 && now_ns - appended < Ns(2 * options_.announce_interval);
  const bool readers = watched && *watched && !(*watched)().empty();
  if (!readers && !appending) return;
  std::string payload = "+";
  if (readers) payload += 'r';
  if (appending) payload += 'a';
  if (!conn.Exec("SELECT pg_notify($1, $2)", Params().Text(channel_).Text(payload)).ok()) return;
  if (readers) last_readers_announce_ns_.store(now_ns, std::memory_order_relaxed);
  if (appending) last_append_announce_ns_.store(now_ns, std::memory_order_relaxed);
}

void PostgresStore::ListenLoop(std::unique_ptr<pg::Conn> conn) {
  bool had_connection = true;
  const int64_t safety_ms = options_.safety_poll.count();
  int64_t poll_ms_wide = std::max<int64_t>(1, options_.listener_poll.count());
  if (safety_ms > 0) poll_ms_wide = std::min(poll_ms_wide, safety_ms);
  poll_ms_wide =
      std::min<int64_t>(poll_ms_wide, std::max<int64_t>(1, options_.announce_interval.count()));
  const int poll_ms = static_cast<int>(poll_ms_wide);
  const int64_t presence_ns = Ns(3 * options_.announce_interval);
  std::map<StreamId, uint64_t> last_seen;
  auto next_safety = std::chrono::steady_clock::now() + options_.safety_poll;
  auto next_announce = std::chrono::steady_clock::now();
  while (!listen_stop_) {
    if (conn == nullptr || conn->broken()) {
      conn.reset();
      auto fresh = Connect();
      if (fresh.ok() && (*fresh)->Exec("LISTEN " + pg::QuoteIdent(channel_)).ok()) {
        conn = std::move(*fresh);
        if (had_connection) {
          // Notifications sent while the listener was away are lost: wake every stream once.
          auto live = conn->Exec("SELECT id, next_offset FROM streams WHERE NOT deleted");
          if (live.ok()) {
            for (int r = 0; r < live->size(); ++r) {
              CallListener(static_cast<StreamId>(live->Int8(r, 0)), OffsetFromDb(live->Int8(r, 1)));
            }
          }
        }
        had_connection = true;
      }
    }
    pollfd fds[2];
    int nfds = 0;
    fds[nfds++] = pollfd{wake_fd_, POLLIN, 0};
    if (conn != nullptr) fds[nfds++] = pollfd{conn->socket(), POLLIN, 0};
    (void)::poll(fds, static_cast<nfds_t>(nfds), poll_ms);
    if (listen_stop_) break;
    if ((fds[0].revents & POLLIN) != 0) {
      uint64_t drained;
      (void)!::read(wake_fd_, &drained, sizeof(drained));
    }
    if (conn == nullptr) continue;
    if (PQconsumeInput(conn->raw()) == 0) {
      conn->Sever();
      continue;
    }
    if (safety_ms > 0 && std::chrono::steady_clock::now() >= next_safety) {
      next_safety = std::chrono::steady_clock::now() + options_.safety_poll;
      SafetyPoll(*conn, last_seen);
      if (conn->broken()) continue;
    }
    if (announce_now_.exchange(false) || std::chrono::steady_clock::now() >= next_announce) {
      next_announce = std::chrono::steady_clock::now() + options_.announce_interval;
      Announce(*conn);
      if (conn->broken()) continue;
    }
    while (PGnotify* n = PQnotifies(conn->raw())) {
      const int pid = n->be_pid;
      const std::string payload = n->extra ? n->extra : "";
      PQfreemem(n);
      if (pid == conn->backend_pid() || IsOwnBackend(pid)) continue;
      const int64_t now_ns = SteadyNs();
      if (!payload.empty() && payload[0] == '+') {
        // Another node's announcement: "+r" readers, "+a" appending, or both.
        if (payload.find('r') != std::string::npos) {
          const int64_t before = foreign_readers_ns_.exchange(now_ns, std::memory_order_relaxed);
          if (before == 0 || now_ns - before >= presence_ns) {
            {
              MutexLock lock(notify_mu_);
              replay_ = true;
            }
            notify_cv_.notify_one();
          }
        }
        if (payload.find('a') != std::string::npos) {
          foreign_append_ns_.store(now_ns, std::memory_order_relaxed);
        }
        continue;
      }
      foreign_append_ns_.store(now_ns, std::memory_order_relaxed);
      // "<id>:<next>", several separated by ','.
      for (const char* p = payload.c_str(); *p != '\0';) {
        char* end = nullptr;
        const uint64_t id = std::strtoull(p, &end, 10);
        if (end == p || *end != ':') break;
        p = end + 1;
        const uint64_t next = std::strtoull(p, &end, 10);
        if (end == p) break;
        CallListener(id, next);
        if (*end != ',') break;
        p = end + 1;
      }
    }
  }
}

}  // namespace runnel::store
