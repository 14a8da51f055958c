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
# Next to each append cell's requests/s, a second table shows what each server's CPU spent per
# acknowledged request: user+system time of the server process and all its threads (for nginx,
# the master and its workers) read from /proc/<pid>/stat before and after the cell, divided by
# the 2xx answers wrk counted, and each figure's ratio to nginx's (a static 204) in the same
# round. runnel runs twice: `runnel` is the log store with fsync durability (the defaults),
# `runnel_mem` the memory store.
#
# Usage: bench/http/compare.sh RUNNEL_BINARY [DURATION_SECONDS] [SSE_READERS]
#
# Environment, for quicker runs while iterating:
#   BENCH_ROUNDS=N        rounds of the append cells (default 3)
#   BENCH_ONLY=append     only the append cells (no create, catch-up, poll or SSE cells)
#   BENCH_SERVERS=a,b     only these servers (runnel, runnel_mem, ref_mem, ref_file, nginx)
#   BENCH_CELLS=a,b       only these append cells (append1_c1, append1_c16, append1_c64,
#                         append10k_c64, append100k_c1000)
set -euo pipefail

binary="$1"
duration="${2:-5}"
sse_readers="${3:-10000}"
rounds="${BENCH_ROUNDS:-3}"
only="${BENCH_ONLY:-all}"
here="$(cd "$(dirname "$0")" && pwd)"
[[ -x "$binary" ]] || { echo "$binary is not built" >&2; exit 2; }
[[ "$rounds" =~ ^[1-9][0-9]?$ ]] || { echo "BENCH_ROUNDS must be 1..99" >&2; exit 2; }
[[ "$only" == all || "$only" == append ]] || { echo "BENCH_ONLY must be all or append" >&2; exit 2; }
# wanted LIST NAME: whether NAME is in the comma-separated LIST (an empty LIST holds every name).
wanted() { [[ -z "$1" || ",$1," == *",$2,"* ]]; }
command -v wrk >/dev/null || { echo "wrk is not installed (scripts/install-deps --bench)" >&2; exit 2; }
command -v node >/dev/null || { echo "node is not installed" >&2; exit 2; }
# 10,000 SSE readers, and the 1,000-connection append cell, need that many sockets on each side.
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
clk_tck="$(getconf CLK_TCK)"

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
# wrk's report as "RATE ACKNOWLEDGED ERRORS": requests/s, the requests answered 2xx or 3xx, and
# the requests that were not (other statuses, and connect/read/write errors and timeouts).
wrk_summary() { awk '
  /Requests\/sec/ { rate = $2 }
  / requests in / { total = $1 }
  /Non-2xx or 3xx responses:/ { bad = $NF }
  /Socket errors:/ { gsub(/,/, ""); errors = $4 + $6 + $8 + $10 }
  END { printf "%.0f %d %d\n", rate, total - bad, bad + errors }'; }
# cpu_ticks PID...: the user+system CPU of these processes, all their threads included (the
# process's own line in /proc sums its threads), in clock ticks.
cpu_ticks() {
  local p total=0 t
  for p in "$@"; do
    t="$(awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$p/stat" 2>/dev/null || echo 0)"
    total=$(( total + t ))
  done
  echo "$total"
}
# rss_kb PID: the process's resident set, KiB.
rss_kb() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status" 2>/dev/null || echo 0; }
declare -A rss_before_wide rss_after_wide
# server_pids NAME: the processes whose CPU is the server's (nginx: the master and its workers).
server_pids() {
  local p="${pid[$1]}"
  echo "$p"
  if [[ "$1" == nginx ]]; then pgrep -P "$p" || true; fi
}
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

# run_wrk_cpu SERVER URL CONNECTIONS SCRIPT [ENV=VALUE...]: like run_wrk, printed as
# "RATE CPU_US_PER_ACKNOWLEDGED_REQUEST ERRORS" with the server's CPU over the run.
run_wrk_cpu() {
  local name="$1" u="$2" c="$3" script="$4"; shift 4
  local threads=$(( c < 2 ? 1 : 2 ))
  local -a pids
  mapfile -t pids < <(server_pids "$name")
  local before after out
  before="$(cpu_ticks "${pids[@]}")"
  out="$(env "$@" wrk -t"$threads" -c"$c" -d"${duration}s" -s "$here/$script" "$u" | wrk_summary)"
  after="$(cpu_ticks "${pids[@]}")"
  local r acked errors
  read -r r acked errors <<<"${out:-0 0 0}"
  awk -v r="$r" -v a="$acked" -v e="$errors" -v t="$(( after - before ))" -v hz="$clk_tck" \
    'BEGIN { printf "%s %.2f %d\n", r, (a > 0 ? t * 1e6 / hz / a : 0), e }'
}

# runnel: the defaults of `runnel serve` (log store, fsync), with room for the SSE readers and
# the 1,000-connection cell; runnel_mem: the same on the memory store.
mkdir -p "$workdir/runnel-data" "$workdir/ref-data"
stream_servers=()  # the ones that speak the protocol
if wanted "${BENCH_SERVERS:-}" runnel; then
  start_server runnel "$binary" serve --listen 127.0.0.1:0 --store log --durability fsync \
    --data "$workdir/runnel-data" --max-connections 20000
  stream_servers+=(runnel)
fi
if wanted "${BENCH_SERVERS:-}" runnel_mem; then
  start_server runnel_mem "$binary" serve --listen 127.0.0.1:0 --store memory \
    --max-connections 20000
  stream_servers+=(runnel_mem)
fi
if wanted "${BENCH_SERVERS:-}" ref_mem || wanted "${BENCH_SERVERS:-}" ref_file; then
  if [[ ! -d "$here/reference/node_modules/@durable-streams/server" ]]; then
    (cd "$here/reference" && npm install --no-audit --no-fund >/dev/null)
  fi
fi
if wanted "${BENCH_SERVERS:-}" ref_mem; then
  start_server ref_mem node "$here/reference/serve.mjs"
  stream_servers+=(ref_mem)
fi
if wanted "${BENCH_SERVERS:-}" ref_file; then
  start_server ref_file node "$here/reference/serve.mjs" "$workdir/ref-data"
  stream_servers+=(ref_file)
fi
names=("${stream_servers[@]}")
if command -v nginx >/dev/null && wanted "${BENCH_SERVERS:-}" nginx; then
  port="$(free_port)"
  mkdir -p "$workdir/nginx"
  cat >"$workdir/nginx/nginx.conf" <<CONF
worker_processes 2;
error_log $workdir/nginx/error.log;
pid $workdir/nginx/nginx.pid;
events { worker_connections 8192; }
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

append_rows=()
for w in append1_c1 append1_c16 append1_c64 append10k_c64 append100k_c1000; do
  wanted "${BENCH_CELLS:-}" "$w" && append_rows+=("$w")
done
# hold_rss SERVER: the memory a connection costs, before any load: 1,000 connections opened to
# the server, each with one append to a stream of the 100,000, then held idle; the RSS before
# and while they are held.
declare -A rss_before_hold rss_during_hold
hold_rss() {
  local name="$1" holder
  rss_before_hold[$name]="$(rss_kb "${pid[$name]}")"
  node "$here/load.mjs" hold "${url[$name]}" /v1/stream/wide 1000 10 >"$workdir/hold-$name" &
  holder=$!
  for _ in $(seq 1 300); do
    grep -q '^held=' "$workdir/hold-$name" 2>/dev/null && break
    sleep 0.1
  done
  sleep 1  # answers written, buffers settled
  rss_during_hold[$name]="$(rss_kb "${pid[$name]}")"
  kill "$holder" 2>/dev/null || true
  wait "$holder" 2>/dev/null || true
}
for name in "${stream_servers[@]}"; do
  for c in 1 16 64; do
    curl -sf -o /dev/null -X PUT -H 'Content-Type: text/plain' "${url[$name]}/v1/stream/one-c$c"
  done
  if wanted "${BENCH_CELLS:-}" append10k_c64; then
    node "$here/load.mjs" create "${url[$name]}" /v1/stream/many 10000 >/dev/null
  fi
  if wanted "${BENCH_CELLS:-}" append100k_c1000; then
    rss_before_wide[$name]="$(rss_kb "${pid[$name]}")"
    node "$here/load.mjs" create "${url[$name]}" /v1/stream/wide 100000 >/dev/null
    rss_after_wide[$name]="$(rss_kb "${pid[$name]}")"
    [[ "$name" == runnel || "$name" == runnel_mem ]] && hold_rss "$name"
  fi
done

# append_cell SERVER WORKLOAD: one timed run of an append cell, as run_wrk_cpu prints it (nginx
# answers every path 204).
append_cell() {
  local n="$1" u="${url[$1]}"
  case "$2" in
    append1_c1) run_wrk_cpu "$n" "$u" 1 append.lua STREAM=/v1/stream/one-c1 ;;
    append1_c16) run_wrk_cpu "$n" "$u" 16 append.lua STREAM=/v1/stream/one-c16 ;;
    append1_c64) run_wrk_cpu "$n" "$u" 64 append.lua STREAM=/v1/stream/one-c64 ;;
    append10k_c64)
      run_wrk_cpu "$n" "$u" 64 append_streams.lua STREAM_PREFIX=/v1/stream/many- STREAMS=10000 ;;
    append100k_c1000)
      run_wrk_cpu "$n" "$u" 1000 append_streams.lua STREAM_PREFIX=/v1/stream/wide- STREAMS=100000 ;;
  esac
}
declare -A cpu_samples  # cpu_samples[server,workload] = CPU us per acknowledged request, by round
declare -A errors       # errors[server,workload] = requests not acknowledged, over all rounds
for (( r = 0; r < rounds; r++ )); do
  for w in "${append_rows[@]}"; do
    order=()
    for (( i = 0; i < ${#names[@]}; i++ )); do order+=("${names[$(( (i + r) % ${#names[@]} ))]}"); done
    for name in "${order[@]}"; do
      read -r rps cpu_us errs <<<"$(append_cell "$name" "$w")"
      samples[$name,$w]+="$rps "
      cpu_samples[$name,$w]+="$cpu_us "
      errors[$name,$w]=$(( ${errors[$name,$w]:-0} + errs ))
    done
  done
done
declare -A cpu  # cpu[server,workload] = the median CPU us per acknowledged request
for name in "${names[@]}"; do
  for w in "${append_rows[@]}"; do
    [[ -n "${samples[$name,$w]:-}" ]] && cell[$name,$w]="$(echo "${samples[$name,$w]}" | median)"
    [[ -n "${cpu_samples[$name,$w]:-}" ]] && cpu[$name,$w]="$(echo "${cpu_samples[$name,$w]}" | median 1)"
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
if [[ "$only" == all ]]; then
  for name in "${stream_servers[@]}"; do measure_server "$name"; done
fi
# Last, with the other servers idle: runnel's SSE fan-out.
if [[ "$only" == all && "$sse_readers" -gt 0 && -n "${pid[runnel]:-}" ]]; then
  sse_line="$("$binary" bench sse --url "${url[runnel]}" sse --readers "$sse_readers" --appends 50 \
    --server-pid "${pid[runnel]}" --json | kv)" || true
fi

ratio() { awk -v a="$1" -v b="$2" 'BEGIN{ if (a == "" || b == "" || b == 0) print "-"; else printf "%.2fx", a/b }'; }
# round_ratios WORKLOAD OTHER [SERVER [cpu]]: SERVER (runnel by default) / OTHER in each round,
# as "1.83 1.71 2.02"; of the CPU per request with `cpu`, else of the requests/s.
round_ratios() {
  local -a a b
  local server="${3:-runnel}"
  if [[ "${4:-}" == cpu ]]; then
    read -r -a a <<<"${cpu_samples[$server,$1]:-}"
    read -r -a b <<<"${cpu_samples[$2,$1]:-}"
  else
    read -r -a a <<<"${samples[$server,$1]:-}"
    read -r -a b <<<"${samples[$2,$1]:-}"
  fi
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
rows=("${append_rows[@]}")
[[ "$only" == all ]] && rows+=(create_c16 catchup_text catchup_json tail_poll_c16)
declare -A label=(
  [append1_c1]="append 100 B, 1 stream, c1 (req/s)"
  [append1_c16]="append 100 B, 1 stream, c16 (req/s)"
  [append1_c64]="append 100 B, 1 stream, c64 (req/s)"
  [append10k_c64]="append 100 B, 10k streams, c64 (req/s)"
  [append100k_c1000]="append 100 B, 100k streams, c1000 (req/s)"
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
  [append100k_c1000]="no errors"
  [create_c16]=">=5000"
  [catchup_text]=">=1000"
  [catchup_json]=">=300"
  [tail_poll_c16]=">=20000"
)
printf "HTTP comparison, %s s per cell; runnel = log store, fsync durability; append cells: median of %s rounds\n" \
  "$duration" "$rounds"
printf "%-42s %10s %10s %10s %10s %10s %8s %8s %8s  %s\n" workload runnel runnel_mem ref_mem \
  ref_file nginx "r/mem" "r/file" "r/nginx" target
for w in "${rows[@]}"; do
  printf "%-42s %10s %10s %10s %10s %10s %8s %8s %8s  %s\n" "${label[$w]}" \
    "${cell[runnel,$w]:--}" "${cell[runnel_mem,$w]:--}" "${cell[ref_mem,$w]:--}" \
    "${cell[ref_file,$w]:--}" "${cell[nginx,$w]:--}" \
    "$(ratio_cell "$w" ref_mem)" "$(ratio_cell "$w" ref_file)" "$(ratio_cell "$w" nginx)" "${target[$w]}"
done
if (( ${#append_rows[@]} > 0 )); then
  echo "Server CPU per acknowledged request (us, user+system, all threads; median of rounds), and"
  echo "the median of the per-round ratios to nginx's CPU per static 204:"
  printf "%-42s %10s %10s %10s %10s %10s %8s %8s  %s\n" workload runnel runnel_mem ref_mem \
    ref_file nginx "r/nginx" "rm/nginx" "target (runnel)"
  for w in "${append_rows[@]}"; do
    cpu_ratio() {
      local m
      m="$(round_ratios "$w" nginx "$1" cpu | median 2)"
      if [[ -n "$m" ]]; then printf "%.2fx" "$m"; else echo "-"; fi
    }
    goal="<=1.2x nginx"
    [[ "$w" == append100k_c1000 ]] && goal="<=1.5x nginx"
    printf "%-42s %10s %10s %10s %10s %10s %8s %8s  %s\n" "${label[$w]%% (*}" \
      "${cpu[runnel,$w]:--}" "${cpu[runnel_mem,$w]:--}" "${cpu[ref_mem,$w]:--}" \
      "${cpu[ref_file,$w]:--}" "${cpu[nginx,$w]:--}" "$(cpu_ratio runnel)" \
      "$(cpu_ratio runnel_mem)" "$goal"
  done
  echo "Per-round ratios (runnel / other, each pair measured seconds apart; cpu: runnel's CPU per"
  echo "request / nginx's):"
  for w in "${append_rows[@]}"; do
    line="  ${label[$w]%% (*}:"
    for other in runnel_mem ref_mem ref_file nginx; do
      rr="$(round_ratios "$w" "$other")"
      [[ -n "${rr// /}" ]] && line+=" $other ${rr% }; "
    done
    rr="$(round_ratios "$w" nginx runnel cpu)"
    [[ -n "${rr// /}" ]] && line+=" cpu ${rr% }; "
    echo "${line%; }"
  done
  failed=""
  for name in "${names[@]}"; do
    for w in "${append_rows[@]}"; do
      (( ${errors[$name,$w]:-0} > 0 )) && failed+=" $name/$w ${errors[$name,$w]};"
    done
  done
  echo "Requests not acknowledged (non-2xx answers and socket errors, all rounds):${failed:- none}"
  if wanted "${BENCH_CELLS:-}" append100k_c1000; then
    echo "Memory (RSS of the server process): per stream, the growth while 100,000 streams were"
    echo "created; per connection, the growth while 1,000 connections were opened, each answered"
    echo "one append and was then held idle (an upper bound: it includes those 1,000 records)"
    echo "(targets: <= 300 B per idle stream, <= 16 KiB per connection):"
    for name in runnel runnel_mem; do
      [[ -n "${rss_after_wide[$name]:-}" ]] || continue
      awk -v n="$name" -v b="${rss_before_wide[$name]}" -v a="${rss_after_wide[$name]}" \
        -v idle="${rss_before_hold[$name]:-0}" -v busy="${rss_during_hold[$name]:-0}" \
        'BEGIN { printf "  %-10s %6.0f B per stream   %6.1f KiB per connection\n", n,
                 (a - b) * 1024 / 100000, (busy - idle) / 1000 }'
    done
  fi
fi
if [[ -n "${sse_line:-}" ]]; then
  echo "SSE fan-out, runnel: $sse_line"
  echo "  (targets: every append delivered to every reader, p99 <= 50 ms, rss <= 300 MB; the"
  echo "   server has served every cell above first: rss_before_mb is what that left, mostly the"
  echo "   log store's in-memory index of the records those cells wrote)"
fi
