// A thin RAII layer over libpq for the PostgreSQL store: one connection, binary parameters and
// binary results, and the mapping of runnel's unsigned 64-bit values onto bigint.
//
// Thread-safety: a Conn is used by one thread at a time (libpq's own rule); Params and Rows are
// values.
#ifndef RUNNEL_STORE_POSTGRES_PG_CONN_H_
#define RUNNEL_STORE_POSTGRES_PG_CONN_H_

#include <libpq-fe.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "runnel/status.h"

namespace runnel::store::pg {

// Offsets: `offset - 2^63` (the sign bit flipped) keeps the unsigned order in a signed bigint.
inline int64_t OffsetToDb(uint64_t offset) {
  return static_cast<int64_t>(offset ^ (uint64_t{1} << 63));
}
inline uint64_t OffsetFromDb(int64_t stored) {
  return static_cast<uint64_t>(stored) ^ (uint64_t{1} << 63);
}
// Values only stored and compared in C++ (timestamps, epochs, caps): the same 64 bits.
inline int64_t BitsToDb(uint64_t v) {
  return static_cast<int64_t>(v);
}
inline uint64_t BitsFromDb(int64_t v) {
  return static_cast<uint64_t>(v);
}

// SQLSTATE codes the store reacts to.
inline constexpr std::string_view kUniqueViolation = "23505";
inline constexpr std::string_view kDeadlockDetected = "40P01";
inline constexpr std::string_view kSerializationFailure = "40001";

// Parameters of one statement, all sent in binary format.
class Params {
 public:
  Params& Int8(int64_t v);
  Params& Bool(bool v);
  Params& Bytes(std::string_view v);  // bytea
  Params& Text(std::string_view v);   // text (must be valid in the database encoding)
  Params& Null(Oid type);
  Params& Int8Array(const std::vector<int64_t>& v);
  Params& BoolArray(const std::vector<bool>& v);
  // Elements may be null (nullopt).
  Params& ByteaArray(const std::vector<std::optional<std::string_view>>& v);
  Params& TextArray(const std::vector<std::string>& v);

  // For statements written as text next to their parameters: binds `v` as the next parameter
  // and returns its placeholder with the cast that keeps it typed ("$3", "$4::bigint[]").
  std::string Bind(int64_t v);
  std::string Bind(const std::vector<int64_t>& v);
  std::string Bind(const std::vector<bool>& v);
  std::string Bind(const std::vector<std::optional<std::string_view>>& v);
  // "unnest(a, b, ...)" of placeholders from Bind. Pass them as one braced list, which binds
  // them in order (the operands of `+` would not be).
  static std::string Unnest(std::initializer_list<std::string> placeholders);

  int size() const { return static_cast<int>(types_.size()); }
  const Oid* types() const { return types_.data(); }
  const int* lengths() const { return lengths_.data(); }
  const int* formats() const { return formats_.data(); }
  // Pointers into this object; valid while it is neither modified nor destroyed.
  std::vector<const char*> Values() const;

 private:
  void Add(Oid type, std::string bytes);
  std::deque<std::string> storage_;
  std::vector<Oid> types_;
  std::vector<bool> null_;
  std::vector<int> lengths_;
  std::vector<int> formats_;
};

struct ResultDeleter {
  void operator()(PGresult* r) const { PQclear(r); }
};
using ResultPtr = std::unique_ptr<PGresult, ResultDeleter>;

// The rows of a successful statement, read in binary format.
class Rows {
 public:
  Rows() = default;
  explicit Rows(ResultPtr result) : result_(std::move(result)) {}
  int size() const { return result_ ? PQntuples(result_.get()) : 0; }
  bool IsNull(int row, int col) const { return PQgetisnull(result_.get(), row, col) != 0; }
  int64_t Int8(int row, int col) const;
  int32_t Int4(int row, int col) const;
  bool Bool(int row, int col) const;
  std::string_view Bytes(int row, int col) const;
  std::optional<int64_t> OptInt8(int row, int col) const {
    return IsNull(row, col) ? std::nullopt : std::optional<int64_t>(Int8(row, col));
  }
  // Rows affected by an INSERT/UPDATE/DELETE without RETURNING.
  uint64_t Affected() const;

 private:
  ResultPtr result_;
};

// One libpq connection. Every failure returns a Status: kUnavailable when the connection is
// lost (broken() is then true and the Conn must be discarded), kInternal for SQL errors (the
// caller decides what e.g. a unique violation means; see last_sqlstate()).
class Conn {
 public:
  // Connects with `conninfo` (URL or key=value string), sets statement_timeout, search_path to
  // `schema` and silences notices. Every reply is awaited at most `reply_timeout`: a server
  // that stops answering without closing the connection (a stopped host, a hung process) is
  // not waited for longer; the connection is then severed (kUnavailable, broken()), as when it
  // is lost. 0 waits as long as the server takes.
  static Result<std::unique_ptr<Conn>> Connect(const std::string& conninfo,
                                               const std::string& schema,
                                               std::chrono::milliseconds connect_timeout,
                                               std::chrono::milliseconds statement_timeout,
                                               std::chrono::milliseconds reply_timeout);
  ~Conn();
  Conn(const Conn&) = delete;
  Conn& operator=(const Conn&) = delete;

  Result<Rows> Exec(std::string_view sql, const Params& params = Params());
  // A statement of a pipeline.
  struct Statement {
    std::string sql;
    Params params;
  };
  // Sends every statement in one pipeline (one round trip), calls `after_send` once they are
  // on the wire, then reads one outcome per statement. A statement after a failed one is not
  // run and reports kInternal ("skipped after an earlier error"). When the connection is lost, the
  // statements without a reply report kUnavailable and broken() is true.
  std::vector<Result<Rows>> Pipeline(const std::vector<Statement>& statements,
                                     const std::function<void()>& after_send = {});

  bool broken() const { return PQstatus(conn_) == CONNECTION_BAD || severed_; }
  int backend_pid() const { return PQbackendPID(conn_); }
  int socket() const { return PQsocket(conn_); }
  // The SQLSTATE of the last failed statement, empty after a success or a lost connection.
  const std::string& last_sqlstate() const { return last_sqlstate_; }
  // For a connection with nothing outstanding: true when the server closed it or sent anything
  // meanwhile (an idle session expects nothing, so data means a FATAL termination notice or
  // EOF). Never blocks.
  bool IdleButDead();
  // Shuts the socket down as a network failure would; every later call fails with kUnavailable.
  void Sever();
  PGconn* raw() { return conn_; }

 private:
  Conn(PGconn* conn, std::chrono::milliseconds reply_timeout)
      : conn_(conn), reply_timeout_(reply_timeout) {}
  Result<Rows> Collect(PGresult* first);
  // PQgetResult, waiting for the reply at most reply_timeout_ (from `deadline`, when set); on
  // timeout the connection is severed and null returned.
  PGresult* NextResult(std::chrono::steady_clock::time_point deadline);
  std::chrono::steady_clock::time_point ReplyDeadline() const;
  // The result of one command sent with PQsend*: its first result, the rest drained. Null when
  // the connection is lost or the reply did not come in time.
  PGresult* AwaitOne();
  // The name of the server-side prepared statement for `sql`, preparing it on first use (the
  // store's statements come in a small fixed set of shapes, each always with the same
  // parameter types, so they are parsed and planned once per connection).
  Result<std::string> Prepared(const std::string& sql, const Params& params);
  std::unordered_map<std::string, std::string> prepared_;
  PGconn* conn_;
  const std::chrono::milliseconds reply_timeout_;
  bool severed_ = false;
  bool timed_out_ = false;  // severed because a reply did not come within reply_timeout_
  std::string last_sqlstate_;
};

// Quotes an identifier for SQL text ("name" with quotes doubled).
std::string QuoteIdent(std::string_view ident);

}  // namespace runnel::store::pg

#endif  // RUNNEL_STORE_POSTGRES_PG_CONN_H_
