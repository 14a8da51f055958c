#!/usr/bin/env bash
# The server's log lines (base/log.h) and access log (server/access_log.h), end to end:
# - text: every line of `runnel serve` has the one shape "TIME LEVEL message";
# - --log-level warn drops the info lines (the start-up lines) and keeps serving;
# - --log-level error keeps an error line;
# - --log-format json: every line is a JSON object with time, level and msg;
# - --access-log: one line per request with method, target, protocol, status, bytes and duration,
#   as text to a file and as JSON to standard output ('-'), the SSE request's line once it ended;
#   requests over HTTP/2 (h2c with prior knowledge, and an h2c Upgrade) have the same lines, with
#   the protocol HTTP/2.
# Usage: log_format_e2e.sh RUNNEL_BINARY
set -euo pipefail
R="$1"
source "$(dirname "$0")/e2e_lib.sh"
command -v node >/dev/null || fail "node is needed to check JSON lines (scripts/install-deps installs it)"
command -v curl >/dev/null || fail "curl is needed"

# Sends the same eight requests each time: create, append, catch-up read, a 404 and a short SSE
# over HTTP/1.1; then over HTTP/2 a catch-up read, a short SSE (both h2c with prior knowledge)
# and a read on a connection that upgrades to h2c.
requests() {
  curl -sS -o /dev/null -X PUT -H 'Content-Type: application/json' "$RUNNEL_URL/v1/stream/logs"
  curl -sS -o /dev/null -X POST -H 'Content-Type: application/json' -d '[{"a":1}]' \
    "$RUNNEL_URL/v1/stream/logs"
  curl -sS -o /dev/null "$RUNNEL_URL/v1/stream/logs?offset=-1"
  curl -sS -o /dev/null "$RUNNEL_URL/v1/stream/missing"
  curl -sS -o /dev/null --max-time 5 "$RUNNEL_URL/v1/stream/logs?offset=-1&live=sse" || true
  local v
  v="$(curl -sS -o /dev/null -w '%{http_version}' --http2-prior-knowledge \
    "$RUNNEL_URL/v1/stream/logs?offset=-1&h2=1")"
  expect_eq "$v" "2" "the HTTP version curl used with prior knowledge"
  curl -sS -o /dev/null --http2-prior-knowledge --max-time 5 \
    "$RUNNEL_URL/v1/stream/logs?offset=-1&live=sse&h2=1" || true
  v="$(curl -sS -o /dev/null -w '%{http_version}' --http2 "$RUNNEL_URL/v1/stream/logs?offset=-1&up=1")"
  expect_eq "$v" "2" "the HTTP version after the h2c Upgrade"
}

text_line='^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z (ERROR|WARN|INFO|DEBUG) '
access_line='^[0-9T:.-]+Z ACCESS [A-Z]+ /[^ ]* HTTP/(1\.1|2) [0-9]{3} [0-9]+ [0-9]+\.[0-9]{3}ms$'

# 1. Text lines and a text access log in a file.
serve_on_free_port --store memory --sse-max-duration-ms 300 --access-log "$workdir/access.log"
requests
stop_server
log="$(cat "$workdir/server.log")"
expect_has "$log" " INFO listening on $RUNNEL_URL" "the listening line"
expect_has "$log" " INFO stopped" "the stop line"
bad="$(grep -Ev "$text_line" "$workdir/server.log" || true)"
expect_eq "$bad" "" "lines not in the text shape"
expect_eq "$(wc -l <"$workdir/access.log")" "8" "access log lines"
bad="$(grep -Ev "$access_line" "$workdir/access.log" || true)"
expect_eq "$bad" "" "access lines not in the text shape"
expect_has "$(sed -n 1p "$workdir/access.log")" " ACCESS PUT /v1/stream/logs HTTP/1.1 201 0 " "create"
expect_has "$(sed -n 2p "$workdir/access.log")" " ACCESS POST /v1/stream/logs HTTP/1.1 204 0 " "append"
expect_has "$(sed -n 3p "$workdir/access.log")" " ACCESS GET /v1/stream/logs?offset=-1 HTTP/1.1 200 9 " \
  "read"
expect_has "$(sed -n 4p "$workdir/access.log")" " ACCESS GET /v1/stream/missing HTTP/1.1 404 " "404"
expect_has "$(sed -n 6p "$workdir/access.log")" \
  " ACCESS GET /v1/stream/logs?offset=-1&h2=1 HTTP/2 200 9 " "the read over HTTP/2"
expect_has "$(sed -n 8p "$workdir/access.log")" \
  " ACCESS GET /v1/stream/logs?offset=-1&up=1 HTTP/2 200 9 " "the read after the h2c Upgrade"
# The SSE lines are written when the response ended (after --sse-max-duration-ms), with its bytes.
for n in 5 7; do
  sse="$(sed -n "${n}p" "$workdir/access.log")"
  if [[ $n == 5 ]]; then
    expect_has "$sse" " ACCESS GET /v1/stream/logs?offset=-1&live=sse HTTP/1.1 200 " "sse"
  else
    expect_has "$sse" " ACCESS GET /v1/stream/logs?offset=-1&live=sse&h2=1 HTTP/2 200 " "h2 sse"
  fi
  sse_ms="$(sed -E 's/.* ([0-9]+)\.[0-9]{3}ms$/\1/' <<<"$sse")"
  sse_bytes="$(awk '{print $(NF-1)}' <<<"$sse")"
  [[ "$sse_ms" -ge 250 ]] || fail "the SSE line took ${sse_ms} ms, not the whole response: $sse"
  [[ "$sse_bytes" -gt 0 ]] || fail "the SSE line counts no bytes: $sse"
done

# 2. --log-level warn: no info line, and the server still runs; error keeps errors.
"$R" serve --listen 127.0.0.1:0 --store memory --log-level warn >"$workdir/warn.log" 2>&1 &
server_pid=$!
sleep 1
kill -0 "$server_pid" || fail "the server with --log-level warn did not keep running"
stop_server
expect_eq "$(cat "$workdir/warn.log")" "" "output at --log-level warn"
out="$("$R" serve --listen 127.0.0.1:0 --store memory --durability bad --log-level error 2>&1 || true)"
[[ "$out" =~ $text_line ]] || fail "the error line is not in the text shape: $out"
expect_has "$out" " ERROR --durability must be fsync" "the error at --log-level error"
out="$("$R" serve --log-level verbose 2>&1 || true)"
expect_has "$out" "--log-level" "an unknown level is a usage error"

# 3. JSON lines, and a JSON access log on standard output.
serve_on_free_port --store memory --sse-max-duration-ms 300 --log-format json --access-log -
requests
stop_server
node -e '
  const lines = require("fs").readFileSync(process.argv[1], "utf8").split("\n").filter(Boolean);
  let logs = 0, access = [];
  for (const line of lines) {
    const j = JSON.parse(line);  // throws: the test fails
    if ("msg" in j) {
      if (typeof j.time !== "string" || !/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/.test(j.time))
        throw new Error("bad time: " + line);
      if (!["error", "warn", "info", "debug"].includes(j.level)) throw new Error("bad level: " + line);
      logs++;
    } else {
      for (const k of ["time", "method", "target", "protocol", "status", "bytes", "duration_ms"])
        if (!(k in j)) throw new Error("access line without " + k + ": " + line);
      access.push(j);
    }
  }
  if (logs < 3) throw new Error("only " + logs + " log lines");
  const got =
    access.map((a) => a.method + " " + a.target + " " + a.protocol + " " + a.status).join("; ");
  const want = "PUT /v1/stream/logs HTTP/1.1 201; POST /v1/stream/logs HTTP/1.1 204; " +
    "GET /v1/stream/logs?offset=-1 HTTP/1.1 200; GET /v1/stream/missing HTTP/1.1 404; " +
    "GET /v1/stream/logs?offset=-1&live=sse HTTP/1.1 200; GET /v1/stream/logs?offset=-1&h2=1 HTTP/2 200; " +
    "GET /v1/stream/logs?offset=-1&live=sse&h2=1 HTTP/2 200; GET /v1/stream/logs?offset=-1&up=1 HTTP/2 200";
  if (got !== want) throw new Error("access lines: " + got);
  console.log("log_format_e2e: " + logs + " JSON log lines, " + access.length + " JSON access lines");
' "$workdir/server.log" || fail "the JSON lines (above)"

echo "log_format_e2e: passed"
