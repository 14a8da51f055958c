#!/usr/bin/env bash
# Starts `runnel serve` on a free loopback port, runs one npm suite against it, stops the server.
# Usage: run.sh RUNNEL_BINARY STORE [conformance|conformance-h2|client|dashboard|state]
# (conformance-h2: the conformance suite with every request over HTTP/2, h2-fetch.mjs)
# The suite's webhook receivers listen on 127.0.0.1, so the server runs with the localhost
# development exception for webhook URLs. Background compaction is off (--compaction-share 0):
# the state suite compacts on demand, at the moments it checks.
set -euo pipefail

binary="$1"
store="$2"
suite="${3:-conformance}"
here="$(cd "$(dirname "$0")" && pwd)"
long_poll_ms=500

if [[ ! -d "$here/node_modules/@durable-streams/server-conformance-tests" ||
      ! -d "$here/node_modules/@durable-streams/state" ]]; then
  (cd "$here" && npm install --no-audit --no-fund >/dev/null)
fi

workdir="$(mktemp -d)"
log="$workdir/server.log"
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
# "postgres" means the private cluster that scripts/pg-test-cluster --run started for us.
if [[ "$store" == "postgres" ]]; then
  store="${RUNNEL_TEST_PG_URL:?run under scripts/pg-test-cluster --run}"
fi
"$binary" serve --listen 127.0.0.1:0 --store "$store" --data "$workdir/data" \
  --long-poll-timeout-ms "$long_poll_ms" --webhook-allow-localhost --compaction-share 0 \
  >"$log" 2>&1 &
server_pid=$!

url=""
for _ in $(seq 1 100); do
  url="$(grep -o 'http://127\.0\.0\.1:[0-9]*' "$log" | head -n1 || true)"
  [[ -n "$url" ]] && break
  if ! kill -0 "$server_pid" 2>/dev/null; then
    echo "runnel serve exited early:" >&2
    cat "$log" >&2
    exit 1
  fi
  sleep 0.1
done
if [[ -z "$url" ]]; then
  echo "runnel serve did not report its address:" >&2
  cat "$log" >&2
  exit 1
fi
echo "runnel serve (${store%%\?*}) at $url"

cd "$here"
RUNNEL_BASE_URL="$url" RUNNEL_LONG_POLL_TIMEOUT_MS="$long_poll_ms" \
  npx vitest run --config vitest.config.mjs "$suite.test.mjs"
