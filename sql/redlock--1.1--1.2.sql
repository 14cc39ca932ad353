/* redlock 1.1 -> 1.2 */
\echo Use "ALTER EXTENSION redlock UPDATE TO '1.2'" to load this file. \quit

-- Objects of 1.1 that this update replaces (their column lists grow): a
-- user object that depends on one of them, such as a view over
-- redlock_nodes, redlock_locks, redlock_leases or redlock_dispatcher, would make the DROP
-- fail with a hint to use CASCADE.  Say instead what blocks the update and how to proceed, as
-- 1.0 -> 1.1 does.
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
                                'redlock_stats_nodes()'::pg_catalog.regprocedure,
                                'redlock_locks()'::pg_catalog.regprocedure,
                                'redlock_leases()'::pg_catalog.regprocedure,
                                'redlock_holder(text)'::pg_catalog.regprocedure,
                                'redlock_dispatcher()'::pg_catalog.regprocedure))
            OR (d.refclassid = 'pg_catalog.pg_class'::pg_catalog.regclass
                AND d.refobjid IN ('redlock_nodes'::pg_catalog.regclass,
                                   'redlock_stats_nodes'::pg_catalog.regclass,
                                   'redlock_locks'::pg_catalog.regclass,
                                   'redlock_leases'::pg_catalog.regclass,
                                   'redlock_dispatcher'::pg_catalog.regclass)))
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
                  DETAIL = 'Version 1.2 replaces redlock_nodes(), redlock_stats_nodes(), redlock_locks(), redlock_leases() and redlock_dispatcher() and their views, and redlock_holder(text); these depend on them: ' || blockers || '.',
                  HINT = 'Save the definitions of those objects, drop them, run ALTER EXTENSION redlock UPDATE, and create them again: the columns they use are unchanged.';
    END IF;
END
$$;

-- The objects this update replaces lose their privileges with them: a
-- GRANT SELECT ON redlock_locks TO monitoring, or a REVOKE made since 1.1,
-- would be gone silently.  Their ACLs (the views' column privileges too)
-- are kept here, with their initial privileges (pg_init_privs: what the
-- extension's own scripts granted, which pg_dump leaves out), and given to
-- the replacements once those exist (at the end), as 1.0 -> 1.1 does.
CREATE TEMPORARY TABLE redlock_acl_1_1 ON COMMIT DROP AS
    SELECT 'FUNCTION' AS kind, 'pg_catalog.pg_proc'::pg_catalog.regclass AS catalog,
           v.name, NULL::name AS column_name,
           coalesce(p.proacl, pg_catalog.acldefault('f', p.proowner)) AS acl,
           p.proowner AS owner, i.initprivs
      FROM (VALUES ('redlock_nodes()'), ('redlock_stats_nodes()'),
                   ('redlock_locks()'), ('redlock_leases()'), ('redlock_holder(text)'),
                   ('redlock_dispatcher()')) AS v(name)
      JOIN pg_catalog.pg_proc p ON p.oid = v.name::pg_catalog.regprocedure
      LEFT JOIN pg_catalog.pg_init_privs i
             ON i.objoid = p.oid AND i.classoid = 'pg_catalog.pg_proc'::pg_catalog.regclass
    UNION ALL
    SELECT 'TABLE', 'pg_catalog.pg_class'::pg_catalog.regclass, v.name, NULL,
           coalesce(c.relacl, pg_catalog.acldefault('r', c.relowner)), c.relowner, i.initprivs
      FROM (VALUES ('redlock_nodes'), ('redlock_stats_nodes'),
                   ('redlock_locks'), ('redlock_leases'), ('redlock_dispatcher')) AS v(name)
      JOIN pg_catalog.pg_class c ON c.oid = v.name::pg_catalog.regclass
      LEFT JOIN pg_catalog.pg_init_privs i
             ON i.objoid = c.oid AND i.classoid = 'pg_catalog.pg_class'::pg_catalog.regclass
            AND i.objsubid = 0
    UNION ALL
    SELECT 'COLUMN', 'pg_catalog.pg_class'::pg_catalog.regclass, v.name, a.attname,
           a.attacl, c.relowner, i.initprivs
      FROM (VALUES ('redlock_nodes'), ('redlock_stats_nodes'),
                   ('redlock_locks'), ('redlock_leases'), ('redlock_dispatcher')) AS v(name)
      JOIN pg_catalog.pg_class c ON c.oid = v.name::pg_catalog.regclass
      JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0
      LEFT JOIN pg_catalog.pg_init_privs i
             ON i.objoid = c.oid AND i.classoid = 'pg_catalog.pg_class'::pg_catalog.regclass
            AND i.objsubid = a.attnum
     WHERE a.attacl IS NOT NULL OR i.initprivs IS NOT NULL;

-- The restart quarantine rests on each node's epoch, a key on the node
-- itself (when its present memory began): redlock_nodes and
-- redlock_stats_nodes show it in three new columns, epoch_since,
-- epoch_run_id and epoch_reason.  redlock_nodes also names the session's
-- node list, node_list, as redlock_locks shows it for each lease.
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
    OUT epoch_reason text,
    OUT node_list text)
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
-- a new column, place.  And which node list each lease is on, node_list
-- (a database or role may set redlock.nodes of its own, and the same key
-- on other nodes is another lock): the same id as redlock_nodes shows for
-- the session's own list.
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
    OUT place integer,
    OUT node_list text,
    OUT mode text)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'redlock_locks'
LANGUAGE C VOLATILE PARALLEL SAFE;
CREATE VIEW redlock_locks AS
    SELECT l.pid, l.datid, d.datname, l.usesysid, r.rolname AS usename,
           l.resource, l.key, l.node_list, l.mode, l.granted, l.token, l.scope, l.waitstart,
           l.place, l.granted_at, l.valid_until, l.keep_alive, l.lost,
           l.limit_reached
      FROM redlock_locks() l
      LEFT JOIN pg_database d ON d.oid = l.datid
      LEFT JOIN pg_roles r ON r.oid = l.usesysid;
REVOKE ALL ON FUNCTION redlock_locks() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION redlock_locks() TO redlock_user, pg_monitor;
GRANT SELECT ON redlock_locks TO redlock_user, pg_monitor;

-- Shared leases (redlock_lock_shared() and the others below): a lease is
-- 'exclusive' or 'shared', in a new column mode of redlock_leases,
-- redlock_locks (above) and redlock_holder(), which shows a row for each
-- reader of a resource held shared.
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
    OUT limit_reached boolean,
    OUT mode text)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'redlock_leases'
LANGUAGE C VOLATILE PARALLEL RESTRICTED;
CREATE VIEW redlock_leases AS
    SELECT * FROM redlock_leases();
GRANT SELECT ON redlock_leases TO PUBLIC;

DROP FUNCTION redlock_holder(text);
CREATE FUNCTION redlock_holder(
    resource text,
    OUT node text,
    OUT system_identifier bigint,
    OUT datid oid,
    OUT pid integer,
    OUT remaining_ms integer,
    OUT this_server boolean,
    OUT key text,
    OUT server_started timestamptz,
    OUT mode text)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'redlock_holder'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
REVOKE ALL ON FUNCTION redlock_holder(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION redlock_holder(text) TO redlock_user, pg_monitor;

-- Shared leases: the arguments of the exclusive forms.  Readers hold a
-- resource together; an exclusive lease is granted only once no shared
-- one is valid, and a shared one neither while an exclusive one is nor
-- while an exclusive call waits in line on the nodes (writers are not
-- starved by a stream of readers).  Each grant still gets a token above
-- every earlier grant of the resource; the fence in 'held' mode refuses a
-- shared lease's token (a reader does not write).
CREATE FUNCTION redlock_lock_shared(resource text, ttl_ms integer DEFAULT 30000,
                                    wait_ms integer DEFAULT NULL,
                                    keep_alive boolean DEFAULT false)
RETURNS bigint
AS 'MODULE_PATHNAME', 'redlock_lock_shared'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION redlock_xact_lock_shared(resource text, ttl_ms integer DEFAULT 30000,
                                         wait_ms integer DEFAULT NULL,
                                         keep_alive boolean DEFAULT false)
RETURNS bigint
AS 'MODULE_PATHNAME', 'redlock_xact_lock_shared'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION redlock_try_lock_shared(resource text, ttl_ms integer DEFAULT 30000,
                                        keep_alive boolean DEFAULT false)
RETURNS bigint
AS 'MODULE_PATHNAME', 'redlock_try_lock_shared'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION redlock_try_xact_lock_shared(resource text, ttl_ms integer DEFAULT 30000,
                                             keep_alive boolean DEFAULT false)
RETURNS bigint
AS 'MODULE_PATHNAME', 'redlock_try_xact_lock_shared'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION redlock_unlock_shared(resource text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'redlock_unlock_shared'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

REVOKE ALL ON FUNCTION
    redlock_lock_shared(text, integer, integer, boolean),
    redlock_xact_lock_shared(text, integer, integer, boolean),
    redlock_try_lock_shared(text, integer, boolean),
    redlock_try_xact_lock_shared(text, integer, boolean),
    redlock_unlock_shared(text)
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    redlock_lock_shared(text, integer, integer, boolean),
    redlock_xact_lock_shared(text, integer, integer, boolean),
    redlock_try_lock_shared(text, integer, boolean),
    redlock_try_xact_lock_shared(text, integer, boolean),
    redlock_unlock_shared(text)
    TO redlock_user;

-- A server's connections to each node are bounded
-- (redlock.max_connections_per_node): redlock_dispatcher shows how many
-- backends hold connections of their own, the most that may, and how often
-- a call waited for one (and how often in vain), in four new columns.
DROP VIEW redlock_dispatcher;
DROP FUNCTION redlock_dispatcher();
CREATE FUNCTION redlock_dispatcher(
    OUT rounds_shared bigint,
    OUT rounds_own bigint,
    OUT backends_connected integer,
    OUT backends_connected_max integer,
    OUT connection_waits bigint,
    OUT connection_waits_failed bigint)
RETURNS record
AS 'MODULE_PATHNAME', 'redlock_dispatcher'
LANGUAGE C VOLATILE PARALLEL SAFE;
CREATE VIEW redlock_dispatcher AS
    SELECT (SELECT a.pid FROM pg_catalog.pg_stat_activity a
             WHERE a.backend_type = 'redlock dispatcher') AS pid,
           d.rounds_shared, d.rounds_own, d.backends_connected,
           d.backends_connected_max, d.connection_waits,
           d.connection_waits_failed
      FROM redlock_dispatcher() d;
GRANT SELECT ON redlock_dispatcher TO PUBLIC;

-- Each replacement gets the ACL of the object it replaces, entry by entry
-- (granted by the owner), in place of the extension's own grants above
-- where the two differ.  Those GRANTs run inside this script, so
-- PostgreSQL records their result as initial privileges; the replaced
-- object's initial privileges are put back over them, so that a user's
-- grant stays a user's grant for pg_dump too.  From PostgreSQL 17 on,
-- pg_shdepend also records the roles of initial privileges (deptype 'i'):
-- those of roles no longer in them go too.
DO $$
DECLARE
    o record;
    a record;
    target text;
    new_oid oid;
    new_acl pg_catalog.aclitem[];
    subid integer;
BEGIN
    FOR o IN SELECT * FROM pg_temp.redlock_acl_1_1 LOOP
        IF o.kind = 'FUNCTION' THEN
            new_oid := o.name::pg_catalog.regprocedure::oid;
            subid := 0;
            target := 'FUNCTION ' || o.name;
        ELSE
            new_oid := o.name::pg_catalog.regclass::oid;
            subid := CASE WHEN o.kind = 'TABLE' THEN 0 ELSE
                     (SELECT t.attnum FROM pg_catalog.pg_attribute t
                       WHERE t.attrelid = new_oid AND t.attname = o.column_name) END;
            target := 'TABLE ' || o.name;
        END IF;

        -- the replacement's ACL (the extension's own grants) gives way to
        -- the replaced object's, unless the two are the same already
        new_acl := CASE o.kind
                   WHEN 'FUNCTION' THEN (SELECT coalesce(p.proacl, pg_catalog.acldefault('f', p.proowner))
                                           FROM pg_catalog.pg_proc p WHERE p.oid = new_oid)
                   WHEN 'TABLE' THEN (SELECT coalesce(c.relacl, pg_catalog.acldefault('r', c.relowner))
                                        FROM pg_catalog.pg_class c WHERE c.oid = new_oid)
                   ELSE (SELECT t.attacl FROM pg_catalog.pg_attribute t
                          WHERE t.attrelid = new_oid AND t.attnum = subid) END;
        IF new_acl IS DISTINCT FROM o.acl THEN
            FOR a IN
                SELECT DISTINCT e.grantee
                  FROM pg_catalog.aclexplode(new_acl) e
                 WHERE e.grantee <> o.owner AND o.kind <> 'COLUMN'
            LOOP
                EXECUTE format('REVOKE ALL ON %s FROM %s', target,
                               CASE WHEN a.grantee = 0 THEN 'PUBLIC'
                                    ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(a.grantee)) END);
            END LOOP;
            FOR a IN
                SELECT e.grantee, e.privilege_type, e.is_grantable
                  FROM pg_catalog.aclexplode(o.acl) e
                 WHERE e.grantee <> o.owner
            LOOP
                EXECUTE format('GRANT %s%s ON %s TO %s%s', a.privilege_type,
                               CASE WHEN o.kind = 'COLUMN'
                                    THEN ' (' || pg_catalog.quote_ident(o.column_name) || ')' ELSE '' END,
                               target,
                               CASE WHEN a.grantee = 0 THEN 'PUBLIC'
                                    ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(a.grantee)) END,
                               CASE WHEN a.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
            END LOOP;
        END IF;

        IF o.initprivs IS NULL THEN
            DELETE FROM pg_catalog.pg_init_privs
             WHERE objoid = new_oid AND classoid = o.catalog AND objsubid = subid;
        ELSE
            UPDATE pg_catalog.pg_init_privs SET initprivs = o.initprivs
             WHERE objoid = new_oid AND classoid = o.catalog AND objsubid = subid;
            IF NOT FOUND THEN
                INSERT INTO pg_catalog.pg_init_privs (objoid, classoid, objsubid, privtype, initprivs)
                VALUES (new_oid, o.catalog, subid, 'e', o.initprivs);
            END IF;
        END IF;
        DELETE FROM pg_catalog.pg_shdepend s
         WHERE s.deptype = 'i'
           AND s.dbid = (SELECT d.oid FROM pg_catalog.pg_database d
                          WHERE d.datname = pg_catalog.current_database())
           AND s.classid = o.catalog AND s.objid = new_oid AND s.objsubid = subid
           AND s.refobjid NOT IN (
               SELECT r.m FROM pg_catalog.aclexplode(o.initprivs) e,
                               LATERAL (VALUES (e.grantee), (e.grantor)) AS r(m));
    END LOOP;
END
$$;
DROP TABLE pg_temp.redlock_acl_1_1;

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

-- Each lease of the array extended as by redlock_extend(text, integer):
-- the new validities, in the order given.
CREATE FUNCTION redlock_extend(resources text[], ttl_ms integer)
RETURNS integer[]
AS 'MODULE_PATHNAME', 'redlock_extend_multi'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

REVOKE ALL ON FUNCTION
    redlock_lock(text[], integer, integer, boolean),
    redlock_xact_lock(text[], integer, integer, boolean),
    redlock_try_lock(text[], integer, boolean),
    redlock_try_xact_lock(text[], integer, boolean),
    redlock_unlock(text[]),
    redlock_extend(text[], integer)
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    redlock_lock(text[], integer, integer, boolean),
    redlock_xact_lock(text[], integer, integer, boolean),
    redlock_try_lock(text[], integer, boolean),
    redlock_try_xact_lock(text[], integer, boolean),
    redlock_unlock(text[]),
    redlock_extend(text[], integer)
    TO redlock_user;
