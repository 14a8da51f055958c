#!/usr/bin/env bash
# 100-byte appends to one stream, driven by wrk (Debian package wrk) at 1, 16 and 64
# connections, side by side in one run: `runnel serve` and, when Node.js is available, the
# Durable Streams Node reference server (reference/, pinned, dev-only) in memory and
# file-backed. Prints requests/s and ratios. A measurement program, not a test.
# Usage: bench/http/wrk_appends.sh RUNNEL_BINARY [STORE] [DURATION_SECONDS]
set -euo pipefail

binary="$1"
store="${2:-memory}"
duration="${3:-10}"
here="$(cd "$(dirname "$0")" && pwd)"
command -v wrk >/dev/null || { echo "wrk is not installed (apt-get install wrk)" >&2; exit 2; }

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

declare -A rps
concurrencies=(1 16 64)
measure() {
  local name="$1"
  for c in "${concurrencies[@]}"; do
    local path="/v1/stream/bench-$name-c$c"
    curl -s -o /dev/null -X PUT -H 'Content-Type: text/plain' "$url$path"
    local threads=$(( c < 2 ? 1 : 2 ))
    rps[$name,$c]="$(STREAM="$path" wrk -t"$threads" -c"$c" -d"${duration}s" \
                     -s "$here/append.lua" "$url" | awk '/Requests\/sec/ {print $2}')"
  done
}

mkdir -p "$workdir/runnel-data"
start_server "$workdir/runnel.log" "$binary" serve --listen 127.0.0.1:0 --store "$store" \
  --data "$workdir/runnel-data"
measure runnel
stop_server

names=(runnel)
if command -v node >/dev/null && command -v npm >/dev/null; then
  if [[ ! -d "$here/reference/node_modules/@durable-streams/server" ]]; then
    (cd "$here/reference" && npm install --no-audit --no-fund >/dev/null)
  fi
  start_server "$workdir/ref-mem.log" node "$here/reference/serve.mjs"
  measure ref_memory
  stop_server
  mkdir -p "$workdir/ref-data"
  start_server "$workdir/ref-file.log" node "$here/reference/serve.mjs" "$workdir/ref-data"
  measure ref_file
  stop_server
  names+=(ref_memory ref_file)
fi

printf "100-byte appends, one stream, %ss per cell, runnel store=%s\n" "$duration" "$store"
printf "%-12s" "connections"
for n in "${names[@]}"; do printf " %14s" "$n"; done
[[ ${#names[@]} -gt 1 ]] && printf " %16s %16s" "runnel/ref_mem" "runnel/ref_file"
printf "\n"
for c in "${concurrencies[@]}"; do
  printf "%-12s" "$c"
  for n in "${names[@]}"; do printf " %14s" "${rps[$n,$c]}"; done
  if [[ ${#names[@]} -gt 1 ]]; then
    printf " %16s %16s" \
      "$(awk -v a="${rps[runnel,$c]}" -v b="${rps[ref_memory,$c]}" 'BEGIN{printf "%.2fx", a/b}')" \
      "$(awk -v a="${rps[runnel,$c]}" -v b="${rps[ref_file,$c]}" 'BEGIN{printf "%.2fx", a/b}')"
  fi
  printf "\n"
done
