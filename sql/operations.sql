--
-- Operating redlock: statistics (the runner preloads the library), node
-- health, and who may do what.
--
CREATE EXTENSION dblink;
CREATE FUNCTION pg_temp.outcome(q text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
	EXECUTE q;
	RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
	RETURN SQLSTATE || ': ' || SQLERRM;
END $$;

-- the runner's nodes listen on ports that vary per run: the node lists
-- used below, from its first node
SELECT n1 AS node1, '127.0.0.1:1, 127.0.0.1:2, ' || n1 AS two_down_one_up,
       n1 || ', 127.0.0.1:1' AS one_up_one_down
  FROM split_part(current_setting('redlock.nodes'), ',', 1) AS n1 \gset

-- a second session, to hold what this one asks for
SELECT dblink_connect('other', format('host=%s port=%s dbname=%s',
	split_part(current_setting('unix_socket_directories'), ',', 1),
	current_setting('port'), current_database()));

-- ---------- statistics ----------
SELECT redlock_stats_reset();
SELECT redlock_try_lock('ops:a') > 0 AS granted;
SELECT redlock_try_lock('ops:a') > 0 AS reentered;	-- no Redis round: not counted
SELECT redlock_unlock('ops:a'), redlock_unlock('ops:a');
SELECT * FROM dblink('other', $$SELECT redlock_lock('ops:held') > 0$$) AS t(held boolean);
SELECT redlock_try_lock('ops:held') IS NULL AS refused_held;
SET lock_timeout = '100ms';
SELECT pg_temp.outcome($$SELECT redlock_lock('ops:held')$$);
RESET lock_timeout;
SELECT redlock_lock('ops:e', 5000) > 0 AS granted;
SELECT redlock_extend('ops:e', 5000) > 0 AS extended;
SELECT redlock_unlock('ops:e');
SET redlock.nodes = :'two_down_one_up';
SELECT pg_temp.outcome($$SELECT redlock_try_lock('ops:none')$$);
RESET redlock.nodes;
SELECT acquires, attempts, grants, refused_held, refused_no_quorum,
       refused_timeout, refused_error, extends, extend_failures, releases
  FROM redlock_stats WHERE datname = current_database();
-- every acquire call lands in one latency bucket
SELECT sum(count) AS calls_in_histogram, count(*) AS buckets,
       count(*) FILTER (WHERE le_ms IS NULL) AS open_buckets
  FROM redlock_stats_latency WHERE datname = current_database();

-- fence rejections, per table
CREATE TABLE ops_acct (id int PRIMARY KEY, v int, fence_token bigint);
CREATE TRIGGER fence BEFORE UPDATE OR DELETE ON ops_acct
	FOR EACH ROW EXECUTE FUNCTION redlock_fence();
INSERT INTO ops_acct VALUES (1, 0, 10);
SELECT pg_temp.outcome($$UPDATE ops_acct SET v = 1, fence_token = 9 WHERE id = 1$$);
SELECT pg_temp.outcome($$DELETE FROM ops_acct WHERE id = 1$$);
SELECT relname, rejections FROM redlock_stats_fence WHERE relname = 'ops_acct';
SELECT fence_rejections FROM redlock_stats WHERE datname = current_database();
-- a dropped table keeps its count, without a name
CREATE TABLE ops_gone (fence_token bigint);
CREATE TRIGGER fence BEFORE DELETE ON ops_gone FOR EACH ROW EXECUTE FUNCTION redlock_fence();
INSERT INTO ops_gone VALUES (1);
SELECT pg_temp.outcome($$DELETE FROM ops_gone$$);
SELECT 'ops_gone'::regclass::oid AS gone_oid \gset
DROP TABLE ops_gone;
SELECT relname IS NULL AS nameless, rejections FROM redlock_stats_fence WHERE relid = :gone_oid;
SELECT redlock_stats_reset();
SELECT acquires + grants + fence_rejections AS after_reset, stats_reset > now() - interval '1 minute' AS reset_now
  FROM redlock_stats WHERE datname = current_database();
-- the reset empties the table of fenced tables (entries of dropped tables
-- would otherwise hold it); a table is tracked again at its next rejection
SELECT count(*) AS fenced_tables_after_reset FROM redlock_stats_fence;
SELECT pg_temp.outcome($$UPDATE ops_acct SET v = 1, fence_token = 9 WHERE id = 1$$);
SELECT relname, rejections FROM redlock_stats_fence WHERE relname = 'ops_acct';
-- the tables' sizes and what did not fit in them (nothing, here)
SELECT databases_max, tables_max, tables_tracked, database_events_untracked,
       table_rejections_untracked,
       stats_reset = (SELECT stats_reset FROM redlock_stats
                       WHERE datname = current_database()) AS same_reset
  FROM redlock_stats_info;

-- ---------- node health ----------
SELECT array_position(string_to_array(current_setting('redlock.nodes'), ','), node) AS n,
       reachable, redis_version IS NOT NULL AS has_version, role,
       maxmemory_policy, persistence, warnings, error
  FROM redlock_nodes ORDER BY n;
-- which server each node is: Valkey when the tests run valkey-server
-- (run-tests.sh --redis-server exports REDLOCK_REDIS_SERVER), else Redis
\set server_binary redis-server
\getenv server_binary REDLOCK_REDIS_SERVER
SELECT count(*) AS nodes,
       bool_and(server ~ ('^' || CASE WHEN :'server_binary' LIKE '%valkey%'
                                      THEN 'Valkey' ELSE 'Redis' END
                           || ' [0-9]+\.[0-9]+\.[0-9]+$')) AS server_named
  FROM redlock_nodes;
SET redlock.nodes = :'one_up_one_down';
SELECT CASE node WHEN :'node1' THEN 'node1' ELSE node END AS node,
       reachable, rtt_ms IS NULL AS no_rtt, error, server IS NULL AS no_server
  FROM redlock_nodes ORDER BY node = :'node1';
RESET redlock.nodes;
-- the nodes' health across the server, from what requests met (no node is
-- asked): the node that refused the probes above is failing, and says why
SELECT state, failing_since IS NOT NULL AS since, requests > 0 AS asked,
       errors_refused > 0 AS refused, errors_timeout + errors_redis + errors_tls
       + errors_resolve + errors_other AS other_errors, last_error,
       last_error_at IS NOT NULL AS error_time, last_success_at IS NULL AS never_answered
  FROM redlock_stats_nodes WHERE node = '127.0.0.1:1';
SELECT count(*) AS configured_nodes_seen, bool_and(last_success_at IS NOT NULL) AS answered
  FROM redlock_stats_nodes
 WHERE node = ANY (string_to_array(current_setting('redlock.nodes'), ','));

-- ---------- privileges ----------
CREATE ROLE regress_redlock_alice;
SET ROLE regress_redlock_alice;
-- without redlock_user: no leases, no node details
SELECT pg_temp.outcome($$SELECT redlock_try_lock('ops:p')$$);
SELECT pg_temp.outcome($$SELECT redlock_lock('ops:p')$$);
SELECT pg_temp.outcome($$SELECT redlock_xact_lock('ops:p')$$);
SELECT pg_temp.outcome($$SELECT redlock_unlock('ops:p')$$);
SELECT pg_temp.outcome($$SELECT redlock_extend('ops:p', 1000)$$);
SELECT pg_temp.outcome($$SELECT * FROM redlock_nodes$$);
SELECT pg_temp.outcome($$SELECT * FROM redlock_stats_nodes$$);
-- harmless reads are public
SELECT count(*) FROM redlock_leases;
SELECT count(*) > 0 AS sees_stats FROM redlock_stats;
SELECT count(*) AS sees_stats_info FROM redlock_stats_info;
-- statistics reset is not granted to PUBLIC (a superuser may grant it)
SELECT pg_temp.outcome($$SELECT redlock_stats_reset()$$);
-- settings: only superusers set them; the password is hidden
SELECT pg_temp.outcome($$SET redlock.nodes = '127.0.0.1:6379'$$);
SELECT pg_temp.outcome($$SET redlock.node_timeout = 10$$);
SELECT pg_temp.outcome($$SET redlock.key_prefix = 'mine:'$$);
SELECT pg_temp.outcome($$SET redlock.password = 'x'$$);
-- (PostgreSQL 16 reworded the refusal to read it: print its SQLSTATE and
-- the setting it names)
SELECT regexp_replace(pg_temp.outcome($$SHOW redlock.password$$),
                      ': .*("[^"]*")$', ': \1') AS outcome;
SELECT count(*) AS password_rows FROM pg_settings WHERE name = 'redlock.password';
SELECT regexp_replace(pg_temp.outcome($$SELECT current_setting('redlock.password')$$),
                      ': .*("[^"]*")$', ': \1') AS outcome;
-- the fence token is the user's own
SET redlock.fence_token = 42;
SHOW redlock.fence_token;
RESET redlock.fence_token;
RESET ROLE;
-- granted redlock_user: leases and node details
GRANT redlock_user TO regress_redlock_alice;
SET ROLE regress_redlock_alice;
SELECT redlock_try_lock('ops:p') > 0 AS granted;
SELECT redlock_unlock('ops:p');
SELECT count(*) AS nodes_visible FROM redlock_nodes;
SELECT count(*) > 0 AS node_health_visible FROM redlock_stats_nodes;
SELECT pg_temp.outcome($$SELECT redlock_stats_reset()$$);
RESET ROLE;
DROP ROLE regress_redlock_alice;

SELECT dblink_disconnect('other');
DROP TABLE ops_acct;
DROP EXTENSION dblink;
