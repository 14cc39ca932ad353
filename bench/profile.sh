#!/usr/bin/env bash
# Profiles behind bench/RESULTS.md's misses (not part of the timed run):
#   bash bench/profile.sh [--pg-config PATH] [--private-copy DIR]
#       -> bench/out/profile/*.txt, summary on stdout
# Needs linux-perf and strace (installed here if missing).  Builds and
# installs the extension into the PostgreSQL installation of --pg-config,
# or into a private copy of it (--private-copy DIR, see bench/lib.sh), and
# starts its own 5 redis nodes on free loopback ports (test/redis-nodes.sh)
# and a throwaway cluster on a unix socket (test/pg-cluster.sh).
#  A. syscalls per cycle of one backend (strace -c over a 3000-cycle loop)
#  B. perf record -g of that backend over a 10000-cycle loop (cpu-clock)
#  C. perf record of one redis node over the same kind of loop
#  D. redis-server CPU per command: PING, SET, EVAL / EVALSHA of the release script
#  E. system-wide CPU by process during 16 pgbench clients on distinct resources
set -eu

usage() {
	echo "usage: bash bench/profile.sh $BENCH_PG_OPTIONS" >&2
	exit 2
}

cd "$(dirname "$0")/.."
ROOT=$PWD
. "$ROOT/bench/lib.sh"
P=$ROOT/bench/out/profile
while [ $# -gt 0 ]; do
	bench_pg_option "$@" || usage
	shift "$BENCH_SHIFT"
done

bench_pg "$bench_pg_config" "$bench_private"
bench_need linux-perf strace
bench_build
rm -rf "$P"; mkdir -p "$P"
bench_workdir profile
echo "== the machine was $(bench_idle_busy)% busy (all CPUs, $(nproc) CPUs) over 3 s, with none of this load" | tee "$P/idle_busy.txt"
NODES=$(bench_nodes redis 5)
BASE=${NODES%%,*}; BASE=${BASE##*:}	# the node profiled in C and D
bench_cluster pg max_connections=100 jit=off fsync=off
bench_use pg

q() { psql -X -q -v ON_ERROR_STOP=1 -At "$@"; }
rpid() { bench_node_pid redis "$1"; }
q <<SQL
CREATE EXTENSION redlock;
ALTER SYSTEM SET redlock.nodes = '$NODES';
SELECT pg_reload_conf();
CREATE FUNCTION loop(n int, res text) RETURNS void LANGUAGE plpgsql AS \$\$
BEGIN
	FOR i IN 1 .. n LOOP
		PERFORM redlock_try_lock(res, 30000);
		PERFORM redlock_unlock(res);
	END LOOP;
END \$\$;
CREATE FUNCTION bench_cycle(r text) RETURNS int LANGUAGE plpgsql AS \$\$
BEGIN
	IF redlock_try_lock(r, 30000) IS NULL THEN RETURN 0; END IF;
	PERFORM redlock_unlock(r);
	RETURN 1;
END \$\$;
SQL

# A: one session; warm up, then strace the backend over exactly 3000 cycles
echo "== A: syscalls of one backend over 3000 lock/unlock cycles (5 nodes)"
q > /dev/null <<SQL
SELECT loop(200, 'prof');
SELECT pg_backend_pid() AS pid \gset
\setenv BPID :pid
\setenv OUTF $P/strace.txt
\! (strace -c -f -p \$BPID -o \$OUTF & echo \$! > \$OUTF.pid); sleep 1
SELECT loop(3000, 'prof');
\! kill -INT \$(cat \$OUTF.pid); sleep 1
SQL
awk 'NR <= 2 || /total/ || $4 ~ /^[0-9]+$/ { print }' "$P/strace.txt" | head -20 > "$P/strace_summary.txt"
awk '$NF != "syscall" && $4 ~ /^[0-9]+$/ { printf "%-14s %8.2f per cycle\n", $NF, $4 / 3000 } /total/ { printf "%-14s %8.2f per cycle\n", "TOTAL", $3 / 3000 }' "$P/strace.txt" | tee "$P/syscalls_per_cycle.txt"

# B + C: perf record the backend and one redis node over 10000 cycles
echo "== B/C: perf record (cpu-clock) of the backend and of node $BASE over 10000 cycles"
q > /dev/null <<SQL
SELECT loop(200, 'prof');
SELECT pg_backend_pid() AS pid \gset
\setenv BPID :pid
\setenv RPID $(rpid $BASE)
\setenv PD $P
\! (perf record -e cpu-clock -F 4999 -g -p \$BPID -o \$PD/backend.data >/dev/null 2>&1 & echo \$! > \$PD/perf1.pid); (perf record -e cpu-clock -F 4999 -g -p \$RPID -o \$PD/redis.data >/dev/null 2>&1 & echo \$! > \$PD/perf2.pid); sleep 1
SELECT loop(10000, 'prof');
\! kill -INT \$(cat \$PD/perf1.pid) \$(cat \$PD/perf2.pid); sleep 2
SQL
perf report -i "$P/backend.data" --no-children --sort dso --stdio 2>/dev/null | grep -v '^#' | grep -v '^$' | head -15 > "$P/backend_dso.txt"
perf report -i "$P/backend.data" --no-children --sort sym --stdio -g none 2>/dev/null | grep -v '^#' | grep -v '^$' | head -40 > "$P/backend_sym.txt"
perf report -i "$P/backend.data" --children --sort sym --stdio -g none 2>/dev/null | grep -v '^#' | grep -v '^$' | head -60 > "$P/backend_children.txt"
perf report -i "$P/redis.data" --no-children --sort sym --stdio -g none 2>/dev/null | grep -v '^#' | grep -v '^$' | head -40 > "$P/redis_sym.txt"
perf report -i "$P/redis.data" --children --sort sym --stdio -g none 2>/dev/null | grep -v '^#' | grep -v '^$' | head -50 > "$P/redis_children.txt"
echo "-- backend by dso"; cat "$P/backend_dso.txt"
echo "-- backend self time by symbol"; head -25 "$P/backend_sym.txt"
echo "-- redis node self time by symbol"; head -25 "$P/redis_sym.txt"

# D: redis-server CPU per command (utime+stime of the node / commands)
echo "== D: redis-server CPU per command (one node, redis-benchmark -c 1 -n 100000)"
REL="if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0"
SHA=$(redis-cli -p $BASE SCRIPT LOAD "$REL")
hz=$(getconf CLK_TCK)
cpu_of() { awk '{ print $14 + $15 }' "/proc/$(rpid $BASE)/stat"; }
for what in PING SET EVAL EVALSHA; do
	c0=$(cpu_of); t0=$(date +%s%N)
	case $what in
	PING) redis-benchmark -p $BASE -c 1 -n 100000 -q -t ping_mbulk >/dev/null 2>&1 ;;
	SET) redis-benchmark -p $BASE -c 1 -n 100000 -q -t set >/dev/null 2>&1 ;;
	EVAL) redis-benchmark -p $BASE -c 1 -n 100000 -q EVAL "$REL" 1 k:absent x >/dev/null 2>&1 ;;
	EVALSHA) redis-benchmark -p $BASE -c 1 -n 100000 -q EVALSHA "$SHA" 1 k:absent x >/dev/null 2>&1 ;;
	esac
	c1=$(cpu_of); t1=$(date +%s%N)
	awk -v w=$what -v c=$((c1 - c0)) -v hz="$hz" -v t=$(((t1 - t0) / 1000)) 'BEGIN {
		printf "%-8s redis CPU %.1f us/command, wall %.1f us/command\n", w, c / hz * 1e6 / 100000, t / 100000 }'
done | tee "$P/redis_per_command.txt"

# E: 16 clients on distinct resources, system-wide CPU by process
echo "== E: 16 pgbench clients, distinct resources: CPU by command name (perf record -a, 8 s)"
echo "SELECT bench_cycle('c:' || :client_id);" > "$P/distinct.sql"
pgbench -n -f "$P/distinct.sql" -c 16 -j 2 -T 12 > "$P/pgbench16.out" 2>&1 &
pgb=$!
sleep 2
perf record -e cpu-clock -F 999 -a -g -o "$P/system.data" -- sleep 8 >/dev/null 2>&1
wait $pgb || true
perf report -i "$P/system.data" --no-children --sort comm --stdio -g none 2>/dev/null | grep -v '^#' | grep -v '^$' | head -12 | tee "$P/system_comm.txt"
perf report -i "$P/system.data" --no-children --comm postgres --sort sym --stdio -g none 2>/dev/null | grep -v '^#' | grep -v '^$' | head -30 > "$P/system_postgres_sym.txt"
echo "-- postgres processes, top symbols"; head -20 "$P/system_postgres_sym.txt"
grep -E '^tps|latency average' "$P/pgbench16.out"
