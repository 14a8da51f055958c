#!/usr/bin/env bash
# End-to-end test that subscription state survives a restart of `runnel serve` on the log store
# (PROTOCOL.md 6-7 as implemented in src/server/subscription_service.h): acked offsets, the
# generation counter, the lease and its claim token persist, and the webhook signing key is
# the same file (mode 0600) with the same kid. Plain curl against a free loopback port.
# Usage: subscriptions_restart_e2e.sh RUNNEL_BINARY
set -euo pipefail

R="$1"
source "$(dirname "$0")/e2e_lib.sh"

field() { grep -o "\"$1\":[^,}]*" | head -n1 | sed -e "s/^\"$1\"://" -e 's/"//g'; }
data="$workdir/data"

start_server() {
  serve_on_free_port --store log --data "$data" --durability none
  url="$RUNNEL_URL"
}
call() {  # call METHOD PATH [BODY] [TOKEN] -> prints "<status> <body>"
  local args=(-s -w ' %{http_code}' -X "$1" -H 'Content-Type: application/json')
  [[ -n "${4:-}" ]] && args+=(-H "Authorization: Bearer $4")
  [[ -n "${3:-}" ]] && args+=(--data "$3")
  local out
  out="$(curl "${args[@]}" "$url/v1/stream/$2")"
  echo "${out##* } ${out% *}"
}

start_server
kid1="$(curl -s "$url/v1/stream/__ds/jwks.json" | field kid)"
[[ "$kid1" == ds_* ]] || fail "kid: $kid1"
expect_eq "$(stat -c %a "$data/webhook-signing-key.pem")" "600" "key file mode"
expect_eq "$(call PUT wake/pool '[]' | cut -d' ' -f1)" "201" "create wake stream"
config='{"type":"pull-wake","pattern":"events/*","wake_stream":"wake/pool","lease_ttl_ms":60000}'
expect_eq "$(call PUT __ds/subscriptions/restart "$config" | cut -d' ' -f1)" "201" "create sub"
expect_eq "$(call PUT events/a '{"n":1}' | cut -d' ' -f1)" "201" "create events/a"
expect_eq "$(call POST events/a '{"n":2}' | cut -d' ' -f1)" "204" "append"
claim="$(call POST __ds/subscriptions/restart/claim '{"worker":"w1"}')"
expect_eq "${claim%% *}" "200" "claim"
wake="$(echo "$claim" | field wake_id)"
gen="$(echo "$claim" | field generation)"
token="$(echo "$claim" | field token)"
ack="{\"wake_id\":\"$wake\",\"generation\":$gen,\"acks\":[{\"stream\":\"events/a\",\"offset\":\"0000000000000000_0000000000000002\"}]}"
expect_eq "$(call POST __ds/subscriptions/restart/ack "$ack" "$token" | cut -d' ' -f1)" "200" "ack"
stop_server

start_server
got="$(call GET __ds/subscriptions/restart)"
expect_eq "${got%% *}" "200" "get after restart"
expect_eq "$(echo "$got" | field acked_offset)" "0000000000000000_0000000000000002" "acked offset"
expect_eq "$(echo "$got" | field generation)" "$gen" "generation"
expect_eq "$(curl -s "$url/v1/stream/__ds/jwks.json" | field kid)" "$kid1" "kid after restart"
# The lease, its holder and its token survive the restart: the worker goes on.
expect_eq "$(call POST __ds/subscriptions/restart/claim '{"worker":"w2"}' | cut -d' ' -f1)" "409" \
  "claim while w1 holds the lease"
expect_eq "$(call POST __ds/subscriptions/restart/ack "$ack" "$token" | cut -d' ' -f1)" "200" \
  "heartbeat with the token minted before the restart"
done_ack="${ack%\}},\"done\":true}"
expect_eq "$(call POST __ds/subscriptions/restart/ack "$done_ack" "$token" | cut -d' ' -f1)" "200" \
  "done"
expect_eq "$(call POST __ds/subscriptions/restart/ack "$done_ack" "$token" | cut -d' ' -f1)" "409" \
  "the finished wake is fenced"
claim="$(call POST __ds/subscriptions/restart/claim '{"worker":"w2"}')"
expect_eq "${claim%% *}" "200" "claim after restart"
(( $(echo "$claim" | field generation) > gen )) || fail "generation must grow across a restart"
# Re-confirmation is idempotent; a different configuration conflicts.
expect_eq "$(call PUT __ds/subscriptions/restart "$config" | cut -d' ' -f1)" "200" "re-confirm"
expect_eq "$(call PUT __ds/subscriptions/restart "${config/60000/30000}" | cut -d' ' -f1)" "409" \
  "changed configuration"
expect_eq "$(call DELETE __ds/subscriptions/restart | cut -d' ' -f1)" "204" "delete"
stop_server

start_server
expect_eq "$(call GET __ds/subscriptions/restart | cut -d' ' -f1)" "404" "deleted stays deleted"
stop_server
echo "subscriptions_restart_e2e: OK"
