#!/usr/bin/env python3
"""Sizes a runnel deployment on partitioned PostgreSQL from figures measured on one machine.

The model (docs/scale-out.md explains each term):

  * Appends. Every runnel node spends `node_cpu_us` of CPU per HTTP append (request parsing,
    the store's queue, the reply; kernel included). PostgreSQL spends `pg_txn_cpu_us` per append
    transaction plus `pg_record_cpu_us` per record. A node's append worker commits everything
    that arrived during its previous commit round trip (`commit_rtt_ms`), so the records per
    transaction follow the rate each worker sees, capped by `max_group`.
  * PostgreSQL clusters. Streams are spread over clusters by a hash of their name; each cluster
    takes appends until its CPU reaches `target_util` of `pg_cores`, its WAL `wal_mb_s`, or its
    hot data `pg_hot_gb`. Standbys (`replicas`) double the hardware and the WAL traffic.
  * Readers. Each live reader follows one stream. Every append is delivered to every reader of
    its stream, at `delivery_cpu_us` per delivery on the node that holds the reader (or the
    caching front for long-polls: the same order of cost per response) and `reader_kb` of
    memory per reader (runnel's state and the kernel's socket buffers).
  * Storage. Records stay `hot_hours` in PostgreSQL, then move to object storage as sealed
    segments (tiering).

The defaults are the figures measured on the 2-core reference machine (bench/pg_bench.sh,
bench/http/soak.sh, README "Benchmark targets"); pass your own as flags.
"""

import argparse
import math


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    a = p.add_argument
    # The target.
    a("--streams", type=float, default=1e6, help="streams in all (default 1M)")
    a("--appends", type=float, default=1e6, help="appends per second in all (default 1M)")
    a("--readers", type=float, default=10e6, help="live readers in all (default 10M)")
    a("--record-bytes", type=float, default=100, help="payload bytes per append (default 100)")
    # Measured on the reference machine.
    a("--node-cpu-us", type=float, default=16.0,
      help="runnel CPU per HTTP append, µs (pg_bench.sh, 1 node: 14.9-19.0)")
    a("--pg-txn-cpu-us", type=float, default=550.0,
      help="PostgreSQL CPU per append transaction, µs (pg_bench.sh: 17.3 µs x 32 records)")
    a("--pg-record-cpu-us", type=float, default=2.0,
      help="PostgreSQL CPU per record beyond the transaction, µs (pgbench 100-row inserts: "
           "2 cores / 255k rows/s = 7.8 µs per row, transaction included)")
    a("--commit-rtt-ms", type=float, default=3.0,
      help="append transaction round trip with fsync, ms (/metrics: 2.5-3.5)")
    a("--max-group", type=float, default=512, help="most appends per transaction (store option)")
    a("--wal-bytes", type=float, default=335.0,
      help="WAL bytes per 100-byte append (pg_bench.sh prints it per run)")
    a("--row-bytes", type=float, default=190.0,
      help="table + index bytes per stored 100-byte record (pg_bench.sh prints it)")
    a("--stream-row-bytes", type=float, default=400.0,
      help="catalog bytes per stream (row, primary key, name index)")
    a("--delivery-cpu-us", type=float, default=11.0,
      help="server CPU per delivery of an append to one live reader, µs (SSE fan-out, 10k readers)")
    a("--reader-kb", type=float, default=16.0,
      help="memory per live reader, KiB: runnel ~8 (soak: 78 MB for 10k readers) + kernel buffers")
    a("--http-overhead-bytes", type=float, default=300.0,
      help="HTTP request + response bytes around one append")
    a("--delivery-overhead-bytes", type=float, default=60.0,
      help="framing bytes around one delivered record (SSE event; a long-poll response is ~300)")
    # Hardware and policy of the deployment.
    a("--node-cores", type=float, default=16, help="cores per runnel node")
    a("--node-mem-gb", type=float, default=64, help="memory per runnel node, GiB")
    a("--pg-cores", type=float, default=32, help="cores per PostgreSQL primary")
    a("--pg-mem-gb", type=float, default=128, help="memory per PostgreSQL primary, GiB")
    a("--pg-hot-gb", type=float, default=2000, help="hot data one cluster keeps on its disks, GiB")
    a("--wal-mb-s", type=float, default=300, help="WAL one cluster writes and ships, MB/s")
    a("--replicas", type=int, default=1, help="synchronous standbys per cluster")
    a("--workers", type=int, default=2, help="append workers (connections) per node per cluster")
    a("--target-util", type=float, default=0.6, help="CPU utilisation to plan for (0-1)")
    a("--hot-hours", type=float, default=1.0, help="hours records stay in PostgreSQL")
    a("--segment-mb", type=float, default=8.0, help="sealed segment size in object storage, MiB")
    return p.parse_args()


def main():
    o = parse_args()
    if not 0 < o.target_util <= 1:
        raise SystemExit("scale_sim.py: --target-util must be in (0, 1]")
    appends, readers = o.appends, o.readers
    per_stream_readers = readers / o.streams
    deliveries = appends * per_stream_readers  # every reader of a stream gets every append

    # Runnel nodes: appends and deliveries need CPU, readers need memory.
    usable_node_cores = o.node_cores * o.target_util
    append_cores = appends * o.node_cpu_us / 1e6
    delivery_cores = deliveries * o.delivery_cpu_us / 1e6
    reader_gb = readers * o.reader_kb / 2**20
    nodes = max(math.ceil((append_cores + delivery_cores) / usable_node_cores),
                math.ceil(reader_gb / (o.node_mem_gb * 0.75)), 2)

    # PostgreSQL clusters. Records per transaction follow what one worker sees per round trip;
    # more clusters split each node's appends further, so iterate to a fixed point.
    clusters = 1
    for _ in range(64):
        per_worker = appends / (nodes * clusters * o.workers)
        group = max(1.0, min(o.max_group, per_worker * o.commit_rtt_ms / 1e3))
        pg_cpu_per_append = o.pg_txn_cpu_us / group + o.pg_record_cpu_us
        pg_cores_needed = appends * pg_cpu_per_append / 1e6
        wal_mb_s = appends * o.wal_bytes / 1e6
        hot_gb = (appends * o.hot_hours * 3600 * o.row_bytes + o.streams * o.stream_row_bytes) / 2**30
        need = max(math.ceil(pg_cores_needed / (o.pg_cores * o.target_util)),
                   math.ceil(wal_mb_s / o.wal_mb_s), math.ceil(hot_gb / o.pg_hot_gb), 1)
        if need == clusters:
            break
        clusters = need
    txns = appends / group

    # Network, per second.
    ingress_gb = appends * (o.record_bytes + o.http_overhead_bytes) * 8 / 1e9
    egress_gb = deliveries * (o.record_bytes + o.delivery_overhead_bytes) * 8 / 1e9
    node_pg_gb = appends * (o.record_bytes + 60) * 8 / 1e9  # records + protocol, node -> PG
    repl_gb = wal_mb_s * 1e6 * o.replicas * 8 / 1e9
    # Object storage: everything older than hot_hours, in sealed segments.
    tier_mb_s = appends * o.row_bytes / 1e6
    segments_per_s = tier_mb_s / o.segment_mb
    day_tb = appends * 86400 * o.record_bytes / 1e12

    pg_hosts = clusters * (1 + o.replicas)
    print("Target: %s streams, %s appends/s, %s live readers (%.1f per stream), %d-byte records"
          % (f"{o.streams:,.0f}", f"{appends:,.0f}", f"{readers:,.0f}", per_stream_readers,
             o.record_bytes))
    print()
    print("runnel nodes")
    print("  nodes                    %8d  (%g cores, %g GiB each, planned at %.0f%% CPU)"
          % (nodes, o.node_cores, o.node_mem_gb, o.target_util * 100))
    print("  cores for appends        %8.0f  (%.1f µs per append)" % (append_cores, o.node_cpu_us))
    print("  cores for deliveries     %8.0f  (%s deliveries/s at %.1f µs)"
          % (delivery_cores, f"{deliveries:,.0f}", o.delivery_cpu_us))
    print("  memory for readers       %8.0f GiB (%.0f KiB per reader)" % (reader_gb, o.reader_kb))
    print("  readers per node         %8s" % f"{readers / nodes:,.0f}")
    print()
    print("PostgreSQL")
    print("  clusters (primaries)     %8d  (%g cores, %g GiB each; streams by name hash)"
          % (clusters, o.pg_cores, o.pg_mem_gb))
    print("  hosts with standbys      %8d  (%d synchronous standby per primary)"
          % (pg_hosts, o.replicas))
    print("  records per transaction  %8.1f  (%s append transactions/s in all)"
          % (group, f"{txns:,.0f}"))
    print("  CPU per append           %8.1f µs (%.0f µs per transaction / %.1f + %.1f per record)"
          % (pg_cpu_per_append, o.pg_txn_cpu_us, group, o.pg_record_cpu_us))
    print("  cores busy               %8.0f  of %.0f" % (pg_cores_needed, clusters * o.pg_cores))
    print("  WAL                      %8.0f MB/s (%.0f per cluster)" % (wal_mb_s, wal_mb_s / clusters))
    print("  hot data                 %8.0f GiB (%.1f h of records + the catalog)"
          % (hot_gb, o.hot_hours))
    print("  connections per cluster  %8d  (nodes x (workers + 4 queries + listener + notifier))"
          % (nodes * (o.workers + 6)))
    print()
    print("object storage")
    print("  tiered                   %8.0f MB/s, %.0f sealed %g MiB segments/s, %.0f TB of payload/day"
          % (tier_mb_s, segments_per_s, o.segment_mb, day_tb))
    print()
    print("network")
    print("  clients -> nodes         %8.1f Gbit/s" % ingress_gb)
    print("  nodes -> readers         %8.1f Gbit/s" % egress_gb)
    print("  nodes -> PostgreSQL      %8.1f Gbit/s" % node_pg_gb)
    print("  WAL to standbys          %8.1f Gbit/s" % repl_gb)
    print()
    total_cores = nodes * o.node_cores + pg_hosts * o.pg_cores
    total_mem = nodes * o.node_mem_gb + pg_hosts * o.pg_mem_gb
    print("total: %d hosts, %.0f cores, %.0f GiB of memory" % (nodes + pg_hosts, total_cores,
                                                              total_mem))


if __name__ == "__main__":
    main()
