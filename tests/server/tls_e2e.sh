#!/usr/bin/env bash
# End-to-end test of `runnel serve --tls-cert/--tls-key`: a self-signed certificate generated
# here with the openssl CLI, a real server (memory store) on a free loopback port, and curl
# (--cacert) and the runnel CLI doing create, append, read, long-poll, SSE and a consumer
# group's live forms over https, and `runnel bench append|read|sse` over https. Also: a plain-HTTP request to the TLS port gets a clear 400 and the server keeps
# serving; a client that never handshakes is closed after the handshake timeout; bad
# certificate or key files fail start-up with a clear message and a non-zero exit; a connection
# beyond --max-connections gets 503 with Retry-After after its handshake.
# Usage: tls_e2e.sh RUNNEL_BINARY
set -euo pipefail

R="$1"
source "$(dirname "$0")/e2e_lib.sh"


cert="$workdir/cert.pem"
key="$workdir/key.pem"
other_key="$workdir/other-key.pem"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 \
  -subj /CN=localhost -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" \
  -keyout "$key" -out "$cert" 2>/dev/null
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$other_key" 2>/dev/null

# Bad certificate or key files: a clear message and a non-zero exit, before listening.
start_fails() {
  local want_rc="$1" want_msg="$2"; shift 2
  set +e
  local out
  out="$(timeout 20 "$R" serve --listen 127.0.0.1:0 --store memory --data "$workdir/d" "$@" 2>&1)"
  local rc=$?
  set -e
  [[ "$rc" == "$want_rc" ]] || fail "serve $*: expected exit $want_rc, got $rc ($out)"
  expect_has "$out" "$want_msg" "serve $*"
  expect_lacks "$out" "listening" "serve $*"
}
start_fails 1 "does not exist" --tls-cert "$workdir/missing.pem" --tls-key "$key"
start_fails 1 "does not exist" --tls-cert "$cert" --tls-key "$workdir/missing.pem"
start_fails 2 "must be given together" --tls-cert "$cert"
echo "not a certificate" >"$workdir/garbage.pem"
start_fails 1 "cannot load the TLS certificate chain" --tls-cert "$workdir/garbage.pem" --tls-key "$key"
start_fails 1 "cannot load the TLS private key" --tls-cert "$cert" --tls-key "$workdir/garbage.pem"
start_fails 1 "does not match the certificate" --tls-cert "$cert" --tls-key "$other_key"
# TLS does not lift the open-mode rule: no tokens and a non-loopback address need --auth none.
set +e
out="$(timeout 20 "$R" serve --listen 0.0.0.0:0 --store memory --data "$workdir/d" \
  --tls-cert "$cert" --tls-key "$key" 2>&1)"
rc=$?
set -e
expect_eq "$rc" 2 "open TLS server on 0.0.0.0"
expect_has "$out" "--auth none" "open TLS server on 0.0.0.0"

# The same through the environment, and a working server.
RUNNEL_TLS_CERT="$cert" RUNNEL_TLS_KEY="$key" "$R" serve --listen 127.0.0.1:0 --store memory \
  --data "$workdir/d" --long-poll-timeout-ms 300 --sse-max-duration-ms 1500 \
  --tls-handshake-timeout-ms 500 >"$workdir/server.log" 2>&1 &
server_pid=$!
url=""
for _ in $(seq 1 100); do
  url="$(grep -o 'https://127\.0\.0\.1:[0-9]*' "$workdir/server.log" | head -n1 || true)"
  [[ -n "$url" ]] && break
  sleep 0.1
done
[[ -n "$url" ]] || { cat "$workdir/server.log" >&2; fail "no https:// start-up line"; }
port="${url##*:}"
c() { curl -sS --max-time 10 --cacert "$cert" "$@"; }
code() { c -o /dev/null -w '%{http_code}' "$@"; }

# Without the certificate as trust anchor the client refuses the server: it really is TLS.
set +e
curl -sS --max-time 10 -o /dev/null "$url/healthz" 2>/dev/null
rc=$?
set -e
expect_eq "$rc" 60 "curl without --cacert (certificate problem)"

expect_eq "$(code "$url/healthz")" 200 "healthz over https"

# HTTP/2 by ALPN (when this curl speaks it), HTTP/1.1 for a client that asks for it.
h2_curl=0
if curl -V | grep -qw HTTP2; then
  h2_curl=1
  expect_eq "$(c --http2 -o /dev/null -w '%{http_version} %{http_code}' "$url/healthz")" "2 200" \
    "h2 chosen by ALPN"
  expect_eq "$(c --http1.1 -o /dev/null -w '%{http_version} %{http_code}' "$url/healthz")" \
    "1.1 200" "http/1.1 chosen by ALPN"
else
  echo "tls e2e: this curl has no HTTP/2; the ALPN checks did not run"
fi
expect_eq "$(code -X PUT -H 'Content-Type: application/json' "$url/v1/stream/t")" 201 "create"
expect_eq "$(code -X POST -H 'Content-Type: application/json' -d '[{"n":1},{"n":2}]' \
  "$url/v1/stream/t")" 204 "append"
expect_eq "$(c "$url/v1/stream/t?offset=-1")" '[{"n":1},{"n":2}]' "catch-up read"
expect_eq "$(code "$url/v1/stream/t?offset=0000000000000000_0000000000000002&live=long-poll")" \
  204 "long-poll timeout"
sse="$(c -N "$url/v1/stream/t?offset=-1&live=sse" || true)"
expect_has "$sse" 'event: data' "SSE data event"
expect_has "$sse" '{"n":2}' "SSE payload"
expect_has "$sse" '"streamNextOffset":"0000000000000000_0000000000000002"' "SSE control event"

# A consumer group's "wait for work" forms over https.
expect_eq "$(c -X POST "$url/v1/groups/stream/t?group=g&ack=1")" \
  '{"group":"g","last_acked":1}' "group ack"
gsse="$(c -N "$url/v1/groups/stream/t?group=g&live=sse" || true)"
expect_has "$gsse" '{"n":2}' "group SSE from the group's offset"
expect_lacks "$gsse" '{"n":1}' "group SSE skips acked records"
expect_eq "$(code -X POST "$url/v1/groups/stream/t?group=g2&ack=2")" 200 "ack g2"
expect_eq "$(code "$url/v1/groups/stream/t?group=g2&live=long-poll")" 204 "group long-poll timeout"

# The CLI over https: --cacert or RUNNEL_CACERT; without it the self-signed server is refused.
expect_eq "$("$R" create cli --url "$url" --cacert "$cert" -t text/plain)" "created cli" "cli create"
printf 'hello' | RUNNEL_CACERT="$cert" "$R" append cli --url "$url" >/dev/null
expect_eq "$(RUNNEL_CACERT="$cert" "$R" read cli --url "$url")" "hello" "cli read"
expect_eq "$("$R" group ack cli g 1 --url "$url" --cacert "$cert")" "g	last_acked=1" "cli group ack"
set +e
out="$("$R" ls --url "$url" 2>&1)"
rc=$?
set -e
expect_eq "$rc" 5 "cli without --cacert"
expect_has "$out" "certificate not trusted" "cli without --cacert"

# runnel bench over https: the appends it counts are exactly the records the streams hold, a
# catch-up read counts each round's bytes, SSE readers see every append; without --cacert the
# self-signed server is refused before any load.
json_field() { sed -E "s/.*\"$1\":([^,}]*).*/\1/" <<<"$2"; }
held_records() {
  "$R" describe "$1" --url "$url" --cacert "$cert" --json |
    sed -E 's/.*"next_offset":"[0-9]*_0*([0-9]+)".*/\1/'
}
out="$("$R" bench append tload -c 4 -s 1 --streams 2 --size 10 --json --url "$url" --cacert "$cert")"
expect_eq "$(json_field ok "$out")" "true" "bench append over https ok"
appended="$(json_field appends "$out")"
[[ "$appended" -gt 0 ]] || fail "bench append over https counted no appends: $out"
expect_eq "$(( $(held_records tload-0) + $(held_records tload-1) ))" "$appended" \
  "bench append over https: records held = appends counted"
out="$(RUNNEL_CACERT="$cert" "$R" bench read tload-0 --rounds 2 --json --url "$url")"
expect_eq "$(json_field bytes "$out")" "$(( $(held_records tload-0) * 10 * 2 ))" \
  "bench read over https counts the stream's bytes per round"
out="$("$R" bench sse tfan --readers 20 --appends 3 --json --url "$url" --cacert "$cert")"
expect_eq "$(json_field delivered "$out")" "60" "bench sse over https delivers every append"
expect_eq "$(json_field complete "$out")" "20" "bench sse over https: every reader saw every append"
set +e
out="$("$R" bench append tload -s 0.2 --url "$url" 2>&1)"
rc=$?
set -e
expect_eq "$rc" 5 "bench without --cacert"
expect_has "$out" "certificate not trusted" "bench without --cacert"

# Plain HTTP to the TLS port: a clear 400, and the server keeps serving.
plain="$(curl -sS --max-time 10 -w ' %{http_code}' "http://127.0.0.1:$port/healthz" || true)"
expect_has "$plain" "400" "plain HTTP status"
expect_has "$plain" "HTTPS" "plain HTTP message"
expect_eq "$(code "$url/healthz")" 200 "still serving after a plain request"

# A client that connects and never sends a ClientHello is closed by the handshake timeout.
start=$(date +%s%N)
timeout 10 bash -c "exec 3<>/dev/tcp/127.0.0.1/$port; cat <&3 >/dev/null" \
  || fail "silent connection not closed within 10 s"
elapsed_ms=$(( ($(date +%s%N) - start) / 1000000 ))
(( elapsed_ms < 5000 )) || fail "handshake timeout took ${elapsed_ms} ms"
expect_eq "$(code "$url/healthz")" 200 "still serving after a silent connection"

kill -0 "$server_pid" || fail "server died"

# Beyond --max-connections: 503 with Retry-After once the handshake is done, as on plain HTTP. A
# connection counts from accept, so one that has not sent its ClientHello yet holds the slot.
stop_server
: >"$workdir/capped.log"
"$R" serve --listen 127.0.0.1:0 --store memory --data "$workdir/d" --tls-cert "$cert" \
  --tls-key "$key" --max-connections 1 >"$workdir/capped.log" 2>&1 &
server_pid=$!
url=""
for _ in $(seq 1 100); do
  url="$(grep -o 'https://127\.0\.0\.1:[0-9]*' "$workdir/capped.log" | head -n1 || true)"
  [[ -n "$url" ]] && break
  sleep 0.1
done
[[ -n "$url" ]] || { cat "$workdir/capped.log" >&2; fail "no https:// start-up line"; }
exec {held}<>"/dev/tcp/127.0.0.1/${url##*:}"
busy="$(c --http1.1 -D - -o /dev/null "$url/healthz" | tr -d '\r')"
expect_has "$busy" "HTTP/1.1 503" "a TLS connection beyond the cap"
expect_has "$busy" "Retry-After: 1" "a TLS connection beyond the cap"
if [[ "$h2_curl" == 1 ]]; then
  busy="$(c --http2 -D - -o /dev/null "$url/healthz" | tr -d '\r')"
  expect_has "$busy" "HTTP/2 503" "an h2 connection beyond the cap"
  expect_has "$busy" "retry-after: 1" "an h2 connection beyond the cap"
fi
exec {held}>&-
echo "tls e2e: all checks passed"
