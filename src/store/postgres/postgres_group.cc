// One group transaction of the PostgreSQL store's appends (PostgresStore::TryGroup): lock and
// read the rows (or take them from the worker's cache), simulate the appends in queue order,
// build the one statement that writes them all, send it with COMMIT and read the outcomes.
#include <algorithm>
#include <chrono>
#include <map>
#include <string>
#include <utility>

#include "store/postgres/postgres_internal.h"
#include "store/postgres/postgres_store.h"
#include "store/retention.h"
#include "store/store_status.h"

namespace runnel::store {

namespace {

// Rows fetched at a time when retention needs the timestamps or sizes of old records.
constexpr int64_t kRetentionPage = 1000;

}  // namespace

// One stream's state while a group transaction is being built.
struct PostgresStore::GroupStream {
  bool deleted = false;
  bool closed = false;
  StreamRetention retention;
  uint64_t next = 0;  // next offset after the appends simulated so far
  // What `next` is relative to: the cached next offset when the database places the records
  // (GroupTx::assign_in_db, `next` counts from 0), else 0.
  uint64_t base = 0;
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
  // The attributes read under the row lock, or (optimistic) the cached ones.
  std::string stored_attributes;
  bool touched = false;
};

// Everything one TryGroup builds up, shared by its steps.
struct PostgresStore::GroupTx {
  GroupTx(pg::Conn& conn, std::vector<Pending>& group, const std::vector<size_t>& members,
          std::vector<std::optional<Result<AppendResult>>>& outcomes, StreamCache& cache,
          bool optimistic, bool locked)
      : conn(conn),
        group(group),
        members(members),
        outcomes(outcomes),
        cache(cache),
        optimistic(optimistic),
        locked(locked),
        results(group.size()) {}

  // Marks every member still without an outcome (the ones being written) with `status`.
  void FailWritten(const Status& status) {
    for (size_t i : written) outcomes[i].emplace(status);
  }

  pg::Conn& conn;
  std::vector<Pending>& group;
  const std::vector<size_t>& members;
  std::vector<std::optional<Result<AppendResult>>>& outcomes;
  StreamCache& cache;
  const bool optimistic;
  const bool locked;
  // Optimistic groups without expected offsets let the database place the records: offsets
  // are simulated relative to 0 and the write adds each stream's next offset as it finds it
  // under the row lock, so appends made through other nodes meanwhile cannot make the group
  // stale. (An expected offset needs the absolute tail: those groups use the cached one.)
  bool assign_in_db = false;

  std::vector<size_t> written;  // members whose records this transaction writes
  std::map<StreamId, GroupStream> streams;
  // Stored (epoch, seq) of the group's producers, read under the row locks.
  std::map<std::pair<StreamId, std::string>, std::pair<uint64_t, uint64_t>> stored_producers;
  // The records to insert, column by column, with absolute offsets (relative ones when
  // assign_in_db).
  std::vector<int64_t> ins_stream, ins_off, ins_ts;
  std::vector<std::optional<std::string_view>> ins_key, ins_payload;
  // The producers' states after the group.
  std::map<std::pair<StreamId, std::string>, ProducerState> producers;
  std::vector<AppendResult> results;
  // A failed read of old records for retention.
  Status fetch_error;
  // The catalog rows the write updates, in id order.
  std::vector<int64_t> up_id;
  // Set once the transaction committed and the outcomes are filled in.
  bool committed = false;
};

PostgresStore::GroupEnd PostgresStore::TryGroup(
    pg::Conn& conn, std::vector<Pending>& group, const std::vector<size_t>& members,
    std::vector<std::optional<Result<AppendResult>>>& outcomes, StreamCache& cache, bool optimistic,
    bool locked) {
  GroupTx tx(conn, group, members, outcomes, cache, optimistic, locked);
  // Any failure forgets what this group's streams looked like.
  struct Forget {
    GroupTx& tx;
    ~Forget() {
      if (tx.committed) return;
      for (size_t i : tx.members) tx.cache.erase(tx.group[i].request.stream);
    }
  } forget{tx};
  tx.assign_in_db = optimistic && std::none_of(members.begin(), members.end(), [&](size_t i) {
                      return group[i].request.expected_offset.has_value();
                    });
  if (optimistic) {
    StartFromCache(tx);
  } else if (Status opened = LockRows(tx); !opened.ok()) {
    tx.written = members;
    return GroupSqlError(tx, opened);
  }
  for (size_t i : members) SimulateAppend(tx, i);
  if (optimistic && tx.written.size() != members.size()) {
    // A refusal decided from cached state is not definite: decide it under the row locks.
    for (size_t i : members) outcomes[i].reset();
    return GroupEnd::kStale;
  }
  if (!tx.fetch_error.ok()) return GroupSqlError(tx, tx.fetch_error);
  if (tx.written.empty()) {
    auto rb = conn.Exec("ROLLBACK");
    if (!rb.ok()) conn.Sever();
    return GroupEnd::kDone;
  }
  pg::Params params;
  std::string sql = tx.assign_in_db ? PlacingWrite(tx, params) : LockedWrite(tx, params);
  return SendGroup(tx, std::move(sql), std::move(params));
}

PostgresStore::GroupEnd PostgresStore::GroupSqlError(GroupTx& tx, const Status& status) {
  pg::Conn& conn = tx.conn;
  if (conn.broken()) {
    tx.FailWritten(Status::Unavailable(std::string(status.message()) +
                                       " before COMMIT was sent; nothing was written"));
    return GroupEnd::kLostBefore;
  }
  const std::string state = conn.last_sqlstate();
  (void)conn.Exec("ROLLBACK");
  const bool transient = state == pg::kDeadlockDetected || state == pg::kSerializationFailure;
  if (tx.members.size() == 1) {
    const Pending& p = tx.group[tx.members[0]];
    if (state == pg::kUniqueViolation) {
      // Someone else holds a slot of this batch: a definite conflict.
      auto info = GetStreamById(p.request.stream);
      const uint64_t actual = info.ok() ? info->next_offset : 0;
      const uint64_t expected = p.request.expected_offset.value_or(0);
      tx.outcomes[tx.members[0]].emplace(Status::Conflict(
          "an offset of this batch is already taken (expected " + std::to_string(expected) +
              ", stream's next offset " + std::to_string(actual) + ")",
          expected, actual));
    } else {
      tx.outcomes[tx.members[0]].emplace(status);
    }
    // A transient failure keeps its outcome in case the caller does not retry.
    return transient ? GroupEnd::kSqlError : GroupEnd::kDone;
  }
  for (size_t i : tx.members) tx.outcomes[i].reset();
  return GroupEnd::kSqlError;
}

void PostgresStore::StartFromCache(GroupTx& tx) {
  for (size_t i : tx.members) {
    const CachedStream& c = tx.cache.at(tx.group[i].request.stream);
    GroupStream s;
    s.next = s.next0 = tx.assign_in_db ? 0 : c.next;
    s.base = tx.assign_in_db ? c.next : 0;
    s.head = s.head0 = 0;  // unused without retention; the guarded write leaves head alone
    s.bytes = tx.assign_in_db ? 0 : c.bytes;
    s.stored_attributes = c.attributes;
    tx.streams.emplace(tx.group[i].request.stream, s);
  }
}

Status PostgresStore::LockRows(GroupTx& tx) {
  std::vector<int64_t> ids;
  for (size_t i : tx.members) ids.push_back(BitsToDb(tx.group[i].request.stream));
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
  for (size_t i : tx.members) {
    const AppendRequest& req = tx.group[i].request;
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
  auto opened = tx.conn.Pipeline(opening);
  for (auto& r : opened) {
    if (!r.ok()) return r.status();
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
    tx.streams.emplace(static_cast<StreamId>(locked->Int8(r, 0)), std::move(s));
  }
  if (opened.size() > 2) {
    const Rows& prows = opened[2].value();
    for (int r = 0; r < prows.size(); ++r) {
      tx.stored_producers[{static_cast<StreamId>(prows.Int8(r, 0)),
                           std::string(prows.Bytes(r, 1))}] = {BitsFromDb(prows.Int8(r, 2)),
                                                               BitsFromDb(prows.Int8(r, 3))};
    }
  }
  return Status::OK();
}

Status PostgresStore::RefuseAppend(const GroupTx& tx, AppendRequest& req) {
  auto it = tx.streams.find(req.stream);
  if (it == tx.streams.end() || it->second.deleted) return StreamNotFound(req.stream);
  const GroupStream& s = it->second;
  // The producer's state: an append earlier in this group first, then the stored one.
  std::optional<std::pair<uint64_t, uint64_t>> producer;
  if (req.producer) {
    const auto key = std::make_pair(req.stream, req.producer->producer_id);
    if (auto p = tx.producers.find(key); p != tx.producers.end()) {
      producer.emplace(p->second.epoch, p->second.seq);
    } else if (auto d = tx.stored_producers.find(key); d != tx.stored_producers.end()) {
      producer = d->second;
    }
  }
  if (req.guard != nullptr) {
    // Under the row lock, or (optimistic) from the cached row, which the write then requires
    // unchanged: a refusal from cached state is decided again under the lock (TryGroup). Where
    // the database places the records, the tail shown is the cached one; no append whose rules
    // read the tail (an expected offset) takes that path.
    AppendState state;
    state.next_offset = s.base + s.next;
    state.closed = s.closed;
    state.attributes = s.attributes ? *s.attributes : s.stored_attributes;
    state.producer = producer;
    RUNNEL_RETURN_IF_ERROR(req.guard->Admit(state, &req));
  }
  if (s.closed) {
    return Status::FailedPrecondition("stream #" + std::to_string(req.stream) + " is closed");
  }
  // Checked after existence and closure, in the memory and log stores' order.
  if (req.records.empty() && !req.close) {
    return Status::InvalidArgument("an append needs at least one record");
  }
  if (req.expected_offset && *req.expected_offset != s.next) {
    return Status::Conflict("expected offset " + std::to_string(*req.expected_offset) +
                                " but the stream's next offset is " + std::to_string(s.next),
                            *req.expected_offset, s.next);
  }
  // After the offset condition, as in the memory and log stores.
  if (req.expected_attributes &&
      (tx.optimistic || *req.expected_attributes != s.attributes.value_or(s.stored_attributes))) {
    return AttributesChanged("#" + std::to_string(req.stream));
  }
  // next_offset itself must stay representable, so the last usable offset is 2^64-2.
  if (req.records.size() > kMaxOffset - s.next) {
    return Status::OutOfRange("stream #" + std::to_string(req.stream) +
                              " would pass the largest offset");
  }
  // Compare-and-set on the producer's state, read under the row lock: only a strictly newer
  // (epoch, seq) may be written.
  if (req.producer) return CheckProducer(producer, *req.producer);
  return Status::OK();
}

void PostgresStore::SimulateAppend(GroupTx& tx, size_t i) {
  AppendRequest& req = tx.group[i].request;
  if (Status refused = RefuseAppend(tx, req); !refused.ok()) {
    tx.outcomes[i].emplace(std::move(refused));
    return;
  }
  GroupStream& s = tx.streams.at(req.stream);
  const uint64_t n = req.records.size();
  AppendResult& res = tx.results[i];
  res.first_offset = n ? s.next : 0;
  for (const AppendRecord& rec : req.records) {
    const uint64_t b = RecordBytes(rec.key ? rec.key->size() : 0, rec.payload.size());
    tx.ins_stream.push_back(BitsToDb(req.stream));
    tx.ins_off.push_back(OffsetToDb(s.next));
    tx.ins_ts.push_back(BitsToDb(req.now_ms));
    tx.ins_key.push_back(rec.key ? std::optional<std::string_view>(*rec.key) : std::nullopt);
    tx.ins_payload.push_back(std::string_view(rec.payload));
    s.added.emplace_back(req.now_ms, b);
    s.bytes += b;
    ++s.next;
  }
  res.last_offset = n ? s.next - 1 : 0;
  if (req.producer) {
    ProducerState ps = *req.producer;
    ps.last_offset = res.last_offset;
    tx.producers[{req.stream, ps.producer_id}] = std::move(ps);
  }
  if (req.close) s.closed = true;
  if (req.attributes) s.attributes = *req.attributes;
  if (s.retention.max_events || s.retention.max_age_ms || s.retention.max_bytes) {
    ApplyRetention(tx, req.stream, s, req.now_ms);
  }
  // An empty stream keeps head == next.
  if (s.head > s.next) s.head = s.next;
  res.next_offset = s.next;
  s.touched = true;
  tx.written.push_back(i);
}

void PostgresStore::ApplyRetention(GroupTx& tx, StreamId sid, GroupStream& s, uint64_t now_ms) {
  // The retained records are [head, next): those before next0 are in the table (read back a
  // page at a time, as the shared retention pass asks for them), the rest are s.added.
  auto record_at = [&](size_t idx) -> std::pair<uint64_t, uint64_t> {
    const uint64_t off = s.head + idx;
    if (off >= s.next0) return s.added[off - s.next0];
    auto f = s.fetched.find(off);
    if (f == s.fetched.end() && tx.fetch_error.ok()) {
      auto page = tx.conn.Exec(
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
        tx.fetch_error = page.status();
      } else {
        for (int r = 0; r < page->size(); ++r) {
          s.fetched[OffsetFromDb(page->Int8(r, 0))] = {BitsFromDb(page->Int8(r, 1)),
                                                       static_cast<uint64_t>(page->Int8(r, 2))};
        }
      }
      f = s.fetched.find(off);
      if (f == s.fetched.end() && tx.fetch_error.ok()) {
        tx.fetch_error = Status::Corruption("postgres: stream #" + std::to_string(sid) +
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
  const size_t drop = RetentionDropCount(s.retention, now_ms, view);
  for (size_t d = 0; d < drop; ++d) s.bytes -= record_at(d).second;
  s.head += drop;
  for (auto f = s.fetched.begin(); f != s.fetched.end() && f->first < s.head;) {
    f = s.fetched.erase(f);
  }
}

// Everything is written by one statement: the records that survive retention, the retention
// cut of older rows, the catalog rows, the producers and the notifications. (Its parts see one
// snapshot, so records this group adds and retention drops at once are simply not inserted.)

std::string PostgresStore::PlacingWrite(GroupTx& tx, Params& wp) {
  // The catalog rows move first and return where each stream's records start (`base`, the
  // next offset found); the records are inserted at base + their relative offset. Applies only
  // to open, live streams with the cached attributes, without retention caps and with room for
  // the records; otherwise the division by zero aborts the transaction and the group takes the
  // locking path. The database form of offsets (pg::OffsetToDb) is the offset minus 2^63, so
  // adding a count to it adds to the offset.
  std::vector<int64_t> up_n, up_bytes;
  std::vector<bool> up_closed;
  std::vector<std::optional<std::string_view>> up_attrs, old_attrs;
  for (auto& [id, st] : tx.streams) {
    if (!st.touched) continue;
    tx.up_id.push_back(BitsToDb(id));
    old_attrs.push_back(std::string_view(st.stored_attributes));
    up_n.push_back(static_cast<int64_t>(st.next));
    up_bytes.push_back(BitsToDb(st.bytes));
    up_closed.push_back(st.closed);
    up_attrs.push_back(st.attributes ? std::optional<std::string_view>(*st.attributes)
                                     : std::nullopt);
  }
  std::vector<int64_t> rel_off;
  rel_off.reserve(tx.ins_off.size());
  for (int64_t off : tx.ins_off) rel_off.push_back(static_cast<int64_t>(OffsetFromDb(off)));
  std::string sql =
      "WITH upd AS (UPDATE streams s SET next_offset = s.next_offset + u.n, retained_bytes = "
      "s.retained_bytes + u.bytes, closed = u.closed, attributes = coalesce(u.attrs, "
      "s.attributes) FROM ";
  sql += Params::Unnest({wp.Bind(tx.up_id), wp.Bind(up_n), wp.Bind(up_bytes), wp.Bind(up_closed),
                         wp.Bind(up_attrs), wp.Bind(old_attrs)});
  sql +=
      " AS u(id, n, bytes, closed, attrs, old_attrs) WHERE s.id = u.id AND NOT s.closed AND NOT "
      "s.deleted AND s.attributes = u.old_attrs AND s.max_events IS NULL AND s.max_age_ms IS NULL "
      "AND s.max_bytes IS NULL "
      "AND s.next_offset <= 9223372036854775807 - u.n RETURNING s.id, s.next_offset - u.n "
      "AS base, s.retained_bytes AS bytes), ";
  if (!tx.ins_stream.empty()) {
    sql +=
        "ins AS (INSERT INTO events (stream_id, off, appended_at_ms, key, payload) SELECT "
        "r.sid, b.base + r.off, r.ts, r.key, r.payload FROM ";
    sql += Params::Unnest({wp.Bind(tx.ins_stream), wp.Bind(rel_off), wp.Bind(tx.ins_ts),
                           wp.Bind(tx.ins_key), wp.Bind(tx.ins_payload)});
    sql += " AS r(sid, off, ts, key, payload) JOIN upd b ON b.id = r.sid), ";
  }
  // With no row moved, the LEFT JOIN still yields one row, so the check still runs.
  sql +=
      "counted AS (SELECT count(*) AS c FROM upd) SELECT u.id, u.base, u.bytes, 1 / (CASE "
      "WHEN counted.c = ";
  sql += wp.Bind(static_cast<int64_t>(tx.up_id.size())) +
         " THEN 1 ELSE 0 END) FROM counted LEFT JOIN upd u ON true";
  return sql;
}

// Long on purpose: one SQL statement built from the group's columns (the records retention
// keeps, the retention cut, the producers, the catalog rows in the locking or the optimistic
// form), each part next to the arrays it binds.
std::string PostgresStore::LockedWrite(GroupTx& tx, Params& wp) {
  std::string sql = "WITH ";
  {
    std::vector<int64_t> keep_stream, keep_off, keep_ts;
    std::vector<std::optional<std::string_view>> keep_key, keep_payload;
    for (size_t r = 0; r < tx.ins_stream.size(); ++r) {
      const GroupStream& s = tx.streams.at(static_cast<StreamId>(tx.ins_stream[r]));
      if (OffsetFromDb(tx.ins_off[r]) < s.head) continue;
      keep_stream.push_back(tx.ins_stream[r]);
      keep_off.push_back(tx.ins_off[r]);
      keep_ts.push_back(tx.ins_ts[r]);
      keep_key.push_back(tx.ins_key[r]);
      keep_payload.push_back(tx.ins_payload[r]);
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
  for (auto& [id, s] : tx.streams) {
    if (!s.touched) continue;
    if (s.head > s.head0) {
      // Rows already in the table that retention cut: [head0, min(head, next0)).
      del_id.push_back(BitsToDb(id));
      del_lo.push_back(OffsetToDb(s.head0));
      del_hi.push_back(OffsetToDb(std::min(s.head, s.next0)));
    }
    tx.up_id.push_back(BitsToDb(id));
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
  if (!tx.producers.empty()) sql += ProducersWrite(tx, wp);
  if (tx.optimistic) {
    // Applies only where the row is exactly as cached (same next offset, bytes and attributes,
    // open, live, no retention caps); otherwise the division by zero aborts the whole transaction.
    std::vector<int64_t> old_next, old_bytes;
    std::vector<std::optional<std::string_view>> old_attrs;
    for (auto& [id, s] : tx.streams) {
      if (!s.touched) continue;
      old_next.push_back(OffsetToDb(s.next0));
      old_bytes.push_back(BitsToDb(tx.cache.at(id).bytes));
      old_attrs.push_back(std::string_view(s.stored_attributes));
    }
    sql +=
        "upd AS (UPDATE streams s SET next_offset = u.next, retained_bytes = u.bytes, "
        "closed = u.closed, attributes = coalesce(u.attrs, s.attributes) FROM ";
    sql += Params::Unnest({wp.Bind(tx.up_id), wp.Bind(up_next), wp.Bind(up_bytes),
                           wp.Bind(up_closed), wp.Bind(up_attrs), wp.Bind(old_next),
                           wp.Bind(old_bytes), wp.Bind(old_attrs)});
    sql +=
        " AS u(id, next, bytes, closed, attrs, old_next, old_bytes, old_attrs) WHERE s.id = u.id "
        "AND s.next_offset = u.old_next AND s.retained_bytes = u.old_bytes AND NOT s.closed "
        "AND NOT s.deleted AND s.attributes = u.old_attrs AND s.max_events IS NULL AND "
        "s.max_age_ms IS NULL "
        "AND s.max_bytes IS NULL RETURNING 1) "
        "SELECT 1 / (CASE WHEN count(*) = ";
    sql += wp.Bind(static_cast<int64_t>(tx.up_id.size())) + " THEN 1 ELSE 0 END) FROM upd";
  } else {
    sql +=
        "upd AS (UPDATE streams s SET next_offset = u.next, head_offset = u.head, "
        "retained_bytes = u.bytes, closed = u.closed, attributes = coalesce(u.attrs, "
        "s.attributes) FROM ";
    sql += Params::Unnest({wp.Bind(tx.up_id), wp.Bind(up_next), wp.Bind(up_head), wp.Bind(up_bytes),
                           wp.Bind(up_closed), wp.Bind(up_attrs)});
    sql +=
        " AS u(id, next, head, bytes, closed, attrs) WHERE s.id = u.id RETURNING 1) "
        "SELECT count(*) FROM upd";
  }
  return sql;
}

std::string PostgresStore::ProducersWrite(const GroupTx& tx, Params& wp) {
  std::vector<int64_t> p_stream, p_epoch, p_seq, p_last;
  std::vector<std::optional<std::string_view>> p_id;
  for (const auto& [key, ps] : tx.producers) {
    p_stream.push_back(BitsToDb(key.first));
    p_id.push_back(std::string_view(ps.producer_id));
    p_epoch.push_back(BitsToDb(ps.epoch));
    p_seq.push_back(BitsToDb(ps.seq));
    p_last.push_back(OffsetToDb(ps.last_offset));
  }
  std::string sql =
      "prod AS (INSERT INTO producers (stream_id, producer_id, epoch, seq, last_offset) "
      "SELECT * FROM ";
  sql += Params::Unnest(
      {wp.Bind(p_stream), wp.Bind(p_id), wp.Bind(p_epoch), wp.Bind(p_seq), wp.Bind(p_last)});
  sql +=
      " ON CONFLICT (stream_id, producer_id) DO UPDATE SET epoch = EXCLUDED.epoch, "
      "seq = EXCLUDED.seq, last_offset = EXCLUDED.last_offset), ";
  return sql;
}

PostgresStore::GroupEnd PostgresStore::SendGroup(GroupTx& tx, std::string sql, Params wp) {
  pg::Conn& conn = tx.conn;
  if (options_.fault_hook &&
      options_.fault_hook(PostgresFaultPoint::kBeforeCommit, conn.backend_pid())) {
    conn.Sever();
  }
  // The write and the COMMIT travel together; a failed write makes the server skip COMMIT.
  // Optimistically, BEGIN and the row locks travel in the same round trip too. Other nodes hear
  // of the new tails from the notifier (QueueNotify), not from this transaction.
  std::vector<pg::Conn::Statement> closing;
  if (tx.optimistic && !tx.locked) {
    closing.push_back(pg::Conn::Statement{"BEGIN", Params()});
    // Lock the rows in id order before the write, as the locking path does: the write's parts
    // (inserts under a unique index, the catalog update) would otherwise take their locks in
    // whatever order the plan visits them, and two nodes writing the same streams could
    // deadlock (each waiting out deadlock_timeout).
    pg::Conn::Statement lock;
    lock.sql = "SELECT id FROM streams WHERE id = ANY($1) ORDER BY id FOR NO KEY UPDATE";
    lock.params.Int8Array(tx.up_id);
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
    if (!tx.optimistic) return GroupSqlError(tx, replies[k].status());
    for (size_t i : tx.members) tx.outcomes[i].reset();
    if (!conn.Exec("ROLLBACK").ok()) conn.Sever();
    return GroupEnd::kStale;
  }
  if (!replies[w].ok() || !replies[w + 1].ok()) {
    if (conn.broken()) {
      tx.FailWritten(Status::OutcomeUnknown(
          "postgres: connection lost after COMMIT was sent; the append may or may not have been "
          "committed: read its slot to settle it"));
      return GroupEnd::kUnknown;
    }
    // The server answered COMMIT with an error and kept the session: it rolled back.
    if (tx.members.size() == 1) {
      tx.outcomes[tx.members[0]].reset();
      tx.outcomes[tx.members[0]].emplace(replies[w + 1].status());
      return GroupEnd::kDone;
    }
    for (size_t i : tx.members) tx.outcomes[i].reset();
    return GroupEnd::kSqlError;
  }
  if (tx.assign_in_db && !PlaceOffsets(tx, replies[w].value())) return GroupEnd::kDone;
  Committed(tx, std::chrono::steady_clock::now() - sent_at);
  return GroupEnd::kDone;
}

bool PostgresStore::PlaceOffsets(GroupTx& tx, const Rows& rows) {
  // Make the relative offsets absolute: base = the stream's next offset before the group. The
  // statement's check guarantees a row per touched stream.
  std::map<StreamId, std::pair<uint64_t, uint64_t>> placed;  // id -> (base, retained bytes)
  for (int r = 0; r < rows.size(); ++r) {
    placed[static_cast<StreamId>(rows.Int8(r, 0))] = {OffsetFromDb(rows.Int8(r, 1)),
                                                      BitsFromDb(rows.Int8(r, 2))};
  }
  for (auto& [id, st] : tx.streams) {
    if (!st.touched) continue;
    auto p = placed.find(id);
    if (p == placed.end()) {
      tx.FailWritten(Status::Internal(
          "postgres: the append committed but its offsets were not reported; read the "
          "stream's tail to find them"));
      return false;
    }
    st.next += p->second.first;
    st.bytes = p->second.second;
  }
  for (size_t i : tx.written) {
    const uint64_t b = placed.at(tx.group[i].request.stream).first;
    AppendResult& res = tx.results[i];
    if (!tx.group[i].request.records.empty()) {
      res.first_offset += b;
      res.last_offset += b;
    }
    res.next_offset += b;
  }
  return true;
}

void PostgresStore::Committed(GroupTx& tx, std::chrono::steady_clock::duration took) {
  {
    uint64_t records = 0, bytes = 0;
    for (size_t i : tx.written) {
      for (const AppendRecord& r : tx.group[i].request.records) {
        ++records;
        bytes += r.payload.size() + (r.key ? r.key->size() : 0);
      }
    }
    const auto micros = std::chrono::duration_cast<std::chrono::microseconds>(took);
    MutexLock lock(stats_mu_);
    stats_.CountSync(records, bytes, static_cast<uint64_t>(micros.count()));
  }
  for (size_t i : tx.written) tx.outcomes[i].emplace(tx.results[i]);
  tx.committed = true;
  {
    std::vector<std::pair<StreamId, uint64_t>> tails;
    for (const auto& [id, st] : tx.streams) {
      if (st.touched) tails.emplace_back(id, st.next);
    }
    QueueNotify(tails);
  }
  for (const auto& [id, st] : tx.streams) {
    const bool plain = !st.deleted && !st.closed && !st.retention.max_events &&
                       !st.retention.max_age_ms && !st.retention.max_bytes;
    if (plain) {
      CachedStream& c = tx.cache[id];  // keeps optimistic_after
      c.next = st.next;
      c.bytes = st.bytes;
      c.attributes = st.attributes ? *st.attributes : st.stored_attributes;
    } else {
      tx.cache.erase(id);
    }
  }
}

}  // namespace runnel::store
