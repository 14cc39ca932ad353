#!/usr/bin/env bash
# What the restart quarantine's check costs on the uncontended path: every
# lock and extend script reads the node's epoch and clock (GET, TIME) when
# redlock.restart_quarantine is on, nothing when it is 0.  One build, one
# cluster, one set of nodes; the two settings interleaved, so that the
# machine's load falls on both alike.
#
#   bash bench/quarantine.sh [--pg-config PATH] [--private-copy DIR]
#                            [--seconds N] [--reps N] [--clients N]
#
# Set-up: 5 redis-server nodes on free loopback ports with AOF (appendfsync
# everysec), their epochs old (test/redis-nodes.sh seeds them, so no node
# is quarantined and the check runs in full on every call), a throwaway
# cluster with redlock preloaded, jit off.  Workload (pgbench -M prepared):
# two prepared statements per cycle, redlock_try_lock and redlock_unlock of
# a random resource, as drivers send them.  Prints one line per run and
# the medians of the cycle latency per setting, with their ratio; the
# machine's load before and after.
set -euo pipefail

usage() {
	echo "usage: bash bench/quarantine.sh $BENCH_PG_OPTIONS [--seconds N] [--reps N] [--clients N]" >&2
	exit 2
}

top=$(cd "$(dirname "$0")/.." && pwd)
. "$top/bench/lib.sh"
BENCH_NAME=quarantine
SECS=10
REPS=5
CLIENTS=1
while [ $# -gt 0 ]; do
	if bench_pg_option "$@"; then shift "$BENCH_SHIFT"; continue; fi
	case "$1" in
	--seconds) [ $# -ge 2 ] || usage; SECS=$2; shift 2 ;;
	--reps) [ $# -ge 2 ] || usage; REPS=$2; shift 2 ;;
	--clients) [ $# -ge 2 ] || usage; CLIENTS=$2; shift 2 ;;
	*) usage ;;
	esac
done

bench_pg "$bench_pg_config" "$bench_private"
bench_build
bench_workdir quarantine
nodes=$(bench_nodes redis 5 --appendonly yes --appendfsync everysec)
bench_cluster pg "redlock.nodes=$nodes" shared_preload_libraries=redlock jit=off
bench_use pg
psql -qX -c 'CREATE EXTENSION redlock'
cat > "$BENCH_WORK/cycle.sql" <<'SQL'
\set r random(1, 1000000000)
SELECT redlock_try_lock('qb:' || :r, 5000);
SELECT redlock_unlock('qb:' || :r);
SQL

echo "== $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, load: $(bench_uptime)"
echo "== $CLIENTS client(s), ${SECS} s per run, $REPS repeats, settings interleaved"
declare -A lat
for ((rep = 1; rep <= REPS; rep++)); do
	for q in 0 60000; do
		ms=$(PGOPTIONS="-c redlock.restart_quarantine=$q" \
			pgbench -n -M prepared -c "$CLIENTS" -j "$CLIENTS" -T "$SECS" \
			-f "$BENCH_WORK/cycle.sql" 2> /dev/null |
			awk '/latency average/ { print $4 }')
		echo "rep $rep  restart_quarantine=$q  cycle latency ${ms} ms"
		lat[$q]+="$ms "
	done
done
median() { tr ' ' '\n' | grep . | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }
off=$(echo "${lat[0]}" | median)
on=$(echo "${lat[60000]}" | median)
echo "== median cycle latency: quarantine off ${off} ms, on (60 s, the check in every lock script) ${on} ms;" \
	"on / off = $(awk -v a="$on" -v b="$off" 'BEGIN { printf "%.3f", a / b }')"
echo "== load after: $(bench_uptime)"
