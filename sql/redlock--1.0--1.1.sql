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
