#!/usr/bin/env bash
# The part of the demo that runs inside the throwaway cluster (called by
# test/demo.sh with PGHOST, PGPORT, ... set for its cluster by
# test/pg-cluster.sh).
set -euo pipefail
work=${1:?work directory}
psql_run() { psql -X -q -v ON_ERROR_STOP=0 "$@"; }
say() { printf '\n\033[1m%s\033[0m\n' "$*"; }

psql_run -c "CREATE EXTENSION redlock"

say "1. A lease and its fencing token; meanwhile another session asks for it"
psql_run -e <<'SQL'
SELECT redlock_lock('demo:report', 10000) AS token;
SELECT * FROM redlock_leases;
\echo -- a second session, while this one holds the lease: NULL, it is held elsewhere
\! psql -X -c "SELECT redlock_try_lock('demo:report') AS token"
SQL

say "2. Released when the holder is done: the other session gets it now"
psql_run -e -c "SELECT redlock_try_lock('demo:report') IS NOT NULL AS granted"

say "3. Each later grant of a resource gets a greater token"
psql_run -e <<'SQL'
SELECT redlock_lock('demo:report') AS first \gset
SELECT redlock_unlock('demo:report');
SELECT redlock_lock('demo:report') AS second \gset
SELECT :first AS first_token, :second AS second_token, :second > :first AS greater;
SQL

say "4. The fence: a paused lease holder cannot overwrite a newer holder's write"
psql_run -e <<'SQL'
CREATE TABLE accounts (id int PRIMARY KEY, balance int NOT NULL, fence_token bigint);
CREATE TRIGGER fence BEFORE INSERT OR UPDATE OR DELETE ON accounts
    FOR EACH ROW EXECUTE FUNCTION redlock_fence();
INSERT INTO accounts VALUES (7, 100, 1);
SQL

# Session A takes a 1.5 s lease, then "pauses" (think GC, swap, a stopped VM)
# for 3 s, well past its TTL, and then writes with its old token.
(
	psql_run -e 2>&1 <<'SQL'
\echo [A] take the lease on acct:7 for 1.5 s
SELECT redlock_lock('acct:7', 1500) AS t1 \gset
\echo [A] got token :t1 -- now pausing for 3 s
\! touch "$DEMO_WORK/a-has-lease"
SELECT pg_sleep(3);
\echo [A] woke up; still believes it holds acct:7 and writes balance - 30 with token :t1
BEGIN;
SET LOCAL redlock.fence_token = :t1;
UPDATE accounts SET balance = balance - 30 WHERE id = 7;
\echo [A] refused with SQLSTATE :LAST_ERROR_SQLSTATE
ROLLBACK;
SQL
) | tee "$work/session-a.out" | sed -u 's/^/    [session A] /' &
a_pid=$!

for _ in $(seq 100); do [ -f "$work/a-has-lease" ] && break; sleep 0.05; done

(
	psql_run -e 2>&1 <<'SQL'
\echo [B] wants acct:7: redlock_lock waits until the lease of A expires
SELECT redlock_lock('acct:7', 30000) AS t2 \gset
\echo [B] got token :t2 and writes balance + 50
UPDATE accounts SET balance = balance + 50, fence_token = :t2 WHERE id = 7;
SQL
) | sed -u 's/^/    [session B] /'
wait $a_pid

say "5. The row holds B's write; A's stale write was refused (SQLSTATE RL001)"
psql_run -e -c "SELECT * FROM accounts"

# The story must have happened as told (CI runs the demo): B's +50 is in the
# row, and A's write was refused by the fence (A rolls back either way).
balance=$(psql -X -At -c "SELECT balance FROM accounts WHERE id = 7")
a_said=$(sed -n 's/^\[A\] refused with SQLSTATE //p' "$work/session-a.out")
if [ "$balance" != 150 ] || [ "$a_said" != RL001 ]; then
	echo "demo: FAILED: balance ${balance:-missing} (expected 150, B's +50)," \
		"A's write ended with SQLSTATE '${a_said}' (expected RL001, refused by the fence)" >&2
	exit 1
fi
