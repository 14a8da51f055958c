#!/usr/bin/env bash
# End-to-end test of the runnel CLI client commands against a real `runnel serve` (memory
# store) on a free loopback port. Checks outputs and exit codes.
# Usage: cli_e2e.sh RUNNEL_BINARY
set -euo pipefail

R="$1"
source "$(dirname "$0")/e2e_lib.sh"

"$R" serve --listen 127.0.0.1:0 --store memory --long-poll-timeout-ms 200 --max-body-bytes 1048576 \
  >"$workdir/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 1 100); do
  RUNNEL_URL="$(grep -o 'http://127\.0\.0\.1:[0-9]*' "$workdir/server.log" | head -n1 || true)"
  [[ -n "$RUNNEL_URL" ]] && break
  sleep 0.1
done
[[ -n "$RUNNEL_URL" ]] || { cat "$workdir/server.log" >&2; exit 1; }
export RUNNEL_URL

expect_rc() {
  local want="$1"; shift
  set +e; "$@" >/dev/null 2>&1; local rc=$?; set -e
  [[ "$rc" == "$want" ]] || fail "exit code of '$*': expected $want, got $rc"
}

curl -sf "$RUNNEL_URL/healthz" >/dev/null || fail "healthz"

"$R" create events -t application/json >/dev/null
"$R" append events '{"n":1}' '[{"n":2},{"n":3}]' >/dev/null
expect_eq "$("$R" read events)" $'{"n":1}\n{"n":2}\n{"n":3}' "read json stream"
expect_eq "$("$R" read events --json | head -c 9)" '{"message' "read --json"

"$R" create notes -t text/plain >/dev/null
printf 'a\nb\nc\n' | "$R" append notes --lines >/dev/null
expect_eq "$("$R" read notes)" "abc" "read text stream"
printf 'whole file' > "$workdir/input.txt"
"$R" append notes -f "$workdir/input.txt" >/dev/null
expect_eq "$("$R" read notes)" "abcwhole file" "append --file"
offset="$("$R" describe notes --json | sed 's/.*"next_offset":"\([^"]*\)".*/\1/')"
"$R" append notes ' more' >/dev/null
expect_eq "$("$R" read notes --offset "$offset")" " more" "read from a saved offset"

# Keyed compaction: create --compaction state, compact, describe.
"$R" create rows --compaction state --tombstone-ms 0 >/dev/null
"$R" append rows '{"type":"u","key":"a","value":1,"headers":{"operation":"insert"}}' \
  '{"type":"u","key":"a","value":2,"headers":{"operation":"update"}}' \
  '{"type":"u","key":"b","value":3,"headers":{"operation":"insert"}}' \
  '{"type":"u","key":"b","headers":{"operation":"delete"}}' >/dev/null
expect_rc 2 "$R" append rows '{"n":1}'
expect_eq "$("$R" compact rows | sed 's/ through [^:]*:/:/; s/horizon .*/horizon/')" \
  "compacted rows: dropped 3 records (185 bytes, 1 tombstones) of 4, kept 1; horizon" \
  "compact prints what it reclaimed"
expect_eq "$("$R" read rows)" '{"headers":{"operation":"update"},"key":"a","type":"u","value":2}' \
  "only the survivor is read"
expect_eq "$("$R" describe rows --json | sed 's/.*"compaction":"\([a-z]*\)".*/\1/')" "state" \
  "describe shows compaction"
expect_rc 4 "$R" compact events
"$R" rm rows >/dev/null

# DATA arguments go out byte for byte, brackets and commas included (one message each).
"$R" create raw -t text/plain >/dev/null
"$R" append raw '[hello world]' '[a,b]' $'\x01[x]' >/dev/null
expect_eq "$("$R" read raw | od -An -c | tr -s ' ')" \
  "$(printf '[hello world][a,b]\x01[x]' | od -An -c | tr -s ' ')" "bracketed DATA kept whole"
expect_eq "$("$R" describe raw --json | sed 's/.*"next_offset":"[0-9]*_0*\([0-9]*\)".*/\1/')" "3" \
  "three DATA arguments, three messages"
expect_rc 2 "$R" append raw more -f "$workdir/input.txt"
expect_rc 2 "$R" append raw -f "$workdir"
expect_eq "$("$R" append missing x 2>&1 >/dev/null)" \
  "runnel: append failed: HTTP 404: stream 'missing' does not exist" "append to a missing stream"
"$R" rm raw >/dev/null

# read --json: bytes that are not UTF-8 come back as base64, exactly; an empty stream still
# gives one line that says where it stands.
"$R" create bin -t application/octet-stream >/dev/null
printf '\xff\x00A\x80' > "$workdir/bin.in"
"$R" append bin -f "$workdir/bin.in" >/dev/null
"$R" read bin --json | sed 's/.*"data_base64":"\([^"]*\)".*/\1/' | base64 -d > "$workdir/bin.out"
cmp -s "$workdir/bin.in" "$workdir/bin.out" || fail "read --json of binary data"
"$R" create empty -t bytes >/dev/null
expect_eq "$("$R" read empty --json)" \
  '{"data":"","next_offset":"0000000000000000_0000000000000000","offset":"-1"}' "read --json, empty"
"$R" rm bin >/dev/null
"$R" rm empty >/dev/null

# A server that accepts but never answers: the client gives up (RUNNEL_CLIENT_TIMEOUT_MS).
node -e 'const s = require("net").createServer(() => {});
  s.listen(0, "127.0.0.1", () => console.log(s.address().port)); setTimeout(() => process.exit(0), 20000)' \
  >"$workdir/silent.port" &
silent_pid=$!
for _ in $(seq 1 50); do [[ -s "$workdir/silent.port" ]] && break; sleep 0.1; done
set +e
RUNNEL_CLIENT_TIMEOUT_MS=500 timeout 10 "$R" ls --url "http://127.0.0.1:$(cat "$workdir/silent.port")" \
  2>"$workdir/silent.err" >/dev/null
silent_rc=$?
set -e
kill "$silent_pid" 2>/dev/null || true
expect_eq "$silent_rc" "5" "a silent server: exit code"
grep -q "no answer from .* within 500 ms" "$workdir/silent.err" || fail "a silent server: $(cat "$workdir/silent.err")"

# A failure part-way through several DATA arguments says how many went in.
"$R" create parts -t application/json >/dev/null
expect_eq "$("$R" append parts 1 bad 3 2>&1 >/dev/null)" \
  "runnel: append of message 2 of 3 (1 appended before it) failed: HTTP 400: body is not valid JSON" \
  "partial append"
expect_eq "$("$R" append parts 1 bad --json | sed 's/.*"appended":\([0-9]*\).*/\1/')" "1" \
  "partial append --json"
"$R" rm parts >/dev/null

# A body over the server's limit: its 413 is reported, not a lost connection.
head -c 4000000 /dev/zero > "$workdir/big"
"$R" create big -t bytes >/dev/null
expect_eq "$("$R" append big -f "$workdir/big" 2>&1 >/dev/null | cut -c1-36)" \
  "runnel: append failed: HTTP 413: req" "body over the limit"
"$R" rm big >/dev/null

expect_eq "$("$R" ls | cut -f1 | tr '\n' ' ')" "events notes " "ls"
expect_eq "$("$R" ls no | cut -f1 | tr '\n' ' ')" "notes " "ls with prefix"
# Nothing matches: stdout stays empty (a script reads an empty list), stderr says so.
expect_eq "$("$R" ls zz 2>/dev/null)" "" "ls without a match prints no line"
expect_eq "$("$R" ls zz 2>&1 >/dev/null)" "runnel: no streams with the prefix 'zz'" \
  "ls without a match says so on stderr"
# describe adds the counts of the listing to HEAD's metadata.
expect_eq "$("$R" describe notes | grep -E '^(event_count|retained_bytes):' | tr -s ' ')" \
  $'event_count: 5\nretained_bytes: 18' "describe counts"

# Names chosen by a hostile client: a stream (created over HTTP, percent-encoded) whose name holds
# ESC sequences (set the title, clear the screen), BEL, CR LF (a fake line), TAB (a fake column), a
# C1 CSI in UTF-8 and DEL, and a consumer group with a C1 CSI. Human-readable output prints them
# escaped, one line per row, printable UTF-8 kept; --json keeps the exact name.
evil=$'evil\x1b]0;pwned\x07\x1b[2J\r\nfake\trow\xc2\x9b1m\x7f-caf\xc3\xa9'
evil_url='evil%1B%5D0%3Bpwned%07%1B%5B2J%0D%0Afake%09row%C2%9B1m%7F-caf%C3%A9'
evil_shown='evil\x1b]0;pwned\x07\x1b[2J\x0d\x0afake\x09row\u009b1m\x7f-café'
# The bytes of $1 a terminal would act on, other than the TAB and LF that the output itself uses
# between cells and rows (empty when there are none), as od shows them.
raw_controls() {
  printf '%s' "$1" | LC_ALL=C tr -d '\t\n\040-\176\200-\377' | od -An -c | tr -d ' \n'
  printf '%s' "$1" | LC_ALL=C grep -o $'\xc2[\x80-\x9f]' | od -An -c | tr -d ' \n' || true
}
[[ "$(curl -s -o /dev/null -w '%{http_code}' -X PUT -H 'Content-Type: text/plain' \
  "$RUNNEL_URL/v1/stream/$evil_url")" == 201 ]] || fail "create the hostile stream"
ls_out="$("$R" ls evil)"
expect_eq "$(raw_controls "$ls_out")" "" "ls prints no raw control bytes"
expect_eq "$(printf '%s\n' "$ls_out" | wc -l | tr -d ' ')" "1" "ls prints one line for the stream"
expect_eq "$(cut -f1 <<<"$ls_out")" "$evil_shown" "ls shows the name escaped"
expect_eq "$(cut -f2- <<<"$ls_out")" $'text/plain\t0000000000000000_0000000000000000' \
  "ls keeps its columns"
# --json stays JSON and carries the exact bytes of the name.
"$R" ls evil --json | node -e '
  const list = JSON.parse(require("fs").readFileSync(0, "utf8"));
  process.stdout.write(list[0].name);' >"$workdir/evil.json-name"
cmp -s "$workdir/evil.json-name" <(printf '%s' "$evil") || fail "ls --json keeps the exact name"
describe_out="$("$R" describe "$evil")"
expect_eq "$(raw_controls "$describe_out")" "" "describe prints no raw control bytes"
expect_has "$describe_out" "name:           $evil_shown" "describe shows the name escaped"
# Group names may not hold C0 controls or DEL (the server refuses them), but may hold C1 ones.
evil_group=$'grp\xc2\x9b2J-caf\xc3\xa9'
"$R" append "$evil" x >/dev/null
expect_eq "$("$R" group ack "$evil" "$evil_group" 1)" 'grp\u009b2J-café	last_acked=1' \
  "group ack shows the group escaped"
group_out="$("$R" group ls "$evil")"
expect_eq "$(raw_controls "$group_out")" "" "group ls prints no raw control bytes"
expect_eq "$group_out" 'grp\u009b2J-café	last_acked=1	lag=0' "group ls shows the group escaped"
err_out="$("$R" create "$evil" -t application/json 2>&1 >/dev/null || true)"
expect_has "$err_out" "HTTP 409: stream '$evil_shown' already exists" \
  "an error message quotes the name escaped"
expect_eq "$(raw_controls "$err_out")" "" "an error message prints no raw control bytes"
expect_eq "$("$R" rm "$evil")" "deleted $evil_shown" "rm shows the name escaped"

# tail follows live data and ends when the stream closes.
"$R" tail notes >"$workdir/tail.out" &
tail_pid=$!
sleep 0.5
"$R" append notes --close ' last' >/dev/null
wait "$tail_pid" || fail "tail exit code"
expect_eq "$(cat "$workdir/tail.out")" " last" "tail"

expect_rc 4 "$R" append notes 'after close'
expect_rc 4 "$R" create events -t text/plain
expect_rc 3 "$R" describe missing
expect_rc 3 "$R" read missing
expect_rc 0 "$R" rm events
expect_rc 3 "$R" rm events
expect_rc 5 env RUNNEL_URL=http://127.0.0.1:1 "$R" ls
expect_rc 2 "$R" ls --url ftp://example
expect_rc 2 "$R" no-such-command
expect_rc 2 "$R" serve --threads many
expect_rc 0 "$R" bench --help

# runnel bench: the appends it counts are exactly the records the streams hold (appends in flight
# at the deadline are awaited, not dropped).
json_field() { sed -E "s/.*\"$1\":([^,}]*).*/\1/" <<<"$2"; }
out="$("$R" bench append load -c 8 -s 1 --streams 3 --size 10 --json)"
expect_eq "$(json_field ok "$out")" "true" "bench append ok"
appended="$(json_field appends "$out")"
[[ "$appended" -gt 0 ]] || fail "bench append counted no appends: $out"
held=0
for i in 0 1 2; do
  n="$("$R" describe "load-$i" --json | sed -E 's/.*"next_offset":"[0-9]*_0*([0-9]+)".*/\1/')"
  held=$((held + n))
done
expect_eq "$held" "$appended" "records held = appends counted"
# On a schedule: 4 connections, 200 appends/s for 1 s is exactly 50 due per connection; each
# is sent, or counted unsent when time ran out before it could be (a slow machine).
out="$("$R" bench append paced -c 4 --rate 200 -s 1 --json)"
appended="$(json_field appends "$out")"
expect_eq "$((appended + $(json_field unsent "$out")))" "200" "bench append --rate: 200 due"
[[ "$appended" -ge 150 ]] || fail "bench append --rate sent only $appended of 200: $out"
expect_eq "$("$R" describe paced --json | sed -E 's/.*"next_offset":"[0-9]*_0*([0-9]+)".*/\1/')" \
  "$appended" "bench append --rate: the stream holds what was counted"
out="$("$R" bench read load-0 --rounds 2 --json)"
expect_eq "$(json_field bytes "$out")" "$(( $("$R" describe load-0 --json | sed -E 's/.*"next_offset":"[0-9]*_0*([0-9]+)".*/\1/') * 10 * 2 ))" \
  "bench read counts the stream's bytes per round"
out="$("$R" bench sse fan --readers 20 --appends 3 --json)"
expect_eq "$(json_field delivered "$out")" "60" "bench sse delivers every append to every reader"
expect_eq "$(json_field complete "$out")" "20" "bench sse: every reader saw every append"
expect_eq "$(json_field ok "$out")" "true" "bench sse ok"
expect_rc 4 "$R" bench append notes -s 0.2 -t application/json   # exists as text/plain
expect_rc 2 "$R" bench append --url ftp://127.0.0.1:1 -s 0.2
expect_rc 2 "$R" bench append --url http://127.0.0.1:1 --cacert /dev/null -s 0.2
expect_rc 5 "$R" bench append --url https://127.0.0.1:1 -s 0.2
expect_rc 2 "$R" bench append -c 0
expect_rc 2 "$R" bench append --size 0
expect_rc 5 "$R" bench append --url http://127.0.0.1:1 -s 0.2
expect_rc 3 "$R" bench read missing
echo "cli e2e: all checks passed"
