#!/usr/bin/env bash
# Where the time of an uncontended lock/unlock cycle goes (bench/PROFILE.md;
# not part of the timed runs):
#   bash bench/profile.sh [--reps N] [--cycles N] [--before REV]
#                         [--sections LETTERS] [--pg-config PATH] [--private-copy DIR]
#       -> bench/out/profile/*.txt, summary on stdout
# Needs linux-perf and strace (installed here if missing).  Builds and
# installs the extension into the PostgreSQL installation of --pg-config,
# or into a private copy of it (--private-copy DIR, see bench/lib.sh), and
# starts its own 5 redis nodes on free loopback ports (test/redis-nodes.sh,
# AOF with appendfsync everysec, as bench/targets.sh) and two throwaway
# clusters on unix sockets (test/pg-cluster.sh): lt with redlock in
# shared_preload_libraries (the lock table), np without.
#  F. the split of one cycle, REPS interleaved repeats of CYCLES cycles
#     (default 3 x 3000; on a busy machine rather more and shorter, e.g.
#     --reps 15 --cycles 600), each in an order rotated from the last: the floor client (bench/floor.c) with the
#     extension's own commands, and with a plain owner-checked GET + DEL
#     release instead of today's release script (sent as the extension
#     sends its own: by SHA1 when it does); redlock_try_lock and
#     redlock_unlock timed in the server on lt and on np; for each, the CPU
#     per cycle of the client (floor) or backend, and of the 5 redis-servers.
#     With --before REV (needs --private-copy DIR), the extension as it was
#     at git revision REV (e.g. main) is built into a second private copy
#     (DIR-before) and run in a third cluster, bt (preloaded, on the same
#     nodes), interleaved with the others: before and after in one run.
#  A. syscalls per cycle of one backend (strace -c over a 3000-cycle loop)
#  B. perf record -g of that backend over a 10000-cycle loop (cpu-clock)
#  C. perf record of one redis node over the same kind of loop
#  D. redis-server CPU per command: PING, SET, the extension's acquire
#     script, and its release script against a plain GET + DEL release
#     (each after a SET of the lock in the same script), sent by their text
#     (EVAL) and by their SHA1 (EVALSHA)
#  E. system-wide CPU by process during 16 pgbench clients on distinct resources
# (A to E on lt.)  --sections runs only some of them, e.g. --sections FD
# (default FABCDE).
set -eu

usage() {
	echo "usage: bash bench/profile.sh [--reps N] [--cycles N] [--before REV] [--sections LETTERS] $BENCH_PG_OPTIONS" >&2
	exit 2
}

cd "$(dirname "$0")/.."
ROOT=$PWD
. "$ROOT/bench/lib.sh"
P=$ROOT/bench/out/profile
REPS=3
CYCLES=3000
BEFORE=
SECTIONS=FABCDE
while [ $# -gt 0 ]; do
	if bench_pg_option "$@"; then shift "$BENCH_SHIFT"; continue; fi
	case "$1" in
	--sections) [ $# -ge 2 ] || usage; SECTIONS=$2; shift 2 ;;
	--before) [ $# -ge 2 ] || usage; BEFORE=$2; shift 2 ;;
	--reps) [ $# -ge 2 ] || usage; REPS=$2; shift 2 ;;
	--cycles) [ $# -ge 2 ] || usage; CYCLES=$2; shift 2 ;;
	*) usage ;;
	esac
done
[[ $REPS =~ ^[0-9]+$ && $CYCLES =~ ^[0-9]+$ && $SECTIONS =~ ^[A-F]+$ ]] && [ "$CYCLES" -ge 100 ] || usage
want() { [[ $SECTIONS == *$1* ]]; }
if [ -n "$BEFORE" ] && [ -z "$bench_private" ]; then
	echo "profile: --before needs --private-copy (the earlier build goes into a second copy)" >&2
	exit 2
fi

bench_pg "$bench_pg_config" "$bench_private"
bench_need linux-perf strace gawk redis-tools
bench_build
CLUSTERS="lt np"
if [ -n "$BEFORE" ]; then
	BEFORE_PG_CONFIG=$(bench_build_rev "$BEFORE" "${bench_private%/}-before")
	CLUSTERS="lt np bt"
fi
rm -rf "$P"; mkdir -p "$P"
bench_workdir profile
echo "== the machine was $(bench_idle_busy)% busy (all CPUs, $(nproc) CPUs) over 3 s, with none of this load" | tee "$P/idle_busy.txt"
echo "== uptime at the start: $(bench_uptime)" | tee -a "$P/idle_busy.txt"
NODES=$(bench_nodes redis 5 --appendonly yes --appendfsync everysec)
BASE=${NODES%%,*}; BASE=${BASE##*:}	# the node profiled in C and D, and captured
PORTS=$(echo "$NODES" | tr ',' '\n' | sed 's/.*://')
for c in $CLUSTERS; do
	pre=()
	[ $c = np ] || pre=(shared_preload_libraries=redlock)
	pgc=$PG_CONFIG
	[ $c = bt ] && pgc=$BEFORE_PG_CONFIG
	PG_CONFIG=$pgc bench_cluster $c "${pre[@]}" max_connections=100 jit=off fsync=on \
		"redlock.nodes=$NODES" redlock.node_timeout=500ms
done
export PGOPTIONS="-c jit=off"
TTL=30000

q() { psql -X -q -v ON_ERROR_STOP=1 -At "$@"; }
rpid() { bench_node_pid redis "$1"; }
for c in $CLUSTERS; do
	bench_use $c
	q <<SQL
CREATE EXTENSION redlock;
$(bench_loop_sql $TTL)
CREATE FUNCTION loop(n int, res text) RETURNS void LANGUAGE plpgsql AS \$\$
BEGIN
	FOR i IN 1 .. n LOOP
		PERFORM redlock_try_lock(res, $TTL);
		PERFORM redlock_unlock(res);
	END LOOP;
END \$\$;
CREATE FUNCTION bench_cycle(r text) RETURNS int LANGUAGE plpgsql AS \$\$
BEGIN
	IF redlock_try_lock(r, $TTL) IS NULL THEN RETURN 0; END IF;
	PERFORM redlock_unlock(r);
	RETURN 1;
END \$\$;
SQL
done

# the commands of one cycle (for F and D), captured from the extension
bench_floor_build "$P"
bench_use lt
bench_floor_capture "$P" "$BASE" "$TTL"
echo "acquire: $(bench_floor_describe "$P" acquire)" | tee "$P/floor_cmds_described.txt"
echo "release: $(bench_floor_describe "$P" release)" | tee -a "$P/floor_cmds_described.txt"
# the same acquire, and a plain owner-checked release of the same key
# (numkeys is argument 2 of the captured release; its key and value
# follow), sent as the extension sent its release: by its text (EVAL), or
# by its SHA1 (EVALSHA; loaded on every node first)
rel_arg() { "$P/floor" --arg "$P/floor_cmds.txt" release 0 "$1"; }
nk=$(rel_arg 2)
repr() { printf '"%s"' "$(printf '%s' "$1" | sed 's/\\/\\\\/g; s/"/\\"/g')"; }
PLAIN="if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0"
if [ "$(rel_arg 0 | tr 'a-z' 'A-Z')" = EVALSHA ]; then
	for p in $PORTS; do redis-cli -p "$p" SCRIPT LOAD "$PLAIN" > /dev/null; done
	plain_call="\"EVALSHA\" \"$(printf '%s' "$PLAIN" | sha1sum | cut -d' ' -f1)\""
else
	plain_call="\"EVAL\" $(repr "$PLAIN")"
fi
{
	grep '^acquire ' "$P/floor_cmds.txt"
	echo "release $plain_call \"1\" $(repr "$(rel_arg 3)") $(repr "$(rel_arg $((3 + nk)))")"
} > "$P/floor_plain_cmds.txt"

# F: the split of one cycle (the sections are not indented under their if)
if want F; then
echo "== F: one cycle, split: floor vs redlock, $REPS x $CYCLES cycles"
HZ=$(getconf CLK_TCK)
redis_cpu() { local t=0 p; for p in $PORTS; do t=$((t + $(awk '{ print $14 + $15 }' "/proc/$(rpid "$p")/stat"))); done; echo $t; }
cat > "$P/cpu_of.sh" <<'EOF2'
awk '{ print $14 + $15 }' "/proc/$1/stat"
EOF2
SPLIT=$P/split.kv
: > "$SPLIT"
TIMEFORMAT='%3U %3S'
FITEMS=(floor plain $CLUSTERS)
for ((r = 1; r <= REPS; r++)); do
	# in an order rotated from repeat to repeat
	for ((k = 0; k < ${#FITEMS[@]}; k++)); do
		what=${FITEMS[$(((k + r) % ${#FITEMS[@]}))]}
		r0=$(redis_cpu)
		case $what in
		floor|plain)
			f=$P/floor_cmds.txt; [ $what = plain ] && f=$P/floor_plain_cmds.txt
			{ time "$P/floor" "$NODES" "$f" "$CYCLES" $((CYCLES / 10)) "$BENCH_FLOOR_TOKEN" > "$P/f_${what}_$r.out"; } 2> "$P/f_${what}_$r.time"
			read -r cu cs < "$P/f_${what}_$r.time"
			echo "${what}_clientcpu_$r=$(awk -v u="$cu" -v s="$cs" -v n="$CYCLES" 'BEGIN { printf "%.1f", (u + s) * 1e6 / (n * 1.1) }')" >> "$SPLIT"
			;;
		lt|np|bt)
			bench_use $what
			q > "$P/f_${what}_$r.cpu" <<SQL
SELECT pg_backend_pid() AS pid \gset
SELECT bench_loop(0, 100, 0) \g /dev/null
\setenv BPID :pid
\! bash $P/cpu_of.sh \$BPID
SELECT bench_loop($r, $CYCLES, $((CYCLES / 10))) \g /dev/null
\! bash $P/cpu_of.sh \$BPID
SQL
			bench_loop_pct "$r" > "$P/f_${what}_$r.out"
			echo "${what}_clientcpu_$r=$(awk -v n="$CYCLES" -v hz="$HZ" 'NR == 1 { a = $1 } NR == 2 { printf "%.1f", ($1 - a) / hz * 1e6 / (n * 1.1) }' "$P/f_${what}_$r.cpu")" >> "$SPLIT"
			;;
		esac
		r1=$(redis_cpu)
		echo "${what}_rediscpu_$r=$(awk -v c=$((r1 - r0)) -v n="$CYCLES" -v hz="$HZ" 'BEGIN { printf "%.1f", c / hz * 1e6 / (n * 1.1) }')" >> "$SPLIT"
	done
done
fmed() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
fval() {	# fval WHAT KEY: median over the repeats
	local v=() r
	for ((r = 1; r <= REPS; r++)); do
		case $2 in
		*cpu) v+=("$(awk -F= -v k="${1}_${2}_$r" '$1 == k { print $2 }' "$SPLIT")") ;;
		*) v+=("$(awk -F= -v k="$2" '$1 == k { print $2 }' "$P/f_${1}_$r.out")") ;;
		esac
	done
	fmed "${v[@]}"
}
{
	echo "| | acquire p50 us | release p50 us | cycle p50 us | client/backend CPU us per cycle | 5 redis-servers CPU us per cycle |"
	echo "|---|---:|---:|---:|---:|---:|"
	for what in floor plain $CLUSTERS; do
		case $what in
		floor) d="floor client, the extension's commands" ;;
		plain) d="floor client, plain GET + DEL release" ;;
		lt) d="redlock, preloaded (lock table), timed in the server" ;;
		np) d="redlock, not preloaded, timed in the server" ;;
		bt) d="redlock at $BEFORE ($(git rev-parse --short "$BEFORE")), preloaded, timed in the server" ;;
		esac
		echo "| $d | $(fval $what acquire_p50) | $(fval $what release_p50) | $(fval $what cycle_p50) | $(fval $what clientcpu) | $(fval $what rediscpu) |"
	done
} | tee "$P/split.md"
fi
bench_use lt

# A: one session; warm up, then strace the backend over exactly 3000 cycles
if want A; then
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

fi

# B + C: perf record the backend and one redis node over 10000 cycles
if want B || want C; then
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

fi

# D: redis-server CPU per command (utime+stime of the node / commands),
# REPS repeats in an order rotated from repeat to repeat, medians
if want D; then
echo "== D: redis-server CPU per command (one node, redis-benchmark -c 1 -n 50000, $REPS repeats)"
acq_arg() { "$P/floor" --arg "$P/floor_cmds.txt" acquire 0 "$1"; }
ACQ=$(bench_src_script "$P" ACQUIRE_SCRIPT)
REL=$(bench_src_script "$P" RELEASE_SCRIPT)
SETL="redis.call('SET', KEYS[1], ARGV[1], 'PX', 30000)
"
hz=$(getconf CLK_TCK)
cpu_of() { awk '{ print $14 + $15 }' "/proc/$(rpid $BASE)/stat"; }
# dbench NAME SCRIPT|- OPTION|- ARGS...: redis-benchmark (with OPTION, e.g.
# -r N) of EVAL or EVALSHA of SCRIPT with ARGS (NAME ending in /sha: by
# its SHA1, loaded first; in /text: by its text), or of the command ARGS
dbench() {
	local name=$1 body=$2 opt=()
	[ "$3" = - ] || read -r -a opt <<< "$3"
	shift 3
	case $name in
	*/sha) redis-benchmark -p $BASE -c 1 -n 50000 -q "${opt[@]}" EVALSHA "$(redis-cli -p $BASE SCRIPT LOAD "$body")" "$@" ;;
	*/text) redis-benchmark -p $BASE -c 1 -n 50000 -q "${opt[@]}" EVAL "$body" "$@" ;;
	*) redis-benchmark -p $BASE -c 1 -n 50000 -q "${opt[@]}" "$@" ;;
	esac
}
DITEMS=(PING SET SET_ONLY/sha ACQUIRE/text ACQUIRE/sha SET+RELEASE/text SET+RELEASE/sha SET+PLAIN/text SET+PLAIN/sha)
: > "$P/redis_per_command.kv"
for ((r = 0; r < REPS; r++)); do
	for ((k = 0; k < ${#DITEMS[@]}; k++)); do
		what=${DITEMS[$(((k + r) % ${#DITEMS[@]}))]}
		c0=$(cpu_of); t0=$(date +%s%N)
		case $what in
		PING) dbench $what - "-t ping_mbulk" ;;
		SET) dbench $what - "-t set" ;;
		SET_ONLY/*) dbench $what "${SETL}return 0" - 1 "$(rel_arg 3)" "$(rel_arg $((3 + nk)))" ;;
		# a fresh lock every time (the counter is raised only the first time)
		ACQUIRE/*) dbench $what "$ACQ" "-r 100000000" 2 "$(acq_arg 3):__rand_int__" "$(acq_arg 4)" "$(acq_arg 5)" "$(acq_arg 6)" "$(acq_arg 7)" ;;
		SET+RELEASE/*) dbench $what "$SETL$REL" - 1 "$(rel_arg 3)" "$(rel_arg $((3 + nk)))" "$(rel_arg $((4 + nk)))" ;;
		SET+PLAIN/*) dbench $what "$SETL$PLAIN" - 1 "$(rel_arg 3)" "$(rel_arg $((3 + nk)))" ;;
		esac > /dev/null 2>&1
		c1=$(cpu_of); t1=$(date +%s%N)
		echo "$what $((c1 - c0)) $(((t1 - t0) / 1000))" >> "$P/redis_per_command.kv"
	done
done
for what in "${DITEMS[@]}"; do
	awk -v w=$what -v hz="$hz" '$1 == w { c[++n] = $2 / hz * 1e6 / 50000; t[n] = $3 / 50000 }
		END { asort(c); asort(t); m = int((n + 1) / 2)
			printf "%-17s redis CPU %.1f us/command, wall %.1f us/command (medians of %d)\n", w, c[m], t[m], n }' \
		"$P/redis_per_command.kv"
done | tee "$P/redis_per_command.txt"

fi

# E: 16 clients on distinct resources, system-wide CPU by process
if want E; then
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
fi
echo "== uptime at the end: $(bench_uptime)" | tee -a "$P/idle_busy.txt"
