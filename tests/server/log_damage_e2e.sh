#!/usr/bin/env bash
# End-to-end test of damaged data in the embedded log, through the binary: `runnel serve` is
# killed (-9) after acknowledged appends, one bit of the first append's frame length is flipped
# in the segment file (damage to written data with intact frames after it, not a torn tail),
# then:
#   - `runnel check` reports corruption (exit 1), not a torn tail;
#   - `runnel serve` refuses to open (exit 1), naming the data directory, the byte and
#     --salvage, and leaves the file as it was (nothing acknowledged is truncated away);
#   - `runnel serve --salvage` opens, prints what it skipped, and serves the records written
#     after the damage.
# Usage: log_damage_e2e.sh RUNNEL_BINARY
set -euo pipefail

R="$1"
source "$(dirname "$0")/e2e_lib.sh"

start_server() {  # start_server [FLAGS...]: serves $workdir/data
  serve_on_free_port --store log --data "$workdir/data" "$@"
}

start_server
curl -sf -o /dev/null -X PUT -H 'Content-Type: text/plain' "$RUNNEL_URL/v1/stream/s"
for i in $(seq 1 20); do
  curl -sf -o /dev/null -X POST -H 'Content-Type: text/plain' --data-binary "record-$i" \
    "$RUNNEL_URL/v1/stream/s"
done
kill -9 "$server_pid"
wait "$server_pid" 2>/dev/null || true
server_pid=""

seg="$workdir/data/00000000000000000001.log"
# Segment header (32 bytes), then the create-stream frame: 9-byte header whose length is the
# little-endian u32 at byte 36. The first append's frame follows; its length starts 4 bytes in.
create_len=$(od -An -t u4 -j 36 -N 4 "$seg" | tr -d ' ')
at=$((32 + 9 + create_len + 4))
byte=$(od -An -t u1 -j "$at" -N 1 "$seg" | tr -d ' ')
printf "$(printf '\\%03o' $((byte ^ 1)))" | dd of="$seg" bs=1 seek="$at" conv=notrunc status=none
cp "$seg" "$workdir/damaged.log"

set +e
check_out="$("$R" check "$workdir/data" 2>&1)"
check_rc=$?
set -e
expect_eq "$check_rc" "1" "check exit code"
expect_has "$check_out" "CORRUPTION" "check output"
expect_lacks "$check_out" "torn tail" "check output"

set +e
"$R" serve --listen 127.0.0.1:0 --store log --data "$workdir/data" >"$workdir/refused.log" 2>&1
serve_rc=$?
set -e
expect_eq "$serve_rc" "1" "serve exit code on damaged data"
expect_has "$(cat "$workdir/refused.log")" "at byte $((at - 4))" "serve names the damage"
expect_has "$(cat "$workdir/refused.log")" "cannot open the log store in $workdir/data: corruption" \
  "serve names the data directory"
expect_has "$(cat "$workdir/refused.log")" "--salvage" "serve points at --salvage"
cmp -s "$seg" "$workdir/damaged.log" || fail "a refused open changed the segment"

start_server --salvage
expect_has "$(cat "$workdir/server.log")" "recovery: salvage skipped bytes" "salvage notes printed"
body="$(curl -sf "$RUNNEL_URL/v1/stream/s?offset=-1")"
expect_eq "${body:0:16}" "record-2record-3" "the damaged record is gone, the next ones are served"
expect_has "$body" "record-20" "records up to the last are served"
curl -sf -o /dev/null -X POST -H 'Content-Type: text/plain' --data-binary "after" \
  "$RUNNEL_URL/v1/stream/s"
# The salvaging open checkpointed past the damage: after a kill -9, a plain open works.
kill -9 "$server_pid"
wait "$server_pid" 2>/dev/null || true
start_server
body="$(curl -sf "$RUNNEL_URL/v1/stream/s?offset=-1")"
expect_eq "${body:0:16}" "record-2record-3" "after salvage and kill -9, a plain open serves"
expect_has "$body" "record-20after" "the append after salvage survived"
stop_server

# Damage before the newest checkpoint's replay point: the store opens (replay does not read
# those bytes); the background scrub finds it and names it; reads answer the records before it,
# a read at it answers 500 `corruption` with the offsets that cannot be read and where reading
# goes on (never 404), reading from there goes on, and SSE sends the error as an event and ends.
rm -rf "$workdir/data"
start_server
curl -sf -o /dev/null -X PUT -H 'Content-Type: text/plain' "$RUNNEL_URL/v1/stream/c"
for i in 1 2 3; do
  curl -sf -o /dev/null -X POST -H 'Content-Type: text/plain' --data-binary "payload-$i" \
    "$RUNNEL_URL/v1/stream/c"
done
stop_server  # a clean stop: its checkpoint covers every frame
create_len=$(od -An -t u4 -j 36 -N 4 "$seg" | tr -d ' ')
first_len=$(od -An -t u4 -j $((32 + 9 + create_len + 4)) -N 4 "$seg" | tr -d ' ')
second=$((32 + 9 + create_len + 9 + first_len))  # the second append's frame
at=$((second + 9 + 12))  # inside its body
byte=$(od -An -t u1 -j "$at" -N 1 "$seg" | tr -d ' ')
printf "$(printf '\\%03o' $((byte ^ 255)))" | dd of="$seg" bs=1 seek="$at" conv=notrunc status=none
start_server
for _ in $(seq 100); do
  curl -s "$RUNNEL_URL/metrics" | grep -q '^runnel_store_damaged_frames_total 1$' && break
  sleep 0.05
done
expect_has "$(curl -s "$RUNNEL_URL/metrics")" "runnel_store_damaged_frames_total 1" "the scrub counts the damage"
expect_has "$(cat "$workdir/server.log")" "damaged log data: segment 00000000000000000001.log at byte $second" "the scrub names the damage"
expect_has "$(cat "$workdir/server.log")" "stream 'c' records 2 to 2" "the scrub names the stream and records"
expect_lacks "$(grep 'damaged log data' "$workdir/server.log")" "$workdir" "no absolute path in the damage report"
first_read="$(curl -s -D "$workdir/h1" "$RUNNEL_URL/v1/stream/c?offset=-1")"
expect_eq "$first_read" "payload-1" "the record before the damage is read"
next="$(tr -d '\r' <"$workdir/h1" | awk -F': ' 'tolower($1) == "stream-next-offset" {print $2}')"
read_body="$(curl -s -w ' %{http_code}' "$RUNNEL_URL/v1/stream/c?offset=$next")"
expect_has "$read_body" '"code":"corruption"' "a damaged record reads as corruption"
expect_has "$read_body" " 500" "status of a damaged read"
expect_has "$read_body" "\"offset\":\"$next\"" "the error names where the damage starts"
resume="$(echo "$read_body" | sed -n 's/.*"next_offset":"\([0-9_]*\)".*/\1/p')"
expect_eq "$(curl -s "$RUNNEL_URL/v1/stream/c?offset=$resume")" "payload-3" "reading goes on past the damage"
sse="$(curl -s -N --max-time 3 "$RUNNEL_URL/v1/stream/c?offset=$next&live=sse" || true)"
expect_has "$sse" "event: error" "SSE sends the damage as an error event"
expect_has "$sse" '"code":"corruption"' "the SSE error event carries the error"
# The client learns which file, relative to the data directory, and not where that lives.
expect_has "$read_body" "segment 00000000000000000001.log at byte" "the damaged segment is named"
expect_lacks "$read_body" "$workdir" "the error body does not hold the data directory"
expect_eq "$(curl -s -o /dev/null -w '%{http_code}' -I "$RUNNEL_URL/v1/stream/c")" "200" "the stream still exists"
stop_server

echo "log damage e2e: all checks passed"
