#!/usr/bin/env bash
# The HTTP comparison: `runnel serve` (log store, fsync durability), the Durable Streams Node
# reference server (reference/, pinned, dev-only) in memory and file-backed, and a static nginx
# endpoint as the HTTP ceiling, on this machine's loopback, side by side in one run, driven by the
# same load tools (wrk for request rates; `runnel bench read|sse` for catch-up reads and SSE
# fan-out, where a Node driver would measure itself; load.mjs to fill streams). Prints one
# table with ratios and the targets. A measurement program, not a test: every cell is bounded by
# DURATION seconds.
#
# Usage: bench/http/compare.sh RUNNEL_BINARY [DURATION_SECONDS] [SSE_READERS]
set -euo pipefail

binary="$1"
duration="${2:-5}"
sse_readers="${3:-10000}"
here="$(cd "$(dirname "$0")" && pwd)"
[[ -x "$binary" ]] || { echo "$binary is not built" >&2; exit 2; }
command -v wrk >/dev/null || { echo "wrk is not installed (scripts/install-deps --bench)" >&2; exit 2; }
command -v node >/dev/null || { echo "node is not installed" >&2; exit 2; }
# 10,000 SSE readers need 10,000 sockets on each side.
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"

workdir="$(mktemp -d)"
server_pid=""
stop_server() {
  if [[ -n "$server_pid" ]] && kill -0 "$server_pid" 2>/dev/null; then
    kill -TERM "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  server_pid=""
}
trap 'stop_server; rm -rf "$workdir"' EXIT

# start_server LOG CMD... : starts a server, sets $url from the first http:// address it prints.
start_server() {
  local log="$1"; shift
  "$@" >"$log" 2>&1 &
  server_pid=$!
  url=""
  for _ in $(seq 1 150); do
    url="$(grep -o 'http://127\.0\.0\.1:[0-9]*' "$log" | head -n1 || true)"
    [[ -n "$url" ]] && return 0
    sleep 0.1
  done
  cat "$log" >&2
  return 1
}

free_port() {
  node -e 'const s=require("net").createServer().listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})'
}

declare -A cell   # cell[server,workload] = figure
rate() { awk '/Requests\/sec/ {printf "%.0f", $2}'; }
field() { tr ' ' '\n' | awk -F= -v k="$1" '$1==k {print $2}'; }
# `runnel bench ... --json` output as one key=value line.
kv() { node -e 'const o = JSON.parse(require("fs").readFileSync(0, "utf8"));
  console.log(Object.entries(o).map(([k, v]) => k + "=" + (typeof v === "number" ? +v.toFixed(1) : v)).join(" "))'; }

run_wrk() {  # run_wrk CONNECTIONS SCRIPT [ENV=VALUE...]
  local c="$1" script="$2"; shift 2
  local threads=$(( c < 2 ? 1 : 2 ))
  env "$@" wrk -t"$threads" -c"$c" -d"${duration}s" -s "$here/$script" "$url" | rate
}

measure_server() {
  local name="$1" pid="$2" load="node $here/load.mjs"
  for c in 1 16 64; do
    curl -sf -o /dev/null -X PUT -H 'Content-Type: text/plain' "$url/v1/stream/one-c$c"
    cell[$name,append1_c$c]="$(run_wrk "$c" append.lua STREAM="/v1/stream/one-c$c")"
  done
  $load create "$url" /v1/stream/many 10000 >/dev/null
  cell[$name,append10k_c64]="$(run_wrk 64 append_streams.lua STREAM_PREFIX=/v1/stream/many- STREAMS=10000)"
  cell[$name,create_c16]="$(run_wrk 16 create.lua)"
  $load fill-text "$url" /v1/stream/text10m 10 >/dev/null
  cell[$name,catchup_text]="$("$binary" bench read --url "$url" text10m --rounds 20 --json | kv | field mb_per_s)"
  $load fill-json "$url" /v1/stream/json100k 100000 >/dev/null
  cell[$name,catchup_json]="$("$binary" bench read --url "$url" json100k --rounds 5 --json | kv | field mb_per_s)"
  local tail
  tail="$($load tail-offset "$url" /v1/stream/json100k)"
  cell[$name,tail_poll_c16]="$(run_wrk 16 get.lua TARGET="/v1/stream/json100k?offset=$tail")"
  if [[ "$name" == runnel && "$sse_readers" -gt 0 ]]; then
    sse_line="$("$binary" bench sse --url "$url" sse --readers "$sse_readers" --appends 50 \
      --server-pid "$pid" --json | kv)" || true
  fi
}

# runnel: the defaults of `runnel serve` (log store, fsync), with room for the SSE readers.
mkdir -p "$workdir/runnel-data"
start_server "$workdir/runnel.log" "$binary" serve --listen 127.0.0.1:0 --store log \
  --durability fsync --data "$workdir/runnel-data" --max-connections 20000
measure_server runnel "$server_pid"
stop_server

names=(runnel)
if [[ ! -d "$here/reference/node_modules/@durable-streams/server" ]]; then
  (cd "$here/reference" && npm install --no-audit --no-fund >/dev/null)
fi
start_server "$workdir/ref-mem.log" node "$here/reference/serve.mjs"
measure_server ref_mem "$server_pid"
stop_server
mkdir -p "$workdir/ref-data"
start_server "$workdir/ref-file.log" node "$here/reference/serve.mjs" "$workdir/ref-data"
measure_server ref_file "$server_pid"
stop_server
names+=(ref_mem ref_file)

if command -v nginx >/dev/null; then
  port="$(free_port)"
  mkdir -p "$workdir/nginx"
  cat >"$workdir/nginx/nginx.conf" <<CONF
worker_processes 2;
error_log $workdir/nginx/error.log;
pid $workdir/nginx/nginx.pid;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $workdir/nginx/body;
  server {
    listen 127.0.0.1:$port;
    location / { return 204; }
  }
}
CONF
  start_server "$workdir/nginx.log" sh -c \
    "echo http://127.0.0.1:$port; exec nginx -e stderr -p '$workdir/nginx' -c '$workdir/nginx/nginx.conf' -g 'daemon off;'"
  sleep 0.3
  for c in 1 16 64; do cell[nginx,append1_c$c]="$(run_wrk "$c" append.lua)"; done
  stop_server
  names+=(nginx)
fi

ratio() { awk -v a="$1" -v b="$2" 'BEGIN{ if (a == "" || b == "" || b == 0) print "-"; else printf "%.2fx", a/b }'; }
rows=(append1_c1 append1_c16 append1_c64 append10k_c64 create_c16 catchup_text catchup_json tail_poll_c16)
declare -A label=(
  [append1_c1]="append 100 B, 1 stream, c1 (req/s)"
  [append1_c16]="append 100 B, 1 stream, c16 (req/s)"
  [append1_c64]="append 100 B, 1 stream, c64 (req/s)"
  [append10k_c64]="append 100 B, 10k streams, c64 (req/s)"
  [create_c16]="create stream, c16 (PUT/s)"
  [catchup_text]="catch-up 10 MB text (MB/s)"
  [catchup_json]="catch-up 100k JSON msgs (MB/s)"
  [tail_poll_c16]="poll at tail, 100k msgs, c16 (req/s)"
)
declare -A target=(
  [append1_c1]=">=2x mem, >=10x file"
  [append1_c16]=">=2x mem, >=10x file"
  [append1_c64]=">=2x mem, >=10x file, >=50% nginx"
  [append10k_c64]=">=2x mem, >=10x file"
  [create_c16]=">=5000"
  [catchup_text]=">=1000"
  [catchup_json]=">=300"
  [tail_poll_c16]=">=20000"
)
printf "HTTP comparison, %s s per cell; runnel = log store, fsync durability\n" "$duration"
printf "%-40s %10s %10s %10s %10s %9s %9s %9s  %s\n" workload runnel ref_mem ref_file nginx \
  "r/mem" "r/file" "r/nginx" target
for w in "${rows[@]}"; do
  printf "%-40s %10s %10s %10s %10s %9s %9s %9s  %s\n" "${label[$w]}" \
    "${cell[runnel,$w]:--}" "${cell[ref_mem,$w]:--}" "${cell[ref_file,$w]:--}" "${cell[nginx,$w]:--}" \
    "$(ratio "${cell[runnel,$w]:-}" "${cell[ref_mem,$w]:-}")" \
    "$(ratio "${cell[runnel,$w]:-}" "${cell[ref_file,$w]:-}")" \
    "$(ratio "${cell[runnel,$w]:-}" "${cell[nginx,$w]:-}")" "${target[$w]}"
done
if [[ -n "${sse_line:-}" ]]; then
  echo "SSE fan-out, runnel: $sse_line"
  echo "  (targets: every append delivered to every reader, p99 <= 50 ms, rss <= 300 MB; the"
  echo "   server has served every cell above first: rss_before_mb is what that left, mostly the"
  echo "   log store's in-memory index of the records those cells wrote)"
fi
