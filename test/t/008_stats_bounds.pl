# The statistics tables in shared memory have a fixed size: with tiny
# redlock.stats_max_databases and redlock.stats_max_tables, databases and
# fenced tables beyond them are not tracked, what they would have counted is
# counted in redlock_stats_info instead, nothing crashes or runs out of
# shared memory, and the entries that fit keep counting.  Also: the upgrade
# of an existing 1.0 installation to 1.1 (which adds redlock_stats_info),
# and of 1.1 to 1.2: what blocks it, and the privileges it carries over.
use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedlockTest;
use Test::More;

my @redis = redis_nodes(3);
my $nodes = node_list(@redis);
my $pg = redlock_cluster('bounds', nodes => \@redis, preload => 1, no_extension => 1,
	conf => "redlock.stats_max_databases = 2\nredlock.stats_max_tables = 3\n");
my $started = $pg->safe_psql('postgres', 'SELECT pg_postmaster_start_time()');

is($pg->safe_psql('postgres',
		"SELECT setting, context FROM pg_settings WHERE name LIKE 'redlock.stats_max_%' ORDER BY name"),
	"2|postmaster\n3|postmaster", 'the maxima are postmaster settings');
my ($rc, $out, $err) = $pg->psql('postgres', 'SET redlock.stats_max_tables = 10');
like($err, qr/cannot be changed without restarting the server/,
	'and cannot be changed in a session');

for my $db (qw(db1 db2 db3))
{
	$pg->safe_psql('postgres', "CREATE DATABASE $db");
}
for my $db (qw(postgres db1 db2 db3))
{
	$pg->safe_psql($db, <<'SQL');
CREATE EXTENSION redlock;
CREATE FUNCTION reject(tab regclass, n int) RETURNS int LANGUAGE plpgsql AS $$
DECLARE
	refused int := 0;
BEGIN
	FOR i IN 1 .. n LOOP
		BEGIN
			EXECUTE format('UPDATE %s SET v = v + 1, fence_token = 1', tab);
		EXCEPTION WHEN SQLSTATE 'RL001' THEN
			refused := refused + 1;
		END;
	END LOOP;
	RETURN refused;
END $$;
SQL
	for my $t (1 .. 5)
	{
		$pg->safe_psql($db, <<"SQL");
CREATE TABLE t$t (id int PRIMARY KEY, v int, fence_token bigint);
CREATE TRIGGER fence BEFORE UPDATE ON t$t FOR EACH ROW EXECUTE FUNCTION redlock_fence();
INSERT INTO t$t VALUES (1, 0, 100);
SQL
	}
}
$pg->safe_psql('postgres', 'SELECT redlock_stats_reset()');

sub info
{
	return $pg->safe_psql('postgres',
		'SELECT databases_tracked, databases_max, database_events_untracked, '
		  . 'tables_tracked, tables_max, table_rejections_untracked FROM redlock_stats_info');
}
is(info(), '0|2|0|0|3|0', 'empty after the reset');

# ---------- fenced tables: 3 fit ----------

# postgres: t1 x1, t2 x2, t3 x3 fill the table; t4 x4 and t5 x5 do not fit
my $sql = join(' + ', map { "reject('t$_', $_)" } 1 .. 5);
is($pg->safe_psql('postgres', "SELECT $sql"), '15', '15 rejections on 5 tables');
is($pg->safe_psql('postgres',
		'SELECT relname, rejections FROM redlock_stats_fence ORDER BY relname'),
	"t1|1\nt2|2\nt3|3", 'the first 3 tables are tracked');
is(info(), '1|2|0|3|3|9', 'the 9 rejections on the 2 other tables are counted as untracked');
is($pg->safe_psql('postgres',
		'SELECT fence_rejections FROM redlock_stats WHERE datname = current_database()'),
	'15', "the database's own counter has all 15");

# the tracked entries keep counting; the untracked ones keep being counted
is($pg->safe_psql('postgres', "SELECT reject('t1', 10) + reject('t5', 7)"), '17', '17 more');
is($pg->safe_psql('postgres',
		"SELECT rejections FROM redlock_stats_fence WHERE relname = 't1'"),
	'11', 't1 keeps counting');
is(info(), '1|2|0|3|3|16', 'and t5 adds to the untracked count');

# tables of another database compete for the same entries
is($pg->safe_psql('db1', "SELECT reject('t1', 2)"), '2', 'db1 rejects twice');
is(info(), '2|2|0|3|3|18', 'db1.t1 does not fit either');

# ---------- databases: 2 fit ----------

# postgres and db1 hold the two entries now.  The same work in db1 (tracked)
# and in db2 and db3 (not tracked): what db1 counts for it is what each of
# the others adds to database_events_untracked.  Leases on the real nodes,
# then one fence rejection.
my $work = <<'SQL';
SELECT redlock_try_lock('bounds:' || current_database()) > 0;
SELECT redlock_extend('bounds:' || current_database(), 30000) > 0;
SELECT redlock_unlock('bounds:' || current_database());
SELECT redlock_try_lock('bounds:never', 1000) IS NULL;
SELECT reject('t2', 1);
SQL
my $holder = $pg->background_psql('postgres');
$holder->query_safe("SELECT redlock_lock('bounds:never', 60000)");
my $db1_before = $pg->safe_psql('postgres',
	"SELECT acquires + attempts + grants + refused_held + refused_no_quorum + refused_timeout
	      + refused_error + extends + extend_failures + releases + fence_rejections
	   FROM redlock_stats WHERE datname = 'db1'");
is($pg->safe_psql('db1', $work), "t\nt\nt\nt\n1", 'the work in db1');
my $db1_events = $pg->safe_psql('postgres',
	"SELECT acquires + attempts + grants + refused_held + refused_no_quorum + refused_timeout
	      + refused_error + extends + extend_failures + releases + fence_rejections
	   FROM redlock_stats WHERE datname = 'db1'") - $db1_before;
cmp_ok($db1_events, '>=', 7, "db1 counted $db1_events events for it");
for my $db (qw(db2 db3))
{
	is($pg->safe_psql($db, $work), "t\nt\nt\nt\n1", "the same work in $db");
}
is($pg->safe_psql('postgres', 'SELECT datname FROM redlock_stats ORDER BY datname'),
	"db1\npostgres", 'only the first two databases have rows');
is(info(), '2|2|' . (2 * $db1_events) . '|3|3|21',
	"db2 and db3 added exactly db1's $db1_events events each to the untracked count");
is($pg->safe_psql('postgres', "SELECT count(*) FROM redlock_stats_latency WHERE datname = 'db2'"),
	'0', 'and have no latency histogram');

# a session of an untracked database that stays connected keeps counting
my $s3 = $pg->background_psql('db3');
for (1 .. 3)
{
	$s3->query_safe("SELECT redlock_try_lock('bounds:s3') > 0");
	$s3->query_safe("SELECT redlock_unlock('bounds:s3')");
}
$s3->query_safe("SELECT reject('t3', 5)");
my ($untracked) = split /\|/, $pg->safe_psql('postgres',
	'SELECT database_events_untracked, table_rejections_untracked FROM redlock_stats_info');
is($untracked, 2 * $db1_events + 3 * 4 + 5,
	'a long-lived db3 session: 3 grants and releases (4 events each) and 5 rejections');
like(info(), qr/\|26$/, 'the 5 rejections on its table too');

# ---------- a reset ----------

$pg->safe_psql('postgres', 'SELECT redlock_stats_reset()');
is(info(), '2|2|0|0|3|0', 'a reset zeroes the counts and empties the table of fenced tables');
is($pg->safe_psql('postgres', "SELECT reject('t4', 2)"), '2', 't4 again');
is($pg->safe_psql('postgres', 'SELECT relname, rejections FROM redlock_stats_fence'),
	't4|2', 'a table that did not fit before is tracked now');
is($pg->safe_psql('db2', "SELECT reject('t4', 1)"), '1', 'db2 rejects once');
is(info(), '2|2|1|2|3|0',
	'database entries stay after a reset: db2 is still untracked (1 event), its table is tracked');

# ---------- nothing broke ----------

is($pg->safe_psql('postgres', 'SELECT pg_postmaster_start_time()'), $started,
	'the server never restarted');
my $log = slurp_file($pg->logfile);
unlike($log, qr/out of shared memory|terminated by signal|was terminated|PANIC/,
	'no shared memory errors or crashed backends in the log');
$s3->quit;
$holder->quit;

# ---------- upgrade from 1.0 ----------

$pg->safe_psql('postgres', 'CREATE DATABASE upd');
$pg->safe_psql('upd', "CREATE EXTENSION redlock VERSION '1.0'");
is($pg->safe_psql('upd', "SELECT extversion FROM pg_extension WHERE extname = 'redlock'"),
	'1.0', 'version 1.0 installed');
is($pg->safe_psql('upd', "SELECT to_regclass('redlock_stats_info') IS NULL"), 't',
	'1.0 has no redlock_stats_info');
$pg->safe_psql('upd', 'ALTER EXTENSION redlock UPDATE');
is($pg->safe_psql('upd', "SELECT extversion FROM pg_extension WHERE extname = 'redlock'"),
	'1.2', 'updated to 1.2 (through 1.1)');
is($pg->safe_psql('upd', 'SELECT databases_max, tables_max FROM redlock_stats_info'),
	'2|3', 'redlock_stats_info works after the update');
# the update gives what a fresh install gives: same objects, same grants
my $objects = <<'SQL';
SELECT pg_describe_object(classid, objid, 0) || ' ' ||
       coalesce((SELECT array_agg(a ORDER BY a::text)::text
                   FROM pg_class c, aclexplode(c.relacl) a
                  WHERE classid = 'pg_class'::regclass AND c.oid = objid), '') || ' ' ||
       coalesce((SELECT string_agg(coalesce(r.rolname, 'PUBLIC') || ':' || a.privilege_type, ','
                                   ORDER BY coalesce(r.rolname, 'PUBLIC'), a.privilege_type)
                   FROM pg_proc p
                        CROSS JOIN aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
                        LEFT JOIN pg_roles r ON r.oid = a.grantee
                  WHERE classid = 'pg_proc'::regclass AND p.oid = objid), '')
  FROM pg_depend
 WHERE refobjid = (SELECT oid FROM pg_extension WHERE extname = 'redlock')
   AND deptype = 'e'
 ORDER BY 1
SQL
is($pg->safe_psql('upd', $objects), $pg->safe_psql('db1', $objects),
	'1.0 + update has the same objects, and privileges on tables, views and functions, as a fresh 1.2');
like($pg->safe_psql('upd', $objects), qr/^function redlock_lock\(.*redlock_user:EXECUTE/m,
	'(the comparison sees the functions\' privileges)');

# A fresh 1.2 runs the same scripts as the update, so the comparison above
# cannot see a GRANT missing from both: every object's privileges, but its
# owner's, are pinned here (doc/reference.md's "Privileges" promises them).
my $grants = <<'SQL';
SELECT pg_describe_object(d.classid, d.objid, 0) || ': ' ||
       coalesce((SELECT string_agg(coalesce(r.rolname, 'PUBLIC') || ' ' || a.privilege_type, ', '
                                   ORDER BY coalesce(r.rolname, 'PUBLIC'), a.privilege_type)
                   FROM aclexplode(CASE WHEN d.classid = 'pg_class'::regclass
                        THEN (SELECT coalesce(relacl, acldefault('r', relowner)) FROM pg_class WHERE oid = d.objid)
                        ELSE (SELECT coalesce(proacl, acldefault('f', proowner)) FROM pg_proc WHERE oid = d.objid)
                        END) a
                        LEFT JOIN pg_roles r ON r.oid = a.grantee
                  WHERE a.grantee <> a.grantor), '-')
  FROM pg_depend d
 WHERE d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'redlock')
   AND d.deptype = 'e'
   AND d.classid IN ('pg_class'::regclass, 'pg_proc'::regclass)
 ORDER BY 1
SQL
$pg->safe_psql('postgres', 'CREATE DATABASE fresh');
$pg->safe_psql('fresh', 'CREATE EXTENSION redlock');
is($pg->safe_psql('fresh', $grants), <<'EXPECTED' =~ s/\n\z//r,
function redlock_dispatcher(): PUBLIC EXECUTE
function redlock_extend(text,integer): redlock_user EXECUTE
function redlock_extend(text[],integer): redlock_user EXECUTE
function redlock_fence(): PUBLIC EXECUTE
function redlock_holder(text): pg_monitor EXECUTE, redlock_user EXECUTE
function redlock_leases(): PUBLIC EXECUTE
function redlock_lock(text,integer,integer,boolean): redlock_user EXECUTE
function redlock_lock(text[],integer,integer,boolean): redlock_user EXECUTE
function redlock_lock_shared(text,integer,integer,boolean): redlock_user EXECUTE
function redlock_locks(): pg_monitor EXECUTE, redlock_user EXECUTE
function redlock_nodes(): pg_monitor EXECUTE, redlock_user EXECUTE
function redlock_stats(): PUBLIC EXECUTE
function redlock_stats_fence(): PUBLIC EXECUTE
function redlock_stats_info(): PUBLIC EXECUTE
function redlock_stats_latency(): PUBLIC EXECUTE
function redlock_stats_nodes(): pg_monitor EXECUTE, redlock_user EXECUTE
function redlock_stats_reset(): -
function redlock_try_lock(text,integer,boolean): redlock_user EXECUTE
function redlock_try_lock(text[],integer,boolean): redlock_user EXECUTE
function redlock_try_lock_shared(text,integer,boolean): redlock_user EXECUTE
function redlock_try_xact_lock(text,integer,boolean): redlock_user EXECUTE
function redlock_try_xact_lock(text[],integer,boolean): redlock_user EXECUTE
function redlock_try_xact_lock_shared(text,integer,boolean): redlock_user EXECUTE
function redlock_unlock(text): redlock_user EXECUTE
function redlock_unlock(text[]): redlock_user EXECUTE
function redlock_unlock_all(): redlock_user EXECUTE
function redlock_unlock_shared(text): redlock_user EXECUTE
function redlock_xact_lock(text,integer,integer,boolean): redlock_user EXECUTE
function redlock_xact_lock(text[],integer,integer,boolean): redlock_user EXECUTE
function redlock_xact_lock_shared(text,integer,integer,boolean): redlock_user EXECUTE
view redlock_dispatcher: PUBLIC SELECT
view redlock_leases: PUBLIC SELECT
view redlock_locks: pg_monitor SELECT, redlock_user SELECT
view redlock_nodes: pg_monitor SELECT, redlock_user SELECT
view redlock_stats: PUBLIC SELECT
view redlock_stats_fence: PUBLIC SELECT
view redlock_stats_info: PUBLIC SELECT
view redlock_stats_latency: PUBLIC SELECT
view redlock_stats_nodes: pg_monitor SELECT, redlock_user SELECT
EXPECTED
	'a fresh 1.2 grants exactly what doc/reference.md promises, object by object');
is($pg->safe_psql('upd', $grants), $pg->safe_psql('fresh', $grants),
	'... and so does 1.0 + update');
$pg->safe_psql('upd', 'CREATE ROLE bounds_reader LOGIN');
is($pg->safe_psql('upd', 'SET ROLE bounds_reader; SELECT count(*) FROM redlock_stats_info'),
	'1', 'and any role can read it');

# ---------- DROP EXTENSION keeps redlock_user (roles are cluster-wide) ----------

$pg->safe_psql('upd', 'CREATE ROLE keeps_grant LOGIN; GRANT redlock_user TO keeps_grant');
$pg->safe_psql('upd', 'DROP EXTENSION redlock');
is($pg->safe_psql('upd', "SELECT pg_has_role('keeps_grant', 'redlock_user', 'MEMBER')"), 't',
	'after DROP EXTENSION, redlock_user is still there, with its members');
is($pg->safe_psql('db1', "SELECT has_function_privilege('redlock_user', 'redlock_unlock(text)', 'EXECUTE')"),
	't', 'and it still works in the other databases');
$pg->safe_psql('upd', 'CREATE EXTENSION redlock');
is($pg->safe_psql('upd', "SELECT has_function_privilege('keeps_grant', 'redlock_unlock(text)', 'EXECUTE')"),
	't', 'CREATE EXTENSION again uses the role that is there');

# ---------- update from 1.1: user objects and privileges on what it replaces ----------

# 1.2 replaces redlock_nodes, redlock_stats_nodes, redlock_locks and
# redlock_dispatcher (views and functions): a view of the user's over any
# of them blocks the update with 2BP01, named; the privileges on them carry
# over, and stay the user's (not initial privileges) for pg_dump
$pg->safe_psql('postgres', 'CREATE DATABASE upd12');
$pg->safe_psql('upd12', "CREATE EXTENSION redlock VERSION '1.1'");
$pg->safe_psql('upd12', <<'SQL');
CREATE ROLE viewer LOGIN;
CREATE ROLE column_viewer LOGIN;
GRANT SELECT ON redlock_nodes, redlock_stats_nodes, redlock_locks TO viewer;
GRANT EXECUTE ON FUNCTION redlock_nodes(), redlock_stats_nodes(), redlock_locks() TO viewer;
GRANT SELECT ON redlock_locks TO column_viewer WITH GRANT OPTION;
GRANT SELECT (node, reachable) ON redlock_nodes TO column_viewer;
REVOKE SELECT ON redlock_stats_nodes FROM pg_monitor;
REVOKE SELECT ON redlock_dispatcher FROM PUBLIC;
GRANT SELECT ON redlock_dispatcher TO viewer;
REVOKE SELECT ON redlock_leases FROM PUBLIC;
GRANT SELECT ON redlock_leases TO viewer;
GRANT EXECUTE ON FUNCTION redlock_holder(text) TO viewer;
CREATE VIEW my_nodes AS SELECT node, quarantined_until FROM redlock_nodes;
CREATE VIEW my_locks AS SELECT pid, resource FROM redlock_locks;
CREATE VIEW my_dispatcher AS SELECT rounds_shared FROM redlock_dispatcher;
CREATE VIEW my_leases AS SELECT resource FROM redlock_leases;
CREATE VIEW my_holders AS SELECT node FROM redlock_holder('x');
SQL
my ($rc12, $out12, $err12) = $pg->psql('upd12', 'ALTER EXTENSION redlock UPDATE',
	extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($err12, qr/ERROR:  2BP01: cannot update extension redlock to version 1\.2 while other objects depend on objects it replaces.*DETAIL:  .*these depend on them: view my_dispatcher, view my_holders, view my_leases, view my_locks, view my_nodes\./s,
	'1.1 -> 1.2: views over redlock_dispatcher, redlock_holder(), redlock_leases, redlock_locks and redlock_nodes block the update, 2BP01, named');
$pg->safe_psql('upd12', 'DROP VIEW my_nodes, my_dispatcher, my_leases, my_holders');
($rc12, $out12, $err12) = $pg->psql('upd12', 'ALTER EXTENSION redlock UPDATE',
	extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($err12, qr/ERROR:  2BP01: .*DETAIL:  Version 1\.2 replaces redlock_nodes\(\), redlock_stats_nodes\(\), redlock_locks\(\), redlock_leases\(\) and redlock_dispatcher\(\) and their views, and redlock_holder\(text\); these depend on them: view my_locks\./s,
	'... a view over redlock_locks alone too (not PostgreSQL\'s error for the DROP)');
$pg->safe_psql('upd12', 'DROP VIEW my_locks; ALTER EXTENSION redlock UPDATE');
is($pg->safe_psql('upd12',
		"SELECT extversion FROM pg_extension WHERE extname = 'redlock'"),
	'1.2', '... updated once they are gone');
is($pg->safe_psql('upd12',
		"SELECT string_agg(attname, ',' ORDER BY attnum) FROM pg_attribute"
		  . " WHERE attrelid = 'redlock_stats_nodes'::regclass AND attname LIKE 'epoch%'"),
	'epoch_since,epoch_run_id,epoch_reason', 'redlock_stats_nodes shows the epoch');
is($pg->safe_psql('upd12', <<'SQL'),
SELECT v, has_table_privilege('viewer', v, 'SELECT'),
       has_function_privilege('viewer', v || '()', 'EXECUTE')
  FROM unnest(ARRAY['redlock_dispatcher', 'redlock_locks', 'redlock_nodes', 'redlock_stats_nodes']) v ORDER BY v
SQL
	"redlock_dispatcher|t|t\nredlock_locks|t|t\nredlock_nodes|t|t\nredlock_stats_nodes|t|t",
	'the grants on the four views and their functions survive the update');
is($pg->safe_psql('upd12',
		"SELECT has_table_privilege('viewer', 'redlock_leases', 'SELECT'),"
		  . " has_table_privilege('redlock_user', 'redlock_leases', 'SELECT'),"
		  . " has_function_privilege('viewer', 'redlock_holder(text)', 'EXECUTE'),"
		  . " (SELECT count(*) FROM pg_attribute WHERE attrelid = 'redlock_leases'::regclass"
		  . "   AND attname = 'mode')"),
	't|f|t|1', "redlock_leases (with its new column mode) and redlock_holder() keep their grants and revokes");
is($pg->safe_psql('upd12',
		"SELECT has_table_privilege('column_viewer', 'redlock_locks', 'SELECT WITH GRANT OPTION'),"
		  . " has_column_privilege('column_viewer', 'redlock_nodes', 'node', 'SELECT'),"
		  . " has_column_privilege('column_viewer', 'redlock_nodes', 'error', 'SELECT'),"
		  . " has_table_privilege('pg_monitor', 'redlock_stats_nodes', 'SELECT'),"
		  . " has_table_privilege('pg_monitor', 'redlock_locks', 'SELECT'),"
		  . " has_table_privilege('column_viewer', 'redlock_dispatcher', 'SELECT')"),
	't|t|f|f|t|f', 'so do a grant option, column grants, revokes, and the extension\'s own grants');
is($pg->safe_psql('upd12', 'SET ROLE viewer; SELECT count(*) FROM redlock_locks'),
	'0', 'viewer reads redlock_locks after the update');
my ($dump12) = run_command([ 'pg_dump', '-s', '-d', $pg->connstr('upd12') ]);
like($dump12, qr/GRANT SELECT ON TABLE public\.redlock_locks TO viewer;/,
	'pg_dump dumps the grant on redlock_locks: not taken for an initial privilege');
like($dump12, qr/GRANT SELECT\(node\) ON TABLE public\.redlock_nodes TO column_viewer;/,
	'nor the column grant');
like($dump12, qr/REVOKE SELECT ON TABLE public\.redlock_stats_nodes FROM pg_monitor;/,
	'and the revoke');
like($dump12, qr/REVOKE SELECT ON TABLE public\.redlock_dispatcher FROM PUBLIC;/,
	'and the revoke from PUBLIC');
like($dump12, qr/REVOKE SELECT ON TABLE public\.redlock_leases FROM PUBLIC;/,
	'and the revoke on redlock_leases');
like($dump12, qr/GRANT ALL ON FUNCTION public\.redlock_holder\(resource text,[^)]*\) TO viewer;/,
	'and the grant on redlock_holder()');
unlike($dump12, qr/TO redlock_user;/, "the extension's own grants stay initial");
# with the user's changes undone, privileges and initial privileges are a
# fresh 1.2's
$pg->safe_psql('upd12', <<'SQL');
REVOKE ALL ON redlock_nodes, redlock_stats_nodes, redlock_locks, redlock_dispatcher, redlock_leases FROM viewer, column_viewer CASCADE;
REVOKE ALL ON FUNCTION redlock_nodes(), redlock_stats_nodes(), redlock_locks(), redlock_holder(text) FROM viewer;
GRANT SELECT ON redlock_stats_nodes TO pg_monitor;
GRANT SELECT ON redlock_dispatcher, redlock_leases TO PUBLIC;
SQL
is($pg->safe_psql('upd12', privileges_sql()), $pg->safe_psql('fresh', privileges_sql()),
	'with those grants undone, 1.1 + update has the privileges and initial privileges of a fresh 1.2');
is($pg->safe_psql('upd12', "SELECT count(*) FROM pg_init_privs WHERE objsubid <> 0"
		  . " AND classoid = 'pg_class'::regclass AND objoid::regclass::text LIKE 'redlock\\_%'"),
	'0', 'no column of the views keeps an initial privilege');

$pg->stop;
done_testing();
