#!/usr/bin/env bash
# Measures 100-byte appends to one stream against `runnel serve` with wrk (Debian package wrk)
# at concurrency 1, 16 and 64, and prints requests/s. A measurement program, not a test.
# Usage: bench/http/wrk_appends.sh RUNNEL_BINARY [STORE] [DURATION_SECONDS]
set -euo pipefail

binary="$1"
store="${2:-memory}"
duration="${3:-10}"
here="$(cd "$(dirname "$0")" && pwd)"
command -v wrk >/dev/null || { echo "wrk is not installed (apt-get install wrk)" >&2; exit 2; }

workdir="$(mktemp -d)"
server_pid=""
cleanup() {
  if [[ -n "$server_pid" ]] && kill -0 "$server_pid" 2>/dev/null; then
    kill -TERM "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$workdir"
}
trap cleanup EXIT

mkdir -p "$workdir/data"
"$binary" serve --listen 127.0.0.1:0 --store "$store" --data "$workdir/data" \
  >"$workdir/server.log" 2>&1 &
server_pid=$!
url=""
for _ in $(seq 1 100); do
  url="$(grep -o 'http://127\.0\.0\.1:[0-9]*' "$workdir/server.log" | head -n1 || true)"
  [[ -n "$url" ]] && break
  sleep 0.1
done
[[ -n "$url" ]] || { cat "$workdir/server.log" >&2; exit 1; }

printf "%-12s %-8s %12s\n" "connections" "store" "requests/s"
for c in 1 16 64; do
  path="/v1/stream/bench-c$c"
  curl -s -o /dev/null -X PUT -H 'Content-Type: text/plain' "$url$path"
  threads=$(( c < 2 ? 1 : 2 ))
  rps="$(STREAM="$path" wrk -t"$threads" -c"$c" -d"${duration}s" -s "$here/append.lua" "$url" \
         | awk '/Requests\/sec/ {print $2}')"
  printf "%-12s %-8s %12s\n" "$c" "$store" "$rps"
done
