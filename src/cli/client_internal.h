// What the client commands' files share (client_commands.cc: registration, exit codes, offsets,
// argument escapes; stream_cmd.cc: the commands on streams). Internal to the CLI.
#ifndef RUNNEL_CLI_CLIENT_INTERNAL_H_
#define RUNNEL_CLI_CLIENT_INTERNAL_H_

#include <string>
#include <utility>
#include <vector>

namespace runnel::cli::client_internal {

// The options every client command takes.
struct Common {
  std::string url = "http://127.0.0.1:4437";
  std::string token;
  // PEM file of certificates to trust for an https:// server (empty: the system's).
  std::string cacert;
  // Empty: the global scope (/v1/stream/...); else /v1/tenants/<tenant>/stream/...
  std::string tenant;
  bool json_output = false;
};

// The retention caps a create or `runnel retention` sets, as the server's headers.
struct RetentionArgs {
  std::string max_events, max_age_ms, max_bytes;

  bool Any() const { return !max_events.empty() || !max_age_ms.empty() || !max_bytes.empty(); }
  void AddHeaders(std::vector<std::pair<std::string, std::string>>* headers) const {
    if (!max_events.empty()) headers->emplace_back("Stream-Retention-Max-Events", max_events);
    if (!max_age_ms.empty()) headers->emplace_back("Stream-Retention-Max-Age-Ms", max_age_ms);
    if (!max_bytes.empty()) headers->emplace_back("Stream-Retention-Max-Bytes", max_bytes);
  }
};

int Create(const Common& c, const std::string& name, const std::string& content_type,
           const std::string& ttl, const std::string& expires_at, bool closed,
           const RetentionArgs& retention, const std::string& body, const std::string& compaction,
           const std::string& tombstone_ms);

int Append(const Common& c, const std::string& name, const std::vector<std::string>& data,
           const std::string& file, bool lines, std::string content_type, bool close);

// Reads from `offset` until caught up (or forever when `follow`), writing data to stdout.
int Read(const Common& c, const std::string& name, std::string offset, bool follow);

int List(const Common& c, const std::string& prefix);

int Describe(const Common& c, const std::string& name);

int Compact(const Common& c, const std::string& name);

int Remove(const Common& c, const std::string& name);

// Closes a stream: an append of nothing that sets Stream-Closed. Closing a closed stream is
// accepted and changes nothing.
int Close(const Common& c, const std::string& name);

// Replaces a stream's retention caps (PATCH): the caps given are set, the others cleared;
// `none` clears them all.
int Retention(const Common& c, const std::string& name, const RetentionArgs& retention, bool none);

}  // namespace runnel::cli::client_internal

#endif  // RUNNEL_CLI_CLIENT_INTERNAL_H_
