#!/usr/bin/env bash
# The four performance targets of issue 18, measured side by side in one
# command:
#
#   bash bench/targets.sh [--quick] [--reps N] [--cycles N] [--seconds N]
#                         [--no-report] [--pg-config PATH] [--private-copy DIR]
#
#   (no option)   full run: 5 interleaved repeats of 5,000 timed cycles and
#                 10 s throughput runs; writes bench/TARGETS.md and
#                 bench/targets_cdf.png
#   --quick       smoke run (3 repeats of 500 cycles and 2 s runs); its
#                 report, marked as a smoke run, goes to
#                 bench/out-targets/TARGETS.md only
#   --reps, --cycles, --seconds   override the repeats (at least 3), the
#                 timed cycles of the latency runs and the length of the
#                 throughput runs
#   --no-report   leave bench/TARGETS.md and the plot alone (the report
#                 still goes to bench/out-targets/TARGETS.md)
#   --pg-config, --private-copy   which PostgreSQL installation to build,
#                 install and run in, or a private copy of it (bench/lib.sh)
#
# The targets (ratios between medians of this run):
#   1. redlock_try_lock p50 / the majority-round floor of the acquire
#      script, <= 1.25
#   2. redlock_unlock p50 / the same floor (the acquire script's), <= 1.1
#   3. lock+unlock cycle p50 / node-redlock 4.2's, <= 0.7
#   4. 16 sessions, each on its own resource, lock+unlock cycles/s /
#      node-redlock with 16 async workers, >= 1.0
#
# Set-up: 5 redis-server nodes on free loopback ports with AOF (appendfsync
# everysec), a throwaway cluster on a unix socket with redlock in
# shared_preload_libraries (the lock table), fsync on, jit off,
# redlock.node_timeout 500 ms (as bench/contention.sh: a node kept off the
# CPU of a shared machine for 50 ms must not abort a run); everything is
# stopped at the end.
#
#   floor     bench/floor.c, built here with cc and hiredis: a bare C client
#             that sends the commands the extension sends, captured with
#             MONITOR from one lock/unlock of the extension built here (so
#             the script text and arguments are today's src/, never a
#             copy), to all 5 nodes at once and times the third reply; then
#             the release commands the same way; CYCLES rounds.
#   redlock   one session: CYCLES redlock_try_lock(r, 30000) +
#             redlock_unlock(r) on one resource, each call timed in the
#             server with clock_timestamp() (PL/pgSQL, as bench/run.sh);
#             16 sessions: pgbench -M prepared -c 16 -j 2, one statement per
#             cycle, SELECT bench_cycle(r) with r = a resource of its own
#             per client (:client_id), for SECONDS.
#   node      bench/node/bench.js: redlock@4.2.0 and ioredis 4.28.5 from
#             bench/node/package-lock.json (npm ci), retryCount 0, the same
#             5 nodes and TTL; one client (lock + unlock, timed in the
#             client), and 16 async workers sharing one Redlock, each on its
#             own resource, for SECONDS.
# Informative, no target: the release script's own floor, one session's
# cycles/s through pgbench -c 1 against node-redlock with 1 worker, and the
# floor of a design redlock does not have, one connection per node shared
# by all backends (bench/shared/shared_floor.c, in a second cluster: 16
# sessions through pgbench, each round queued to a worker that pipelines
# every backend's commands to the nodes; the same scripts and arguments).
#
# Every repeat runs all of them, in an order rotated from repeat to repeat.
# The machine's load is recorded: busy share of all CPUs over 3 s before
# and after (none of our load), uptime(1) before, after and at the start of
# every repeat, and during each measurement
# the CPU used by other processes than ours (the machine's busy jiffies
# less those of our redis-servers, our cluster's processes and the
# client).  Raw data: bench/out-targets/.
set -euo pipefail

usage() {
	echo "usage: bash bench/targets.sh [--quick] [--reps N] [--cycles N] [--seconds N] [--no-report] $BENCH_PG_OPTIONS" >&2
	exit 2
}

cd "$(dirname "$0")/.."
ROOT=$PWD
. "$ROOT/bench/lib.sh"
OUT=$ROOT/bench/out-targets
CMD="bash bench/targets.sh${*:+ $*}"
QUICK=0
REPORT=1
REPS='' CYCLES='' SECS=''
while [ $# -gt 0 ]; do
	if bench_pg_option "$@"; then shift "$BENCH_SHIFT"; continue; fi
	case "$1" in
	--quick) QUICK=1; shift ;;
	--no-report) REPORT=0; shift ;;
	--reps) [ $# -ge 2 ] || usage; REPS=$2; shift 2 ;;
	--cycles) [ $# -ge 2 ] || usage; CYCLES=$2; shift 2 ;;
	--seconds) [ $# -ge 2 ] || usage; SECS=$2; shift 2 ;;
	*) usage ;;
	esac
done
if [ "$QUICK" = 1 ]; then
	: "${REPS:=3}" "${CYCLES:=500}" "${SECS:=2}"
	REPORT=0
else
	: "${REPS:=5}" "${CYCLES:=5000}" "${SECS:=10}"
fi
[[ $REPS =~ ^[0-9]+$ && $CYCLES =~ ^[0-9]+$ && $SECS =~ ^[0-9]+$ ]] || usage
[ "$REPS" -ge 3 ] || { echo "targets: --reps must be at least 3" >&2; exit 2; }
[ "$CYCLES" -ge 100 ] && [ "$SECS" -ge 1 ] || usage
WARM=$((CYCLES / 10))
WORKERS=16
TTL=30000
START_TS=$(date +%s)
DATE=$(date -u '+%Y-%m-%d %H:%M UTC')

bench_pg "$bench_pg_config" "$bench_private"
bench_need gawk redis-tools gnuplot-nox
bench_build

rm -rf "$OUT"
mkdir -p "$OUT"
echo "== floor client (bench/floor.c) and node-redlock (npm ci in bench/node)" >&2
bench_floor_build "$OUT"
echo "== the shared-connection floor (bench/shared)" >&2
bench_shared_build "$OUT"
bench_node_install "$OUT"

bench_workdir targets
echo "== 5 redis nodes (AOF everysec) on free loopback ports, a throwaway cluster" >&2
NODES=$(bench_nodes redis 5 --appendonly yes --appendfsync everysec)
PORTS=$(echo "$NODES" | tr ',' '\n' | sed 's/.*://')
P1=${PORTS%%$'\n'*}
bench_cluster pg shared_preload_libraries=redlock fsync=on jit=off max_connections=100 \
	"redlock.nodes=$NODES" redlock.node_timeout=500ms
bench_use pg
export PGOPTIONS="-c jit=off"
PG_PM_PID=$(head -1 "$BENCH_WORK/pg/data/postmaster.pid")

q() { psql -X -q -v ON_ERROR_STOP=1 -At "$@"; }
log() { echo "-- $*" >&2; }
KV=$OUT/kv
: > "$KV"
kv() { echo "$1=$2" >> "$KV"; }
get() { awk -F= -v k="$1" '$1 == k { v = $2 } END { print v }' "$KV"; }
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {if (NR == 0) print "nan"; else print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
# from a "key=value" output file
val() { awk -F= -v k="$2" '$1 == k { print $2 }' "$1"; }

q <<SQL
CREATE EXTENSION redlock;
$(bench_loop_sql "$TTL")

$(bench_cycle_sql "$TTL")
SQL

# ---------------------------------------------------------------- the floor's commands
log "capturing the extension's commands (MONITOR on 127.0.0.1:$P1)"
bench_floor_capture "$OUT" "$P1" "$TTL"
TOKEN=$BENCH_FLOOR_TOKEN
ACQ_CMDS=$(bench_floor_describe "$OUT" acquire)
REL_CMDS=$(bench_floor_describe "$OUT" release)
log "acquire: $ACQ_CMDS"
log "release: $REL_CMDS"

# ---------------------------------------------------------------- the shared-connection floor
# a second cluster: bench/shared's module, sending the captured commands'
# scripts with their arguments (checked by bench_shared_floor)
bench_shared_floor "$OUT" "$NODES" "$TTL" fsync=on jit=off max_connections=100
SF_PM_PID=$(head -1 "$BENCH_WORK/sf/data/postmaster.pid")

# ---------------------------------------------------------------- load
HZ=$(getconf CLK_TCK)
our_cpu() { bench_our_cpu redis "$PORTS" "$PG_PM_PID $SF_PM_PID"; }
kv idle_busy_before "$(bench_idle_busy)"
kv uptime_before "$(bench_uptime)"

# measure NAME REP COMMAND...: runs COMMAND (stdout to OUT/NAME_REP.out),
# recording the machine's busy share and the other processes' share of all
# CPUs while it ran, and the CPU (jiffies) of the redis-servers, of the
# cluster and of the client (COMMAND) in it
TIMEFORMAT='%3U %3S'
measure() {
	local name=$1 rep=$2 b0 t0 b1 t1 r0 r1 p0 p1 cu cs c rc=0
	shift 2
	read -r b0 t0 < <(bench_cpu_now)
	read -r r0 p0 < <(our_cpu)
	{ time "$@" > "$OUT/${name}_$rep.out" 2> "$OUT/${name}_$rep.err" || rc=$?; } 2> "$OUT/${name}_$rep.time"
	read -r b1 t1 < <(bench_cpu_now)
	read -r r1 p1 < <(our_cpu)
	read -r cu cs < "$OUT/${name}_$rep.time"
	c=$(awk -v u="$cu" -v s="$cs" -v hz="$HZ" 'BEGIN { printf "%.0f", (u + s) * hz }')
	kv "${name}_busy_$rep" "$(bench_busy "$b0" "$t0" "$b1" "$t1")"
	kv "${name}_others_$rep" "$(awk -v b=$((b1 - b0)) -v t=$((t1 - t0)) -v o=$((r1 - r0 + p1 - p0)) \
		-v c="$c" 'BEGIN { x = t > 0 ? 100 * (b - o - c) / t : 0; printf "%.0f", x < 0 ? 0 : x }')"
	kv "${name}_rediscpu_$rep" $((r1 - r0))
	kv "${name}_pgcpu_$rep" $((p1 - p0))
	kv "${name}_clientcpu_$rep" "$c"
	if [ "$rc" != 0 ]; then
		echo "targets: $name (repeat $rep) failed:" >&2
		tail -5 "$OUT/${name}_$rep.err" >&2
		exit 1
	fi
}

# ---------------------------------------------------------------- the runs
run_floor() {	# the floor client over CYCLES rounds
	FLOOR_SAMPLES=$OUT/samples_floor_$1 "$OUT/floor" "$NODES" "$OUT/floor_cmds.txt" "$CYCLES" "$WARM" "$TOKEN"
}
run_rl1() {	# one session, timed in the server
	q -c "SELECT bench_loop($1, $CYCLES, $WARM)"
	bench_loop_pct "$1"
}
run_pgb() {	# pgbench CLIENTS REP [--log ...]: each client on its own resource
	pgbench -n -M prepared -c "$1" -j $(($1 < 2 ? 1 : 2)) -T "$SECS" -D "run=$2" -f "$OUT/cycle.sql" "${@:3}"
}
run_node1() { NODE_SAMPLES=$OUT/samples_node1_$1 node bench/node/bench.js single "$NODES" "node1:$1" "$CYCLES" "$WARM"; }
run_nodew() { node bench/node/bench.js workers "$NODES" "node$2:$1" "$2" "$SECS"; }
run_sf() {	# run_sf CLIENTS REP [--log ...]: the shared-connection floor, in the second cluster
	(bench_use sf; pgbench -n -M prepared -c "$1" -j $(($1 < 2 ? 1 : 2)) -T "$SECS" -D "run=$2" -f "$OUT/sf_cycle.sql" "${@:3}")
}
log_p50() {	# log_p50 PREFIX: p50 of the cycles' client-side latency (us, column 3) in pgbench's logs
	cat "$1".* | awk '{ print $3 }' | sort -n |
		awk '{ a[NR] = $1 } END { i = int(NR * 0.5 + 0.5); if (i < 1) i = 1; print a[i] + 0 }'
	rm -f "$1".*
}
echo "SELECT bench_cycle('pgb:' || :run || ':' || :client_id);" > "$OUT/cycle.sql"
echo "SELECT bench_sf_cycle('sf:' || :run || ':' || :client_id);" > "$OUT/sf_cycle.sql"

pgb_check() {	# NAME REP: the tps of a pgbench run; fails on failed clients
	local f="$OUT/$1_$2.out"
	if grep -q 'aborted in command\|number of failed transactions: [1-9]' "$f" "$OUT/$1_$2.err"; then
		echo "targets: $1 (repeat $2): pgbench clients failed (see $f)" >&2
		exit 1
	fi
	if ! grep -q '^number of transactions actually processed: [1-9]' "$f"; then
		echo "targets: $1 (repeat $2): pgbench completed no cycle in ${SECS}s (see $f)" >&2
		exit 1
	fi
	sed -n 's/^tps = \([0-9.]*\) .*/\1/p' "$f" | head -1
}

# pgb_item NAME REP RUNNER ARGS...: a pgbench run measured, its tps (and,
# when it logged with --log-prefix=OUT/NAME_log_REP, its cycles' p50) kept
pgb_item() {
	local name=$1 rep=$2 tps
	shift 2
	measure "$name" "$rep" "$@"
	tps=$(pgb_check "$name" "$rep")	# an assignment: its failure stops the run
	kv "${name}_tps_$rep" "$tps"
	if [[ " $* " == *" --log "* ]]; then
		kv "${name}_p50_$rep" "$(log_p50 "$OUT/${name}_log_$rep")"
	fi
}

ITEMS=(floor rl1 node1 rl16 node16 pgb1 nodew1 sf16 sf1)
for ((r = 1; r <= REPS; r++)); do
	kv "uptime_$r" "$(bench_uptime)"
	for ((k = 0; k < ${#ITEMS[@]}; k++)); do
		item=${ITEMS[$(((k + r - 1) % ${#ITEMS[@]}))]}
		case $item in
		floor)
			log "repeat $r/$REPS: floor, $CYCLES rounds"
			measure floor "$r" run_floor "$r" ;;
		rl1)
			log "repeat $r/$REPS: redlock, one session, $CYCLES cycles"
			measure rl1 "$r" run_rl1 "$r" ;;
		node1)
			log "repeat $r/$REPS: node-redlock, one client, $CYCLES cycles"
			measure node1 "$r" run_node1 "$r" ;;
		rl16)
			log "repeat $r/$REPS: redlock, $WORKERS sessions, ${SECS}s"
			pgb_item rl16 "$r" run_pgb "$WORKERS" "$r" ;;
		node16)
			log "repeat $r/$REPS: node-redlock, $WORKERS workers, ${SECS}s"
			measure node16 "$r" run_nodew "$r" "$WORKERS"
			[ "$(val "$OUT/node16_$r.out" errors)" = 0 ] ||
				{ echo "targets: node-redlock workers had errors (see $OUT/node16_$r.out)" >&2; exit 1; } ;;
		pgb1)
			log "repeat $r/$REPS: redlock, one session through pgbench, ${SECS}s"
			pgb_item pgb1 "$r" run_pgb 1 "$r" --log --log-prefix="$OUT/pgb1_log_$r" ;;
		nodew1)
			log "repeat $r/$REPS: node-redlock, one worker, ${SECS}s"
			measure nodew1 "$r" run_nodew "$r" 1 ;;
		sf16)
			log "repeat $r/$REPS: shared-connection floor, $WORKERS sessions, ${SECS}s"
			pgb_item sf16 "$r" run_sf "$WORKERS" "$r" ;;
		sf1)
			log "repeat $r/$REPS: shared-connection floor, one session through pgbench, ${SECS}s"
			pgb_item sf1 "$r" run_sf 1 "$r" --log --log-prefix="$OUT/sf1_log_$r" ;;
		esac
	done
done
kv idle_busy_after "$(bench_idle_busy)"
kv uptime_after "$(bench_uptime)"

# ---------------------------------------------------------------- plot
# CDFs of every timed call and cycle, all repeats: "x fraction" per line
cdf() { sort -g | awk '{ a[NR] = $1 } END { for (i = 1; i <= NR; i++) print a[i], i / NR }'; }
cat "$OUT"/samples_floor_* | awk '{ print $1 }' | cdf > "$OUT/cdf_floor_acquire.dat"
cat "$OUT"/samples_floor_* | awk '{ print $2 }' | cdf > "$OUT/cdf_floor_release.dat"
cat "$OUT"/samples_floor_* | awk '{ print $1 + $2 }' | cdf > "$OUT/cdf_floor_cycle.dat"
cat "$OUT"/samples_node1_* | cdf > "$OUT/cdf_node_cycle.dat"
for op in acquire release; do
	q -c "SELECT us FROM samples WHERE op = '$op'" | cdf > "$OUT/cdf_rl_$op.dat"
done
q -c "SELECT a.us + r.us FROM samples a JOIN samples r USING (rep, i) WHERE a.op = 'acquire' AND r.op = 'release'" |
	cdf > "$OUT/cdf_rl_cycle.dat"
{
bench_plot_cdf_head "$OUT/targets_cdf.png" \
	"one session, 5 nodes, ${CYCLES} cycles x ${REPS} repeats$([ "$QUICK" = 1 ] && echo ' (smoke run)')"
cat <<GNUPLOT
set title "acquire and release: redlock (timed in the server) vs the majority-round floor"
plot "$OUT/cdf_rl_acquire.dat" u 1:2 w l lw 2 lc 1 t "redlock\\\\_try\\\\_lock", \
     "$OUT/cdf_floor_acquire.dat" u 1:2 w l dt 2 lw 2 lc 1 t "floor, acquire script", \
     "$OUT/cdf_rl_release.dat" u 1:2 w l lw 2 lc 7 t "redlock\\\\_unlock", \
     "$OUT/cdf_floor_release.dat" u 1:2 w l dt 2 lw 2 lc 7 t "floor, release script"
set title "lock + unlock cycle"
plot "$OUT/cdf_rl_cycle.dat" u 1:2 w l lw 2 lc 1 t "redlock (timed in the server)", \
     "$OUT/cdf_node_cycle.dat" u 1:2 w l lw 2 lc 2 t "node-redlock 4.2 (timed in the client)", \
     "$OUT/cdf_floor_cycle.dat" u 1:2 w l dt 2 lw 2 lc 0 t "floor (acquire + release rounds)"
unset multiplot
GNUPLOT
} | gnuplot

# ---------------------------------------------------------------- report
# of REP-FILE-NAME KEY: per-repeat values "a/b/c" and their median
reps_of() {	# reps_of NAME KEY: the values of each repeat, "a/b/c"
	local s="" r v
	for ((r = 1; r <= REPS; r++)); do
		if [ "$2" = kv ]; then v=$(get "${1}_$r"); else v=$(val "$OUT/${1}_$r.out" "$2"); fi
		s+="${s:+/}$v"
	done
	echo "$s"
}
# shellcheck disable=SC2046
med() { median $(reps_of "$1" "$2" | tr '/' ' '); }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b + 0 == 0) print "nan"; else printf "%.2f", a / b }'; }
# per-repeat ratios of two measurements: reps_ratio NAME1 KEY1 NAME2 KEY2
reps_ratio() {
	paste -d' ' <(reps_of "$1" "$2" | tr '/' '\n') <(reps_of "$3" "$4" | tr '/' '\n') |
		awk '{ printf "%s%.2f", (NR > 1 ? "/" : ""), ($2 + 0 == 0) ? 0 : $1 / $2 }'
}
verdict() {	# verdict RATIO <= | >= LIMIT
	awk -v x="$1" -v op="$2" -v l="$3" 'BEGIN { ok = (op == "<=") ? x + 0 <= l + 0 : x + 0 >= l + 0; print ok ? "**met**" : "**missed**" }'
}
fmt0() { printf '%.0f' "$1"; }
# cycles NAME REP: the cycles a throughput run completed
cycles() {
	case $1 in
	rl16|pgb1|sf16|sf1) sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$OUT/${1}_$2.out" ;;
	*) val "$OUT/${1}_$2.out" cycles ;;
	esac
}
# cpu_split NAME: "redis | PostgreSQL | client" CPU us per cycle, medians over the repeats
cpu_split() {
	local r w a=() b=() c=()
	for ((r = 1; r <= REPS; r++)); do
		w=$(cycles "$1" "$r")
		a+=("$(awk -v j="$(get "${1}_rediscpu_$r")" -v n="$w" -v hz="$HZ" 'BEGIN { printf "%.0f", (n > 0 ? j / hz * 1e6 / n : 0) }')")
		b+=("$(awk -v j="$(get "${1}_pgcpu_$r")" -v n="$w" -v hz="$HZ" 'BEGIN { printf "%.0f", (n > 0 ? j / hz * 1e6 / n : 0) }')")
		c+=("$(awk -v j="$(get "${1}_clientcpu_$r")" -v n="$w" -v hz="$HZ" 'BEGIN { printf "%.0f", (n > 0 ? j / hz * 1e6 / n : 0) }')")
	done
	echo "$(median "${a[@]}") | $(median "${b[@]}") | $(median "${c[@]}")"
}

others_max=0
others_all=()
for item in "${ITEMS[@]}"; do
	for ((r = 1; r <= REPS; r++)); do
		v=$(get "${item}_others_$r"); others_all+=("$v")
		[ "$v" -gt "$others_max" ] && others_max=$v
	done
done
others_med=$(median "${others_all[@]}")
QUIET=1
{ [ "$(get idle_busy_before)" -le 10 ] && [ "$(get idle_busy_after)" -le 10 ] && [ "$others_max" -le 10 ]; } || QUIET=0

fl_acq=$(med floor acquire_p50); fl_rel=$(med floor release_p50)
rl_acq=$(med rl1 acquire_p50); rl_rel=$(med rl1 release_p50); rl_cyc=$(med rl1 cycle_p50)
nd_cyc=$(med node1 cycle_p50)
rl16=$(med rl16_tps kv); nd16=$(med node16 cycles_per_s)
r1=$(ratio "$rl_acq" "$fl_acq"); r2=$(ratio "$rl_rel" "$fl_acq"); r3=$(ratio "$rl_cyc" "$nd_cyc"); r4=$(ratio "$rl16" "$nd16")
sf16=$(med sf16_tps kv)

REPORT_FILE=$OUT/TARGETS.md
{
	echo "# redlock against its floor and node-redlock (issue 18's targets)"
	echo
	if [ "$QUICK" = 1 ] || [ "$QUIET" = 0 ]; then
		echo "**Not a result:** $([ "$QUICK" = 1 ] && echo "a smoke run (--quick)")$([ "$QUICK" = 1 ] && [ "$QUIET" = 0 ] && echo "; ")$([ "$QUIET" = 0 ] && echo "the machine was busy with other load (more than 10% of the CPUs before, after or during a measurement: see below)")."
		echo
	fi
	echo "| | |"
	echo "|---|---|"
	echo "| command | \`$CMD\` |"
	echo "| date | $DATE |"
	echo "| machine | $(nproc) CPUs, $(lscpu | sed -n 's/^Model name: *//p' | head -1), kernel $(uname -r), $(. /etc/os-release; echo "$PRETTY_NAME") |"
	echo "| software | $(q -c 'SELECT version()' | cut -d, -f1), redlock $(q -c "SELECT extversion FROM pg_extension WHERE extname = 'redlock'") (commit $(git -C "$ROOT" rev-parse --short HEAD)$(git -C "$ROOT" diff --quiet HEAD -- src sql 2>/dev/null || echo ", src/ or sql/ modified")), $(redis-server --version | awk '{print $1, $2, $3}'), hiredis $(dpkg-query -W -f='${Version}' libhiredis-dev 2>/dev/null), node $(node --version), redlock $(node -p "require('./bench/node/node_modules/redlock/package.json').version") with ioredis $(node -p "require('./bench/node/node_modules/ioredis/package.json').version") |"
	echo "| setup | 5 redis-server nodes on free loopback ports, AOF with appendfsync everysec; one cluster on a unix socket, redlock in shared_preload_libraries, fsync=on, jit=off, redlock.node_timeout=500ms; a second cluster with only bench/shared's module preloaded, for the shared-connection floor; lock TTL $TTL ms everywhere |"
	echo "| load | before the run $(get idle_busy_before)% of all CPUs busy over 3 s, after it $(get idle_busy_after)%; other processes than this benchmark's used $others_med% of all CPUs during a measurement (median), at most $others_max% |"
	echo "| uptime | before: \`$(get uptime_before)\`; after: \`$(get uptime_after)\` (at the start of each repeat: below) |"
	echo "| repeats | $REPS, interleaved (the order of the measurements rotated from repeat to repeat); every figure is the median of the repeats' figures, per repeat after it; ratios are between medians |"
	echo
	echo "## Targets"
	echo
	echo "| | redlock | against | ratio | per repeat | target | verdict |"
	echo "|---|---:|---:|---:|---|---:|---|"
	echo "| 1. acquire p50 / majority-round floor of the acquire script | $rl_acq us | $fl_acq us | $r1 | $(reps_ratio rl1 acquire_p50 floor acquire_p50) | <= 1.25 | $(verdict "$r1" "<=" 1.25) |"
	echo "| 2. release p50 / the same floor | $rl_rel us | $fl_acq us | $r2 | $(reps_ratio rl1 release_p50 floor acquire_p50) | <= 1.1 | $(verdict "$r2" "<=" 1.1) |"
	echo "| 3. lock+unlock cycle p50 / node-redlock 4.2's | $rl_cyc us | $nd_cyc us | $r3 | $(reps_ratio rl1 cycle_p50 node1 cycle_p50) | <= 0.7 | $(verdict "$r3" "<=" 0.7) |"
	echo "| 4. $WORKERS sessions, own resource each, cycles/s / node-redlock with $WORKERS async workers | $(fmt0 "$rl16") | $(fmt0 "$nd16") | $r4 | $(reps_ratio rl16_tps kv node16 cycles_per_s) | >= 1.0 | $(verdict "$r4" ">=" 1.0) |"
	echo
	echo "## Every measurement"
	echo
	echo "Latencies in microseconds; \"busy\" is the machine's busy share of all $(nproc) CPUs during the measurement, \"others\" the share used by processes other than this benchmark's (medians over the repeats)."
	echo
	echo "| what | p50 | p90 | p99 | p50 per repeat | busy % | others % |"
	echo "|---|---:|---:|---:|---|---:|---:|"
	row() {	# row LABEL NAME KEY-PREFIX
		echo "| $1 | $(med "$2" "${3}_p50") | $(med "$2" "${3}_p90") | $(med "$2" "${3}_p99") | $(reps_of "$2" "${3}_p50") | $(med "${2}_busy" kv) | $(med "${2}_others" kv) |"
	}
	row "floor: acquire round (majority's replies)" floor acquire
	row "floor: release round (majority's replies)" floor release
	row "floor: acquire + release" floor cycle
	row "floor: acquire round, all 5 replies" floor acquire_all
	row "floor: release round, all 5 replies" floor release_all
	row "redlock, one session: redlock_try_lock" rl1 acquire
	row "redlock, one session: redlock_unlock" rl1 release
	row "redlock, one session: cycle" rl1 cycle
	row "node-redlock, one client: lock()" node1 lock
	row "node-redlock, one client: unlock()" node1 unlock
	row "node-redlock, one client: cycle" node1 cycle
	echo
	echo "| throughput, lock+unlock cycles/s | median | per repeat | busy % | others % | CPU us per cycle: 5 redis-servers | PostgreSQL | client |"
	echo "|---|---:|---|---:|---:|---:|---:|---:|"
	echo "| redlock, $WORKERS sessions (\`pgbench -n -M prepared -c $WORKERS -j 2 -T $SECS\`) | $(fmt0 "$rl16") | $(reps_of rl16_tps kv | sed 's/\.[0-9]*//g') | $(med rl16_busy kv) | $(med rl16_others kv) | $(cpu_split rl16) |"
	echo "| node-redlock, $WORKERS async workers | $(fmt0 "$nd16") | $(reps_of node16 cycles_per_s | sed 's/\.[0-9]*//g') | $(med node16_busy kv) | $(med node16_others kv) | $(cpu_split node16) |"
	echo "| redlock, one session (\`pgbench -n -M prepared -c 1 -T $SECS\`) | $(fmt0 "$(med pgb1_tps kv)") | $(reps_of pgb1_tps kv | sed 's/\.[0-9]*//g') | $(med pgb1_busy kv) | $(med pgb1_others kv) | $(cpu_split pgb1) |"
	echo "| node-redlock, one worker | $(fmt0 "$(med nodew1 cycles_per_s)") | $(reps_of nodew1 cycles_per_s | sed 's/\.[0-9]*//g') | $(med nodew1_busy kv) | $(med nodew1_others kv) | $(cpu_split nodew1) |"
	echo "| not redlock: the floor of one shared connection per node, $WORKERS sessions (\`bench/shared\`) | $(fmt0 "$sf16") | $(reps_of sf16_tps kv | sed 's/\.[0-9]*//g') | $(med sf16_busy kv) | $(med sf16_others kv) | $(cpu_split sf16) |"
	echo "| not redlock: the same floor, one session | $(fmt0 "$(med sf1_tps kv)") | $(reps_of sf1_tps kv | sed 's/\.[0-9]*//g') | $(med sf1_busy kv) | $(med sf1_others kv) | $(cpu_split sf1) |"
	echo
	echo "CPU per cycle: the jiffies the 5 redis-servers, this benchmark's cluster (its postmaster and every"
	echo "backend) and the client (pgbench, or node-redlock's node process) used during the run, divided by"
	echo "the cycles it completed (medians over the repeats); node-redlock runs no PostgreSQL."
	echo
	pgb1_p50=$(med pgb1_p50 kv)
	echo "Plot: [targets_cdf.png](targets_cdf.png) (CDF of every timed call and cycle of one session, all repeats)."
	echo
	echo "Informative, no target:"
	echo
	echo "- redlock_unlock p50 against the release script's own floor: $rl_rel vs $fl_rel us, $(ratio "$rl_rel" "$fl_rel")."
	echo "- The cycle as a client sees it: one session's \`SELECT bench_cycle(r)\` through pgbench (one prepared"
	echo "  statement per cycle, client-side latency p50 from its per-transaction log): $pgb1_p50 us"
	echo "  (per repeat $(reps_of pgb1_p50 kv)), against node-redlock's client-side cycle p50 $nd_cyc us: $(ratio "$pgb1_p50" "$nd_cyc")."
	echo "  Target 3 compares the cycle timed in the server (rows 1 and 2 are timed there too), which leaves"
	echo "  out the statement's round trip between client and server (about the cost of \`SELECT 1\`)."
	echo "- What one connection per node shared by all backends could give (target 4): its floor, the"
	echo "  same $WORKERS sessions' rounds queued to one worker that pipelines them to the nodes, made"
	echo "  $(fmt0 "$sf16") cycles/s: $(ratio "$sf16" "$nd16") x node-redlock's $WORKERS workers (per repeat"
	echo "  $(reps_ratio sf16_tps kv node16 cycles_per_s)) and $(ratio "$sf16" "$rl16") x redlock's $WORKERS sessions. It does none of the"
	echo "  extension's work around a round (lock table, registry, fencing choice, statistics, failures)."
	echo "  What it costs one session: its cycle through pgbench, client-side p50 as above, $(med sf1_p50 kv) us"
	echo "  (per repeat $(reps_of sf1_p50 kv)) against redlock's $pgb1_p50 us: $(ratio "$(med sf1_p50 kv)" "$pgb1_p50") (two rounds, each"
	echo "  through the worker: two more latch round trips between processes, and no lock table or registry)."
	echo
	echo "## How"
	echo
	echo "- Floor (\`bench/floor.c\`): the commands the extension built by this run sent to a node for one"
	echo "  redlock_try_lock and one redlock_unlock, captured with MONITOR (acquire: $ACQ_CMDS;"
	echo "  release: $REL_CMDS), sent over one connection per node to all 5 nodes at once;"
	echo "  a round's time runs from just before the first write to the third node's reply, and the"
	echo "  client waits for all 5 replies before the next round; the fencing proposal of every round"
	echo "  is made as the extension makes it. $CYCLES rounds after $WARM untimed."
	echo "- redlock, one session: \`bench_loop\`: $CYCLES cycles of \`redlock_try_lock(r, $TTL)\` and"
	echo "  \`redlock_unlock(r)\` on one resource after $WARM untimed, each call timed in the server with"
	echo "  clock_timestamp() (PL/pgSQL); the cycle is the sum of the two calls of one iteration."
	echo "- redlock, sessions: \`SELECT bench_cycle('pgb:' || :run || ':' || :client_id)\` (PL/pgSQL:"
	echo "  try_lock, unlock; a refusal fails the run), cycles/s is pgbench's tps without connection time."
	echo "- node-redlock (\`bench/node/bench.js\`): one \`Redlock\` over one ioredis client per node,"
	echo "  retryCount 0, \`lock(r, $TTL)\` then \`unlock()\`, timed in the client with process.hrtime;"
	echo "  node-redlock waits for all 5 replies before it settles a lock or an unlock, and runs"
	echo "  EVALSHA of its scripts (SET NX PX; GET and DEL), no fencing token. Workers: $WORKERS async"
	echo "  loops sharing it, each on its own resource, counting the cycles completed in $SECS s."
	echo "- Shared-connection floor (\`bench/shared/shared_floor.c\`, a module of its own in a second"
	echo "  cluster, not the extension): a background worker holds one connection per node; a backend's"
	echo "  \`shared_floor_cycle\` (called once per cycle from PL/pgSQL, as \`bench_cycle\`) puts the"
	echo "  acquire command (the captured one's script, keys, owner value and TTL, a fresh proposal) in"
	echo "  a shared-memory slot, queues it and sets the worker's latch; the worker appends every queued"
	echo "  command to each node's connection, writes each node's batch in one write, counts the replies"
	echo "  and sets the backend's latch at the majority; then the release the same way."
	echo
	echo "Machine load (uptime) at the start of each repeat:"
	echo
	for ((r = 1; r <= REPS; r++)); do echo "- repeat $r: \`$(get "uptime_$r")\`"; done
	echo
	echo "Run time of the whole command: $(( $(date +%s) - START_TS )) s. Raw data: \`bench/out-targets/\` (not committed)."
} > "$REPORT_FILE"
if [ "$REPORT" = 1 ]; then
	cp "$REPORT_FILE" "$ROOT/bench/TARGETS.md"
	cp "$OUT/targets_cdf.png" "$ROOT/bench/targets_cdf.png"
fi
cat "$REPORT_FILE"
