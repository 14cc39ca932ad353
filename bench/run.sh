#!/usr/bin/env bash
# The redlock benchmark suite (issue 5), in one command:
#
#   bash bench/run.sh [--quick] [--pg-config PATH] [--private-copy DIR]
#
#   (no option)      full run (about 10 minutes on 2 cores)
#   --quick          smoke run (about 2 minutes), same outputs
#   --pg-config, --private-copy   which PostgreSQL installation to build,
#                    install and run in, or a private copy of it: see
#                    bench/lib.sh (e.g. --private-copy /tmp/pgcopy leaves the
#                    shared installation alone)
#
# Installs what it needs from Debian's packages, builds and installs the
# extension, starts 5 redis-server nodes on free loopback ports
# (test/redis-nodes.sh) and a throwaway PostgreSQL cluster on a unix socket
# (test/pg-cluster.sh, fsync on), measures redlock side by side with its
# floor, stops everything, runs bench/fence_trigger.sh, writes
# bench/RESULTS.md and bench/latency_cdf.png, and prints the results.
# Raw data: bench/out/.
#
# Every figure is the median over REPS repeats run interleaved in this one
# run; ratios are taken between medians of this run.
set -euo pipefail

usage() {
	echo "usage: bash bench/run.sh [--quick] $BENCH_PG_OPTIONS" >&2
	exit 2
}

cd "$(dirname "$0")/.."
ROOT=$PWD
. "$ROOT/bench/lib.sh"
OUT=$ROOT/bench/out
NNODES=5
QUICK=0
RL_BENCH_CMD="bash bench/run.sh${*:+ $*}"
while [ $# -gt 0 ]; do
	if bench_pg_option "$@"; then shift "$BENCH_SHIFT"; continue; fi
	case "$1" in
	--quick) QUICK=1; shift ;;
	*) usage ;;
	esac
done
if [ "$QUICK" = 1 ]; then
	REPS=1 CYCLES=1000 WARM=100 PGB_T=3 FENCE_T=3 FLOOR_T=2 REFUSALS=5 REUSE=2000
	FENCE_BENCH_ARGS="20000 3"
else
	REPS=3 CYCLES=10000 WARM=500 PGB_T=10 FENCE_T=6 FLOOR_T=5 REFUSALS=20 REUSE=10000
	FENCE_BENCH_ARGS="200000 5"
fi
START_TS=$(date +%s)
RL_BENCH_DATE=$(date -u '+%Y-%m-%d %H:%M UTC')

bench_pg "$bench_pg_config" "$bench_private"
bench_need gnuplot-nox redis-tools gawk
bench_build

rm -rf "$OUT"
mkdir -p "$OUT/pgb"
bench_workdir bench

echo "== $NNODES redis nodes on free loopback ports, a throwaway cluster; measuring" >&2
NODES5=$(bench_nodes redis "$NNODES")
IFS=' ' read -r -a PORTS <<< "$(echo "$NODES5" | tr ',' '\n' | sed 's/.*://' | tr '\n' ' ')"
NODES3=$(echo "$NODES5" | cut -d, -f1-3)
NODES1=$(echo "$NODES5" | cut -d, -f1)
bench_cluster pg max_connections=100 fsync=on jit=off
bench_use pg

KV=$OUT/kv
: > "$KV"
export PGOPTIONS="-c jit=off"

q() { psql -X -q -v ON_ERROR_STOP=1 -At "$@"; }
kv() { echo "$1=$2" >> "$KV"; }
get() { awk -F= -v k="$1" '$1 == k { v = $2 } END { print v }' "$KV"; }
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {if (NR == 0) print "nan"; else print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
log() { echo "-- $*" >&2; }

node_pid() { bench_node_pid redis "$1"; }

STOPPED=()
cont_all() {
	local p
	for p in "${STOPPED[@]}"; do kill -CONT "$(node_pid "$p")" 2>/dev/null || true; done
	STOPPED=()
}
stop_node() { kill -STOP "$(node_pid "$1")"; STOPPED+=("$1"); }

q <<SQL
CREATE EXTENSION redlock;
ALTER SYSTEM SET redlock.nodes = '$NODES5';
SELECT pg_reload_conf() \g /dev/null
CREATE TABLE samples (phase text, rep int, op text, us float8);
CREATE SEQUENCE grants;
CREATE SEQUENCE denied;
CREATE SEQUENCE unavail;

-- One pgbench cycle: try_lock, unlock if granted.  RL002 (a majority did
-- not answer within node_timeout) is counted, not fatal: pgbench would abort
-- the client.  The EXCEPTION block costs a subtransaction per cycle, the
-- same at every client count.
CREATE FUNCTION bench_cycle(r text) RETURNS int LANGUAGE plpgsql AS \$\$
BEGIN
	IF redlock_try_lock(r, 30000) IS NULL THEN
		PERFORM nextval('denied');
		RETURN 0;
	END IF;
	PERFORM redlock_unlock(r);
	PERFORM nextval('grants');
	RETURN 1;
EXCEPTION WHEN SQLSTATE 'RL002' THEN
	PERFORM nextval('unavail');
	RETURN -1;
END
\$\$;

-- One session, CYCLES timed try_lock/unlock pairs after WARM untimed ones.
CREATE FUNCTION bench_loop(phase text, rep int, n int, warm int, distinct_res bool)
RETURNS void LANGUAGE plpgsql AS \$\$
DECLARE
	acq float8[] := array_fill(0::float8, ARRAY[n]);
	rel float8[] := array_fill(0::float8, ARRAY[n]);
	t0 timestamptz; t1 timestamptz; t2 timestamptz;
	tok bigint; ok bool; r text;
BEGIN
	FOR i IN 1 - warm .. n LOOP
		IF distinct_res THEN r := phase || ':' || rep || ':' || i;
		ELSE r := phase || ':' || rep; END IF;
		t0 := clock_timestamp();
		tok := redlock_try_lock(r, 30000);
		t1 := clock_timestamp();
		ok := redlock_unlock(r);
		t2 := clock_timestamp();
		IF tok IS NULL OR NOT ok THEN
			RAISE EXCEPTION 'cycle % of % not granted', i, phase;
		END IF;
		IF i >= 1 THEN
			acq[i] := extract(epoch FROM t1 - t0) * 1e6;
			rel[i] := extract(epoch FROM t2 - t1) * 1e6;
		END IF;
	END LOOP;
	INSERT INTO samples SELECT phase, rep, 'acquire', unnest(acq);
	INSERT INTO samples SELECT phase, rep, 'release', unnest(rel);
END
\$\$;

-- The loop's own cost: the same timing around a trivial C function call.
CREATE FUNCTION bench_empty(n int) RETURNS float8 LANGUAGE plpgsql AS \$\$
DECLARE
	d float8[] := array_fill(0::float8, ARRAY[n]);
	t0 timestamptz; t1 timestamptz; x bigint;
BEGIN
	FOR i IN 1 .. n LOOP
		t0 := clock_timestamp();
		x := int8abs(i);
		t1 := clock_timestamp();
		d[i] := extract(epoch FROM t1 - t0) * 1e6;
	END LOOP;
	RETURN (SELECT round(avg(v)::numeric, 2) FROM unnest(d) v);
END
\$\$;

-- Time to RL002 with a majority stopped; sleeps between attempts so that
-- both states of a stalled node are met (connected, and in reconnect backoff).
CREATE TABLE refusals (attempt int, ms float8, sqlstate text);
CREATE FUNCTION bench_refusal(n int, pause float8) RETURNS void LANGUAGE plpgsql AS \$\$
DECLARE
	t0 timestamptz; st text;
BEGIN
	FOR i IN 1 .. n LOOP
		t0 := clock_timestamp();
		BEGIN
			PERFORM redlock_try_lock('refusal:' || i, 30000);
			st := 'granted';
		EXCEPTION WHEN SQLSTATE 'RL002' THEN
			st := 'RL002';
		END;
		INSERT INTO refusals VALUES (i, extract(epoch FROM clock_timestamp() - t0) * 1000, st);
		PERFORM pg_sleep(pause);
	END LOOP;
END
\$\$;

CREATE TABLE acct_f (id int PRIMARY KEY, v int NOT NULL DEFAULT 0, fence_token bigint);
CREATE TABLE acct_a (LIKE acct_f INCLUDING ALL);
CREATE TABLE acct_p (LIKE acct_f INCLUDING ALL);
CREATE TRIGGER fence BEFORE UPDATE ON acct_f FOR EACH ROW EXECUTE FUNCTION redlock_fence();
INSERT INTO acct_f (id) SELECT generate_series(1, 100);
INSERT INTO acct_a SELECT * FROM acct_f;
INSERT INTO acct_p SELECT * FROM acct_f;
VACUUM ANALYZE;
SQL

# ---------------------------------------------------------------- idle baseline
# the machine is shared: how busy is it with none of our load?
kv idle_busy "$(bench_idle_busy)"
kv uptime_before "$(bench_uptime)"

# ---------------------------------------------------------------- floor
log "floor: redis-benchmark and a PostgreSQL statement"
cat > "$OUT/select1.sql" <<'EOF'
SELECT 1;
EOF
# pgbench per-transaction logs -> "p50 p99" in ms (column 3 is latency in us)
pgb_pct() { cat "$@" | awk '{print $3}' | sort -n | awk '{a[NR]=$1} END {
	if (NR == 0) { print "nan nan"; exit }
	i50 = int(NR * 0.50); if (i50 < 1) i50 = 1; i99 = int(NR * 0.99); if (i99 < 1) i99 = 1
	printf "%.3f %.3f\n", a[i50] / 1000, a[i99] / 1000 }'; }
pgb_tps() { sed -n 's/^tps = \([0-9.]*\) .*/\1/p' "$1" | head -1; }

ACQ_SHA=""
for ((r = 1; r <= REPS; r++)); do
	csv=$(redis-benchmark -p "${PORTS[0]}" -c 1 -P 1 -n 20000 -t set --csv 2>/dev/null | grep '^"SET"')
	# "SET","rps","avg","min","p50","p95","p99","max"
	kv "floor_set_p50_$r" "$(echo "$csv" | awk -F'"' '{print $10}')"
	kv "floor_set_p99_$r" "$(echo "$csv" | awk -F'"' '{print $14}')"
	# the server-side cost of redlock's release script (key absent: GET + compare)
	csv=$(redis-benchmark -p "${PORTS[0]}" -c 1 -P 1 -n 20000 --csv \
		EVAL "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0" 1 bench:absent x 2>/dev/null | tail -1)
	kv "floor_eval_p50_$r" "$(echo "$csv" | awk -F'"' '{print $10}')"
	pgbench -n -f "$OUT/select1.sql" -c 1 -T "$FLOOR_T" --log --log-prefix="$OUT/pgb/select1_$r" > "$OUT/pgb/select1_$r.out" 2>&1
	kv "floor_pg_avg_$r" "$(sed -n 's/^latency average = \([0-9.]*\) ms/\1/p' "$OUT/pgb/select1_$r.out")"
	read -r p50 p99 < <(pgb_pct "$OUT"/pgb/select1_"$r".[0-9]*)
	kv "floor_pg_p50_$r" "$p50"
	rm -f "$OUT"/pgb/select1_"$r".[0-9]*
done
kv floor_loop_us "$(q -c "SELECT bench_empty(20000)")"

# ---------------------------------------------------------------- connection reuse
log "connection reuse over $REUSE cycles of one session"
conns() { redis-cli -p "$1" INFO stats | tr -d '\r' | sed -n 's/^total_connections_received://p'; }
for ((i = 0; i < NNODES; i++)); do kv "reuse_before_$i" "$(conns "${PORTS[i]}")"; done
q -c "SET redlock.nodes = '$NODES5'" -c "SELECT bench_loop('reuse', 1, $REUSE, 0, false)" >/dev/null
q -c "DELETE FROM samples WHERE phase = 'reuse'"
for ((i = 0; i < NNODES; i++)); do
	after=$(conns "${PORTS[i]}")
	# the INFO client itself is one connection
	kv "reuse_new_$i" $((after - $(get "reuse_before_$i") - 1))
done

# ---------------------------------------------------------------- single session
# phase name -> nodes, distinct, stopped count
declare -A PH_NODES=([n5s]=$NODES5 [n5d]=$NODES5 [n3s]=$NODES3 [n3d]=$NODES3 [n1s]=$NODES1 [n1d]=$NODES1
	[d1s]=$NODES5 [d1d]=$NODES5 [d2s]=$NODES5 [d2d]=$NODES5)
run_phase() {	# run_phase PHASE REP
	local ph=$1 rep=$2 dist=false
	[ "${ph: -1}" = d ] && dist=true
	q -c "SET redlock.nodes = '${PH_NODES[$ph]}'" \
		-c "SELECT bench_loop('$ph', $rep, $CYCLES, $WARM, $dist)" >/dev/null
}
for ((r = 1; r <= REPS; r++)); do
	log "single session, repeat $r/$REPS: healthy N=5,3,1"
	for ph in n5s n5d n3s n3d n1s n1d; do run_phase "$ph" "$r"; done
	log "single session, repeat $r/$REPS: 1 of 5 stopped"
	stop_node "${PORTS[4]}"
	for ph in d1s d1d; do run_phase "$ph" "$r"; done
	log "single session, repeat $r/$REPS: 2 of 5 stopped"
	stop_node "${PORTS[3]}"
	for ph in d2s d2d; do run_phase "$ph" "$r"; done
	if [ "$r" = 1 ]; then
		log "time to refusal, 3 of 5 stopped ($REFUSALS attempts)"
		# one warm session (connected to all 5), then the third node stops
		STOPPED+=("${PORTS[2]}")
		q -c "SET redlock.nodes = '$NODES5'" -c "SELECT redlock_try_lock('warm'), redlock_unlock('warm')" \
			-c "\\! kill -STOP $(node_pid "${PORTS[2]}")" \
			-c "SELECT bench_refusal($REFUSALS, 0.15)" >/dev/null
	fi
	cont_all
	sleep 1
done

q > "$OUT/single.tsv" <<'SQL'
\pset fieldsep '\t'
WITH per_rep AS (
	SELECT phase, op, rep,
		percentile_disc(0.5) WITHIN GROUP (ORDER BY us) p50,
		percentile_disc(0.9) WITHIN GROUP (ORDER BY us) p90,
		percentile_disc(0.99) WITHIN GROUP (ORDER BY us) p99,
		max(us) mx, count(*) n
	FROM samples GROUP BY phase, op, rep)
SELECT phase, op,
	round(percentile_cont(0.5) WITHIN GROUP (ORDER BY p50)::numeric, 0),
	round(percentile_cont(0.5) WITHIN GROUP (ORDER BY p90)::numeric, 0),
	round(percentile_cont(0.5) WITHIN GROUP (ORDER BY p99)::numeric, 0),
	round(percentile_cont(0.5) WITHIN GROUP (ORDER BY mx)::numeric, 0),
	sum(n), string_agg(round(p50::numeric, 0)::text, '/' ORDER BY rep)
FROM per_rep GROUP BY phase, op ORDER BY phase, op;
SQL
q > "$OUT/refusal.tsv" <<'SQL'
\pset fieldsep '\t'
SELECT round(percentile_disc(0.5) WITHIN GROUP (ORDER BY ms)::numeric, 1),
	round(min(ms)::numeric, 1), round(max(ms)::numeric, 1), count(*),
	count(*) FILTER (WHERE sqlstate = 'RL002'),
	string_agg(round(ms::numeric, 1)::text, ' ' ORDER BY attempt)
FROM refusals;
SQL
# samples for the CDF plot: sorted, one file per phase and op
for ph in n5s d1s d2s n5d d1d d2d; do
	for op in acquire release; do
		q -c "SELECT us, (row_number() OVER (ORDER BY us))::float8 / count(*) OVER () FROM samples WHERE phase = '$ph' AND op = '$op' ORDER BY us" \
			-F ' ' > "$OUT/cdf_${ph}_$op.dat"
	done
done

# ---------------------------------------------------------------- concurrency
seqval() { q -c "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM $1"; }
# CPU of the redis nodes, and their EVAL calls (machine-wide CPU: bench_cpu_now)
redis_cpu() { local t=0 p; for p in "${PORTS[@]}"; do
	t=$((t + $(awk '{ print $14 + $15 }' "/proc/$(node_pid "$p")/stat"))); done; echo $t; }
evals() { local t=0 p; for p in "${PORTS[@]}"; do
	t=$((t + $(redis-cli -p "$p" INFO commandstats | tr -d '\r' | awk -F'[=,:]' '/^cmdstat_eval(sha)?:/ { s += $3 } END { print s + 0 }'))); done; echo $t; }
HZ=$(getconf CLK_TCK)
NCPU=$(nproc)
for ((r = 1; r <= REPS; r++)); do
	for c in 1 4 16 64; do
		for w in distinct contended; do
			log "concurrency, repeat $r/$REPS: $w, $c clients, ${PGB_T}s"
			q -c "SELECT setval('grants', 1, false), setval('denied', 1, false), setval('unavail', 1, false)" >/dev/null
			name="${w}_c${c}_$r"
			# resource names unique to this run: a lease left behind by an
			# earlier run (see RESULTS.md) must not turn into NULLs here
			if [ "$w" = distinct ]; then
				echo "SELECT bench_cycle('c:$name:' || :client_id);" > "$OUT/$w.sql"
			else
				echo "SELECT bench_cycle('hot:$name');" > "$OUT/$w.sql"
			fi
			read -r b0 t0 < <(bench_cpu_now); rc0=$(redis_cpu); ev0=$(evals)
			pgbench -n -f "$OUT/$w.sql" -c "$c" -j $((c < 2 ? 1 : 2)) -T "$PGB_T" \
				--log --log-prefix="$OUT/pgb/$name" > "$OUT/pgb/$name.out" 2>&1 ||
				echo "pgbench $name exited non-zero (see bench/out/pgb/$name.out)" >&2
			read -r b1 t1 < <(bench_cpu_now); rc1=$(redis_cpu); ev1=$(evals)
			cyc=$(( $(seqval grants) + $(seqval denied) + $(seqval unavail) ))
			[ "$cyc" -gt 0 ] || cyc=1
			kv "conc_${w}_${c}_busy_$r" "$(bench_busy "$b0" "$t0" "$b1" "$t1")"
			kv "conc_${w}_${c}_cpuus_$r" "$(awk -v b=$((b1 - b0)) -v n="$cyc" -v hz="$HZ" 'BEGIN { printf "%.0f", b / hz * 1e6 / n }')"
			kv "conc_${w}_${c}_rcpuus_$r" "$(awk -v b=$((rc1 - rc0)) -v n="$cyc" -v hz="$HZ" 'BEGIN { printf "%.0f", b / hz * 1e6 / n }')"
			kv "conc_${w}_${c}_evals_$r" "$(awk -v e=$((ev1 - ev0)) -v n="$cyc" 'BEGIN { printf "%.2f", e / n }')"
			kv "conc_${w}_${c}_unavail_$r" "$(seqval unavail)"
			kv "conc_${w}_${c}_tps_$r" "$(pgb_tps "$OUT/pgb/$name.out")"
			read -r p50 p99 < <(pgb_pct "$OUT"/pgb/"$name".[0-9]*)
			kv "conc_${w}_${c}_p50_$r" "$p50"
			kv "conc_${w}_${c}_p99_$r" "$p99"
			kv "conc_${w}_${c}_grants_$r" "$(seqval grants)"
			kv "conc_${w}_${c}_denied_$r" "$(seqval denied)"
			kv "conc_${w}_${c}_failed_$r" "$(grep -c 'aborted in command' "$OUT/pgb/$name.out" || true)"
			rm -f "$OUT"/pgb/"$name".[0-9]*
		done
	done
done

# ---------------------------------------------------------------- fenced transactions
cat > "$OUT/fenced.sql" <<'EOF'
\set id :client_id + 1
BEGIN;
UPDATE acct_f SET v = v + 1, fence_token = redlock_xact_lock('acct:' || :id) WHERE id = :id;
COMMIT;
EOF
cat > "$OUT/advisory.sql" <<'EOF'
\set id :client_id + 1
BEGIN;
UPDATE acct_a SET v = v + 1, fence_token = (SELECT 1 FROM pg_advisory_xact_lock(:id)) WHERE id = :id;
COMMIT;
EOF
cat > "$OUT/plain.sql" <<'EOF'
\set id :client_id + 1
BEGIN;
UPDATE acct_p SET v = v + 1 WHERE id = :id;
COMMIT;
EOF
for ((r = 1; r <= REPS; r++)); do
	for sc in on off; do
		for v in fenced advisory plain; do
			log "fenced transactions, repeat $r/$REPS: $v, synchronous_commit=$sc, 4 clients, ${FENCE_T}s"
			name="fx_${v}_${sc}_$r"
			PGOPTIONS="-c jit=off -c synchronous_commit=$sc" \
				pgbench -n -f "$OUT/$v.sql" -c 4 -j 2 -T "$FENCE_T" > "$OUT/pgb/$name.out" 2>&1 ||
				echo "pgbench $name exited non-zero (see bench/out/pgb/$name.out)" >&2
			kv "fx_${v}_${sc}_tps_$r" "$(pgb_tps "$OUT/pgb/$name.out")"
			kv "fx_${v}_${sc}_aborted_$r" "$(grep -c 'aborted in command' "$OUT/pgb/$name.out" || true)"
		done
	done
done
q -c "VACUUM acct_f, acct_a, acct_p" >/dev/null

kv uptime_after "$(bench_uptime)"

# ---------------------------------------------------------------- plot
{
bench_plot_cdf_head "$OUT/latency_cdf.png" \
	"redlock latency in one session, 5 nodes: healthy vs 1 and 2 stopped (SIGSTOP), ${CYCLES} cycles x ${REPS} repeats"
cat <<EOF
set title "redlock\\\\_try\\\\_lock (same resource: solid; distinct: dashed)"
plot "$OUT/cdf_n5s_acquire.dat" u 1:2 w l lw 2 lc 1 t "healthy", \
     "$OUT/cdf_d1s_acquire.dat" u 1:2 w l lw 2 lc 2 t "1 stopped", \
     "$OUT/cdf_d2s_acquire.dat" u 1:2 w l lw 2 lc 7 t "2 stopped", \
     "$OUT/cdf_n5d_acquire.dat" u 1:2 w l dt 2 lc 1 t "healthy, distinct", \
     "$OUT/cdf_d1d_acquire.dat" u 1:2 w l dt 2 lc 2 t "1 stopped, distinct", \
     "$OUT/cdf_d2d_acquire.dat" u 1:2 w l dt 2 lc 7 t "2 stopped, distinct"
set title "redlock\\\\_unlock"
plot "$OUT/cdf_n5s_release.dat" u 1:2 w l lw 2 lc 1 t "healthy", \
     "$OUT/cdf_d1s_release.dat" u 1:2 w l lw 2 lc 2 t "1 stopped", \
     "$OUT/cdf_d2s_release.dat" u 1:2 w l lw 2 lc 7 t "2 stopped", \
     "$OUT/cdf_n5d_release.dat" u 1:2 w l dt 2 lc 1 t "healthy, distinct", \
     "$OUT/cdf_d1d_release.dat" u 1:2 w l dt 2 lc 2 t "1 stopped, distinct", \
     "$OUT/cdf_d2d_release.dat" u 1:2 w l dt 2 lc 7 t "2 stopped, distinct"
unset multiplot
EOF
} | gnuplot

# ---------------------------------------------------------------- report
med_of() {	# med_of KEYPREFIX -> median over repeats of KEYPREFIX_<rep>
	local vals=() r
	for ((r = 1; r <= REPS; r++)); do vals+=("$(get "${1}_$r")"); done
	median "${vals[@]}"
}
sum_of() { local t=0 r; for ((r = 1; r <= REPS; r++)); do t=$((t + $(get "${1}_$r"))); done; echo "$t"; }
reps_of() { local s="" r; for ((r = 1; r <= REPS; r++)); do s+="${s:+/}$(get "${1}_$r")"; done; echo "$s"; }
single() {	# single PHASE OP COLUMN(3=p50 4=p90 5=p99 6=max)
	awk -F'\t' -v p="$1" -v o="$2" -v c="$3" '$1 == p && $2 == o { print $c }' "$OUT/single.tsv"
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b + 0 == 0) print "nan"; else printf "%.2f", a / b }'; }
verdict() { awk -v x="$1" -v lim="$2" 'BEGIN { print (x + 0 <= lim + 0) ? "**met**" : "**missed**" }'; }

set_p50=$(med_of floor_set_p50); set_p99=$(med_of floor_set_p99)
set_p50_us=$(awk -v x="$set_p50" 'BEGIN { printf "%.0f", x * 1000 }')
set_p99_us=$(awk -v x="$set_p99" 'BEGIN { printf "%.0f", x * 1000 }')
eval_p50_us=$(awk -v x="$(med_of floor_eval_p50)" 'BEGIN { printf "%.0f", x * 1000 }')
pg_avg=$(med_of floor_pg_avg); pg_p50=$(med_of floor_pg_p50)
read -r ref_p50 ref_min ref_max ref_n ref_rl002 ref_all < "$OUT/refusal.tsv"
node_timeout=$(q -c "LOAD 'redlock'" -c "SHOW redlock.node_timeout" | tr -d 'ms')

{
	echo "# redlock benchmark results"
	echo
	echo "| | |"
	echo "|---|---|"
	echo "| command | \`$RL_BENCH_CMD\` |"
	echo "| date | $RL_BENCH_DATE |"
	echo "| machine | $(nproc) CPUs, $(lscpu | sed -n 's/^Model name: *//p' | head -1), kernel $(uname -r), $(. /etc/os-release; echo "$PRETTY_NAME") |"
	echo "| software | $(q -c 'SELECT version()' | cut -d, -f1), $(redis-server --version | awk '{print $1, $2, $3}'), hiredis $(dpkg-query -W -f='${Version}' libhiredis-dev 2>/dev/null) |"
	echo "| setup | 5 redis-server nodes on free loopback ports ($NODES5; no persistence), a throwaway cluster on a unix socket (test/pg-cluster.sh) with fsync=on, max_connections=100, jit=off; redlock.node_timeout=${node_timeout} ms |"
	echo "| background load | the machine was $(get idle_busy)% busy (all CPUs) over 3 s before the run, with none of this benchmark's load |"
	echo "| uptime | before the measurements: \`$(get uptime_before)\`; after them: \`$(get uptime_after)\` |"
	echo "| repeats | every figure is the median of $REPS interleaved repeats (per-repeat values after the slash-separated lists) |"
	echo
	echo "## Targets (issue 5)"
	echo
	echo "| target | measured | ratio | limit | verdict |"
	echo "|---|---|---:|---:|---|"
	a=$(single n5s acquire 3); rt=$(ratio "$a" "$set_p50_us")
	echo "| acquire p50, 5 healthy nodes, vs raw Redis SET p50 | $a us vs $set_p50_us us | $rt | 2.0 | $(verdict "$rt" 2) |"
	a=$(single n5s release 3); rt=$(ratio "$a" "$set_p50_us")
	echo "| release p50, 5 healthy nodes, vs raw Redis SET p50 | $a us vs $set_p50_us us | $rt | 1.5 | $(verdict "$rt" 1.5) |"
	a=$(single d2s acquire 5); b=$(single n5s acquire 5); rt=$(ratio "$a" "$b")
	echo "| acquire p99, 2 of 5 stopped, vs healthy acquire p99 (same resource) | $a us vs $b us | $rt | 2.0 | $(verdict "$rt" 2) |"
	a=$(single d2d acquire 5); b=$(single n5d acquire 5); rt=$(ratio "$a" "$b")
	echo "| the same, distinct resources | $a us vs $b us | $rt | 2.0 | $(verdict "$rt" 2) |"
	lim=$((node_timeout + 10))
	echo "| refusal with 3 of 5 stopped (max of $ref_n), vs node_timeout + 10 ms | $ref_max ms | $(ratio "$ref_max" "$lim") | $lim ms | $(verdict "$ref_max" "$lim") |"
	a=$(printf '%.0f' "$(med_of conc_distinct_16_tps)"); b=$(printf '%.0f' "$(med_of conc_distinct_1_tps)"); rt=$(ratio "$a" "$b")
	echo "| cycles/s, 16 sessions vs 1, distinct resources | $a vs $b | $rt | >= 2.0 | $(awk -v x="$rt" 'BEGIN { print (x >= 2) ? "**met**" : "**missed**" }') |"
	a=$(printf '%.0f' "$(med_of fx_fenced_on_tps)"); b=$(printf '%.0f' "$(med_of fx_advisory_on_tps)"); rt=$(ratio "$a" "$b")
	echo "| fenced TPS vs pg_advisory_xact_lock TPS, synchronous_commit on | $a vs $b | $rt | >= 0.6 | $(awk -v x="$rt" 'BEGIN { print (x >= 0.6) ? "**met**" : "**missed**" }') |"
	mx=0; for ((i = 0; i < NNODES; i++)); do v=$(get "reuse_new_$i"); [ "$v" -gt "$mx" ] && mx=$v; done
	echo "| new connections per node, one session, $REUSE cycles | max $mx | | 1 | $(verdict "$mx" 1) |"
	echo
	echo "## Floor"
	echo
	echo "| what | p50 | p99 | repeats (p50) |"
	echo "|---|---:|---:|---|"
	echo "| \`redis-benchmark -p ${PORTS[0]} -c 1 -P 1 -n 20000 -t set\` | $set_p50_us us | $set_p99_us us | $(reps_of floor_set_p50) ms |"
	echo "| redis-benchmark, redlock's release script via EVAL (key absent) | $eval_p50_us us | | $(reps_of floor_eval_p50) ms |"
	echo "| PostgreSQL statement round trip, \`pgbench -n -f 'SELECT 1' -c 1 -T $FLOOR_T\` | $(awk -v x="$pg_p50" 'BEGIN { printf "%.0f", x * 1000 }') us (average $(awk -v x="$pg_avg" 'BEGIN { printf "%.0f", x * 1000 }') us) | | $(reps_of floor_pg_avg) ms avg |"
	echo "| timing loop's own cost: clock_timestamp() around a trivial C call in PL/pgSQL | $(get floor_loop_us) us | | |"
	echo
	echo "## Single session, timed inside the server ($CYCLES cycles per repeat, after $WARM untimed)"
	echo
	echo "One backend loops \`redlock_try_lock(r, 30000)\` then \`redlock_unlock(r)\`, each timed with clock_timestamp(). Latencies in microseconds."
	echo
	echo "| nodes | stopped (SIGSTOP) | resource | call | p50 | p90 | p99 | max | p50 per repeat | p50 / Redis SET p50 |"
	echo "|---:|---:|---|---|---:|---:|---:|---:|---|---:|"
	for ph in n5s n5d n3s n3d n1s n1d d1s d1d d2s d2d; do
		case $ph in n5*|d*) n=5 ;; n3*) n=3 ;; n1*) n=1 ;; esac
		case $ph in d1*) s=1 ;; d2*) s=2 ;; *) s=0 ;; esac
		[ "${ph: -1}" = s ] && res=same || res=distinct
		for op in acquire release; do
			awk -F'\t' -v p="$ph" -v o="$op" -v n="$n" -v s="$s" -v res="$res" -v f="$set_p50_us" \
				'$1 == p && $2 == o { printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %.2f |\n",
					n, s, res, (o == "acquire") ? "try_lock" : "unlock", $3, $4, $5, $6, $8, $3 / f }' "$OUT/single.tsv"
		done
	done
	echo
	echo "Time to refusal (RL002) of \`redlock_try_lock\` with 3 of 5 stopped: median $ref_p50 ms, min $ref_min ms, max $ref_max ms over $ref_n attempts ($ref_rl002 raised RL002), 150 ms apart in one warm session. All, in order: $ref_all ms."
	echo
	echo "Plot: [latency_cdf.png](latency_cdf.png) (CDF of every timed call, all repeats)."
	echo
	echo "## Concurrency (pgbench, one statement per cycle: try_lock, then unlock if granted; \`-j 2 -T $PGB_T\`)"
	echo
	echo "Each cycle is \`SELECT bench_cycle(r)\` (PL/pgSQL: try_lock, unlock if granted, RL002 caught and counted; resource \`'c:<run>:' || :client_id\` or \`'hot:<run>'\`, unique to each pgbench run). Counts (granted, NULL, RL002) are totals over the $REPS repeats; CPU columns: machine-wide busy share of $NCPU CPUs, and CPU time per cycle (all processes, and the 5 redis-server processes alone); EVALs/cycle are summed over the 5 nodes (a clean cycle is 5 acquire + 5 release = 10; a token write-back round adds 3)."
	echo
	echo "| resources | clients | cycles/s | per repeat | p50 ms | p99 ms | granted | NULL (held) | RL002 | aborted clients | CPU busy % | CPU us/cycle | redis CPU us/cycle | EVALs/cycle |"
	echo "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
	for w in distinct contended; do
		for c in 1 4 16 64; do
			echo "| $w | $c | $(med_of "conc_${w}_${c}_tps" | awk '{printf "%.0f", $1}') | $(reps_of "conc_${w}_${c}_tps" | sed 's/\.[0-9]*//g') | $(med_of "conc_${w}_${c}_p50") | $(med_of "conc_${w}_${c}_p99") | $(sum_of "conc_${w}_${c}_grants") | $(sum_of "conc_${w}_${c}_denied") | $(sum_of "conc_${w}_${c}_unavail") | $(sum_of "conc_${w}_${c}_failed") | $(med_of "conc_${w}_${c}_busy") | $(med_of "conc_${w}_${c}_cpuus") | $(med_of "conc_${w}_${c}_rcpuus") | $(med_of "conc_${w}_${c}_evals") |"
		done
	done
	echo
	echo "## Fenced transactions (pgbench, 4 clients, \`-j 2 -T $FENCE_T\`, one row per client)"
	echo
	echo "| transaction | synchronous_commit | TPS | per repeat | vs advisory | aborted clients |"
	echo "|---|---|---:|---|---:|---:|"
	for sc in on off; do
		adv=$(med_of "fx_advisory_${sc}_tps")
		for v in fenced advisory plain; do
			case $v in
			fenced) d="UPDATE acct_f SET v = v + 1, fence_token = redlock_xact_lock('acct:' \\|\\| :id) (redlock_fence() trigger)" ;;
			advisory) d="UPDATE acct_a SET v = v + 1, fence_token = (SELECT 1 FROM pg_advisory_xact_lock(:id))" ;;
			plain) d="UPDATE acct_p SET v = v + 1" ;;
			esac
			t=$(med_of "fx_${v}_${sc}_tps")
			echo "| BEGIN; $d; COMMIT | $sc | $(printf '%.0f' "$t") | $(reps_of "fx_${v}_${sc}_tps" | sed 's/\.[0-9]*//g') | $(ratio "$t" "$adv") | $(med_of "fx_${v}_${sc}_aborted") |"
		done
	done
	echo
	echo "## Connection reuse ($REUSE lock/unlock cycles in one new session)"
	echo
	echo "| node | total_connections_received before | new connections during the cycles |"
	echo "|---|---:|---:|"
	for ((i = 0; i < NNODES; i++)); do
		echo "| 127.0.0.1:${PORTS[i]} | $(get "reuse_before_$i") | $(get "reuse_new_$i") |"
	done
} > "$OUT/results_main.md"

# ---------------------------------------------------------------- fence trigger
# with this run's servers stopped; in the installation built above
bench_stop_all
echo "== fence trigger overhead (bench/fence_trigger.sh $FENCE_BENCH_ARGS)" >&2
# shellcheck disable=SC2086
bash bench/fence_trigger.sh --pg-config "$PG_CONFIG" $FENCE_BENCH_ARGS > "$OUT/fence_trigger.txt"

{
	cat "$OUT/results_main.md"
	echo
	echo "## Fence trigger overhead (\`bash bench/fence_trigger.sh $FENCE_BENCH_ARGS\`, run by this command)"
	echo
	sed -n '1,/^raw samples/p' "$OUT/fence_trigger.txt" | sed '$d'
	echo
	echo "Run time of the whole command: $(( $(date +%s) - START_TS )) s."
} > "$ROOT/bench/RESULTS.md"
cp "$OUT/latency_cdf.png" "$ROOT/bench/latency_cdf.png"
cat "$ROOT/bench/RESULTS.md"
