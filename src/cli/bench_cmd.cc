#include "cli/bench_cmd.h"

#include <unistd.h>

#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/client_commands.h"
#include "cli/http_client.h"
#include "cli/load_driver.h"
#include "cli/terminal_text.h"

namespace runnel::cli {
namespace {

using json = nlohmann::json;

struct BenchArgs {
  std::string url = "http://127.0.0.1:4437";
  std::string token;
  std::string tenant;
  std::string cacert;
  bool json_output = false;
  // append: delete the streams the run created (not those that existed before it).
  bool cleanup = false;
  std::string stream = "bench";
  // append
  int connections = 16;
  int threads = 2;
  double seconds = 10;
  double rate = 0;
  size_t size = 100;
  int streams = 1;
  std::string content_type = "text/plain";
  // read
  int rounds = 5;
  // sse
  int readers = 1000;
  int appends = 50;
  long server_pid = 0;
  // soak
  int writers = 64;
  double warmup = 60;
};

void AddCommon(CLI::App* cmd, BenchArgs* a) {
  cmd->add_option("--url", a->url, "Server URL (http:// or https://)")
      ->envname("RUNNEL_URL")
      ->capture_default_str();
  cmd->add_option("--cacert", a->cacert, "PEM certificates to trust for an https:// URL")
      ->envname("RUNNEL_CACERT");
  cmd->add_option("--token", a->token, "Bearer token for the server")->envname("RUNNEL_TOKEN");
  cmd->add_option("--tenant", a->tenant, "The tenant scope (default: the global scope)")
      ->envname("RUNNEL_TENANT");
  cmd->add_flag("--json", a->json_output, "Machine-readable JSON output");
}

std::string Target(const BenchArgs& a, const std::string& name) {
  const std::string scope =
      a.tenant.empty() ? "/v1/" : "/v1/tenants/" + UrlEncode(a.tenant, false) + "/";
  return scope + "stream/" + UrlEncode(name, true);
}

int Fail(const Status& s) {
  std::fprintf(stderr, "runnel bench: %s\n", TerminalSafe(s.ToString()).c_str());
  switch (s.code()) {
    case StatusCode::kUnavailable: return kExitUnavailable;
    case StatusCode::kInvalidArgument: return kExitUsage;
    case StatusCode::kNotFound: return kExitNotFound;
    default: return kExitFailure;
  }
}

// Creates the stream (idempotent) with `content_type`; an exit code, kExitOk when it exists.
// *created says whether this call created it.
int Create(const BenchArgs& a, const HttpClient& client, const std::string& name, bool* created) {
  auto r = client.Send("PUT", Target(a, name), {{"Content-Type", a.content_type}}, "");
  if (!r.ok()) return Fail(r.status());
  *created = r->status == 201;
  if (r->status == 200 || r->status == 201) return kExitOk;
  std::fprintf(stderr, "runnel bench: creating '%s' answered HTTP %d%s%s\n",
               TerminalSafe(name).c_str(), r->status,
               r->status == 409 ? " (it exists with another content type or "
                                  "configuration; pick another name or --content-type)"
                                : ": ",
               r->status == 409 ? "" : TerminalSafe(r->body).c_str());
  return ExitCodeForHttp(r->status);
}

std::string Body(const BenchArgs& a) {
  const std::string media = a.content_type.substr(0, a.content_type.find(';'));
  if (media == "application/json") {
    // One JSON string of exactly `size` bytes.
    return "\"" + std::string(a.size - 2, 'x') + "\"";
  }
  return std::string(a.size, 'x');
}

std::string Ms(double us) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f ms", us / 1000.0);
  return buf;
}

int Append(const BenchArgs& a) {
  if (a.size < 1 || a.size > load::kMaxBodyBytes) {
    std::fprintf(stderr, "runnel bench: --size must be 1..%zu bytes\n", load::kMaxBodyBytes);
    return kExitUsage;
  }
  if (a.content_type.starts_with("application/json") && a.size < 2) {
    std::fprintf(stderr, "runnel bench: a JSON record needs --size 2 or more\n");
    return kExitUsage;
  }
  if (a.streams < 1 || a.streams > 100000) {
    std::fprintf(stderr, "runnel bench: --streams must be 1..100000\n");
    return kExitUsage;
  }
  auto endpoint = load::ResolveUrl(a.url, a.cacert);
  if (!endpoint.ok()) return Fail(endpoint.status());
  auto client = HttpClient::Create(a.url, a.token, a.cacert);
  if (!client.ok()) return Fail(client.status());
  load::AppendLoad l;
  std::vector<std::string> created;
  // With --cleanup, deletes what this run created, however it ends; the exit code of a failed
  // delete when `rc` was a success.
  auto cleanup = [&a, &client, &created](int rc) {
    if (!a.cleanup) return rc;
    size_t removed = 0;
    for (const std::string& name : created) {
      auto r = client->Send("DELETE", Target(a, name), {});
      if (!r.ok()) return rc == kExitOk ? Fail(r.status()) : rc;
      if (r->status != 204 && r->status != 200) {
        std::fprintf(stderr, "runnel bench: deleting '%s' answered HTTP %d\n",
                     TerminalSafe(name).c_str(), r->status);
        return rc == kExitOk ? ExitCodeForHttp(r->status) : rc;
      }
      ++removed;
    }
    if (!a.json_output) std::printf("removed   %zu streams this run created\n", removed);
    return rc;
  };
  for (int i = 0; i < a.streams; ++i) {
    const std::string name = a.streams == 1 ? a.stream : a.stream + "-" + std::to_string(i);
    bool made = false;
    if (int rc = Create(a, *client, name, &made); rc != kExitOk) return cleanup(rc);
    if (made) created.push_back(name);
    l.targets.push_back(Target(a, name));
  }
  l.content_type = a.content_type;
  l.body = Body(a);
  l.token = a.token;
  l.connections = a.connections;
  l.threads = a.threads;
  l.seconds = a.seconds;
  l.rate = a.rate;
  const bool progress = !a.json_output && ::isatty(::fileno(stderr)) == 1;
  if (progress) {
    l.progress = [](double seconds, uint64_t acked) {
      std::fprintf(stderr, "\r%5.0f s: %llu appended (%.0f/s)   ", seconds,
                   static_cast<unsigned long long>(acked), static_cast<double>(acked) / seconds);
    };
  }
  auto f = load::RunAppends(*endpoint, l);
  if (progress) std::fprintf(stderr, "\r%50s\r", "");
  if (!f.ok()) return cleanup(Fail(f.status()));
  const double rate = f->seconds > 0 ? static_cast<double>(f->acknowledged) / f->seconds : 0;
  const double mb = rate * static_cast<double>(a.size) / 1e6;
  json statuses = json::object();
  for (const auto& [status, n] : f->statuses) {
    statuses[status == 0 ? "connection" : std::to_string(status)] = n;
  }
  if (a.json_output) {
    std::printf("%s\n", json({{"ok", f->failed == 0},
                              {"appends", f->acknowledged},
                              {"failed", f->failed},
                              {"failures", statuses},
                              {"seconds", f->seconds},
                              {"appends_per_s", rate},
                              {"mb_per_s", mb},
                              {"p50_ms", load::Quantile(f->latency_us, 0.5) / 1000},
                              {"p90_ms", load::Quantile(f->latency_us, 0.9) / 1000},
                              {"p99_ms", load::Quantile(f->latency_us, 0.99) / 1000},
                              {"max_ms", load::Quantile(f->latency_us, 1.0) / 1000},
                              {"connections", a.connections},
                              {"rate", a.rate},
                              {"unsent", f->unsent},
                              {"streams", a.streams},
                              {"removed_streams", a.cleanup ? created.size() : 0},
                              {"size", a.size}})
                            .dump()
                            .c_str());
  } else {
    std::printf("%d connections, %zu-byte %s records, %d stream%s, %.1f s", a.connections, a.size,
                TerminalSafe(a.content_type).c_str(), a.streams, a.streams == 1 ? "" : "s",
                a.seconds);
    if (a.rate > 0) {
      std::printf(", %.0f appends/s scheduled (latency from when each was due)", a.rate);
    }
    std::printf("\n");
    std::printf("appended  %llu in %.2f s: %.0f/s, %.1f MB/s\n",
                static_cast<unsigned long long>(f->acknowledged), f->seconds, rate, mb);
    std::printf("latency   p50 %s  p90 %s  p99 %s  max %s\n",
                Ms(load::Quantile(f->latency_us, 0.5)).c_str(),
                Ms(load::Quantile(f->latency_us, 0.9)).c_str(),
                Ms(load::Quantile(f->latency_us, 0.99)).c_str(),
                Ms(load::Quantile(f->latency_us, 1.0)).c_str());
    if (a.rate > 0) {
      std::printf("unsent    %llu%s\n", static_cast<unsigned long long>(f->unsent),
                  f->unsent ? " (due before the end, not sent: the server fell behind)" : "");
    }
    std::printf("failed    %llu%s%s\n", static_cast<unsigned long long>(f->failed),
                f->failed ? " " : "", f->failed ? statuses.dump().c_str() : "");
  }
  return cleanup(f->failed == 0 ? kExitOk : kExitFailure);
}

int Read(const BenchArgs& a) {
  auto endpoint = load::ResolveUrl(a.url, a.cacert);
  if (!endpoint.ok()) return Fail(endpoint.status());
  auto f = load::RunCatchup(*endpoint, Target(a, a.stream), a.token, a.rounds);
  if (!f.ok()) return Fail(f.status());
  const double mb = f->seconds > 0 ? static_cast<double>(f->bytes) / 1e6 / f->seconds : 0;
  if (a.json_output) {
    std::printf("%s\n", json({{"ok", true},
                              {"bytes", f->bytes},
                              {"rounds", a.rounds},
                              {"seconds", f->seconds},
                              {"mb_per_s", mb}})
                            .dump()
                            .c_str());
  } else {
    std::printf("read %llu bytes (%d rounds, after one warm-up) in %.3f s: %.1f MB/s\n",
                static_cast<unsigned long long>(f->bytes), a.rounds, f->seconds, mb);
  }
  return kExitOk;
}

int Sse(const BenchArgs& a) {
  auto endpoint = load::ResolveUrl(a.url, a.cacert);
  if (!endpoint.ok()) return Fail(endpoint.status());
  load::FanoutLoad l;
  l.target = Target(a, a.stream);
  l.token = a.token;
  l.readers = a.readers;
  l.appends = a.appends;
  l.threads = a.threads;
  l.server_pid = a.server_pid;
  auto f = load::RunFanout(*endpoint, l);
  if (!f.ok()) return Fail(f.status());
  const bool all = f->failed == 0 && f->delivered == f->expected;
  const double p50 = load::Quantile(f->latency_ms, 0.5);
  const double p99 = load::Quantile(f->latency_ms, 0.99);
  const double max = load::Quantile(f->latency_ms, 1.0);
  if (a.json_output) {
    std::printf("%s\n", json({{"ok", all},
                              {"readers", f->readers},
                              {"failed", f->failed},
                              {"complete", f->complete},
                              {"delivered", f->delivered},
                              {"expected", f->expected},
                              {"p50_ms", p50},
                              {"p99_ms", p99},
                              {"max_ms", max},
                              {"open_s", f->open_s},
                              {"rss_before_mb", f->rss_before_mb},
                              {"rss_idle_mb", f->rss_idle_mb},
                              {"rss_mb", f->rss_mb},
                              {"server_cpu_ms_per_append", f->server_cpu_ms_per_append},
                              {"load_cpu_ms_per_append", f->load_cpu_ms_per_append}})
                            .dump()
                            .c_str());
  } else {
    std::printf("readers    %d (%llu failed), opened in %.1f s\n", f->readers,
                static_cast<unsigned long long>(f->failed), f->open_s);
    std::printf("delivered  %llu of %llu; %d readers saw all %d appends\n",
                static_cast<unsigned long long>(f->delivered),
                static_cast<unsigned long long>(f->expected), f->complete, a.appends);
    std::printf("latency    p50 %.1f ms  p99 %.1f ms  max %.1f ms\n", p50, p99, max);
    if (a.server_pid > 0) {
      std::printf(
          "server     RSS %.0f MB before, %.0f MB with the readers, %.0f MB after; "
          "%.1f ms CPU per append\n",
          f->rss_before_mb, f->rss_idle_mb, f->rss_mb, f->server_cpu_ms_per_append);
    }
  }
  return all ? kExitOk : kExitFailure;
}

int Soak(const BenchArgs& a) {
  auto endpoint = load::ResolveUrl(a.url, a.cacert);
  if (!endpoint.ok()) return Fail(endpoint.status());
  load::SoakLoad l;
  l.target = Target(a, a.stream);
  l.token = a.token;
  l.readers = a.readers;
  l.writers = a.writers;
  l.rate = a.rate;
  l.seconds = a.seconds;
  l.warmup_seconds = a.warmup;
  l.threads = a.threads;
  l.server_pid = a.server_pid;
  if (!a.json_output) {
    l.progress = [](double seconds, double rss_mb) {
      if (static_cast<int>(seconds) % 30 == 0) {
        std::fprintf(stderr, "runnel bench soak: %.0f s, server RSS %.0f MB\n", seconds, rss_mb);
      }
    };
  }
  auto f = load::RunSoak(*endpoint, l);
  if (!f.ok()) return Fail(f.status());
  const double growth =
      f->rss_warm_mb > 0 ? 100.0 * (f->rss_last_mb - f->rss_warm_mb) / f->rss_warm_mb : -1;
  const bool all = f->failed == 0 && f->append_failures == 0 && f->complete == f->readers;
  if (a.json_output) {
    std::printf("%s\n", json({{"ok", all},
                              {"readers", f->readers},
                              {"failed", f->failed},
                              {"complete", f->complete},
                              {"extra", f->extra},
                              {"reconnects", f->reconnects},
                              {"appended", f->appended},
                              {"append_failures", f->append_failures},
                              {"delivered", f->delivered},
                              {"seconds", f->seconds},
                              {"rss_warm_mb", f->rss_warm_mb},
                              {"rss_last_mb", f->rss_last_mb},
                              {"rss_max_mb", f->rss_max_mb},
                              {"rss_end_mb", f->rss_end_mb},
                              {"rss_growth_pct", growth},
                              {"server_cpu_ms_per_append", f->server_cpu_ms_per_append}})
                            .dump()
                            .c_str());
  } else {
    std::printf(
        "readers    %d (%llu cut off); %llu responses resumed after the server ended them\n",
        f->readers, static_cast<unsigned long long>(f->failed),
        static_cast<unsigned long long>(f->reconnects));
    std::printf("appends    %llu acknowledged, %llu failed, in %.0f s\n",
                static_cast<unsigned long long>(f->appended),
                static_cast<unsigned long long>(f->append_failures), f->seconds);
    std::printf("delivered  %llu; %d readers saw every append exactly once, %d saw more\n",
                static_cast<unsigned long long>(f->delivered), f->complete, f->extra);
    if (a.server_pid > 0) {
      std::printf(
          "server     RSS (means) %.1f MB just after the warm-up, %.1f MB at the end of the run "
          "(%+.1f%%); %.0f MB at most; %.1f ms CPU per append\n",
          f->rss_warm_mb, f->rss_last_mb, growth, f->rss_max_mb, f->server_cpu_ms_per_append);
    }
  }
  return all ? kExitOk : kExitFailure;
}

}  // namespace

void AddBenchCommand(CLI::App& app, int* exit_code) {
  auto* bench = app.add_subcommand("bench", "Measure a running server (appends, reads, SSE)");
  bench->require_subcommand(1);
  {
    auto a = std::make_shared<BenchArgs>();
    auto* cmd = bench->add_subcommand(
        "append", "Concurrent appends for a while: appends/s, MB/s and latency percentiles");
    AddCommon(cmd, a.get());
    cmd->add_option("stream", a->stream,
                    "Stream name (created if missing); with --streams N, "
                    "the streams NAME-0 .. NAME-(N-1)")
        ->capture_default_str();
    cmd->add_option("-c,--connections", a->connections, "Connections, one append in flight each")
        ->check(CLI::Range(1, load::kMaxConnections))
        ->capture_default_str();
    cmd->add_option("-s,--seconds", a->seconds, "How long to append")
        ->check(CLI::Range(0.1, load::kMaxSeconds))
        ->capture_default_str();
    cmd->add_option("--size", a->size, "Bytes per record")->capture_default_str();
    cmd->add_option("--streams", a->streams,
                    "Spread the appends over this many streams (each connection appends to its "
                    "share of them in turn, so every stream is written)")
        ->capture_default_str();
    cmd->add_flag("--cleanup", a->cleanup,
                  "Delete the streams this run created when it ends (streams that existed "
                  "before are kept)");
    cmd->add_option("-t,--content-type", a->content_type,
                    "Content type of the streams (application/json sends JSON strings)")
        ->capture_default_str();
    cmd->add_option("--rate", a->rate,
                    "Appends per second over all connections, on a fixed schedule (latency "
                    "counted from when each was due); 0: each connection appends again as soon "
                    "as it is answered")
        ->check(CLI::Range(0.0, 10000000.0))
        ->capture_default_str();
    cmd->add_option("--threads", a->threads, "Driver threads")
        ->check(CLI::Range(1, load::kMaxThreads))
        ->capture_default_str();
    cmd->callback([a, exit_code] { *exit_code = Append(*a); });
  }
  {
    auto a = std::make_shared<BenchArgs>();
    auto* cmd = bench->add_subcommand("read", "Catch-up reads of a whole stream: MB/s");
    AddCommon(cmd, a.get());
    cmd->add_option("stream", a->stream, "Stream name")->required();
    cmd->add_option("--rounds", a->rounds, "Whole reads to time, after one warm-up")
        ->check(CLI::Range(1, 1000))
        ->capture_default_str();
    cmd->callback([a, exit_code] { *exit_code = Read(*a); });
  }
  {
    auto a = std::make_shared<BenchArgs>();
    auto* cmd = bench->add_subcommand(
        "sse", "SSE readers at the tail and appends 100 ms apart: delivery latency");
    AddCommon(cmd, a.get());
    cmd->add_option("stream", a->stream, "Stream name (created as text/plain if missing)")
        ->required();
    cmd->add_option("--readers", a->readers, "SSE readers")
        ->check(CLI::Range(1, 100000))
        ->capture_default_str();
    cmd->add_option("--appends", a->appends, "Appends, 100 ms apart")
        ->check(CLI::Range(1, 100000))
        ->capture_default_str();
    cmd->add_option("--threads", a->threads, "Driver threads")
        ->check(CLI::Range(1, load::kMaxThreads))
        ->capture_default_str();
    cmd->add_option("--server-pid", a->server_pid,
                    "Also report this local server process's RSS and CPU per append");
    cmd->callback([a, exit_code] { *exit_code = Sse(*a); });
  }
  {
    auto a = std::make_shared<BenchArgs>();
    a->readers = 10000;
    a->rate = 10;
    a->seconds = 600;
    auto* cmd = bench->add_subcommand(
        "soak",
        "SSE readers following a JSON stream while writers append at a steady rate: every "
        "reader must see every append once; the server's RSS growth after the warm-up");
    AddCommon(cmd, a.get());
    cmd->add_option("stream", a->stream, "Stream name (created as application/json if missing)")
        ->required();
    cmd->add_option("--readers", a->readers, "SSE readers")
        ->check(CLI::Range(1, 100000))
        ->capture_default_str();
    cmd->add_option("--writers", a->writers, "Writer connections")
        ->check(CLI::Range(1, load::kMaxConnections))
        ->capture_default_str();
    cmd->add_option("--rate", a->rate, "Appends per second over all writers")
        ->check(CLI::Range(0.1, 100000.0))
        ->capture_default_str();
    cmd->add_option("--seconds", a->seconds, "How long the writers append")
        ->check(CLI::Range(1.0, load::kMaxSeconds))
        ->capture_default_str();
    cmd->add_option("--warmup", a->warmup, "Seconds before RSS growth is measured")
        ->check(CLI::Range(0.0, load::kMaxSeconds))
        ->capture_default_str();
    cmd->add_option("--threads", a->threads, "Reader threads")
        ->check(CLI::Range(1, load::kMaxThreads))
        ->capture_default_str();
    cmd->add_option("--server-pid", a->server_pid,
                    "Sample this local server process's RSS and CPU per append");
    cmd->callback([a, exit_code] { *exit_code = Soak(*a); });
  }
}

}  // namespace runnel::cli
