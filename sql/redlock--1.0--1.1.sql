/* redlock--1.0--1.1.sql */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION redlock UPDATE TO '1.1'" to load this file. \quit

-- Objects of 1.0 that this update replaces (their argument or column lists
-- change): a user object that depends on one of them, such as a BEGIN
-- ATOMIC function calling redlock_lock() or a view over redlock_leases,
-- would make the DROP fail with a hint to use CASCADE.  Say instead what
-- blocks the update and how to proceed (README, "Upgrading").
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
             AND d.refobjid IN ('redlock_lock(text,integer)'::pg_catalog.regprocedure,
                                'redlock_xact_lock(text,integer)'::pg_catalog.regprocedure,
                                'redlock_try_lock(text,integer)'::pg_catalog.regprocedure,
                                'redlock_try_xact_lock(text,integer)'::pg_catalog.regprocedure,
                                'redlock_leases()'::pg_catalog.regprocedure))
            OR (d.refclassid = 'pg_catalog.pg_class'::pg_catalog.regclass
                AND d.refobjid = 'redlock_leases'::pg_catalog.regclass))
       -- the extension's own objects (the view's rule) do not count
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
        RAISE EXCEPTION 'cannot update extension redlock to version 1.1 while other objects depend on objects it replaces'
            USING ERRCODE = 'dependent_objects_still_exist',
                  DETAIL = 'Version 1.1 replaces redlock_lock(text,integer), redlock_xact_lock(text,integer), redlock_try_lock(text,integer), redlock_try_xact_lock(text,integer) and the view redlock_leases; these depend on them: ' || blockers || '.',
                  HINT = 'Save the definitions of those objects, drop them, run ALTER EXTENSION redlock UPDATE, and create them again: calls without the new arguments work unchanged.';
    END IF;
END
$$;

-- The role redlock_user.  1.0 creates it when missing, and otherwise adopts
-- the role of that name, whoever made it, and grants it the lease
-- functions.  A fresh install (1.0's objects made by this transaction)
-- refuses a role it did not make, unless it carries the mark below, which
-- a DBA can set to adopt a role on purpose; the role made now, and the one
-- an existing installation uses, get the mark, so that installing into
-- further databases of the cluster accepts it.
DO $$
DECLARE
    mark constant text := 'Members may take redlock leases (role of extension redlock)';
    role_oid oid;
    role_new boolean;
    fresh boolean;
BEGIN
    SELECT a.oid, pg_catalog.age(a.xmin) = 0 INTO role_oid, role_new
      FROM pg_catalog.pg_authid a WHERE a.rolname = 'redlock_user';
    SELECT pg_catalog.age(p.xmin) = 0 INTO fresh
      FROM pg_catalog.pg_proc p
     WHERE p.oid = 'redlock_unlock(text)'::pg_catalog.regprocedure;
    IF fresh AND NOT role_new AND pg_catalog.shobj_description(role_oid, 'pg_authid')
            IS DISTINCT FROM mark THEN
        RAISE EXCEPTION 'role "redlock_user" already exists and was not made by extension redlock'
            USING ERRCODE = 'duplicate_object',
                  DETAIL = 'CREATE EXTENSION redlock grants the lease functions to the role redlock_user; its members would take leases.',
                  HINT = format('Drop or rename that role; or, to have redlock use it, run COMMENT ON ROLE redlock_user IS %L first.', mark);
    END IF;
    EXECUTE format('COMMENT ON ROLE redlock_user IS %L', mark);
END
$$;

-- The objects this update replaces lose their privileges with them: a
-- GRANT EXECUTE ON FUNCTION redlock_lock(text, integer) TO app, or a REVOKE
-- made since 1.0, would be gone silently.  Their ACLs are kept here, with
-- their initial privileges (pg_init_privs: what the extension's own script
-- granted, which pg_dump leaves out), and given to the replacements once
-- those exist (below, after redlock_leases).
CREATE TEMPORARY TABLE redlock_acl_1_0 ON COMMIT DROP AS
    SELECT 'FUNCTION' AS kind, 'pg_catalog.pg_proc'::pg_catalog.regclass AS catalog,
           v.new_name, p.proacl AS acl, p.proowner AS owner, i.initprivs
      FROM (VALUES ('redlock_lock(text,integer)', 'redlock_lock(text,integer,integer,boolean)'),
                   ('redlock_xact_lock(text,integer)', 'redlock_xact_lock(text,integer,integer,boolean)'),
                   ('redlock_try_lock(text,integer)', 'redlock_try_lock(text,integer,boolean)'),
                   ('redlock_try_xact_lock(text,integer)', 'redlock_try_xact_lock(text,integer,boolean)'),
                   ('redlock_leases()', 'redlock_leases()')) AS v(old_name, new_name)
      JOIN pg_catalog.pg_proc p ON p.oid = v.old_name::pg_catalog.regprocedure
      LEFT JOIN pg_catalog.pg_init_privs i
             ON i.objoid = p.oid AND i.classoid = 'pg_catalog.pg_proc'::pg_catalog.regclass
    UNION ALL
    SELECT 'TABLE', 'pg_catalog.pg_class'::pg_catalog.regclass,
           'redlock_leases', c.relacl, c.relowner, i.initprivs
      FROM pg_catalog.pg_class c
      LEFT JOIN pg_catalog.pg_init_privs i
             ON i.objoid = c.oid AND i.classoid = 'pg_catalog.pg_class'::pg_catalog.regclass
            AND i.objsubid = 0
     WHERE c.oid = 'redlock_leases'::pg_catalog.regclass;

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

-- How many lock calls' rounds ran on the dispatcher worker's connections,
-- one per Redis node shared by the server's backends, and how many on the
-- backends' own (redlock.shared_connections; needs redlock in
-- shared_preload_libraries), since the server started.
CREATE FUNCTION redlock_dispatcher(
    OUT rounds_shared bigint,
    OUT rounds_own bigint)
RETURNS record
AS 'MODULE_PATHNAME', 'redlock_dispatcher'
LANGUAGE C VOLATILE PARALLEL SAFE;

CREATE VIEW redlock_dispatcher AS
    SELECT (SELECT a.pid FROM pg_catalog.pg_stat_activity a
             WHERE a.backend_type = 'redlock dispatcher') AS pid,
           d.rounds_shared, d.rounds_own
      FROM redlock_dispatcher() d;

-- counters only, public like the statistics views
GRANT SELECT ON redlock_dispatcher TO PUBLIC;

-- The lock functions gain wait_ms (a wait limit of the call's own, since
-- lock_timeout also governs table and row locks) and keep_alive (the
-- keep-alive worker extends the lease while the backend lives; needs
-- redlock in shared_preload_libraries).  Their argument lists change, so
-- each is replaced; the replacement takes over the privileges of the old one
-- further down (see pg_temp.redlock_acl_1_0).
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

DROP FUNCTION redlock_lock(text, integer);
DROP FUNCTION redlock_xact_lock(text, integer);
DROP FUNCTION redlock_try_lock(text, integer);
DROP FUNCTION redlock_try_xact_lock(text, integer);

-- redlock_leases shows keep-alive leases, whether the worker lost one, and
-- whether it stopped extending one at redlock.keep_alive_limit.
DROP VIEW redlock_leases;
DROP FUNCTION redlock_leases();
CREATE FUNCTION redlock_leases(
    OUT resource text,
    OUT token bigint,
    OUT scope text,
    OUT holds integer,
    OUT validity_ms integer,
    OUT keep_alive boolean,
    OUT lost boolean,
    OUT limit_reached boolean)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'redlock_leases'
LANGUAGE C VOLATILE PARALLEL RESTRICTED;

CREATE VIEW redlock_leases AS
    SELECT * FROM redlock_leases();
GRANT SELECT ON redlock_leases TO PUBLIC;

-- Each replacement gets the ACL of the object it replaces, entry by entry
-- (granted by the owner).  Those GRANTs run inside this script, so
-- PostgreSQL records their result as initial privileges; the replaced
-- object's initial privileges are put back over them, so that a user's
-- grant stays a user's grant for pg_dump too.  From PostgreSQL 17 on,
-- pg_shdepend also records the roles of initial privileges (deptype 'i'):
-- those of roles no longer in them go too.
DO $$
DECLARE
    o record;
    a record;
    new_oid oid;
BEGIN
    FOR o IN SELECT * FROM pg_temp.redlock_acl_1_0 LOOP
        new_oid := CASE o.kind
                   WHEN 'FUNCTION' THEN o.new_name::pg_catalog.regprocedure::oid
                   ELSE o.new_name::pg_catalog.regclass::oid END;
        IF o.acl IS NOT NULL THEN
            EXECUTE format('REVOKE ALL ON %s %s FROM PUBLIC', o.kind, o.new_name);
            FOR a IN
                SELECT e.grantee, e.privilege_type, e.is_grantable
                  FROM pg_catalog.aclexplode(o.acl) e
                 WHERE e.grantee <> o.owner
            LOOP
                EXECUTE format('GRANT %s ON %s %s TO %s%s', a.privilege_type, o.kind, o.new_name,
                               CASE WHEN a.grantee = 0 THEN 'PUBLIC'
                                    ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(a.grantee)) END,
                               CASE WHEN a.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
            END LOOP;
        END IF;

        IF o.initprivs IS NULL THEN
            DELETE FROM pg_catalog.pg_init_privs
             WHERE objoid = new_oid AND classoid = o.catalog AND objsubid = 0;
        ELSE
            UPDATE pg_catalog.pg_init_privs SET initprivs = o.initprivs
             WHERE objoid = new_oid AND classoid = o.catalog AND objsubid = 0;
        END IF;
        DELETE FROM pg_catalog.pg_shdepend s
         WHERE s.deptype = 'i'
           AND s.dbid = (SELECT d.oid FROM pg_catalog.pg_database d
                          WHERE d.datname = pg_catalog.current_database())
           AND s.classid = o.catalog AND s.objid = new_oid
           AND s.refobjid NOT IN (
               SELECT r.m FROM pg_catalog.aclexplode(o.initprivs) e,
                               LATERAL (VALUES (e.grantee), (e.grantor)) AS r(m));
    END LOOP;
END
$$;
DROP TABLE pg_temp.redlock_acl_1_0;

-- Every lease held or awaited by every backend of this server, like
-- pg_locks (needs redlock in shared_preload_libraries).  usesysid is the
-- session user, as in pg_stat_activity; key is the whole Redis key, which
-- tells apart databases with different redlock.key_prefix values.
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
    OUT limit_reached boolean)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'redlock_locks'
LANGUAGE C VOLATILE PARALLEL SAFE;

CREATE VIEW redlock_locks AS
    SELECT l.pid, l.datid, d.datname, l.usesysid, r.rolname AS usename,
           l.resource, l.key, l.granted, l.token, l.scope, l.waitstart,
           l.granted_at, l.valid_until, l.keep_alive, l.lost, l.limit_reached
      FROM redlock_locks() l
      LEFT JOIN pg_database d ON d.oid = l.datid
      LEFT JOIN pg_roles r ON r.oid = l.usesysid;

REVOKE ALL ON FUNCTION redlock_locks() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION redlock_locks() TO redlock_user, pg_monitor;
GRANT SELECT ON redlock_locks TO redlock_user, pg_monitor;

-- Who holds a resource, as each node that has its lock says, whichever
-- server sharing the nodes took it: the lock's value names the holder's
-- server (system identifier), database and process, and key the Redis key
-- asked for (redlock.key_prefix of this session).
CREATE FUNCTION redlock_holder(
    resource text,
    OUT node text,
    OUT system_identifier bigint,
    OUT datid oid,
    OUT pid integer,
    OUT remaining_ms integer,
    OUT this_server boolean,
    OUT key text,
    OUT server_started timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'redlock_holder'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

REVOKE ALL ON FUNCTION redlock_holder(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION redlock_holder(text) TO redlock_user, pg_monitor;

-- redlock_nodes says which server each node is (Redis or Valkey, and its
-- version): a new column, server; and until when a node that restarted is
-- kept out of every majority (redlock.restart_quarantine): the last column,
-- quarantined_until.
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
    OUT quarantined_until timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'redlock_nodes'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
CREATE VIEW redlock_nodes AS
    SELECT * FROM redlock_nodes();
REVOKE ALL ON FUNCTION redlock_nodes() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION redlock_nodes() TO redlock_user, pg_monitor;
GRANT SELECT ON redlock_nodes TO redlock_user, pg_monitor;

-- The health of every Redis node as this server sees it (needs redlock in
-- shared_preload_libraries): requests, errors by kind, the last error and
-- the last success, whether the node is failing, and until when it is
-- quarantined after a restart.  Read from shared memory: no node is asked.
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
    OUT tracked_since timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'redlock_stats_nodes'
LANGUAGE C VOLATILE PARALLEL SAFE;
CREATE VIEW redlock_stats_nodes AS
    SELECT * FROM redlock_stats_nodes();
-- node addresses and errors: for those who may see redlock_nodes
REVOKE ALL ON FUNCTION redlock_stats_nodes() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION redlock_stats_nodes() TO redlock_user, pg_monitor;
GRANT SELECT ON redlock_stats_nodes TO redlock_user, pg_monitor;
