#!/usr/bin/env bash
# End-to-end test of the file-descriptor budget of `runnel serve` (src/server/fd_budget.h):
#  1. Under `ulimit -n 128` the connection cap is lowered to fit the limit, with a reserve the
#     clients cannot take: while idle connections fill every connection slot, a new client gets
#     503 with Retry-After at once (not a hang), appends on a connection opened earlier still
#     succeed, across a segment roll and a checkpoint (two 34 MiB records: segments are 64 MiB),
#     and no accept failure is logged.
#  2. When the descriptor limit is lowered under a running server (prlimit), so that accept()
#     itself fails with EMFILE, pending clients are still answered 503 (the spare descriptor),
#     the failure is logged at most once per 10 s, and /metrics counts it.
# Connections are held open by this shell (bash /dev/tcp); every wait is bounded.
# Usage: fd_budget_e2e.sh RUNNEL_BINARY
set -euo pipefail
export LC_ALL=C

R="$1"
source "$(dirname "$0")/e2e_lib.sh"
command -v prlimit >/dev/null || { echo "fd_budget_e2e: prlimit not found" >&2; exit 1; }

held=()
open_connections() {  # open_connections N: opens N idle connections to the server, into held[]
  local port="${RUNNEL_URL##*:}" fd
  for _ in $(seq 1 "$1"); do
    exec {fd}<>"/dev/tcp/127.0.0.1/$port"
    held+=("$fd")
  done
}
close_connections() {
  local fd
  for fd in "${held[@]}"; do exec {fd}>&-; done
  held=()
}
# raw FD METHOD PATH [BODY_FILE]: one request on the open connection FD; prints "<status> <body>"
# ("000" when no answer came within 20 s).
raw() {
  local fd="$1" method="$2" path="$3" file="${4:-}" length=0 line status body=""
  [[ -n "$file" ]] && length="$(stat -c %s "$file")"
  printf '%s %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\n' \
    "$method" "$path" >&"$fd"
  printf 'Content-Length: %d\r\n\r\n' "$length" >&"$fd"
  [[ -n "$file" ]] && cat "$file" >&"$fd"
  IFS= read -r -t 20 -u "$fd" line || { echo "000"; return; }
  status="$(echo "$line" | cut -d' ' -f2)"
  length=0
  while IFS= read -r -t 20 -u "$fd" line; do
    line="${line%$'\r'}"
    [[ -z "$line" ]] && break
    [[ "${line,,}" == content-length:* ]] && length="${line#*: }"
  done
  ((length > 0)) && IFS= read -r -N "$length" -t 20 -u "$fd" body
  echo "$status $body"
}
# busy_probe: a new client's request; prints the status and Retry-After ("000" if no answer
# within 5 s, the hang this test guards against).
busy_probe() {
  local out
  out="$(curl -s -D - -o /dev/null --max-time 5 "$RUNNEL_URL/healthz" || true)"
  echo "$(echo "$out" | head -n1 | cut -d' ' -f2) $(echo "$out" | tr -d '\r' |
    sed -n 's/^[Rr]etry-[Aa]fter: //p')"
}
server_fds() { ls "/proc/$server_pid/fd" | wc -l; }

# --- 1. ulimit -n 128: the cap is derived from the limit and the store keeps its reserve. ---
data="$workdir/data"
: >"$workdir/server.log"
bash -c 'ulimit -n 128 && exec "$@"' runnel "$R" serve --listen 127.0.0.1:0 --store log \
  --data "$data" --durability none --threads 2 >"$workdir/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 1 100); do
  RUNNEL_URL="$(grep -o 'http://127\.0\.0\.1:[0-9]*' "$workdir/server.log" | head -n1 || true)"
  [[ -n "$RUNNEL_URL" ]] && break
  sleep 0.1
done
[[ -n "$RUNNEL_URL" ]] || { cat "$workdir/server.log" >&2; fail "the server did not start"; }
log="$(cat "$workdir/server.log")"
expect_has "$log" "descriptor limit 128" "start-up line with the limit"
cap="$(grep -o 'max-connections lowered from 10000 to [0-9]*' "$workdir/server.log" |
  awk '{print $NF}' || true)"
[[ -n "$cap" ]] || fail "no line saying --max-connections was lowered: $log"
((cap > 0 && cap < 128)) || fail "lowered cap $cap"

exec {ctl}<>"/dev/tcp/127.0.0.1/${RUNNEL_URL##*:}"
expect_eq "$(raw "$ctl" PUT /v1/stream/big | cut -d' ' -f1)" "201" "create"
# More idle connections than the cap: the first cap - 1 (with ctl) are served, the rest refused.
open_connections 200
probe="$(busy_probe)"
expect_eq "$probe" "503 1" "a new client beyond the cap: status and Retry-After"
echo "fd_budget_e2e: ulimit 128, cap $cap, server holds $(server_fds) descriptors at the cap"
head -c $((34 << 20)) /dev/zero >"$workdir/record"
for i in 1 2; do
  expect_eq "$(raw "$ctl" POST /v1/stream/big "$workdir/record" | cut -d' ' -f1)" "204" \
    "34 MiB append $i while the connection slots are full"
done
rm "$workdir/record"
echo "small" >"$workdir/small"
for i in $(seq 1 20); do
  expect_eq "$(raw "$ctl" POST /v1/stream/big "$workdir/small" | cut -d' ' -f1)" "204" \
    "small append $i after the roll"
done
metrics="$(raw "$ctl" GET /metrics)"
rolls="$(echo "$metrics" | sed -n 's/^runnel_store_segment_rolls_total //p')"
((rolls >= 2)) || fail "the appends did not roll a segment (runnel_store_segment_rolls_total $rolls)"
expect_has "$metrics" "runnel_max_connections $cap" "the effective cap on /metrics"
expect_eq "$(busy_probe)" "503 1" "still 503 after the roll"
expect_eq "$(grep -c 'accept failed' "$workdir/server.log" || true)" "0" "accept failures logged"
close_connections
exec {ctl}>&-
stop_server

# --- 2. accept() fails with EMFILE: the spare descriptor answers, the log stays quiet. ---
serve_on_free_port --store memory --threads 2
in_use="$(server_fds)"
prlimit --pid "$server_pid" --nofile=$((in_use + 8)):
open_connections 40
expect_eq "$(busy_probe)" "503 1" "a new client while accept() fails with EMFILE"
sleep 0.5  # several backoff rounds (10, 20, 40... ms) while the held connections wait
warned="$(grep -c 'accept failed' "$workdir/server.log" || true)"
# One line per 10 s (a second only if this part took that long); the old code logged 20 a second.
((warned >= 1 && warned <= 2)) || fail "accept failures logged $warned times"
expect_has "$(grep 'accept failed' "$workdir/server.log")" "Too many open files" "the reason"
close_connections
prlimit --pid "$server_pid" --nofile=1024:
metrics=""
for _ in $(seq 1 50); do  # until the server has closed the connections this shell let go
  metrics="$(curl -s --max-time 5 "$RUNNEL_URL/metrics" || true)"
  [[ "$metrics" == *runnel_accept_failures_total* ]] && break
  sleep 0.1
done
failures="$(echo "$metrics" | sed -n 's/^runnel_accept_failures_total //p')"
((failures >= 1)) || fail "runnel_accept_failures_total: [$failures]"
stop_server
echo "fd_budget_e2e: OK"
