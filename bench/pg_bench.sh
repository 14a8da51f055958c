#!/usr/bin/env bash
# The PostgreSQL store next to PostgreSQL's own rates, in one run on one private cluster
# (scripts/pg-test-cluster with its durable defaults: fsync=on, synchronous_commit=on):
#   1. pgbench, 16 clients, one 100-byte row INSERT per transaction (the unbatched rate);
#   2. pgbench, 16 clients, one 100-row multi-row INSERT per transaction (the batched ceiling);
#   3. runnel's store alone (BUILD_DIR/bin/pg_append_bench), 64 threads, one record per append;
#   4. `runnel serve --store postgres://...`: 100-byte HTTP appends (wrk, 64 connections over 16
#      streams), all through one node;
#   5. the same 64 connections spread over three nodes on the same database;
#   6. the same again, but each node on 16 streams of its own: no stream is written through two
#      nodes, which is the best that forwarding each stream to one owner node could do.
# Then (1) once more. Prints rows/s, transactions/s seen by the server (reads count too), the
# CPU per append of the runnel nodes and of PostgreSQL (every process named postgres), and
# the ratios against the targets, using the mean of the two unbatched pgbench runs: one node
# >= 3x the unbatched pgbench rate; three nodes within 10% of one node.
#
#   bench/pg_bench.sh [BUILD_DIR] [SECONDS]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build_dir=$(cd "${1:-$root/build/bench}" && pwd)
seconds=${2:-${BENCH_SECONDS:-10}}
prog="$build_dir/bin/pg_append_bench"
runnel="$build_dir/bin/runnel"
if [ ! -x "$prog" ] || [ ! -x "$runnel" ]; then
  echo "pg_bench.sh: $prog or $runnel not built (configure with -DRUNNEL_BUILD_BENCHMARKS=ON)" >&2
  exit 1
fi
command -v wrk >/dev/null || { echo "pg_bench.sh: wrk is not installed (apt-get install wrk)" >&2; exit 1; }
if [ -z "${RUNNEL_TEST_PG_URL:-}" ]; then
  exec "$root/scripts/pg-test-cluster" --run "$0" "$build_dir" "$seconds"
fi
bindir=${RUNNEL_TEST_PG_BINDIR:-/usr/lib/postgresql/15/bin}
psql=("$bindir/psql" -X -q -At "$RUNNEL_TEST_PG_URL")
work=$(mktemp -d /tmp/runnel-pgbench.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do
    if kill -0 "$p" 2>/dev/null; then kill -TERM "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; fi
  done
  rm -rf "$work"
}
trap cleanup EXIT

xacts() { "${psql[@]}" -c "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"; }
# The nodes' committed append transactions and their records, summed (from /metrics).
node_commits() {
  local u t=0 r=0 m
  for u in "$@"; do
    m=$(curl -sf "$u/metrics" || true)
    t=$(( t + $(echo "$m" | awk '/^runnel_store_records_per_sync_count / {print $2}' | head -n1 || echo 0) ))
    r=$(( r + $(echo "$m" | awk '/^runnel_store_records_per_sync_sum / {print $2}' | head -n1 || echo 0) ))
  done
  echo "$t $r"
}
per_txn() {  # per_txn "T0 R0" "T1 R1": records per append transaction in between
  awk -v a="$1" -v b="$2" 'BEGIN { split(a, x, " "); split(b, y, " ");
    t = y[1] - x[1]; if (t > 0) printf "%.1f", (y[2] - x[2]) / t; else print "n/a" }'
}
# CPU jiffies used so far by the runnel nodes ($pids) and by every postgres process, as "R P".
cpu_jiffies() {
  local r=0 p=0 f line pid
  for pid in "${pids[@]}"; do
    r=$(( r + $(awk '{print $14 + $15}' "/proc/$pid/stat" 2>/dev/null || echo 0) ))
  done
  for f in /proc/[0-9]*/stat; do
    { read -r line < "$f"; } 2>/dev/null || continue
    case "$line" in *" (postgres) "*) p=$(( p + $(echo "$line" | awk '{print $14 + $15}') )) ;; esac
  done
  echo "$r $p"
}
cpu_per_append() {  # cpu_per_append "R0 P0" "R1 P1" APPENDS_PER_S: µs of CPU per append
  awk -v a="$1" -v b="$2" -v n="$3" -v s="$seconds" -v hz="$(getconf CLK_TCK)" 'BEGIN {
    split(a, x, " "); split(b, y, " "); t = n * s; if (t <= 0) { print "n/a"; exit }
    printf "CPU per append: runnel %.1f µs, postgres %.1f µs", (y[1] - x[1]) * 1e6 / hz / t,
      (y[2] - x[2]) * 1e6 / hz / t }'
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }

"${psql[@]}" -c "CREATE TABLE pgb_rows (id bigserial PRIMARY KEY, stream_id int NOT NULL, payload bytea NOT NULL)"
cat > "$work/insert.sql" <<'SQL'
\set s random(1, 16)
INSERT INTO pgb_rows (stream_id, payload) VALUES (:s, convert_to(repeat('x', 100), 'UTF8'));
SQL
{
  echo '\set s random(1, 16)'
  printf 'INSERT INTO pgb_rows (stream_id, payload) VALUES '
  for i in $(seq 1 100); do
    [ "$i" -gt 1 ] && printf ', '
    printf "(:s, convert_to(repeat('x', 100), 'UTF8'))"
  done
  echo ';'
} > "$work/insert100.sql"

# pgbench_unbatched LABEL: one run of (1); prints it and leaves the rate in $pg_last.
pgbench_unbatched() {
  local before after out
  before=$(xacts)
  out=$("$bindir/pgbench" -n -c 16 -j 2 -T "$seconds" -f "$work/insert.sql" "$RUNNEL_TEST_PG_URL" 2>&1)
  pg_last=$(echo "$out" | awk '/^tps = / {print int($3)}')
  after=$(xacts)
  echo "pgbench 16 clients, 1 row/transaction$1: ${pg_last} rows/s ($(( (after - before) / seconds )) commits/s)"
}
pgbench_unbatched ""
pg_first=$pg_last

before=$(xacts)
out=$("$bindir/pgbench" -n -c 16 -j 2 -T "$seconds" -f "$work/insert100.sql" "$RUNNEL_TEST_PG_URL" 2>&1)
pg_batched=$(( $(echo "$out" | awk '/^tps = / {print int($3)}') * 100 ))
after=$(xacts)
echo "pgbench 16 clients, 100 rows/transaction: ${pg_batched} rows/s ($(( (after - before) / seconds )) commits/s)"

before=$(xacts)
out=$("$prog" 64 "$seconds" 16)
after=$(xacts)
store_rate=$(echo "$out" | sed -E 's/.*rows_per_s=([0-9]+).*/\1/')
store_txn=$(echo "$out" | sed -E 's/.*rows_per_transaction=([0-9.]+).*/\1/')
store_commit=$(echo "$out" | sed -E 's/.*commit_ms=([0-9.]+).*/\1/')
echo "runnel store alone, 64 threads, 1 record/append: ${store_rate} rows/s" \
     "($(( (after - before) / seconds )) commits/s, ${store_txn} records per append transaction," \
     "${store_commit} ms per commit round trip)"

# Three nodes on the database (the one-node run uses only the first).
urls=()
for i in 0 1 2; do
  "$runnel" serve --listen 127.0.0.1:0 --store "$RUNNEL_TEST_PG_URL" --data "$work/data-$i" \
    >"$work/node-$i.log" 2>&1 &
  pids+=($!)
  url=""
  for _ in $(seq 1 150); do
    url=$(grep -o 'http://127\.0\.0\.1:[0-9]*' "$work/node-$i.log" | head -n1 || true)
    [ -n "$url" ] && break
    sleep 0.1
  done
  [ -n "$url" ] || { cat "$work/node-$i.log" >&2; exit 1; }
  urls+=("$url")
done
for s in $(seq 0 15); do
  for prefix in bench own0 own1 own2; do
    curl -sf -o /dev/null -X PUT -H 'Content-Type: text/plain' "${urls[0]}/v1/stream/$prefix-$s"
  done
done

# wrk_run URL CONNECTIONS OUT [PREFIX]: 100-byte appends over the 16 streams PREFIX-0..15
# (PREFIX defaults to bench); writes requests/s to OUT.
wrk_run() {
  local threads=$(( $2 < 32 ? 1 : 2 ))
  STREAM_PREFIX="/v1/stream/${4:-bench}-" STREAMS=16 wrk -t"$threads" -c"$2" -d"${seconds}s" \
    -s "$root/bench/http/append_streams.lua" "$1" > "$3.full"
  awk '/Requests\/sec/ {print int($2)}' "$3.full" > "$3"
  if grep -q 'Non-2xx' "$3.full"; then
    echo "pg_bench.sh: wrk saw failed appends:" >&2
    cat "$3.full" >&2
  fi
}

# http_run MODE LABEL: one timed run of 64 connections, its line printed and its appends/s left
# in $run_rate. MODE one: all to the first node; shared: 22 + 21 + 21 to the three nodes, all on
# bench-*; own: the same, node i on own<i>-* alone.
http_run() {
  local before after c0 c1 j0 j1 i prefix f rate=0 waits=()
  before=$(xacts)
  c0=$(node_commits "${urls[@]}")
  j0=$(cpu_jiffies)
  if [ "$1" = one ]; then
    wrk_run "${urls[0]}" 64 "$work/$1-0"
  else
    for i in 0 1 2; do
      prefix=bench
      [ "$1" = own ] && prefix=own$i
      wrk_run "${urls[$i]}" $(( i == 0 ? 22 : 21 )) "$work/$1-$i" "$prefix" &
      waits+=($!)
    done
    wait "${waits[@]}"
  fi
  j1=$(cpu_jiffies)
  after=$(xacts)
  c1=$(node_commits "${urls[@]}")
  for f in "$work/$1"-[0-9]; do rate=$(( rate + $(cat "$f") )); done
  run_rate=$rate
  echo "runnel serve, $2: ${rate} appends/s ($(( (after - before) / seconds )) commits/s," \
       "$(per_txn "$c0" "$c1") records per append transaction; $(cpu_per_append "$j0" "$j1" "$rate"))"
}
http_run one "1 node,  64 connections"
one=$run_rate
http_run shared "3 nodes, 64 connections"
three=$run_rate
http_run own "3 nodes, 64 connections, no stream shared"
own=$run_rate

# The unbatched rate again, so that load from outside the benchmark during the runs shows up
# in both sides of the ratio: the ratios use the mean of the two pgbench runs.
pgbench_unbatched " (again)"
"${psql[@]}" -c "DROP TABLE pgb_rows"
pg_rate=$(( (pg_first + pg_last) / 2 ))
echo "store alone / pgbench unbatched = $(ratio "$store_rate" "$pg_rate")x"
one_ratio=$(ratio "$one" "$pg_rate")
three_ratio=$(ratio "$three" "$one")
echo "one node / pgbench unbatched  = ${one_ratio}x (target >= 3x)"
echo "one node / pgbench 100-row    = $(ratio "$one" "$pg_batched")x (the batched ceiling)"
echo "three nodes / one node        = ${three_ratio}x (target >= 0.90x)"
echo "three nodes, no stream shared / one node = $(ratio "$own" "$one")x (what one owner node per stream could at best give)"
