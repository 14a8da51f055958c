// The client commands on streams: create, append, read, ls, describe, compact, rm, close,
// retention.
#include "cli/client_internal.h"

#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "base/utf8.h"
#include "cli/client_commands.h"
#include "cli/http_client.h"
#include "cli/numbers.h"
#include "cli/terminal_text.h"
#include "server/offset_token.h"
#include "server/sse_format.h"

namespace runnel::cli {

using client_internal::Common;

namespace {

using json = nlohmann::json;

std::string ScopePrefix(const Common& c) {
  return c.tenant.empty() ? "/v1/" : "/v1/tenants/" + UrlEncode(c.tenant, false) + "/";
}

std::string StreamTarget(const Common& c, const std::string& name) {
  return ScopePrefix(c) + "stream/" + UrlEncode(name, true);
}

// Prints the error of a failed response about stream `name` and returns its exit code.
// `extra` adds fields to the --json error object.
int Fail(const std::string& what, const std::string& name, const ClientResponse& r,
         bool json_output, const json& extra = json::object()) {
  return ReportHttpFailure(what, "stream", name, r, json_output, extra);
}

int FailStatus(const Status& status) {
  return ReportClientFailure(status);
}

// The stream's content type for `-t`: the short names json, text and bytes, or a media type.
std::string ContentTypeArg(const std::string& text) {
  if (text == "json") return "application/json";
  if (text == "text") return "text/plain";
  if (text == "bytes" || text == "binary") return "application/octet-stream";
  return text;
}

// The retention caps a HEAD answer states (decimal digits; anything else is left out).
json RetentionOf(const ClientResponse& r) {
  json retention = json::object();
  for (const auto& [header, key] : {std::pair{"stream-retention-max-events", "max_events"},
                                    std::pair{"stream-retention-max-age-ms", "max_age_ms"},
                                    std::pair{"stream-retention-max-bytes", "max_bytes"}}) {
    const std::string v = r.Header(header);
    if (v.empty() || v.size() > 19 || v.find_first_not_of("0123456789") != std::string::npos) {
      continue;
    }
    retention[key] = std::stoull(v);
  }
  return retention;
}

std::string RetentionText(const json& retention) {
  std::string text;
  for (auto& [k, v] : retention.items()) text += (text.empty() ? "" : " ") + k + "=" + v.dump();
  return text.empty() ? "none" : text;
}

bool IsTerminal(FILE* f) {
  return ::isatty(::fileno(f)) == 1;
}

std::string StreamContentType(const Common& c, const HttpClient& client, const std::string& name,
                              const std::string& what, int* exit_code, bool json_output) {
  auto r = client.Send("HEAD", StreamTarget(c, name), {});
  if (!r.ok()) {
    *exit_code = FailStatus(r.status());
    return {};
  }
  if (r->status != 200) {
    *exit_code = Fail(what, name, *r, json_output);
    return {};
  }
  return r->Header("content-type");
}

// The messages of an append without DATA arguments: `file` ('-' or empty: stdin) as one message,
// or with `lines` each non-empty line of it. kExitUsage (after saying why) when it cannot be read.
int ReadMessages(const std::string& file, bool lines, std::vector<std::string>* bodies) {
  std::string input;
  if (!file.empty() && file != "-") {
    std::error_code ec;
    if (std::filesystem::is_directory(file, ec)) {
      std::fprintf(stderr, "runnel: cannot read %s: it is a directory\n",
                   TerminalSafe(file).c_str());
      return kExitUsage;
    }
    std::ifstream in(file, std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "runnel: cannot read %s\n", TerminalSafe(file).c_str());
      return kExitUsage;
    }
    input.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  } else {
    input.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  }
  if (lines) {
    std::istringstream in(input);
    std::string line;
    while (std::getline(in, line)) {
      if (!line.empty()) bodies->push_back(line);
    }
  } else if (!input.empty()) {
    bodies->push_back(std::move(input));
  }
  return kExitOk;
}

}  // namespace

namespace client_internal {

int Create(const Common& c, const std::string& name, const std::string& content_type,
           const std::string& ttl, const std::string& expires_at, bool closed,
           const RetentionArgs& retention, const std::string& body, const std::string& compaction,
           const std::string& tombstone_ms) {
  auto client = HttpClient::Create(c.url, c.token, c.cacert);
  if (!client.ok()) return FailStatus(client.status());
  std::vector<std::pair<std::string, std::string>> headers = {
      {"Content-Type", ContentTypeArg(content_type)}};
  if (!compaction.empty()) headers.emplace_back("Stream-Compaction", compaction);
  if (!tombstone_ms.empty()) headers.emplace_back("Stream-Compaction-Tombstone-Ms", tombstone_ms);
  if (!ttl.empty()) headers.emplace_back("Stream-TTL", ttl);
  if (!expires_at.empty()) headers.emplace_back("Stream-Expires-At", expires_at);
  if (closed) headers.emplace_back("Stream-Closed", "true");
  retention.AddHeaders(&headers);
  auto r = client->Send("PUT", StreamTarget(c, name), headers, body);
  if (!r.ok()) return FailStatus(r.status());
  if (r->status != 200 && r->status != 201) return Fail("create", name, *r, c.json_output);
  if (c.json_output) {
    std::printf("%s\n", json({{"ok", true},
                              {"created", r->status == 201},
                              {"name", name},
                              {"next_offset", r->Header("stream-next-offset")}})
                            .dump()
                            .c_str());
  } else {
    std::printf("%s %s\n", r->status == 201 ? "created" : "exists", TerminalSafe(name).c_str());
  }
  return kExitOk;
}

int Append(const Common& c, const std::string& name, const std::vector<std::string>& data,
           const std::string& file, bool lines, std::string content_type, bool close) {
  auto client = HttpClient::Create(c.url, c.token, c.cacert);
  if (!client.ok()) return FailStatus(client.status());
  if (content_type.empty()) {
    int code = kExitOk;
    content_type = StreamContentType(c, *client, name, "append", &code, c.json_output);
    if (code != kExitOk) return code;
  } else {
    content_type = ContentTypeArg(content_type);
  }
  std::vector<std::string> bodies = data;
  if (bodies.empty()) {
    if (int code = ReadMessages(file, lines, &bodies); code != kExitOk) return code;
  }
  if (bodies.empty() && !close) {
    std::fprintf(stderr, "runnel: nothing to append\n");
    return kExitUsage;
  }
  const bool progress = IsTerminal(stderr) && bodies.size() > 100 && !c.json_output;
  std::string next_offset;
  size_t bytes = 0;
  for (size_t i = 0; i < bodies.size() || (i == 0 && close); ++i) {
    const bool last = i + 1 >= bodies.size();
    std::vector<std::pair<std::string, std::string>> headers = {{"Content-Type", content_type}};
    if (close && last) headers.emplace_back("Stream-Closed", "true");
    std::string body = i < bodies.size() ? bodies[i] : std::string();
    auto r = client->Send("POST", StreamTarget(c, name), headers, body);
    // Messages before this one are in the stream: a failure says how many.
    const std::string done_before =
        i == 0 ? std::string() : " (" + std::to_string(i) + " appended before it)";
    if (!r.ok()) {
      if (i > 0)
        std::fprintf(stderr, "runnel: message %zu of %zu%s\n", i + 1, bodies.size(),
                     done_before.c_str());
      return FailStatus(r.status());
    }
    if (r->status != 200 && r->status != 204) {
      return Fail(i == 0 ? std::string("append")
                         : "append of message " + std::to_string(i + 1) + " of " +
                               std::to_string(bodies.size()) + done_before,
                  name, *r, c.json_output, {{"appended", i}});
    }
    next_offset = r->Header("stream-next-offset");
    bytes += body.size();
    if (progress && (i % 100 == 0 || last)) {
      std::fprintf(stderr, "\rappended %zu/%zu (%zu bytes)", i + 1, bodies.size(), bytes);
    }
    if (bodies.empty()) break;
  }
  if (progress) std::fprintf(stderr, "\n");
  if (c.json_output) {
    std::printf("%s\n", json({{"ok", true},
                              {"appended", bodies.size()},
                              {"bytes", bytes},
                              {"next_offset", next_offset},
                              {"closed", close}})
                            .dump()
                            .c_str());
  } else {
    std::printf("next offset %s\n", TerminalSafe(next_offset).c_str());
  }
  return kExitOk;
}

// Reads from `offset` until caught up (or forever when `follow`), writing data to stdout.
int Read(const Common& c, const std::string& name, std::string offset, bool follow) {
  auto client = HttpClient::Create(c.url, c.token, c.cacert);
  if (!client.ok()) return FailStatus(client.status());
  auto query = OffsetQueryArg(offset);
  if (!query.ok()) return FailStatus(query.status());
  offset = *query;
  if (offset == "now") {
    // The tail's own token, so that every --json line names a real offset.
    auto r = client->Send("HEAD", StreamTarget(c, name), {});
    if (!r.ok()) return FailStatus(r.status());
    if (r->status != 200) return Fail(follow ? "tail" : "read", name, *r, c.json_output);
    if (!r->Header("stream-next-offset").empty()) offset = r->Header("stream-next-offset");
  }
  std::string cursor;
  bool printed = false;  // with --json: whether a line went out
  for (;;) {
    std::string target = StreamTarget(c, name) + "?offset=" + UrlEncode(offset, false);
    if (follow) target += "&live=long-poll";
    if (!cursor.empty()) target += "&cursor=" + UrlEncode(cursor, false);
    auto r = client->Send("GET", target, {});
    if (!r.ok()) return FailStatus(r.status());
    if (r->status != 200 && r->status != 204) {
      return Fail(follow ? "tail" : "read", name, *r, c.json_output);
    }
    std::string next = r->Header("stream-next-offset");
    bool closed = r->Header("stream-closed") == "true";
    bool up_to_date = r->Header("stream-up-to-date") == "true";
    cursor = r->Header("stream-cursor");
    const bool json_stream = r->Header("content-type").find("json") != std::string::npos;
    // Nothing read at all (an empty stream, or at the tail): one line still says where the
    // stream stands.
    const bool last_chance = !printed && (closed || (!follow && up_to_date));
    if (c.json_output &&
        ((r->status == 200 && !r->body.empty() && r->body != "[]") || last_chance)) {
      json line = {{"offset", offset}, {"next_offset", next.empty() ? offset : next}};
      auto parsed = json_stream && r->status == 200 ? json::parse(r->body, nullptr, false) : json();
      if (!parsed.is_discarded() && !parsed.is_null()) {
        line["messages"] = parsed;
      } else if (json_stream && r->body.empty()) {
        line["messages"] = json::array();
      } else if (IsValidUtf8(r->body)) {
        line["data"] = r->status == 200 ? r->body : std::string();
      } else {
        // JSON strings hold text only: bytes that are not UTF-8 travel as base64.
        line["data_base64"] = server::Base64Encode(r->body);
      }
      std::printf("%s\n", line.dump(-1, ' ', false, json::error_handler_t::replace).c_str());
      printed = true;
    } else if (!c.json_output && r->status == 200) {
      if (r->Header("content-type").find("application/json") != std::string::npos) {
        auto parsed = json::parse(r->body, nullptr, false);
        if (parsed.is_array()) {
          for (const auto& m : parsed) std::printf("%s\n", m.dump().c_str());
        }
      } else {
        std::fwrite(r->body.data(), 1, r->body.size(), stdout);
      }
    }
    std::fflush(stdout);
    if (!next.empty()) offset = next;
    if (closed) break;
    if (!follow && up_to_date) break;
  }
  return kExitOk;
}

int List(const Common& c, const std::string& prefix) {
  auto client = HttpClient::Create(c.url, c.token, c.cacert);
  if (!client.ok()) return FailStatus(client.status());
  std::string after;
  json all = json::array();
  bool listed_any = false;
  for (;;) {
    std::string target = ScopePrefix(c) + "streams?prefix=" + UrlEncode(prefix, false);
    if (!after.empty()) target += "&after=" + UrlEncode(after, false);
    auto r = client->Send("GET", target, {});
    if (!r.ok()) return FailStatus(r.status());
    if (r->status != 200) return Fail("ls", "", *r, c.json_output);
    auto body = json::parse(r->body, nullptr, false);
    if (!body.is_object()) {
      std::fprintf(stderr, "runnel: ls: the server sent no stream list\n");
      return kExitFailure;
    }
    for (auto& s : body["streams"]) {
      listed_any = true;
      if (c.json_output) {
        all.push_back(s);
      } else {
        // One line per stream, its cells separated by tabs: no cell may hold a tab or a line
        // break of its own.
        std::printf("%s\t%s\t%s%s\n", TerminalSafe(s.value("name", "")).c_str(),
                    TerminalSafe(s.value("content_type", "")).c_str(),
                    TerminalSafe(s.value("next_offset", "")).c_str(),
                    s.value("closed", false) ? "\tclosed" : "");
      }
    }
    if (!body.contains("next_after")) break;
    after = body["next_after"].get<std::string>();
  }
  if (c.json_output) {
    std::printf("%s\n", all.dump().c_str());
  } else if (!listed_any) {
    // On stderr, so that a script reading the list still reads an empty one.
    std::string what = "runnel: no streams";
    if (!prefix.empty()) what += " with the prefix '" + TerminalSafe(prefix) + "'";
    if (!c.tenant.empty()) what += " in tenant '" + TerminalSafe(c.tenant) + "'";
    std::fprintf(stderr, "%s\n", what.c_str());
  }
  return kExitOk;
}

int Describe(const Common& c, const std::string& name) {
  auto client = HttpClient::Create(c.url, c.token, c.cacert);
  if (!client.ok()) return FailStatus(client.status());
  auto r = client->Send("HEAD", StreamTarget(c, name), {});
  if (!r.ok()) return FailStatus(r.status());
  if (r->status != 200) return Fail("describe", name, *r, c.json_output);
  json d = {{"name", name},
            {"content_type", r->Header("content-type")},
            {"next_offset", r->Header("stream-next-offset")},
            {"closed", r->Header("stream-closed") == "true"}};
  if (!r->Header("stream-ttl").empty()) d["ttl_seconds"] = r->Header("stream-ttl");
  if (!r->Header("stream-expires-at").empty()) d["expires_at"] = r->Header("stream-expires-at");
  // Retention caps, as the server states them.
  json retention = RetentionOf(*r);
  if (!retention.empty()) d["retention"] = retention;
  if (!r->Header("stream-compaction").empty()) {
    d["compaction"] = r->Header("stream-compaction");
    d["tombstone_ms"] = r->Header("stream-compaction-tombstone-ms");
    if (!r->Header("stream-compaction-horizon").empty()) {
      d["horizon"] = r->Header("stream-compaction-horizon");
    }
  }
  // The counts are in the listing, not in HEAD's headers: the stream is the listing's first
  // entry with its own name as the prefix. A listing the server refuses leaves them out.
  auto listed =
      client->Send("GET", ScopePrefix(c) + "streams?limit=1&prefix=" + UrlEncode(name, false), {});
  if (listed.ok() && listed->status == 200) {
    auto body = json::parse(listed->body, nullptr, false);
    if (body.is_object() && body["streams"].is_array() && !body["streams"].empty() &&
        body["streams"][0].value("name", "") == name) {
      const json& s = body["streams"][0];
      for (const char* key : {"event_count", "retained_bytes"}) {
        if (s.contains(key) && s[key].is_number_unsigned()) d[key] = s[key];
      }
    }
  }
  if (c.json_output) {
    std::printf("%s\n", d.dump().c_str());
  } else {
    for (auto& [key, value] : d.items()) {
      std::string text;
      if (value.is_string()) {
        text = value.get<std::string>();
      } else if (value.is_object()) {
        text = RetentionText(value);
      } else {
        text = value.dump();
      }
      std::printf("%-15s %s\n", (key + ":").c_str(), TerminalSafe(text).c_str());
    }
  }
  return kExitOk;
}

int Compact(const Common& c, const std::string& name) {
  auto client = HttpClient::Create(c.url, c.token, c.cacert);
  if (!client.ok()) return FailStatus(client.status());
  auto r = client->Send("POST", StreamTarget(c, name) + "?compact", {});
  if (!r.ok()) return FailStatus(r.status());
  if (r->status != 200) return Fail("compact", name, *r, c.json_output);
  auto body = json::parse(r->body, nullptr, false);
  if (c.json_output || !body.is_object()) {
    std::printf("%s\n", r->body.c_str());
    return kExitOk;
  }
  std::printf(
      "compacted %s through %s: dropped %s records (%s bytes, %s tombstones) of %s, "
      "kept %s; horizon %s\n",
      TerminalSafe(name).c_str(), body.value("compacted_through", "").c_str(),
      body["dropped_records"].dump().c_str(), body["dropped_bytes"].dump().c_str(),
      body["dropped_tombstones"].dump().c_str(), body["scanned_records"].dump().c_str(),
      body["kept_records"].dump().c_str(), body.value("horizon", "").c_str());
  return kExitOk;
}

int Remove(const Common& c, const std::string& name) {
  auto client = HttpClient::Create(c.url, c.token, c.cacert);
  if (!client.ok()) return FailStatus(client.status());
  auto r = client->Send("DELETE", StreamTarget(c, name), {});
  if (!r.ok()) return FailStatus(r.status());
  if (r->status != 204 && r->status != 200) return Fail("rm", name, *r, c.json_output);
  if (c.json_output) {
    std::printf("%s\n", json({{"ok", true}, {"deleted", name}}).dump().c_str());
  } else {
    std::printf("deleted %s\n", TerminalSafe(name).c_str());
  }
  return kExitOk;
}

// Closes a stream: an append of nothing that sets Stream-Closed. Closing a closed stream is
// accepted and changes nothing.
int Close(const Common& c, const std::string& name) {
  auto client = HttpClient::Create(c.url, c.token, c.cacert);
  if (!client.ok()) return FailStatus(client.status());
  auto r = client->Send("POST", StreamTarget(c, name), {{"Stream-Closed", "true"}});
  if (!r.ok()) return FailStatus(r.status());
  if (r->status != 204 && r->status != 200) return Fail("close", name, *r, c.json_output);
  const std::string next = r->Header("stream-next-offset");
  if (c.json_output) {
    std::printf("%s\n",
                json({{"ok", true}, {"closed", name}, {"next_offset", next}}).dump().c_str());
  } else {
    std::printf("closed %s at %s\n", TerminalSafe(name).c_str(), TerminalSafe(next).c_str());
  }
  return kExitOk;
}

// Replaces a stream's retention caps (PATCH): the caps given are set, the others cleared;
// `none` clears them all.
int Retention(const Common& c, const std::string& name, const RetentionArgs& retention, bool none) {
  if (none == retention.Any()) {
    std::fprintf(stderr,
                 "runnel: retention: give --max-events, --max-age-ms and/or --max-bytes, or "
                 "--none\n");
    return kExitUsage;
  }
  auto client = HttpClient::Create(c.url, c.token, c.cacert);
  if (!client.ok()) return FailStatus(client.status());
  std::vector<std::pair<std::string, std::string>> headers;
  if (none) headers.emplace_back("Stream-Retention", "none");
  retention.AddHeaders(&headers);
  auto r = client->Send("PATCH", StreamTarget(c, name), headers);
  if (!r.ok()) return FailStatus(r.status());
  if (r->status != 204 && r->status != 200) return Fail("retention", name, *r, c.json_output);
  // What the server now holds, as HEAD states it.
  auto head = client->Send("HEAD", StreamTarget(c, name), {});
  if (!head.ok()) return FailStatus(head.status());
  if (head->status != 200) return Fail("retention", name, *head, c.json_output);
  const json now = RetentionOf(*head);
  if (c.json_output) {
    std::printf("%s\n", json({{"ok", true}, {"name", name}, {"retention", now}}).dump().c_str());
  } else {
    std::printf("retention of %s: %s\n", TerminalSafe(name).c_str(),
                TerminalSafe(RetentionText(now)).c_str());
  }
  return kExitOk;
}

}  // namespace client_internal

}  // namespace runnel::cli
