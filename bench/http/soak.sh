#!/usr/bin/env bash
# Soak: `runnel serve` (log store, fsync) with 10,000 SSE readers following one JSON stream and 64
# writers appending 10 times a second in all, for 10 minutes (BENCH_SOAK_SECONDS). Prints whether
# every reader saw every acknowledged append exactly once, the errors, and the server's RSS growth
# after a one-minute warm-up (goal: at most 5%). Not a test: it prints figures.
#   soak.sh RUNNEL [SECONDS] [READERS]
set -euo pipefail
runnel=${1:?usage: soak.sh RUNNEL [SECONDS] [READERS]}
seconds=${2:-${BENCH_SOAK_SECONDS:-600}}
readers=${3:-${BENCH_SOAK_READERS:-10000}}
warmup=$((seconds / 10 < 60 ? seconds / 10 : 60))
work=$(mktemp -d)
pid=
cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
port=$((20000 + RANDOM % 20000))
"$runnel" serve --listen 127.0.0.1:$port --data "$work/data" --max-connections $((readers + 1000)) \
  >"$work/serve.log" 2>&1 &
pid=$!
for _ in $(seq 100); do
  curl -s -o /dev/null "http://127.0.0.1:$port/healthz" && break
  sleep 0.1
done
echo "soak: $readers SSE readers, 64 writers at 10 appends/s in all, $seconds s (warm-up $warmup s)"
status=0
"$runnel" bench soak --url "http://127.0.0.1:$port" soak --readers "$readers" --writers 64 \
  --rate 10 --seconds "$seconds" --warmup "$warmup" --server-pid "$pid" || status=$?
errors=$(grep -c -E '\[(error|critical)\]' "$work/serve.log" || true)
echo "server log: $errors error lines"
exit $status
