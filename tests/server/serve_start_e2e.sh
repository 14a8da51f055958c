#!/usr/bin/env bash
# End-to-end test of how `runnel serve` starts on the embedded log, through the binary:
#   - a --segment-size outside [1 MiB, 2 GiB] is refused (exit 2) with the bounds, before
#     anything is created;
#   - a start that fails once the store is open (its port is taken) leaves no trace in a data
#     directory it did not find: no segment, no lock file, no signing key, no directory;
#   - --segment-size 1048576 makes 1 MiB segments, and the space reserve is about one segment.
# Usage: serve_start_e2e.sh RUNNEL_BINARY
set -euo pipefail

R="$1"
source "$(dirname "$0")/e2e_lib.sh"

refused() {  # refused SIZE WANT: --segment-size SIZE exits 2 saying WANT, creating nothing
  set +e
  out="$("$R" serve --listen 127.0.0.1:0 --data "$workdir/refused" --segment-size "$1" 2>&1)"
  local rc=$?
  set -e
  expect_eq "$rc" 2 "exit code of --segment-size $1"
  expect_has "$out" "$2" "message for --segment-size $1"
  [[ ! -e "$workdir/refused" ]] || fail "--segment-size $1 created the data directory"
}
refused 1000 "--segment-size must be at least 1048576 bytes (1 MiB) and at most 2147483648"
refused 1048575 "got 1048575"
refused 4294967296 "at most 2147483648 (2 GiB), got 4294967296"
refused 1e6 "decimal digits"

# The port is taken by another server: the log store opens a new directory, then the start
# fails. Nothing of it stays.
serve_on_free_port --store memory --data "$workdir/memory"
port="${RUNNEL_URL##*:}"
set +e
out="$("$R" serve --listen "127.0.0.1:$port" --store log --data "$workdir/new" 2>&1)"
rc=$?
set -e
expect_eq "$rc" 1 "exit code of a start on a taken port"
expect_has "$out" "Address already in use" "message of a start on a taken port"
[[ ! -e "$workdir/new" ]] || fail "a failed start left $(ls -la "$workdir/new")"
stop_server

serve_on_free_port --store log --data "$workdir/data" --segment-size 1048576
curl -sf -o /dev/null -X PUT -H 'Content-Type: text/plain' "$RUNNEL_URL/v1/stream/s"
curl -sf -o /dev/null -X POST -H 'Content-Type: text/plain' --data-binary "hello" \
  "$RUNNEL_URL/v1/stream/s"
expect_eq "$(stat -c %s "$workdir/data/00000000000000000001.log")" 1048576 "segment size"
for _ in $(seq 1 100); do
  [[ -f "$workdir/data/RESERVE" ]] && (($(stat -c %s "$workdir/data/RESERVE") >= 1048576)) && break
  sleep 0.1
done
reserve=$(stat -c %s "$workdir/data/RESERVE")
((reserve >= 1048576 && reserve <= 1048576 + 1048576)) || fail "reserve of $reserve bytes"
stop_server
serve_on_free_port --store log --data "$workdir/data" --segment-size 1048576
expect_eq "$(curl -sf "$RUNNEL_URL/v1/stream/s?offset=-1")" "hello" "the record after a restart"
stop_server
echo "serve_start_e2e: ok"
