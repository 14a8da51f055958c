#!/usr/bin/env bash
# End-to-end test of /v1/channels and `runnel channel` against a real `runnel serve` on the log
# store, including a restart: an idempotency key committed before the restart is still
# recognised after it (SEMANTICS I4), and partitions stay readable as ordinary streams (K7).
# Usage: channels_e2e.sh RUNNEL_BINARY
set -euo pipefail

R="$1"
source "$(dirname "$0")/e2e_lib.sh"

start_server() { serve_on_free_port --store log --data "$workdir/data"; }

expect_rc() {
  local want="$1"; shift
  set +e; "$@" >/dev/null 2>&1; local rc=$?; set -e
  [[ "$rc" == "$want" ]] || fail "exit code of '$*': expected $want, got $rc"
}
http_code() { curl -s -o /dev/null -w '%{http_code}' "$@"; }

start_server

expect_eq "$("$R" channel create orders -p 4)" "created channel orders with 4 partitions" "create"
expect_eq "$("$R" channel create orders -p 4)" "exists channel orders with 4 partitions" "re-create"
expect_rc 4 "$R" channel create orders -p 3
expect_eq "$(http_code -X PUT "$RUNNEL_URL/v1/channels/orders?partitions=0")" "400" "zero partitions (K1)"
expect_eq "$(http_code -X PUT "$RUNNEL_URL/v1/channels/bad%20id?partitions=1")" "400" "bad id"

first="$("$R" channel publish orders 'order one' -k cust-7 -i k1)"
again="$("$R" channel publish orders 'order one' -k cust-7 -i k1)"
expect_eq "$again" "$first (duplicate: already published)" "duplicate publish (I4)"
part="$(echo "$first" | sed 's/.*partition \([0-9]*\) offset.*/\1/')"
printf 'order two' | "$R" channel publish orders -k cust-7 >/dev/null
expect_eq "$("$R" channel read orders -p "$part" | cut -f2,3)" $'cust-7\torder one\ncust-7\torder two' "read partition in order (K7)"
expect_eq "$("$R" channel resolve orders k1 | cut -d' ' -f1)" "committed" "resolve committed key"
expect_rc 3 "$R" channel resolve orders never-sent
expect_eq "$(curl -s "$RUNNEL_URL/v1/channels/orders/keys/never-sent")" '{"state":"absent"}' "absent over HTTP"
# HEAD answers like GET on every channel route: the same status and content type.
for target in "orders" "orders/partitions/$part" "orders/keys/k1" "orders/keys/never-sent" \
    "orders/partitions/9" "ghost"; do
  get_code="$(http_code "$RUNNEL_URL/v1/channels/$target")"
  expect_eq "$(http_code -I "$RUNNEL_URL/v1/channels/$target")" "$get_code" "HEAD of $target"
  expect_eq "$(curl -sI "$RUNNEL_URL/v1/channels/$target" | grep -i '^content-type:' | tr -d '\r')" \
    "$(curl -s -D - -o /dev/null "$RUNNEL_URL/v1/channels/$target" | grep -i '^content-type:' | tr -d '\r')" \
    "HEAD of $target: GET's content type"
done
expect_eq "$(curl -s -D - -o /dev/null -X DELETE "$RUNNEL_URL/v1/channels/orders/keys/k1" | grep -i '^allow:' | tr -d '\r')" \
  "Allow: GET, HEAD" "a key's route allows GET and HEAD"
expect_eq "$(http_code "$RUNNEL_URL/v1/stream/orders:$part?offset=-1")" "200" "partition is a stream"
expect_eq "$(http_code "$RUNNEL_URL/v1/channels/orders/partitions/9")" "404" "partition out of range"
# Beyond the largest partition count too: the answer says how many partitions there are.
expect_eq "$(curl -s "$RUNNEL_URL/v1/channels/orders/partitions/5000" | grep -o 'has [0-9]* partitions')" \
  "has 4 partitions" "partition past the largest count"
expect_eq "$(http_code "$RUNNEL_URL/v1/channels/orders/partitions/x")" "400" "partition not a number"
expect_eq "$(http_code "$RUNNEL_URL/v1/channels/ghost")" "404" "unknown channel"
expect_eq "$(http_code -X DELETE "$RUNNEL_URL/v1/channels/orders")" "405" "unsupported method"

# Partitions are readable as streams, but only the channel writes, trims or deletes them: a
# protocol append would not be an envelope, and a trim would make the key index disagree with a
# scan of what is left (SEMANTICS choice 11).
S="$RUNNEL_URL/v1/stream/orders:$part"
expect_eq "$(http_code "$S?offset=-1")" "200" "partition readable as a stream"
expect_eq "$(curl -sI "$S" | grep -ci '^content-type:' || true)" "0" "no empty Content-Type on HEAD"
# (a partition has no content type: the append sends none, so only the ownership refuses it)
expect_eq "$(http_code -X POST -H 'Content-Type:' --data-binary junk "$S")" "409" "protocol append to a partition"
expect_eq "$(http_code -X DELETE "$S")" "409" "delete of a partition"
expect_eq "$(http_code -X PATCH -H 'Stream-Retention-Max-Events: 1' "$S")" "409" "retention on a partition"
expect_eq "$(http_code -X POST "$RUNNEL_URL/v1/groups/stream/orders:$part?prune=10")" "409" "prune of a partition"
expect_eq "$(http_code -X POST "$RUNNEL_URL/v1/groups/stream/orders:$part?group=g&ack=1")" "200" "groups may ack a partition"
expect_eq "$("$R" channel read orders -p "$part" | wc -l | tr -d ' ')" "2" "partition untouched"
# A stream holding records under a partition's name is not adopted (its rows are not envelopes).
curl -s -o /dev/null -X PUT -H 'Content-Type: text/plain' "$RUNNEL_URL/v1/stream/pre:1"
curl -s -o /dev/null -X POST -H 'Content-Type: text/plain' --data-binary junk "$RUNNEL_URL/v1/stream/pre:1"
expect_eq "$(http_code -X PUT "$RUNNEL_URL/v1/channels/pre?partitions=2")" "409" "non-partition stream in the way"
expect_eq "$(http_code -X PUT "$RUNNEL_URL/v1/channels/pre?partitions=1")" "201" "a count that avoids it"
# An empty stream with retention caps is not adopted: a partition keeps every message.
expect_eq "$(http_code -X PUT -H 'Content-Type: text/plain' -H 'Stream-Retention-Max-Events: 2' \
  "$RUNNEL_URL/v1/stream/capped:1")" "201" "empty stream with retention caps"
expect_eq "$(curl -s -o /dev/null -w '%{http_code}' -X PUT "$RUNNEL_URL/v1/channels/capped?partitions=2")" \
  "409" "capped stream not adopted"
expect_eq "$(http_code "$RUNNEL_URL/v1/stream/capped:0?offset=-1")" "404" "nothing created for it"
# An empty stream with a TTL is adopted as a partition; the channel's messages outlive the TTL.
expect_eq "$(http_code -X PUT -H 'Content-Type: text/plain' -H 'Stream-TTL: 1' "$RUNNEL_URL/v1/stream/ttl:1")" \
  "201" "empty stream with a TTL"
expect_eq "$(http_code -X PUT "$RUNNEL_URL/v1/channels/ttl?partitions=2")" "201" "adopts it"
for k in a b c d e f; do "$R" channel publish ttl "m-$k" -k "$k" >/dev/null; done
sleep 2.5  # past the TTL and its one-second grace
expect_eq "$(http_code "$RUNNEL_URL/v1/stream/ttl:1?offset=-1")" "200" "partition outlives the TTL"
expect_eq "$({ "$R" channel read ttl -p 0; "$R" channel read ttl -p 1; } | cut -f3 | sort | tr '\n' ' ')" \
  "m-a m-b m-c m-d m-e m-f " "messages outlive the TTL"
# Creates racing with different counts: never both created.
for i in 1 2 3 4 5 6 7 8; do
  http_code -X PUT "$RUNNEL_URL/v1/channels/race$i?partitions=2" >"$workdir/race-a" &
  a=$!
  http_code -X PUT "$RUNNEL_URL/v1/channels/race$i?partitions=3" >"$workdir/race-b" &
  wait "$a" $!
  expect_eq "$(printf '%s\n%s\n' "$(cat "$workdir/race-a")" "$(cat "$workdir/race-b")" | sort | tr '\n' ' ')" \
    "201 409 " "racing creates $i"
done
# Reads: an empty partition's next offset is 1; from takes any 64-bit offset.
expect_eq "$(curl -s "$RUNNEL_URL/v1/channels/pre/partitions/0?from=0")" '{"messages":[],"next":1}' "empty partition"
expect_eq "$(http_code "$RUNNEL_URL/v1/channels/pre/partitions/0?from=10000000000")" "200" "large from"
expect_eq "$(http_code "$RUNNEL_URL/v1/channels/pre/partitions/0?from=18446744073709551616")" "400" "from past 2^64-1"
# A plain stream named like partition 0 is treated as partitions 1.. are: adopted when empty,
# a conflict (409, not a bad request) when it holds records; no channel exists there meanwhile.
curl -s -o /dev/null -X PUT -H 'Content-Type: text/plain' "$RUNNEL_URL/v1/stream/zero:0"
expect_eq "$(http_code -X PUT "$RUNNEL_URL/v1/channels/zero?partitions=2")" "201" "empty partition 0 adopted"
curl -s -o /dev/null -X PUT -H 'Content-Type: text/plain' "$RUNNEL_URL/v1/stream/full:0"
curl -s -o /dev/null -X POST -H 'Content-Type: text/plain' --data-binary junk "$RUNNEL_URL/v1/stream/full:0"
expect_eq "$(http_code "$RUNNEL_URL/v1/channels/full")" "404" "a plain stream is no channel"
expect_eq "$(http_code -X PUT "$RUNNEL_URL/v1/channels/full?partitions=1")" "409" "partition 0 holding records"
# The head-checkpoint stream exists from the channel's creation, owned by it: its name cannot be
# taken before the first checkpoint, which would refuse the channel after a restart.
expect_eq "$(http_code -X PUT "$RUNNEL_URL/v1/channels/early?partitions=1")" "201" "channel without checkpoints yet"
"$R" channel publish early 'm' -i e1 >/dev/null
expect_eq "$(http_code -X POST -H 'Content-Type:' --data-binary junk "$RUNNEL_URL/v1/stream/early:checkpoint")" \
  "409" "checkpoint stream owned from the start"
expect_eq "$(http_code -X DELETE "$RUNNEL_URL/v1/stream/early:checkpoint")" "409" "checkpoint stream not deletable"

# Restart: the key index is rebuilt from the partitions, so the duplicate is still recognised.
stop_server
start_server
expect_eq "$("$R" channel publish early 'm' -i e1 | grep -c duplicate)" "1" "channel with an early checkpoint stream reopens"
expect_eq "$("$R" channel publish orders 'order one' -k cust-7 -i k1)" "$again" "duplicate after restart (I4)"
expect_eq "$("$R" channel read orders -p "$part" | wc -l | tr -d ' ')" "2" "no row added by the duplicate"
next="$(curl -s "$RUNNEL_URL/v1/channels/orders" | sed 's/.*"next_offsets":\[\([^]]*\)\].*/\1/')"
expect_eq "$(echo "$next" | tr ',' '\n' | awk '{s+=$1} END {print s}')" "6" "next offsets after restart (V2)"

# With tokens configured, channels (global scope) need the platform or the cross-tenant
# capability (SEMANTICS Z1-Z3); the server picks up new tokens without a restart.
tenant="$("$R" token --data "$workdir/data" create --tenant acme 2>/dev/null)"
platform="$("$R" token --data "$workdir/data" create --platform 2>/dev/null)"
sleep 1.2
expect_eq "$(http_code "$RUNNEL_URL/v1/channels/orders")" "401" "no token"
expect_eq "$(http_code -H "Authorization: Bearer $tenant" "$RUNNEL_URL/v1/channels/orders")" "403" "tenant token"
expect_eq "$(http_code -H "Authorization: Bearer $tenant" "$RUNNEL_URL/v1/channels/ghost")" "403" "tenant token, unknown channel (Z4)"
expect_eq "$(http_code -H "Authorization: Bearer $platform" "$RUNNEL_URL/v1/channels/orders")" "200" "platform token"
# The CLI sends --token / RUNNEL_TOKEN; with --json a refusal is a JSON line on stdout.
expect_rc 1 "$R" channel read orders -p "$part"
expect_eq "$("$R" channel read orders -p "$part" --token "$platform" | wc -l | tr -d ' ')" "2" "CLI with --token"
expect_eq "$(RUNNEL_TOKEN="$platform" "$R" channel resolve orders k1 | cut -d' ' -f1)" "committed" "CLI with RUNNEL_TOKEN"
set +e; denied="$("$R" channel read orders --json --token "$tenant")"; rc=$?; set -e
expect_eq "$rc" "4" "tenant token refused"
expect_eq "$(echo "$denied" | sed -E 's/.*"ok":(false).*"status":([0-9]+).*/\1 \2/')" "false 403" "JSON refusal"
export RUNNEL_TOKEN="$platform"
expect_rc 3 "$R" channel resolve orders never-sent --json
expect_rc 2 "$R" channel publish orders x -i ''
expect_rc 2 "$R" channel read orders --from -1
expect_rc 2 "$R" channel create orders -p 0x4

echo "channels e2e: all checks passed"
