#!/usr/bin/env bash
# What TLS costs: 100-byte appends to one stream and catch-up reads, driven by wrk over
# keep-alive connections, against `runnel serve` in plain HTTP and with --tls-cert/--tls-key
# (a throwaway self-signed P-256 certificate), side by side in one run. Prints requests/s and
# the https/http ratio. A measurement program, not a test.
# Usage: bench/http/wrk_tls.sh RUNNEL_BINARY [DURATION_SECONDS] [CONNECTIONS]
set -euo pipefail

binary="$1"
duration="${2:-5}"
connections="${3:-8}"
here="$(cd "$(dirname "$0")" && pwd)"
command -v wrk >/dev/null || { echo "wrk is not installed (apt-get install wrk)" >&2; exit 2; }
command -v openssl >/dev/null || { echo "openssl is not installed" >&2; exit 2; }

workdir="$(mktemp -d)"
server_pid=""
stop_server() {
  if [[ -n "$server_pid" ]] && kill -0 "$server_pid" 2>/dev/null; then
    kill -TERM "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  server_pid=""
}
trap 'stop_server; rm -rf "$workdir"' EXIT

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=localhost \
  -addext "subjectAltName=IP:127.0.0.1" -keyout "$workdir/key.pem" -out "$workdir/cert.pem" \
  2>/dev/null

# start_server SCHEME [FLAGS...]: starts a memory-store server, sets $url.
start_server() {
  local scheme="$1"; shift
  "$binary" serve --listen 127.0.0.1:0 --store memory --data "$workdir/d" "$@" \
    >"$workdir/$scheme.log" 2>&1 &
  server_pid=$!
  url=""
  for _ in $(seq 1 150); do
    url="$(grep -o "$scheme://127\.0\.0\.1:[0-9]*" "$workdir/$scheme.log" | head -n1 || true)"
    [[ -n "$url" ]] && return 0
    sleep 0.1
  done
  cat "$workdir/$scheme.log" >&2
  return 1
}

declare -A rps
threads=$(( connections < 2 ? 1 : 2 ))
measure() {
  local scheme="$1"
  curl -s -o /dev/null --cacert "$workdir/cert.pem" -X PUT -H 'Content-Type: text/plain' \
    "$url/v1/stream/bench"
  rps[$scheme,append]="$(STREAM=/v1/stream/bench wrk -t"$threads" -c"$connections" \
    -d"${duration}s" -s "$here/append.lua" "$url" | awk '/Requests\/sec/ {print $2}')"
  rps[$scheme,read]="$(wrk -t"$threads" -c"$connections" -d"${duration}s" \
    "$url/v1/stream/bench?offset=now" | awk '/Requests\/sec/ {print $2}')"
}

start_server http
measure http
stop_server
start_server https --tls-cert "$workdir/cert.pem" --tls-key "$workdir/key.pem"
measure https
stop_server

printf "runnel serve, memory store, %s connections, %ss per cell\n" "$connections" "$duration"
printf "%-26s %12s %12s %12s\n" "requests/s" "http" "https" "https/http"
for op in append read; do
  label="$op"
  [[ "$op" == append ]] && label="append (100 B POST)"
  [[ "$op" == read ]] && label="read (GET offset=now)"
  printf "%-26s %12s %12s %12s\n" "$label" "${rps[http,$op]}" "${rps[https,$op]}" \
    "$(awk -v a="${rps[https,$op]}" -v b="${rps[http,$op]}" 'BEGIN{printf "%.2fx", a/b}')"
done
