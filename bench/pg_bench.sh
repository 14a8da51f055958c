#!/usr/bin/env bash
# The PostgreSQL store next to PostgreSQL's own rates, in one run on one private cluster
# (scripts/pg-test-cluster with its durable defaults: fsync=on, synchronous_commit=on):
#   1. pgbench, 16 clients, one 100-byte row INSERT per transaction (the unbatched rate);
#   2. pgbench, 16 clients, one 100-row multi-row INSERT per transaction (the batched ceiling);
#   3. runnel's store alone (BUILD_DIR/bin/pg_append_bench, when built), 64 threads, one record
#      per append;
#   4. `runnel serve --store postgres://...`: 100-byte HTTP appends (wrk, 64 connections over 16
#      streams), all through one node (the other two nodes idle);
#   5. the same 64 connections spread over three nodes on the same database;
#   6. the same again, but each node on 16 streams of its own: no stream is written through two
#      nodes, which is the best that forwarding each stream to one owner node could do;
#   7. 21 connections to one node alone (a third of the clients);
#   8. with nginx installed, all 64 through nginx as the nodes' load balancer: every request
#      spread over the three nodes, then appends (POST) sent to the first node only (the other
#      two its backups), everything else spread.
# Then (1) once more. Prints rows/s, transactions/s seen by the server (reads count too), and
# for each HTTP run the CPU per append of the runnel nodes (all three, idle ones included) and of
# PostgreSQL (the postmaster and every process it started: utime + stime from /proc/<pid>/stat
# before and after), with their total. With pg_stat_statements available (it is preloaded when
# the PostgreSQL install has it), each HTTP run also prints the statements executed per append.
# nginx's CPU is shown on its own. The cluster runs without autovacuum; each HTTP run is
# followed by a VACUUM (ANALYZE) of the store's tables, whose CPU per append is printed apart.
# Last comes the table of total CPU per append, one node next to three, and the ratios against
# the targets, using the mean of the two unbatched pgbench runs: one node >= 3x the unbatched
# pgbench rate; three nodes within 10% of one node's rate; three nodes' total CPU per append at
# most 1.25x one node's.
#
#   bench/pg_bench.sh [BUILD_DIR] [SECONDS]
#
# PG_BENCH_HTTP_ONLY=1 runs only the HTTP runs (4-8) and the CPU table.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build_dir=$(cd "${1:-$root/build/bench}" && pwd)
seconds=${2:-${BENCH_SECONDS:-10}}
http_only=${PG_BENCH_HTTP_ONLY:-0}
prog="$build_dir/bin/pg_append_bench"
runnel="$build_dir/bin/runnel"
if [ ! -x "$runnel" ]; then
  echo "pg_bench.sh: $runnel not built" >&2
  exit 1
fi
command -v wrk >/dev/null || { echo "pg_bench.sh: wrk is not installed (apt-get install wrk)" >&2; exit 1; }
if [ -z "${RUNNEL_TEST_PG_URL:-}" ]; then
  # The statement counts per append come from pg_stat_statements, which must be preloaded.
  # Autovacuum is off: the script vacuums after each HTTP run instead (and prints what that
  # cost per append), so that no run is charged for a vacuum of the rows of runs before it.
  conf=(--conf autovacuum=off)
  for v in 17 16 15 14 13; do
    if [ -x "/usr/lib/postgresql/$v/bin/initdb" ]; then
      if [ -f "/usr/lib/postgresql/$v/lib/pg_stat_statements.so" ]; then
        conf+=(--conf shared_preload_libraries=pg_stat_statements)
      fi
      break
    fi
  done
  exec "$root/scripts/pg-test-cluster" "${conf[@]}" --run "$0" "$build_dir" "$seconds"
fi
bindir=${RUNNEL_TEST_PG_BINDIR:-/usr/lib/postgresql/15/bin}
psql=("$bindir/psql" -X -q -At "$RUNNEL_TEST_PG_URL")
work=$(mktemp -d /tmp/runnel-pgbench.XXXXXX)
pids=()
front_pids=()
cleanup() {
  for p in "${pids[@]}" "${front_pids[@]}"; do
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
# The postmaster's pid: from the private cluster's pid file, else the parent of this session's
# backend (a server on this host); empty when the server runs elsewhere.
postmaster_pid() {
  local f="${RUNNEL_TEST_PG_SOCKET_DIR:-}/data/postmaster.pid" b
  if [ -r "$f" ]; then head -n1 "$f"; return; fi
  b=$("${psql[@]}" -c "SELECT pg_backend_pid()" 2>/dev/null || true)
  [ -n "$b" ] && [ -r "/proc/$b/stat" ] && awk '{print $4}' "/proc/$b/stat"
  return 0
}
# CPU jiffies used so far by the runnel nodes ($pids), by the postmaster and its children
# (every backend, the WAL writer, the checkpointer ...) and by the load balancer in front of the
# nodes ($front_pids), as "R P F". Only this cluster's processes count, not those of another
# PostgreSQL on the same host.
cpu_jiffies() {
  local r=0 f=0 pm
  for pid in "${pids[@]}"; do
    r=$(( r + $(awk '{print $14 + $15}' "/proc/$pid/stat" 2>/dev/null || echo 0) ))
  done
  for pid in "${front_pids[@]}"; do
    f=$(( f + $(awk '{print $14 + $15}' "/proc/$pid/stat" 2>/dev/null || echo 0) ))
  done
  pm=$(postmaster_pid)
  if [ -z "$pm" ]; then echo "$r -1 $f"; return; fi
  # Field 2 (comm) is "(postgres)", without spaces; 4 is the parent, 14 + 15 user + system, and
  # the postmaster's 16 + 17 the CPU of its children that exited (backends, autovacuum workers).
  # Processes come and go meanwhile (a psql session that just ended): a vanished file is skipped.
  { cat /proc/[0-9]*/stat 2>/dev/null || true; } |
    awk -v r="$r" -v f="$f" -v pm="$pm" '$1 == pm { p += $14 + $15 + $16 + $17 }
      $4 == pm { p += $14 + $15 } END { print r, p + 0, f }'
}
# pg_cpu_by_kind: the jiffies used so far by the live processes of the cluster, by kind (the
# process title without its connection details) and user / system time, one "KIND JIFFIES"
# line each.
pg_cpu_by_kind() {
  local pm pid kind
  pm=$(postmaster_pid)
  [ -n "$pm" ] || return 0
  for pid in $({ cat /proc/[0-9]*/stat 2>/dev/null || true; } | awk -v pm="$pm" '$4 == pm { print $1 }'); do
    kind=$(tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null |
      sed -E 's/^postgres: //; s/ [0-9.]+\([0-9]+\).*//; s/ +$//; s/ /_/g') || continue
    awk -v k="${kind:-other}" '{ print k "(user)", $14; print k "(sys)", $15 }' \
      "/proc/$pid/stat" 2>/dev/null || true
  done | awk '{ j[$1] += $2 } END { for (k in j) print k, j[k] }' | sort
}
# pg_cpu_split BEFORE AFTER APPENDS: the µs per append of each kind of process between the two
# pg_cpu_by_kind outputs (a process that started or exited in between counts from zero / not).
pg_cpu_split() {
  awk -v n="$3" -v hz="$(getconf CLK_TCK)" -v a="$1" -v b="$2" 'BEGIN {
    k = split(a, x, "\n"); for (i = 1; i <= k; i++) { split(x[i], f, " "); before[f[1]] = f[2] }
    k = split(b, y, "\n"); for (i = 1; i <= k; i++) { split(y[i], f, " "); d = f[2] - before[f[1]]
      if (f[1] != "" && d > 0 && n > 0) out = out sprintf(" %s %.1f µs;", f[1], d * 1e6 / hz / n) }
    print "    postgres CPU per append by process:" out }'
}
# cpu_us "R0 P0 F0" "R1 P1 F1" APPENDS_PER_S: µs of CPU per append as "RUNNEL POSTGRES FRONT
# TOTAL" (postgres and total are n/a when the server is not on this host).
cpu_us() {
  awk -v a="$1" -v b="$2" -v n="$3" -v s="$seconds" -v hz="$(getconf CLK_TCK)" 'BEGIN {
    split(a, x, " "); split(b, y, " "); t = n * s; if (t <= 0) { print "n/a n/a n/a n/a"; exit }
    r = (y[1] - x[1]) * 1e6 / hz / t
    f = (y[3] - x[3]) * 1e6 / hz / t
    if (x[2] < 0) { printf "%.1f n/a %.1f n/a", r, f; exit }
    p = (y[2] - x[2]) * 1e6 / hz / t
    printf "%.1f %.1f %.1f %.1f", r, p, f, r + p + f }'
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }

if [ "$http_only" != 1 ]; then
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

if [ -x "$prog" ]; then
  before=$(xacts)
  out=$("$prog" 64 "$seconds" 16)
  after=$(xacts)
  store_rate=$(echo "$out" | sed -E 's/.*rows_per_s=([0-9]+).*/\1/')
  store_txn=$(echo "$out" | sed -E 's/.*rows_per_transaction=([0-9.]+).*/\1/')
  store_commit=$(echo "$out" | sed -E 's/.*commit_ms=([0-9.]+).*/\1/')
  echo "runnel store alone, 64 threads, 1 record/append: ${store_rate} rows/s" \
       "($(( (after - before) / seconds )) commits/s, ${store_txn} records per append transaction," \
       "${store_commit} ms per commit round trip)"
else
  store_rate=0
  echo "runnel store alone: skipped ($prog not built; configure with -DRUNNEL_BUILD_BENCHMARKS=ON)"
fi
fi

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

# With nginx installed: one nginx process (no master) in front of the three nodes, as the load
# balancer of a multi-node deployment. On one port it spreads every request over the nodes; on
# the other it sends appends (POST) to the first node, with the other two as backups, and
# everything else over all three (docs/scale-out.md, "Appends to one writer").
front_pids=()
lb_urls=()
if command -v nginx >/dev/null; then
  mkdir -p "$work/nginx"
  p1=$(( 20000 + RANDOM % 20000 )); p2=$(( p1 + 1 ))
  cat >"$work/nginx/nginx.conf" <<CONF
error_log $work/nginx/error.log;
pid $work/nginx/nginx.pid;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path $work/nginx/body;
  upstream all_nodes {
    server ${urls[0]#http://}; server ${urls[1]#http://}; server ${urls[2]#http://};
    keepalive 64;
  }
  upstream writer {
    server ${urls[0]#http://}; server ${urls[1]#http://} backup; server ${urls[2]#http://} backup;
    keepalive 64;
  }
  map \$request_method \$runnel_pool { POST writer; default all_nodes; }
  proxy_http_version 1.1;
  proxy_set_header Connection "";
  proxy_buffering off;
  server {
    listen 127.0.0.1:$p1;
    location / { proxy_pass http://all_nodes; }
  }
  server {
    listen 127.0.0.1:$p2;
    location / { proxy_pass http://\$runnel_pool; }
  }
}
CONF
  nginx -e stderr -p "$work/nginx" -c "$work/nginx/nginx.conf" \
    -g 'daemon off; master_process off;' >"$work/nginx/out.log" 2>&1 &
  front_pids+=($!)
  for _ in $(seq 1 50); do
    curl -sf -o /dev/null "http://127.0.0.1:$p1/v1/stream/bench-0" && break
    sleep 0.1
  done
  if curl -sf -o /dev/null "http://127.0.0.1:$p2/v1/stream/bench-0"; then
    lb_urls=("http://127.0.0.1:$p1" "http://127.0.0.1:$p2")
  else
    echo "pg_bench.sh: nginx did not start; skipping the load-balanced runs" >&2
    cat "$work/nginx/out.log" >&2
  fi
fi

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

# pg_stat_statements, when the server preloaded it: statements per append in each HTTP run.
stats=0
if "${psql[@]}" -c "CREATE EXTENSION IF NOT EXISTS pg_stat_statements" 2>/dev/null &&
   "${psql[@]}" -c "SELECT pg_stat_statements_reset()" >/dev/null 2>&1; then
  stats=1
fi
# statements_per_append APPENDS: the statements since the last reset, most frequent first, as
# calls and execution time per append (only the runnel nodes' sessions run statements then).
statements_per_append() {
  [ "$stats" -eq 1 ] && [ "$1" -gt 0 ] || return 0
  "${psql[@]}" -F ' | ' -c "SELECT to_char(sum(calls)::float8 / $1, 'FM990.000'),
      to_char(sum(total_exec_time)::float8 * 1000 / $1, 'FM9990.0') || ' µs',
      left(regexp_replace(query, '\s+', ' ', 'g'), 90)
    FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
    GROUP BY query ORDER BY sum(calls) DESC LIMIT 12" | sed 's/^/    /'
  "${psql[@]}" -c "SELECT pg_stat_statements_reset()" >/dev/null
}

# http_run MODE LABEL: one timed run of 64 connections, its line printed, its appends/s left in
# $run_rate and its table row appended to $table. MODE one: all to the first node; shared:
# 22 + 21 + 21 to the three nodes, all on bench-*; own: the same, node i on own<i>-* alone;
# third: 21 connections to the first node alone (one of the three nodes' share of the clients,
# on a database nobody else writes to); lb: all 64 through nginx, spread over the three nodes;
# lbw: all 64 through nginx, appends to the first node only.
table=""
http_run() {
  local before after w0 wal c0 c1 j0 j1 k0 k1 vj0 vj1 i prefix f rate=0 waits=() appends cpu txn
  [ "$stats" -eq 1 ] && "${psql[@]}" -c "SELECT pg_stat_statements_reset()" >/dev/null
  before=$(xacts)
  w0=$("${psql[@]}" -c "SELECT pg_current_wal_lsn()")
  c0=$(node_commits "${urls[@]}")
  j0=$(cpu_jiffies)
  k0=$(pg_cpu_by_kind)
  if [ "$1" = one ]; then
    wrk_run "${urls[0]}" 64 "$work/$1-0"
  elif [ "$1" = third ]; then
    wrk_run "${urls[0]}" 21 "$work/$1-0"
  elif [ "$1" = lb ]; then
    wrk_run "${lb_urls[0]}" 64 "$work/$1-0"
  elif [ "$1" = lbw ]; then
    wrk_run "${lb_urls[1]}" 64 "$work/$1-0"
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
  k1=$(pg_cpu_by_kind)
  after=$(xacts)
  wal=$("${psql[@]}" -c "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '$w0')::bigint")
  c1=$(node_commits "${urls[@]}")
  for f in "$work/$1"-[0-9]; do rate=$(( rate + $(cat "$f") )); done
  run_rate=$rate
  # The records the nodes committed in the window (one per append here): the divisor of the CPU.
  appends=$(awk -v a="$c0" -v b="$c1" 'BEGIN { split(a, x, " "); split(b, y, " "); print y[2] - x[2] }')
  [ "$appends" -gt 0 ] || appends=$(( rate * seconds ))
  cpu=$(cpu_us "$j0" "$j1" "$(( appends / seconds ))")
  txn=$(per_txn "$c0" "$c1")
  read -r cpu_r cpu_p cpu_f cpu_t <<<"$cpu"
  run_total=$cpu_t
  echo "runnel serve, $2: ${rate} appends/s ($(( (after - before) / seconds )) commits/s," \
       "$txn records per append transaction; CPU per append: runnel ${cpu_r} µs," \
       "postgres ${cpu_p} µs, load balancer ${cpu_f} µs, total ${cpu_t} µs; $(( wal / appends )) bytes of WAL per append)"
  pg_cpu_split "$k0" "$k1" "$appends"
  statements_per_append "$appends"
  # This run's share of maintenance: a VACUUM of the store's tables, outside the window (the
  # pause lets the postmaster reap the session, whose CPU it then counts).
  vj0=$(cpu_jiffies)
  "${psql[@]}" -c "VACUUM (ANALYZE) runnel.events, runnel.streams, runnel.producers, runnel.cursors"
  sleep 0.3
  vj1=$(cpu_jiffies)
  echo "    VACUUM (ANALYZE) after the run: $(cpu_us "$vj0" "$vj1" "$(( appends / seconds ))" |
    awk '{print $2}') µs of PostgreSQL CPU per append of the run (not in the totals)"
  run_nodes_db=$(awk -v r="$cpu_r" -v p="$cpu_p" 'BEGIN { if (p == "n/a") print "n/a"; else printf "%.1f", r + p }')
  table+=$(printf '%-40s %9s %8s %8s %9s %8s %8s' "$2" "$rate" "$txn" "$cpu_r" "$cpu_p" "$cpu_f" \
    "$cpu_t")$'\n'
}
http_run one "1 node"
one=$run_rate
one_cpu=$run_total
one_nodes_db=$run_nodes_db
http_run shared "3 nodes, shared streams"
three=$run_rate
three_cpu=$run_total
http_run own "3 nodes, no stream shared"
own=$run_rate
own_cpu=$run_total
http_run third "1 node, 21 connections"
third_cpu=$run_total
lb_cpu=""
lbw_cpu=""
if [ ${#lb_urls[@]} -eq 2 ]; then
  http_run lb "3 nodes behind nginx"
  lb_cpu=$run_total
  http_run lbw "3 nodes behind nginx, appends to one"
  lbw_cpu=$run_total
  lbw_nodes_db=$run_nodes_db
fi

echo
echo "CPU per append, runnel nodes + PostgreSQL (64 connections, 16 streams per prefix, ${seconds} s each):"
printf '%-40s %9s %8s %8s %9s %8s %8s\n' "run" "appends/s" "rec/txn" "runnel" "postgres" \
  "nginx" "total µs"
printf '%s' "$table"
echo "three nodes / one node, total CPU per append = $(ratio "$three_cpu" "$one_cpu")x (target <= 1.25x);" \
     "no stream shared: $(ratio "$own_cpu" "$one_cpu")x"
echo "three nodes / one node, appends/s = $(ratio "$three" "$one")x (target >= 0.90x);" \
     "no stream shared: $(ratio "$own" "$one")x"
if [ -n "$lbw_cpu" ]; then
  echo "behind nginx, appends to one node / spread over three, total CPU per append =" \
    "$(ratio "$lbw_cpu" "$lb_cpu")x; / one node without nginx = $(ratio "$lbw_cpu" "$one_cpu")x," \
    "nodes and PostgreSQL alone $(ratio "$lbw_nodes_db" "$one_nodes_db")x (target <= 1.25x)"
fi
echo "one node with 21 connections / with 64, total CPU per append = $(ratio "$third_cpu" "$one_cpu")x" \
     "(what a third of the clients costs a writer by itself)"
[ "$http_only" = 1 ] && exit 0

# The unbatched rate again, so that load from outside the benchmark during the runs shows up
# in both sides of the ratio: the ratios use the mean of the two pgbench runs.
pgbench_unbatched " (again)"
"${psql[@]}" -c "DROP TABLE pgb_rows"
pg_rate=$(( (pg_first + pg_last) / 2 ))
[ "$store_rate" -gt 0 ] && echo "store alone / pgbench unbatched = $(ratio "$store_rate" "$pg_rate")x"
echo "one node / pgbench unbatched  = $(ratio "$one" "$pg_rate")x (target >= 3x)"
echo "one node / pgbench 100-row    = $(ratio "$one" "$pg_batched")x (the batched ceiling)"
