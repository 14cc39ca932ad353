#!/usr/bin/env bash
# One hot resource shared by 1, 2 and 4 servers (issue 33): how many grants
# each server gets, how long a lock + unlock takes on each, and what the
# order across servers costs, against advisory locks on one server.  Run by
# bench/contention.sh after its own runs, or alone:
#
#   bash bench/contention_servers.sh [--pg-config PATH] [--private-copy DIR]
#                                    [--seconds N] [--reps N] [--no-report]
#
# --pg-config, --private-copy   as bench/contention.sh (bench/lib.sh)
# --seconds       length of each run (default 10)
# --reps          interleaved repeats of every run (default 3)
# --no-report     leave bench/CONTENTION_SERVERS.md alone (the report still
#                 goes to bench/out-contention-servers/)
#
# 5 Redis nodes on free loopback ports (their epochs seeded: fresh nodes,
# no restart quarantine to wait out) and four preloaded clusters s1..s4 on
# unix sockets, redlock.nodes the same 5 nodes.  16 sessions in every run,
# pgbench -n -M prepared for SECS seconds, each transaction
#   SELECT redlock_lock('hot', 5000, wait_ms => 20000);
#   SELECT redlock_unlock('hot');
#   adv   16 sessions on s1: pg_advisory_lock(1); pg_advisory_unlock(1)
#   one   16 sessions on s1
#   two   8 + 8 on s1, s2
#   four  4 + 4 + 4 + 4 on s1..s4
# (one pgbench per server, -j 1, started together).  A grant is a
# transaction pgbench finished (its per-transaction log, -l); lock + unlock
# is its latency there.  A session that fails (a wait_ms that ran out:
# 55P03) ends pgbench with an error, which is reported.
set -euo pipefail

usage() {
	echo "usage: bash bench/contention_servers.sh $BENCH_PG_OPTIONS [--seconds N] [--reps N] [--no-report]" >&2
	exit 2
}

top=$(cd "$(dirname "$0")/.." && pwd)
. "$top/bench/lib.sh"
CMD="bash bench/contention_servers.sh${*:+ $*}"
SECS=10
REPS=3
REPORT=1
while [ $# -gt 0 ]; do
	if bench_pg_option "$@"; then shift "$BENCH_SHIFT"; continue; fi
	case "$1" in
	--seconds) [ $# -ge 2 ] || usage; SECS=$2; shift 2 ;;
	--reps) [ $# -ge 2 ] || usage; REPS=$2; shift 2 ;;
	--no-report) REPORT=0; shift ;;
	*) usage ;;
	esac
done
SESSIONS=16

cd "$top"
START_TS=$(date +%s)
DATE=$(date -u '+%Y-%m-%d %H:%M UTC')
bench_pg "$bench_pg_config" "$bench_private"
bench_build

OUT=$top/bench/out-contention-servers
rm -rf "$OUT"
mkdir -p "$OUT"
bench_workdir contention-servers

echo "== 5 Redis nodes, four clusters" >&2
NODES=$(bench_nodes redis 5)
bench_seed_epoch "$NODES"
for s in s1 s2 s3 s4; do
	bench_cluster $s shared_preload_libraries=redlock jit=off max_connections=40 \
		"redlock.nodes=$NODES" redlock.node_timeout=500ms
	bench_use $s
	psql -X -q -v ON_ERROR_STOP=1 -c 'CREATE EXTENSION redlock'
done
K=$(bench_use s1; psql -X -At -c 'SHOW redlock.local_handoffs')

cat > "$OUT/rl.sql" <<'SQL'
SELECT redlock_lock('hot', 5000, wait_ms => 20000);
SELECT redlock_unlock('hot');
SQL
cat > "$OUT/adv.sql" <<'SQL'
SELECT pg_advisory_lock(1);
SELECT pg_advisory_unlock(1);
SQL

IDLE_BUSY=$(bench_idle_busy)
UPTIME_BEFORE=$(bench_uptime)

# run KIND SCRIPT SERVERS... : SESSIONS split evenly over the servers; every
# transaction of server S is a line "kind rep S latency_us" in grants.tsv,
# every pgbench's failure a line of failed.tsv
GRANTS=$OUT/grants.tsv
: > "$GRANTS"
: > "$OUT/failed.tsv"
run() {
	local kind=$1 script=$2 rep=$3 s pids=() i=0
	shift 3
	local n=$#
	echo "-- $kind (repeat $rep/$REPS): $SESSIONS sessions on $n server(s), ${SECS}s" >&2
	for s in "$@"; do
		mkdir -p "$OUT/$kind.$rep.$s"
		(bench_use "$s"; cd "$OUT/$kind.$rep.$s" && exec pgbench -n -M prepared -j 1 \
			-c $((SESSIONS / n)) -T "$SECS" -l -f "$OUT/$script.sql") \
			> "$OUT/$kind.$rep.$s.out" 2>&1 &
		pids+=($!)
	done
	for s in "$@"; do
		if ! wait "${pids[$i]}" || grep -q 'aborted\|ERROR' "$OUT/$kind.$rep.$s.out"; then
			printf '%s\t%s\t%s\t%s\n' "$kind" "$rep" "$s" \
				"$(grep -m1 'ERROR\|aborted' "$OUT/$kind.$rep.$s.out" | tr '\t' ' ')" >> "$OUT/failed.tsv"
		fi
		cat "$OUT/$kind.$rep.$s"/pgbench_log.* |
			awk -v k="$kind" -v r="$rep" -v s="$s" '{ print k "\t" r "\t" s "\t" $3 }' >> "$GRANTS"
		i=$((i + 1))
	done
}

for ((r = 1; r <= REPS; r++)); do
	run adv adv $r s1
	run one rl $r s1
	run two rl $r s1 s2
	run four rl $r s1 s2 s3 s4
done
UPTIME_AFTER=$(bench_uptime)

# ---------------------------------------------------------------- figures
# per kind, repeat and server: grants, lock + unlock p50/p99/max (ms); per
# kind and repeat: all servers together
stats() {	# stats FILTER-AWK: "n p50 p99 max" of the latencies (us) selected
	awk -F'\t' "$1 { print \$4 }" "$GRANTS" | sort -n |
		awk '{ a[NR] = $1 } END {
			if (NR == 0) { print "0 - - -"; exit }
			p50 = a[int((NR - 1) * 0.50) + 1]; p99 = a[int((NR - 1) * 0.99) + 1]
			printf "%d %.2f %.2f %.1f\n", NR, p50 / 1000, p99 / 1000, a[NR] / 1000 }'
}
median() { sort -g | awk '{a[NR]=$1} END {if (NR == 0) print "-"; else print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
servers_of() { case $1 in adv|one) echo s1 ;; two) echo s1 s2 ;; four) echo s1 s2 s3 s4 ;; esac; }

PER=$OUT/per_server.tsv	# kind rep server grants share% p50 p99 max
TOT=$OUT/per_run.tsv	# kind rep grants grants/s p50 p99 max minshare%
: > "$PER"
: > "$TOT"
for k in adv one two four; do
	for ((r = 1; r <= REPS; r++)); do
		read -r total t50 t99 tmax < <(stats "\$1 == \"$k\" && \$2 == $r")
		minshare=100
		for s in $(servers_of $k); do
			read -r n p50 p99 pmax < <(stats "\$1 == \"$k\" && \$2 == $r && \$3 == \"$s\"")
			share=$(awk -v n="$n" -v t="$total" 'BEGIN { printf "%.1f", t ? 100 * n / t : 0 }')
			minshare=$(awk -v a="$minshare" -v b="$share" 'BEGIN { print (b < a) ? b : a }')
			printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$k" "$r" "$s" "$n" "$share" "$p50" "$p99" "$pmax" >> "$PER"
		done
		printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$k" "$r" "$total" \
			"$(awk -v t="$total" -v s="$SECS" 'BEGIN { printf "%.0f", t / s }')" "$t50" "$t99" "$tmax" "$minshare" >> "$TOT"
	done
done
col() { awk -F'\t' -v k="$1" -v c="$2" '$1 == k { print $c }' "$TOT" | median; }
each() { awk -F'\t' -v k="$1" -v c="$2" '$1 == k { printf "%s%s", (n++ ? "/" : ""), $c }' "$TOT"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b == 0) print "nan"; else printf "%.2f", a / b }'; }
verdict() { awk -v v="$1" -v op="$2" -v t="$3" 'BEGIN { ok = (op == "<=") ? v <= t : v >= t; print ok ? "**met**" : "**missed**" }'; }
MAXMAX=$(awk -F'\t' '$1 == "four" { print $7 }' "$TOT" | sort -g | tail -1)
MINSHARE=$(awk -F'\t' '$1 == "four" { print $8 }' "$TOT" | sort -g | head -1)
NFAILED=$(wc -l < "$OUT/failed.tsv")
R_FOUR=$(ratio "$(col four 4)" "$(col one 4)")
R_TWO=$(ratio "$(col two 4)" "$(col one 4)")
R_ADV=$(ratio "$(col four 4)" "$(col adv 4)")

{
	echo "# One hot resource on 1, 2 and 4 servers (\`$CMD\`)"
	echo
	echo "$DATE, $("$PG_CONFIG" --version), $(redis-server --version | awk '{print $1, $2, $3}'), $(nproc) CPUs"
	echo "(shared machine: ${IDLE_BUSY}% busy with other people's load just before the run)."
	echo "uptime before the runs: \`$UPTIME_BEFORE\`; after them: \`$UPTIME_AFTER\`."
	echo "16 sessions in every run, $REPS repeats of ${SECS} s, interleaved (adv, one, two, four,"
	echo "then again); figures are medians of the repeats unless per repeat."
	echo "\`redlock.local_handoffs\` = $K; \`redlock.node_timeout\` = 500 ms; 5 Redis nodes."
	echo "Each transaction is \`SELECT redlock_lock('hot', 5000, wait_ms => 20000); SELECT redlock_unlock('hot');\`"
	echo "(prepared statements); advisory: \`pg_advisory_lock(1)\` / \`pg_advisory_unlock(1)\`, one server."
	echo "Lock + unlock is the transaction's latency in pgbench's log."
	echo
	echo "## Done when (issue 33): 4 servers x 4 sessions"
	echo
	echo "| target | measured | goal | verdict |"
	echo "|---|---|---|---|"
	echo "| every server's share of the grants (smallest of any repeat) | $MINSHARE % | >= 12.5 % | $(verdict "$MINSHARE" '>=' 12.5) |"
	echo "| longest lock + unlock (any repeat) | $MAXMAX ms | <= 1000 ms | $(verdict "$MAXMAX" '<=' 1000) |"
	echo "| sessions that failed (timed out) | $NFAILED | 0 | $(verdict "$NFAILED" '<=' 0) |"
	echo "| grants/s, 4 servers vs 16 sessions on one server | $(col four 4) vs $(col one 4) | >= 0.6 | $R_FOUR $(verdict "$R_FOUR" '>=' 0.6) |"
	echo
	echo "## Totals"
	echo
	echo "| run | grants/s | per repeat | lock + unlock p50 ms | p99 ms | max ms | smallest server share % |"
	echo "|---|---:|---|---:|---:|---:|---:|"
	for k in adv one two four; do
		case $k in
		adv) label="advisory, 16 sessions, one server" ;;
		one) label="redlock, 16 sessions, one server" ;;
		two) label="redlock, 8 + 8 sessions, two servers" ;;
		four) label="redlock, 4 x 4 sessions, four servers" ;;
		esac
		echo "| $label | $(col $k 4) | $(each $k 4) | $(col $k 5) | $(col $k 6) | $(col $k 7) | $(col $k 8) |"
	done
	echo
	echo "Two servers: $R_TWO x the grants/s of one; four: $R_FOUR x (and $R_ADV x advisory's)."
	echo
	echo "## Per server"
	echo
	echo "| run | repeat | server | grants | share % | lock + unlock p50 ms | p99 ms | max ms |"
	echo "|---|---:|---|---:|---:|---:|---:|---:|"
	awk -F'\t' '$1 != "adv" { printf "| %s | %s | %s | %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5, $6, $7, $8 }' "$PER"
	if [ "$NFAILED" -gt 0 ]; then
		echo
		echo "Failed pgbench runs:"
		echo
		awk -F'\t' '{ printf "- %s, repeat %s, %s: %s\n", $1, $2, $3, $4 }' "$OUT/failed.tsv"
	fi
	echo
	echo "Run time of the whole command: $(( $(date +%s) - START_TS )) s."
} > "$OUT/CONTENTION_SERVERS.md"

if [ "$REPORT" = 1 ]; then
	cp "$OUT/CONTENTION_SERVERS.md" "$top/bench/CONTENTION_SERVERS.md"
fi
cat "$OUT/CONTENTION_SERVERS.md"
