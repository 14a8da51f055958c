#!/usr/bin/env bash
# PostgreSQL store vs. PostgreSQL's own unbatched rate, in one run on one private cluster
# (scripts/pg-test-cluster, durable defaults: fsync=on, synchronous_commit=on):
#   1. pgbench, 16 clients, one 100-byte row INSERT per transaction;
#   2. runnel's PostgreSQL store (BUILD_DIR/bin/pg_append_bench), 16 and 64 client threads, each
#      appending one 100-byte record at a time and waiting for it (group commit batches them).
# Prints rows/s for each, transactions per second seen by the server, and runnel/pgbench ratios.
#
#   bench/pg_bench.sh [BUILD_DIR] [SECONDS]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build_dir=$(cd "${1:-$root/build/bench}" && pwd)
seconds=${2:-10}
prog="$build_dir/bin/pg_append_bench"
if [ ! -x "$prog" ]; then
  echo "pg_bench.sh: $prog not built (configure with -DRUNNEL_BUILD_BENCHMARKS=ON)" >&2
  exit 1
fi
if [ -z "${RUNNEL_TEST_PG_URL:-}" ]; then
  exec "$root/scripts/pg-test-cluster" --run "$0" "$build_dir" "$seconds"
fi
bindir=${RUNNEL_TEST_PG_BINDIR:-/usr/lib/postgresql/15/bin}
psql=("$bindir/psql" -X -q -At "$RUNNEL_TEST_PG_URL")
work=$(mktemp -d /tmp/runnel-pgbench.XXXXXX)
trap 'rm -rf "$work"' EXIT

xacts() { "${psql[@]}" -c "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"; }

"${psql[@]}" -c "CREATE TABLE pgb_rows (id bigserial PRIMARY KEY, stream_id int NOT NULL, payload bytea NOT NULL)"
cat > "$work/insert.sql" <<'SQL'
\set s random(1, 16)
INSERT INTO pgb_rows (stream_id, payload) VALUES (:s, convert_to(repeat('x', 100), 'UTF8'));
SQL
before=$(xacts)
pgbench_out=$("$bindir/pgbench" -n -c 16 -j 2 -T "$seconds" -f "$work/insert.sql" "$RUNNEL_TEST_PG_URL" 2>&1)
pg_rate=$(echo "$pgbench_out" | awk '/^tps = / {print int($3)}')
after=$(xacts)
echo "pgbench 16 clients, 1 row/transaction: ${pg_rate} rows/s ($(( (after - before) / seconds )) commits/s)"

for clients in 16 64; do
  before=$(xacts)
  out=$("$prog" "$clients" "$seconds" 16)
  after=$(xacts)
  rate=$(echo "$out" | sed -E 's/.*rows_per_s=([0-9]+).*/\1/')
  ratio=$(awk -v a="$rate" -v b="$pg_rate" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }')
  echo "runnel postgres store, $clients clients, 1 record/append: ${rate} rows/s" \
       "($(( (after - before) / seconds )) commits/s) = ${ratio}x pgbench"
done
