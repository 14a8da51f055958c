#!/usr/bin/env bash
# The HTTP comparison: `runnel serve` (log store, fsync durability), the Durable Streams Node
# reference server (reference/, pinned, dev-only) in memory and file-backed, and a static nginx
# endpoint as the HTTP ceiling, on this machine's loopback, side by side in one run, driven by the
# same load tools (wrk for request rates; `runnel bench read|sse` for catch-up reads and SSE
# fan-out, where a Node driver would measure itself; load.mjs to fill streams). Prints one
# table with ratios and the targets. A measurement program, not a test: every cell is bounded by
# DURATION seconds.
#
# All the servers run at once. The append cells, whose targets are ratios, are measured in
# ROUNDS rounds (BENCH_ROUNDS, default 3): each round runs the cell on every server back to
# back, in an order that rotates from round to round, so each ratio compares figures taken
# seconds apart. The table shows each server's median and the median of the per-round ratios;
# a line per cell shows the ratios of every round, so the machine's noise is visible. The other
# cells have absolute targets and run once per server.
#
# Usage: bench/http/compare.sh RUNNEL_BINARY [DURATION_SECONDS] [SSE_READERS]
set -euo pipefail

binary="$1"
duration="${2:-5}"
sse_readers="${3:-10000}"
rounds="${BENCH_ROUNDS:-3}"
here="$(cd "$(dirname "$0")" && pwd)"
[[ -x "$binary" ]] || { echo "$binary is not built" >&2; exit 2; }
[[ "$rounds" =~ ^[1-9][0-9]?$ ]] || { echo "BENCH_ROUNDS must be 1..99" >&2; exit 2; }
command -v wrk >/dev/null || { echo "wrk is not installed (scripts/install-deps --bench)" >&2; exit 2; }
command -v node >/dev/null || { echo "node is not installed" >&2; exit 2; }
# 10,000 SSE readers need 10,000 sockets on each side.
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"

workdir="$(mktemp -d)"
declare -A pid url   # by server name
stop_servers() {
  local name
  for name in "${!pid[@]}"; do
    if kill -0 "${pid[$name]}" 2>/dev/null; then
      kill -TERM "${pid[$name]}" 2>/dev/null || true
      wait "${pid[$name]}" 2>/dev/null || true
    fi
  done
}
trap 'stop_servers; rm -rf "$workdir"' EXIT

# start_server NAME CMD... : starts a server; its URL is the first http:// address it prints.
start_server() {
  local name="$1" log="$workdir/$1.log" found=""; shift
  "$@" >"$log" 2>&1 &
  pid[$name]=$!
  for _ in $(seq 1 150); do
    found="$(grep -o 'http://127\.0\.0\.1:[0-9]*' "$log" | head -n1 || true)"
    [[ -n "$found" ]] && { url[$name]="$found"; return 0; }
    sleep 0.1
  done
  cat "$log" >&2
  return 1
}

free_port() {
  node -e 'const s=require("net").createServer().listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})'
}

declare -A cell     # cell[server,workload] = figure (the median, for the append cells)
declare -A samples  # samples[server,workload] = the figures of every round, space-separated
rate() { awk '/Requests\/sec/ {printf "%.0f", $2}'; }
field() { tr ' ' '\n' | awk -F= -v k="$1" '$1==k {print $2}'; }
# median [DECIMALS]: the median of the positive numbers on stdin (0 decimals by default).
median() { tr ' ' '\n' | awk '$1 + 0 > 0' | sort -g | awk -v d="${1:-0}" '{v[NR] = $1} END {
  if (NR == 0) exit; m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
  printf "%.*f\n", d, m }'; }
# `runnel bench ... --json` output as one key=value line.
kv() { node -e 'const o = JSON.parse(require("fs").readFileSync(0, "utf8"));
  console.log(Object.entries(o).map(([k, v]) => k + "=" + (typeof v === "number" ? +v.toFixed(1) : v)).join(" "))'; }

run_wrk() {  # run_wrk URL CONNECTIONS SCRIPT [ENV=VALUE...]
  local u="$1" c="$2" script="$3"; shift 3
  local threads=$(( c < 2 ? 1 : 2 ))
  local r
  r="$(env "$@" wrk -t"$threads" -c"$c" -d"${duration}s" -s "$here/$script" "$u" | rate)"
  echo "${r:-0}"  # 0: wrk failed or counted nothing
}

# runnel: the defaults of `runnel serve` (log store, fsync), with room for the SSE readers.
mkdir -p "$workdir/runnel-data" "$workdir/ref-data"
start_server runnel "$binary" serve --listen 127.0.0.1:0 --store log --durability fsync \
  --data "$workdir/runnel-data" --max-connections 20000
if [[ ! -d "$here/reference/node_modules/@durable-streams/server" ]]; then
  (cd "$here/reference" && npm install --no-audit --no-fund >/dev/null)
fi
start_server ref_mem node "$here/reference/serve.mjs"
start_server ref_file node "$here/reference/serve.mjs" "$workdir/ref-data"
stream_servers=(runnel ref_mem ref_file)  # the ones that speak the protocol
names=("${stream_servers[@]}")
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
  start_server nginx sh -c \
    "echo http://127.0.0.1:$port; exec nginx -e stderr -p '$workdir/nginx' -c '$workdir/nginx/nginx.conf' -g 'daemon off;'"
  sleep 0.3
  names+=(nginx)
fi

for name in "${stream_servers[@]}"; do
  for c in 1 16 64; do
    curl -sf -o /dev/null -X PUT -H 'Content-Type: text/plain' "${url[$name]}/v1/stream/one-c$c"
  done
  node "$here/load.mjs" create "${url[$name]}" /v1/stream/many 10000 >/dev/null
done

# append_cell SERVER WORKLOAD: one timed run of an append cell (nginx answers every path 204).
append_cell() {
  local u="${url[$1]}"
  case "$2" in
    append1_c1) run_wrk "$u" 1 append.lua STREAM=/v1/stream/one-c1 ;;
    append1_c16) run_wrk "$u" 16 append.lua STREAM=/v1/stream/one-c16 ;;
    append1_c64) run_wrk "$u" 64 append.lua STREAM=/v1/stream/one-c64 ;;
    append10k_c64) run_wrk "$u" 64 append_streams.lua STREAM_PREFIX=/v1/stream/many- STREAMS=10000 ;;
  esac
}
append_rows=(append1_c1 append1_c16 append1_c64 append10k_c64)
for (( r = 0; r < rounds; r++ )); do
  for w in "${append_rows[@]}"; do
    order=()
    for (( i = 0; i < ${#names[@]}; i++ )); do order+=("${names[$(( (i + r) % ${#names[@]} ))]}"); done
    for name in "${order[@]}"; do
      [[ "$name" == nginx && "$w" == append10k_c64 ]] && continue
      samples[$name,$w]+="$(append_cell "$name" "$w") "
    done
  done
done
for name in "${names[@]}"; do
  for w in "${append_rows[@]}"; do
    [[ -n "${samples[$name,$w]:-}" ]] && cell[$name,$w]="$(echo "${samples[$name,$w]}" | median)"
  done
done

measure_server() {
  local name="$1" load="node $here/load.mjs" u="${url[$1]}"
  cell[$name,create_c16]="$(run_wrk "$u" 16 create.lua)"
  $load fill-text "$u" /v1/stream/text10m 10 >/dev/null
  cell[$name,catchup_text]="$("$binary" bench read --url "$u" text10m --rounds 20 --json | kv | field mb_per_s)"
  $load fill-json "$u" /v1/stream/json100k 100000 >/dev/null
  cell[$name,catchup_json]="$("$binary" bench read --url "$u" json100k --rounds 5 --json | kv | field mb_per_s)"
  local tail
  tail="$($load tail-offset "$u" /v1/stream/json100k)"
  cell[$name,tail_poll_c16]="$(run_wrk "$u" 16 get.lua TARGET="/v1/stream/json100k?offset=$tail")"
}
for name in "${stream_servers[@]}"; do measure_server "$name"; done
# Last, with the other servers idle: runnel's SSE fan-out.
if [[ "$sse_readers" -gt 0 ]]; then
  sse_line="$("$binary" bench sse --url "${url[runnel]}" sse --readers "$sse_readers" --appends 50 \
    --server-pid "${pid[runnel]}" --json | kv)" || true
fi

ratio() { awk -v a="$1" -v b="$2" 'BEGIN{ if (a == "" || b == "" || b == 0) print "-"; else printf "%.2fx", a/b }'; }
# round_ratios WORKLOAD OTHER: runnel / OTHER in each round, as "1.83 1.71 2.02".
round_ratios() {
  local -a a b
  read -r -a a <<<"${samples[runnel,$1]:-}"
  read -r -a b <<<"${samples[$2,$1]:-}"
  local i out=""
  for (( i = 0; i < ${#a[@]} && i < ${#b[@]}; i++ )); do
    out+="$(awk -v x="${a[$i]}" -v y="${b[$i]}" 'BEGIN { if (x > 0 && y > 0) printf "%.2f", x / y; else printf "-" }') "
  done
  echo "$out"
}
# ratio_cell WORKLOAD OTHER: the median of the per-round ratios for the append cells, else the
# ratio of the single figures.
ratio_cell() {
  if [[ -n "${samples[runnel,$1]:-}" ]]; then
    local m
    m="$(round_ratios "$1" "$2" | median 2)"
    if [[ -n "$m" ]]; then printf "%.2fx" "$m"; else echo "-"; fi
  else
    ratio "${cell[runnel,$1]:-}" "${cell[$2,$1]:-}"
  fi
}
rows=("${append_rows[@]}" create_c16 catchup_text catchup_json tail_poll_c16)
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
printf "HTTP comparison, %s s per cell; runnel = log store, fsync durability; append cells: median of %s rounds\n" \
  "$duration" "$rounds"
printf "%-40s %10s %10s %10s %10s %9s %9s %9s  %s\n" workload runnel ref_mem ref_file nginx \
  "r/mem" "r/file" "r/nginx" target
for w in "${rows[@]}"; do
  printf "%-40s %10s %10s %10s %10s %9s %9s %9s  %s\n" "${label[$w]}" \
    "${cell[runnel,$w]:--}" "${cell[ref_mem,$w]:--}" "${cell[ref_file,$w]:--}" "${cell[nginx,$w]:--}" \
    "$(ratio_cell "$w" ref_mem)" "$(ratio_cell "$w" ref_file)" "$(ratio_cell "$w" nginx)" "${target[$w]}"
done
echo "Per-round ratios (runnel / other, each pair measured seconds apart):"
for w in "${append_rows[@]}"; do
  line="  ${label[$w]%% (*}:"
  for other in ref_mem ref_file nginx; do
    rr="$(round_ratios "$w" "$other")"
    [[ -n "${rr// /}" ]] && line+=" $other ${rr% }; "
  done
  echo "${line%; }"
done
if [[ -n "${sse_line:-}" ]]; then
  echo "SSE fan-out, runnel: $sse_line"
  echo "  (targets: every append delivered to every reader, p99 <= 50 ms, rss <= 300 MB; the"
  echo "   server has served every cell above first: rss_before_mb is what that left, mostly the"
  echo "   log store's in-memory index of the records those cells wrote)"
fi
