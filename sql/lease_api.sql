--
-- The lease API and its bad inputs.  The runner starts 5 Redis nodes on
-- ports that were free and sets redlock.nodes to them; ports and tokens vary
-- per run, so they are compared, never printed.
--
-- error text and SQLSTATE of a statement, for the bad-input cases
\getenv abs_srcdir PG_ABS_SRCDIR
\i :abs_srcdir/sql/include/outcome.sql

-- session lease: a token, re-entrant, listed, released
SELECT redlock_try_lock('api:a') AS t1 \gset
-- the library is loaded now: its settings and defaults
SELECT array_length(string_to_array(current_setting('redlock.nodes'), ','), 1) AS nodes;
-- the node lists used below, from the runner's nodes
SELECT current_setting('redlock.nodes') AS all_nodes,
       n[1] || ', ' || n[2] || ', ' || n[3] AS three_up,
       n[1] || ', ' || n[2] || ', 127.0.0.1:1' AS two_up_one_down,
       n[1] || ', 127.0.0.1:2, 127.0.0.1:1' AS one_up_two_down,
       n[5] AS single_node
  FROM string_to_array(current_setting('redlock.nodes'), ',') AS n \gset
SELECT name, setting, unit, context FROM pg_settings
 WHERE name LIKE 'redlock.%' AND name <> 'redlock.nodes' ORDER BY name;
SELECT :t1 > 0 AS positive_token;
SELECT redlock_try_lock('api:a') = :t1 AS reentrant_same_token;
SELECT redlock_lock('api:a', 1000) = :t1 AS lock_reenters_too;
-- (the default TTL, 30 s, less the drift allowance: 1% and 2 ms)
SELECT resource, token = :t1 AS same_token, scope, holds,
       validity_ms BETWEEN 1 AND 30000 - 302 AS validity_ok
  FROM redlock_leases;
SELECT redlock_unlock('api:a'), redlock_unlock('api:a');
SELECT count(*) FROM redlock_leases;	-- one hold left
SELECT redlock_unlock('api:a');
SELECT redlock_unlock('api:a');			-- not held: false and a warning
SELECT count(*) FROM redlock_leases;

-- every later grant of the resource gets a greater token
SELECT redlock_lock('api:a') AS t2 \gset
SELECT :t2 > :t1 AS increasing;
SELECT redlock_unlock('api:a');
SELECT redlock_try_lock('api:other') > :t2 AS increasing_across_resources;
SELECT redlock_unlock_all();
SELECT count(*) FROM redlock_leases;

-- transaction leases: released at COMMIT, ROLLBACK and on failure
BEGIN;
SELECT redlock_xact_lock('api:x') > 0 AS got;
SELECT resource, scope, holds FROM redlock_leases;
COMMIT;
SELECT count(*) FROM redlock_leases;
BEGIN;
SELECT redlock_try_xact_lock('api:x') > 0 AS got;
ROLLBACK;
SELECT count(*) FROM redlock_leases;
BEGIN;
SELECT redlock_try_xact_lock('api:x') > 0 AS got;
SELECT 1 / 0;
ROLLBACK;
SELECT count(*) FROM redlock_leases;
-- outside a transaction block the lease lasts one statement: a WARNING, as
-- for SET LOCAL there
SELECT redlock_xact_lock('api:x') > 0 AS got;
SELECT count(*) FROM redlock_leases;
SELECT redlock_try_xact_lock('api:x') > 0 AS got;
-- not in a function, procedure or DO block: they use it in their statement
DO $$ BEGIN PERFORM redlock_xact_lock('api:x'); END $$;
CREATE FUNCTION pg_temp.xact_lock_in_function() RETURNS boolean
LANGUAGE plpgsql AS $$ BEGIN RETURN redlock_try_xact_lock('api:x') > 0; END $$;
SELECT pg_temp.xact_lock_in_function() AS got;
SELECT count(*) FROM redlock_leases;

-- a transaction lease that ran out before COMMIT: a WARNING naming it (the
-- DETAIL's token varies: TAP 029 checks it); none at ROLLBACK
BEGIN;
SELECT redlock_xact_lock('api:late', 50) > 0 AS got;
SELECT pg_sleep(0.1);
\set VERBOSITY terse
COMMIT;
BEGIN;
SELECT redlock_xact_lock('api:late', 50) > 0 AS got;
SELECT pg_sleep(0.1);
ROLLBACK;
\set VERBOSITY default
SELECT count(*) FROM redlock_leases;

-- a session lease taken in a failed transaction stays (as advisory locks)
BEGIN;
SELECT redlock_lock('api:s') > 0 AS got;
SELECT 1 / 0;
ROLLBACK;
SELECT resource, scope FROM redlock_leases;
-- session and transaction holds of one resource share one lease
BEGIN;
SELECT redlock_xact_lock('api:s') IS NOT NULL AS got;
SELECT resource, scope, holds FROM redlock_leases;
COMMIT;
SELECT resource, scope, holds FROM redlock_leases;
SELECT redlock_unlock('api:s');

-- a transaction lease taken in a rolled-back subtransaction goes with it
BEGIN;
SELECT redlock_xact_lock('api:outer') > 0 AS got;
SAVEPOINT sp;
SELECT redlock_xact_lock('api:inner') > 0 AS got;
ROLLBACK TO SAVEPOINT sp;
SELECT resource FROM redlock_leases ORDER BY 1;
SAVEPOINT sp2;
SELECT redlock_xact_lock('api:kept') > 0 AS got;
RELEASE SAVEPOINT sp2;
SELECT resource FROM redlock_leases ORDER BY 1;
COMMIT;
SELECT count(*) FROM redlock_leases;

-- re-entry: the holds follow subtransactions, as a local lock's holds
-- follow their resource owners
BEGIN;
SELECT redlock_xact_lock('api:re') > 0 AS got;
SAVEPOINT sp;
SELECT redlock_xact_lock('api:re') > 0 AS got;
SELECT holds FROM redlock_leases WHERE resource = 'api:re';
ROLLBACK TO SAVEPOINT sp;
SELECT holds FROM redlock_leases WHERE resource = 'api:re';
-- blocks whose exception handler rolls back their own subtransaction
DO $$ BEGIN PERFORM redlock_xact_lock('api:re'); PERFORM 1 / 0;
EXCEPTION WHEN division_by_zero THEN NULL; END $$;
DO $$ BEGIN PERFORM redlock_xact_lock('api:re'); PERFORM 1 / 0;
EXCEPTION WHEN division_by_zero THEN NULL; END $$;
SELECT holds FROM redlock_leases WHERE resource = 'api:re';
-- a subtransaction that commits leaves its holds to its parent, and they
-- go when the parent rolls back
SAVEPOINT a;
SELECT redlock_xact_lock('api:re') > 0 AS got;
SAVEPOINT b;
SELECT redlock_xact_lock('api:re') > 0 AS got;
RELEASE SAVEPOINT b;
SELECT holds FROM redlock_leases WHERE resource = 'api:re';
ROLLBACK TO SAVEPOINT a;
SELECT holds FROM redlock_leases WHERE resource = 'api:re';
SAVEPOINT c;
SELECT redlock_xact_lock('api:re') > 0 AS got;
RELEASE SAVEPOINT c;
SELECT holds FROM redlock_leases WHERE resource = 'api:re';
COMMIT;
SELECT count(*) FROM redlock_leases;
-- a session hold taken in a subtransaction that rolls back stays
BEGIN;
SELECT redlock_xact_lock('api:re') > 0 AS got;
SAVEPOINT sp;
SELECT redlock_lock('api:re') > 0 AS got;
ROLLBACK TO SAVEPOINT sp;
SELECT scope, holds FROM redlock_leases WHERE resource = 'api:re';
COMMIT;
SELECT scope, holds FROM redlock_leases WHERE resource = 'api:re';
SELECT redlock_unlock('api:re');

-- transaction leases cannot survive PREPARE
BEGIN;
SELECT redlock_xact_lock('api:p') > 0 AS got;
PREPARE TRANSACTION 'p';
SELECT count(*) FROM redlock_leases;

-- extend
SELECT redlock_lock('api:e', 1000) > 0 AS got;
-- longer than the 1 s lease could be, at most the new TTL less its drift
SELECT redlock_extend('api:e', 20000) BETWEEN 1000 AND 20000 - 202 AS extended;
SELECT validity_ms BETWEEN 1000 AND 20000 - 202 AS longer FROM redlock_leases WHERE resource = 'api:e';
SELECT redlock_unlock('api:e');
SELECT pg_temp.outcome($$SELECT redlock_extend('api:none', 1000)$$);
-- a lease that ran out cannot be extended: it is lost, and keeps its hold
-- (as for re-locking) until it is unlocked
SELECT redlock_lock('api:short', 50) > 0 AS got;
SELECT pg_sleep(0.1);
SELECT validity_ms FROM redlock_leases WHERE resource = 'api:short';
SELECT pg_temp.outcome($$SELECT redlock_extend('api:short', 1000)$$);
SELECT holds, validity_ms FROM redlock_leases WHERE resource = 'api:short';
\set VERBOSITY terse
SELECT redlock_unlock('api:short');
\set VERBOSITY default
SELECT count(*) FROM redlock_leases;
-- re-locking an expired lease takes a new grant with a greater token
SELECT redlock_lock('api:short', 50) AS s1 \gset
SELECT pg_sleep(0.1);
SELECT redlock_lock('api:short', 5000) > :s1 AS new_grant_greater_token;
SELECT holds FROM redlock_leases WHERE resource = 'api:short';
SELECT redlock_unlock('api:short'), redlock_unlock('api:short');

-- bad arguments
SELECT pg_temp.outcome($$SELECT redlock_try_lock(NULL)$$);
SELECT pg_temp.outcome($$SELECT redlock_try_lock('')$$);
SELECT pg_temp.outcome($$SELECT redlock_lock('a', NULL)$$);
SELECT pg_temp.outcome($$SELECT redlock_lock('a', 0)$$);
SELECT pg_temp.outcome($$SELECT redlock_lock('a', -5)$$);
SELECT pg_temp.outcome($$SELECT redlock_lock('a', 9)$$);
SELECT pg_temp.outcome($$SELECT redlock_lock('a', 86400001)$$);
SELECT pg_temp.outcome($$SELECT redlock_xact_lock(NULL, 100)$$);
SELECT pg_temp.outcome($$SELECT redlock_extend('a', NULL)$$);
SELECT pg_temp.outcome($$SELECT redlock_unlock(NULL)$$);
SELECT pg_temp.outcome($$SELECT redlock_unlock('')$$);
SELECT pg_temp.outcome(format('SELECT redlock_try_lock(%L)', repeat('x', 513)));
SELECT pg_temp.outcome(format('SELECT redlock_try_lock(%L)', repeat('é', 257)));
-- every NULL argument is an error, keep_alive's too, in every signature;
-- only wait_ms takes NULL (its default: no limit of its own)
SELECT pg_temp.outcome($$SELECT redlock_try_lock('api:n', 1000, NULL)$$);
SELECT pg_temp.outcome($$SELECT redlock_try_xact_lock('api:n', 1000, NULL)$$);
SELECT pg_temp.outcome($$SELECT redlock_lock('api:n', 1000, 0, NULL)$$);
SELECT pg_temp.outcome($$SELECT redlock_xact_lock('api:n', 1000, 0, NULL)$$);
SELECT pg_temp.outcome($$SELECT redlock_lock('api:n', NULL, 0, false)$$);
SELECT pg_temp.outcome($$SELECT redlock_try_xact_lock(NULL, 1000, false)$$);
SELECT pg_temp.outcome($$SELECT redlock_extend(NULL, 1000)$$);
SELECT pg_temp.outcome($$SELECT redlock_holder(NULL)$$);
SELECT count(*) FROM redlock_leases;	-- none was taken
SELECT redlock_lock('api:n', 1000, NULL) > 0 AS null_wait_ms_is_no_limit;
SELECT redlock_unlock('api:n');
-- the limit itself, multi-byte names, and names that look like syntax
SELECT redlock_try_lock(repeat('x', 512)) > 0 AS at_limit;
SELECT redlock_try_lock('ключ-日本-🔒') > 0 AS multibyte;
SELECT redlock_try_lock($$*"'; redis.call('FLUSHALL') --$$) > 0 AS lua_like;
SELECT redlock_try_lock(E'a\r\n*1\r\n$8\r\nFLUSHALL\r\n') > 0 AS resp_like;
SELECT count(*) FROM redlock_leases;
SELECT redlock_unlock_all();

-- lease functions refuse to run in parallel mode, where a function wrongly
-- marked PARALLEL SAFE takes them: a worker's lease would end with the
-- worker (debug_parallel_query was force_parallel_mode before 16)
CREATE FUNCTION wrongly_safe_lock(r text) RETURNS bigint
LANGUAGE plpgsql PARALLEL SAFE AS $$ BEGIN RETURN redlock_try_lock(r, 5000); END $$;
CREATE FUNCTION wrongly_safe_unlock(r text) RETURNS boolean
LANGUAGE plpgsql PARALLEL SAFE AS $$ BEGIN RETURN redlock_unlock(r); END $$;
SELECT redlock_lock('api:par') > 0 AS got;
SELECT set_config(CASE WHEN current_setting('server_version_num')::int >= 160000
                       THEN 'debug_parallel_query' ELSE 'force_parallel_mode' END,
                  'on', false) AS parallel;
SELECT pg_temp.outcome($$SELECT wrongly_safe_lock('api:parallel')$$);
SELECT pg_temp.outcome($$SELECT wrongly_safe_unlock('api:par')$$);
SELECT pg_temp.outcome($$SELECT wrongly_safe_lock('api:parallel') FROM generate_series(1, 3)$$);
SELECT set_config(CASE WHEN current_setting('server_version_num')::int >= 160000
                       THEN 'debug_parallel_query' ELSE 'force_parallel_mode' END,
                  'off', false) AS parallel;
SELECT resource FROM redlock_leases ORDER BY 1;
SELECT wrongly_safe_lock('api:parallel') > 0 AS outside_parallel_mode_it_works;
SELECT redlock_unlock_all();
DROP FUNCTION wrongly_safe_lock(text), wrongly_safe_unlock(text);

-- settings: bad values are rejected when set, and the old value stays
SET redlock.nodes = 'localhost';
SET redlock.nodes = '127.0.0.1:0';
SET redlock.nodes = '127.0.0.1:65536';
SET redlock.nodes = '127.0.0.1:6379,,127.0.0.1:6380';
SET redlock.nodes = '127.0.0.1:6379,';
SET redlock.nodes = '127.0.0.1:6379, 127.0.0.1:6379';
SET redlock.nodes = 'ho st:1';
SET redlock.nodes = '[::1:6379';
SET redlock.nodes = '127.0.0.1:6379x';
SET redlock.nodes = '10.0.0.1:1,10.0.0.2:1,10.0.0.3:1,10.0.0.4:1,10.0.0.5:1,10.0.0.6:1,10.0.0.7:1,10.0.0.8:1,10.0.0.9:1,10.0.0.10:1,10.0.0.11:1,10.0.0.12:1,10.0.0.13:1,10.0.0.14:1,10.0.0.15:1,10.0.0.16:1';
-- hosts: digits and dots must make an IPv4 address, brackets an IPv6
-- address, anything else a DNS host name (labels of 1 to 63 letters,
-- digits and hyphens, not starting or ending with a hyphen; 253 bytes)
SET redlock.nodes = '127.0.0.256:6379';
SET redlock.nodes = '127.0.0.1.1:6379';
SET redlock.nodes = '10.1:6379';
SET redlock.nodes = '010.0.0.1:6379';
SET redlock.nodes = '1:1';
SET redlock.nodes = '[127.0.0.1]:6379';
SET redlock.nodes = '[::1::2]:6379';
SET redlock.nodes = '[fe80::1%eth0]:6379';
SET redlock.nodes = 'redis_1:6379';
SET redlock.nodes = '-redis:6379';
SET redlock.nodes = 'redis-.example.com:6379';
SET redlock.nodes = 'a..b:6379';
SET redlock.nodes = 'redis.example.com.:6379';
SET redlock.nodes = 'höst:6379';
SELECT set_config('redlock.nodes', repeat('a', 64) || '.example:6379', false);
SELECT set_config('redlock.nodes', repeat(repeat('a', 63) || '.', 3) || repeat('b', 62) || ':6379', false);
SELECT current_setting('redlock.nodes') = :'all_nodes' AS nodes_unchanged;
-- and the longest, the shortest and the unusual that are valid
SELECT set_config('redlock.nodes', repeat(repeat('a', 63) || '.', 3) || repeat('b', 61) || ':1,'
	|| 'r:2, redis-1.example.com:3, [::1]:4, [::ffff:10.0.0.1]:5, 255.255.255.255:6,'
	|| '0.0.0.0:7, 1e100.example:8, xn--bcher-kva.example:9, [FE80::1]:10', false) IS NOT NULL AS accepted;
RESET redlock.nodes;
SET redlock.connect_timeout = 'soon';
-- out of range: PostgreSQL 17 added the unit to the range in this message,
-- "(1 ms .. 60000 ms)"; the bounds are what we check, so print them bare
CREATE FUNCTION pg_temp.range_outcome(q text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
	EXECUTE q;
	RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
	RETURN SQLSTATE || ': ' || regexp_replace(SQLERRM,
		'\((-?[0-9.]+)( [a-z]+)? \.\. (-?[0-9.]+)( [a-z]+)?\)$', '(\1 .. \3)');
END $$;
SELECT pg_temp.range_outcome($$SET redlock.connect_timeout = 0$$);
SELECT pg_temp.range_outcome($$SET redlock.node_timeout = -1$$);
SET redlock.drift_factor = 2;
SET redlock.drift_factor = 'NaN';
SELECT pg_temp.range_outcome($$SET redlock.retry_delay = 0$$);
SELECT pg_temp.range_outcome($$SET redlock.retry_jitter = -1$$);
SET redlock.key_prefix = '';
SET redlock.key_prefix = 'a*b:';
SET redlock.key_prefix = 'has space:';
SET redlock.username = E'bad\nname';
SET redlock.fence_token = '0';
SET redlock.fence_token = '-1';
SET redlock.fence_token = 'abc';
SET redlock.fence_token = '9223372036854775808';
SET redlock.fence_token = '9223372036854775807';
SHOW redlock.fence_token;
RESET redlock.fence_token;
SELECT name, setting FROM pg_settings
 WHERE name IN ('redlock.connect_timeout', 'redlock.node_timeout',
                'redlock.drift_factor', 'redlock.key_prefix') ORDER BY name;

-- unset nodes: a clear error with a hint
SET redlock.nodes = '';
SELECT redlock_try_lock('api:a');
SELECT redlock_unlock('api:a');
RESET redlock.nodes;

-- a new node list applies to the next call; leases on the old list go
SELECT redlock_lock('api:moving') > 0 AS got;
SET redlock.nodes = :'three_up';
SELECT redlock_try_lock('api:three') > 0 AS got_on_three_nodes;
SELECT resource FROM redlock_leases;
SELECT redlock_unlock_all();

-- one node of three refusing connections still grants; two do not
SET redlock.nodes = :'two_up_one_down';
SELECT redlock_try_lock('api:degraded') > 0 AS granted_with_one_down;
SELECT redlock_unlock('api:degraded');
SET redlock.nodes = :'one_up_two_down';
\set VERBOSITY terse
SELECT redlock_try_lock('api:degraded');
\set VERBOSITY default
SELECT pg_temp.outcome($$SELECT redlock_lock('api:degraded')$$);
SELECT count(*) FROM redlock_leases;
-- a single node is the efficiency-lock configuration
SET redlock.nodes = :'single_node';
SELECT redlock_try_lock('api:single') > 0 AS single_node;
SELECT redlock_unlock('api:single');
RESET redlock.nodes;
