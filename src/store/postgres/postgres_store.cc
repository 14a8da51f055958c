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
#include "store/natural_key.h"
#include "store/postgres/pg_schema.h"
#include "store/postgres/postgres_internal.h"
#include "store/retention.h"
#include "store/store_status.h"

namespace runnel {

Result<std::unique_ptr<Store>> OpenPostgresStore(const PostgresStoreOptions& options) {
  RUNNEL_ASSIGN_OR_RETURN(auto store, store::PostgresStore::Open(options));
  return std::unique_ptr<Store>(std::move(store));
}

namespace store {
namespace {

constexpr int64_t kMaxInt8 = std::numeric_limits<int64_t>::max();

int64_t ClampToInt8(size_t v) {
  return v > static_cast<size_t>(kMaxInt8) ? kMaxInt8 : static_cast<int64_t>(v);
}

// Columns of a catalog row, in the order StreamColumns() selects them.
constexpr std::string_view kStreamColumns =
    "id, ns, name, content_type, attributes, max_events, max_age_ms, max_bytes, first_offset, "
    "created_at_ms, next_offset, head_offset, retained_bytes, closed";

StreamInfo StreamFromRow(const Rows& rows, int r) {
  StreamInfo info;
  info.id = static_cast<StreamId>(rows.Int8(r, 0));
  info.spec.ns = std::string(rows.Bytes(r, 1));
  info.spec.name = std::string(rows.Bytes(r, 2));
  info.spec.content_type = std::string(rows.Bytes(r, 3));
  info.spec.attributes = std::string(rows.Bytes(r, 4));
  auto opt = [&](int c) -> std::optional<uint64_t> {
    auto v = rows.OptInt8(r, c);
    return v ? std::optional<uint64_t>(BitsFromDb(*v)) : std::nullopt;
  };
  info.spec.retention.max_events = opt(5);
  info.spec.retention.max_age_ms = opt(6);
  info.spec.retention.max_bytes = opt(7);
  info.spec.first_offset = OffsetFromDb(rows.Int8(r, 8));
  info.spec.created_at_ms = BitsFromDb(rows.Int8(r, 9));
  info.next_offset = OffsetFromDb(rows.Int8(r, 10));
  const uint64_t head = OffsetFromDb(rows.Int8(r, 11));
  info.retained_bytes = BitsFromDb(rows.Int8(r, 12));
  info.closed = rows.Bool(r, 13);
  info.event_count = info.next_offset - head;
  if (info.event_count > 0) {
    info.head_offset = head;
    info.tail_offset = info.next_offset - 1;
  }
  return info;
}

bool ValidSchemaName(const std::string& s) {
  if (s.empty() || s.size() > 40) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_';
  });
}

}  // namespace

// ---- construction, pool --------------------------------------------------------------------

PostgresStore::PostgresStore(const PostgresStoreOptions& options)
    : options_(options),
      channel_(options.schema + "_tail"),
      queues_(new WorkerQueue[std::max<size_t>(1, options.append_workers)]) {}

Result<std::unique_ptr<PostgresStore>> PostgresStore::Open(const PostgresStoreOptions& options) {
  if (options.conninfo.empty()) return Status::InvalidArgument("postgres: empty conninfo");
  if (!ValidSchemaName(options.schema)) {
    return Status::InvalidArgument("postgres: schema name '" + options.schema +
                                   "' must be 1-40 letters, digits or '_'");
  }
  if (options.append_workers == 0 || options.query_connections == 0 ||
      options.max_group_appends == 0 || options.max_group_records == 0) {
    return Status::InvalidArgument("postgres: pool and group sizes must be at least 1");
  }
  std::unique_ptr<PostgresStore> store(new PostgresStore(options));
  {
    RUNNEL_ASSIGN_OR_RETURN(auto conn, store->Connect());
    RUNNEL_RETURN_IF_ERROR(pg::Migrate(*conn, options.schema));
    RUNNEL_RETURN_IF_ERROR(pg::BackfillNaturalKeys(*conn, options.schema));
    {
      MutexLock lock(store->pool_mu_);
      ++store->open_;  // counted like any pooled connection, so dropping it later balances
    }
    store->Release(std::move(conn));
  }
  store->wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (store->wake_fd_ < 0) return Status::IOError("postgres: eventfd failed");
  for (size_t i = 0; i < options.append_workers; ++i) {
    store->workers_.emplace_back([s = store.get(), i] { s->WorkerLoop(s->queues_[i]); });
    SetThreadName(store->workers_.back(), "pg-append-" + std::to_string(i));
  }
  store->notify_thread_ = std::thread([s = store.get()] { s->NotifyLoop(); });
  SetThreadName(store->notify_thread_, "pg-notify");
  // LISTEN before returning, so every append another node commits after Open is heard.
  RUNNEL_ASSIGN_OR_RETURN(auto listen_conn, store->Connect());
  RUNNEL_RETURN_IF_ERROR(listen_conn->Exec("LISTEN " + pg::QuoteIdent(store->channel_)).status());
  store->listen_thread_ = std::thread([s = store.get(), c = listen_conn.release()] {
    s->ListenLoop(std::unique_ptr<pg::Conn>(c));
  });
  SetThreadName(store->listen_thread_, "pg-listen");
  return store;
}

PostgresStore::~PostgresStore() {
  {
    MutexLock lock(queue_mu_);
    stopping_ = true;
  }
  for (size_t i = 0; i < workers_.size(); ++i) queues_[i].cv.notify_all();
  for (auto& w : workers_) w.join();
  {
    MutexLock lock(notify_mu_);
    notify_stop_ = true;
  }
  notify_cv_.notify_all();
  if (notify_thread_.joinable()) notify_thread_.join();
  listen_stop_ = true;
  if (wake_fd_ >= 0) {
    const uint64_t one = 1;
    (void)!::write(wake_fd_, &one, sizeof(one));
  }
  if (listen_thread_.joinable()) listen_thread_.join();
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

std::string PostgresStore::Durability() const {
  return "postgresql: an acknowledged append is committed in the shared database and survives "
         "what the server's synchronous_commit and fsync settings make a commit survive";
}

Result<std::unique_ptr<pg::Conn>> PostgresStore::Connect() {
  return pg::Conn::Connect(options_.conninfo, options_.schema, options_.connect_timeout,
                           options_.statement_timeout, options_.reply_timeout);
}

PostgresStore::PooledConn::~PooledConn() {
  if (store_ != nullptr && conn_ != nullptr) store_->Release(std::move(conn_));
}

Result<PostgresStore::PooledConn> PostgresStore::Acquire() {
  {
    MutexLock lock(pool_mu_);
    for (;;) {
      while (idle_.empty() && open_ >= options_.query_connections) lock.Wait(pool_cv_);
      if (idle_.empty()) break;
      auto conn = std::move(idle_.back());
      idle_.pop_back();
      // A session the server closed while it sat idle (restart, idle timeout) is replaced
      // before it can fail a request.
      if (!conn->IdleButDead()) return PooledConn(this, std::move(conn));
      --open_;
    }
    ++open_;
  }
  auto conn = Connect();
  if (!conn.ok()) {
    {
      MutexLock lock(pool_mu_);
      --open_;
    }
    pool_cv_.notify_one();
    return conn.status();
  }
  return PooledConn(this, std::move(*conn));
}

void PostgresStore::Release(std::unique_ptr<pg::Conn> conn) {
  {
    MutexLock lock(pool_mu_);
    if (conn->broken()) {
      --open_;
    } else {
      idle_.push_back(std::move(conn));
    }
  }
  pool_cv_.notify_one();
}

// ---- catalog ---------------------------------------------------------------------------------

Result<StreamInfo> PostgresStore::CreateStream(const StreamSpec& spec) {
  RUNNEL_RETURN_IF_ERROR(ValidateStreamName(spec.name));
  RUNNEL_RETURN_IF_ERROR(ValidateRetention(spec.retention));
  if (spec.first_offset == 0 || spec.first_offset == kMaxOffset) {
    return Status::InvalidArgument("first_offset must be between 1 and 2^64-2");
  }
  RUNNEL_ASSIGN_OR_RETURN(auto conn, Acquire());
  Params p;
  p.Bytes(spec.ns).Bytes(spec.name).Bytes(spec.content_type).Bytes(spec.attributes);
  OptInt8(p, spec.retention.max_events);
  OptInt8(p, spec.retention.max_age_ms);
  OptInt8(p, spec.retention.max_bytes);
  p.Int8(OffsetToDb(spec.first_offset)).Int8(BitsToDb(spec.created_at_ms));
  p.Bytes(NaturalKey(spec.name));
  RUNNEL_ASSIGN_OR_RETURN(
      Rows rows,
      conn->Exec("INSERT INTO streams (ns, name, content_type, attributes, max_events, max_age_ms, "
                 "max_bytes, first_offset, created_at_ms, next_offset, head_offset, nkey) "
                 "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $8, $8, $10) "
                 "ON CONFLICT (ns, name) WHERE NOT deleted DO NOTHING RETURNING id",
                 p));
  if (rows.size() == 0) {
    return Status::AlreadyExists("stream '" + spec.name + "' already exists in " + spec.ns);
  }
  StreamInfo info;
  info.id = static_cast<StreamId>(rows.Int8(0, 0));
  info.spec = spec;
  info.next_offset = spec.first_offset;
  return info;
}

Result<StreamInfo> PostgresStore::GetStream(std::string_view ns, std::string_view name) {
  RUNNEL_ASSIGN_OR_RETURN(auto conn, Acquire());
  RUNNEL_ASSIGN_OR_RETURN(Rows rows, conn->Exec("SELECT " + std::string(kStreamColumns) +
                                                    " FROM streams WHERE ns = $1 AND name = $2 "
                                                    "AND NOT deleted",
                                                Params().Bytes(ns).Bytes(name)));
  if (rows.size() == 0) {
    return Status::NotFound("stream '" + std::string(name) + "' does not exist in " +
                            std::string(ns));
  }
  return StreamFromRow(rows, 0);
}

Result<StreamInfo> PostgresStore::GetStreamById(StreamId id) {
  RUNNEL_ASSIGN_OR_RETURN(auto conn, Acquire());
  RUNNEL_ASSIGN_OR_RETURN(Rows rows, conn->Exec("SELECT " + std::string(kStreamColumns) +
                                                    " FROM streams WHERE id = $1 AND NOT deleted",
                                                Params().Int8(BitsToDb(id))));
  if (rows.size() == 0) return StreamNotFound(id);
  return StreamFromRow(rows, 0);
}

Result<std::vector<StreamInfo>> PostgresStore::ListStreams(std::string_view ns,
                                                           std::string_view start_after,
                                                           size_t limit) {
  RUNNEL_ASSIGN_OR_RETURN(auto conn, Acquire());
  RUNNEL_ASSIGN_OR_RETURN(
      Rows rows, conn->Exec("SELECT " + std::string(kStreamColumns) +
                                " FROM streams WHERE ns = $1 AND name > $2 AND NOT deleted "
                                "ORDER BY name LIMIT $3",
                            Params().Bytes(ns).Bytes(start_after).Int8(ClampToInt8(limit))));
  std::vector<StreamInfo> out;
  out.reserve(static_cast<size_t>(rows.size()));
  for (int r = 0; r < rows.size(); ++r) out.push_back(StreamFromRow(rows, r));
  return out;
}

Result<std::vector<StreamInfo>> PostgresStore::ListStreamsByNaturalKey(std::string_view ns,
                                                                       std::string_view from_key,
                                                                       size_t limit) {
  RUNNEL_ASSIGN_OR_RETURN(auto conn, Acquire());
  RUNNEL_ASSIGN_OR_RETURN(
      Rows rows, conn->Exec("SELECT " + std::string(kStreamColumns) +
                                " FROM streams WHERE ns = $1 AND nkey >= $2 AND NOT deleted "
                                "ORDER BY nkey LIMIT $3",
                            Params().Bytes(ns).Bytes(from_key).Int8(ClampToInt8(limit))));
  std::vector<StreamInfo> out;
  out.reserve(static_cast<size_t>(rows.size()));
  for (int r = 0; r < rows.size(); ++r) out.push_back(StreamFromRow(rows, r));
  return out;
}

Status PostgresStore::UpdateStream(StreamId id, const std::optional<StreamRetention>& retention,
                                   std::string_view attributes,
                                   std::optional<std::string_view> expected_attributes,
                                   std::optional<uint64_t> expected_next_offset) {
  if (retention) RUNNEL_RETURN_IF_ERROR(ValidateRetention(*retention));
  RUNNEL_ASSIGN_OR_RETURN(auto conn, Acquire());
  const StreamRetention caps = retention.value_or(StreamRetention{});
  Params p;
  p.Int8(BitsToDb(id));
  OptInt8(p, caps.max_events);
  OptInt8(p, caps.max_age_ms);
  OptInt8(p, caps.max_bytes);
  p.Bytes(attributes);
  if (expected_attributes) {
    p.Bytes(*expected_attributes);
  } else {
    p.Null(17);  // bytea
  }
  if (expected_next_offset) {
    p.Int8(OffsetToDb(*expected_next_offset));
  } else {
    p.Null(20);  // bigint
  }
  RUNNEL_ASSIGN_OR_RETURN(Rows rows,
                          conn->Exec("UPDATE streams SET "
                                     "max_events = CASE WHEN $8 THEN max_events ELSE $2 END, "
                                     "max_age_ms = CASE WHEN $8 THEN max_age_ms ELSE $3 END, "
                                     "max_bytes = CASE WHEN $8 THEN max_bytes ELSE $4 END, "
                                     "attributes = $5 WHERE id = $1 AND NOT deleted AND "
                                     "($6::bytea IS NULL OR attributes = $6) AND "
                                     "($7::bigint IS NULL OR next_offset = $7)",
                                     p.Bool(!retention.has_value())));
  if (rows.Affected() > 0) return Status::OK();
  if (expected_attributes || expected_next_offset) {
    // Which condition failed, read back (another node may have changed the row meanwhile; the
    // answer is a refusal either way: nothing was changed).
    RUNNEL_ASSIGN_OR_RETURN(
        Rows live, conn->Exec("SELECT next_offset FROM streams WHERE id = $1 AND NOT deleted",
                              Params().Int8(BitsToDb(id))));
    if (live.size() > 0) {
      const uint64_t next = OffsetFromDb(live.Int8(0, 0));
      if (expected_next_offset && next != *expected_next_offset) {
        return NextOffsetChanged("#" + std::to_string(id), *expected_next_offset, next);
      }
      return AttributesChanged("#" + std::to_string(id));
    }
  }
  return StreamNotFound(id);
}

Status PostgresStore::DeleteStream(StreamId id) {
  RUNNEL_ASSIGN_OR_RETURN(auto conn, Acquire());
  auto run = [&]() -> Status {
    RUNNEL_RETURN_IF_ERROR(conn->Exec("BEGIN").status());
    // The row lock waits for in-flight appends; the deletes below run in later statements, so
    // they see (and remove) whatever those appends committed.
    RUNNEL_ASSIGN_OR_RETURN(Rows marked, conn->Exec("UPDATE streams SET deleted = true "
                                                    "WHERE id = $1 AND NOT deleted RETURNING id",
                                                    Params().Int8(BitsToDb(id))));
    if (marked.size() == 0) {
      RUNNEL_RETURN_IF_ERROR(conn->Exec("ROLLBACK").status());
      return StreamNotFound(id);
    }
    for (const char* table : {"events", "cursors", "producers"}) {
      RUNNEL_RETURN_IF_ERROR(
          conn->Exec(std::string("DELETE FROM ") + table + " WHERE stream_id = $1",
                     Params().Int8(BitsToDb(id)))
              .status());
    }
    return conn->Exec("COMMIT").status();
  };
  Status s = run();
  if (!s.ok() && s.code() != StatusCode::kNotFound && !conn->broken()) (void)conn->Exec("ROLLBACK");
  return s;
}

// ---- reads -----------------------------------------------------------------------------------

Result<std::vector<StoredRecord>> PostgresStore::Read(StreamId id, uint64_t from, size_t limit,
                                                      size_t max_bytes) {
  RUNNEL_ASSIGN_OR_RETURN(auto conn, Acquire());
  // One statement (one snapshot): the stream's existence, then the page. A record is returned
  // when it is the first, or when the payload bytes up to and including it fit in max_bytes.
  RUNNEL_ASSIGN_OR_RETURN(
      Rows rows, conn->Exec("SELECT s.id, e.off, e.appended_at_ms, e.key, e.payload FROM streams s "
                            "LEFT JOIN LATERAL ("
                            "  SELECT off, appended_at_ms, key, payload FROM ("
                            "    SELECT off, appended_at_ms, key, payload,"
                            "           sum(octet_length(payload)) OVER (ORDER BY off) AS cum,"
                            "           row_number() OVER (ORDER BY off) AS rn"
                            "    FROM (SELECT * FROM events WHERE stream_id = s.id AND off >= $2"
                            "          ORDER BY off LIMIT $3) page) w"
                            "  WHERE rn = 1 OR cum <= $4) e ON true "
                            "WHERE s.id = $1 AND NOT s.deleted ORDER BY e.off",
                            Params()
                                .Int8(BitsToDb(id))
                                .Int8(OffsetToDb(from))
                                .Int8(ClampToInt8(limit))
                                .Int8(ClampToInt8(max_bytes))));
  if (rows.size() == 0) return StreamNotFound(id);
  std::vector<StoredRecord> out;
  if (rows.IsNull(0, 1)) return out;
  out.reserve(static_cast<size_t>(rows.size()));
  for (int r = 0; r < rows.size(); ++r) {
    StoredRecord rec;
    rec.offset = OffsetFromDb(rows.Int8(r, 1));
    rec.appended_at_ms = BitsFromDb(rows.Int8(r, 2));
    if (!rows.IsNull(r, 3)) rec.key = std::string(rows.Bytes(r, 3));
    rec.payload = std::string(rows.Bytes(r, 4));
    out.push_back(std::move(rec));
  }
  return out;
}

Result<std::optional<StoredRecord>> PostgresStore::ReadAt(StreamId id, uint64_t offset) {
  RUNNEL_ASSIGN_OR_RETURN(auto conn, Acquire());
  RUNNEL_ASSIGN_OR_RETURN(
      Rows rows, conn->Exec("SELECT s.id, e.off, e.appended_at_ms, e.key, e.payload FROM streams s "
                            "LEFT JOIN events e ON e.stream_id = s.id AND e.off = $2 "
                            "WHERE s.id = $1 AND NOT s.deleted",
                            Params().Int8(BitsToDb(id)).Int8(OffsetToDb(offset))));
  if (rows.size() == 0) return StreamNotFound(id);
  if (rows.IsNull(0, 1)) return std::optional<StoredRecord>();
  StoredRecord rec;
  rec.offset = OffsetFromDb(rows.Int8(0, 1));
  rec.appended_at_ms = BitsFromDb(rows.Int8(0, 2));
  if (!rows.IsNull(0, 3)) rec.key = std::string(rows.Bytes(0, 3));
  rec.payload = std::string(rows.Bytes(0, 4));
  return std::optional<StoredRecord>(std::move(rec));
}

// ---- truncation and cursors ------------------------------------------------------------------

Result<uint64_t> PostgresStore::TruncatePrefix(StreamId id, uint64_t through,
                                               bool respect_cursors) {
  RUNNEL_ASSIGN_OR_RETURN(auto conn, Acquire());
  auto run = [&]() -> Result<uint64_t> {
    RUNNEL_RETURN_IF_ERROR(conn->Exec("BEGIN").status());
    // This row lock orders the truncation with appends and with CommitCursor (which takes FOR
    // SHARE on the same row), so the smallest cursor read below cannot be undercut meanwhile.
    RUNNEL_ASSIGN_OR_RETURN(Rows s, conn->Exec("SELECT next_offset, head_offset FROM streams "
                                               "WHERE id = $1 AND NOT deleted FOR NO KEY UPDATE",
                                               Params().Int8(BitsToDb(id))));
    if (s.size() == 0) {
      RUNNEL_RETURN_IF_ERROR(conn->Exec("ROLLBACK").status());
      return StreamNotFound(id);
    }
    const uint64_t next = OffsetFromDb(s.Int8(0, 0));
    const uint64_t head = OffsetFromDb(s.Int8(0, 1));
    uint64_t cut = through;
    if (respect_cursors) {
      RUNNEL_ASSIGN_OR_RETURN(Rows c,
                              conn->Exec("SELECT min(off) FROM cursors WHERE stream_id = $1",
                                         Params().Int8(BitsToDb(id))));
      if (!c.IsNull(0, 0)) cut = std::min(cut, OffsetFromDb(c.Int8(0, 0)));
    }
    const uint64_t new_head = cut >= next ? next : std::max(head, cut + 1);
    if (new_head <= head) {
      RUNNEL_RETURN_IF_ERROR(conn->Exec("COMMIT").status());
      return uint64_t{0};
    }
    RUNNEL_ASSIGN_OR_RETURN(
        Rows d, conn->Exec("WITH d AS (DELETE FROM events WHERE stream_id = $1 AND off < $2 "
                           "RETURNING coalesce(octet_length(key), 0) + octet_length(payload) AS b) "
                           "SELECT coalesce(sum(b), 0)::bigint FROM d",
                           Params().Int8(BitsToDb(id)).Int8(OffsetToDb(new_head))));
    RUNNEL_RETURN_IF_ERROR(
        conn->Exec("UPDATE streams SET head_offset = $2, retained_bytes = retained_bytes - $3 "
                   "WHERE id = $1",
                   Params().Int8(BitsToDb(id)).Int8(OffsetToDb(new_head)).Int8(d.Int8(0, 0)))
            .status());
    RUNNEL_RETURN_IF_ERROR(conn->Exec("COMMIT").status());
    return new_head - head;
  };
  auto r = run();
  if (!r.ok() && r.status().code() != StatusCode::kNotFound && !conn->broken()) {
    (void)conn->Exec("ROLLBACK");
  }
  return r;
}

Result<uint64_t> PostgresStore::DropRecords(StreamId id, const std::vector<uint64_t>& offsets) {
  if (offsets.empty()) return uint64_t{0};
  RUNNEL_ASSIGN_OR_RETURN(auto conn, Acquire());
  std::vector<int64_t> db_offsets;
  db_offsets.reserve(offsets.size());
  for (uint64_t o : offsets) db_offsets.push_back(OffsetToDb(o));
  auto run = [&]() -> Result<uint64_t> {
    RUNNEL_RETURN_IF_ERROR(conn->Exec("BEGIN").status());
    // The same row lock as TruncatePrefix: orders the removal with appends and truncations.
    RUNNEL_ASSIGN_OR_RETURN(Rows s, conn->Exec("SELECT next_offset FROM streams "
                                               "WHERE id = $1 AND NOT deleted FOR NO KEY UPDATE",
                                               Params().Int8(BitsToDb(id))));
    if (s.size() == 0) {
      RUNNEL_RETURN_IF_ERROR(conn->Exec("ROLLBACK").status());
      return StreamNotFound(id);
    }
    RUNNEL_ASSIGN_OR_RETURN(
        Rows d, conn->Exec("WITH d AS (DELETE FROM events WHERE stream_id = $1 AND off = ANY($2) "
                           "RETURNING coalesce(octet_length(key), 0) + octet_length(payload) AS b) "
                           "SELECT count(*)::bigint, coalesce(sum(b), 0)::bigint FROM d",
                           Params().Int8(BitsToDb(id)).Int8Array(db_offsets)));
    const uint64_t removed = BitsFromDb(d.Int8(0, 0));
    // The head moves to the first record left (or the next offset when none is).
    RUNNEL_RETURN_IF_ERROR(
        conn->Exec("UPDATE streams SET retained_bytes = retained_bytes - $2, head_offset = "
                   "coalesce((SELECT min(off) FROM events WHERE stream_id = $1), next_offset) "
                   "WHERE id = $1",
                   Params().Int8(BitsToDb(id)).Int8(d.Int8(0, 1)))
            .status());
    RUNNEL_RETURN_IF_ERROR(conn->Exec("COMMIT").status());
    return removed;
  };
  auto r = run();
  if (!r.ok() && r.status().code() != StatusCode::kNotFound && !conn->broken()) {
    (void)conn->Exec("ROLLBACK");
  }
  return r;
}

Result<uint64_t> PostgresStore::CommitCursor(StreamId id, std::string_view consumer,
                                             uint64_t offset, uint64_t now_ms) {
  RUNNEL_ASSIGN_OR_RETURN(auto conn, Acquire());
  // One statement: FOR SHARE on the stream row (waits for a TruncatePrefix in progress), then
  // an atomic max-merge whose timestamp moves only when the value advances.
  RUNNEL_ASSIGN_OR_RETURN(
      Rows rows,
      conn->Exec("WITH s AS (SELECT id FROM streams WHERE id = $1 AND NOT deleted FOR SHARE) "
                 "INSERT INTO cursors AS c (stream_id, consumer, off, updated_at_ms) "
                 "SELECT id, $2, $3, $4 FROM s "
                 "ON CONFLICT (stream_id, consumer) DO UPDATE SET "
                 "off = GREATEST(c.off, EXCLUDED.off), "
                 "updated_at_ms = CASE WHEN EXCLUDED.off > c.off THEN EXCLUDED.updated_at_ms "
                 "ELSE c.updated_at_ms END "
                 "RETURNING off",
                 Params()
                     .Int8(BitsToDb(id))
                     .Bytes(consumer)
                     .Int8(OffsetToDb(offset))
                     .Int8(BitsToDb(now_ms))));
  if (rows.size() == 0) return StreamNotFound(id);
  return OffsetFromDb(rows.Int8(0, 0));
}

Result<std::optional<CursorState>> PostgresStore::GetCursor(StreamId id,
                                                            std::string_view consumer) {
  RUNNEL_ASSIGN_OR_RETURN(auto conn, Acquire());
  RUNNEL_ASSIGN_OR_RETURN(
      Rows rows, conn->Exec("SELECT s.id, c.off, c.updated_at_ms FROM streams s "
                            "LEFT JOIN cursors c ON c.stream_id = s.id AND c.consumer = $2 "
                            "WHERE s.id = $1 AND NOT s.deleted",
                            Params().Int8(BitsToDb(id)).Bytes(consumer)));
  if (rows.size() == 0) return StreamNotFound(id);
  if (rows.IsNull(0, 1)) return std::optional<CursorState>();
  return std::optional<CursorState>(CursorState{
      std::string(consumer), OffsetFromDb(rows.Int8(0, 1)), BitsFromDb(rows.Int8(0, 2))});
}

Result<std::vector<CursorState>> PostgresStore::ListCursors(StreamId id) {
  RUNNEL_ASSIGN_OR_RETURN(auto conn, Acquire());
  RUNNEL_ASSIGN_OR_RETURN(
      Rows rows, conn->Exec("SELECT s.id, c.consumer, c.off, c.updated_at_ms FROM streams s "
                            "LEFT JOIN cursors c ON c.stream_id = s.id "
                            "WHERE s.id = $1 AND NOT s.deleted ORDER BY c.consumer",
                            Params().Int8(BitsToDb(id))));
  if (rows.size() == 0) return StreamNotFound(id);
  std::vector<CursorState> out;
  for (int r = 0; r < rows.size(); ++r) {
    if (rows.IsNull(r, 1)) continue;
    out.push_back(CursorState{std::string(rows.Bytes(r, 1)), OffsetFromDb(rows.Int8(r, 2)),
                              BitsFromDb(rows.Int8(r, 3))});
  }
  return out;
}

Result<bool> PostgresStore::DeleteCursor(StreamId id, std::string_view consumer) {
  RUNNEL_ASSIGN_OR_RETURN(auto conn, Acquire());
  // FOR SHARE on the stream row, as CommitCursor: ordered with a TruncatePrefix in progress.
  RUNNEL_ASSIGN_OR_RETURN(
      Rows rows,
      conn->Exec("WITH s AS (SELECT id FROM streams WHERE id = $1 AND NOT deleted FOR SHARE), "
                 "d AS (DELETE FROM cursors c USING s WHERE c.stream_id = s.id "
                 "AND c.consumer = $2 RETURNING 1) "
                 "SELECT (SELECT count(*) FROM s), (SELECT count(*) FROM d)",
                 Params().Int8(BitsToDb(id)).Bytes(consumer)));
  if (rows.size() == 0 || rows.Int8(0, 0) == 0) return StreamNotFound(id);
  return rows.Int8(0, 1) > 0;
}

Result<std::optional<ProducerState>> PostgresStore::GetProducer(StreamId id,
                                                                std::string_view producer_id) {
  RUNNEL_ASSIGN_OR_RETURN(auto conn, Acquire());
  RUNNEL_ASSIGN_OR_RETURN(
      Rows rows, conn->Exec("SELECT s.id, p.epoch, p.seq, p.last_offset FROM streams s "
                            "LEFT JOIN producers p ON p.stream_id = s.id AND p.producer_id = $2 "
                            "WHERE s.id = $1 AND NOT s.deleted",
                            Params().Int8(BitsToDb(id)).Bytes(producer_id)));
  if (rows.size() == 0) return StreamNotFound(id);
  if (rows.IsNull(0, 1)) return std::optional<ProducerState>();
  return std::optional<ProducerState>(
      ProducerState{std::string(producer_id), BitsFromDb(rows.Int8(0, 1)),
                    BitsFromDb(rows.Int8(0, 2)), OffsetFromDb(rows.Int8(0, 3))});
}

Status PostgresStore::Flush() {
  // Every acknowledged append was acknowledged after its COMMIT returned; there is nothing left
  // to make durable. Check that the database is still reachable, as a flush caller expects an
  // error when the store is unusable.
  RUNNEL_ASSIGN_OR_RETURN(auto conn, Acquire());
  return conn->Exec("SELECT 1").status();
}

}  // namespace store
}  // namespace runnel
