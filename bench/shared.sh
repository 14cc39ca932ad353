#!/usr/bin/env bash
# What a shared lease costs on one hot resource: 8 reader clients taking
# and releasing a shared lease on the same resource
# (redlock_lock_shared('hot', 5000) + redlock_unlock_shared('hot')) against
# the same readers on PostgreSQL's shared advisory lock of one key
# (pg_advisory_lock_shared(42) + pg_advisory_unlock_shared(42)),
# interleaved in one run on one build, one cluster and one set of nodes,
# so that the machine's load falls on both alike (issue 31, "Cost").
#
#   bash bench/shared.sh [--pg-config PATH] [--private-copy DIR]
#                        [--seconds N] [--reps N]
#
# Set-up: 5 redis-server nodes on free loopback ports with AOF (appendfsync
# everysec), their epochs old, a throwaway cluster with redlock preloaded,
# jit off, redlock.node_timeout 500 ms (on a shared 2-CPU machine a node
# stalled for 50 ms, the default, fails a call now and then, which ends
# pgbench's run).  Workload: pgbench -M prepared, two prepared statements
# per cycle, as drivers send them, 8 clients (-j 2).  Every repeat runs,
# in turn (the order of the two forms of a pair flips from one repeat to
# the next):
#   adv      8 readers, pg_advisory_lock_shared(42) + pg_advisory_unlock_shared(42)
#   rl       8 readers, redlock_lock_shared('hot', 5000) + redlock_unlock_shared('hot')
#   mix-adv  the 8 readers of adv, and beside them (a second pgbench,
#            started at the same time, for the same time) 1 writer,
#            pg_advisory_lock(42) + pg_advisory_unlock(42)
#   mix-rl   the 8 readers of rl, and 1 writer,
#            redlock_lock('hot', 5000, wait_ms => 10000) + redlock_unlock('hot')
# and once, after the middle repeat, beside its rl run:
#   own      rl's cycle with each of the 8 clients on a resource of its own
#            ('own:' || client_id): no other reader to share with
# Each run's cycle latency is pgbench's average and, from its --log, the
# p50 and p99 of its cycles; the writer's cycle is its wait for the lock
# plus its unlock (pgbench -r splits its average between the two
# statements); for the mixed runs also each side's slowest cycle and how
# many took over 100 ms.  Prints one line per run, then the medians over
# the repeats, the ratios redlock / advisory (of the medians, and of each
# repeat's two neighbouring runs), redlock_stats and the nodes' errors
# (redlock_stats_nodes) over the whole run, and the machine's load before
# and after.  Nothing is asserted about the times: a run fails only when a
# pgbench client fails, or when the check before the runs finds that two
# readers do not hold the resource together, or that a writer is not
# refused while they do.
set -euo pipefail

usage() {
	echo "usage: bash bench/shared.sh $BENCH_PG_OPTIONS [--seconds N] [--reps N]" >&2
	exit 2
}

top=$(cd "$(dirname "$0")/.." && pwd)
. "$top/bench/lib.sh"
BENCH_NAME=shared
CMD="bash bench/shared.sh${*:+ $*}"
SECS=4
REPS=7
READERS=8
while [ $# -gt 0 ]; do
	if bench_pg_option "$@"; then shift "$BENCH_SHIFT"; continue; fi
	case "$1" in
	--seconds) [ $# -ge 2 ] || usage; SECS=$2; shift 2 ;;
	--reps) [ $# -ge 2 ] || usage; REPS=$2; shift 2 ;;
	*) usage ;;
	esac
done
[[ $SECS =~ ^[1-9][0-9]*$ && $REPS =~ ^[1-9][0-9]*$ ]] || usage

bench_pg "$bench_pg_config" "$bench_private"
bench_build
bench_workdir shared
W=$BENCH_WORK
nodes=$(bench_nodes redis 5 --appendonly yes --appendfsync everysec)
bench_seed_epoch "$nodes"
bench_cluster pg "redlock.nodes=$nodes" shared_preload_libraries=redlock jit=off \
	redlock.node_timeout=500ms
bench_use pg
q() { psql -X -q -v ON_ERROR_STOP=1 -At "$@"; }
q -c 'CREATE EXTENSION redlock'

# Before any run: a second session is granted a shared lease on a resource
# a first one holds shared, and a third one is refused an exclusive lease
# on it (both run while the first session, idle, holds its lease), so the
# runs below measure readers holding together
check=$(q <<-'SQL'
SELECT redlock_lock_shared('check', 5000) IS NOT NULL \g /dev/null
\! psql -X -q -v ON_ERROR_STOP=1 -At -c "SELECT redlock_try_lock_shared('check', 5000) IS NOT NULL, redlock_unlock_shared('check')"
\! psql -X -q -v ON_ERROR_STOP=1 -At -c "SELECT redlock_try_lock('check', 5000) IS NULL"
SELECT redlock_unlock_shared('check');
SQL
)
if [ "$check" != "$(printf 't|t\nt\nt')" ]; then
	echo "shared: two readers of one resource did not hold it together: $check" >&2
	exit 1
fi

# ---------------------------------------------------------------- scripts
cat > "$W/adv.sql" <<'SQL'
SELECT pg_advisory_lock_shared(42);
SELECT pg_advisory_unlock_shared(42);
SQL
cat > "$W/rl.sql" <<'SQL'
SELECT redlock_lock_shared('hot', 5000);
SELECT redlock_unlock_shared('hot');
SQL
cat > "$W/own.sql" <<'SQL'
SELECT redlock_lock_shared('own:' || :client_id, 5000);
SELECT redlock_unlock_shared('own:' || :client_id);
SQL
cat > "$W/wadv.sql" <<'SQL'
SELECT pg_advisory_lock(42);
SELECT pg_advisory_unlock(42);
SQL
cat > "$W/wrl.sql" <<'SQL'
SELECT redlock_lock('hot', 5000, wait_ms => 10000);
SELECT redlock_unlock('hot');
SQL

# ---------------------------------------------------------------- measuring
# pgb NAME SCRIPT CLIENTS THREADS SECONDS: one pgbench run in $W/NAME/
# (its output in out, its per-cycle log in log.*); a failed client fails it
pgb() {
	local d=$W/$1
	rm -rf "$d"
	mkdir -p "$d"
	if ! (cd "$d" && pgbench -n -M prepared -r -c "$3" -j "$4" -T "$5" --log --log-prefix=log \
		-f "$W/$2.sql" > out 2>&1); then
		echo "shared: pgbench $2 ($1) failed:" >&2
		cat "$d/out" >&2
		return 1
	fi
}

# the figures of run NAME: "tps lat_avg_ms p50_ms p99_ms cycles"
figures() {
	local d=$W/$1 tps lat
	tps=$(awk '/^tps = / { print $3; exit }' "$d/out")
	lat=$(awk '/^latency average/ { print $4; exit }' "$d/out")
	# pgbench's log: client, cycle, latency in us, script, time...
	cat "$d"/log.* | awk '{ print $3 }' | sort -n | awk -v tps="$tps" -v lat="$lat" '
		{ v[NR] = $1 }
		END {
			if (NR == 0) { print tps, lat, "-", "-", 0; exit }
			i50 = int(NR * 0.50); if (i50 < NR * 0.50) i50++; if (i50 < 1) i50 = 1
			i99 = int(NR * 0.99); if (i99 < NR * 0.99) i99++; if (i99 < 1) i99 = 1
			printf "%s %s %.3f %.3f %d\n", tps, lat, v[i50] / 1000, v[i99] / 1000, NR
		}'
}

# the average latency (ms) of the statement of run NAME that begins with
# CALL, from pgbench -r
stmt_ms() {
	awk -v call="$2" '
		/^statement latencies/ { on = 1; next }
		on && index($0, call) { print $1; exit }' "$W/$1/out"
}

median() { tr ' ' '\n' | grep . | sort -g | awk '{ v[NR] = $1 } END { if (NR) print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }'; }

declare -A tps lat p50 p99 last_tps last_lat
declare -A mtps mrp99 wcyc wp50 wp99 wlock wunl rslows wslows
tps_ratios=
lat_ratios=
mix_ratios=

# pair RUN FORM: one readers-only run, and its line
pair() {
	local run=$1 form=$2 t l a b n
	pgb "$run" "$form" "$READERS" 2 "$SECS"
	read -r t l a b n < <(figures "$run")
	printf '%-8s %-8s %9.0f cycles/s  latency avg %s ms  p50 %s ms  p99 %s ms  (%d cycles)\n' \
		"rep $rep" "$form" "$t" "$l" "$a" "$b" "$n"
	tps[$form]+="$t "
	lat[$form]+="$l "
	p50[$form]+="$a "
	p99[$form]+="$b "
	last_tps[$form]=$t
	last_lat[$form]=$l
}

# mix FORM: the 8 readers of FORM and 1 writer, two pgbench side by side
mix() {
	local form=$1 rpid wpid rt rp99 n a b lk ul rmax rslow wmax wslow
	pgb "mix-$form-r" "$form" "$READERS" 2 "$SECS" & rpid=$!
	pgb "mix-$form-w" "w$form" 1 1 "$SECS" & wpid=$!
	wait "$rpid" || exit 1
	wait "$wpid" || exit 1
	read -r rt _ _ rp99 _ < <(figures "mix-$form-r")
	read -r _ _ a b n < <(figures "mix-$form-w")
	# slowest() NAME: the slowest cycle of run NAME (ms), and how many took over 100 ms
	slowest() { cat "$W/$1"/log.* | awk '{ if ($3 > max) max = $3; if ($3 > 100000) slow++ } END { printf "%.1f %d\n", max / 1000, slow }'; }
	read -r rmax rslow < <(slowest "mix-$form-r")
	read -r wmax wslow < <(slowest "mix-$form-w")
	if [ "$form" = adv ]; then
		lk=$(stmt_ms "mix-$form-w" "SELECT pg_advisory_lock(")
		ul=$(stmt_ms "mix-$form-w" "SELECT pg_advisory_unlock(")
	else
		lk=$(stmt_ms "mix-$form-w" "SELECT redlock_lock(")
		ul=$(stmt_ms "mix-$form-w" "SELECT redlock_unlock(")
	fi
	printf '%-8s %-8s readers %6.0f cycles/s, p99 %s ms, max %s ms, %d over 100 ms; writer %4d cycles, p50 %s ms, p99 %s ms, max %s ms, %d over 100 ms; lock avg %s ms, unlock avg %s ms\n' \
		"rep $rep" "mix-$form" "$rt" "$rp99" "$rmax" "$rslow" "$n" "$a" "$b" "$wmax" "$wslow" "$lk" "$ul"
	rslows[$form]+="$rslow "
	mrp99[$form]+="$rp99 "
	wslows[$form]+="$wslow "
	mtps[$form]+="$rt "
	wcyc[$form]+="$n "
	wp50[$form]+="$a "
	wp99[$form]+="$b "
	wlock[$form]+="$lk "
	wunl[$form]+="$ul "
	# every writer cycle of every repeat, for the pooled percentiles
	cat "$W/mix-$form-w"/log.* | awk '{ print $3 }' >> "$W/writer-$form.us"
}

commit=$(git -C "$top" rev-parse --short HEAD 2>/dev/null || echo '?')
dirty=$(git -C "$top" status --porcelain -- src sql Makefile bench/lib.sh bench/shared.sh 2>/dev/null | head -1)
echo "== $CMD"
echo "== $(date -u '+%Y-%m-%d %H:%M UTC'), commit $commit${dirty:+ (with uncommitted changes)}"
echo "== $(nproc) CPUs ($(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)), kernel $(uname -r)"
echo "== $(psql -X -At -c 'SELECT version()' | sed 's/ on .*//'), $(redis-server --version | awk '{ print $1, $2, $3 }')," \
	"hiredis $(dpkg-query -W -f='${Version}' libhiredis-dev 2>/dev/null || echo '?')"
echo "== other processes used $(bench_idle_busy) % of the CPUs over the 3 s before the runs"
echo "== load before: $(bench_uptime)"
echo "== $READERS reader clients, ${SECS} s per run, $REPS repeats, interleaved"

# warm-up: connections, prepared statements, scripts on the nodes (not reported)
pgb warm-adv adv "$READERS" 2 1
pgb warm-rl rl "$READERS" 2 1
pgb warm-w wrl 1 1 1

mid=$(( (REPS + 1) / 2 ))
for ((rep = 1; rep <= REPS; rep++)); do
	if ((rep % 2)); then order=(adv rl); else order=(rl adv); fi
	for form in "${order[@]}"; do
		pair "$form" "$form"
	done
	tps_ratios+="$(ratio "${last_tps[rl]}" "${last_tps[adv]}") "
	lat_ratios+="$(ratio "${last_lat[rl]}" "${last_lat[adv]}") "
	if ((rep == mid)); then
		pair own own
		own_neighbour=$(ratio "${last_tps[rl]}" "${last_tps[own]}")
	fi
	for form in "${order[@]}"; do
		mix "$form"
	done
	mix_ratios+="$(ratio "$(echo "${wp99[rl]}" | awk '{ print $NF }')" "$(echo "${wp99[adv]}" | awk '{ print $NF }')") "
done

pooled() {	# pooled P FILE: the P-th percentile (ms) of the latencies (us) in FILE
	sort -n "$2" | awk -v p="$1" '{ v[NR] = $1 } END { i = int(NR * p); if (i < NR * p) i++; if (i < 1) i = 1; if (NR) printf "%.3f", v[i] / 1000 }'
}
sum() { echo "$1" | tr ' ' '\n' | awk '{ t += $1 } END { print t + 0 }'; }
# m LIST [DIGITS]: the median of LIST, rounded to DIGITS decimals (3: ms)
m() { echo "$1" | median | awk -v d="${2:-3}" '{ printf "%.*f", d, $1 }'; }

adv_tps=$(m "${tps[adv]}" 0); rl_tps=$(m "${tps[rl]}" 0)
adv_lat=$(m "${lat[adv]}"); rl_lat=$(m "${lat[rl]}")
adv_p50=$(m "${p50[adv]}"); rl_p50=$(m "${p50[rl]}")
adv_p99=$(m "${p99[adv]}"); rl_p99=$(m "${p99[rl]}")
echo
echo "== 8 readers on one resource, medians of $REPS runs"
echo "| | pg_advisory_lock_shared | redlock_lock_shared | redlock / advisory |"
echo "|---|---:|---:|---:|"
echo "| cycles/s | $adv_tps | $rl_tps | $(ratio "$rl_tps" "$adv_tps") |"
echo "| cycle latency, average | $adv_lat ms | $rl_lat ms | $(ratio "$rl_lat" "$adv_lat") |"
echo "| cycle latency, p50 | $adv_p50 ms | $rl_p50 ms | $(ratio "$rl_p50" "$adv_p50") |"
echo "| cycle latency, p99 | $adv_p99 ms | $rl_p99 ms | $(ratio "$rl_p99" "$adv_p99") |"
echo "== redlock / advisory per repeat (neighbouring runs): cycles/s $tps_ratios; median $(m "$tps_ratios" 2);" \
	"latency $lat_ratios; median $(m "$lat_ratios" 2)"
echo "== one resource each (own, one run, after repeat $mid): $(m "${tps[own]}" 0) cycles/s, latency avg ${lat[own]% } ms," \
	"p50 ${p50[own]% } ms, p99 ${p99[own]% } ms; hot / own cycles/s: $(ratio "$rl_tps" "${tps[own]% }") with the median of the rl runs," \
	"$own_neighbour with repeat $mid's rl run"
echo
echo "== 8 readers and 1 writer on one resource, medians of $REPS runs (writer's cycle: its wait for the lock and its unlock)"
echo "| | advisory (shared + exclusive) | redlock (shared + exclusive) | redlock / advisory |"
echo "|---|---:|---:|---:|"
echo "| readers' cycles/s | $(m "${mtps[adv]}" 0) | $(m "${mtps[rl]}" 0) | $(ratio "$(m "${mtps[rl]}")" "$(m "${mtps[adv]}")") |"
echo "| writer's cycles per run ($SECS s) | $(m "${wcyc[adv]}" 0) | $(m "${wcyc[rl]}" 0) | $(ratio "$(m "${wcyc[rl]}")" "$(m "${wcyc[adv]}")") |"
echo "| readers' cycle p99 | $(m "${mrp99[adv]}") ms | $(m "${mrp99[rl]}") ms | $(ratio "$(m "${mrp99[rl]}")" "$(m "${mrp99[adv]}")") |"
echo "| readers' cycles over 100 ms, all repeats | $(sum "${rslows[adv]}") | $(sum "${rslows[rl]}") | |"
echo "| writer's cycle p50 | $(m "${wp50[adv]}") ms | $(m "${wp50[rl]}") ms | $(ratio "$(m "${wp50[rl]}")" "$(m "${wp50[adv]}")") |"
echo "| writer's cycle p99 | $(m "${wp99[adv]}") ms | $(m "${wp99[rl]}") ms | $(ratio "$(m "${wp99[rl]}")" "$(m "${wp99[adv]}")") |"
echo "| writer's cycle p99, all repeats' cycles pooled | $(pooled 0.99 "$W/writer-adv.us") ms | $(pooled 0.99 "$W/writer-rl.us") ms | $(ratio "$(pooled 0.99 "$W/writer-rl.us")" "$(pooled 0.99 "$W/writer-adv.us")") |"
echo "| writer's cycle max, all repeats | $(pooled 1 "$W/writer-adv.us") ms | $(pooled 1 "$W/writer-rl.us") ms | |"
echo "| writer's cycles over 100 ms, all repeats | $(sum "${wslows[adv]}") | $(sum "${wslows[rl]}") | |"
echo "| writer's lock statement, average (-r) | $(m "${wlock[adv]}") ms | $(m "${wlock[rl]}") ms | $(ratio "$(m "${wlock[rl]}")" "$(m "${wlock[adv]}")") |"
echo "| writer's unlock statement, average (-r) | $(m "${wunl[adv]}") ms | $(m "${wunl[rl]}") ms | $(ratio "$(m "${wunl[rl]}")" "$(m "${wunl[adv]}")") |"
echo "== writer's cycle p99, redlock / advisory per repeat: $mix_ratios; median $(m "$mix_ratios" 2)"
# what the runs asked of the nodes, and whether a node failed a request
# (a late answer is one past node_timeout, 500 ms): since the server started
echo "== redlock_stats since the start: $(q -F ' ' -c "SELECT format('acquires %s, attempts %s, grants %s, refused_held %s, refused_no_quorum %s, refused_timeout %s, refused_error %s, releases %s', sum(acquires), sum(attempts), sum(grants), sum(refused_held), sum(refused_no_quorum), sum(refused_timeout), sum(refused_error), sum(releases)) FROM redlock_stats")"
echo "== node errors since the start (redlock_stats_nodes, 5 nodes): $(q -F ' ' -c "SELECT format('requests %s, timeout %s, refused %s, redis %s, other %s', sum(requests), sum(errors_timeout), sum(errors_refused), sum(errors_redis), sum(errors_other)) FROM redlock_stats_nodes")"
echo "== load after: $(bench_uptime)"
