#!/usr/bin/env bash
# Peak memory of one JSON-mode append, by body shape: for each shape a fresh `runnel serve` (log
# store, durability none, so no sync waits) receives one POST; the server's peak resident set
# (VmHWM) before and after gives what the append cost, printed as a multiple of the body.
# The goal is at most 8x for every shape. Not a test: it prints figures.
#   json_memory.sh RUNNEL [BODY_MIB]
set -euo pipefail
runnel=${1:?usage: json_memory.sh RUNNEL [BODY_MIB]}
mib=${2:-32}
work=$(mktemp -d)
pid=
cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
port=$((20000 + RANDOM % 20000))

# Bodies of about `mib` MiB: the shapes that cost the most per body byte.
python3 - "$work" "$mib" <<'PY'
import json, sys
work, mib = sys.argv[1], int(sys.argv[2])
size = mib << 20
def write(name, text):
    with open(f"{work}/{name}.json", "w") as f:
        f.write(text)
limit = 100000  # runnel serve's default --max-append-messages
obj = '{"id":12345,"kind":"order","payload":"' + "p" * 60 + '"}'
# Bodies of `mib` MiB; past the message limit they are refused (413).
write("tiny-numbers", "[" + ",".join(["1"] * (size // 2)) + "]")
write("one-string", json.dumps(["x" * (size - 6)]))
write("objects-100B", "[" + ",".join([obj] * (size // (len(obj) + 1))) + "]")
# Bodies of exactly `limit` messages: the most one append may carry.
write("limit-objects", "[" + ",".join([obj] * limit) + "]")
write("limit-strings", "[" + ",".join(['"abcdefghijklmn"'] * limit) + "]")
write("limit-numbers", "[" + ",".join(["1"] * limit) + "]")
PY

hwm() { awk '/VmHWM/ {print $2}' "/proc/$1/status"; }
printf "%-14s %10s %10s %12s %10s %8s  %s\n" shape body_MiB messages peak_growth_MB ratio seconds status
for shape in tiny-numbers one-string objects-100B limit-objects limit-strings limit-numbers; do
  body="$work/$shape.json"
  rm -rf "$work/data"
  "$runnel" serve --listen 127.0.0.1:$port --data "$work/data" --durability none \
    --max-body-bytes $(((mib + 1) << 20)) >"$work/serve.log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do
    curl -s -o /dev/null "http://127.0.0.1:$port/healthz" && break
    sleep 0.1
  done
  curl -s -o /dev/null -X PUT -H 'Content-Type: application/json' "http://127.0.0.1:$port/v1/stream/m"
  # Warm the paths a request touches, so the first request's one-time costs are not counted.
  curl -s -o /dev/null -X POST -H 'Content-Type: application/json' -d '[1,2,3]' \
    "http://127.0.0.1:$port/v1/stream/m"
  before=$(hwm "$pid")
  start=$(date +%s.%N)
  status=$(curl -s -o "$work/answer" -w '%{http_code}' -X POST -H 'Content-Type: application/json' \
    --data-binary "@$body" "http://127.0.0.1:$port/v1/stream/m")
  end=$(date +%s.%N)
  after=$(hwm "$pid")
  bytes=$(stat -c %s "$body")
  messages=$(curl -s -I "http://127.0.0.1:$port/v1/stream/m" | tr -d '\r' |
    awk -F'[_ ]' '/^Stream-Next-Offset/ {print $NF + 0}')
  awk -v s="$shape" -v b="$bytes" -v m="$((messages - 3))" -v g="$(((after - before)))" \
    -v t="$(echo "$end - $start" | bc)" -v st="$status" 'BEGIN {
      printf "%-14s %10.1f %10d %12.1f %9.2fx %8.2f  %s\n", s, b / 1048576, m, g / 1024, g * 1024 / b, t, st }'
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  pid=
done
