// The PostgreSQL store (public face: include/runnel/postgres_store.h, which states the
// durability, offset mapping and notification contract).
//
// Threads:
//   - callers: synchronous calls borrow a connection from a pool (at most query_connections);
//   - append workers (append_workers of them, one connection each, each with its own queue fed
//     by stream id): take every queued append (up to a group limit), commit them in one
//     transaction, then for each append call the tail listener and its callback, in queue order;
//   - the listener: one connection that LISTENs on the schema's channel and calls the tail
//     listener for appends committed by other nodes (notifications from this store's own worker
//     connections are recognised by backend pid and skipped: those appends already called it);
//     every safety_poll it also re-reads the tails of the watched streams on that connection.
//
// Lifecycle: the destructor stops accepting work, lets the workers commit everything already
// queued (every callback runs exactly once), then closes all connections.
#ifndef RUNNEL_STORE_POSTGRES_POSTGRES_STORE_H_
#define RUNNEL_STORE_POSTGRES_POSTGRES_STORE_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "base/mutex.h"
#include "runnel/postgres_store.h"
#include "runnel/store.h"
#include "store/postgres/pg_conn.h"

namespace runnel::store {

class PostgresStore final : public Store {
 public:
  static Result<std::unique_ptr<PostgresStore>> Open(const PostgresStoreOptions& options);
  ~PostgresStore() override;

  std::string_view Name() const override { return "postgres"; }
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
  // One DELETE of the named rows and one update of the stream's head and retained bytes, in one
  // transaction. StreamInfo::event_count still counts from the head to the tail (gaps
  // included), as the streams row keeps no record count.
  Result<uint64_t> DropRecords(StreamId id, const std::vector<uint64_t>& offsets) override;
  bool SupportsDropRecords() const override { return true; }
  Result<uint64_t> CommitCursor(StreamId id, std::string_view consumer, uint64_t offset,
                                uint64_t now_ms) override;
  Result<std::optional<CursorState>> GetCursor(StreamId id, std::string_view consumer) override;
  Result<std::vector<CursorState>> ListCursors(StreamId id) override;
  Result<bool> DeleteCursor(StreamId id, std::string_view consumer) override;
  Result<std::optional<ProducerState>> GetProducer(StreamId id,
                                                   std::string_view producer_id) override;
  Status Flush() override;
  void SetTailListener(TailListener listener) override;
  void SetWatchedStreams(WatchedStreams watched) override;
  void ReaderWaiting(StreamId id) override;
  // Every call but Append is a round trip to the database.
  bool CallsMayBlock() const override { return true; }
  // Any number of nodes may open one database.
  bool SharedWithOtherNodes() const override { return true; }
  // Whether this node heard another node's append notification or announcement within the
  // last second.
  bool OtherNodesAppending() const;
  // Whether another node announced waiting readers within the last three announce intervals
  // (only then are tail notifications sent; see PostgresStoreOptions::announce_interval).
  bool OtherNodesReading() const;
  // Notifying transactions of tails sent by this node's notifier.
  uint64_t NotificationsSent() const { return notifications_sent_.load(std::memory_order_relaxed); }
  // Committed append transactions (a solo retry or a locking redo of a group counts once more).
  StoreCommitStats CommitStats() const override;
  // Groups committed after their rows were locked first (prelock_max_streams).
  uint64_t PrelockedGroups() const { return prelocked_groups_.load(std::memory_order_relaxed); }
  // Groups that took the optimistic path and were committed (or answered) on it, and groups
  // whose optimistic attempt found the rows changed and were redone on the locking path.
  uint64_t OptimisticGroups() const { return optimistic_groups_.load(std::memory_order_relaxed); }
  uint64_t StaleGroups() const { return stale_groups_.load(std::memory_order_relaxed); }

 private:
  struct Pending {
    AppendRequest request;
    AppendCallback done;
  };
  // One queue per worker; a stream's appends always go to worker (stream id % workers), so on
  // one node two group transactions never wait for each other's row locks.
  // Its fields are guarded by queue_mu_ (the store's; the analysis cannot name the enclosing
  // object's mutex from a nested struct).
  struct WorkerQueue {
    std::condition_variable cv;
    std::deque<Pending> pending;
    // While the worker waits for a fuller group: the queue size that wakes it (0 = not waiting).
    size_t target = 0;
  };
  // How a group transaction ended.
  enum class GroupEnd {
    kDone,        // committed, or nothing to write; outcomes are filled in
    kSqlError,    // a statement failed and the transaction was rolled back: nothing written
    kLostBefore,  // the connection died before COMMIT was sent: nothing written
    kUnknown,     // the connection died after COMMIT was sent
    kStale,       // the optimistic attempt did not apply (nothing written); lock and retry
  };
  // What a worker last committed on a stream without retention caps. Only a guess: the
  // optimistic one-round-trip path writes with an UPDATE guarded by exactly these values, and
  // any mismatch (another node appended, a truncate, a retention change) rolls back and takes
  // the locking path. Owned by one worker thread.
  struct CachedStream {
    uint64_t next = 0;
    uint64_t bytes = 0;
    // The stream's attributes: an optimistic write applies only where they are still these, so
    // an AppendGuard that decided from them decided from the row as it commits.
    std::string attributes;
    // Set when an optimistic attempt on this stream found it changed (another node appends to
    // it too): until then its groups take the locking path, which costs no failed attempt.
    std::chrono::steady_clock::time_point optimistic_after{};
  };
  using StreamCache = std::map<StreamId, CachedStream>;

  // Returns a pooled connection to the pool on destruction (or drops it when broken).
  class PooledConn {
   public:
    PooledConn(PostgresStore* store, std::unique_ptr<pg::Conn> conn)
        : store_(store), conn_(std::move(conn)) {}
    PooledConn(PooledConn&&) = default;
    ~PooledConn();
    pg::Conn* operator->() { return conn_.get(); }
    pg::Conn& operator*() { return *conn_; }

   private:
    PostgresStore* store_;
    std::unique_ptr<pg::Conn> conn_;
  };

  explicit PostgresStore(const PostgresStoreOptions& options);
  Result<std::unique_ptr<pg::Conn>> Connect();
  Result<PooledConn> Acquire();
  void Release(std::unique_ptr<pg::Conn> conn);

  // One worker: takes a group from `queue` (under row locks taken first, after a wait for a
  // fuller group, or as queued), commits it on the worker's own connection and hands out the
  // outcomes. It stays one function of about 100 lines because taking a group drops and
  // retakes queue_mu_ around round trips, and the locals it carries between groups (the
  // connection, the stream cache, the mean round trip, the last group's streams) belong to
  // this thread alone.
  void WorkerLoop(WorkerQueue& queue);
  // `prelocked`: a transaction is open on `conn` and holds the row locks of every stream of
  // `group` (see PostgresStoreOptions::prelock_max_streams).
  void CommitGroup(std::unique_ptr<pg::Conn>& conn, std::vector<Pending>& group,
                   std::vector<std::optional<Result<AppendResult>>>& outcomes, StreamCache& cache,
                   bool prelocked);
  // Whether `request` may take the optimistic path with what `cache` remembers.
  static bool Optimistic(const AppendRequest& request, const StreamCache& cache,
                         std::chrono::steady_clock::time_point now);
  // The catalog rows to lock before taking a group from `pending` (PostgresStoreOptions::
  // prelock_max_streams): empty unless its first append can take the optimistic path.
  std::vector<int64_t> PrelockIds(const std::deque<Pending>& pending,
                                  const std::vector<StreamId>& recent,
                                  const StreamCache& cache) const;
  // Moves the group to commit under the locks of `locked` out of `pending`.
  std::vector<Pending> TakeLocked(std::deque<Pending>& pending, const std::set<StreamId>& locked,
                                  const StreamCache& cache) const;
  // Opens a transaction on `conn` and locks the catalog rows of `ids` (sorted, distinct); returns
  // the ids locked. On failure nothing stays open (or the connection is broken).
  Result<std::set<StreamId>> Prelock(pg::Conn& conn, const std::vector<int64_t>& ids);
  // One transaction for `members` of `group` (postgres_group.cc). With `optimistic`, the
  // streams' state comes from `cache` and BEGIN, the guarded write and COMMIT travel in one
  // round trip (with `locked`, the transaction is already open and holds the rows); otherwise
  // the streams are locked and read first. Updates `cache` either way.
  GroupEnd TryGroup(pg::Conn& conn, std::vector<Pending>& group, const std::vector<size_t>& members,
                    std::vector<std::optional<Result<AppendResult>>>& outcomes, StreamCache& cache,
                    bool optimistic, bool locked = false);
  // TryGroup's steps, in order. GroupTx holds what they share: the group, its streams' state as
  // the appends are simulated, the rows to write and the outcomes.
  struct GroupStream;
  struct GroupTx;
  // Rolls back after a failed statement and says how the group ended (one append alone gets
  // its own error; a unique violation is a definite offset conflict).
  GroupEnd GroupSqlError(GroupTx& tx, const Status& status);
  // The streams' state from the worker's cache (optimistic path).
  static void StartFromCache(GroupTx& tx);
  // BEGIN, lock the rows in id order and read them and the producers' states (locking path).
  static Status LockRows(GroupTx& tx);
  // Why the append cannot be written against the simulated state, in the memory and log
  // stores' order; OK when it can.
  static Status RefuseAppend(const GroupTx& tx, AppendRequest& req);
  // Simulates member `i`'s append: its outcome when refused, else its records, producer state,
  // close, attributes and retention cut.
  static void SimulateAppend(GroupTx& tx, size_t i);
  static void ApplyRetention(GroupTx& tx, StreamId sid, GroupStream& s, uint64_t now_ms);
  // The one statement that writes the group: letting the database place the records
  // (optimistic without expected offsets), or at the simulated offsets.
  static std::string PlacingWrite(GroupTx& tx, pg::Params& params);
  static std::string LockedWrite(GroupTx& tx, pg::Params& params);
  static std::string ProducersWrite(const GroupTx& tx, pg::Params& params);
  // Sends the write with COMMIT (and BEGIN and the locks, optimistically) and reads the
  // outcomes.
  GroupEnd SendGroup(GroupTx& tx, std::string sql, pg::Params params);
  // Makes the offsets the database placed absolute; false (outcomes failed) when a row is
  // missing.
  static bool PlaceOffsets(GroupTx& tx, const pg::Rows& rows);
  // Counts the commit, fills in the outcomes, notifies other nodes and updates the cache.
  void Committed(GroupTx& tx, std::chrono::steady_clock::duration took);
  // Hands the committed tails of streams to the notifier, which tells the other nodes.
  void QueueNotify(const std::vector<std::pair<StreamId, uint64_t>>& tails);
  void NotifyLoop();  // runs on notify_thread_
  // Asks the listener thread to announce this node's state now, unless `last_announced` (one of
  // the last_*_announce_ns_) is within an interval.
  void RequestAnnounce(const std::atomic<int64_t>& last_announced);
  // Marks `pid` as one of this node's backends (or no longer), whose notifications it ignores.
  void OwnBackend(int pid, bool own);
  // Sends "+r" (readers), "+a" (appending) or both on `conn` when either holds.
  void Announce(pg::Conn& conn);
  // Runs on listen_thread_ with the connection Open already made LISTEN. About 90 lines: one
  // poll loop whose wake-ups (notifications, announce requests, the safety-poll timer,
  // reconnects) share the connection and the last tails seen.
  void ListenLoop(std::unique_ptr<pg::Conn> conn);
  void CallListener(StreamId id, uint64_t next);
  // The safety net: reads the tails of the watched streams on `conn` and calls the tail
  // listener for each that moved since the last poll (or is watched for the first time).
  void SafetyPoll(pg::Conn& conn, std::map<StreamId, uint64_t>& last_seen);
  bool IsOwnBackend(int pid);

  const PostgresStoreOptions options_;
  const std::string channel_;

  Mutex pool_mu_;
  std::condition_variable pool_cv_;
  std::vector<std::unique_ptr<pg::Conn>> idle_ RUNNEL_GUARDED_BY(pool_mu_);
  size_t open_ RUNNEL_GUARDED_BY(pool_mu_) = 0;

  Mutex queue_mu_;
  std::unique_ptr<WorkerQueue[]> queues_;
  bool stopping_ RUNNEL_GUARDED_BY(queue_mu_) = false;
  std::vector<std::thread> workers_;

  Mutex pids_mu_;
  std::set<int> own_pids_ RUNNEL_GUARDED_BY(pids_mu_);

  mutable Mutex stats_mu_;
  StoreCommitStats stats_ RUNNEL_GUARDED_BY(stats_mu_);

  Mutex listener_mu_;
  std::shared_ptr<const TailListener> listener_ RUNNEL_GUARDED_BY(listener_mu_);
  std::shared_ptr<const WatchedStreams> watched_ RUNNEL_GUARDED_BY(listener_mu_);
  std::atomic<uint64_t> prelocked_groups_{0};
  std::atomic<uint64_t> optimistic_groups_{0};
  std::atomic<uint64_t> stale_groups_{0};

  Mutex notify_mu_;
  std::condition_variable notify_cv_;
  std::map<StreamId, uint64_t> notes_ RUNNEL_GUARDED_BY(notify_mu_);  // tails not yet notified
  bool notify_stop_ RUNNEL_GUARDED_BY(notify_mu_) = false;
  // Set when another node's readers appear: send the tails skipped meanwhile.
  bool replay_ RUNNEL_GUARDED_BY(notify_mu_) = false;
  // Tails not sent because no other node had readers: this second's and the last one's.
  std::map<StreamId, uint64_t> skipped_, skipped_prev_ RUNNEL_GUARDED_BY(notify_mu_);
  std::chrono::steady_clock::time_point skipped_since_ RUNNEL_GUARDED_BY(notify_mu_){};
  std::atomic<uint64_t> notifications_sent_{0};
  // steady_clock nanoseconds: another node's last announcement of readers, this node's last
  // committed append, its last announcements of readers and of appends (0: never).
  std::atomic<int64_t> foreign_readers_ns_{0};
  std::atomic<int64_t> own_append_ns_{0};
  std::atomic<int64_t> last_readers_announce_ns_{0};
  std::atomic<int64_t> last_append_announce_ns_{0};
  std::atomic<bool> announce_now_{false};
  std::thread notify_thread_;

  std::atomic<bool> listen_stop_{false};
  // steady_clock nanoseconds of the last notification from another node's backend (0: none).
  std::atomic<int64_t> foreign_append_ns_{0};
  int wake_fd_ = -1;  // eventfd that interrupts the listener thread's poll
  std::thread listen_thread_;
};

}  // namespace runnel::store

#endif  // RUNNEL_STORE_POSTGRES_POSTGRES_STORE_H_
