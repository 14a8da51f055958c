#!/usr/bin/env bash
# What response compression costs and saves: the same JSON catch-up read (offset=-1 of a JSON
# stream, about 256 KiB of order-like messages) driven by wrk over keep-alive connections,
# without Accept-Encoding, with `Accept-Encoding: gzip` and with `Accept-Encoding: zstd`, against
# one `runnel serve` (memory store) in one run. Prints per cell: requests/s, MB/s of JSON
# delivered (decoded bytes), MB/s on the wire, and the server's CPU per request, read from
# /proc/<pid>/stat (utime + stime) before and after the cell. A measurement program, not a test.
# Usage: bench/http/compression.sh RUNNEL_BINARY [DURATION_SECONDS] [CONNECTIONS]
set -euo pipefail

binary="$1"
duration="${2:-5}"
connections="${3:-4}"
command -v wrk >/dev/null || { echo "wrk is not installed (apt-get install wrk)" >&2; exit 2; }
command -v curl >/dev/null || { echo "curl is not installed" >&2; exit 2; }

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

"$binary" serve --listen 127.0.0.1:0 --store memory --data "$workdir/d" >"$workdir/server.log" 2>&1 &
server_pid=$!
url=""
for _ in $(seq 1 150); do
  url="$(grep -o 'http://127\.0\.0\.1:[0-9]*' "$workdir/server.log" | head -n1 || true)"
  [[ -n "$url" ]] && break
  sleep 0.1
done
[[ -n "$url" ]] || { cat "$workdir/server.log" >&2; exit 1; }

# 2,000 messages of about 130 bytes: ids, timestamps, names, amounts and a status, as an
# application's events would carry.
awk 'BEGIN {
  srand(7); split("pending shipped delivered returned", st, " ");
  split("acme globex initech umbrella hooli", cu, " ");
  printf "[";
  for (i = 0; i < 2000; i++) {
    if (i) printf ",";
    printf "{\"id\":%d,\"ts\":\"2026-01-%02dT%02d:%02d:%02d.%03dZ\",\"customer\":\"%s\",", \
      100000 + i, 1 + i % 28, i % 24, i % 60, (i * 7) % 60, int(rand() * 1000), cu[1 + i % 5];
    printf "\"amount\":%.2f,\"currency\":\"EUR\",\"status\":\"%s\",\"items\":%d}", \
      rand() * 500, st[1 + int(rand() * 4)], 1 + int(rand() * 9);
  }
  printf "]";
}' >"$workdir/batch.json"
stream="$url/v1/stream/orders"
curl -sf -o /dev/null -X PUT -H 'Content-Type: application/json' "$stream"
curl -sf -o /dev/null -X POST -H 'Content-Type: application/json' \
  --data-binary @"$workdir/batch.json" "$stream"
json_bytes="$(curl -sf "$stream?offset=-1" | wc -c)"

ticks_per_s="$(getconf CLK_TCK)"
# The server's CPU time so far, in clock ticks (fields 14 and 15 of /proc/<pid>/stat; the
# command name in field 2 holds no spaces here).
cpu_ticks() { awk '{print $14 + $15}' "/proc/$server_pid/stat"; }

threads=$(( connections < 2 ? 1 : 2 ))
printf "runnel serve, memory store, JSON catch-up of %s bytes, %s connections, %ss per cell\n" \
  "$json_bytes" "$connections" "$duration"
printf "%-10s %12s %14s %14s %16s %10s\n" "coding" "requests/s" "JSON MB/s" "wire MB/s" \
  "CPU ms/request" "wire/JSON"
declare -A cpu_per_request
for coding in identity gzip zstd; do
  header=()
  [[ "$coding" != identity ]] && header=(-H "Accept-Encoding: $coding")
  wire_bytes="$(curl -sf "${header[@]}" "$stream?offset=-1" | wc -c)"
  before="$(cpu_ticks)"
  out="$(wrk -t"$threads" -c"$connections" -d"${duration}s" "${header[@]}" "$stream?offset=-1")"
  after="$(cpu_ticks)"
  requests="$(awk '/requests in/ {print $1}' <<<"$out")"
  rps="$(awk '/Requests\/sec/ {print $2}' <<<"$out")"
  cpu_per_request[$coding]="$(awk -v t=$((after - before)) -v hz="$ticks_per_s" -v n="$requests" \
    'BEGIN {printf "%.3f", t * 1000 / hz / n}')"
  printf "%-10s %12s %14s %14s %16s %10s\n" "$coding" "$rps" \
    "$(awk -v r="$rps" -v b="$json_bytes" 'BEGIN {printf "%.1f", r * b / 1e6}')" \
    "$(awk -v r="$rps" -v b="$wire_bytes" 'BEGIN {printf "%.1f", r * b / 1e6}')" \
    "${cpu_per_request[$coding]}" \
    "$(awk -v w="$wire_bytes" -v b="$json_bytes" 'BEGIN {printf "%.3f", w / b}')"
done
for coding in gzip zstd; do
  printf "server CPU per request, %s/identity: %s\n" "$coding" \
    "$(awk -v a="${cpu_per_request[$coding]}" -v b="${cpu_per_request[identity]}" \
      'BEGIN {printf "%.2fx", a / b}')"
done
