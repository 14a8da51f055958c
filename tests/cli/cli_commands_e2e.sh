#!/usr/bin/env bash
# End-to-end test of the CLI's shared conventions against a real `runnel serve` on the log store:
# one offset syntax (a record number or an offset token) in every command that takes an offset,
# global options before or after the command, `--version`, create's content type and retention,
# `close` and `retention`, one wording per error kind, human times in `token ls`, real offsets
# from `tail --json`, `check`'s exit codes, and `bench append --streams N --cleanup`.
# Usage: cli_commands_e2e.sh RUNNEL_BINARY
set -euo pipefail

R="$1"
source "$(dirname "$0")/../server/e2e_lib.sh"

expect_rc() {
  local want="$1"; shift
  set +e; "$@" >/dev/null 2>&1; local rc=$?; set -e
  [[ "$rc" == "$want" ]] || fail "exit code of '$*': expected $want, got $rc"
}
token_of() { printf '0000000000000000_%016d' "$1"; }

serve_on_free_port --store log --data "$workdir/data" --long-poll-timeout-ms 300

# --- The version, as an option and as a command.
expect_eq "$("$R" --version)" "$("$R" version)" "--version prints what version prints"
expect_has "$("$R" --version)" "runnel " "--version names the binary"

# --- create: a JSON stream by default, so JSON appends read back as one message per line.
expect_eq "$("$R" create jobs)" "created jobs" "create"
echo '{"job":1}' | "$R" append jobs >/dev/null
"$R" append jobs '{"job":2}' '{"job":3}' '{"job":4}' >/dev/null
expect_eq "$("$R" read jobs)" $'{"job":1}\n{"job":2}\n{"job":3}\n{"job":4}' "JSON by default"
expect_eq "$("$R" describe jobs --json | grep -o '"content_type":"[^"]*"')" \
  '"content_type":"application/json"' "default content type"
"$R" create notes -t text >/dev/null
expect_eq "$("$R" describe notes --json | grep -o '"content_type":"[^"]*"')" \
  '"content_type":"text/plain"' "-t text is text/plain"
"$R" create blob -t bytes >/dev/null
expect_eq "$("$R" describe blob --json | grep -o '"content_type":"[^"]*"')" \
  '"content_type":"application/octet-stream"' "-t bytes is application/octet-stream"
"$R" create seeded -t text --initial 'first' >/dev/null
expect_eq "$("$R" read seeded)" "first" "create --initial"

# --- One offset syntax: a record number N and the token of position N read the same records.
expect_eq "$("$R" read jobs -o 2)" $'{"job":3}\n{"job":4}' "read -o NUMBER: the records after it"
expect_eq "$("$R" read jobs -o "$(token_of 2)")" $'{"job":3}\n{"job":4}' "read -o TOKEN"
expect_eq "$("$R" read jobs -o 0)" "$("$R" read jobs)" "read -o 0 is the beginning"
expect_eq "$("$R" read jobs -o 4)" "" "read -o at the tail"
expect_eq "$("$R" read jobs -o 2 --json | grep -o '"offset":"[^"]*"')" "\"offset\":\"$(token_of 2)\"" \
  "read --json names the token of a record number"
expect_rc 2 "$R" read jobs -o two
expect_rc 2 "$R" read jobs -o 99999999999999999999999
expect_has "$("$R" read jobs -o two 2>&1 || true)" "neither a record number" "a bad offset says why"
expect_eq "$("$R" group ack jobs billing "$(token_of 2)")" $'billing\tlast_acked=2' "group ack TOKEN"
expect_eq "$("$R" group ack jobs billing 3)" $'billing\tlast_acked=3' "group ack NUMBER"
expect_eq "$("$R" group next jobs billing)" $'4\t{"job":4}' "group next after the ack"
expect_rc 2 "$R" group ack jobs billing 3x
"$R" channel create feed -p 1 >/dev/null
"$R" channel publish feed one >/dev/null
"$R" channel publish feed two >/dev/null
"$R" channel publish feed three >/dev/null
expect_eq "$("$R" channel read feed -o 1 | cut -f3 | tr '\n' ' ')" "two three " "channel read -o NUMBER"
expect_eq "$("$R" channel read feed -o "$(token_of 2)" | cut -f3)" "three" "channel read -o TOKEN"
expect_eq "$("$R" channel read feed --from 2 | cut -f3 | tr '\n' ' ')" "two three " "channel read --from"
expect_rc 2 "$R" channel read feed -o 1 --from 2
expect_eq "$("$R" group prune jobs "$(token_of 1)")" "removed 1" "group prune TOKEN"
expect_eq "$("$R" group prune jobs 3)" "removed 2" "group prune NUMBER (never past the ack)"

# --- Global options before or after the command.
expect_eq "$("$R" --json describe notes)" "$("$R" describe notes --json)" "--json before the command"
expect_eq "$("$R" --url "$RUNNEL_URL" --json ls)" "$(RUNNEL_URL=http://127.0.0.1:1 "$R" ls --json --url "$RUNNEL_URL")" \
  "--url before and after the command"
expect_eq "$(RUNNEL_URL=http://127.0.0.1:1 "$R" --url="$RUNNEL_URL" describe notes --json)" \
  "$("$R" describe notes --json)" "--url=URL before the command"
expect_eq "$("$R" --json group lag jobs)" "$("$R" group lag jobs --json)" "--json before a group command"
expect_rc 5 "$R" --url http://127.0.0.1:1 describe notes
# DATA arguments that look like global options are still data after the command's name.
"$R" create echo -t text >/dev/null
"$R" append echo -- --json >/dev/null
expect_eq "$("$R" read echo)" "--json" "an option-like DATA argument after --"
tokens="$workdir/tokens-dir"
"$R" token create --data "$tokens" --platform --note after >/dev/null 2>&1
"$R" --data "$tokens" token create --tenant acme --expires 1d --note before >/dev/null 2>&1
"$R" token --data "$tokens" create --tenant acme --note middle >/dev/null 2>&1
expect_eq "$("$R" token ls --data "$tokens" | tail -n +2 | wc -l | tr -d ' ')" "3" \
  "--data after, before and in the middle of token create"
expect_eq "$("$R" --data "$tokens" token ls)" "$("$R" token ls --data "$tokens")" "token ls --data either side"
expect_eq "$("$R" --json --data "$tokens" token ls | grep -o '"note":"[a-z]*"' | sort | tr '\n' ' ')" \
  '"note":"after" "note":"before" "note":"middle" ' "token ls --json, before the command"
expect_has "$("$R" token ls --json --data "$tokens")" '"expires_at_ms":' "token ls --json keeps the milliseconds"

# --- Human times in token ls: a date, never raw milliseconds.
listing="$("$R" token ls --data "$tokens")"
expect_has "$listing" "EXPIRES (UTC)" "token ls header"
expect_has "$listing" "never" "a token without expiry"
[[ "$listing" =~ [0-9]{4}-[0-9]{2}-[0-9]{2}\ [0-9]{2}:[0-9]{2}:[0-9]{2}Z ]] || fail "token ls: no date in [$listing]"
[[ ! "$listing" =~ [0-9]{13} ]] || fail "token ls prints raw milliseconds: [$listing]"

# --- Retention: flags on create, `runnel retention` to change them (PATCH), HEAD reports them.
"$R" create capped --max-events 2 --max-age-ms 60000 >/dev/null
expect_eq "$("$R" describe capped | grep '^retention:' | tr -s ' ')" \
  "retention: max_age_ms=60000 max_events=2" "retention flags on create"
"$R" append capped 1 2 3 >/dev/null
expect_eq "$("$R" read capped)" $'2\n3' "retention applies"
expect_eq "$("$R" retention capped --max-bytes 1000)" "retention of capped: max_bytes=1000" \
  "retention replaces the caps"
expect_eq "$("$R" describe capped --json | grep -o '"retention":{[^}]*}')" '"retention":{"max_bytes":1000}' \
  "describe after retention"
expect_eq "$("$R" retention capped --none --json)" '{"name":"capped","ok":true,"retention":{}}' "retention --none"
expect_rc 2 "$R" retention capped
expect_rc 2 "$R" retention capped --none --max-events 3
expect_rc 2 "$R" retention capped --max-events x
expect_rc 3 "$R" retention ghost --max-events 3

# --- close
expect_eq "$("$R" close notes)" "closed notes at $(token_of 0)" "close"
expect_eq "$("$R" describe notes --json | grep -o '"closed":[a-z]*')" '"closed":true' "closed"
expect_rc 4 "$R" append notes more
expect_eq "$("$R" close notes --json)" "{\"closed\":\"notes\",\"next_offset\":\"$(token_of 0)\",\"ok\":true}" \
  "closing a closed stream is accepted"
expect_rc 3 "$R" close ghost

# --- One wording per error kind: a missing stream reads the same from every command.
for cmd in "describe ghost" "read ghost" "tail ghost" "append ghost x" "rm ghost" "close ghost" \
    "retention ghost --none" "group ls ghost" "group ack ghost g 1" "group next ghost g"; do
  # shellcheck disable=SC2086
  err="$("$R" $cmd 2>&1 >/dev/null || true)"
  what="${cmd% ghost*}"
  expect_eq "$err" "runnel: $what failed: HTTP 404: stream 'ghost' does not exist" "404 of '$cmd'"
  # shellcheck disable=SC2086
  expect_rc 3 "$R" $cmd
done
for cmd in "publish ghost x" "resolve ghost k" "read ghost"; do
  # shellcheck disable=SC2086
  expect_eq "$("$R" channel $cmd 2>&1 >/dev/null || true)" \
    "runnel: channel ${cmd%% *} failed: HTTP 404: channel 'ghost' does not exist" "404 of 'channel $cmd'"
done
expect_eq "$("$R" describe ghost --json || true)" \
  '{"error":"stream '"'"'ghost'"'"' does not exist","ok":false,"status":404}' "404 with --json"

# --- Control characters in names are escaped in human output, exact in --json.
"$R" create $'evil\e]0;pwned\a' -t text >/dev/null
expect_has "$("$R" ls evil)" 'evil\x1b]0;pwned\x07' "ls escapes control characters"
expect_has "$("$R" close $'evil\e]0;pwned\a')" 'closed evil\x1b]0;pwned\x07' "close escapes the name"
expect_has "$("$R" ls evil --json)" 'evil\u001b]0;pwned\u0007' "--json keeps the exact name"

# --- tail --json names real offsets, never "now".
"$R" create live -t text >/dev/null
"$R" append live a b >/dev/null
"$R" tail live --json >"$workdir/tail.out" 2>&1 &
tail_pid=$!
sleep 0.5
"$R" append live c >/dev/null
for _ in $(seq 1 50); do grep -q '"c"' "$workdir/tail.out" && break; sleep 0.1; done
"$R" close live >/dev/null
wait "$tail_pid" || fail "tail did not end when the stream closed"
expect_lacks "$(cat "$workdir/tail.out")" '"now"' "tail --json"
expect_has "$(head -n1 "$workdir/tail.out")" "\"offset\":\"$(token_of 2)\"" "tail --json starts at the tail's token"
expect_has "$(head -n1 "$workdir/tail.out")" "\"next_offset\":\"$(token_of 3)\"" "tail --json next offset"
expect_eq "$("$R" tail live -o 1 | tr -d '\n')" "bc" "tail -o NUMBER"

# --- bench append --streams N writes to all N; --cleanup deletes only what the run created.
"$R" create bench-1 -t text >/dev/null
"$R" bench append bench --streams 5 -c 2 -s 0.5 --json --cleanup >"$workdir/bench.json"
expect_has "$(cat "$workdir/bench.json")" '"removed_streams":4' "bench --cleanup count"
expect_eq "$("$R" ls bench- | cut -f1 | tr '\n' ' ')" "bench-1 " "bench --cleanup keeps a stream it did not create"
"$R" bench append wide --streams 6 -c 2 -s 0.5 >/dev/null
for i in 0 1 2 3 4 5; do
  count="$("$R" describe "wide-$i" --json | sed 's/.*"event_count":\([0-9]*\).*/\1/')"
  [[ "$count" -gt 0 ]] || fail "bench --streams 6 -c 2 left wide-$i empty"
done

# --- check: no log, in use, missing, and a stopped server's directory.
mkdir "$workdir/empty"
expect_rc 3 "$R" check "$workdir/empty"
expect_has "$("$R" check "$workdir/empty" 2>&1 || true)" "holds no runnel log" "check of a directory with no log"
[[ ! -e "$workdir/empty/LOCK" ]] || fail "check wrote a LOCK file into a directory with no log"
expect_rc 3 "$R" check "$workdir/nowhere"
expect_rc 6 "$R" check "$workdir/data"
expect_has "$("$R" check --data "$workdir/data" 2>&1 || true)" "is in use" "check of a directory in use"
expect_rc 2 "$R" check
stop_server
expect_rc 0 "$R" check "$workdir/data"
expect_rc 0 "$R" --data "$workdir/data" check

echo "cli_commands_e2e: ok"
