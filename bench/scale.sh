#!/usr/bin/env bash
# The scale curve (issue 30): lock + unlock cycles per second against the
# number of sessions, redlock beside node-redlock 4.2 at the same
# concurrency and the shared-connection floor, own resources and one hot
# resource (there beside advisory locks), with the connections this server
# holds to each node and the errors of every point, in one command:
#
#   bash bench/scale.sh [--quick] [--seconds N] [--reps N] [--node-timeout MS]
#                       [--no-report] [--pg-config PATH] [--private-copy DIR]
#
#   (no option)   full run: 1, 16, 64, 128 and 256 sessions, 8 s points;
#                 the points at 16 and 64 sessions 3 times (interleaved
#                 repeats, medians), the others once; writes bench/SCALE.md
#                 and bench/scale.png (about 20 minutes on 2 CPUs)
#   --quick       development run: 1, 16 and 64 sessions, 3 s points, no
#                 repeat; its report, marked as such, stays in
#                 bench/out-scale/ (as does every run's raw data)
#   --seconds     the length of each point
#   --reps        the repeats of the 16- and 64-session points
#   --node-timeout  redlock.node_timeout in ms (default: the extension's
#                 default, as a user gets it: a round that runs out of it
#                 under load is an error of the point, counted)
#   --no-report   leave bench/SCALE.md and bench/scale.png alone
#   --set NAME=VALUE  a setting of the redlock cluster (repeatable), for
#                 experiments; the report lists it
#   --items LIST  the items to run, comma-separated (default: all)
#   --sessions LIST  the points, comma-separated numbers of sessions
#                 (default: as above); not the committed report either
#   --pg-config, --private-copy   which PostgreSQL installation to build,
#                 install and run in, or a private copy of it (bench/lib.sh)
#
# Set-up (as bench/targets.sh): 5 redis-server nodes on free loopback ports
# with AOF (appendfsync everysec), their epochs seeded (no restart
# quarantine to wait out); a cluster on a unix socket with redlock in
# shared_preload_libraries, fsync on, jit off, max_connections 300 (256
# sessions and spare), every other redlock setting at its default
# (redlock.max_connections_per_node 16); a second cluster with only
# bench/shared's module preloaded (the shared-connection floor, which
# replays the extension's scripts captured with MONITOR, bench/lib.sh);
# node-redlock 4.2 with ioredis from bench/node/package-lock.json (npm ci).
# Everything is stopped at the end (EXIT trap).
#
# The items of a point of N sessions (pgbench -n -M prepared -c N -j 2 -T
# SECONDS, each session on a resource of its own, :client_id, unless said):
#   rl2   redlock, two prepared statements per cycle, as drivers send them:
#           SELECT redlock_lock(r, 30000); SELECT redlock_unlock(r);
#   rl1   redlock, one function per cycle: SELECT bench_cycle(r)
#         (PL/pgSQL: redlock_try_lock(r, 30000), redlock_unlock(r), a
#         refusal an error; bench/targets.sh's)
#   node  node-redlock: N async workers sharing one Redlock (one ioredis
#         connection per node), each on its own resource, retryCount 0
#         (bench/node/bench.js workers)
#   sf    the floor of one shared connection per node (bench/shared, not
#         the extension): SELECT bench_sf_cycle(r), one call per cycle
#   sf2   the same floor in two prepared statements per cycle, as rl2:
#           SELECT bench_sf_lock(r); SELECT bench_sf_unlock(r);
#         (SQL functions the planner inlines: shared_floor_acquire and
#         shared_floor_release with the arguments bench_sf_cycle passes)
#   hot   redlock, all N sessions on one resource:
#           SELECT redlock_lock('hot', 5000, wait_ms => 20000);
#           SELECT redlock_unlock('hot');
#         (a wait that runs out is an error, 55P03)
#   adv   the same with pg_advisory_lock(1); pg_advisory_unlock(1)
# The hot and adv runs log every transaction (pgbench --log): lock + unlock
# latency p50, p99 and max, as the client saw it.
#
# For every run: cycles/s (pgbench's tps without connection time; node's
# cycles over its seconds), errors (pgbench's aborted clients and failed
# transactions, node-redlock's failed cycles), and the most connections to
# each node from the system measured: every ~100 ms, redis-cli -r -1 -i 0.1
# INFO clients on each node (one connection each, left out), less the
# connections other processes held to it when the run began (ss -tnp: the
# other cluster's, never this run's system's); the report shows the most
# on any node.  For redlock runs also redlock_dispatcher's counters (rounds
# on the shared and own connections, waits for a place).  The machine
# (nproc, CPU model) and its load (uptime before and after, and at the
# start of every repeat; the machine's busy share during every run) are in
# the report.  Raw data: bench/out-scale/.
set -euo pipefail

usage() {
	echo "usage: bash bench/scale.sh [--quick] [--seconds N] [--reps N] [--node-timeout MS] [--set NAME=VALUE] [--items LIST] [--sessions LIST] [--no-report] $BENCH_PG_OPTIONS" >&2
	exit 2
}

cd "$(dirname "$0")/.."
ROOT=$PWD
. "$ROOT/bench/lib.sh"
OUT=$ROOT/bench/out-scale
CMD="bash bench/scale.sh${*:+ $*}"
QUICK=0
REPORT=1
SECS='' REPS='' NODE_TIMEOUT='' SETS=() ONLY_ITEMS='' ONLY_SESSIONS=''
while [ $# -gt 0 ]; do
	if bench_pg_option "$@"; then shift "$BENCH_SHIFT"; continue; fi
	case "$1" in
	--quick) QUICK=1; shift ;;
	--no-report) REPORT=0; shift ;;
	--seconds) [ $# -ge 2 ] || usage; SECS=$2; shift 2 ;;
	--reps) [ $# -ge 2 ] || usage; REPS=$2; shift 2 ;;
	--node-timeout) [ $# -ge 2 ] || usage; NODE_TIMEOUT=$2; shift 2 ;;
	--set) [ $# -ge 2 ] && [[ $2 =~ ^[a-z_.]+=[^[:space:]]+$ ]] || usage; SETS+=("$2"); shift 2 ;;
	--items) [ $# -ge 2 ] && [[ $2 =~ ^(rl2|rl1|node|sf|sf2|hot|adv)(,(rl2|rl1|node|sf|sf2|hot|adv))*$ ]] || usage
		ONLY_ITEMS=$2; shift 2 ;;
	--sessions) [ $# -ge 2 ] && [[ $2 =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] || usage; ONLY_SESSIONS=$2; shift 2 ;;
	*) usage ;;
	esac
done
# an experiment (other settings, some items) is never the committed report
[ ${#SETS[@]} = 0 ] && [ -z "$ONLY_ITEMS" ] && [ -z "$ONLY_SESSIONS" ] || REPORT=0
if [ "$QUICK" = 1 ]; then
	SESSIONS=(1 16 64)
	: "${SECS:=3}" "${REPS:=1}"
	REPORT=0
else
	SESSIONS=(1 16 64 128 256)
	: "${SECS:=8}" "${REPS:=3}"
fi
[ -z "$ONLY_SESSIONS" ] || IFS=, read -r -a SESSIONS <<<"$ONLY_SESSIONS"
REP_AT=" 16 64 "	# the points repeated REPS times; the others run once
[[ $SECS =~ ^[0-9]+$ && $REPS =~ ^[0-9]+$ ]] && [ "$SECS" -ge 1 ] && [ "$REPS" -ge 1 ] || usage
[ -z "$NODE_TIMEOUT" ] || [[ $NODE_TIMEOUT =~ ^[0-9]+$ ]] || usage
ITEMS=(rl2 rl1 node sf sf2 hot adv)
[ -z "$ONLY_ITEMS" ] || IFS=, read -r -a ITEMS <<<"$ONLY_ITEMS"
TTL=30000
HOT_TTL=5000
HOT_WAIT=20000
MAXCONN=300
START_TS=$(date +%s)
DATE=$(date -u '+%Y-%m-%d %H:%M UTC')

bench_pg "$bench_pg_config" "$bench_private"
bench_need gawk redis-tools gnuplot-nox iproute2
bench_build

rm -rf "$OUT"
mkdir -p "$OUT"
echo "== floor client (bench/floor.c), the shared-connection floor (bench/shared), node-redlock (npm ci in bench/node)" >&2
bench_floor_build "$OUT"
bench_shared_build "$OUT"
bench_node_install "$OUT"

bench_workdir scale
echo "== 5 redis nodes (AOF everysec) on free loopback ports, two throwaway clusters" >&2
NODES=$(bench_nodes redis 5 --appendonly yes --appendfsync everysec)
bench_seed_epoch "$NODES"
PORTS=$(echo "$NODES" | tr ',' '\n' | sed 's/.*://')
P1=${PORTS%%$'\n'*}
bench_cluster pg shared_preload_libraries=redlock fsync=on jit=off max_connections=$MAXCONN \
	"redlock.nodes=$NODES" ${NODE_TIMEOUT:+redlock.node_timeout=${NODE_TIMEOUT}ms} "${SETS[@]}"
bench_use pg
export PGOPTIONS="-c jit=off"
PG_PM_PID=$(head -1 "$BENCH_WORK/pg/data/postmaster.pid")

q() { psql -X -q -v ON_ERROR_STOP=1 -At "$@"; }
log() { echo "-- $*" >&2; }

q <<SQL
CREATE EXTENSION redlock;
$(bench_cycle_sql "$TTL")
SQL
log "capturing the extension's commands for the floor (MONITOR on 127.0.0.1:$P1)"
bench_floor_capture "$OUT" "$P1" "$TTL"
bench_shared_floor "$OUT" "$NODES" "$TTL" fsync=on jit=off max_connections=$MAXCONN
SF_PM_PID=$(head -1 "$BENCH_WORK/sf/data/postmaster.pid")
NT_SHOWN=$(q -c 'SHOW redlock.node_timeout')
MCPN=$(q -c 'SHOW redlock.max_connections_per_node')

R="'o2:' || :run || ':' || :client_id"
printf '%s\n' "SELECT redlock_lock($R, $TTL);" "SELECT redlock_unlock($R);" > "$OUT/rl2.sql"
echo "SELECT bench_cycle('o1:' || :run || ':' || :client_id);" > "$OUT/rl1.sql"
echo "SELECT bench_sf_cycle('sf:' || :run || ':' || :client_id);" > "$OUT/sf.sql"
printf '%s\n' "SELECT bench_sf_lock('s2:' || :run || ':' || :client_id);" \
	"SELECT bench_sf_unlock('s2:' || :run || ':' || :client_id);" > "$OUT/sf2.sql"
printf '%s\n' "SELECT redlock_lock('hot:' || :run, $HOT_TTL, wait_ms => $HOT_WAIT);" \
	"SELECT redlock_unlock('hot:' || :run);" > "$OUT/hot.sql"
printf '%s\n' "SELECT pg_advisory_lock(1);" "SELECT pg_advisory_unlock(1);" > "$OUT/adv.sql"

# ---------------------------------------------------------------- connections
# others SYSTEM: "port count" for each node: the established connections to
# it now of processes that are not SYSTEM's (rl: the redlock cluster's
# processes, sf: the floor cluster's, anything else: none)
others() {
	local pids=''
	case $1 in
	rl) pids=$(pgrep -P "$PG_PM_PID" | tr '\n' ' ') ;;
	sf) pids=$(pgrep -P "$SF_PM_PID" | tr '\n' ' ') ;;
	esac
	ss -Htnp state established | awk -v ports="$(echo $PORTS)" -v pids=" $pids " '
		BEGIN { n = split(ports, p, " "); for (i = 1; i <= n; i++) c[p[i]] = 0 }
		{
			k = split($4, a, ":"); port = a[k]
			if (!(port in c)) next
			pid = ""
			if (match($0, /pid=[0-9]+/)) pid = substr($0, RSTART + 4, RLENGTH - 4)
			if (index(pids, " " pid " ") == 0) c[port]++
		}
		END { for (i = 1; i <= n; i++) print p[i], c[p[i]] }'
}
SAMPLERS=()
sample_start() {	# sample_start TAG: INFO clients on every node every 100 ms
	local p
	SAMPLERS=()
	for p in $PORTS; do
		redis-cli -p "$p" -r -1 -i 0.1 INFO clients > "$OUT/conn_$1_$p.txt" 2>/dev/null &
		SAMPLERS+=($!)
	done
}
sample_stop() {
	local s
	for s in "${SAMPLERS[@]}"; do kill "$s" 2>/dev/null || true; done
	for s in "${SAMPLERS[@]}"; do wait "$s" 2>/dev/null || true; done
	SAMPLERS=()
}
# conn_of TAG OTHERS-FILE: "most least samples": the most connections of
# the system seen on a node (the node it was most on), the same for the
# node it was least on, and the samples of the node with fewest
conn_of() {
	local p m o most=0 least=-1 ns=-1 s
	for p in $PORTS; do
		read -r m s < <(tr -d '\r' < "$OUT/conn_$1_$p.txt" |
			awk -F: '$1 == "connected_clients" { n++; if ($2 + 0 > m) m = $2 + 0 } END { print m + 0, n + 0 }')
		o=$(awk -v p="$p" '$1 == p { print $2 }' "$2")
		m=$((m - 1 - o))	# less the sampler's own connection and the others'
		[ "$m" -ge 0 ] || m=0
		[ "$m" -gt "$most" ] && most=$m
		{ [ "$least" -lt 0 ] || [ "$m" -lt "$least" ]; } && least=$m
		{ [ "$ns" -lt 0 ] || [ "$s" -lt "$ns" ]; } && ns=$s
	done
	echo "$most $least $ns"
}

# ---------------------------------------------------------------- the runs
RUNS=$OUT/runs.tsv	# one line a run, the columns of RUN_COLS
RUN_COLS="item sessions rep cycles_s cycles aborted failed error conn_most conn_least samples busy others p50_ms p99_ms max_ms rounds_shared rounds_own waits waits_failed redis_us server_us client_us disp_pct reads_cycle"
echo "$RUN_COLS" | tr ' ' '\t' > "$RUNS"
disp() { q -F' ' -c 'SELECT rounds_shared, rounds_own, connection_waits, connection_waits_failed FROM redlock_dispatcher'; }
# disp_cpu: the dispatcher's CPU jiffies so far, and the time (ns)
disp_cpu() {
	local pid
	pid=$(q -c "SELECT pid FROM pg_stat_activity WHERE backend_type = 'redlock dispatcher'")
	echo "$(awk '{ print $14 + $15 }' "/proc/$pid/stat" 2>/dev/null || echo -) $(date +%s%N)"
}
lat() {	# lat LOG-PREFIX: "p50 p99 max" (ms) of the transactions' latency (column 3, us) in pgbench's logs
	cat "$1".* 2>/dev/null | awk '$3 ~ /^[0-9]+$/ { print $3 }' | sort -n |
		awk '{ a[NR] = $1 } END {
			if (NR == 0) { print "- - -"; exit }
			printf "%.2f %.2f %.2f\n", a[int((NR - 1) * 0.50) + 1] / 1000, a[int((NR - 1) * 0.99) + 1] / 1000, a[NR] / 1000 }'
}

# client ITEM N TAG: the client of a run (pgbench, or node-redlock's node)
client() {
	local item=$1 n=$2 tag=$3
	if [ "$item" = node ]; then
		node bench/node/bench.js workers "$NODES" "node:$tag" "$n" "$SECS"
		return
	fi
	(
		case $item in sf|sf2) bench_use sf ;; esac
		case $item in hot|adv) set -- --log --log-prefix="$OUT/log_$tag" ;; *) set -- ;; esac
		exec pgbench -n -M prepared -c "$n" -j $((n < 2 ? 1 : 2)) -T "$SECS" -D "run=$tag" \
			-f "$OUT/$item.sql" "$@"
	)
}

# run ITEM N REP: one run, its line in RUNS
HZ=$(getconf CLK_TCK)
TIMEFORMAT='%3U %3S'
our_cpu() { bench_our_cpu redis "$PORTS" "$PG_PM_PID $SF_PM_PID"; }
# node_reads: the reads the 5 nodes made from their clients so far (INFO
# stats total_reads_processed): commands per read show how well the
# commands of many sessions travel together
node_reads() {
	local p n=0
	for p in $PORTS; do
		n=$((n + $(redis-cli -p "$p" INFO stats | tr -d '\r' | awk -F: '$1 == "total_reads_processed" { print $2 + 0 }')))
	done
	echo "$n"
}
run() {
	local item=$1 n=$2 rep=$3 tag="$1_$2_$3" sys=rl b0 t0 b1 t1 r0 p0 r1 p1 cu cs rc=0 d0 d1 oth
	local tps='-' cycles=0 aborted=0 failed=0 err='' conn='- - -' lats='- - -' dd='- - - -' cpu
	local dc0 dn0 dc1 dn1 dpct='-' nr0 nr1
	case $item in node) sys=node ;; sf|sf2) sys=sf ;; adv) sys=adv ;; esac
	log "$item, $n session(s), repeat $rep, ${SECS}s"
	others "$sys" > "$OUT/others_$tag.txt"
	[ "$sys" = rl ] && { d0=$(disp); read -r dc0 dn0 < <(disp_cpu); }
	[ "$sys" = adv ] || sample_start "$tag"
	read -r b0 t0 < <(bench_cpu_now)
	read -r r0 p0 < <(our_cpu)
	nr0=$(node_reads)
	{ time client "$item" "$n" "$tag" > "$OUT/$tag.out" 2> "$OUT/$tag.err" || rc=$?; } 2> "$OUT/$tag.time"
	read -r b1 t1 < <(bench_cpu_now)
	read -r r1 p1 < <(our_cpu)
	nr1=$(node_reads)
	read -r cu cs < "$OUT/$tag.time"
	# the share of all CPUs that processes other than this run's used: the
	# machine's busy jiffies less the nodes', the clusters' and the client's
	oth=$(awk -v b=$((b1 - b0)) -v t=$((t1 - t0)) -v o=$((r1 - r0 + p1 - p0)) -v u="$cu" -v s="$cs" -v hz="$HZ" \
		'BEGIN { x = t > 0 ? 100 * (b - o - (u + s) * hz) / t : 0; printf "%.0f", x < 0 ? 0 : x }')
	[ "$sys" = adv ] || { sample_stop; conn=$(conn_of "$tag" "$OUT/others_$tag.txt"); }
	if [ "$sys" = rl ]; then
		d1=$(disp)
		# the dispatcher's busy share of one CPU during the run
		read -r dc1 dn1 < <(disp_cpu)
		[ "$dc0" = - ] || [ "$dc1" = - ] ||
			dpct=$(awk -v j=$((dc1 - dc0)) -v ns=$((dn1 - dn0)) -v hz="$HZ" 'BEGIN { printf "%.0f", 100 * j / hz / (ns / 1e9) }')
		dd=$(paste -d' ' <(echo "$d1" | tr ' ' '\n') <(echo "$d0" | tr ' ' '\n') | awk '{ printf "%s%d", (NR > 1 ? " " : ""), $1 - $2 }')
	fi
	if [ "$item" = node ]; then
		tps=$(awk -F= '$1 == "cycles_per_s" { print $2 }' "$OUT/$tag.out")
		cycles=$(awk -F= '$1 == "cycles" { print $2 }' "$OUT/$tag.out")
		failed=$(awk -F= '$1 == "errors" { print $2 }' "$OUT/$tag.out")
		err=$(grep -m1 -v '^node-redlock: client error' "$OUT/$tag.err" || grep -m1 . "$OUT/$tag.err" || true)
	else
		tps=$(sed -n 's/^tps = \([0-9.]*\) .*/\1/p' "$OUT/$tag.out" | head -1)
		cycles=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$OUT/$tag.out")
		failed=$(sed -n 's/^number of failed transactions: \([0-9]*\).*/\1/p' "$OUT/$tag.out")
		aborted=$(grep -c 'aborted in command\|aborted while' "$OUT/$tag.err" || true)
		err=$(grep -m1 'ERROR\|FATAL\|error:' "$OUT/$tag.err" || true)
		case $item in hot|adv) lats=$(lat "$OUT/log_$tag"); rm -f "$OUT/log_$tag".* ;; esac
	fi
	[ -n "$tps" ] || tps='-'
	[ -n "$cycles" ] || cycles=0
	[ -n "$failed" ] || failed=0
	if [ "$rc" != 0 ] && [ -z "$err" ]; then err="exit status $rc"; fi
	err=$(echo "$err" | tr '\t' ' ' | sed 's/^pgbench: error: //; s/  */ /g' | cut -c1-200)
	# CPU per cycle (us): the 5 nodes', the clusters' (backends, workers,
	# postmasters), the client's (pgbench, or node)
	cpu=$(awk -v c="$cycles" -v r=$((r1 - r0)) -v p=$((p1 - p0)) -v u="$cu" -v s="$cs" -v hz="$HZ" \
		'BEGIN { if (c + 0 == 0) { print "- - -"; exit }
			printf "%.1f %.1f %.1f", r / hz * 1e6 / c, p / hz * 1e6 / c, (u + s) * 1e6 / c }')
	# shellcheck disable=SC2086	# conn, lats, dd and cpu are several columns each
	{ printf '%s\t' "$item" "$n" "$rep" "$tps" "$cycles" "$aborted" "$failed" "${err:--}" $conn \
		"$(bench_busy "$b0" "$t0" "$b1" "$t1")" "$oth" $lats $dd $cpu "$dpct" \
		"$(awk -v n=$((nr1 - nr0)) -v c="$cycles" 'BEGIN { if (c + 0 == 0) print "-"; else printf "%.2f", n / c }')"; echo; } | sed 's/\t$//' >> "$RUNS"
	if [ "$rc" != 0 ] || [ "$aborted" != 0 ] || [ "$failed" != 0 ]; then
		log "  $item at $n: exit $rc, $aborted aborted, $failed failed${err:+: $err}"
	fi
}

IDLE_BEFORE=$(bench_idle_busy)
UPTIME_BEFORE=$(bench_uptime)
: > "$OUT/uptime.txt"
for ((r = 1; r <= REPS; r++)); do
	echo "$r $(bench_uptime)" >> "$OUT/uptime.txt"
	for ((j = 0; j < ${#SESSIONS[@]}; j++)); do
		n=${SESSIONS[$j]}
		[ "$r" = 1 ] || [[ $REP_AT == *" $n "* ]] || continue
		for ((k = 0; k < ${#ITEMS[@]}; k++)); do	# the order rotated from point to point and repeat to repeat
			run "${ITEMS[$(((k + j + r - 1) % ${#ITEMS[@]}))]}" "$n" "$r"
		done
	done
done
IDLE_AFTER=$(bench_idle_busy)
UPTIME_AFTER=$(bench_uptime)

# ---------------------------------------------------------------- figures
col() { echo "$RUN_COLS" | tr ' ' '\n' | grep -nx "$1" | cut -d: -f1; }
vals() {	# vals ITEM N COLUMN: the column's value in every run of the point
	awk -F'\t' -v i="$1" -v n="$2" -v c="$(col "$3")" 'NR > 1 && $1 == i && $2 == n { print $c }' "$RUNS"
}
median() { grep -v '^-$' | sort -g | awk '{ a[NR] = $1 } END { if (NR == 0) print "-"; else print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
med() { vals "$@" | median; }
sum() { vals "$@" | awk '{ s += $1 } END { print s + 0 }'; }
most() { vals "$@" | grep -v '^-$' | sort -g | tail -1; }
per_rep() { vals "$@" | awk '{ printf "%s%s", (NR > 1 ? "/" : ""), ($1 == "-" ? "-" : sprintf("%.0f", $1)) }'; }
reps_n() { vals "$1" "$2" cycles_s | wc -l; }
fmt0() {	# a whole number with thousands separators, as the other reports
	awk -v x="$1" 'BEGIN { if (x == "-") { print x; exit } s = sprintf("%.0f", x)
		while (s ~ /[0-9][0-9][0-9][0-9]/) sub(/[0-9][0-9][0-9]($|,)/, ",&", s); print s }'
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "-" || b + 0 == 0) print "-"; else printf "%.2f", a / b }'; }
cell() {	# cell ITEM N: the median cycles/s, and each repeat's when repeated; † when an error ended clients or cycles
	local m e=''
	m=$(med "$1" "$2" cycles_s)
	[ "$(errs "$1" "$2")" = 0 ] || e=' †'
	if [ "$(reps_n "$1" "$2")" -gt 1 ]; then echo "$(fmt0 "$m") ($(per_rep "$1" "$2" cycles_s))$e"; else echo "$(fmt0 "$m")$e"; fi
}
errs() {	# errs ITEM N: the errors of the point's runs, all repeats
	local a f
	a=$(sum "$1" "$2" aborted); f=$(sum "$1" "$2" failed)
	if [ "$1" = node ]; then echo "$f"; else
		case "$a/$f" in 0/0) echo 0 ;; */0) echo "$a aborted" ;; 0/*) echo "$f failed" ;; *) echo "$a aborted, $f failed" ;; esac
	fi
}
for i in "${ITEMS[@]}"; do
	for n in "${SESSIONS[@]}"; do
		m=$(med "$i" "$n" cycles_s)
		[ "$m" = - ] || echo "$n $m"
	done > "$OUT/curve_$i.dat"
done
LOADAVG() { sed 's/.*load average: //' <<< "$1"; }

# ---------------------------------------------------------------- plot
if [ -z "$ONLY_ITEMS" ] && command -v gnuplot > /dev/null; then
	gnuplot <<-EOF
	set terminal pngcairo size 1200,600 font "DejaVu Sans,10"
	set output "$OUT/scale.png"
	set multiplot layout 1,2 title "lock + unlock cycles/s against sessions, 5 Redis nodes, $(nproc) CPUs for everything$([ "$QUICK" = 1 ] && echo ' (quick run)')"
	set logscale x 2
	set xrange [0.8:$((${SESSIONS[-1]} * 5 / 4))]
	set xtics ($(printf '%s,' "${SESSIONS[@]}" | sed 's/,$//'))
	set xlabel "sessions (pgbench clients, node-redlock workers)"
	set ylabel "cycles/s"
	set yrange [0:*]
	set grid
	set key below
	set title "each session its own resource"
	plot "$OUT/curve_rl2.dat" u 1:2 w lp lw 2 pt 7 lc 1 t "redlock, two prepared statements", \
	     "$OUT/curve_rl1.dat" u 1:2 w lp lw 2 pt 5 lc 7 t "redlock, one function", \
	     "$OUT/curve_node.dat" u 1:2 w lp lw 2 pt 9 lc 2 t "node-redlock 4.2, async workers", \
	     "$OUT/curve_sf2.dat" u 1:2 w lp lw 2 dt 3 pt 4 lc 0 t "floor, two statements (bench/shared)", \
	     "$OUT/curve_sf.dat" u 1:2 w lp lw 2 dt 2 pt 6 lc 0 t "floor, one function: one shared connection per node (bench/shared)"
	set title "one hot resource, two prepared statements"
	set ylabel "grants/s (log scale)"
	set logscale y
	set yrange [*:*]
	plot "$OUT/curve_hot.dat" u 1:2 w lp lw 2 pt 7 lc 1 t "redlock\\\\_lock(wait\\\\_ms), redlock\\\\_unlock", \
	     "$OUT/curve_adv.dat" u 1:2 w lp lw 2 pt 5 lc 3 t "pg\\\\_advisory\\\\_lock, pg\\\\_advisory\\\\_unlock"
	unset multiplot
	EOF
fi

# ---------------------------------------------------------------- report
sw() {
	echo "$(q -c 'SELECT version()' | cut -d, -f1), redlock $(q -c "SELECT extversion FROM pg_extension WHERE extname = 'redlock'") (commit $(git -C "$ROOT" rev-parse --short HEAD)$(git -C "$ROOT" diff --quiet HEAD -- src sql 2>/dev/null || echo ", src/ or sql/ modified")), $(redis-server --version | awk '{print $1, $2, $3}'), hiredis $(dpkg-query -W -f='${Version}' libhiredis-dev 2>/dev/null), node $(node --version), redlock $(node -p "require('./bench/node/node_modules/redlock/package.json').version") with ioredis $(node -p "require('./bench/node/node_modules/ioredis/package.json').version")"
}
REPORT_FILE=$OUT/SCALE.md
{
	echo "# The scale curve: 1 to ${SESSIONS[-1]} sessions (issue 30)"
	echo
	if [ "$QUICK" = 1 ]; then
		echo "**Not a result:** a development run (--quick): ${SECS} s points, no repeats."
		echo
	fi
	echo "| | |"
	echo "|---|---|"
	echo "| command | \`$CMD\` |"
	echo "| date | $DATE |"
	echo "| machine | $(nproc) CPUs ($(lscpu | sed -n 's/^Model name: *//p' | head -1)), $(free -g | awk '/^Mem:/ { print $2 }') GiB, kernel $(uname -r), $(. /etc/os-release; echo "$PRETTY_NAME"); the 5 nodes, PostgreSQL, pgbench and node all on it |"
	echo "| software | $(sw) |"
	echo "| setup | 5 redis-server nodes on free loopback ports, AOF with appendfsync everysec; one cluster on a unix socket, redlock in shared_preload_libraries, fsync=on, jit=off, max_connections=$MAXCONN, redlock.node_timeout=$NT_SHOWN$([ -z "$NODE_TIMEOUT" ] && echo ' (the default)'), redlock.max_connections_per_node=$MCPN$([ ${#SETS[@]} = 0 ] || printf ', %s' "${SETS[@]}"), every other setting at its default; a second cluster with only bench/shared's module preloaded, for the floor |"
	echo "| load | uptime before: \`$UPTIME_BEFORE\`; after: \`$UPTIME_AFTER\` (load average before and after: $(LOADAVG "$UPTIME_BEFORE"); $(LOADAVG "$UPTIME_AFTER")); the machine's CPUs ${IDLE_BEFORE}% busy over 3 s just before the runs, ${IDLE_AFTER}% just after; processes other than this benchmark's used $(awk -F'\t' -v c="$(col others)" 'NR > 1 { print $c }' "$RUNS" | median)% of all CPUs during a run (median), at most $(awk -F'\t' -v c="$(col others)" 'NR > 1 { print $c }' "$RUNS" | sort -g | tail -1)% |"
	echo "| points | ${SECS} s each; $(if [ "$REPS" -gt 1 ]; then echo "the points at 16 and 64 sessions $REPS times, interleaved (the order of the items rotated from point to point and repeat to repeat), their medians; the others once"; else echo "each once"; fi); run time of the whole command: RUNTIME s |"
	echo
	echo "## Own resources: lock + unlock cycles/s"
	echo
	echo "Each session (pgbench client, node-redlock worker) on a resource of its own."
	echo "Repeated points: the median, each repeat's in brackets; ratios are between medians."
	echo
	echo "| sessions | redlock, two statements | redlock, one function | node-redlock 4.2 | floor, two statements | floor, one function | two statements / node-redlock | one function / node-redlock | floor two / node-redlock | floor one / node-redlock |"
	echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
	for n in "${SESSIONS[@]}"; do
		nd=$(med node "$n" cycles_s)
		echo "| $n | $(cell rl2 "$n") | $(cell rl1 "$n") | $(cell node "$n") | $(cell sf2 "$n") | $(cell sf "$n") | $(ratio "$(med rl2 "$n" cycles_s)" "$nd") | $(ratio "$(med rl1 "$n" cycles_s)" "$nd") | $(ratio "$(med sf2 "$n" cycles_s)" "$nd") | $(ratio "$(med sf "$n" cycles_s)" "$nd") |"
	done
	echo
	echo "The floors (bench/shared): the same scripts through one shared connection per node,"
	echo "with nothing of the extension around them, in the same two patterns."
	echo
	echo "### CPU per cycle"
	echo
	echo "Microseconds of CPU per lock + unlock cycle (medians of the repeats): the 5 nodes',"
	echo "the PostgreSQL clusters' (backends, workers, postmasters), the client's (pgbench,"
	echo "or node-redlock's node), and their sum; for redlock also the dispatcher's busy share"
	echo "of one CPU during the run, and the reads the 5 nodes made from their clients per cycle"
	echo "(INFO stats total_reads_processed; a cycle sends 10 commands, 2 to each node: fewer"
	echo "reads, more commands per read). On $(nproc) CPUs shared by all of them, the sum bounds the cycles/s."
	echo
	echo "| sessions | item | nodes us | PostgreSQL us | client us | sum us | dispatcher % of a CPU | node reads per cycle |"
	echo "|---:|---|---:|---:|---:|---:|---:|---:|"
	for n in "${SESSIONS[@]}"; do
		for i in rl2 rl1 node sf2 sf; do
			[ "$(med "$i" "$n" cycles_s)" != - ] || continue
			local_r=$(med "$i" "$n" redis_us) local_p=$(med "$i" "$n" server_us) local_c=$(med "$i" "$n" client_us)
			echo "| $n | $i | $local_r | $(if [ "$i" = node ]; then echo -; else echo "$local_p"; fi) | $local_c | $(awk -v a="$local_r" -v b="$local_p" -v c="$local_c" -v i="$i" 'BEGIN { if (a == "-" || c == "-") print "-"; else printf "%.0f", a + (i == "node" ? 0 : b) + c }') | $(med "$i" "$n" disp_pct) | $(med "$i" "$n" reads_cycle) |"
		done
	done
	echo
	echo "†: errors during the point (see [Errors](#errors)): an error ends its pgbench client,"
	echo "and the cycles/s are those of the sessions that were left, fewer than the point's."
	echo
	echo "![cycles/s against sessions](scale.png)"
	echo
	echo "## One hot resource: redlock beside advisory locks"
	echo
	echo "Every session on one resource, two prepared statements per transaction:"
	echo "\`SELECT redlock_lock('hot', $HOT_TTL, wait_ms => $HOT_WAIT)\`, \`SELECT redlock_unlock('hot')\`, and"
	echo "\`SELECT pg_advisory_lock(1)\`, \`SELECT pg_advisory_unlock(1)\`. Lock + unlock is the"
	echo "transaction's latency in pgbench's per-transaction log (the lock's wait and both"
	echo "statements' round trips); repeated points: medians of the repeats' figures."
	echo
	echo "| sessions | redlock grants/s | lock + unlock p50 ms | p99 ms | max ms | advisory TPS | p50 ms | p99 ms | max ms | redlock / advisory TPS | redlock p99 / advisory p99 |"
	echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
	for n in "${SESSIONS[@]}"; do
		echo "| $n | $(cell hot "$n") | $(med hot "$n" p50_ms) | $(med hot "$n" p99_ms) | $(most hot "$n" max_ms) | $(cell adv "$n") | $(med adv "$n" p50_ms) | $(med adv "$n" p99_ms) | $(most adv "$n" max_ms) | $(ratio "$(med hot "$n" cycles_s)" "$(med adv "$n" cycles_s)") | $(ratio "$(med hot "$n" p99_ms)" "$(med adv "$n" p99_ms)") |"
	done
	echo
	echo "Max: the longest of all repeats. †: as above."
	echo
	echo "## Connections per node"
	echo
	echo "The most client connections of the system measured on any one node during a point"
	echo "(\`INFO clients\` every ~100 ms, less the sampler's own and other processes'), all"
	echo "repeats; in brackets the fewest such a most was (the node and repeat that saw fewest). redlock's bound:"
	echo "redlock.max_connections_per_node = $MCPN."
	echo
	echo "| sessions | redlock, two statements | redlock, one function | redlock, hot resource | node-redlock | floor, two statements | floor, one function |"
	echo "|---:|---:|---:|---:|---:|---:|---:|"
	for n in "${SESSIONS[@]}"; do
		printf '| %s |' "$n"
		for i in rl2 rl1 hot node sf2 sf; do printf ' %s (%s) |' "$(most "$i" "$n" conn_most)" "$(vals "$i" "$n" conn_least | sort -g | head -1)"; done
		echo
	done
	echo
	echo "## Errors"
	echo
	echo "pgbench: clients aborted (an error ends a client; pgbench goes on with the others)"
	echo "and failed transactions; node-redlock: failed cycles (retryCount 0); all repeats."
	echo
	echo "| sessions | redlock, two statements | redlock, one function | node-redlock | floor, two statements | floor, one function | redlock, hot resource | advisory, hot resource |"
	echo "|---:|---:|---:|---:|---:|---:|---:|---:|"
	for n in "${SESSIONS[@]}"; do
		echo "| $n | $(errs rl2 "$n") | $(errs rl1 "$n") | $(errs node "$n") | $(errs sf2 "$n") | $(errs sf "$n") | $(errs hot "$n") | $(errs adv "$n") |"
	done
	echo
	if awk -F'\t' 'NR > 1 && $8 != "-" { f = 1 } END { exit !f }' "$RUNS"; then
		echo "The first error of each run that had one:"
		echo
		awk -F'\t' 'NR > 1 && $8 != "-" { printf "- %s, %s sessions, repeat %s: `%s`\n", $1, $2, $3, $8 }' "$RUNS"
		echo
	fi
	echo "## Every run"
	echo
	echo "In the order of the items above; busy: the machine's busy share of all $(nproc) CPUs"
	echo "during the run, others: the share that processes other than the run's used (the"
	echo "machine's busy time less the nodes', the clusters' and the client's); rounds shared / own: rounds of the redlock cluster on the"
	echo "dispatcher's shared connections and on backends' own during the run, waits: calls"
	echo "that waited for a place (failed: 53300); connections: the most on the node that"
	echo "saw most, and on the one that saw fewest, over n samples each; CPU us per cycle: the"
	echo "nodes', the clusters', the client's; dispatcher: its busy share of one CPU."
	echo
	echo "| item | sessions | repeat | cycles/s | cycles | aborted | failed | connections (fewest) | samples | busy % | others % | p50 ms | p99 ms | max ms | rounds shared | rounds own | waits (failed) | CPU us: nodes, PostgreSQL, client | dispatcher % |"
	echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
	for i in "${ITEMS[@]}"; do
		awk -F'\t' -v i="$i" 'NR > 1 && $1 == i {
			printf "| %s | %s | %s | %s | %s | %s | %s | %s (%s) | %s | %s | %s | %s | %s | %s | %s | %s | %s (%s) | %s, %s, %s | %s |\n",
				$1, $2, $3, ($4 == "-" ? "-" : sprintf("%.0f", $4)), $5, $6, $7, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23, $24 }' "$RUNS" |
			sort -t'|' -k3,3n -k4,4n
	done
	echo
	echo "Machine load (uptime) at the start of each repeat:"
	echo
	while read -r r u; do echo "- repeat $r: \`$u\`"; done < "$OUT/uptime.txt"
	echo
	echo "Items: rl2 \`$(paste -sd' ' "$OUT/rl2.sql")\`; rl1 \`$(cat "$OUT/rl1.sql")\` (bench_cycle:"
	echo "redlock_try_lock(r, $TTL), redlock_unlock(r), in PL/pgSQL); node: bench/node/bench.js workers"
	echo "(N async workers sharing one Redlock, one ioredis connection per node, retryCount 0);"
	echo "sf: \`$(cat "$OUT/sf.sql")\` in the floor's cluster; sf2 there: \`$(paste -sd' ' "$OUT/sf2.sql")\`; hot \`$(paste -sd' ' "$OUT/hot.sql")\`;"
	echo "adv \`$(paste -sd' ' "$OUT/adv.sql")\`. pgbench: \`pgbench -n -M prepared -c N -j 2 -T $SECS\`"
	echo "(-j 1 for one session), hot and adv with --log."
} > "$REPORT_FILE"
sed -i "s/RUNTIME s/$(( $(date +%s) - START_TS )) s/" "$REPORT_FILE"

if [ "$REPORT" = 1 ]; then
	# keep the hand-written notes (from their marker on) of the last report
	if [ -f "$ROOT/bench/SCALE.md" ] && grep -q '^<!-- notes' "$ROOT/bench/SCALE.md"; then
		{ echo; sed -n '/^<!-- notes/,$p' "$ROOT/bench/SCALE.md"; } >> "$REPORT_FILE"
	fi
	cp "$REPORT_FILE" "$ROOT/bench/SCALE.md"
	[ -f "$OUT/scale.png" ] && cp "$OUT/scale.png" "$ROOT/bench/scale.png"
fi
cat "$REPORT_FILE"
