#!/usr/bin/env bash
# What subscriptions cost an append: 100-byte appends to one stream, driven by wrk (Debian
# package wrk) at 16 connections, side by side in one run against one `runnel serve`:
#   none      no subscription matches the stream
#   pull      a pull-wake subscription matches it (nobody claims; one wake stays in flight)
#   webhook   a webhook subscription matches it; a local Node.js receiver answers {"done":true},
#             so every delivery acks and the next append wakes again
# Prints requests/s, the ratio to `none`, and how many webhook deliveries the appends caused
# (wakes coalesce: many appends, few deliveries). A measurement program, not a test.
# Usage: bench/http/wrk_subscriptions.sh RUNNEL_BINARY [STORE] [DURATION_SECONDS]
set -euo pipefail

binary="$1"
store="${2:-memory}"
duration="${3:-5}"
here="$(cd "$(dirname "$0")" && pwd)"
command -v wrk >/dev/null || { echo "wrk is not installed (apt-get install wrk)" >&2; exit 2; }
command -v node >/dev/null || { echo "node is needed for the webhook receiver" >&2; exit 2; }

workdir="$(mktemp -d)"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  rm -rf "$workdir"
}
trap cleanup EXIT

wait_url() {  # wait_url LOG: prints the first http://127.0.0.1:PORT the process logged
  for _ in $(seq 1 150); do
    local u
    u="$(grep -o 'http://127\.0\.0\.1:[0-9]*' "$1" | head -n1 || true)"
    [[ -n "$u" ]] && { echo "$u"; return 0; }
    sleep 0.1
  done
  cat "$1" >&2
  return 1
}

node -e '
let n = 0;
const s = require("http").createServer((q, r) => {
  q.resume();
  q.on("end", () => {
    if (q.url === "/count") { r.end(String(n)); return; }
    n++;
    r.writeHead(200, { "content-type": "application/json" });
    r.end("{\"done\":true}");
  });
});
s.listen(0, "127.0.0.1", () => console.log("http://127.0.0.1:" + s.address().port));
' >"$workdir/receiver.log" 2>&1 &
pids+=($!)
receiver="$(wait_url "$workdir/receiver.log")"

mkdir -p "$workdir/data"
"$binary" serve --listen 127.0.0.1:0 --store "$store" --data "$workdir/data" \
  --webhook-allow-localhost >"$workdir/runnel.log" 2>&1 &
pids+=($!)
url="$(wait_url "$workdir/runnel.log")"

json() { curl -s -o /dev/null -w '%{http_code}' -X "$1" -H 'Content-Type: application/json' \
  --data "$3" "$url/v1/stream/$2"; }
declare -A rps
run() {  # run NAME STREAM
  curl -s -o /dev/null -X PUT -H 'Content-Type: text/plain' "$url/v1/stream/$2"
  rps[$1]="$(STREAM="/v1/stream/$2" wrk -t2 -c16 -d"${duration}s" -s "$here/append.lua" "$url" |
             awk '/Requests\/sec/ {print $2}')"
}

run none "plain/s"
json PUT wake/pool '[]' >/dev/null
[[ "$(json PUT __ds/subscriptions/bench-pull \
  '{"type":"pull-wake","pattern":"pulled/*","wake_stream":"wake/pool"}')" == 201 ]]
run pull "pulled/s"
[[ "$(json PUT __ds/subscriptions/bench-hook \
  "{\"type\":\"webhook\",\"pattern\":\"hooked/*\",\"webhook\":{\"url\":\"$receiver/hook\"}}")" == 201 ]]
run webhook "hooked/s"
sleep 1
deliveries="$(curl -s "$receiver/count")"
errors="$(grep -c 'delivery failed' "$workdir/runnel.log" || true)"

printf "100-byte appends, one stream, 16 connections, %ss per cell, store=%s\n" "$duration" "$store"
printf "%-8s %12s %10s\n" "case" "requests/s" "vs none"
for n in none pull webhook; do
  printf "%-8s %12s %10s\n" "$n" "${rps[$n]}" \
    "$(awk -v a="${rps[$n]}" -v b="${rps[none]}" 'BEGIN{printf "%.2fx", a/b}')"
done
appends="$(awk -v r="${rps[webhook]}" -v d="$duration" 'BEGIN{printf "%d", r*d}')"
echo "webhook deliveries during the webhook cell: $deliveries for about $appends appends" \
  "($errors failed)"
next_offset() { curl -sI "$url/v1/stream/$1" | tr -d '\r' | awk '/^Stream-Next-Offset:/ {print $2}'; }
echo "tails: plain/s $(next_offset plain/s), hooked/s $(next_offset hooked/s)"
