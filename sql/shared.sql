--
-- Shared leases: redlock_lock_shared() and the other shared forms, in one
-- session (readers beside writers in several sessions and servers:
-- test/specs/lease_shared.spec and test/t/037_shared.pl).  Tokens vary
-- per run, so they are compared, never printed.
--
\getenv abs_srcdir PG_ABS_SRCDIR
\i :abs_srcdir/sql/include/outcome.sql

-- a shared lease is a lease like any other, in mode 'shared', and its
-- token is above the exclusive grants before it
SELECT redlock_lock('s:a', 5000) AS x1 \gset
SELECT redlock_unlock('s:a');
SELECT redlock_lock_shared('s:a', 5000) AS r1 \gset
SELECT :r1 > :x1 AS shared_token_above_earlier_grants;
SELECT resource, token = :r1 AS its_token, scope, holds, validity_ms > 0 AS valid,
       mode
  FROM redlock_leases WHERE resource = 's:a';
SELECT resource, granted, scope, mode, place FROM redlock_locks
 WHERE resource = 's:a';
-- each node says who reads it, in mode 'shared'
SELECT count(*) FILTER (WHERE pid = pg_backend_pid() AND mode = 'shared'
                          AND this_server) AS nodes_read_by_us
  FROM redlock_holder('s:a');
-- re-entrant: the same token, one more hold
SELECT redlock_lock_shared('s:a') = :r1 AS reentered;
SELECT redlock_try_lock_shared('s:a') = :r1 AS try_reentered;
SELECT holds FROM redlock_leases WHERE resource = 's:a';
-- extended as any lease
SELECT redlock_extend('s:a', 8000) > 5000 AS extended;
-- one mode at a time in a session: 55000 either way, nothing changes
SELECT pg_temp.outcome($$SELECT redlock_lock('s:a')$$);
SELECT pg_temp.outcome($$SELECT redlock_try_lock('s:a')$$);
SELECT pg_temp.outcome($$SELECT redlock_lock(ARRAY['s:a', 's:b'])$$);
SELECT holds, mode FROM redlock_leases WHERE resource = 's:a';
-- redlock_unlock() releases exclusive leases only, as pg_advisory_unlock
SELECT redlock_unlock('s:a');
SELECT redlock_unlock(ARRAY['s:a']);
SELECT redlock_unlock_shared('s:a'), redlock_unlock_shared('s:a'),
       redlock_unlock_shared('s:a');
SELECT redlock_unlock_shared('s:a');
SELECT count(*) FROM redlock_leases WHERE resource = 's:a';
-- the last reader gone, the resource is free: an exclusive lease at once,
-- with a token above the shared one
SELECT redlock_try_lock('s:a') AS x2 \gset
SELECT :x2 > :r1 AS exclusive_token_above_shared;
SELECT count(*) FILTER (WHERE mode = 'exclusive' AND pid = pg_backend_pid())
       AS nodes_held_exclusive
  FROM redlock_holder('s:a');
SELECT pg_temp.outcome($$SELECT redlock_lock_shared('s:a')$$);
SELECT redlock_unlock_shared('s:a');
SELECT redlock_unlock('s:a');

-- a lease that ran out keeps its mode (and its holds) until dropped
SELECT redlock_lock_shared('s:exp', 100) > 0 AS held;
SELECT pg_sleep(0.3);
SELECT validity_ms, mode FROM redlock_leases WHERE resource = 's:exp';
SELECT pg_temp.outcome($$SELECT redlock_lock('s:exp')$$);
\set VERBOSITY terse
SELECT redlock_unlock_shared('s:exp');
\set VERBOSITY default
SELECT redlock_try_lock('s:exp') > 0 AS exclusive_now;
SELECT redlock_unlock('s:exp');

-- transaction leases: released at commit and at rollback
BEGIN;
SELECT redlock_xact_lock_shared('s:x', 5000) > 0 AS held;
SELECT redlock_try_xact_lock_shared('s:x') > 0 AS reentered;
SELECT scope, holds, mode FROM redlock_leases WHERE resource = 's:x';
COMMIT;
SELECT count(*) FROM redlock_leases WHERE resource = 's:x';
SELECT count(*) AS nodes_holding FROM redlock_holder('s:x');
BEGIN;
SELECT redlock_xact_lock_shared('s:x', 5000) > 0 AS held;
ROLLBACK;
SELECT count(*) AS nodes_holding FROM redlock_holder('s:x');
-- a savepoint rolled back drops the holds taken in it
BEGIN;
SELECT redlock_xact_lock_shared('s:x', 5000) > 0 AS held;
SAVEPOINT sp;
SELECT redlock_xact_lock_shared('s:x', 5000) > 0 AS held;
ROLLBACK TO sp;
SELECT holds FROM redlock_leases WHERE resource = 's:x';
COMMIT;
-- DISCARD ALL drops session leases, shared ones too
SELECT redlock_lock_shared('s:d', 5000) > 0 AS held;
DISCARD ALL;
SELECT count(*) FROM redlock_leases;
SELECT count(*) AS nodes_holding FROM redlock_holder('s:d');
\i :abs_srcdir/sql/include/outcome.sql

-- the fence in 'held' mode refuses a shared lease's token: a reader does
-- not write
CREATE TABLE doc (id int PRIMARY KEY, body text, fence_token bigint);
CREATE TRIGGER doc_fence BEFORE INSERT OR UPDATE ON doc
	FOR EACH ROW EXECUTE FUNCTION redlock_fence('fence_token', 'held');
SELECT redlock_lock_shared('s:doc', 5000) AS rd \gset
SELECT pg_temp.outcome(format($$INSERT INTO doc VALUES (1, 'x', %s)$$, :rd));
SELECT redlock_unlock_shared('s:doc');
SELECT redlock_lock('s:doc', 5000) AS wr \gset
SELECT pg_temp.outcome(format($$INSERT INTO doc VALUES (1, 'x', %s)$$, :wr));
SELECT redlock_unlock('s:doc');
DROP TABLE doc;

-- bad input: the checks of the exclusive forms
SELECT pg_temp.outcome($$SELECT redlock_lock_shared(NULL)$$);
SELECT pg_temp.outcome($$SELECT redlock_lock_shared('')$$);
SELECT pg_temp.outcome($$SELECT redlock_lock_shared(repeat('x', 513))$$);
SELECT pg_temp.outcome($$SELECT redlock_lock_shared('s:e', 0)$$);
SELECT pg_temp.outcome($$SELECT redlock_lock_shared('s:e', NULL)$$);
SELECT pg_temp.outcome($$SELECT redlock_lock_shared('s:e', 1000, -1)$$);
SELECT pg_temp.outcome($$SELECT redlock_lock_shared('s:e', 1000, NULL, NULL)$$);
SELECT pg_temp.outcome($$SELECT redlock_try_lock_shared('s:e', 1000, NULL)$$);
SELECT pg_temp.outcome($$SELECT redlock_unlock_shared(NULL)$$);
SELECT pg_temp.outcome($$SELECT redlock_unlock_shared('')$$);
SELECT count(*) FROM redlock_leases;
