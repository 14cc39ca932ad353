/* redlock--1.0--1.1.sql */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION redlock UPDATE TO '1.1'" to load this file. \quit

-- How full the statistics tables in shared memory are, and what did not fit
-- (need redlock in shared_preload_libraries).  The tables hold
-- redlock.stats_max_databases databases and redlock.stats_max_tables fenced
-- tables; events of databases and rejections on tables that find them full
-- are counted here instead.
CREATE FUNCTION redlock_stats_info(
    OUT databases_tracked integer,
    OUT databases_max integer,
    OUT database_events_untracked bigint,
    OUT tables_tracked integer,
    OUT tables_max integer,
    OUT table_rejections_untracked bigint,
    OUT stats_reset timestamptz)
RETURNS record
AS 'MODULE_PATHNAME', 'redlock_stats_info'
LANGUAGE C VOLATILE PARALLEL SAFE;

CREATE VIEW redlock_stats_info AS
    SELECT * FROM redlock_stats_info();

-- a harmless read, public like the other statistics views
GRANT SELECT ON redlock_stats_info TO PUBLIC;

-- The lock functions gain wait_ms (a wait limit of the call's own, since
-- lock_timeout also governs table and row locks) and keep_alive (the
-- keep-alive worker extends the lease while the backend lives; needs
-- redlock in shared_preload_libraries).
DROP FUNCTION redlock_lock(text, integer);
DROP FUNCTION redlock_xact_lock(text, integer);
DROP FUNCTION redlock_try_lock(text, integer);
DROP FUNCTION redlock_try_xact_lock(text, integer);

CREATE FUNCTION redlock_lock(resource text, ttl_ms integer DEFAULT 30000,
                             wait_ms integer DEFAULT NULL,
                             keep_alive boolean DEFAULT false)
RETURNS bigint
AS 'MODULE_PATHNAME', 'redlock_lock'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION redlock_xact_lock(resource text, ttl_ms integer DEFAULT 30000,
                                  wait_ms integer DEFAULT NULL,
                                  keep_alive boolean DEFAULT false)
RETURNS bigint
AS 'MODULE_PATHNAME', 'redlock_xact_lock'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION redlock_try_lock(resource text, ttl_ms integer DEFAULT 30000,
                                 keep_alive boolean DEFAULT false)
RETURNS bigint
AS 'MODULE_PATHNAME', 'redlock_try_lock'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION redlock_try_xact_lock(resource text, ttl_ms integer DEFAULT 30000,
                                      keep_alive boolean DEFAULT false)
RETURNS bigint
AS 'MODULE_PATHNAME', 'redlock_try_xact_lock'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

REVOKE ALL ON FUNCTION
    redlock_lock(text, integer, integer, boolean),
    redlock_xact_lock(text, integer, integer, boolean),
    redlock_try_lock(text, integer, boolean),
    redlock_try_xact_lock(text, integer, boolean)
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    redlock_lock(text, integer, integer, boolean),
    redlock_xact_lock(text, integer, integer, boolean),
    redlock_try_lock(text, integer, boolean),
    redlock_try_xact_lock(text, integer, boolean)
    TO redlock_user;

-- redlock_leases shows keep-alive leases and whether the worker lost one.
DROP VIEW redlock_leases;
DROP FUNCTION redlock_leases();
CREATE FUNCTION redlock_leases(
    OUT resource text,
    OUT token bigint,
    OUT scope text,
    OUT holds integer,
    OUT validity_ms integer,
    OUT keep_alive boolean,
    OUT lost boolean)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'redlock_leases'
LANGUAGE C VOLATILE PARALLEL RESTRICTED;

CREATE VIEW redlock_leases AS
    SELECT * FROM redlock_leases();
GRANT SELECT ON redlock_leases TO PUBLIC;

-- Every lease held or awaited by every backend of this server, like
-- pg_locks (needs redlock in shared_preload_libraries).
CREATE FUNCTION redlock_locks(
    OUT pid integer,
    OUT datid oid,
    OUT usesysid oid,
    OUT resource text,
    OUT granted boolean,
    OUT token bigint,
    OUT scope text,
    OUT waitstart timestamptz,
    OUT granted_at timestamptz,
    OUT valid_until timestamptz,
    OUT keep_alive boolean,
    OUT lost boolean)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'redlock_locks'
LANGUAGE C VOLATILE PARALLEL SAFE;

CREATE VIEW redlock_locks AS
    SELECT l.pid, l.datid, d.datname, l.usesysid, r.rolname AS usename,
           l.resource, l.granted, l.token, l.scope, l.waitstart,
           l.granted_at, l.valid_until, l.keep_alive, l.lost
      FROM redlock_locks() l
      LEFT JOIN pg_database d ON d.oid = l.datid
      LEFT JOIN pg_roles r ON r.oid = l.usesysid;

REVOKE ALL ON FUNCTION redlock_locks() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION redlock_locks() TO redlock_user, pg_monitor;
GRANT SELECT ON redlock_locks TO redlock_user, pg_monitor;

-- Who holds a resource, as each node that has its lock says, whichever
-- server sharing the nodes took it: the lock's value names the holder's
-- server (system identifier), database and process.
CREATE FUNCTION redlock_holder(
    resource text,
    OUT node text,
    OUT system_identifier bigint,
    OUT datid oid,
    OUT pid integer,
    OUT remaining_ms integer,
    OUT this_server boolean)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'redlock_holder'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

REVOKE ALL ON FUNCTION redlock_holder(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION redlock_holder(text) TO redlock_user, pg_monitor;

-- redlock_nodes says which server each node is (Redis or Valkey, and its
-- version): a new last column, server.
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
    OUT server text)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'redlock_nodes'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
CREATE VIEW redlock_nodes AS
    SELECT * FROM redlock_nodes();
REVOKE ALL ON FUNCTION redlock_nodes() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION redlock_nodes() TO redlock_user, pg_monitor;
GRANT SELECT ON redlock_nodes TO redlock_user, pg_monitor;
