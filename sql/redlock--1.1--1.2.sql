/* redlock 1.1 -> 1.2 */
\echo Use "ALTER EXTENSION redlock UPDATE TO '1.2'" to load this file. \quit

-- The restart quarantine rests on each node's epoch, a key on the node
-- itself (when its present memory began): redlock_nodes and
-- redlock_stats_nodes show it in three new columns, epoch_since,
-- epoch_run_id and epoch_reason.
DROP VIEW redlock_nodes;
DROP FUNCTION redlock_nodes();
CREATE FUNCTION redlock_nodes(
    OUT node text,
    OUT reachable boolean,
    OUT rtt_ms double precision,
    OUT redis_version text,
    OUT role text,
    OUT maxmemory_policy text,
    OUT persistence text,
    OUT warnings text[],
    OUT error text,
    OUT server text,
    OUT quarantined_until timestamptz,
    OUT epoch_since timestamptz,
    OUT epoch_run_id text,
    OUT epoch_reason text)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'redlock_nodes'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
CREATE VIEW redlock_nodes AS
    SELECT * FROM redlock_nodes();
REVOKE ALL ON FUNCTION redlock_nodes() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION redlock_nodes() TO redlock_user, pg_monitor;
GRANT SELECT ON redlock_nodes TO redlock_user, pg_monitor;

DROP VIEW redlock_stats_nodes;
DROP FUNCTION redlock_stats_nodes();
CREATE FUNCTION redlock_stats_nodes(
    OUT node text,
    OUT state text,
    OUT failing_since timestamptz,
    OUT requests bigint,
    OUT errors_refused bigint,
    OUT errors_timeout bigint,
    OUT errors_redis bigint,
    OUT errors_tls bigint,
    OUT errors_resolve bigint,
    OUT errors_other bigint,
    OUT last_error text,
    OUT last_error_at timestamptz,
    OUT last_success_at timestamptz,
    OUT quarantined_until timestamptz,
    OUT tracked_since timestamptz,
    OUT epoch_since timestamptz,
    OUT epoch_run_id text,
    OUT epoch_reason text)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'redlock_stats_nodes'
LANGUAGE C VOLATILE PARALLEL SAFE;
CREATE VIEW redlock_stats_nodes AS
    SELECT * FROM redlock_stats_nodes();
REVOKE ALL ON FUNCTION redlock_stats_nodes() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION redlock_stats_nodes() TO redlock_user, pg_monitor;
GRANT SELECT ON redlock_stats_nodes TO redlock_user, pg_monitor;
