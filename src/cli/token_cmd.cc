#include "cli/token_cmd.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "cli/terminal_text.h"
#include "core/token_store.h"

namespace runnel::cli {
namespace {

struct TokenOptions {
  std::string data_dir;
  std::string tenant;
  bool platform = false;
  bool cross_tenant = false;
  std::string expires;
  std::string note;
  std::string id;
  bool json_output = false;
};

// "30d", "12h", "15m", "45s" -> milliseconds.
std::optional<uint64_t> ParseDuration(const std::string& text) {
  if (text.size() < 2) return std::nullopt;
  const char unit = text.back();
  uint64_t factor = 0;
  switch (unit) {
    case 's': factor = 1000; break;
    case 'm': factor = 60'000; break;
    case 'h': factor = 3'600'000; break;
    case 'd': factor = 86'400'000; break;
    default: return std::nullopt;
  }
  uint64_t n = 0;
  for (size_t i = 0; i + 1 < text.size(); ++i) {
    if (text[i] < '0' || text[i] > '9' || n > 1'000'000'000) return std::nullopt;
    n = n * 10 + static_cast<uint64_t>(text[i] - '0');
  }
  return n * factor;
}

std::unique_ptr<TokenStore> OpenTokens(const std::string& data_dir, int* exit_code) {
  if (::mkdir(data_dir.c_str(), 0700) != 0 && errno != EEXIST) {
    std::fprintf(stderr, "runnel token: cannot create %s: %s\n", TerminalSafe(data_dir).c_str(),
                 std::strerror(errno));
    *exit_code = 1;
    return nullptr;
  }
  auto store = TokenStore::Open(data_dir + "/tokens");
  if (!store.ok()) {
    std::fprintf(stderr, "runnel token: %s\n", TerminalSafe(store.status().ToString()).c_str());
    *exit_code = 1;
    return nullptr;
  }
  return std::move(*store);
}

}  // namespace

void AddTokenCommand(CLI::App& app, int* exit_code) {
  auto opts = std::make_shared<TokenOptions>();
  const char* env_data = std::getenv("RUNNEL_DATA");
  opts->data_dir = env_data ? env_data : "./data";

  auto* token = app.add_subcommand("token", "Manage bearer tokens (stored hashed in DATA/tokens)");
  token->require_subcommand(1);
  token->add_option("--data", opts->data_dir, "Data directory (env RUNNEL_DATA)")
      ->capture_default_str();
  // `token create --data DIR` as well as `token --data DIR create`: an option the subcommand
  // does not know goes up to `token`.
  token->fallthrough();

  auto* create = token->add_subcommand("create", "Create a token and print it once");
  create->add_option("--tenant", opts->tenant, "Tenant the token acts as");
  create->add_flag("--platform", opts->platform, "Act as the platform (global scope) instead");
  create->add_flag("--cross-tenant", opts->cross_tenant,
                   "Grant the stream:cross-tenant capability (every scope)");
  CLI::Option* expires =
      create->add_option("--expires", opts->expires, "Lifetime such as 30d, 12h, 15m, 45s");
  create->add_option("--note", opts->note, "Free text shown by `token ls`");
  create->callback([opts, exit_code, expires] {
    if (opts->platform == !opts->tenant.empty()) {
      std::fprintf(stderr, "runnel token create: give exactly one of --tenant ID or --platform\n");
      *exit_code = 2;
      return;
    }
    TokenGrant grant;
    if (!opts->tenant.empty()) grant.tenant = opts->tenant;
    grant.cross_tenant = opts->cross_tenant;
    grant.note = opts->note;
    if (expires->count() > 0) {
      // Given empty or as zero, it would make a token that never expires or one already
      // expired: neither is what was asked for.
      auto ms = ParseDuration(opts->expires);
      if (!ms || *ms == 0) {
        std::fprintf(stderr,
                     "runnel token create: --expires wants a lifetime of at least 1s, e.g. 30d, "
                     "12h, 15m or 45s\n");
        *exit_code = 2;
        return;
      }
      grant.expires_at_ms = Clock::Real()->NowMs() + *ms;
    }
    auto store = OpenTokens(opts->data_dir, exit_code);
    if (!store) return;
    auto text = store->Create(grant);
    if (!text.ok()) {
      std::fprintf(stderr, "runnel token create: %s\n",
                   TerminalSafe(text.status().ToString()).c_str());
      // A tenant id the store refuses is a usage error, like the other argument checks.
      *exit_code = text.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
      return;
    }
    std::printf("%s\n", text->c_str());
    std::fprintf(stderr, "This token is shown once; only its hash is stored in %s/tokens.\n",
                 TerminalSafe(opts->data_dir).c_str());
  });

  auto* ls = token->add_subcommand("ls", "List tokens (ids and grants, never secrets)");
  ls->add_flag("--json", opts->json_output,
               "Machine-readable JSON output (expiry also in milliseconds since the epoch)");
  ls->callback([opts, exit_code] {
    auto store = OpenTokens(opts->data_dir, exit_code);
    if (!store) return;
    if (opts->json_output) {
      nlohmann::json all = nlohmann::json::array();
      for (const TokenInfo& t : store->List()) {
        nlohmann::json row = {
            {"id", t.id},
            {"tenant", t.grant.tenant ? nlohmann::json(*t.grant.tenant) : nlohmann::json(nullptr)},
            {"cross_tenant", t.grant.cross_tenant},
            {"note", t.grant.note}};
        if (t.grant.expires_at_ms) {
          row["expires_at_ms"] = *t.grant.expires_at_ms;
          row["expires_at"] = HumanTime(*t.grant.expires_at_ms);
        }
        all.push_back(std::move(row));
      }
      std::printf("%s\n",
                  all.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
      return;
    }
    std::printf("%-12s  %-20s  %-5s  %-20s  %s\n", "ID", "PRINCIPAL", "CROSS", "EXPIRES (UTC)",
                "NOTE");
    const uint64_t now_ms = Clock::Real()->NowMs();
    // Ids, tenants and notes were chosen by whoever created the tokens (the file may be edited
    // by hand): escaped, so that none can break the table or drive the terminal.
    for (const TokenInfo& t : store->List()) {
      std::string expires = "never";
      if (t.grant.expires_at_ms) {
        expires = HumanTime(*t.grant.expires_at_ms);
        if (*t.grant.expires_at_ms <= now_ms) expires += " (expired)";
      }
      std::printf("%-12s  %-20s  %-5s  %-20s  %s\n", TerminalSafe(t.id).c_str(),
                  t.grant.tenant ? ("tenant:" + TerminalSafe(*t.grant.tenant)).c_str() : "platform",
                  t.grant.cross_tenant ? "yes" : "no", expires.c_str(),
                  TerminalSafe(t.grant.note).c_str());
    }
  });

  auto* revoke = token->add_subcommand("revoke", "Revoke a token by id");
  revoke->add_option("id", opts->id, "Token id (the 12 hex digits after rnl_)")->required();
  revoke->callback([opts, exit_code] {
    auto store = OpenTokens(opts->data_dir, exit_code);
    if (!store) return;
    Status s = store->Revoke(opts->id);
    if (!s.ok()) {
      std::fprintf(stderr, "runnel token revoke: %s\n", TerminalSafe(s.ToString()).c_str());
      *exit_code = s.code() == StatusCode::kNotFound ? 3 : 1;
    }
  });
}

}  // namespace runnel::cli
