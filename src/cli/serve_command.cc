#include "cli/serve_command.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>

#include "base/log.h"
#include "cli/log_setup.h"
#include "cli/numbers.h"
#include "cli/terminal_text.h"
#include "runnel/registry.h"
#include "server/fd_budget.h"
#include "server/http_server.h"
#include "store/log/log_store.h"

namespace runnel::cli {

namespace {

struct ServeFlags {
  std::string listen = "127.0.0.1:4437";
  std::string data = "./data";
  std::string store;  // empty: log when available, else memory with a warning
  std::string durability = "fsync";
  // Log store: the size of one segment file (LogStoreOptions::segment_size).
  uint64_t segment_size = 64ull << 20;
  // 0: HTTP clients come back after a network round trip, later than the wait would last, so
  // waiting only delays each sync (c16 appends: 50k/s without the wait, 36k/s with 200 us).
  uint32_t group_commit_wait_us = 0;
  uint64_t long_poll_timeout_ms = 20000;
  size_t threads = 0;
  size_t max_body_bytes = 64u << 20;
  size_t max_fork_bytes = 64u << 20;
  size_t max_forks_per_stream = 1000;
  double compaction_share = 0.5;
  uint64_t compaction_min_bytes = 1u << 20;
  size_t max_append_messages = 100000;
  size_t max_header_bytes = 16u << 10;
  size_t max_url_bytes = 8u << 10;
  uint64_t idle_timeout_ms = 60000;
  uint64_t request_timeout_ms = 30000;
  size_t max_connections = 10000;
  size_t max_groups_per_stream = server::GroupService::kDefaultMaxGroupsPerStream;
  uint64_t sse_max_duration_ms = 60000;
  // h2c with prior knowledge on the plain port.
  bool http2 = true;
  size_t http2_max_streams = 100;
  size_t http2_connection_buffer = 8u << 20;
  // Response compression (server/content_coding.h).
  bool compression = true;
  size_t compression_min_bytes = 1024;
  int gzip_level = 1;
  int zstd_level = 3;
  // Empty: <data>/tokens.
  std::string tokens;
  // "tokens", "none", or empty: tokens when the token file has any.
  std::string auth;
  uint64_t quota_streams = 0;
  uint64_t quota_bytes = 0;
  uint64_t quota_appends_per_sec = 0;
  // HTTPS when both are set (PEM files).
  std::string tls_cert;
  std::string tls_key;
  uint64_t tls_handshake_timeout_ms = 10000;
  // Empty: <data>/webhook-signing-key.pem for the log and PostgreSQL stores, process-local for
  // the memory store.
  std::string webhook_signing_key;
  bool webhook_allow_localhost = false;
  bool dashboard = true;
  // Open a log whose written data is damaged, skipping the damaged bytes (reported at start).
  bool salvage = false;
  // PostgreSQL store: the longest wait for any reply of the database.
  uint64_t postgres_reply_timeout_ms = 35000;
  // Log store: the background scrub's rate (0: off).
  uint64_t scrub_bytes_per_sec = 16ull << 20;
  // Empty: http:// plus the request's Host header.
  std::string public_url;
  // Scopes ("global", "tenant:<id>") whose catch-up reads shared caches may keep even when
  // they needed a token.
  std::vector<std::string> public_cache_scopes;
  // Every log line (base/log.h): the lowest level written, and text or JSON lines.
  std::string log_level = "info";
  std::string log_format = "text";
  // One line per request to this file ("-": standard output); empty: none.
  std::string access_log;
};

// The smallest and largest --segment-size. Below 1 MiB a segment holds little more than its
// headers' worth of small appends and the log becomes thousands of files; the log store's own
// limit is 2 GiB.
constexpr uint64_t kMinSegmentSize = 1ull << 20;
constexpr uint64_t kMaxSegmentSize = 2ull << 30;

bool IsLoopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

bool ValidDurability(const std::string& d) {
  if (d == "fsync" || d == "none") return true;
  constexpr std::string_view kInterval = "interval:";
  if (!d.starts_with(kInterval) || d.size() == kInterval.size()) return false;
  for (size_t i = kInterval.size(); i < d.size(); ++i) {
    if (d[i] < '0' || d[i] > '9') return false;
  }
  return true;
}

int RunServe(const ServeFlags& flags) {
  // First, so every line after is in the chosen format (both flags are checked by CLI11).
  SetUpLogging(ParseLogLevel(flags.log_level).value_or(LogLevel::kInfo),
               ParseLogFormat(flags.log_format).value_or(LogFormat::kText));
  size_t colon = flags.listen.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    LogF(LogLevel::kError, "--listen must be HOST:PORT, got '%s'", flags.listen.c_str());
    return 2;
  }
  std::string host = flags.listen.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  char* end = nullptr;
  unsigned long port = std::strtoul(flags.listen.c_str() + colon + 1, &end, 10);
  if (*end != '\0' || port > 65535) {
    LogF(LogLevel::kError, "bad port in --listen '%s'", flags.listen.c_str());
    return 2;
  }
  if (!ValidDurability(flags.durability)) {
    LogF(LogLevel::kError, "--durability must be fsync, interval:<ms> or none, got '%s'",
         flags.durability.c_str());
    return 2;
  }

  if (flags.segment_size < kMinSegmentSize || flags.segment_size > kMaxSegmentSize) {
    LogF(LogLevel::kError,
         "--segment-size must be at least %llu bytes (1 MiB) and at most %llu (2 GiB), got %llu",
         static_cast<unsigned long long>(kMinSegmentSize),
         static_cast<unsigned long long>(kMaxSegmentSize),
         static_cast<unsigned long long>(flags.segment_size));
    return 2;
  }

  if (flags.tls_cert.empty() != flags.tls_key.empty()) {
    LogF(LogLevel::kError, "--tls-cert and --tls-key must be given together");
    return 2;
  }
  const bool tls = !flags.tls_cert.empty();

  // Before anything is opened, so the store may use the whole limit too.
  const server::FdLimit fd_limit = server::RaiseFdLimit();
  if (!fd_limit.error.empty()) {
    LogF(LogLevel::kWarn, "cannot raise the descriptor limit: %s", fd_limit.error.c_str());
  }

  RegistryOptions registry_options;
  registry_options.data_dir = flags.data;
  registry_options.store = flags.store.empty() ? "log" : flags.store;
  registry_options.durability = flags.durability;
  registry_options.group_commit_wait_us = flags.group_commit_wait_us;
  registry_options.salvage = flags.salvage;
  registry_options.postgres_reply_timeout_ms = flags.postgres_reply_timeout_ms;
  registry_options.scrub_bytes_per_sec = flags.scrub_bytes_per_sec;
  registry_options.on_damage = [](const std::string& line) { spdlog::error("{}", line); };
  registry_options.log_segment_size = flags.segment_size;
  // A start that fails leaves no trace in a data directory it did not find: the log store
  // removes what it created (it wrote nothing), and this removes the webhook signing key made
  // for it and the directory. Declared before everything that holds the store, so it runs after
  // the store is closed.
  struct UndoNewDataDir {
    std::string dir;
    bool own_key = false;
    bool armed = false;
    ~UndoNewDataDir() {
      if (!armed) return;
      std::error_code ec;
      if (own_key) std::filesystem::remove(dir + "/webhook-signing-key.pem", ec);
      std::filesystem::remove(dir, ec);  // only when empty
    }
  } undo{flags.data, flags.webhook_signing_key.empty(),
         registry_options.store == "log" && !std::filesystem::exists(flags.data)};
  // A durable store that cannot open (locked, corrupt, unwritable) is an error, never a silent
  // fallback to memory: serving an empty store would look like data loss.
  auto registry = StreamRegistry::Open(registry_options);
  if (!registry.ok()) {
    // The log store names its files relative to its directory: this line says which one.
    const std::string where = registry_options.store == "log" ? " in " + flags.data : "";
    LogF(LogLevel::kError, "cannot open the %s store%s: %s", registry_options.store.c_str(),
         TerminalSafe(where).c_str(), TerminalSafe(registry.status().ToString()).c_str());
    if (registry.status().code() == StatusCode::kCorruption && !flags.salvage) {
      LogF(LogLevel::kError,
           "`runnel check %s` shows the damage; --salvage opens the "
           "directory without the damaged bytes (back it up first)",
           flags.data.c_str());
    }
    return 1;
  }
  // What recovery repaired or skipped (a torn tail, salvaged damage) is said, never silent.
  if (auto* log_store = dynamic_cast<log::LogStore*>(&registry->store())) {
    for (const std::string& note : log_store->RecoveryNotes()) {
      LogF(LogLevel::kWarn, "recovery: %s", TerminalSafe(note).c_str());
    }
  }

  server::AccessOptions access_options;
  access_options.tokens_path = flags.tokens.empty() ? flags.data + "/tokens" : flags.tokens;
  access_options.mode = flags.auth == "none"     ? server::AccessOptions::Mode::kNone
                        : flags.auth == "tokens" ? server::AccessOptions::Mode::kTokens
                                                 : server::AccessOptions::Mode::kAuto;
  auto access = server::AccessGate::Open(access_options);
  if (!access.ok()) {
    LogF(LogLevel::kError, "cannot load the token file %s: %s",
         TerminalSafe(access_options.tokens_path).c_str(),
         TerminalSafe(access.status().ToString()).c_str());
    return 1;
  }
  const bool open = !(*access)->RequiresTokens();
  // Safe by default: an open server listens only on loopback unless asked explicitly.
  if (open && flags.auth != "none" && !IsLoopback(host)) {
    LogF(LogLevel::kError,
         "no tokens in %s, refusing to serve %s without authentication; "
         "create one with `runnel token create`, or pass --auth none",
         access_options.tokens_path.c_str(), host.c_str());
    return 2;
  }
  std::string auth_line =
      open ? std::string(flags.auth == "none" ? "none (open, --auth none)" : "none (open)")
           : "tokens (" + std::to_string((*access)->token_count()) + " in " +
                 access_options.tokens_path + ")";

  server::ServerOptions options;
  options.access = std::move(*access);
  options.quotas.max_streams = flags.quota_streams;
  options.quotas.max_bytes = flags.quota_bytes;
  options.quotas.appends_per_sec = flags.quota_appends_per_sec;
  options.host = host;
  options.port = static_cast<uint16_t>(port);
  options.threads = flags.threads;
  options.max_body_bytes = flags.max_body_bytes;
  options.max_header_bytes = flags.max_header_bytes;
  options.max_url_bytes = flags.max_url_bytes;
  options.idle_timeout_ms = flags.idle_timeout_ms;
  options.request_timeout_ms = flags.request_timeout_ms;
  options.max_connections = flags.max_connections;
  options.max_groups_per_stream = flags.max_groups_per_stream;
  options.sse_max_duration_ms = flags.sse_max_duration_ms;
  options.handle_signals = true;
  options.tls_cert_file = flags.tls_cert;
  options.tls_key_file = flags.tls_key;
  options.tls_handshake_timeout_ms = flags.tls_handshake_timeout_ms;
  options.service.long_poll_timeout_ms = flags.long_poll_timeout_ms;
  options.service.max_fork_bytes = flags.max_fork_bytes;
  options.service.max_forks_per_stream = flags.max_forks_per_stream;
  options.service.compaction_share = flags.compaction_share;
  options.service.compaction_min_bytes = flags.compaction_min_bytes;
  options.service.max_append_messages = flags.max_append_messages;
  options.http2 = flags.http2;
  options.http2_max_streams = flags.http2_max_streams;
  options.http2_connection_buffer = flags.http2_connection_buffer;
  options.service.compression.enabled = flags.compression;
  options.service.compression.min_bytes = flags.compression_min_bytes;
  options.service.compression.gzip_level = flags.gzip_level;
  options.service.compression.zstd_level = flags.zstd_level;
  options.dashboard = flags.dashboard;
  if (!flags.access_log.empty()) {
    auto access_log = server::AccessLog::Open(flags.access_log, CurrentLogFormat());
    if (!access_log.ok()) {
      LogF(LogLevel::kError, "%s", TerminalSafe(access_log.status().ToString()).c_str());
      return 1;
    }
    options.access_log = std::move(*access_log);
  }
  options.public_cache_scopes.insert(flags.public_cache_scopes.begin(),
                                     flags.public_cache_scopes.end());
  options.info = {
      {"version", RUNNEL_VERSION},
      {"store",
       registry_options.store.rfind("postgres", 0) == 0 ? "postgres" : registry_options.store}};
  server::SubscriptionOptions subscription_options;
  subscription_options.allow_localhost_webhooks = flags.webhook_allow_localhost;
  subscription_options.public_base_url = flags.public_url;
  if (!flags.tls_cert.empty()) subscription_options.default_scheme = "https";
  subscription_options.signing_key_path = flags.webhook_signing_key;
  if (subscription_options.signing_key_path.empty() && registry_options.store != "memory") {
    std::error_code ec;
    std::filesystem::create_directories(flags.data, ec);
    subscription_options.signing_key_path = flags.data + "/webhook-signing-key.pem";
  }
  auto subscriptions = server::SubscriptionService::Create(*registry, subscription_options);
  if (!subscriptions.ok()) {
    LogF(LogLevel::kError, "cannot set up webhook signing: %s",
         TerminalSafe(subscriptions.status().ToString()).c_str());
    return 1;
  }
  options.subscriptions = std::move(*subscriptions);
  std::string durability = registry->store().Durability();
  auto server = server::HttpServer::Start(std::move(*registry), options);
  if (!server.ok()) {
    LogF(LogLevel::kError, "%s", TerminalSafe(server.status().ToString()).c_str());
    return 1;
  }
  // Everything the server holds at start is open now (the store, the listener, the io threads'
  // descriptors): the rest of the limit is split between the store's reserve and clients.
  const uint64_t fds_in_use = server::CountOpenFds();
  const server::FdBudget budget =
      server::PlanFdBudget(fd_limit.soft, fds_in_use, flags.max_connections);
  if (budget.fitting_connections == 0 && flags.max_connections > 0) {
    LogF(LogLevel::kError,
         "the descriptor limit %llu leaves no room for connections (%llu in "
         "use, %llu reserved for the store, %llu for refusing connections); raise it "
         "(ulimit -n) to at least %llu",
         static_cast<unsigned long long>(fd_limit.soft),
         static_cast<unsigned long long>(fds_in_use),
         static_cast<unsigned long long>(budget.store_reserve),
         static_cast<unsigned long long>(budget.reject_slots),
         static_cast<unsigned long long>(server::FdLimitNeeded(fds_in_use, 1)));
    return 1;
  }
  (*server)->SetMaxConnections(budget.max_connections);
  const std::string raised = fd_limit.soft_before < fd_limit.soft
                                 ? " (raised from " + std::to_string(fd_limit.soft_before) + ")"
                                 : "";
  LogF(LogLevel::kInfo,
       "descriptor limit %llu%s: %llu in use, %llu reserved for the store, %llu for "
       "refusing connections, up to %zu connections",
       static_cast<unsigned long long>(fd_limit.soft), raised.c_str(),
       static_cast<unsigned long long>(fds_in_use),
       static_cast<unsigned long long>(budget.store_reserve),
       static_cast<unsigned long long>(budget.reject_slots), budget.max_connections);
  if (budget.lowered) {
    LogF(LogLevel::kWarn,
         "--max-connections lowered from %zu to %zu to fit the descriptor "
         "limit %llu (raise it with ulimit -n, or set --max-connections to %zu or less)",
         flags.max_connections, budget.max_connections,
         static_cast<unsigned long long>(fd_limit.soft), budget.max_connections);
  }
  undo.armed = false;
  const bool v6 = options.host.find(':') != std::string::npos;
  const std::string base = std::string(tls ? "https" : "http") + "://" + (v6 ? "[" : "") +
                           options.host + (v6 ? "]" : "") + ":" + std::to_string((*server)->port());
  LogF(LogLevel::kInfo, "listening on %s (store: %s, data: %s, durability: %s, auth: %s)",
       base.c_str(),
       registry_options.store.rfind("postgres", 0) == 0 ? "postgres"
                                                        : registry_options.store.c_str(),
       registry_options.store == "log" ? flags.data.c_str() : "-", durability.c_str(),
       auth_line.c_str());
  if (options.dashboard) LogF(LogLevel::kInfo, "dashboard at %s/", base.c_str());
  (*server)->Run();
  LogF(LogLevel::kInfo, "stopped");
  return 0;
}

}  // namespace

void AddServeCommand(CLI::App& app) {
  auto flags = std::make_shared<ServeFlags>();
  auto* cmd = app.add_subcommand("serve", "Serve the Durable Streams protocol over HTTP");
  cmd->add_option("--listen", flags->listen, "HOST:PORT to listen on")
      ->envname("RUNNEL_LISTEN")
      ->capture_default_str();
  cmd->add_option("--data", flags->data, "Data directory for the log store")
      ->envname("RUNNEL_DATA")
      ->capture_default_str();
  cmd->add_option("--store", flags->store,
                  "Store: log (default), memory, or a postgres://user@host:port/db URL")
      ->envname("RUNNEL_STORE")
      ->check(CLI::Validator(
          [](std::string& value) -> std::string {
            if (value == "log" || value == "memory" || value.rfind("postgres://", 0) == 0 ||
                value.rfind("postgresql://", 0) == 0) {
              return "";
            }
            return "must be log, memory or a postgres:// URL";
          },
          "STORE"));
  cmd->add_option("--durability", flags->durability, "fsync, interval:<ms> or none")
      ->envname("RUNNEL_DURABILITY")
      ->capture_default_str();
  cmd->add_option("--segment-size", flags->segment_size,
                  "log store: bytes per segment file, from 1048576 (1 MiB) to 2147483648 "
                  "(2 GiB); the disk needs room for about three (see README)")
      ->envname("RUNNEL_SEGMENT_SIZE")
      ->check(Unsigned())
      ->capture_default_str();
  cmd->add_option("--group-commit-wait-us", flags->group_commit_wait_us,
                  "log store, fsync: how long a commit may wait for the appenders it just "
                  "acknowledged to come back (capped at half the mean fdatasync time; 0: never, "
                  "right for clients across a network)")
      ->envname("RUNNEL_GROUP_COMMIT_WAIT_US")
      ->check(CLI::Range(0u, 100000u))
      ->capture_default_str();
  cmd->add_option("--long-poll-timeout-ms", flags->long_poll_timeout_ms,
                  "How long a long-poll waits for data")
      ->envname("RUNNEL_LONG_POLL_TIMEOUT_MS")
      ->check(Unsigned())
      ->capture_default_str();
  cmd->add_option("--threads", flags->threads, "io threads (0: one per core)")
      ->envname("RUNNEL_THREADS")
      ->check(Unsigned())
      ->capture_default_str();
  cmd->add_option("--max-body-bytes", flags->max_body_bytes, "Largest request body (else 413)")
      ->envname("RUNNEL_MAX_BODY_BYTES")
      ->check(Unsigned())
      ->capture_default_str();
  cmd->add_option("--max-fork-bytes", flags->max_fork_bytes,
                  "Most record bytes a fork copies from its source (else 413)")
      ->envname("RUNNEL_MAX_FORK_BYTES")
      ->check(Unsigned())
      ->capture_default_str();
  cmd->add_option("--compaction-share", flags->compaction_share,
                  "Compact a Stream-Compaction: state stream in the background once the bytes "
                  "appended since its last compaction pass this share of it (0: only on demand)")
      ->envname("RUNNEL_COMPACTION_SHARE")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  cmd->add_option("--compaction-min-bytes", flags->compaction_min_bytes,
                  "...and at least this many bytes")
      ->envname("RUNNEL_COMPACTION_MIN_BYTES")
      ->check(Unsigned())
      ->capture_default_str();
  cmd->add_option("--max-forks-per-stream", flags->max_forks_per_stream,
                  "Most live forks of one stream (else 409)")
      ->envname("RUNNEL_MAX_FORKS_PER_STREAM")
      ->check(Unsigned())
      ->capture_default_str();
  cmd->add_option("--max-append-messages", flags->max_append_messages,
                  "Most messages one JSON-mode append may carry (else 413)")
      ->envname("RUNNEL_MAX_APPEND_MESSAGES")
      ->check(CLI::Range(size_t{1}, size_t{100000000}))
      ->capture_default_str();
  cmd->add_option("--max-header-bytes", flags->max_header_bytes, "Largest header block (else 431)")
      ->envname("RUNNEL_MAX_HEADER_BYTES")
      ->check(Unsigned())
      ->capture_default_str();
  cmd->add_option("--max-url-bytes", flags->max_url_bytes, "Longest request target (else 414)")
      ->envname("RUNNEL_MAX_URL_BYTES")
      ->check(Unsigned())
      ->capture_default_str();
  cmd->add_option("--idle-timeout-ms", flags->idle_timeout_ms,
                  "Close a keep-alive connection idle this long")
      ->envname("RUNNEL_IDLE_TIMEOUT_MS")
      ->check(Unsigned())
      ->capture_default_str();
  cmd->add_option("--request-timeout-ms", flags->request_timeout_ms,
                  "Close a connection that takes longer to send a request body or read a response")
      ->envname("RUNNEL_REQUEST_TIMEOUT_MS")
      ->check(Unsigned())
      ->capture_default_str();
  cmd->add_option("--max-connections", flags->max_connections,
                  "Connections above this get 503 with Retry-After (lowered at start when the "
                  "descriptor limit, raised to its hard limit, cannot hold them next to the "
                  "store's reserve)")
      ->envname("RUNNEL_MAX_CONNECTIONS")
      ->check(Unsigned())
      ->capture_default_str();
  cmd->add_option("--max-groups-per-stream", flags->max_groups_per_stream,
                  "Most consumer groups per stream (a new group's ack past it gets 429)")
      ->envname("RUNNEL_MAX_GROUPS_PER_STREAM")
      ->check(Unsigned())
      ->capture_default_str();
  cmd->add_option("--sse-max-duration-ms", flags->sse_max_duration_ms,
                  "End SSE responses after this long so clients reconnect")
      ->envname("RUNNEL_SSE_MAX_DURATION_MS")
      ->check(Unsigned())
      ->capture_default_str();
  cmd->add_flag("--http2,!--no-http2", flags->http2,
                "Serve HTTP/2 beside HTTP/1.1: h2c with prior knowledge on a plain port, h2 by "
                "ALPN with TLS (on by default)")
      ->envname("RUNNEL_HTTP2");
  cmd->add_option("--http2-max-streams", flags->http2_max_streams,
                  "Streams one HTTP/2 connection may have open at a time")
      ->envname("RUNNEL_HTTP2_MAX_STREAMS")
      ->check(CLI::Range(size_t{1}, size_t{10000}))
      ->capture_default_str();
  cmd->add_option(
         "--http2-connection-buffer", flags->http2_connection_buffer,
         "Bytes of answers one HTTP/2 connection may hold waiting for the client's "
         "flow-control window (a read reserves its largest answer, 1 MiB); a stream that would "
         "pass it waits, then is refused (RST_STREAM REFUSED_STREAM)")
      ->envname("RUNNEL_HTTP2_CONNECTION_BUFFER")
      ->check(CLI::Range(size_t{64} << 10, size_t{1} << 30))
      ->capture_default_str();
  cmd->add_flag("--compression,!--no-compression", flags->compression,
                "Compress catch-up and long-poll bodies with gzip or zstd when the client's "
                "Accept-Encoding allows (never SSE; on by default)")
      ->envname("RUNNEL_COMPRESSION");
  cmd->add_option("--compression-min-bytes", flags->compression_min_bytes,
                  "Bodies shorter than this are sent uncompressed")
      ->envname("RUNNEL_COMPRESSION_MIN_BYTES")
      ->check(Unsigned())
      ->capture_default_str();
  cmd->add_option("--gzip-level", flags->gzip_level,
                  "zlib level of gzip bodies (1 fastest, 9 smallest)")
      ->envname("RUNNEL_GZIP_LEVEL")
      ->check(CLI::Range(1, 9))
      ->capture_default_str();
  cmd->add_option("--zstd-level", flags->zstd_level,
                  "Level of zstd bodies (1 fastest, 19 smallest)")
      ->envname("RUNNEL_ZSTD_LEVEL")
      ->check(CLI::Range(1, 19))
      ->capture_default_str();
  cmd->add_option("--tokens", flags->tokens, "Bearer token file (default: <data>/tokens)")
      ->envname("RUNNEL_TOKENS");
  cmd->add_option("--auth", flags->auth,
                  "tokens (always require a token) or none (serve open, even off loopback); "
                  "default: tokens when the token file has any")
      ->envname("RUNNEL_AUTH")
      ->check(CLI::IsMember({"tokens", "none"}));
  cmd->add_option("--quota-streams", flags->quota_streams,
                  "Most streams per tenant (0: unlimited; else 429)")
      ->envname("RUNNEL_QUOTA_STREAMS")
      ->check(Unsigned())
      ->capture_default_str();
  cmd->add_option("--quota-bytes", flags->quota_bytes,
                  "Most retained bytes per tenant (0: unlimited; else 429)")
      ->envname("RUNNEL_QUOTA_BYTES")
      ->check(Unsigned())
      ->capture_default_str();
  cmd->add_option("--quota-appends-per-sec", flags->quota_appends_per_sec,
                  "Most appends per second per tenant (0: unlimited; else 429)")
      ->envname("RUNNEL_QUOTA_APPENDS_PER_SEC")
      ->check(Unsigned())
      ->capture_default_str();
  cmd->add_option("--tls-cert", flags->tls_cert,
                  "Serve HTTPS with this PEM certificate chain (needs --tls-key)")
      ->envname("RUNNEL_TLS_CERT");
  cmd->add_option("--tls-key", flags->tls_key, "PEM private key of --tls-cert")
      ->envname("RUNNEL_TLS_KEY");
  cmd->add_option("--tls-handshake-timeout-ms", flags->tls_handshake_timeout_ms,
                  "Close a TLS connection that has not completed its handshake by then")
      ->envname("RUNNEL_TLS_HANDSHAKE_TIMEOUT_MS")
      ->check(Unsigned())
      ->capture_default_str();
  cmd->add_option("--webhook-signing-key", flags->webhook_signing_key,
                  "Ed25519 webhook signing key file, created (0600) when missing (default: "
                  "<data>/webhook-signing-key.pem; process-local with --store memory)")
      ->envname("RUNNEL_WEBHOOK_SIGNING_KEY");
  cmd->add_flag("--dashboard,!--no-dashboard", flags->dashboard,
                "Serve the built-in dashboard at / (on by default; it reads the API with the "
                "token typed into the page)")
      ->envname("RUNNEL_DASHBOARD");
  cmd->add_option("--postgres-reply-timeout-ms", flags->postgres_reply_timeout_ms,
                  "PostgreSQL store: give a database session up when no reply came this long "
                  "(a host that stops answering without closing connections): requests then "
                  "answer 503, an append whose commit got no answer 504")
      ->envname("RUNNEL_POSTGRES_REPLY_TIMEOUT_MS")
      ->check(CLI::Range(uint64_t{1000}, uint64_t{3600000}))
      ->capture_default_str();
  cmd->add_option("--scrub-bytes-per-sec", flags->scrub_bytes_per_sec,
                  "log store: re-read and verify sealed segments in the background at most this "
                  "fast, reporting damage by name in the log and /metrics (0: off)")
      ->envname("RUNNEL_SCRUB_BYTES_PER_SEC")
      ->check(Unsigned())
      ->capture_default_str();
  cmd->add_flag("--salvage", flags->salvage,
                "log store: open a data directory whose written data is damaged, skipping the "
                "damaged bytes (each skip is printed; back the directory up first)")
      ->envname("RUNNEL_SALVAGE");
  cmd->add_flag("--webhook-allow-localhost", flags->webhook_allow_localhost,
                "Development only: allow webhook URLs on localhost and 127.0.0.x (http or https)")
      ->envname("RUNNEL_WEBHOOK_ALLOW_LOCALHOST");
  cmd->add_option("--public-url", flags->public_url,
                  "Scheme and authority for URLs the server hands out (callback_url, jwks_url), "
                  "e.g. https://streams.example (default: http:// + the request's Host)")
      ->envname("RUNNEL_PUBLIC_URL");
  cmd->add_option("--public-cache-scope", flags->public_cache_scopes,
                  "A scope (global or tenant:<id>, repeatable) whose catch-up reads are "
                  "Cache-Control: public even when they needed a token; other reads that needed "
                  "one are private, so shared caches never give them to another caller")
      ->envname("RUNNEL_PUBLIC_CACHE_SCOPE")
      ->check([](const std::string& v) -> std::string {
        if (v == "global" || (v.starts_with("tenant:") && v.size() > 7)) return "";
        return "a scope is global or tenant:<id>";
      });
  cmd->add_option("--log-level", flags->log_level,
                  "Lowest level of the log lines written to standard error: error, warn, info "
                  "or debug")
      ->envname("RUNNEL_LOG_LEVEL")
      ->check(CLI::IsMember({"error", "warn", "info", "debug"}))
      ->capture_default_str();
  cmd->add_option("--log-format", flags->log_format,
                  "text (one line per event: time, level, message) or json (one JSON object per "
                  "line), for the log and the access log")
      ->envname("RUNNEL_LOG_FORMAT")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  cmd->add_option(
         "--access-log", flags->access_log,
         "Write one line per request (method, target, protocol, status, bytes, duration) to "
         "this file, appending, or to standard output with '-'")
      ->envname("RUNNEL_ACCESS_LOG");
  cmd->callback([flags] { std::exit(RunServe(*flags)); });
}

}  // namespace runnel::cli
