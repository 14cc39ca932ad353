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
