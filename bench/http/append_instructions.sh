#!/usr/bin/env bash
# User-space instructions per acknowledged append, all of the server's threads: `runnel serve`
# (two io threads) under valgrind's callgrind with instrumentation off until a warm-up load has
# run, then wrk appending 100-byte bodies to one stream at 16 connections for 8 seconds, and
# callgrind's instruction count over that load divided by the appends wrk counted. Unlike CPU
# time, the count barely moves with other load on the machine, so it compares two binaries to a
# few tenths of a percent; it misses kernel time (the fsync, the socket calls) and lock
# contention (callgrind runs one thread at a time). A measurement program, not a test.
#
# Usage: bench/http/append_instructions.sh RUNNEL_BINARY [memory|log] [PORT]
set -euo pipefail

binary="$1"
store="${2:-memory}"
port="${3:-18432}"
here="$(cd "$(dirname "$0")" && pwd)"
[[ -x "$binary" ]] || { echo "$binary is not built" >&2; exit 2; }
[[ "$store" == memory || "$store" == log ]] || { echo "the store is memory or log" >&2; exit 2; }
for tool in valgrind callgrind_control wrk curl; do
  command -v "$tool" >/dev/null || { echo "$tool is not installed" >&2; exit 2; }
done
data="$(mktemp -d)"
out="$(mktemp -d)"
args=(serve --listen "127.0.0.1:$port" --threads 2)
if [[ "$store" == log ]]; then
  args+=(--store log --durability fsync --data "$data")
else
  args+=(--store memory)
fi
valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$out/cg.%p" "$binary" \
  "${args[@]}" >/dev/null 2>"$out/valgrind.log" &
pid=$!
trap 'kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; rm -rf "$data" "$out"' EXIT
# Under valgrind the server takes a few seconds to start: at most 60 s.
for _ in $(seq 300); do
  curl -s -o /dev/null "http://127.0.0.1:$port/health" && break
  sleep 0.2
done
curl -sf -o /dev/null -X PUT -H 'Content-Type: text/plain' "http://127.0.0.1:$port/v1/stream/one"
load() {  # load SECONDS
  STREAM=/v1/stream/one wrk -t1 -c16 -d"$1s" -s "$here/append.lua" "http://127.0.0.1:$port"
}
load 2 >/dev/null
callgrind_control -i on "$pid" >/dev/null 2>&1
load 8 >"$out/wrk"
callgrind_control -d "$pid" >/dev/null 2>&1
sleep 1
appends="$(awk '/requests in/ {print $1}' "$out/wrk")"
instructions="$(cat "$out"/cg.* | awk '/^summary:/ {s += $2} END {print s + 0}')"
awk -v a="$appends" -v i="$instructions" -v s="$store" \
  'BEGIN { printf "%s store: %d appends, %.0f instructions per append\n", s, a, (a > 0 ? i / a : 0) }'
