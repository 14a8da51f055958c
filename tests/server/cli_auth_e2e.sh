#!/usr/bin/env bash
# End-to-end test of authentication, tenant scopes and consumer groups through the runnel CLI
# and curl against a real `runnel serve` (memory store, token file in a temporary data directory)
# on a free loopback port. Checks outputs and exit codes.
# Usage: cli_auth_e2e.sh RUNNEL_BINARY
set -euo pipefail

R="$1"
source "$(dirname "$0")/e2e_lib.sh"

expect_rc() {
  local want="$1"; shift
  set +e; "$@" >/dev/null 2>&1; local rc=$?; set -e
  [[ "$rc" == "$want" ]] || fail "exit code of '$*': expected $want, got $rc"
}
status() { curl -s -o /dev/null -w '%{http_code}' "$@"; }

data="$workdir/data"
mkdir -p "$data"

# Open without tokens: refuses a non-loopback address unless --auth none.
expect_rc 2 "$R" serve --listen 0.0.0.0:0 --store memory --data "$data"

start_server() { serve_on_free_port --store memory --data "$data"; }

start_server
grep -q 'auth: none (open)' "$workdir/server.log" || fail "open start-up line: $(cat "$workdir/server.log")"
stop_server

platform="$("$R" token --data "$data" create --platform 2>/dev/null)"
acme="$("$R" token --data "$data" create --tenant acme 2>/dev/null)"
[[ "$platform" == rnl_* && "$acme" == rnl_* ]] || fail "token create output"
# '-' is the token file's word for "no tenant": it is no tenant id. An --expires that is empty
# or zero is refused rather than read as "never" or "already expired".
expect_rc 2 "$R" token --data "$data" create --tenant -
expect_rc 2 "$R" token --data "$data" create --tenant 'bad/id'
expect_rc 2 "$R" token --data "$data" create --tenant acme --expires ""
expect_rc 2 "$R" token --data "$data" create --tenant acme --expires 0s
start_server
grep -q 'auth: tokens (2 in' "$workdir/server.log" || fail "tokens start-up line: $(cat "$workdir/server.log")"

expect_eq "$(status "$RUNNEL_URL/healthz")" 200 "healthz without a token"
expect_eq "$(status "$RUNNEL_URL/v1/streams")" 401 "no token"
expect_eq "$(status -H 'Authorization: Bearer nope' "$RUNNEL_URL/v1/streams")" 403 "bad token"
expect_rc 1 "$R" ls
expect_rc 0 "$R" ls --token "$platform"

export RUNNEL_TOKEN="$platform"
"$R" create events -t application/json >/dev/null
"$R" append events '[{"n":1},{"n":2},{"n":3},{"n":4},{"n":5},{"n":6}]' >/dev/null
expect_eq "$("$R" group ls events 2>/dev/null)" "" "group ls of a stream without groups prints no line"
expect_eq "$("$R" group ls events 2>&1 >/dev/null)" "runnel: stream 'events' has no consumer groups" \
  "group ls without groups says so on stderr"
expect_eq "$("$R" group ack events fast 5)" "fast	last_acked=5" "ack"
expect_eq "$("$R" group ack events slow 2)" "slow	last_acked=2" "ack slow"
expect_eq "$("$R" group ack events slow 1)" "slow	last_acked=2" "ack is monotonic"
expect_eq "$("$R" group ls events | tr '\n' ' ')" "fast	last_acked=5	lag=1 slow	last_acked=2	lag=4 " "group ls"
expect_eq "$("$R" group lag events slow)" "slow	4" "group lag"
expect_eq "$("$R" group lag events never)" "never	6" "lag of a group that never acked"
expect_eq "$("$R" group next events fast)" '6	{"n":6}' "group next"
expect_eq "$("$R" group prune events 5)" "removed 2" "prune stops at the slowest group"
expect_eq "$("$R" group next events slow --limit 2 | cut -f1 | tr '\n' ' ')" "3 4 " "next after prune"
expect_rc 3 "$R" group ls missing
expect_eq "$("$R" group prune missing 5)" "removed 0" "prune of an unknown stream removes nothing (P9)"
# Offsets are decimal and within 64 bits: "-1" would wrap to 2^64-1 (prune everything, ack past
# every record for good), a value past 2^64-1 would saturate, "0x10" would be hexadecimal.
expect_rc 2 "$R" group prune events -1
expect_rc 2 "$R" group ack events fast -1
expect_rc 2 "$R" group ack events fast 18446744073709551616
expect_rc 2 "$R" group ack events fast 0x10
expect_rc 2 "$R" group next events fast --limit -1
expect_eq "$("$R" group ack events fast 006)" "fast	last_acked=6" "leading zeros are decimal"
expect_eq "$("$R" group next events slow --limit 2 | cut -f1 | tr '\n' ' ')" "3 4 " "nothing pruned by the refused commands"
# A retired group stops holding prune back once deleted; a later ack starts it afresh.
expect_eq "$("$R" group rm events slow)" "deleted group slow" "group rm"
expect_rc 3 "$R" group rm events slow
expect_eq "$("$R" group ls events | cut -f1 | tr '\n' ' ')" "fast " "the deleted group is not listed"
expect_eq "$("$R" group prune events 5)" "removed 3" "prune goes past the deleted group"
expect_eq "$("$R" group ack events slow 5)" "slow	last_acked=5" "an ack registers the name afresh"
expect_eq "$("$R" group rm --json events slow)" '{"group":"slow","ok":true}' "group rm --json"
expect_eq "$(status -X DELETE "$RUNNEL_URL/v1/groups/stream/events" -H "Authorization: Bearer $platform")" 400 "DELETE without ?group"

# Tenant scope: the platform token may not touch acme's streams, acme may.
export RUNNEL_TOKEN="$acme"
expect_eq "$(status -X PUT -H "Authorization: Bearer $acme" -H 'Content-Type: text/plain' \
  "$RUNNEL_URL/v1/tenants/acme/stream/jobs")" 201 "acme creates"
expect_eq "$(status -X POST -H "Authorization: Bearer $acme" -H 'Content-Type: text/plain' \
  --data-binary 'job-1' "$RUNNEL_URL/v1/tenants/acme/stream/jobs")" 204 "acme appends"
expect_eq "$("$R" group ack --tenant acme jobs workers 1)" "workers	last_acked=1" "tenant ack"
expect_rc 4 "$R" group ls --tenant acme jobs --token "$platform"
expect_rc 4 "$R" group ls jobs-anything --tenant globex
expect_rc 4 "$R" ls   # the global listing needs the platform
# The client commands in a tenant scope.
"$R" create --tenant acme notes -t text/plain >/dev/null
"$R" append --tenant acme notes 'hello' >/dev/null
expect_eq "$("$R" read --tenant acme notes)" "hello" "tenant read"
expect_eq "$("$R" ls --tenant acme | cut -f1 | tr '\n' ' ')" "jobs notes " "tenant ls"
expect_rc 4 "$R" read --tenant acme notes --token "$platform"
expect_rc 4 "$R" read --tenant globex notes

# A token created while the server runs works without a restart (re-read at most once a second).
globex="$("$R" token --data "$data" create --tenant globex 2>/dev/null)"
code=""
for _ in $(seq 1 50); do
  code="$(status -H "Authorization: Bearer $globex" "$RUNNEL_URL/v1/tenants/globex/streams")"
  [[ "$code" == 200 ]] && break
  sleep 0.1
done
expect_eq "$code" 200 "token created while running"

echo "cli auth e2e: all checks passed"
