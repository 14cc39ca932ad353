#!/usr/bin/env bash
# What taking two resources at once costs beside taking one: a lock +
# unlock cycle of a set of two resources (redlock_try_lock(text[]) and
# redlock_unlock(text[]), one script per node over both keys) against the
# same cycle on one resource, interleaved in one run on one build, one
# cluster and one set of nodes, so that the machine's load falls on both
# alike.  The target (issue 31): the two-resource cycle at most 1.3 x the
# one-resource cycle.
#
#   bash bench/multi.sh [--pg-config PATH] [--private-copy DIR]
#                       [--seconds N] [--reps N] [--clients N]
#
# Set-up: 5 redis-server nodes on free loopback ports with AOF (appendfsync
# everysec), their epochs old, a throwaway cluster with redlock preloaded,
# jit off, redlock.node_timeout 500 ms (on a shared 2-CPU machine a node
# stalled for 50 ms, the default, fails a call now and then, which ends
# pgbench's run).  Workload (pgbench -M prepared): two prepared statements per
# cycle on random resources, as drivers send them.  Prints one line per
# run, the medians of the cycle latency per form with their ratio, and the
# ratio of each repeat's neighbouring runs with its median; the machine's
# load before and after.
set -euo pipefail

usage() {
	echo "usage: bash bench/multi.sh $BENCH_PG_OPTIONS [--seconds N] [--reps N] [--clients N]" >&2
	exit 2
}

top=$(cd "$(dirname "$0")/.." && pwd)
. "$top/bench/lib.sh"
BENCH_NAME=multi
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
bench_workdir multi
nodes=$(bench_nodes redis 5 --appendonly yes --appendfsync everysec)
bench_seed_epoch "$nodes"
bench_cluster pg "redlock.nodes=$nodes" shared_preload_libraries=redlock jit=off \
	redlock.node_timeout=500ms
bench_use pg
psql -qX -c 'CREATE EXTENSION redlock'
cat > "$BENCH_WORK/one.sql" <<'SQL'
\set r random(1, 1000000000)
SELECT redlock_try_lock('mb:' || :r, 5000);
SELECT redlock_unlock('mb:' || :r);
SQL
cat > "$BENCH_WORK/two.sql" <<'SQL'
\set r random(1, 1000000000)
SELECT redlock_try_lock(ARRAY['mb:' || :r, 'mb:' || :r || ':2'], 5000);
SELECT redlock_unlock(ARRAY['mb:' || :r, 'mb:' || :r || ':2']);
SQL

echo "== $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, load: $(bench_uptime)"
echo "== $CLIENTS client(s), ${SECS} s per run, $REPS repeats, the two forms interleaved"
declare -A lat last
ratios=
for ((rep = 1; rep <= REPS; rep++)); do
	for form in one two; do
		if ! pgbench -n -M prepared -c "$CLIENTS" -j "$CLIENTS" -T "$SECS" \
			-f "$BENCH_WORK/$form.sql" > "$BENCH_WORK/out" 2>&1; then
			cat "$BENCH_WORK/out" >&2
			exit 1
		fi
		ms=$(awk '/latency average/ { print $4 }' "$BENCH_WORK/out")
		echo "rep $rep  $form resource(s)  cycle latency ${ms} ms"
		lat[$form]+="$ms "
		last[$form]=$ms
	done
	ratios+="$(awk -v a="${last[two]}" -v b="${last[one]}" 'BEGIN { printf "%.3f", a / b }') "
done
median() { tr ' ' '\n' | grep . | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }
one=$(echo "${lat[one]}" | median)
two=$(echo "${lat[two]}" | median)
echo "== median cycle latency: one resource ${one} ms, two resources ${two} ms;" \
	"two / one = $(awk -v a="$two" -v b="$one" 'BEGIN { printf "%.3f", a / b }') (target: at most 1.3)"
# each repeat's two runs are neighbours in time: their ratio is the
# figure least moved by the machine's other load
echo "== two / one per repeat: $ratios; median $(echo "$ratios" | median)"
echo "== load after: $(bench_uptime)"
