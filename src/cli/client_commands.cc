#include "cli/client_commands.h"

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
#include "cli/client_internal.h"
#include "cli/http_client.h"
#include "cli/numbers.h"
#include "cli/terminal_text.h"
#include "server/offset_token.h"
#include "server/sse_format.h"

namespace runnel::cli {

using client_internal::Append;
using client_internal::Close;
using client_internal::Common;
using client_internal::Compact;
using client_internal::Create;
using client_internal::Describe;
using client_internal::List;
using client_internal::Read;
using client_internal::Remove;
using client_internal::Retention;
using client_internal::RetentionArgs;

namespace {

using json = nlohmann::json;

constexpr char kArgEscape = '\x01';

// Undoes ParseableArgs' escape.
void Unescape(std::string* s) {
  if (!s->empty() && s->front() == kArgEscape) s->erase(0, 1);
}

void AddCommon(CLI::App* cmd, Common* common) {
  cmd->add_option("--url", common->url, "Server URL")->envname("RUNNEL_URL")->capture_default_str();
  cmd->add_option("--token", common->token, "Bearer token for the server")->envname("RUNNEL_TOKEN");
  cmd->add_option("--cacert", common->cacert, "PEM certificates to trust for an https:// URL")
      ->envname("RUNNEL_CACERT");
  cmd->add_option("--tenant", common->tenant, "The tenant scope (default: the global scope)")
      ->envname("RUNNEL_TENANT");
  cmd->add_flag("--json", common->json_output, "Machine-readable JSON output");
}

void AddRetentionOptions(CLI::App* cmd, RetentionArgs* r) {
  cmd->add_option("--max-events", r->max_events, "Keep at most this many records")
      ->check(Unsigned());
  cmd->add_option("--max-age-ms", r->max_age_ms, "Drop records older than this (milliseconds)")
      ->check(Unsigned());
  cmd->add_option("--max-bytes", r->max_bytes, "Keep at most this many bytes of records")
      ->check(Unsigned());
}

// The help of the read commands' --offset.
constexpr const char* kOffsetHelp =
    "Read the records after this offset: a record number N (after record N; 0 is the "
    "beginning), an offset token as the server gives them, -1 (the oldest retained record) or "
    "now (the tail)";

void AddCreateCommand(CLI::App& app) {
  struct Args {
    Common common;
    std::string name, content_type = "json", ttl, expires_at, body;
    std::string compaction, tombstone_ms;
    bool closed = false;
    RetentionArgs retention;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = app.add_subcommand(
      "create",
      "Create a stream (idempotent). A JSON stream by default: each append is one or more JSON "
      "messages, and reads give them back one per line");
  AddCommon(cmd, &a->common);
  cmd->add_option("name", a->name, "Stream name")->required();
  cmd->add_option("-t,--content-type", a->content_type,
                  "Content type: json, text, bytes, or any media type")
      ->capture_default_str();
  cmd->add_option("--ttl", a->ttl, "Sliding time-to-live in seconds");
  cmd->add_option("--expires-at", a->expires_at, "Absolute expiry (RFC 3339)");
  cmd->add_option("--initial", a->body, "Initial content");
  cmd->add_flag("--closed", a->closed, "Create the stream closed");
  AddRetentionOptions(cmd, &a->retention);
  cmd->add_option("--compaction", a->compaction,
                  "Keyed compaction: 'state' (State Protocol messages; JSON)");
  cmd->add_option("--tombstone-ms", a->tombstone_ms,
                  "With --compaction: how long deletes are kept (default 24 h)");
  cmd->callback([a] {
    std::exit(Create(a->common, a->name, a->content_type, a->ttl, a->expires_at, a->closed,
                     a->retention, a->body, a->compaction, a->tombstone_ms));
  });
}

void AddCloseCommand(CLI::App& app) {
  struct Args {
    Common common;
    std::string name;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("close", "Close a stream: no append is accepted after it");
  AddCommon(cmd, &a->common);
  cmd->add_option("name", a->name, "Stream name")->required();
  cmd->callback([a] { std::exit(Close(a->common, a->name)); });
}

void AddRetentionCommand(CLI::App& app) {
  struct Args {
    Common common;
    std::string name;
    RetentionArgs retention;
    bool none = false;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = app.add_subcommand(
      "retention", "Replace a stream's retention caps: those given are set, the others cleared");
  AddCommon(cmd, &a->common);
  cmd->add_option("name", a->name, "Stream name")->required();
  AddRetentionOptions(cmd, &a->retention);
  cmd->add_flag("--none", a->none, "Clear every cap: keep every record");
  cmd->callback([a] { std::exit(Retention(a->common, a->name, a->retention, a->none)); });
}

void AddAppendCommand(CLI::App& app) {
  struct Args {
    Common common;
    std::string name, file, content_type;
    std::vector<std::string> data;
    bool lines = false, close = false;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = app.add_subcommand(
      "append", "Append to a stream: each DATA argument, or stdin / --file as one message");
  AddCommon(cmd, &a->common);
  cmd->add_option("name", a->name, "Stream name")->required();
  // Sent byte for byte: see ParseableArgs for the escaping that keeps CLI11 from splitting.
  cmd->add_option("data", a->data, "Messages to append (one append each), sent byte for byte");
  cmd->add_option("-f,--file", a->file, "Read the message from a file ('-' for stdin)");
  cmd->add_flag("--lines", a->lines, "Append each non-empty input line as its own message");
  cmd->add_option("-t,--content-type", a->content_type, "Content type (default: the stream's own)");
  cmd->add_flag("--close", a->close, "Close the stream with the last append");
  cmd->callback([a] {
    for (std::string* s : {&a->name, &a->file, &a->content_type, &a->common.url, &a->common.token,
                           &a->common.cacert, &a->common.tenant}) {
      Unescape(s);
    }
    for (std::string& d : a->data) Unescape(&d);
    if (!a->data.empty() && !a->file.empty()) {
      std::fprintf(stderr, "runnel: give DATA arguments or --file, not both\n");
      std::exit(kExitUsage);
    }
    std::exit(Append(a->common, a->name, a->data, a->file, a->lines, a->content_type, a->close));
  });
}

void AddReadCommand(CLI::App& app) {
  struct Args {
    Common common;
    std::string name, offset = "-1";
  };
  auto a = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("read", "Read a stream from an offset until caught up");
  AddCommon(cmd, &a->common);
  cmd->add_option("name", a->name, "Stream name")->required();
  cmd->add_option("-o,--offset", a->offset, kOffsetHelp)->capture_default_str();
  cmd->callback([a] { std::exit(Read(a->common, a->name, a->offset, /*follow=*/false)); });
}

void AddTailCommand(CLI::App& app) {
  struct Args {
    Common common;
    std::string name, offset = "now";
  };
  auto a = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("tail", "Follow a stream live (until it closes or Ctrl-C)");
  AddCommon(cmd, &a->common);
  cmd->add_option("name", a->name, "Stream name")->required();
  cmd->add_option("-o,--offset", a->offset, kOffsetHelp)->capture_default_str();
  cmd->callback([a] { std::exit(Read(a->common, a->name, a->offset, /*follow=*/true)); });
}

void AddListCommand(CLI::App& app) {
  struct Args {
    Common common;
    std::string prefix;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("ls", "List streams");
  AddCommon(cmd, &a->common);
  cmd->add_option("prefix", a->prefix, "Only names starting with this");
  cmd->callback([a] { std::exit(List(a->common, a->prefix)); });
}

void AddDescribeCommand(CLI::App& app) {
  struct Args {
    Common common;
    std::string name;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("describe", "Show a stream's metadata");
  AddCommon(cmd, &a->common);
  cmd->add_option("name", a->name, "Stream name")->required();
  cmd->callback([a] { std::exit(Describe(a->common, a->name)); });
}

void AddRemoveCommand(CLI::App& app) {
  struct Args {
    Common common;
    std::string name;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("rm", "Delete a stream");
  AddCommon(cmd, &a->common);
  cmd->add_option("name", a->name, "Stream name")->required();
  cmd->callback([a] { std::exit(Remove(a->common, a->name)); });
}

void AddCompactCommand(CLI::App& app) {
  struct Args {
    Common common;
    std::string name;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = app.add_subcommand(
      "compact", "Compact a State Protocol stream now; waits and prints what it reclaimed");
  AddCommon(cmd, &a->common);
  cmd->add_option("name", a->name, "Stream name")->required();
  cmd->callback([a] { std::exit(Compact(a->common, a->name)); });
}

}  // namespace

Result<uint64_t> OffsetPositionArg(std::string_view text) {
  if (!text.empty() && text.find_first_not_of("0123456789") == text.npos) {
    uint64_t n = 0;
    bool overflow = false;
    for (char ch : text) {
      const uint64_t digit = static_cast<uint64_t>(ch - '0');
      if (n > (UINT64_MAX - digit) / 10) {
        overflow = true;
        break;
      }
      n = n * 10 + digit;
    }
    if (!overflow) return n;
  }
  auto parsed = server::ParseOffset(text);
  if (parsed.ok() && parsed->kind == server::OffsetQuery::Kind::kPosition) return parsed->position;
  return Status::InvalidArgument(
      "offset '" + std::string(text) +
      "' is neither a record number (decimal digits) nor an offset token such as "
      "0000000000000000_0000000000000042");
}

Result<std::string> OffsetQueryArg(std::string_view text) {
  if (text == "-1" || text == "now") return std::string(text);
  RUNNEL_ASSIGN_OR_RETURN(uint64_t position, OffsetPositionArg(text));
  return server::FormatOffset(position);
}

int ReportClientFailure(const Status& status) {
  std::fprintf(stderr, "runnel: %s\n", TerminalSafe(status.ToString()).c_str());
  return status.code() == StatusCode::kUnavailable ? kExitUnavailable : kExitUsage;
}

std::string HttpFailureMessage(const std::string& kind, const std::string& name,
                               const ClientResponse& r) {
  // One wording per kind of failure, whichever command met it and whether or not the answer
  // had a body (a HEAD answer has none).
  switch (r.status) {
    case 401: return "this server needs a token (--token or RUNNEL_TOKEN)";
    case 404:
      // A listing names no stream: the server's own message says what was not found.
      if (!name.empty()) return kind + " '" + name + "' does not exist";
      break;
    default: break;
  }
  std::string message = r.body;
  auto body = json::parse(r.body, nullptr, false);
  if (body.is_object() && body.contains("error") && body["error"].is_object()) {
    message = body["error"].value("message", r.body);
  }
  // A 403 says why when the server does (an expired token); a HEAD answer has no body.
  if (message.empty() && r.status == 403) message = "the token may not access this " + kind;
  return message;
}

int ReportHttpFailure(const std::string& what, const std::string& kind, const std::string& name,
                      const ClientResponse& r, bool json_output, const json& extra) {
  const std::string message = HttpFailureMessage(kind, name, r);
  if (json_output) {
    json out = {{"ok", false}, {"status", r.status}, {"error", message}};
    out.update(extra);
    std::printf("%s\n", out.dump().c_str());
  } else {
    std::fprintf(stderr, "runnel: %s failed: HTTP %d%s%s\n", what.c_str(), r.status,
                 message.empty() ? "" : ": ", TerminalSafe(message).c_str());
  }
  return ExitCodeForHttp(r.status);
}

int ExitCodeForHttp(int status) {
  if (status >= 200 && status < 300) return kExitOk;
  if (status == 404 || status == 410) return kExitNotFound;
  if (status == 409 || status == 403) return kExitConflict;
  if (status == 400 || status == 413 || status == 414 || status == 431) return kExitUsage;
  if (status == 503) return kExitUnavailable;
  return kExitFailure;
}

void AddClientCommands(CLI::App& app) {
  AddCreateCommand(app);
  AddCloseCommand(app);
  AddRetentionCommand(app);
  AddAppendCommand(app);
  AddReadCommand(app);
  AddTailCommand(app);
  AddListCommand(app);
  AddDescribeCommand(app);
  AddRemoveCommand(app);
  AddCompactCommand(app);
}

std::vector<std::string> ParseableArgs(CLI::App& app, int argc, char** argv) {
  // The command path (`token create`), the global options met before its end, and the rest.
  std::vector<std::string> path, moved, rest;
  CLI::App* current = &app;
  int i = 1;
  while (i < argc) {
    const std::string_view arg = argv[i];
    const std::string_view name = arg.substr(0, arg.find('='));
    bool global = false;
    for (const char* g : kGlobalOptions) global = global || name == g;
    if (global) {
      moved.emplace_back(arg);
      // "--url X" takes the next argument too; "--url=X" and "--json" do not.
      if (name != "--json" && name.size() == arg.size() && i + 1 < argc)
        moved.emplace_back(argv[++i]);
      ++i;
      continue;
    }
    CLI::App* sub = nullptr;
    if (!arg.empty() && arg.front() != '-') {
      for (CLI::App* candidate : current->get_subcommands([](CLI::App*) { return true; })) {
        if (candidate->check_name(std::string(arg))) sub = candidate;
      }
    }
    if (sub == nullptr) break;
    path.emplace_back(arg);
    current = sub;
    ++i;
  }
  for (; i < argc; ++i) rest.emplace_back(argv[i]);
  const bool append = !path.empty() && path.front() == "append";
  std::vector<std::string> ordered = path;
  ordered.insert(ordered.end(), moved.begin(), moved.end());
  ordered.insert(ordered.end(), rest.begin(), rest.end());
  std::vector<std::string> args;
  for (size_t k = ordered.size(); k-- > 0;) {
    std::string arg = std::move(ordered[k]);
    const bool bracketed = arg.size() >= 2 && arg.front() == '[' && arg.back() == ']';
    if (append && k >= path.size() && (bracketed || (!arg.empty() && arg.front() == kArgEscape))) {
      arg.insert(arg.begin(), kArgEscape);
    }
    args.push_back(std::move(arg));
  }
  return args;
}

}  // namespace runnel::cli
