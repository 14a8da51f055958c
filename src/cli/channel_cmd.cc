#include "cli/channel_cmd.h"

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/client_commands.h"
#include "cli/http_client.h"
#include "cli/numbers.h"
#include "cli/terminal_text.h"

namespace runnel::cli {
namespace {

using json = nlohmann::json;

struct Args {
  std::string url = "http://127.0.0.1:4437";
  std::string token;
  std::string cacert;
  bool json_output = false;
  std::string channel;
  size_t partitions = 1;
  std::string data;
  std::string key;
  std::string idempotency_key;
  size_t partition = 0;
  uint64_t from = 1;
  // read -o: the messages after this offset (OffsetPositionArg), in place of --from.
  std::string after;
  size_t limit = 100;
};

void AddCommon(CLI::App* cmd, Args* a) {
  cmd->add_option("--url", a->url, "Server URL")->envname("RUNNEL_URL")->capture_default_str();
  cmd->add_option("--token", a->token, "Bearer token for the server")->envname("RUNNEL_TOKEN");
  cmd->add_option("--cacert", a->cacert, "PEM certificates to trust for an https:// URL")
      ->envname("RUNNEL_CACERT");
  cmd->add_flag("--json", a->json_output, "Print the server's JSON answer");
  cmd->add_option("channel", a->channel, "Channel id")->required();
}

// Sends one request; prints and returns an exit code for failures, or -1 on success. Failures
// read as those of the other client commands ("runnel: channel WHAT failed: HTTP N: ..."; with
// --json {"ok":false,"status":N,"error":"..."} on stdout). A 404 about `name` (the channel) is
// "channel 'NAME' does not exist"; with `name` empty the server's message says what is missing
// (a partition past the count).
int Send(const Args& a, const std::string& what, const std::string& name, const std::string& method,
         const std::string& target, const std::vector<std::pair<std::string, std::string>>& h,
         const std::string& body, ClientResponse* out) {
  auto client = HttpClient::Create(a.url, a.token, a.cacert);
  if (!client.ok()) return ReportClientFailure(client.status());
  auto r = client->Send(method, target, h, body);
  if (!r.ok()) return ReportClientFailure(r.status());
  *out = std::move(*r);
  if (out->status >= 200 && out->status < 300) return -1;
  return ReportHttpFailure("channel " + what, "channel", name, *out, a.json_output);
}

// An empty key would be dropped (publish) or name no key (resolve): refused as a usage error.
CLI::Validator NonEmpty() {
  return CLI::Validator(
      [](std::string& text) -> std::string { return text.empty() ? "must not be empty" : ""; },
      "TEXT");
}

std::string Target(const Args& a) {
  return "/v1/channels/" + UrlEncode(a.channel, false);
}

int Create(const Args& a) {
  ClientResponse r;
  int rc = Send(a, "create", a.channel, "PUT",
                Target(a) + "?partitions=" + std::to_string(a.partitions), {}, "", &r);
  if (rc >= 0) return rc;
  if (a.json_output) {
    std::printf("%s\n", r.body.c_str());
  } else {
    std::printf("%s channel %s with %zu partitions\n", r.status == 201 ? "created" : "exists",
                TerminalSafe(a.channel).c_str(), a.partitions);
  }
  return kExitOk;
}

int Publish(const Args& a, bool data_given) {
  std::string body = a.data;
  if (!data_given) body.assign(std::istreambuf_iterator<char>(std::cin), {});
  std::vector<std::pair<std::string, std::string>> headers;
  if (!a.key.empty()) headers.emplace_back("Partition-Key", a.key);
  if (!a.idempotency_key.empty()) headers.emplace_back("Idempotency-Key", a.idempotency_key);
  ClientResponse r;
  int rc = Send(a, "publish", a.channel, "POST", Target(a), headers, body, &r);
  if (rc >= 0) {
    if (r.status == 504) {
      std::fprintf(stderr,
                   "the outcome is unknown: ask with `runnel channel resolve %s KEY`, or publish "
                   "again with the same --idempotency-key\n",
                   TerminalSafe(a.channel).c_str());
    }
    return rc;
  }
  if (a.json_output) {
    std::printf("%s\n", r.body.c_str());
    return kExitOk;
  }
  auto j = json::parse(r.body, nullptr, false);
  if (!j.is_object()) {
    std::fprintf(stderr, "runnel channel publish: unexpected answer: %s\n",
                 TerminalSafe(r.body).c_str());
    return kExitFailure;
  }
  std::printf("%s partition %llu offset %llu%s\n", TerminalSafe(j.value("stream", "")).c_str(),
              static_cast<unsigned long long>(j.value("partition", 0ull)),
              static_cast<unsigned long long>(j.value("offset", 0ull)),
              j.value("duplicate", false) ? " (duplicate: already published)" : "");
  return kExitOk;
}

int Read(const Args& a) {
  uint64_t from = a.from;
  if (!a.after.empty()) {
    auto position = OffsetPositionArg(a.after);
    if (!position.ok()) return ReportClientFailure(position.status());
    if (*position == UINT64_MAX) {
      return ReportClientFailure(Status::InvalidArgument("no message follows that offset"));
    }
    from = *position + 1;
  }
  ClientResponse r;
  int rc = Send(a, "read", "", "GET",
                Target(a) + "/partitions/" + std::to_string(a.partition) +
                    "?from=" + std::to_string(from) + "&limit=" + std::to_string(a.limit),
                {}, "", &r);
  if (rc >= 0) return rc;
  if (a.json_output) {
    std::printf("%s\n", r.body.c_str());
    return kExitOk;
  }
  auto j = json::parse(r.body, nullptr, false);
  if (!j.is_object() || !j.contains("messages")) {
    std::fprintf(stderr, "runnel channel read: unexpected answer: %s\n",
                 TerminalSafe(r.body).c_str());
    return kExitFailure;
  }
  // One line per message, its cells separated by tabs: key and payload may hold no line break
  // or tab of their own (--json gives them exactly).
  for (const auto& m : j["messages"]) {
    const std::string payload = m.contains("payload") ? m["payload"].get<std::string>()
                                                      : "base64:" + m.value("payload_base64", "");
    std::printf("%llu\t%s\t%s\n", static_cast<unsigned long long>(m.value("offset", 0ull)),
                TerminalSafe(m.value("key", "-")).c_str(), TerminalSafe(payload).c_str());
  }
  return kExitOk;
}

int Resolve(const Args& a) {
  ClientResponse r;
  int rc = Send(a, "resolve", a.channel, "GET",
                Target(a) + "/keys/" + UrlEncode(a.idempotency_key, false), {}, "", &r);
  if (rc >= 0) return rc;
  auto j = json::parse(r.body, nullptr, false);
  const bool committed = j.is_object() && j.value("state", "") == "committed";
  if (a.json_output) {
    std::printf("%s\n", r.body.c_str());
    return committed ? kExitOk : kExitNotFound;  // the same exit code as without --json
  }
  if (committed) {
    std::printf("committed %s offset %llu\n", TerminalSafe(j.value("stream", "")).c_str(),
                static_cast<unsigned long long>(j.value("offset", 0ull)));
    return kExitOk;
  }
  std::printf("absent\n");
  return kExitNotFound;
}

}  // namespace

void AddChannelCommand(CLI::App& app) {
  auto* channel = app.add_subcommand("channel", "Partitioned channels: create, publish, read");
  channel->require_subcommand(1);
  {
    auto a = std::make_shared<Args>();
    auto* cmd = channel->add_subcommand("create", "Create a channel (idempotent for one count)");
    AddCommon(cmd, a.get());
    cmd->add_option("-p,--partitions", a->partitions, "Partition count (1-1024)")
        ->check(Unsigned())
        ->capture_default_str();
    cmd->callback([a] { std::exit(Create(*a)); });
  }
  {
    auto a = std::make_shared<Args>();
    auto* cmd = channel->add_subcommand("publish", "Publish one message (argument or stdin)");
    AddCommon(cmd, a.get());
    auto* data = cmd->add_option("data", a->data, "Message; read from stdin when absent");
    cmd->add_option("-k,--key", a->key, "Partition key (same key, same partition, in order)");
    cmd->add_option("-i,--idempotency-key", a->idempotency_key,
                    "Publishing the same key again returns the first position")
        ->check(NonEmpty());
    cmd->callback([a, data] { std::exit(Publish(*a, data->count() > 0)); });
  }
  {
    auto a = std::make_shared<Args>();
    auto* cmd = channel->add_subcommand("read", "Read one partition's messages");
    AddCommon(cmd, a.get());
    cmd->add_option("-p,--partition", a->partition, "Partition")
        ->check(Unsigned())
        ->capture_default_str();
    auto* from = cmd->add_option("--from", a->from, "First offset (inclusive)")
                     ->check(Unsigned())
                     ->capture_default_str();
    cmd->add_option("-o,--offset", a->after,
                    "Read the messages after this offset, as every command takes one: a record "
                    "number or an offset token")
        ->excludes(from);
    cmd->add_option("-n,--limit", a->limit, "At most this many (1-1000)")
        ->check(Unsigned())
        ->capture_default_str();
    cmd->callback([a] { std::exit(Read(*a)); });
  }
  {
    auto a = std::make_shared<Args>();
    auto* cmd = channel->add_subcommand("resolve", "Where an idempotency key's message landed");
    AddCommon(cmd, a.get());
    cmd->add_option("key", a->idempotency_key, "Idempotency key")->required()->check(NonEmpty());
    cmd->callback([a] { std::exit(Resolve(*a)); });
  }
}

}  // namespace runnel::cli
