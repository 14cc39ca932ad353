#!/usr/bin/env bash
# Per-row cost of the fence trigger: the same UPDATE of N rows with
# (a) no trigger, (b) redlock_fence() and (c) a PL/pgSQL trigger doing the
# same checks, measured side by side in one throwaway cluster, ROUNDS rounds
# interleaved (order rotated each round), reporting medians and
# ratio = C overhead / PL/pgSQL overhead (target <= 1/3).
#
# A fourth table carries PostgreSQL's own C trigger
# suppress_redundant_updates_trigger(), which does next to nothing: it
# shows the floor every BEFORE ROW UPDATE trigger pays in the executor
# (the row is locked and both versions materialised before any trigger
# runs), so the second ratio compares the functions' own work above it.
#
#   bash bench/fence_trigger.sh [--pg-config PATH] [--private-copy DIR]
#                               [ROWS] [ROUNDS]      (defaults 200000 7)
#
# Builds and installs the extension into the PostgreSQL installation of
# --pg-config, or into a private copy of it (--private-copy DIR, see
# bench/lib.sh), and runs one throwaway cluster on a unix socket
# (test/pg-cluster.sh, fsync off); no Redis.
# Two workloads: "column" (the UPDATE sets the token column) and "setting"
# (SET LOCAL redlock.fence_token; the trigger stamps it into the row).
# Times are the server's EXPLAIN ANALYZE execution time (no parse, plan or
# network), with a VACUUM of the table before each timed UPDATE.
set -euo pipefail

usage() {
	echo "usage: bash bench/fence_trigger.sh $BENCH_PG_OPTIONS [ROWS] [ROUNDS]" >&2
	exit 2
}

. "$(dirname "$0")/lib.sh"
args=()
while [ $# -gt 0 ]; do
	if bench_pg_option "$@"; then shift "$BENCH_SHIFT"; continue; fi
	case "$1" in
	[0-9]*) args+=("$1"); shift ;;
	*) usage ;;
	esac
done
[ ${#args[@]} -le 2 ] || usage
rows=${args[0]:-200000}
rounds=${args[1]:-7}

bench_pg "$bench_pg_config" "$bench_private"
bench_build
bench_workdir fence
busy=$(bench_idle_busy)
uptime_before=$(bench_uptime)
bench_cluster pg fsync=off
bench_use pg

export PGOPTIONS="-c jit=off"
psql_q() { psql -X -q -v ON_ERROR_STOP=1 -At "$@"; }

psql_q <<SQL
CREATE EXTENSION redlock;

-- The PL/pgSQL equivalent, column name hard-coded (the cheapest PL/pgSQL
-- can do it; a generic column name would need dynamic SQL or jsonb).
CREATE FUNCTION fence_plpgsql() RETURNS trigger LANGUAGE plpgsql AS \$\$
DECLARE
	tok bigint;
	s text;
BEGIN
	IF TG_WHEN <> 'BEFORE' OR TG_LEVEL <> 'ROW' THEN
		RAISE EXCEPTION 'fence_plpgsql must be fired BEFORE ... FOR EACH ROW'
			USING ERRCODE = '39P01';
	END IF;
	IF TG_OP = 'DELETE' THEN
		s := current_setting('redlock.fence_token', true);
		IF s IS NULL OR s = '' THEN
			RAISE EXCEPTION 'missing fencing token for table "%"', TG_TABLE_NAME
				USING ERRCODE = 'RL001';
		END IF;
		tok := s::bigint;
		IF OLD.fence_token IS NOT NULL AND tok <= OLD.fence_token THEN
			RAISE EXCEPTION 'stale fencing token for table "%"', TG_TABLE_NAME
				USING ERRCODE = 'RL001',
				DETAIL = format('Offered token %s is not greater than the stored token %s.',
								tok, OLD.fence_token);
		END IF;
		RETURN OLD;
	END IF;
	IF NEW.fence_token IS DISTINCT FROM OLD.fence_token THEN
		tok := NEW.fence_token;
		IF tok IS NULL THEN
			RAISE EXCEPTION 'missing fencing token for table "%"', TG_TABLE_NAME
				USING ERRCODE = 'RL001';
		END IF;
	ELSE
		s := current_setting('redlock.fence_token', true);
		IF s IS NULL OR s = '' THEN
			RAISE EXCEPTION 'missing fencing token for table "%"', TG_TABLE_NAME
				USING ERRCODE = 'RL001';
		END IF;
		tok := s::bigint;
		NEW.fence_token := tok;
	END IF;
	IF tok <= 0 THEN
		RAISE EXCEPTION 'invalid fencing token for table "%"', TG_TABLE_NAME
			USING ERRCODE = 'RL001';
	END IF;
	IF OLD.fence_token IS NOT NULL AND tok <= OLD.fence_token THEN
		RAISE EXCEPTION 'stale fencing token for table "%"', TG_TABLE_NAME
			USING ERRCODE = 'RL001',
			DETAIL = format('Offered token %s is not greater than the stored token %s.',
							tok, OLD.fence_token);
	END IF;
	RETURN NEW;
END
\$\$;

CREATE TABLE t_none (id int PRIMARY KEY, balance int NOT NULL, fence_token bigint)
	WITH (fillfactor = 45, autovacuum_enabled = off);
CREATE TABLE t_c (LIKE t_none INCLUDING ALL) WITH (fillfactor = 45, autovacuum_enabled = off);
CREATE TABLE t_plpgsql (LIKE t_none INCLUDING ALL) WITH (fillfactor = 45, autovacuum_enabled = off);
CREATE TABLE t_floor (LIKE t_none INCLUDING ALL) WITH (fillfactor = 45, autovacuum_enabled = off);
INSERT INTO t_none SELECT g, 0, 1 FROM generate_series(1, $rows) g;
INSERT INTO t_c SELECT * FROM t_none;
INSERT INTO t_plpgsql SELECT * FROM t_none;
INSERT INTO t_floor SELECT * FROM t_none;
CREATE TRIGGER fence BEFORE UPDATE OR DELETE ON t_c
	FOR EACH ROW EXECUTE FUNCTION redlock_fence();
CREATE TRIGGER fence BEFORE UPDATE OR DELETE ON t_plpgsql
	FOR EACH ROW EXECUTE FUNCTION fence_plpgsql();
CREATE TRIGGER floor BEFORE UPDATE ON t_floor
	FOR EACH ROW EXECUTE FUNCTION suppress_redundant_updates_trigger();
VACUUM ANALYZE t_none, t_c, t_plpgsql, t_floor;
SQL

variants=(none floor c plpgsql)
declare -A samples

# time_update TABLE WORKLOAD TOKEN -> execution time in ms
time_update() {
	local table=$1 workload=$2 token=$3 sql
	if [ "$workload" = column ]; then
		sql="EXPLAIN (ANALYZE, TIMING OFF, COSTS OFF) UPDATE $table SET balance = balance + 1, fence_token = $token;"
	else
		sql="SET LOCAL redlock.fence_token = $token; EXPLAIN (ANALYZE, TIMING OFF, COSTS OFF) UPDATE $table SET balance = balance + 1;"
	fi
	psql_q -c "VACUUM $table" >/dev/null
	psql_q -c "BEGIN; $sql COMMIT;" | sed -n 's/^Execution Time: \([0-9.]*\) ms$/\1/p'
}

median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }

token=1
for workload in column setting; do
	# one warm-up round, not counted
	for v in "${variants[@]}"; do
		token=$((token + 1))
		time_update "t_$v" "$workload" "$token" >/dev/null
	done
	for ((r = 0; r < rounds; r++)); do
		token=$((token + 1))
		for ((i = 0; i < ${#variants[@]}; i++)); do
			v=${variants[$(((i + r) % ${#variants[@]}))]}
			samples[$workload,$v]+="$(time_update "t_$v" "$workload" "$token") "
		done
	done
done

echo "fence trigger cost: UPDATE of $rows rows, median of $rounds interleaved rounds (PostgreSQL $(psql_q -c 'SHOW server_version'); the machine was $busy% busy over 3 s before, with none of this load)"
echo
echo "uptime before the rounds: \`$uptime_before\`; after them: \`$(bench_uptime)\`"
echo
echo "| workload | trigger | median ms | ns/row | overhead ns/row |"
echo "|---|---|---:|---:|---:|"
for workload in column setting; do
	declare -A med
	for v in "${variants[@]}"; do
		# shellcheck disable=SC2086
		med[$v]=$(median ${samples[$workload,$v]})
	done
	for v in "${variants[@]}"; do
		awk -v w="$workload" -v v="$v" -v m="${med[$v]}" -v b="${med[none]}" -v n="$rows" 'BEGIN {
			name = (v == "none") ? "none" : (v == "c") ? "redlock_fence() (C)" : \
				(v == "floor") ? "floor: suppress_redundant_updates_trigger() (C, built in)" : "PL/pgSQL equivalent";
			printf "| %s | %s | %.1f | %.0f | %s |\n", w, name, m, m * 1e6 / n,
				(v == "none") ? "-" : sprintf("%.0f", (m - b) * 1e6 / n) }'
	done
	ratios+=("$(awk -v c="${med[c]}" -v p="${med[plpgsql]}" -v b="${med[none]}" -v f="${med[floor]}" -v w="$workload" 'BEGIN {
		printf "%s: C overhead / PL/pgSQL overhead = %.2f (target <= 0.33); above the trigger floor: %.2f", w, (c - b) / (p - b), (c - f) / (p - f) }')")
	unset med
done
echo
printf '%s\n' "${ratios[@]}"
echo
echo "raw samples (ms):"
for workload in column setting; do
	for v in "${variants[@]}"; do
		echo "  $workload/$v: ${samples[$workload,$v]}"
	done
done
