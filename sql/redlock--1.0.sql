/* redlock--1.0.sql */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION redlock" to load this file. \quit

-- Leases.  Not STRICT: a NULL argument is an error, never a silent NULL.

CREATE FUNCTION redlock_lock(resource text, ttl_ms integer DEFAULT 30000)
RETURNS bigint
AS 'MODULE_PATHNAME', 'redlock_lock'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION redlock_try_lock(resource text, ttl_ms integer DEFAULT 30000)
RETURNS bigint
AS 'MODULE_PATHNAME', 'redlock_try_lock'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION redlock_xact_lock(resource text, ttl_ms integer DEFAULT 30000)
RETURNS bigint
AS 'MODULE_PATHNAME', 'redlock_xact_lock'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION redlock_try_xact_lock(resource text, ttl_ms integer DEFAULT 30000)
RETURNS bigint
AS 'MODULE_PATHNAME', 'redlock_try_xact_lock'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION redlock_unlock(resource text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'redlock_unlock'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION redlock_unlock_all()
RETURNS void
AS 'MODULE_PATHNAME', 'redlock_unlock_all'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION redlock_extend(resource text, ttl_ms integer)
RETURNS integer
AS 'MODULE_PATHNAME', 'redlock_extend'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION redlock_leases(
    OUT resource text,
    OUT token bigint,
    OUT scope text,
    OUT holds integer,
    OUT validity_ms integer)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'redlock_leases'
LANGUAGE C VOLATILE PARALLEL RESTRICTED;

CREATE VIEW redlock_leases AS
    SELECT * FROM redlock_leases();

-- Fenced writes: BEFORE ROW trigger rejecting stale tokens (src/fence.c).
CREATE FUNCTION redlock_fence()
RETURNS trigger
AS 'MODULE_PATHNAME', 'redlock_fence'
LANGUAGE C;

-- Node health: one row per configured node, probed now.
CREATE FUNCTION redlock_nodes(
    OUT node text,
    OUT reachable boolean,
    OUT rtt_ms double precision,
    OUT redis_version text,
    OUT role text,
    OUT maxmemory_policy text,
    OUT persistence text,
    OUT warnings text[],
    OUT error text)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'redlock_nodes'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE VIEW redlock_nodes AS
    SELECT * FROM redlock_nodes();

-- Statistics (need redlock in shared_preload_libraries).
CREATE FUNCTION redlock_stats(
    OUT datid oid,
    OUT acquires bigint,
    OUT attempts bigint,
    OUT grants bigint,
    OUT refused_held bigint,
    OUT refused_no_quorum bigint,
    OUT refused_timeout bigint,
    OUT refused_error bigint,
    OUT extends bigint,
    OUT extend_failures bigint,
    OUT releases bigint,
    OUT fence_rejections bigint,
    OUT stats_reset timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'redlock_stats'
LANGUAGE C VOLATILE PARALLEL SAFE;

CREATE FUNCTION redlock_stats_latency(
    OUT datid oid,
    OUT bucket integer,
    OUT le_ms double precision,
    OUT count bigint)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'redlock_stats_latency'
LANGUAGE C VOLATILE PARALLEL SAFE;

CREATE FUNCTION redlock_stats_fence(
    OUT datid oid,
    OUT relid oid,
    OUT rejections bigint)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'redlock_stats_fence'
LANGUAGE C VOLATILE PARALLEL SAFE;

CREATE FUNCTION redlock_stats_reset()
RETURNS void
AS 'MODULE_PATHNAME', 'redlock_stats_reset'
LANGUAGE C VOLATILE PARALLEL SAFE;

CREATE VIEW redlock_stats AS
    SELECT s.datid, d.datname, s.acquires, s.attempts, s.grants,
           s.refused_held, s.refused_no_quorum, s.refused_timeout,
           s.refused_error, s.extends, s.extend_failures, s.releases,
           s.fence_rejections, s.stats_reset
      FROM redlock_stats() s LEFT JOIN pg_database d ON d.oid = s.datid;

-- le_ms: upper bound of the bucket in milliseconds (NULL: unbounded)
CREATE VIEW redlock_stats_latency AS
    SELECT s.datid, d.datname, s.bucket, s.le_ms, s.count
      FROM redlock_stats_latency() s LEFT JOIN pg_database d ON d.oid = s.datid;

-- relname is known only for existing tables of the current database
CREATE VIEW redlock_stats_fence AS
    SELECT s.datid, d.datname, s.relid,
           CASE WHEN d.datname = current_database()
                THEN (SELECT c.oid::regclass::text FROM pg_class c
                       WHERE c.oid = s.relid) END AS relname,
           s.rejections
      FROM redlock_stats_fence() s LEFT JOIN pg_database d ON d.oid = s.datid;

-- Privileges.  Taking leases is granted through the role redlock_user
-- (created here if missing; roles are cluster-wide and outlive DROP
-- EXTENSION).  Harmless reads stay public: one's own leases, statistics.
-- Node addresses and settings are for redlock_user and pg_monitor.
-- Resetting statistics is for superusers only.
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'redlock_user') THEN
        CREATE ROLE redlock_user NOLOGIN;
    END IF;
END
$$;

REVOKE ALL ON FUNCTION
    redlock_lock(text, integer), redlock_try_lock(text, integer),
    redlock_xact_lock(text, integer), redlock_try_xact_lock(text, integer),
    redlock_unlock(text), redlock_unlock_all(), redlock_extend(text, integer),
    redlock_nodes(), redlock_stats_reset()
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    redlock_lock(text, integer), redlock_try_lock(text, integer),
    redlock_xact_lock(text, integer), redlock_try_xact_lock(text, integer),
    redlock_unlock(text), redlock_unlock_all(), redlock_extend(text, integer),
    redlock_nodes()
    TO redlock_user;
GRANT EXECUTE ON FUNCTION redlock_nodes() TO pg_monitor;
GRANT SELECT ON redlock_nodes TO redlock_user, pg_monitor;
GRANT SELECT ON redlock_leases, redlock_stats, redlock_stats_latency,
    redlock_stats_fence TO PUBLIC;
