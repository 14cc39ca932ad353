--
-- Several resources at once, all or none: redlock_lock(text[]) and the
-- other array forms.  Real leases on the runner's nodes; tokens vary per
-- run, so they are compared, never printed.  (Two sessions contending for
-- overlapping sets: test/specs/lease_multi.spec and test/t/036_multi.pl.)
--
\getenv abs_srcdir PG_ABS_SRCDIR
\i :abs_srcdir/sql/include/outcome.sql

-- one token per resource, in the order given; each resource a lease of its
-- own, listed, and held on every node by this backend
SELECT redlock_lock(ARRAY['m:a', 'm:b'], 5000) AS t \gset
SELECT cardinality(:'t'::bigint[]) AS tokens;
SELECT resource, token = ANY (:'t'::bigint[]) AS its_token, scope, holds,
       validity_ms > 0 AS valid
  FROM redlock_leases WHERE resource LIKE 'm:%' ORDER BY resource;
SELECT resource, granted, scope, place FROM redlock_locks
 WHERE resource LIKE 'm:%' ORDER BY resource;
SELECT count(*) FILTER (WHERE pid = pg_backend_pid()) AS nodes_holding_a
  FROM redlock_holder('m:a');
SELECT count(*) FILTER (WHERE pid = pg_backend_pid()) AS nodes_holding_b
  FROM redlock_holder('m:b');

-- re-entrant, as the one-resource forms: the same tokens in the order
-- given, one more hold each
SELECT redlock_lock(ARRAY['m:b', 'm:a']) =
       ARRAY[(:'t'::bigint[])[2], (:'t'::bigint[])[1]] AS same_tokens_in_order;
SELECT redlock_try_lock(ARRAY['m:a', 'm:b']) = :'t'::bigint[] AS try_reenters;
SELECT resource, holds FROM redlock_leases WHERE resource LIKE 'm:%' ORDER BY resource;
-- released one hold at a time: by the array, or by each resource's own
SELECT redlock_unlock(ARRAY['m:a', 'm:b']) AS all_held;
SELECT redlock_unlock('m:a') AS a, redlock_unlock('m:b') AS b;
SELECT resource, holds FROM redlock_leases WHERE resource LIKE 'm:%' ORDER BY resource;
SELECT redlock_unlock(ARRAY['m:b', 'm:a']) AS all_held;
SELECT count(*) AS leases FROM redlock_leases WHERE resource LIKE 'm:%';
SELECT count(*) AS nodes_holding_a FROM redlock_holder('m:a');
-- not held: false, a warning for each
SELECT redlock_unlock(ARRAY['m:a', 'm:b']) AS all_held;

-- a later grant: each token greater than every earlier grant of its resource
SELECT redlock_lock(ARRAY['m:c', 'm:a', 'm:b']) AS t2 \gset
SELECT (:'t2'::bigint[])[2] > (:'t'::bigint[])[1] AND
       (:'t2'::bigint[])[3] > (:'t'::bigint[])[2] AS greater;
-- a set part of which this session holds: the others are taken, the held
-- ones re-entered with their tokens
SELECT redlock_unlock(ARRAY['m:c', 'm:b']);
SELECT redlock_lock(ARRAY['m:a', 'm:b', 'm:d']) AS t3 \gset
SELECT (:'t3'::bigint[])[1] = (:'t2'::bigint[])[2] AS a_reentered,
       (:'t3'::bigint[])[2] > (:'t2'::bigint[])[3] AS b_taken_anew;
SELECT resource, holds FROM redlock_leases WHERE resource LIKE 'm:%' ORDER BY resource;
SELECT redlock_unlock_all();

-- the transaction forms: released at COMMIT and ROLLBACK, and with the
-- savepoint that took them
BEGIN;
SELECT cardinality(redlock_xact_lock(ARRAY['m:x', 'm:y'], 5000)) AS got;
SELECT resource, scope FROM redlock_leases WHERE resource LIKE 'm:%' ORDER BY resource;
COMMIT;
SELECT count(*) AS leases FROM redlock_leases WHERE resource LIKE 'm:%';
SELECT count(*) AS nodes_holding_x FROM redlock_holder('m:x');
BEGIN;
SELECT cardinality(redlock_try_xact_lock(ARRAY['m:x', 'm:y'], 5000)) AS got;
ROLLBACK;
SELECT count(*) AS leases FROM redlock_leases WHERE resource LIKE 'm:%';
SELECT count(*) AS nodes_holding_y FROM redlock_holder('m:y');
BEGIN;
SELECT cardinality(redlock_xact_lock(ARRAY['m:x'])) AS got;
SAVEPOINT s;
SELECT cardinality(redlock_xact_lock(ARRAY['m:x', 'm:y'])) AS got;
SELECT resource, holds FROM redlock_leases WHERE resource LIKE 'm:%' ORDER BY resource;
ROLLBACK TO s;
SELECT resource, holds FROM redlock_leases WHERE resource LIKE 'm:%' ORDER BY resource;
COMMIT;
SELECT count(*) AS leases FROM redlock_leases WHERE resource LIKE 'm:%';
-- outside a transaction block: warned, released at the statement's end
SELECT cardinality(redlock_xact_lock(ARRAY['m:x', 'm:y'])) AS got;

-- keep_alive and redlock_extend: each resource of the set on its own
SELECT cardinality(redlock_lock(ARRAY['m:k1', 'm:k2'], 1000, keep_alive => true)) AS got;
SELECT pg_sleep(1.5);
SELECT resource, keep_alive, validity_ms > 0 AS valid FROM redlock_leases
 WHERE resource LIKE 'm:%' ORDER BY resource;
SELECT redlock_extend('m:k1', 5000) > 1000 AS extended;
SELECT redlock_unlock(ARRAY['m:k1', 'm:k2']);

-- redlock_extend over a set: each lease extended, the new validities in the
-- order given; every resource checked before any is extended
SELECT cardinality(redlock_lock(ARRAY['m:e1', 'm:e2', 'm:e3'], 1000)) AS got;
SELECT cardinality(v) AS n, 3000 < ALL (v) AND 5000 >= ALL (v) AS extended
  FROM redlock_extend(ARRAY['m:e3', 'm:e1', 'm:e2'], 5000) v;
SELECT pg_sleep(1.2);
SELECT count(*) FILTER (WHERE validity_ms > 2500) AS still_valid
  FROM redlock_leases WHERE resource LIKE 'm:e%';
-- one not held: 55000, and the others not extended
SELECT redlock_unlock('m:e3');
SELECT pg_temp.outcome($$SELECT redlock_extend(ARRAY['m:e1', 'm:e3'], 20000)$$);
SELECT count(*) FILTER (WHERE validity_ms < 5000) AS not_extended
  FROM redlock_leases WHERE resource LIKE 'm:e%';
-- one expired: RL003 (it counts as lost), and the other not extended
SELECT redlock_lock('m:e4', 200) > 0 AS got;
SELECT pg_sleep(0.4);
SELECT pg_temp.outcome($$SELECT redlock_extend(ARRAY['m:e1', 'm:e4'], 20000)$$);
SELECT resource, validity_ms < 5000 AS not_extended FROM redlock_leases
 WHERE resource LIKE 'm:e%' ORDER BY resource;
SELECT redlock_unlock(ARRAY['m:e1', 'm:e2']);
\set VERBOSITY terse
SELECT redlock_unlock('m:e4');
\set VERBOSITY default

-- DISCARD ALL releases them
SELECT cardinality(redlock_lock(ARRAY['m:d1', 'm:d2'])) AS got;
DISCARD ALL;
SELECT count(*) AS leases FROM redlock_leases WHERE resource LIKE 'm:%';
SELECT count(*) AS nodes_holding_d2 FROM redlock_holder('m:d2');
-- (it dropped pg_temp.outcome too)
\i :abs_srcdir/sql/include/outcome.sql

-- the limit: 16 resources in one call
SELECT cardinality(redlock_try_lock(
         (SELECT array_agg('m:n' || i) FROM generate_series(1, 16) i))) AS got;
SELECT redlock_unlock((SELECT array_agg('m:n' || i) FROM generate_series(1, 16) i));

-- an untyped literal still means the one-resource form
SELECT pg_typeof(redlock_try_lock('m:lit')) AS one_resource;
SELECT redlock_unlock('m:lit');

-- bad input
SELECT pg_temp.outcome($$SELECT redlock_lock(NULL::text[])$$);
SELECT pg_temp.outcome($$SELECT redlock_try_lock('{}'::text[])$$);
SELECT pg_temp.outcome($$SELECT redlock_lock(ARRAY['m:a', NULL])$$);
SELECT pg_temp.outcome($$SELECT redlock_lock(ARRAY['m:a', 'm:b', 'm:a'])$$);
SELECT pg_temp.outcome($$SELECT redlock_try_xact_lock(
         (SELECT array_agg('m:n' || i) FROM generate_series(1, 17) i))$$);
SELECT pg_temp.outcome($$SELECT redlock_xact_lock(ARRAY['m:a', ''])$$);
SELECT pg_temp.outcome(format('SELECT redlock_try_lock(ARRAY[%L, %L])', 'm:a', repeat('x', 513)));
SELECT pg_temp.outcome($$SELECT redlock_lock(ARRAY['m:a', 'm:b'], 0)$$);
SELECT pg_temp.outcome($$SELECT redlock_lock(ARRAY['m:a', 'm:b'], NULL)$$);
SELECT pg_temp.outcome($$SELECT redlock_lock(ARRAY['m:a', 'm:b'], 1000, -1)$$);
SELECT pg_temp.outcome($$SELECT redlock_try_lock(ARRAY['m:a', 'm:b'], 1000, NULL)$$);
SELECT pg_temp.outcome($$SELECT redlock_unlock(NULL::text[])$$);
SELECT pg_temp.outcome($$SELECT redlock_unlock('{}'::text[])$$);
SELECT pg_temp.outcome($$SELECT redlock_unlock(ARRAY[NULL]::text[])$$);
SELECT pg_temp.outcome($$SELECT redlock_unlock(ARRAY['m:a', 'm:a'])$$);
SELECT pg_temp.outcome($$SELECT redlock_extend(NULL::text[], 1000)$$);
SELECT pg_temp.outcome($$SELECT redlock_extend('{}'::text[], 1000)$$);
SELECT pg_temp.outcome($$SELECT redlock_extend(ARRAY['m:a', 'm:a'], 1000)$$);
SELECT pg_temp.outcome($$SELECT redlock_extend(ARRAY['m:a', 'm:b'], 0)$$);
-- a two-dimensional array is taken element by element
SELECT cardinality(redlock_try_lock(ARRAY[['m:a', 'm:b'], ['m:c', 'm:d']])) AS got;
SELECT redlock_unlock(ARRAY['m:a', 'm:b', 'm:c', 'm:d']);
-- nothing of the failed calls is held
SELECT count(*) AS leases FROM redlock_leases;

-- the fence bound to the row's resource takes the token of a set's
-- resource for that resource's row
CREATE TABLE macct (id int PRIMARY KEY, balance int NOT NULL,
	res text GENERATED ALWAYS AS ('macct:' || id) STORED, fence_token bigint);
CREATE TRIGGER fence BEFORE INSERT OR UPDATE OR DELETE ON macct
	FOR EACH ROW EXECUTE FUNCTION redlock_fence('fence_token', 'held', 'resource=res');
SELECT redlock_lock(ARRAY['macct:1', 'macct:2']) AS f \gset
INSERT INTO macct (id, balance, fence_token)
  VALUES (1, 100, (:'f'::bigint[])[1]), (2, 0, (:'f'::bigint[])[2]);
-- a resource outside the set: refused
\set VERBOSITY terse
\set SHOW_CONTEXT never
INSERT INTO macct (id, balance, fence_token) VALUES (3, 0, (:'f'::bigint[])[1]);
\echo :LAST_ERROR_SQLSTATE
\set VERBOSITY default
SELECT redlock_unlock(ARRAY['macct:1', 'macct:2']);
SELECT id, balance FROM macct ORDER BY id;
DROP TABLE macct;
