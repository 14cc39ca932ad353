#!/usr/bin/env bash
# Contention benchmark: redlock transaction leases on a few hot rows, side by
# side with pg_advisory_xact_lock, in one run.
#
#   bash bench/contention.sh [--pg-config PATH] [--private-copy DIR]
#                            [--seconds N] [--reps N] [--no-report]
#
# --pg-config     the PostgreSQL installation to build against, install into
#                 and run (default: Debian 12's PostgreSQL 15,
#                 /usr/lib/postgresql/15/bin/pg_config)
# --private-copy  first copy that installation (its bin/lib, share and
#                 include directories) under DIR, keeping their absolute
#                 paths (PostgreSQL finds its files relative to its
#                 binaries), and build, install and run there: the
#                 extension is never installed into the shared
#                 installation.  E.g. --private-copy /tmp/pgcopy
# --seconds       length of each contended pgbench run (default 20)
# --reps          interleaved repeats of every run (default 3)
# --no-report     leave bench/CONTENTION.md and the plot alone (raw data and
#                 the summary still go to bench/out-contention/)
#
# It installs nothing beyond test/install-deps.sh (the plot is drawn when
# gnuplot is installed: apt-get install gnuplot-nox), starts 5 Redis nodes
# on free loopback ports (test/redis-nodes.sh) and two throwaway clusters
# on unix sockets (test/pg-cluster.sh), both with synchronous_commit on:
#   lt    shared_preload_libraries = redlock: the lock table, waiters on
#         this server queue and are woken by the release (latch)
#   poll  without it: no lock table, every waiter polls the nodes every
#         redlock.retry_delay (200 ms) + up to redlock.retry_jitter (100 ms)
# and stops all of them at the end.
#
# Workloads (pgbench, -n -j 2):
#   adv   8 clients, 3 hot rows: BEGIN; pg_advisory_xact_lock(id);
#         UPDATE hot_adv; pg_sleep(0.002); COMMIT
#   lt / poll  the same with SELECT set_config('redlock.fence_token',
#         redlock_xact_lock('row:' || id)::text, true) and a table with a
#         redlock_fence() trigger
#   unc   redlock, 8 clients on 8 distinct rows (uncontended grants)
#   ho_*  2 clients, 1 resource, no UPDATE (no WAL flush at commit): the
#         handoff from one holder to the waiter
# Every transaction records when its lock statement started (t0), when the
# lock was granted (t1, clock_timestamp() right after the lock call in the
# same target list) and when its critical section ended (t2, just before
# COMMIT) in an unlogged table; the lock wait is t1 - t0, the handoff is
# t1 of a grant minus t2 of the previous holder of the same row when the
# new holder was already waiting then.
set -euo pipefail

usage() {
	echo "usage: bash bench/contention.sh [--pg-config PATH] [--private-copy DIR] [--seconds N] [--reps N] [--no-report]" >&2
	exit 2
}

CMD="bash bench/contention.sh${*:+ $*}"
pg_config=
private=
SECS=20
REPS=3
REPORT=1
while [ $# -gt 0 ]; do
	case "$1" in
	--pg-config) [ $# -ge 2 ] || usage; pg_config=$2; shift 2 ;;
	--pg-config=*) pg_config=${1#*=}; shift ;;
	--private-copy) [ $# -ge 2 ] || usage; private=$2; shift 2 ;;
	--private-copy=*) private=${1#*=}; shift ;;
	--seconds) [ $# -ge 2 ] || usage; SECS=$2; shift 2 ;;
	--reps) [ $# -ge 2 ] || usage; REPS=$2; shift 2 ;;
	--no-report) REPORT=0; shift ;;
	*) usage ;;
	esac
done
UNC_SECS=$(( SECS / 2 > 3 ? SECS / 2 : 3 ))
HO_SECS=$(( SECS / 2 > 3 ? SECS / 2 : 3 ))
RTT_N=2000
CLIENTS=8
HOT=3

top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
START_TS=$(date +%s)
DATE=$(date -u '+%Y-%m-%d %H:%M UTC')

. "$top/bench/lib.sh"
bench_pg "$pg_config" "$private"
bench_build

OUT=$top/bench/out-contention
rm -rf "$OUT"
mkdir -p "$OUT"
bench_workdir contention	# stops every cluster and node under it at exit
work=$BENCH_WORK

echo "== 5 Redis nodes, two clusters" >&2
NODES=$(bench_nodes redis 5)
PORTS=$(echo "$NODES" | tr ',' '\n' | sed 's/.*://')
common=(synchronous_commit=on fsync=on jit=off max_connections=40 "redlock.nodes=$NODES")
bench_cluster lt shared_preload_libraries=redlock "${common[@]}"
bench_cluster poll "${common[@]}"

# use CLUSTER: the environment of that cluster
use() { unset PGHOST PGPORT PGUSER PGDATABASE; . "$work/$1/env"; }
q() { psql -X -q -v ON_ERROR_STOP=1 -At "$@"; }
log() { echo "-- $*" >&2; }

for c in lt poll; do
	use $c
	q <<-SQL
	CREATE EXTENSION redlock;
	CREATE TABLE hot (id int PRIMARY KEY, v bigint NOT NULL DEFAULT 0, fence_token bigint);
	CREATE TRIGGER fence BEFORE UPDATE ON hot FOR EACH ROW EXECUTE FUNCTION redlock_fence();
	CREATE TABLE hot_adv (id int PRIMARY KEY, v bigint NOT NULL DEFAULT 0);
	INSERT INTO hot (id) SELECT generate_series(1, $CLIENTS);
	INSERT INTO hot_adv (id) SELECT generate_series(1, $CLIENTS);
	-- one row per transaction; unlogged: no WAL, the commit flushes no more than before
	CREATE UNLOGGED TABLE ev (run int, id int, pid int, t0 timestamptz, t1 timestamptz, t2 timestamptz);
	CREATE UNLOGGED TABLE rtt (run int, us float8);
	-- a majority round trip: uncontended redlock_try_lock, timed in the server
	CREATE FUNCTION rtt_loop(run int, n int) RETURNS void LANGUAGE plpgsql AS \$\$
	DECLARE t0 timestamptz; t1 timestamptz; tok bigint; d float8[] := '{}';
	BEGIN
		FOR i IN 1 - n / 10 .. n LOOP
			t0 := clock_timestamp();
			tok := redlock_try_lock('rtt:' || run || ':' || i);
			t1 := clock_timestamp();
			PERFORM redlock_unlock('rtt:' || run || ':' || i);
			IF i >= 1 THEN d := d || extract(epoch FROM t1 - t0) * 1e6; END IF;
		END LOOP;
		INSERT INTO rtt SELECT run, unnest(d);
	END \$\$;
	VACUUM ANALYZE;
	SQL
	[ "$(q -c "SELECT count(*) FROM pg_settings WHERE name = 'shared_preload_libraries' AND setting = 'redlock'")" = \
		"$([ $c = lt ] && echo 1 || echo 0)" ] || { echo "contention: cluster $c misconfigured" >&2; exit 1; }
done

# ---------------------------------------------------------------- scripts
LOCK_T0="set_config('bench.t0', statement_timestamp()::text, true)"
LOCK_T1="set_config('bench.t1', clock_timestamp()::text, true)"
ADV_LOCK="SELECT $LOCK_T0, pg_advisory_xact_lock(:id), $LOCK_T1;"
RL_LOCK="SELECT $LOCK_T0, set_config('redlock.fence_token', redlock_xact_lock('row:' || :id)::text, true), $LOCK_T1;"
SLEEP="INSERT INTO ev SELECT :run, :id, pg_backend_pid(), current_setting('bench.t0')::timestamptz, current_setting('bench.t1')::timestamptz, clock_timestamp() FROM (SELECT pg_sleep(0.002)) s;"
mk() {	# mk NAME ID-EXPR LOCK UPDATE
	{
		echo "\\set id $2"
		echo "BEGIN;"
		echo "$3"
		[ -n "$4" ] && echo "$4"
		echo "$SLEEP"
		echo "COMMIT;"
	} > "$OUT/$1.sql"
}
mk adv "random(1, $HOT)" "$ADV_LOCK" "UPDATE hot_adv SET v = v + 1 WHERE id = :id;"
mk rl "random(1, $HOT)" "$RL_LOCK" "UPDATE hot SET v = v + 1 WHERE id = :id;"
mk unc ":client_id + 1" "$RL_LOCK" "UPDATE hot SET v = v + 1 WHERE id = :id;"
mk ho_adv "1" "$ADV_LOCK" ""
mk ho_rl "1" "$RL_LOCK" ""

# ---------------------------------------------------------------- measuring
evals() {	# EVAL + EVALSHA calls summed over the 5 nodes
	local t=0 p n
	for p in $PORTS; do
		n=$(redis-cli -p "$p" INFO commandstats | tr -d '\r' |
			awk -F'[=,:]' '/^cmdstat_eval(sha)?:/ { s += $3 } END { print s + 0 }')
		t=$((t + n))
	done
	echo "$t"
}
cpu_now() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8, $2 + $3 + $4 + $5 + $6 + $7 + $8 }' /proc/stat; }
read -r b0 t0 < <(cpu_now); sleep 3; read -r b1 t1 < <(cpu_now)
IDLE_BUSY=$(awk -v b=$((b1 - b0)) -v t=$((t1 - t0)) 'BEGIN { printf "%.0f", 100 * b / t }')

RUNS=$OUT/runs.tsv	# run kind cluster rep clients secs tps evals busy%
: > "$RUNS"
run=0
bench() {	# bench KIND CLUSTER SCRIPT CLIENTS SECS REP
	local kind=$1 cl=$2 script=$3 clients=$4 secs=$5 rep=$6 e0 e1 tps b0 t0 b1 t1
	run=$((run + 1))
	use "$cl"
	log "run $run: $kind on $cl, $clients clients, ${secs}s (repeat $rep/$REPS)"
	e0=$(evals)
	read -r b0 t0 < <(cpu_now)
	pgbench -n -j 2 -c "$clients" -T "$secs" -D run=$run -f "$OUT/$script.sql" \
		> "$OUT/run$run.$kind.out" 2>&1 || { cat "$OUT/run$run.$kind.out" >&2; exit 1; }
	read -r b1 t1 < <(cpu_now)
	e1=$(evals)
	tps=$(sed -n 's/^tps = \([0-9.]*\) .*/\1/p' "$OUT/run$run.$kind.out" | head -1 | awk '{ printf "%.0f", $1 }')
	printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$run" "$kind" "$cl" "$rep" "$clients" "$secs" \
		"$tps" $((e1 - e0)) "$(awk -v b=$((b1 - b0)) -v t=$((t1 - t0)) 'BEGIN { printf "%.0f", 100 * b / t }')" >> "$RUNS"
}

for ((r = 1; r <= REPS; r++)); do
	bench adv lt adv $CLIENTS "$SECS" $r
	bench lt lt rl $CLIENTS "$SECS" $r
	bench poll poll rl $CLIENTS "$SECS" $r
	bench unc lt unc $CLIENTS "$UNC_SECS" $r
	bench ho_adv lt ho_adv 2 "$HO_SECS" $r
	bench ho_lt lt ho_rl 2 "$HO_SECS" $r
	bench ho_poll poll ho_rl 2 "$HO_SECS" $r
	use lt
	q -c "SELECT rtt_loop($r, $RTT_N)"
done

# ---------------------------------------------------------------- results
# both clusters' events into one table of the lt cluster
use poll
q -c "COPY ev TO STDOUT" > "$OUT/ev_poll.tsv"
use lt
q -c "COPY ev FROM STDIN" < "$OUT/ev_poll.tsv"
q <<SQL
CREATE TABLE runs (run int, kind text, cluster text, rep int, clients int, secs int, tps float8, evals bigint, busy int);
\copy runs FROM '$RUNS'
SQL
# per run: grants, wait p50/p99 (ms), evals per grant, handoff p50/p99 (ms)
# and how many; per-client spread (min/max transactions of one backend)
q -F $'\t' > "$OUT/per_run.tsv" <<'SQL'
WITH w AS (
	SELECT run, count(*) n,
		percentile_disc(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM t1 - t0) * 1000) w50,
		percentile_disc(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM t1 - t0) * 1000) w99,
		max(extract(epoch FROM t1 - t0) * 1000) wmax
	FROM ev GROUP BY run),
h AS (
	SELECT run,
		percentile_disc(0.5) WITHIN GROUP (ORDER BY ho) h50,
		percentile_disc(0.99) WITHIN GROUP (ORDER BY ho) h99, count(*) hn
	FROM (SELECT run, extract(epoch FROM t1 - lag(t2) OVER o) * 1000 ho,
			t0 < lag(t2) OVER o waiting
		FROM ev WINDOW o AS (PARTITION BY run, id ORDER BY t1)) x
	WHERE waiting GROUP BY run),
c AS (SELECT run, min(n) cmin, max(n) cmax FROM (SELECT run, pid, count(*) n FROM ev GROUP BY run, pid) y GROUP BY run)
SELECT r.run, r.kind, r.rep, r.tps, w.n, round(w.w50::numeric, 3), round(w.w99::numeric, 3),
	round(w.wmax::numeric, 1), round(r.evals::numeric / w.n, 2),
	round(h.h50::numeric, 3), round(h.h99::numeric, 3), coalesce(h.hn, 0), c.cmin, c.cmax, r.busy
FROM runs r JOIN w USING (run) LEFT JOIN h USING (run) JOIN c USING (run) ORDER BY r.run;
SQL
q -c "SELECT run, round(percentile_disc(0.5) WITHIN GROUP (ORDER BY us)::numeric, 0),
	round(percentile_disc(0.99) WITHIN GROUP (ORDER BY us)::numeric, 0) FROM rtt GROUP BY run ORDER BY run" \
	-F $'\t' > "$OUT/rtt.tsv"
# CDF of the lock wait, all repeats pooled
for k in adv lt poll; do
	q -F ' ' -c "SELECT w, (row_number() OVER (ORDER BY w))::float8 / count(*) OVER ()
		FROM (SELECT extract(epoch FROM t1 - t0) * 1000 w FROM ev JOIN runs USING (run) WHERE kind = '$k') x ORDER BY w" \
		> "$OUT/cdf_$k.dat"
done

# ---------------------------------------------------------------- report
median() { sort -g | awk '{a[NR]=$1} END {if (NR == 0) print "nan"; else print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
col() {	# col KIND COLUMN -> median over the repeats (per_run.tsv columns)
	awk -F'\t' -v k="$1" -v c="$2" '$2 == k && $c != "" { print $c }' "$OUT/per_run.tsv" | median
}
each() {	# each KIND COLUMN -> values per repeat, a/b/c
	awk -F'\t' -v k="$1" -v c="$2" '$2 == k { printf "%s%s", (n++ ? "/" : ""), $c }' "$OUT/per_run.tsv"
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b == 0) print "nan"; else printf "%.2f", a / b }'; }
verdict() { awk -v v="$1" -v op="$2" -v t="$3" 'BEGIN { ok = (op == "<=") ? v <= t : v >= t; print ok ? "**met**" : "**missed**" }'; }
# columns: 4 tps 5 grants 6 w50 7 w99 8 wmax 9 evals/grant 10 h50 11 h99 12 handoffs 13 cmin 14 cmax 15 busy
for k in adv lt poll unc ho_adv ho_lt ho_poll; do
	for c in 4 5 6 7 8 9 10 11 12 13 14 15; do
		eval "M_${k}_$c=\$(col $k $c)"
	done
done
RTT50=$(awk -F'\t' '{ print $2 }' "$OUT/rtt.tsv" | median)
RTT99=$(awk -F'\t' '{ print $3 }' "$OUT/rtt.tsv" | median)
R_TPS=$(ratio "$M_lt_4" "$M_adv_4")
R_W99=$(ratio "$M_lt_7" "$M_adv_7")
R_EV=$(ratio "$M_lt_9" "$M_unc_9")
HO_RTT=$(awk -v h="$M_ho_lt_10" -v r="$RTT50" 'BEGIN { printf "%.1f", h * 1000 / r }')
HO_EXTRA_RTT=$(awk -v h="$M_ho_lt_10" -v a="$M_ho_adv_10" -v r="$RTT50" 'BEGIN { printf "%.1f", (h - a) * 1000 / r }')
P_TPS=$(ratio "$M_poll_4" "$M_adv_4")
P_W99=$(ratio "$M_poll_7" "$M_adv_7")

row() {	# row LABEL KIND
	local k=$2 v
	printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$1" \
		"$(eval echo "\$M_${k}_4")" "$(each "$k" 4)" "$(eval echo "\$M_${k}_6")" \
		"$(eval echo "\$M_${k}_7")" "$(each "$k" 7)" "$(eval echo "\$M_${k}_8")" \
		"$(eval echo "\$M_${k}_9")" "$(eval echo "\$M_${k}_13")–$(eval echo "\$M_${k}_14")" \
		"$(eval echo "\$M_${k}_15")"
}
horow() {
	local k=$2
	printf '| %s | %s | %s | %s | %s | %s |\n' "$1" "$(eval echo "\$M_${k}_10")" "$(each "$k" 10)" \
		"$(eval echo "\$M_${k}_11")" "$(eval echo "\$M_${k}_12")" "$(eval echo "\$M_${k}_4")"
}

{
	echo "# Contention benchmark (\`$CMD\`)"
	echo
	echo "$DATE, $("$PG_CONFIG" --version), $(redis-server --version | awk '{print $1, $2, $3}'), $(nproc) CPUs"
	echo "(shared machine: ${IDLE_BUSY}% busy with other people's load just before the run)."
	echo "Every figure is the median of $REPS repeats, run interleaved in this one run"
	echo "(adv, lt, poll, unc, ho_adv, ho_lt, ho_poll, then again); ratios are between"
	echo "medians of this run. Raw data: \`bench/out-contention/\` (not committed)."
	echo
	echo "## Targets"
	echo
	echo "| target | measured | ratio | goal | verdict |"
	echo "|---|---|---:|---|---|"
	echo "| lock wait p99, redlock (lock table) vs advisory | $M_lt_7 ms vs $M_adv_7 ms | $R_W99 | <= 3 | $(verdict "$R_W99" '<=' 3) |"
	echo "| TPS, redlock (lock table) vs advisory | $M_lt_4 vs $M_adv_4 | $R_TPS | >= 0.5 | $(verdict "$R_TPS" '>=' 0.5) |"
	echo "| EVALs per grant, contended vs uncontended | $M_lt_9 vs $M_unc_9 | $R_EV | <= 1.5 | $(verdict "$R_EV" '<=' 1.5) |"
	echo "| handoff p50 (release to next grant, same server) in majority round trips | $M_ho_lt_10 ms, round trip $RTT50 us | $HO_RTT | <= 3 | $(verdict "$HO_RTT" '<=' 3) |"
	echo
	echo "For comparison, the polling waiters (no lock table): TPS $P_TPS x advisory, wait p99 $P_W99 x advisory."
	echo
	echo "## Hot rows: 8 clients, 3 rows, 2 ms critical section (\`pgbench -n -j 2 -c 8 -T $SECS\`)"
	echo
	echo "| workload | TPS | TPS per repeat | wait p50 ms | wait p99 ms | p99 per repeat | wait max ms | EVALs / grant | transactions per client (min–max) | CPU busy % |"
	echo "|---|---:|---|---:|---:|---|---:|---:|---|---:|"
	row "advisory: pg_advisory_xact_lock(id)" adv
	row "redlock, lock table (shared_preload_libraries = redlock)" lt
	row "redlock, polling (not preloaded: no lock table)" poll
	row "redlock, uncontended: 8 clients, 8 distinct rows (\`-T $UNC_SECS\`)" unc
	echo
	echo "The scripts are in \`bench/out-contention/{adv,rl,unc}.sql\`; each transaction is"
	echo
	echo '```sql'
	cat "$OUT/rl.sql"
	echo '```'
	echo
	echo "The lock wait is measured in the server: the lock statement evaluates"
	echo "\`statement_timestamp()\`, the lock call and \`clock_timestamp()\` left to right"
	echo "in one target list, and the critical-section statement stores both in an"
	echo "unlogged table (no WAL, so the commit flushes no more than the issue's"
	echo "transaction does). Wait = grant - start of the lock statement, every"
	echo "transaction of every repeat; p50/p99 per repeat, then the median of the repeats."
	echo "EVALs / grant: \`cmdstat_eval\` + \`cmdstat_evalsha\` calls summed over the 5"
	echo "nodes (INFO commandstats before and after the run) divided by the committed"
	echo "transactions. An uncontended grant is 5 acquire + 5 release EVALs."
	echo
	echo "## Handoff: 2 clients, 1 resource, 2 ms critical section, no UPDATE (\`-c 2 -T $HO_SECS\`)"
	echo
	echo "Handoff = grant of a waiter - end of the previous holder's critical section"
	echo "(\`clock_timestamp()\` in the statement before its COMMIT), for every grant whose"
	echo "waiter was already waiting then. It includes the holder's COMMIT round trip"
	echo "(pgbench to server), the commit itself (no WAL flush: nothing logged) and the"
	echo "release, so advisory's handoff is the floor."
	echo
	echo "| lock | handoff p50 ms | p50 per repeat | handoff p99 ms | handoffs (median per run) | TPS |"
	echo "|---|---:|---|---:|---:|---:|"
	horow "advisory" ho_adv
	horow "redlock, lock table" ho_lt
	horow "redlock, polling" ho_poll
	echo
	echo "Majority round trip: uncontended \`redlock_try_lock\` timed in the server"
	echo "($RTT_N calls per repeat, 5 nodes): p50 $RTT50 us, p99 $RTT99 us (per repeat:"
	echo "$(awk -F'\t' '{ printf "%s%s", (n++ ? "/" : ""), $2 }' "$OUT/rtt.tsv") us)."
	echo "Redlock's handoff p50 is $HO_RTT round trips; above advisory's it is $HO_EXTRA_RTT."
	echo
	echo "## Lock wait CDF"
	echo
	echo "![lock wait CDF](contention_cdf.png)"
	echo
	echo "All transactions of the hot-row runs, all repeats pooled."
	echo
	echo "## Every run"
	echo
	echo "| run | workload | repeat | TPS | transactions | wait p50 ms | wait p99 ms | wait max ms | EVALs / grant | handoff p50 ms | handoff p99 ms | handoffs | per client min | per client max | CPU busy % |"
	echo "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
	awk -F'\t' '{ printf "|"; for (i = 1; i <= NF; i++) printf " %s |", $i; print "" }' "$OUT/per_run.tsv"
	echo
	echo "Run time of the whole command: $(( $(date +%s) - START_TS )) s."
} > "$OUT/CONTENTION.md"

if command -v gnuplot > /dev/null; then
	gnuplot <<-EOF
	set terminal pngcairo size 900,560 font ",11"
	set output "$OUT/contention_cdf.png"
	set title "Lock wait, 8 clients on 3 hot rows, 2 ms critical section ($REPS x ${SECS} s each)"
	set xlabel "lock wait (ms, log scale)"
	set ylabel "fraction of transactions"
	set logscale x
	set xrange [0.01:*]
	set yrange [0:1]
	set grid
	set key bottom right
	plot "$OUT/cdf_adv.dat" using (\$1 < 0.01 ? 0.01 : \$1):2 with lines lw 2 title "pg\\\\_advisory\\\\_xact\\\\_lock", \
	     "$OUT/cdf_lt.dat" using (\$1 < 0.01 ? 0.01 : \$1):2 with lines lw 2 title "redlock, lock table (latch wake-up)", \
	     "$OUT/cdf_poll.dat" using (\$1 < 0.01 ? 0.01 : \$1):2 with lines lw 2 title "redlock, polling (retry\\\\_delay 200 ms)"
	EOF
else
	echo "contention: gnuplot not installed (apt-get install gnuplot-nox): no plot" >&2
fi

if [ "$REPORT" = 1 ]; then
	# keep the hand-written analysis (from its marker on) of the last report
	if [ -f "$top/bench/CONTENTION.md" ] && grep -q '^<!-- analysis' "$top/bench/CONTENTION.md"; then
		{ echo; sed -n '/^<!-- analysis/,$p' "$top/bench/CONTENTION.md"; } >> "$OUT/CONTENTION.md"
	fi
	cp "$OUT/CONTENTION.md" "$top/bench/CONTENTION.md"
	[ -f "$OUT/contention_cdf.png" ] && cp "$OUT/contention_cdf.png" "$top/bench/contention_cdf.png"
fi
cat "$OUT/CONTENTION.md"
