// Transport-neutral HTTP request/response values and routing for the protocol layer. The Beast
// adapter (the http_*.cc files) converts to and from these, so protocol code and its tests
// never include Beast.
//
// Thread-safety: plain values.
#ifndef RUNNEL_SERVER_HTTP_TYPES_H_
#define RUNNEL_SERVER_HTTP_TYPES_H_

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runnel/types.h"

namespace runnel::server {

struct HttpRequest {
  // Upper-case method: "GET", "PUT", ...
  std::string method;
  // Percent-decoded path, without the query.
  std::string path;
  // Percent-decoded query parameters; the first occurrence of a name wins.
  // (std::less<>: looked up by string_view, without building a string.)
  std::map<std::string, std::string, std::less<>> query;
  // Header names lower-cased; repeated headers are joined with ", ".
  std::map<std::string, std::string, std::less<>> headers;
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

// Splits "a=1&b=2" into decoded pairs (first occurrence wins). Returns false on a bad escape.
bool ParseQuery(std::string_view query, std::map<std::string, std::string, std::less<>>* out);

}  // namespace runnel::server

#endif  // RUNNEL_SERVER_HTTP_TYPES_H_
