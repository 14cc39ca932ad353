#!/usr/bin/env bash
# Contention benchmark: redlock transaction leases on a few hot rows, side by
# side with pg_advisory_xact_lock, in one run.
#
#   bash bench/contention.sh [--pg-config PATH] [--private-copy DIR]
#                            [--seconds N] [--reps N] [--no-report]
#                            [--servers | --no-servers]
#
# --pg-config, --private-copy   which PostgreSQL installation to build,
#                 install and run in, or a private copy of it (bench/lib.sh;
#                 e.g. --private-copy /tmp/pgcopy leaves the shared
#                 installation alone)
# --seconds       length of each contended pgbench run (default 20)
# --reps          interleaved repeats of every run (default 3)
# --no-report     leave bench/CONTENTION.md and the plot alone (raw data and
#                 the summary still go to bench/out-contention/)
# --servers       run only one hot resource on 1, 2 and 4 servers
#                 (bench/contention_servers.sh, 10 s runs unless --seconds,
#                 its report bench/CONTENTION_SERVERS.md), which otherwise
#                 runs after the runs below; --no-servers leaves it out
#
# It installs nothing beyond test/install-deps.sh (the plot is drawn when
# gnuplot is installed: apt-get install gnuplot-nox), starts 5 Redis nodes
# on free loopback ports (test/redis-nodes.sh) and three throwaway clusters
# on unix sockets (test/pg-cluster.sh), all with synchronous_commit on and
# redlock.nodes set to the same 5 nodes:
#   lt    shared_preload_libraries = redlock: the lock table, waiters on
#         this server queue and are woken by the release (latch)
#   b     the same, a second server: its waiters for a lease held on lt are
#         woken by the PUBLISH of the release, which its "redlock wake-up"
#         worker hears (and the other way round)
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
#   lt2   lt's workload with the clients split across two servers: 4 on lt
#         and 4 on b, two pgbench processes (-j 1 each) run side by side for
#         the same time; each server updates its own hot table, the leases
#         (and their tokens) on the 3 rows are shared through the nodes
#   unc   redlock, 8 clients on 8 distinct rows (uncontended grants)
#   ho_*  2 clients, 1 resource, no UPDATE: the handoff from one holder to
#         the waiter, with session locks released by an explicit unlock
#         (pg_advisory_unlock, redlock_unlock); ho_lt2 has one client on
#         lt and one on b, so every handoff crosses servers
# Every transaction records when its lock statement started (t0), when the
# lock was granted (t1, clock_timestamp() right after the lock call in the
# same target list) and when its critical section ended (t2: just before
# COMMIT; in the ho_* runs, just before the unlock call in its target list)
# in an unlogged table; the lock wait is t1 - t0, the handoff is t1 of a
# grant minus t2 of the previous holder of the same row when the new holder
# was already waiting then: release to grant.  The two servers of lt2/ho_lt2 run on
# this machine and read the same clock, so their events are merged into one
# run: TPS is the sum of the two pgbench runs, the percentiles are over the
# transactions of both, EVALs per grant over the grants of both.
set -euo pipefail

usage() {
	echo "usage: bash bench/contention.sh $BENCH_PG_OPTIONS [--seconds N] [--reps N] [--no-report]" >&2
	exit 2
}

top=$(cd "$(dirname "$0")/.." && pwd)
. "$top/bench/lib.sh"
CMD="bash bench/contention.sh${*:+ $*}"
SECS=20
REPS=3
REPORT=1
SERVERS=1
SERVERS_ARGS=()
while [ $# -gt 0 ]; do
	if bench_pg_option "$@"; then SERVERS_ARGS+=("${@:1:$BENCH_SHIFT}"); shift "$BENCH_SHIFT"; continue; fi
	case "$1" in
	--seconds) [ $# -ge 2 ] || usage; SECS=$2; SERVERS_ARGS+=(--seconds "$2"); shift 2 ;;
	--reps) [ $# -ge 2 ] || usage; REPS=$2; SERVERS_ARGS+=(--reps "$2"); shift 2 ;;
	--no-report) REPORT=0; SERVERS_ARGS+=(--no-report); shift ;;
	--servers) SERVERS=only; shift ;;
	--no-servers) SERVERS=0; shift ;;
	*) usage ;;
	esac
done
if [ "$SERVERS" = only ]; then
	exec bash "$(dirname "$0")/contention_servers.sh" "${SERVERS_ARGS[@]}"
fi
UNC_SECS=$(( SECS / 2 > 3 ? SECS / 2 : 3 ))
HO_SECS=$(( SECS / 2 > 3 ? SECS / 2 : 3 ))
RTT_N=2000
CLIENTS=8
HOT=3

cd "$top"
START_TS=$(date +%s)
DATE=$(date -u '+%Y-%m-%d %H:%M UTC')

bench_pg "$bench_pg_config" "$bench_private"
bench_build

OUT=$top/bench/out-contention
rm -rf "$OUT"
mkdir -p "$OUT"
bench_workdir contention	# stops every cluster and node under it at exit

echo "== 5 Redis nodes, three clusters" >&2
NODES=$(bench_nodes redis 5)
bench_seed_epoch "$NODES"
PORTS=$(echo "$NODES" | tr ',' '\n' | sed 's/.*://')
# node_timeout 500 ms instead of 50: on a shared 2-core machine a node
# kept off the CPU for 50 ms would abort a pgbench client; it changes no
# round that gets its answers
common=(synchronous_commit=on fsync=on jit=off max_connections=40 "redlock.nodes=$NODES"
	redlock.node_timeout=500ms)
bench_cluster lt shared_preload_libraries=redlock "${common[@]}"
bench_cluster b shared_preload_libraries=redlock "${common[@]}"
bench_cluster poll "${common[@]}"

use() { bench_use "$1"; }
q() { psql -X -q -v ON_ERROR_STOP=1 -At "$@"; }
log() { echo "-- $*" >&2; }

for c in lt b poll; do
	use $c
	q <<-SQL
	CREATE EXTENSION redlock;
	CREATE TABLE hot (id int PRIMARY KEY, v bigint NOT NULL DEFAULT 0, fence_token bigint);
	CREATE TRIGGER fence BEFORE UPDATE ON hot FOR EACH ROW EXECUTE FUNCTION redlock_fence();
	CREATE TABLE hot_adv (id int PRIMARY KEY, v bigint NOT NULL DEFAULT 0);
	INSERT INTO hot (id) SELECT generate_series(1, $CLIENTS);
	INSERT INTO hot_adv (id) SELECT generate_series(1, $CLIENTS);
	-- one row per transaction; unlogged: no WAL, the commit flushes no more than before;
	-- srv: the server (the scripts leave it to its default)
	CREATE UNLOGGED TABLE ev (run int, id int, pid int, t0 timestamptz, t1 timestamptz, t2 timestamptz,
		srv text DEFAULT '$c');
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
		"$([ $c = poll ] && echo 0 || echo 1)" ] || { echo "contention: cluster $c misconfigured" >&2; exit 1; }
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
# the handoff runs release explicitly: t2 is taken in the target list of
# the unlock call, just before it, so a handoff is release to grant
HO_ADV_LOCK="SELECT $LOCK_T0, pg_advisory_lock(:id), $LOCK_T1;"
HO_RL_LOCK="SELECT $LOCK_T0, redlock_lock('row:' || :id), $LOCK_T1;"
HO_T2="set_config('bench.t2', clock_timestamp()::text, true)"
HO_EV="INSERT INTO ev SELECT :run, :id, pg_backend_pid(), current_setting('bench.t0')::timestamptz, current_setting('bench.t1')::timestamptz, current_setting('bench.t2')::timestamptz;"
mkho() {	# mkho NAME LOCK UNLOCK-CALL
	{
		echo "\\set id 1"
		echo "BEGIN;"
		echo "$2"
		echo "SELECT pg_sleep(0.002);"
		echo "SELECT $HO_T2, $3;"
		echo "$HO_EV"
		echo "COMMIT;"
	} > "$OUT/$1.sql"
}
mkho ho_adv "$HO_ADV_LOCK" "pg_advisory_unlock(:id)"
mkho ho_rl "$HO_RL_LOCK" "redlock_unlock('row:' || :id)"

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
rounds() {	# Redlock rounds (acquire attempts) summed over the clusters; "" without the lock table
	local c t=0
	for c in "$@"; do
		[ "$c" = poll ] && return 0
		t=$((t + $(use "$c"; q -c "SELECT coalesce(sum(attempts), 0) FROM redlock_stats")))
	done
	echo "$t"
}
cpu_now() { bench_cpu_now; }
IDLE_BUSY=$(bench_idle_busy)
UPTIME_BEFORE=$(bench_uptime)

RUNS=$OUT/runs.tsv	# run kind cluster rep clients secs tps evals busy% rounds
: > "$RUNS"
run=0
# bench KIND CLUSTERS SCRIPT CLIENTS SECS REP: CLUSTERS is one cluster, or
# two ("lt b") that share the clients and the 2 pgbench threads evenly, one
# pgbench process each, started together for the same time
bench() {
	local kind=$1 cls=($2) script=$3 clients=$4 secs=$5 rep=$6 e0 e1 r0 r1 tps b0 t0 b1 t1 i
	local n=${#cls[@]} outs=() pids=()
	run=$((run + 1))
	log "run $run: $kind on ${2// /+}, $clients clients, ${secs}s (repeat $rep/$REPS)"
	for ((i = 0; i < n; i++)); do
		if [ "$n" -gt 1 ]; then outs+=("$OUT/run$run.$kind.${cls[$i]}.out"); else outs+=("$OUT/run$run.$kind.out"); fi
	done
	r0=$(rounds "${cls[@]}")
	e0=$(evals)
	read -r b0 t0 < <(cpu_now)
	for ((i = 0; i < n; i++)); do
		(use "${cls[$i]}"; exec pgbench -n -j $((2 / n)) -c $((clients / n)) -T "$secs" -D run=$run \
			-f "$OUT/$script.sql") > "${outs[$i]}" 2>&1 &
		pids+=($!)
	done
	for ((i = 0; i < n; i++)); do
		wait "${pids[$i]}" || { cat "${outs[$i]}" >&2; exit 1; }
	done
	read -r b1 t1 < <(cpu_now)
	e1=$(evals)
	r1=$(rounds "${cls[@]}")
	tps=$(for o in "${outs[@]}"; do sed -n 's/^tps = \([0-9.]*\) .*/\1/p' "$o" | head -1; done |
		awk '{ s += $1 } END { printf "%.0f", s }')
	printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$run" "$kind" "${2// /+}" "$rep" "$clients" "$secs" \
		"$tps" $((e1 - e0)) "$(awk -v b=$((b1 - b0)) -v t=$((t1 - t0)) 'BEGIN { printf "%.0f", 100 * b / t }')" \
		"${r0:+$((r1 - r0))}" >> "$RUNS"
}

for ((r = 1; r <= REPS; r++)); do
	bench adv lt adv $CLIENTS "$SECS" $r
	bench lt lt rl $CLIENTS "$SECS" $r
	bench lt2 "lt b" rl $CLIENTS "$SECS" $r
	bench poll poll rl $CLIENTS "$SECS" $r
	bench unc lt unc $CLIENTS "$UNC_SECS" $r
	bench ho_adv lt ho_adv 2 "$HO_SECS" $r
	bench ho_lt lt ho_rl 2 "$HO_SECS" $r
	bench ho_lt2 "lt b" ho_rl 2 "$HO_SECS" $r
	bench ho_poll poll ho_rl 2 "$HO_SECS" $r
	use lt
	q -c "SELECT rtt_loop($r, $RTT_N)"
done

# ---------------------------------------------------------------- results
# all clusters' events into one table of the lt cluster
for c in b poll; do
	use $c
	q -c "COPY ev TO STDOUT" > "$OUT/ev_$c.tsv"
done
use lt
cat "$OUT/ev_b.tsv" "$OUT/ev_poll.tsv" | q -c "COPY ev FROM STDIN"
q <<SQL
CREATE TABLE runs (run int, kind text, cluster text, rep int, clients int, secs int, tps float8, evals bigint, busy int,
	rounds bigint);
\copy runs FROM '$RUNS' WITH (NULL '')
SQL
# per run: grants, wait p50/p99 (ms), evals per grant, handoff p50/p99 (ms)
# and how many; per-client spread (min/max transactions of one backend);
# two servers: the share of grants that follow a holder on the other server,
# and the p50 of those handoffs (the lease changes server) alone; Redlock
# rounds per grant (redlock_stats.attempts; not without the lock table)
q -F $'\t' > "$OUT/per_run.tsv" <<'SQL'
WITH w AS (
	SELECT run, count(*) n,
		percentile_disc(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM t1 - t0) * 1000) w50,
		percentile_disc(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM t1 - t0) * 1000) w99,
		max(extract(epoch FROM t1 - t0) * 1000) wmax
	FROM ev GROUP BY run),
g AS (
	SELECT run, srv, extract(epoch FROM t1 - lag(t2) OVER o) * 1000 ho,
		t0 < lag(t2) OVER o waiting, srv <> lag(srv) OVER o switched
	FROM ev WINDOW o AS (PARTITION BY run, id ORDER BY t1)),
h AS (
	SELECT run,
		percentile_disc(0.5) WITHIN GROUP (ORDER BY ho) h50,
		percentile_disc(0.99) WITHIN GROUP (ORDER BY ho) h99, count(*) hn,
		percentile_disc(0.5) WITHIN GROUP (ORDER BY ho) FILTER (WHERE switched) x50
	FROM g WHERE waiting GROUP BY run),
s AS (SELECT run, round(100.0 * count(*) FILTER (WHERE switched) / count(switched)) sw
	FROM g GROUP BY run HAVING count(DISTINCT srv) > 1),
c AS (SELECT run, min(n) cmin, max(n) cmax FROM (SELECT run, pid, count(*) n FROM ev GROUP BY run, pid) y GROUP BY run)
SELECT r.run, r.kind, r.rep, r.tps, w.n, round(w.w50::numeric, 3), round(w.w99::numeric, 3),
	round(w.wmax::numeric, 1), round(r.evals::numeric / w.n, 2),
	round(h.h50::numeric, 3), round(h.h99::numeric, 3), coalesce(h.hn, 0), c.cmin, c.cmax, r.busy,
	s.sw, CASE WHEN s.run IS NOT NULL THEN round(h.x50::numeric, 3) END, round(r.rounds::numeric / w.n, 2)
FROM runs r JOIN w USING (run) LEFT JOIN h USING (run) JOIN c USING (run) LEFT JOIN s USING (run)
ORDER BY r.run;
SQL
q -c "SELECT run, round(percentile_disc(0.5) WITHIN GROUP (ORDER BY us)::numeric, 0),
	round(percentile_disc(0.99) WITHIN GROUP (ORDER BY us)::numeric, 0) FROM rtt GROUP BY run ORDER BY run" \
	-F $'\t' > "$OUT/rtt.tsv"
# two servers: transactions committed on each, lt/b per repeat
q -c "SELECT kind, string_agg(n, ' ' ORDER BY run) FROM (SELECT run, kind, count(*) FILTER (WHERE srv = 'lt') || '/' ||
	count(*) FILTER (WHERE srv = 'b') n FROM ev JOIN runs USING (run) WHERE cluster = 'lt+b' GROUP BY run, kind) x GROUP BY kind" \
	-F $'\t' > "$OUT/split.tsv"
# CDF of the lock wait, all repeats pooled
for k in adv lt lt2 poll; do
	q -F ' ' -c "SELECT w, (row_number() OVER (ORDER BY w))::float8 / count(*) OVER ()
		FROM (SELECT extract(epoch FROM t1 - t0) * 1000 w FROM ev JOIN runs USING (run) WHERE kind = '$k') x ORDER BY w" \
		> "$OUT/cdf_$k.dat"
done

# ---------------------------------------------------------------- report
median() { sort -g | awk '{a[NR]=$1} END {if (NR == 0) print "–"; else print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
col() {	# col KIND COLUMN -> median over the repeats (per_run.tsv columns)
	awk -F'\t' -v k="$1" -v c="$2" '$2 == k && $c != "" { print $c }' "$OUT/per_run.tsv" | median
}
each() {	# each KIND COLUMN -> values per repeat, a/b/c
	awk -F'\t' -v k="$1" -v c="$2" '$2 == k { printf "%s%s", (n++ ? "/" : ""), $c }' "$OUT/per_run.tsv"
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b == 0) print "nan"; else printf "%.2f", a / b }'; }
verdict() { awk -v v="$1" -v op="$2" -v t="$3" 'BEGIN { ok = (op == "<=") ? v <= t : v >= t; print ok ? "**met**" : "**missed**" }'; }
# columns: 4 tps 5 grants 6 w50 7 w99 8 wmax 9 evals/grant 10 h50 11 h99 12 handoffs 13 cmin 14 cmax 15 busy
# 16 grants after a holder on the other server % 17 their handoff p50 18 rounds/grant
for k in adv lt lt2 poll unc ho_adv ho_lt ho_lt2 ho_poll; do
	for c in 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18; do
		eval "M_${k}_$c=\$(col $k $c)"
	done
done
RTT50=$(awk -F'\t' '{ print $2 }' "$OUT/rtt.tsv" | median)
RTT99=$(awk -F'\t' '{ print $3 }' "$OUT/rtt.tsv" | median)
R_TPS=$(ratio "$M_lt_4" "$M_adv_4")
R_W99=$(ratio "$M_lt_7" "$M_adv_7")
R_EV=$(ratio "$M_lt_9" "$M_unc_9")
R2_TPS=$(ratio "$M_lt2_4" "$M_adv_4")
R2_W99=$(ratio "$M_lt2_7" "$M_adv_7")
R2_EV=$(ratio "$M_lt2_9" "$M_unc_9")
in_rtt() { awk -v h="$1" -v r="$RTT50" 'BEGIN { printf "%.1f", h * 1000 / r }'; }
HO_RTT=$(in_rtt "$M_ho_lt_10")
HO_EXTRA_RTT=$(in_rtt "$(awk -v h="$M_ho_lt_10" -v a="$M_ho_adv_10" 'BEGIN { print h - a }')")
HO2_RTT=$(in_rtt "$M_ho_lt2_10")
HO2_EXTRA_RTT=$(in_rtt "$(awk -v h="$M_ho_lt2_10" -v a="$M_ho_adv_10" 'BEGIN { print h - a }')")
P_TPS=$(ratio "$M_poll_4" "$M_adv_4")
P_W99=$(ratio "$M_poll_7" "$M_adv_7")

row() {	# row LABEL KIND
	local k=$2 v
	printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$1" \
		"$(eval echo "\$M_${k}_4")" "$(each "$k" 4)" "$(eval echo "\$M_${k}_6")" \
		"$(eval echo "\$M_${k}_7")" "$(each "$k" 7)" "$(eval echo "\$M_${k}_8")" \
		"$(eval echo "\$M_${k}_9")" "$(eval echo "\$M_${k}_18")" \
		"$(eval echo "\$M_${k}_13")–$(eval echo "\$M_${k}_14")" \
		"$(eval echo "\$M_${k}_15")"
}
horow() {
	local k=$2
	printf '| %s | %s | %s | %s | %s | %s | %s | %s |\n' "$1" "$(eval echo "\$M_${k}_10")" "$(each "$k" 10)" \
		"$(eval echo "\$M_${k}_11")" "$(eval echo "\$M_${k}_12")" "$(eval echo "\$M_${k}_4")" \
		"$(eval echo "\$M_${k}_9")" "$(eval echo "\$M_${k}_18")"
}

{
	echo "# Contention benchmark (\`$CMD\`)"
	echo
	echo "$DATE, $("$PG_CONFIG" --version), $(redis-server --version | awk '{print $1, $2, $3}'), $(nproc) CPUs"
	echo "(shared machine: ${IDLE_BUSY}% busy with other people's load just before the run)."
	echo "uptime before the runs: \`$UPTIME_BEFORE\`; after them: \`$(bench_uptime)\`."
	echo "Every figure is the median of $REPS repeats, run interleaved in this one run"
	echo "(adv, lt, lt2, poll, unc, ho_adv, ho_lt, ho_lt2, ho_poll, then again); ratios"
	echo "are between medians of this run. Raw data: \`bench/out-contention/\` (not committed)."
	echo "Two servers (lt2, ho_lt2): two preloaded clusters on this machine, with"
	echo "\`redlock.nodes\` set to the same 5 nodes, the clients split evenly between"
	echo "them. Advisory locks cannot span servers: the advisory figures are those of"
	echo "one server, the floor the two-server figures are compared against."
	echo
	echo "## Targets"
	echo
	echo "| target | measured | ratio | goal | verdict |"
	echo "|---|---|---:|---|---|"
	echo "| lock wait p99, redlock (lock table) vs advisory | $M_lt_7 ms vs $M_adv_7 ms | $R_W99 | <= 3 | $(verdict "$R_W99" '<=' 3) |"
	echo "| lock wait p99, redlock on two servers vs advisory (one server) | $M_lt2_7 ms vs $M_adv_7 ms | $R2_W99 | <= 3 | $(verdict "$R2_W99" '<=' 3) |"
	echo "| TPS, redlock (lock table) vs advisory | $M_lt_4 vs $M_adv_4 | $R_TPS | >= 0.5 | $(verdict "$R_TPS" '>=' 0.5) |"
	echo "| TPS, redlock on two servers (sum) vs advisory (one server) | $M_lt2_4 vs $M_adv_4 | $R2_TPS | >= 0.5 | $(verdict "$R2_TPS" '>=' 0.5) |"
	echo "| EVALs per grant, contended vs uncontended | $M_lt_9 vs $M_unc_9 | $R_EV | <= 1.5 | $(verdict "$R_EV" '<=' 1.5) |"
	echo "| EVALs per grant, contended on two servers vs uncontended | $M_lt2_9 vs $M_unc_9 | $R2_EV | <= 1.5 | $(verdict "$R2_EV" '<=' 1.5) |"
	echo "| handoff p50 (release to next grant, same server) in majority round trips | $M_ho_lt_10 ms, round trip $RTT50 us | $HO_RTT | <= 3 | $(verdict "$HO_RTT" '<=' 3) |"
	echo "| handoff p50 (release on one server to the grant on the other) in majority round trips | $M_ho_lt2_10 ms, round trip $RTT50 us | $HO2_RTT | <= 3 | $(verdict "$HO2_RTT" '<=' 3) |"
	echo
	echo "For comparison, the polling waiters (no lock table): TPS $P_TPS x advisory, wait p99 $P_W99 x advisory."
	echo
	echo "## Hot rows: 8 clients, 3 rows, 2 ms critical section (\`pgbench -n -j 2 -c 8 -T $SECS\`)"
	echo
	echo "Two servers: \`pgbench -n -j 1 -c 4 -T $SECS\` on each, started together; TPS is"
	echo "the sum of the two, the other figures are over the transactions of both."
	echo
	echo "| workload | TPS | TPS per repeat | wait p50 ms | wait p99 ms | p99 per repeat | wait max ms | EVALs / grant | Redlock rounds / grant | transactions per client (min–max) | CPU busy % |"
	echo "|---|---:|---|---:|---:|---|---:|---:|---:|---|---:|"
	row "advisory: pg_advisory_xact_lock(id)" adv
	row "redlock, lock table (shared_preload_libraries = redlock)" lt
	row "redlock, two servers: 4 + 4 clients, lock table + wake-up worker" lt2
	row "redlock, polling (not preloaded: no lock table)" poll
	row "redlock, uncontended: 8 clients, 8 distinct rows (\`-T $UNC_SECS\`)" unc
	echo
	echo "On two servers, $M_lt2_16 % of the grants followed a holder on the other server"
	echo "(per repeat: $(each lt2 16) %); the handoff p50 of those waiters that were"
	echo "already waiting then: $M_lt2_17 ms (all handoffs of the runs: $M_lt2_10 ms; one server: $M_lt_10 ms)."
	echo "Transactions committed on lt/b, per repeat: $(awk -F'\t' '$1 == "lt2" { print $2 }' "$OUT/split.tsv")."
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
	echo "Redlock rounds / grant: acquire attempts (\`redlock_stats.attempts\`, summed"
	echo "over the servers of the run) per committed transaction. A refused round costs"
	echo "5 EVALs to ask, plus one per node that granted it or did not answer (the"
	echo "withdrawal); a grant handed over at release costs no round of its own (the"
	echo "holder's release round takes the lock for the waiter: 5 EVALs for both)."
	echo
	echo "## Handoff: 2 clients, 1 resource, 2 ms critical section, no UPDATE (\`-c 2 -T $HO_SECS\`)"
	echo
	echo "Session locks released explicitly: each transaction is"
	echo
	echo '```sql'
	cat "$OUT/ho_rl.sql"
	echo '```'
	echo
	echo "Handoff = grant of a waiter (\`clock_timestamp()\` right after its lock call)"
	echo "- release by the holder (\`clock_timestamp()\` right before its unlock call, in"
	echo "the same target list), for every grant whose waiter was already waiting then."
	echo "Advisory's (\`pg_advisory_lock\` / \`pg_advisory_unlock\`) is the floor: waking"
	echo "a waiter and its statement's return."
	echo
	echo "| lock | handoff p50 ms | p50 per repeat | handoff p99 ms | handoffs (median per run) | TPS | EVALs / grant | Redlock rounds / grant |"
	echo "|---|---:|---|---:|---:|---:|---:|---:|"
	horow "advisory" ho_adv
	horow "redlock, lock table" ho_lt
	horow "redlock, across two servers (1 client on each)" ho_lt2
	horow "redlock, polling" ho_poll
	echo
	echo "Majority round trip: uncontended \`redlock_try_lock\` timed in the server"
	echo "($RTT_N calls per repeat, 5 nodes): p50 $RTT50 us, p99 $RTT99 us (per repeat:"
	echo "$(awk -F'\t' '{ printf "%s%s", (n++ ? "/" : ""), $2 }' "$OUT/rtt.tsv") us)."
	echo "Redlock's handoff p50 is $HO_RTT round trips; above advisory's it is $HO_EXTRA_RTT."
	echo "Across servers ($M_ho_lt2_16 % of the grants changed server; a handoff is counted"
	echo "only when the waiter was already waiting, so each of them crossed) it is"
	echo "$HO2_RTT round trips; above advisory's (one server) it is $HO2_EXTRA_RTT."
	echo
	echo "## Lock wait CDF"
	echo
	echo "![lock wait CDF](contention_cdf.png)"
	echo
	echo "All transactions of the hot-row runs, all repeats pooled (two servers: the"
	echo "transactions of both)."
	echo
	echo "## Every run"
	echo
	echo "| run | workload | repeat | TPS | transactions | wait p50 ms | wait p99 ms | wait max ms | EVALs / grant | handoff p50 ms | handoff p99 ms | handoffs | per client min | per client max | CPU busy % | grants after the other server % | their handoff p50 ms | rounds / grant |"
	echo "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
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
	     "$OUT/cdf_lt2.dat" using (\$1 < 0.01 ? 0.01 : \$1):2 with lines lw 2 dt 2 title "redlock, two servers, 4 + 4 clients (PUBLISH wake-up)", \
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

if [ "$SERVERS" = 1 ]; then
	bench_cleanup
	trap - EXIT
	bash "$top/bench/contention_servers.sh" --pg-config "$PG_CONFIG" \
		$([ "$REPORT" = 1 ] || echo --no-report) --reps "$REPS"
fi
