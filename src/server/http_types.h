// Transport-neutral HTTP request/response values and routing for the protocol layer. The Beast
// adapter (the http_*.cc files) converts to and from these, so protocol code and its tests
// never include Beast.
//
// Thread-safety: plain values.
#ifndef RUNNEL_SERVER_HTTP_TYPES_H_
#define RUNNEL_SERVER_HTTP_TYPES_H_

#include <algorithm>
#include <cstddef>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runnel/types.h"

namespace runnel::server {

// A request's header fields or query parameters: (name, value) pairs, each name once, in the
// order they were first added. A request carries a handful, so a linear search by name costs
// less than a tree's node per field; the interface is the subset of std::map's that callers and
// tests use. Thread-safety: a plain value.
class FieldList {
 public:
  using value_type = std::pair<std::string, std::string>;
  using iterator = std::vector<value_type>::iterator;
  using const_iterator = std::vector<value_type>::const_iterator;

  FieldList() = default;
  FieldList(std::initializer_list<value_type> fields) {
    for (const auto& field : fields) emplace(field.first, field.second);
  }

  iterator begin() { return fields_.begin(); }
  iterator end() { return fields_.end(); }
  const_iterator begin() const { return fields_.begin(); }
  const_iterator end() const { return fields_.end(); }
  size_t size() const { return fields_.size(); }
  bool empty() const { return fields_.empty(); }
  void clear() { fields_.clear(); }
  void Reserve(size_t n) { fields_.reserve(n); }

  iterator find(std::string_view name) { return begin() + Index(name); }
  const_iterator find(std::string_view name) const { return begin() + Index(name); }
  size_t count(std::string_view name) const { return Index(name) < fields_.size() ? 1 : 0; }
  bool contains(std::string_view name) const { return count(name) != 0; }

  // Adds the field unless `name` is there already (as std::map::emplace).
  template <typename Name, typename Value>
  std::pair<iterator, bool> emplace(Name&& name, Value&& value) {
    const size_t i = Index(name);
    if (i < fields_.size()) return {begin() + i, false};
    fields_.emplace_back(std::forward<Name>(name), std::forward<Value>(value));
    return {end() - 1, true};
  }
  std::pair<iterator, bool> insert(value_type field) {
    return emplace(std::move(field.first), std::move(field.second));
  }
  template <typename It>
  void insert(It first, It last) {
    for (; first != last; ++first) emplace(first->first, first->second);
  }
  // The value of `name`, added empty when missing (as std::map::operator[]).
  std::string& operator[](std::string_view name) {
    return emplace(std::string(name), std::string()).first->second;
  }
  size_t erase(std::string_view name) {
    const size_t i = Index(name);
    if (i == fields_.size()) return 0;
    fields_.erase(begin() + i);
    return 1;
  }

  // Appends a field without looking for its name: a parser's fast path, which must call
  // MergeRepeated before anything looks a name up.
  void Append(std::string name, std::string value) {
    fields_.emplace_back(std::move(name), std::move(value));
  }
  // Leaves each name once: the first field of a name keeps its place, and the values of the
  // later ones are joined to its value with ", " (`join`, as for repeated header fields) or
  // dropped (the first query parameter wins). Up to kMergeLinear fields, each is compared with
  // the ones kept before it; beyond that the fields are sorted by name first (stable, so the
  // first of a name stays first), so a request with thousands of fields costs n log n, not n
  // squared.
  void MergeRepeated(bool join);
  static constexpr size_t kMergeLinear = 16;

 private:
  size_t Index(std::string_view name) const {
    size_t i = 0;
    for (; i < fields_.size(); ++i) {
      if (fields_[i].first == name) break;
    }
    return i;
  }

  std::vector<value_type> fields_;
};

struct HttpRequest {
  // Upper-case method: "GET", "PUT", ...
  std::string method;
  // Percent-decoded path, without the query.
  std::string path;
  // Percent-decoded query parameters; the first occurrence of a name wins.
  FieldList query;
  // Header names lower-cased; repeated headers are joined with ", ".
  FieldList headers;
  // The body, moved (never copied) from the parser's buffer; a service may move it out in turn.
  std::string body;

  // The header's value, or nullopt. `name` must be lower-case.
  std::optional<std::string_view> Header(std::string_view name) const;
  std::optional<std::string_view> Query(std::string_view name) const;
};

struct HttpResponse {
  int status = 200;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  // For a HEAD answer whose GET would carry a body not built here (a stream's HEAD): no
  // Content-Length is sent, since one must equal the GET's (RFC 9110, 8.6).
  bool length_unknown = false;

  void Set(std::string name, std::string value) {
    headers.emplace_back(std::move(name), std::move(value));
  }
};

// What a request path addresses.
struct Route {
  enum class Kind { kNotFound, kHealth, kMetrics, kStream, kList, kChannel, kDashboard };
  Kind kind = Kind::kNotFound;
  // For kStream: the scope and stream name. Global streams live under /v1/stream/<name>;
  // tenant streams live under /v1/tenants/<tenant>/stream/<name>; ParseRoute reports that form
  // (and the tenant listing /v1/tenants/<tenant>/streams) only when `allow_tenants`.
  StreamScope scope = StreamScope::Global();
  std::string name;
  // kChannel (/v1/channels/<id>[/keys/<key> | /partitions/<p>], a runnel extension): `name` is
  // the channel id, channel_key the idempotency key of a resolution request, channel_partition
  // the partition of a read.
  std::optional<std::string> channel_key;
  std::optional<std::string> channel_partition;
  // kList (GET /v1/streams or /v1/tenants/<t>/streams, a runnel extension) lists the streams of
  // `scope`.
  // A short label for metrics: "stream", "streams", "healthz", "metrics", "other".
  std::string_view label = "other";
};

// Routes an already percent-decoded path. Stream names keep every byte after the prefix
// (including '/'); an empty name is kNotFound.
Route ParseRoute(std::string_view path, bool allow_tenants = false);

// Decodes %XX escapes (and '+' as space when `plus_is_space`). Returns nullopt on a malformed
// escape.
std::optional<std::string> PercentDecode(std::string_view text, bool plus_is_space);
// ASCII case-insensitive equality (header values such as "true" or "chunked").
bool EqualsIgnoreCase(std::string_view a, std::string_view b);
// `s` without leading and trailing spaces and tabs (HTTP's optional whitespace).
std::string_view TrimBlanks(std::string_view s);

// Percent-encodes every byte but letters, digits and "-._~" (and '/' when `keep_slash`): a
// stream name for a URL path ('/' kept) or a query value ('/' encoded).
std::string PercentEncode(std::string_view text, bool keep_slash);

// The origin form of an absolute-form request target (RFC 9112 3.2.2): for
// "http://host:port/path?q" sets *authority to "host:port" and returns "/path?q" ("/" stands
// for an empty path). Any other target (origin form, "*", no http or https scheme) gives nullopt.
std::optional<std::string> OriginFormOf(std::string_view target, std::string_view* authority);

// Splits "a=1&b=2" into decoded pairs (first occurrence wins), added to *out. Returns false on a
// bad escape.
bool ParseQuery(std::string_view query, FieldList* out);

}  // namespace runnel::server

#endif  // RUNNEL_SERVER_HTTP_TYPES_H_
