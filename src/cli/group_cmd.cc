#include "cli/group_cmd.h"

#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "cli/client_commands.h"
#include "cli/http_client.h"
#include "cli/numbers.h"
#include "cli/terminal_text.h"

namespace runnel::cli {

namespace {

using json = nlohmann::json;

struct GroupArgs {
  std::string url = "http://127.0.0.1:4437";
  std::string token;
  std::string cacert;
  std::string tenant;
  bool json_output = false;
  std::string stream;
  std::string group;
  // A record number or an offset token (OffsetPositionArg).
  std::string offset;
  uint64_t limit = 100;
  // The subcommand, for messages ("group ack").
  std::string what;
};

void AddCommon(CLI::App* cmd, GroupArgs* a) {
  a->what = "group " + cmd->get_name();
  cmd->add_option("--url", a->url, "Server URL")->envname("RUNNEL_URL")->capture_default_str();
  cmd->add_option("--token", a->token, "Bearer token for the server")->envname("RUNNEL_TOKEN");
  cmd->add_option("--cacert", a->cacert, "PEM certificates to trust for an https:// URL")
      ->envname("RUNNEL_CACERT");
  cmd->add_option("--tenant", a->tenant, "The stream's tenant (default: the global scope)")
      ->envname("RUNNEL_TENANT");
  cmd->add_flag("--json", a->json_output, "Machine-readable JSON output");
  cmd->add_option("stream", a->stream, "Stream name")->required();
}

std::string GroupTarget(const GroupArgs& a) {
  std::string target = "/v1/groups/";
  if (!a.tenant.empty()) target += "tenants/" + UrlEncode(a.tenant, false) + "/";
  return target + "stream/" + UrlEncode(a.stream, true);
}

// Sends the request; on success fills *body and returns kExitOk, else prints and returns the
// exit code.
int Call(const GroupArgs& a, const std::string& method, const std::string& query, json* body) {
  auto client = HttpClient::Create(a.url, a.token, a.cacert);
  if (!client.ok()) return ReportClientFailure(client.status());
  auto r = client->Send(method, GroupTarget(a) + query, {});
  if (!r.ok()) return ReportClientFailure(r.status());
  if (r->status == 204) {  // a delete: nothing to parse
    *body = json::object();
    return kExitOk;
  }
  if (r->status != 200) return ReportHttpFailure(a.what, "stream", a.stream, *r, a.json_output);
  *body = json::parse(r->body, nullptr, false);
  if (body->is_discarded()) {
    std::fprintf(stderr, "runnel: the server answered with malformed JSON\n");
    return kExitFailure;
  }
  return kExitOk;
}

std::string Query(const std::string& name, const std::string& value) {
  return name + "=" + UrlEncode(value, false);
}

int List(const GroupArgs& a, bool only_lag) {
  json body;
  if (int code = Call(a, "GET", "", &body); code != kExitOk) return code;
  if (a.json_output) {
    std::printf("%s\n", body.dump().c_str());
    return kExitOk;
  }
  bool found = false;
  for (const auto& g : body["groups"]) {
    const std::string name = g.value("group", "");
    if (!a.group.empty() && name != a.group) continue;
    found = true;
    if (only_lag) {
      std::printf("%s\t%llu\n", TerminalSafe(name).c_str(),
                  static_cast<unsigned long long>(g.value("lag", uint64_t{0})));
    } else {
      std::printf("%s\tlast_acked=%llu\tlag=%llu\n", TerminalSafe(name).c_str(),
                  static_cast<unsigned long long>(g.value("last_acked", uint64_t{0})),
                  static_cast<unsigned long long>(g.value("lag", uint64_t{0})));
    }
  }
  if (a.group.empty() && !found) {
    // On stderr, so that a script reading the list still reads an empty one.
    std::fprintf(stderr, "runnel: stream '%s' has no consumer groups\n",
                 TerminalSafe(a.stream).c_str());
  }
  if (!a.group.empty() && !found) {
    // A group that never acked is at 0: its lag is the whole tail.
    std::printf("%s\t%s%llu\n", TerminalSafe(a.group).c_str(), only_lag ? "" : "last_acked=0\tlag=",
                static_cast<unsigned long long>(body.value("tail", uint64_t{0})));
  }
  return kExitOk;
}

// The offset argument as a position, or a usage error printed into *exit_code.
std::optional<uint64_t> OffsetArg(const GroupArgs& a, int* exit_code) {
  auto position = OffsetPositionArg(a.offset);
  if (!position.ok()) {
    *exit_code = ReportClientFailure(position.status());
    return std::nullopt;
  }
  return *position;
}

int Ack(const GroupArgs& a) {
  int code = kExitOk;
  auto offset = OffsetArg(a, &code);
  if (!offset) return code;
  json body;
  code = Call(a, "POST", "?" + Query("group", a.group) + "&ack=" + std::to_string(*offset), &body);
  if (code != kExitOk) return code;
  if (a.json_output) {
    std::printf("%s\n", body.dump().c_str());
  } else {
    std::printf("%s\tlast_acked=%llu\n", TerminalSafe(a.group).c_str(),
                static_cast<unsigned long long>(body.value("last_acked", uint64_t{0})));
  }
  return kExitOk;
}

int Next(const GroupArgs& a) {
  json body;
  int code =
      Call(a, "GET", "?" + Query("group", a.group) + "&limit=" + std::to_string(a.limit), &body);
  if (code != kExitOk) return code;
  if (a.json_output) {
    std::printf("%s\n", body.dump().c_str());
    return kExitOk;
  }
  for (const auto& e : body["events"]) {
    std::string data;
    if (e.contains("data")) {
      data = e["data"].is_string() ? e["data"].get<std::string>() : e["data"].dump();
    } else {
      data = "base64:" + e.value("data_base64", "");
    }
    // One line per event: its data may hold no line break or tab of its own (--json gives it
    // exactly).
    std::printf("%llu\t%s\n", static_cast<unsigned long long>(e.value("offset", uint64_t{0})),
                TerminalSafe(data).c_str());
  }
  return kExitOk;
}

int Prune(const GroupArgs& a) {
  int code = kExitOk;
  auto offset = OffsetArg(a, &code);
  if (!offset) return code;
  json body;
  code = Call(a, "POST", "?prune=" + std::to_string(*offset), &body);
  if (code != kExitOk) return code;
  if (a.json_output) {
    std::printf("%s\n", body.dump().c_str());
  } else {
    std::printf("removed %llu\n",
                static_cast<unsigned long long>(body.value("removed", uint64_t{0})));
  }
  return kExitOk;
}

int Remove(const GroupArgs& a) {
  json body;
  int code = Call(a, "DELETE", "?" + Query("group", a.group), &body);
  if (code != kExitOk) return code;
  if (a.json_output) {
    std::printf("%s\n", json({{"ok", true}, {"group", a.group}}).dump().c_str());
  } else {
    std::printf("deleted group %s\n", TerminalSafe(a.group).c_str());
  }
  return kExitOk;
}

}  // namespace

void AddGroupCommand(CLI::App& app, int* exit_code) {
  auto* group = app.add_subcommand("group", "Consumer groups of a stream on a server");
  group->require_subcommand(1);
  {
    auto a = std::make_shared<GroupArgs>();
    auto* cmd = group->add_subcommand("ls", "List groups with last acked offset and lag");
    AddCommon(cmd, a.get());
    cmd->callback([a, exit_code] { *exit_code = List(*a, false); });
  }
  {
    auto a = std::make_shared<GroupArgs>();
    auto* cmd = group->add_subcommand("lag", "Print each group's lag (tail - last acked)");
    AddCommon(cmd, a.get());
    cmd->add_option("group", a->group, "Only this group");
    cmd->callback([a, exit_code] { *exit_code = List(*a, true); });
  }
  {
    auto a = std::make_shared<GroupArgs>();
    auto* cmd = group->add_subcommand(
        "ack",
        "Acknowledge through OFFSET (monotonic; an offset past the tail is accepted and skips "
        "ahead: the group then waits for records beyond it)");
    AddCommon(cmd, a.get());
    cmd->add_option("group", a->group, "Group name")->required();
    cmd->add_option("offset", a->offset,
                    "Last processed offset: a record number or an offset token")
        ->required();
    cmd->callback([a, exit_code] { *exit_code = Ack(*a); });
  }
  {
    auto a = std::make_shared<GroupArgs>();
    auto* cmd = group->add_subcommand("next", "Read the events after the group's last ack");
    AddCommon(cmd, a.get());
    cmd->add_option("group", a->group, "Group name")->required();
    cmd->add_option("--limit", a->limit, "At most this many (1-1000)")
        ->check(Unsigned())
        ->capture_default_str();
    cmd->callback([a, exit_code] { *exit_code = Next(*a); });
  }
  {
    auto a = std::make_shared<GroupArgs>();
    auto* cmd = group->add_subcommand(
        "prune", "Delete events through THROUGH, never past the slowest group's ack");
    AddCommon(cmd, a.get());
    cmd->add_option("through", a->offset,
                    "Prune through this offset: a record number or an offset token")
        ->required();
    cmd->callback([a, exit_code] { *exit_code = Prune(*a); });
  }
  {
    auto a = std::make_shared<GroupArgs>();
    auto* cmd = group->add_subcommand(
        "rm", "Delete a group: it no longer holds back prune; a later ack starts it afresh");
    AddCommon(cmd, a.get());
    cmd->add_option("group", a->group, "Group name")->required();
    cmd->callback([a, exit_code] { *exit_code = Remove(*a); });
  }
}

}  // namespace runnel::cli
