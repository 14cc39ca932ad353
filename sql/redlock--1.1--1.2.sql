/* redlock 1.1 -> 1.2 */
\echo Use "ALTER EXTENSION redlock UPDATE TO '1.2'" to load this file. \quit

-- Objects of 1.1 that this update replaces (their column lists grow): a
-- user object that depends on one of them, such as a view over
-- redlock_nodes, would make the DROP fail with a hint to use CASCADE.  Say
-- instead what blocks the update and how to proceed, as 1.0 -> 1.1 does.
DO $$
DECLARE
    blockers text;
BEGIN
    SELECT pg_catalog.string_agg(DISTINCT
               CASE WHEN d.classid = 'pg_catalog.pg_rewrite'::pg_catalog.regclass
                    THEN pg_catalog.pg_describe_object('pg_catalog.pg_class'::pg_catalog.regclass,
                                                       (SELECT r.ev_class FROM pg_catalog.pg_rewrite r
                                                         WHERE r.oid = d.objid), 0)
                    ELSE pg_catalog.pg_describe_object(d.classid, d.objid, d.objsubid) END,
               ', ')
      INTO blockers
      FROM pg_catalog.pg_depend d
     WHERE d.deptype = 'n'
       AND ((d.refclassid = 'pg_catalog.pg_proc'::pg_catalog.regclass
             AND d.refobjid IN ('redlock_nodes()'::pg_catalog.regprocedure,
                                'redlock_stats_nodes()'::pg_catalog.regprocedure))
            OR (d.refclassid = 'pg_catalog.pg_class'::pg_catalog.regclass
                AND d.refobjid IN ('redlock_nodes'::pg_catalog.regclass,
                                   'redlock_stats_nodes'::pg_catalog.regclass)))
       -- the extension's own objects (the views' rules) do not count
       AND NOT EXISTS (
           SELECT FROM pg_catalog.pg_depend e
            WHERE e.refclassid = 'pg_catalog.pg_extension'::pg_catalog.regclass
              AND e.deptype = 'e'
              AND ((e.classid = d.classid AND e.objid = d.objid)
                   OR (d.classid = 'pg_catalog.pg_rewrite'::pg_catalog.regclass
                       AND e.classid = 'pg_catalog.pg_class'::pg_catalog.regclass
                       AND e.objid = (SELECT r.ev_class FROM pg_catalog.pg_rewrite r
                                       WHERE r.oid = d.objid))));
    IF blockers IS NOT NULL THEN
        RAISE EXCEPTION 'cannot update extension redlock to version 1.2 while other objects depend on objects it replaces'
            USING ERRCODE = 'dependent_objects_still_exist',
                  DETAIL = 'Version 1.2 replaces redlock_nodes() and redlock_stats_nodes() and their views; these depend on them: ' || blockers || '.',
                  HINT = 'Save the definitions of those objects, drop them, run ALTER EXTENSION redlock UPDATE, and create them again: the columns they use are unchanged.';
    END IF;
END
$$;

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

-- Waiters of every server sharing the nodes queue in one order, kept on
-- the nodes: redlock_locks shows each waiter's place in line (1: next), in
-- a new column, place.
DROP VIEW redlock_locks;
DROP FUNCTION redlock_locks();
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
    OUT lost boolean,
    OUT key text,
    OUT limit_reached boolean,
    OUT place integer)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'redlock_locks'
LANGUAGE C VOLATILE PARALLEL SAFE;
CREATE VIEW redlock_locks AS
    SELECT l.pid, l.datid, d.datname, l.usesysid, r.rolname AS usename,
           l.resource, l.key, l.granted, l.token, l.scope, l.waitstart,
           l.place, l.granted_at, l.valid_until, l.keep_alive, l.lost,
           l.limit_reached
      FROM redlock_locks() l
      LEFT JOIN pg_database d ON d.oid = l.datid
      LEFT JOIN pg_roles r ON r.oid = l.usesysid;
REVOKE ALL ON FUNCTION redlock_locks() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION redlock_locks() TO redlock_user, pg_monitor;
GRANT SELECT ON redlock_locks TO redlock_user, pg_monitor;

-- Several resources at once, all or none (a node grants the whole set or
-- nothing; the set is granted on a majority of nodes that granted all of
-- it).  The same names as the one-resource forms, over text[]: one token
-- per resource, in the order given.  A call with an untyped literal, such
-- as redlock_lock('a'), still means the one-resource form; write
-- ARRAY['a', 'b'] or '{a,b}'::text[].
CREATE FUNCTION redlock_lock(resources text[], ttl_ms integer DEFAULT 30000,
                             wait_ms integer DEFAULT NULL,
                             keep_alive boolean DEFAULT false)
RETURNS bigint[]
AS 'MODULE_PATHNAME', 'redlock_lock_multi'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION redlock_xact_lock(resources text[], ttl_ms integer DEFAULT 30000,
                                  wait_ms integer DEFAULT NULL,
                                  keep_alive boolean DEFAULT false)
RETURNS bigint[]
AS 'MODULE_PATHNAME', 'redlock_xact_lock_multi'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION redlock_try_lock(resources text[], ttl_ms integer DEFAULT 30000,
                                 keep_alive boolean DEFAULT false)
RETURNS bigint[]
AS 'MODULE_PATHNAME', 'redlock_try_lock_multi'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION redlock_try_xact_lock(resources text[], ttl_ms integer DEFAULT 30000,
                                      keep_alive boolean DEFAULT false)
RETURNS bigint[]
AS 'MODULE_PATHNAME', 'redlock_try_xact_lock_multi'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION redlock_unlock(resources text[])
RETURNS boolean
AS 'MODULE_PATHNAME', 'redlock_unlock_multi'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

REVOKE ALL ON FUNCTION
    redlock_lock(text[], integer, integer, boolean),
    redlock_xact_lock(text[], integer, integer, boolean),
    redlock_try_lock(text[], integer, boolean),
    redlock_try_xact_lock(text[], integer, boolean),
    redlock_unlock(text[])
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    redlock_lock(text[], integer, integer, boolean),
    redlock_xact_lock(text[], integer, integer, boolean),
    redlock_try_lock(text[], integer, boolean),
    redlock_try_xact_lock(text[], integer, boolean),
    redlock_unlock(text[])
    TO redlock_user;
