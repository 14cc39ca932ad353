# What the fence trusts, and the DBA's edges around it: a forged far-future
# token is refused by default; the 'held' mode accepts only a valid lease of
# the writing session; the update from 1.0 keeps direct grants and names
# what blocks it; a pre-existing role redlock_user is not adopted silently;
# redlock_stats_reset() can be granted; a data-only restore and a logical
# replication subscriber meet the fence with a hint that says what to do.
# Real Redis nodes, real clusters (two for the replication).
use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedlockTest;
use Test::More;

my @redis = redis_nodes(3);
my $pg = redlock_cluster('trust', nodes => \@redis, preload => 1,
	init => { allows_streaming => 'logical' });

# ---------- a forged far-future token (issue 22, item 1) ----------

# A role without redlock_user, allowed to update its own row only.
$pg->safe_psql('postgres', <<'SQL');
CREATE TABLE docs (id int PRIMARY KEY, owner name, body text, fence_token bigint);
CREATE TRIGGER fence BEFORE INSERT OR UPDATE OR DELETE ON docs
	FOR EACH ROW EXECUTE FUNCTION redlock_fence();
ALTER TABLE docs ENABLE ROW LEVEL SECURITY;
CREATE POLICY own ON docs USING (owner = current_user);
CREATE ROLE mallory LOGIN;
GRANT SELECT, UPDATE ON docs TO mallory;
CREATE ROLE writer LOGIN IN ROLE redlock_user;
GRANT SELECT, INSERT, UPDATE, DELETE ON docs TO writer;
ALTER TABLE docs FORCE ROW LEVEL SECURITY;
CREATE POLICY writer_all ON docs TO writer USING (true);
SQL
my $t1 = $pg->safe_psql('postgres',
	"SET ROLE writer; SELECT redlock_lock('doc:1', 30000)");
$pg->safe_psql('postgres',
	"INSERT INTO docs VALUES (1, 'mallory', 'first', $t1)");

my ($rc, $out, $err) = $pg->psql('postgres',
	"SET ROLE mallory; UPDATE docs SET body = 'mine', fence_token = 9223372036854775807",
	extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($err, qr/ERROR:  RL001: fencing token for table "docs" is ahead of the clock/,
	'a forged token of 9223372036854775807 is refused, RL001');
like($err, qr/DETAIL:  Offered token 9223372036854775807 is more than redlock\.fence_max_ahead \(300 s\) ahead of this server's clock\./,
	'the detail names the allowance');
like($err, qr/HINT:  Lease tokens are the time of their grant in microseconds/,
	'the hint says why no lease gives it');
($rc, $out, $err) = $pg->psql('postgres',
	"SET ROLE mallory; UPDATE docs SET body = 'mine', fence_token = "
	  . "(extract(epoch FROM clock_timestamp()) * 1000000)::bigint + 3600000000");
like($err, qr/is ahead of the clock/, 'so is a token an hour ahead');
($rc, $out, $err) = $pg->psql('postgres',
	"SET ROLE mallory; SET redlock.fence_max_ahead = -1");
like($err, qr/permission denied to set parameter "redlock\.fence_max_ahead"/,
	'the writer cannot lift the allowance');

# the real holder still writes: the row was not poisoned
my $t2 = $pg->safe_psql('postgres', "SET ROLE writer; SELECT redlock_lock('doc:1', 30000)");
is($pg->safe_psql('postgres',
		"SET ROLE writer; UPDATE docs SET body = 'second', fence_token = $t2 RETURNING body"),
	'second', 'the next holder writes its row');
is($pg->safe_psql('postgres',
		"SELECT rejections FROM redlock_stats_fence WHERE relname = 'docs'"),
	'2', 'both forged writes are counted as fence rejections');

# ---------- 'held': only a valid lease of the writing session ----------

$pg->safe_psql('postgres', <<'SQL');
CREATE TABLE held (id int PRIMARY KEY, body text, fence_token bigint);
CREATE TRIGGER fence BEFORE INSERT OR UPDATE OR DELETE ON held
	FOR EACH ROW EXECUTE FUNCTION redlock_fence('fence_token', 'allow_equal', 'held');
ALTER TABLE held DISABLE TRIGGER fence;
INSERT INTO held VALUES (1, 'never fenced', NULL);
ALTER TABLE held ENABLE TRIGGER fence;
SQL
my $a = $pg->background_psql('postgres', on_error_stop => 0);
my $b = $pg->background_psql('postgres', on_error_stop => 0);
run_in($a, '\set VERBOSITY verbose');
run_in($b, '\set VERBOSITY verbose');
my ($ta) = run_in($a, "SELECT redlock_lock('held:1', 60000)");
like($ta, qr/^\d+$/, "A holds held:1 with token $ta");

($out, $err) = run_in($b, "UPDATE held SET body = 'b', fence_token = $ta WHERE id = 1");
like($err, qr/RL001: fencing token for table "held" is not held by this session/,
	"B, which holds no lease, cannot write with A's token");
like($err, qr/DETAIL:  Offered token $ta is not the token of a lease this session holds/,
	'the detail says so');
($out, $err) = run_in($b, 'UPDATE held SET body = \'b\', fence_token = 9223372036854775807 WHERE id = 1');
like($err, qr/is not held by this session/, 'nor with a forged token');
my ($tb) = run_in($b, "SELECT redlock_lock('held:other', 60000)");
($out, $err) = run_in($b, "UPDATE held SET body = 'b', fence_token = $ta WHERE id = 1");
like($err, qr/is not held by this session/, 'nor while B holds another lease');
($out, $err) = run_in($a, "UPDATE held SET body = 'a', fence_token = $ta WHERE id = 1 RETURNING body");
is($err, '', 'A writes with its own token');
is($out, 'a', 'and the row is written');
($out, $err) = run_in($a, "INSERT INTO held VALUES (2, 'a2', $ta) RETURNING id");
is("$out|$err", '2|', 'A inserts with it too');
($out, $err) = run_in($a, "BEGIN; SET LOCAL redlock.fence_token = $ta; DELETE FROM held WHERE id = 2; COMMIT");
is($err, '', 'and deletes with it from the setting');

# a lease that ran out: A takes a short one and waits until its validity is 0
run_in($a, "SELECT redlock_unlock('held:1')");
($out, $err) = run_in($a, "UPDATE held SET body = 'late', fence_token = $ta + 1 WHERE id = 1");
like($err, qr/is not held by this session/, 'after the unlock, the token is no longer held');
my ($ts) = run_in($a, "SELECT redlock_lock('held:short', 200)");
ok(lease_ran_out($a, 'held:short'), 'the short lease ran out (validity 0 in redlock_leases)');
($out, $err) = run_in($a, "UPDATE held SET body = 'stale', fence_token = $ts WHERE id = 1");
like($err, qr/RL001: fencing token for table "held" belongs to an expired lease/,
	'a token of an expired lease is refused');
like($err, qr/DETAIL:  Offered token $ts is the token of this session's lease on "held:short", whose validity has run out\./,
	'the detail names the lease');
is($pg->safe_psql('postgres', 'SELECT body FROM held WHERE id = 1'), 'a',
	'no refused write landed');
$a->quit;
$b->quit;

# ---------- redlock_stats_reset() can be granted (issue 16, item 15) ----------

$pg->safe_psql('postgres', 'CREATE ROLE monitor LOGIN; CREATE ROLE other LOGIN');
($rc, $out, $err) = $pg->psql('postgres', 'SET ROLE monitor; SELECT redlock_stats_reset()');
like($err, qr/permission denied for function redlock_stats_reset/,
	'not granted: refused by the privilege system');
$pg->safe_psql('postgres', 'GRANT EXECUTE ON FUNCTION redlock_stats_reset() TO monitor');
($rc, $out, $err) = $pg->psql('postgres', 'SET ROLE monitor; SELECT redlock_stats_reset()');
is($err, '', 'granted to a role that is no superuser: the reset works');
is($pg->safe_psql('postgres', "SELECT count(*) FROM redlock_stats_fence"), '0',
	'and the statistics are reset');
($rc, $out, $err) = $pg->psql('postgres', 'SET ROLE other; SELECT redlock_stats_reset()');
like($err, qr/permission denied/, 'still refused to others');

# ---------- the update from 1.0 (issue 22, item 4) ----------

$pg->safe_psql('postgres', 'CREATE DATABASE upd; CREATE ROLE app LOGIN');
$pg->safe_psql('upd', <<'SQL');
CREATE EXTENSION redlock VERSION '1.0';
GRANT EXECUTE ON FUNCTION redlock_lock(text, integer) TO app;
GRANT EXECUTE ON FUNCTION redlock_unlock(text) TO app;
REVOKE EXECUTE ON FUNCTION redlock_try_lock(text, integer) FROM redlock_user;
REVOKE SELECT ON redlock_leases FROM PUBLIC;
GRANT SELECT ON redlock_leases TO app;
REVOKE EXECUTE ON FUNCTION redlock_leases() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION redlock_leases() TO app;
CREATE FUNCTION take(r text) RETURNS bigint LANGUAGE sql
	BEGIN ATOMIC SELECT redlock_lock(r, 1000); END;
CREATE VIEW my_leases AS SELECT resource FROM redlock_leases;
SQL
($rc, $out, $err) = $pg->psql('upd', 'ALTER EXTENSION redlock UPDATE',
	extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($err, qr/ERROR:  2BP01: cannot update extension redlock to version 1\.1 while other objects depend on objects it replaces/,
	'a BEGIN ATOMIC function and a view block the update, 2BP01');
like($err, qr/these depend on them: function take\(text\), view my_leases\./,
	'the detail names them');
like($err, qr/HINT:  Save the definitions of those objects, drop them, run ALTER EXTENSION redlock UPDATE, and create them again/,
	'the hint says how to proceed');
$pg->safe_psql('upd', 'DROP FUNCTION take(text); DROP VIEW my_leases');
$pg->safe_psql('upd', 'ALTER EXTENSION redlock UPDATE');
is($pg->safe_psql('upd', "SELECT extversion FROM pg_extension WHERE extname = 'redlock'"),
	'1.2', 'updated once they are gone');
is($pg->safe_psql('upd',
		"SELECT has_function_privilege('app', 'redlock_lock(text,integer,integer,boolean)', 'EXECUTE'),
		        has_function_privilege('redlock_user', 'redlock_lock(text,integer,integer,boolean)', 'EXECUTE'),
		        has_function_privilege('redlock_user', 'redlock_try_lock(text,integer,boolean)', 'EXECUTE'),
		        has_function_privilege('app', 'redlock_try_lock(text,integer,boolean)', 'EXECUTE')"),
	't|t|f|f', "the direct grant to app is kept, and so is the revoke from redlock_user");
is($pg->safe_psql('upd',
		"SELECT has_table_privilege('app', 'redlock_leases', 'SELECT'),
		        has_table_privilege('other', 'redlock_leases', 'SELECT'),
		        has_function_privilege('app', 'redlock_leases()', 'EXECUTE'),
		        has_function_privilege('other', 'redlock_leases()', 'EXECUTE')"),
	't|f|t|f', 'so are the grants and revokes on the view redlock_leases and its function');
is($pg->safe_psql('upd',
		"SET ROLE app; SELECT redlock_lock('upd:app') > 0, redlock_unlock('upd:app')"),
	't|t', 'app takes a lease with the new function');
my ($dump) = run_command([ 'pg_dump', '-s', '-d', $pg->connstr('upd') ]);
like($dump, qr/GRANT ALL ON FUNCTION public\.redlock_lock\(resource text, ttl_ms integer, wait_ms integer, keep_alive boolean\) TO app;/,
	'pg_dump still dumps the grant to app: it is not taken for an initial privilege');
like($dump, qr/REVOKE ALL ON FUNCTION public\.redlock_try_lock\(resource text, ttl_ms integer, keep_alive boolean\) FROM redlock_user;/,
	'nor the revoke');
like($dump, qr/REVOKE SELECT ON TABLE public\.redlock_leases FROM PUBLIC;/,
	'and the revoke on the view');
unlike($dump, qr/GRANT ALL ON FUNCTION public\.redlock_lock\([^)]*\) TO redlock_user/,
	"the extension's own grant stays initial");
$pg->safe_psql('upd', 'CREATE DATABASE fresh');
$pg->safe_psql('fresh', 'CREATE EXTENSION redlock');
$pg->safe_psql('upd', <<'SQL');
GRANT EXECUTE ON FUNCTION redlock_try_lock(text,integer,boolean) TO redlock_user;
REVOKE EXECUTE ON FUNCTION redlock_lock(text,integer,integer,boolean), redlock_unlock(text) FROM app;
GRANT SELECT ON redlock_leases TO PUBLIC;
REVOKE SELECT ON redlock_leases FROM app;
GRANT EXECUTE ON FUNCTION redlock_leases() TO PUBLIC;
REVOKE EXECUTE ON FUNCTION redlock_leases() FROM app;
SQL
is($pg->safe_psql('upd', privileges_sql()), $pg->safe_psql('fresh', privileges_sql()),
	'with those grants undone, 1.0 + update has the privileges and initial privileges of a fresh 1.2');

# ---------- an existing role redlock_user (issue 16, item 15) ----------

# every database with the extension must go before the role can
$pg->safe_psql('postgres', <<'SQL');
DROP DATABASE upd;
DROP DATABASE fresh;
DROP TABLE docs, held;
DROP OWNED BY writer;
DROP ROLE writer;
DROP EXTENSION redlock;
DROP ROLE redlock_user;
SQL
$pg->safe_psql('postgres', 'CREATE ROLE redlock_user');
($rc, $out, $err) = $pg->psql('postgres', 'CREATE EXTENSION redlock');
like($err, qr/role "redlock_user" already exists and was not made by extension redlock/,
	'a fresh install refuses a role redlock_user it did not make');
like($err, qr/HINT:  Drop or rename that role; or, to have redlock use it, run COMMENT ON ROLE redlock_user IS 'Members may take redlock leases \(role of extension redlock\)' first\./,
	'the hint says how to adopt it on purpose');
$pg->safe_psql('postgres',
	"COMMENT ON ROLE redlock_user IS 'Members may take redlock leases (role of extension redlock)'");
$pg->safe_psql('postgres', 'CREATE EXTENSION redlock');
$pg->safe_psql('postgres', 'CREATE DATABASE second');
$pg->safe_psql('second', 'CREATE EXTENSION redlock');
pass('with the mark, and in a further database, the install goes ahead');
$pg->safe_psql('postgres', 'DROP DATABASE second');

# ---------- a data-only restore (issue 16, item 19) ----------

$pg->safe_psql('postgres', <<'SQL');
CREATE DATABASE src;
CREATE DATABASE dst1;
CREATE DATABASE dst2;
CREATE DATABASE dst3;
SQL
my $schema = <<'SQL';
CREATE EXTENSION redlock;
CREATE TABLE acct (id int PRIMARY KEY, balance int, fence_token bigint);
CREATE TRIGGER fence BEFORE INSERT OR UPDATE OR DELETE ON acct
	FOR EACH ROW EXECUTE FUNCTION redlock_fence();
SQL
$pg->safe_psql($_, $schema) for qw(src dst1 dst2 dst3);
$pg->safe_psql('src', <<'SQL');
ALTER TABLE acct DISABLE TRIGGER fence;
INSERT INTO acct VALUES (1, 10, NULL);	-- written before the fence existed
ALTER TABLE acct ENABLE TRIGGER fence;
INSERT INTO acct VALUES (2, 20, 5);
SQL
my $archive = PostgreSQL::Test::Utils::tempdir() . '/src.dump';
command_ok([ 'pg_dump', '-Fc', '-f', $archive, '-d', $pg->connstr('src') ], 'pg_dump');
my ($stdout, $stderr) = run_command([ 'pg_restore', '--data-only', '--exit-on-error',
		'-d', $pg->connstr('dst1'), $archive ]);
like($stderr, qr/missing fencing token for table "acct"/,
	'pg_restore --data-only meets the fence');
like($stderr, qr/A data-only restore \(pg_restore --data-only\) must bypass the fence: use pg_restore --disable-triggers, or session_replication_role = replica\./,
	'and its hint says how to restore');
command_ok([ 'pg_restore', '--data-only', '--disable-triggers', '--exit-on-error',
		'-d', $pg->connstr('dst2'), $archive ], 'pg_restore --data-only --disable-triggers');
is($pg->safe_psql('dst2', 'SELECT id, balance, fence_token FROM acct ORDER BY id'),
	"1|10|\n2|20|5", 'restores every row as it was');
{
	local $ENV{PGOPTIONS} = '-c session_replication_role=replica';
	command_ok([ 'pg_restore', '--data-only', '--exit-on-error',
			'-d', $pg->connstr('dst3'), $archive ], 'pg_restore with session_replication_role = replica');
}
is($pg->safe_psql('dst3', 'SELECT id, balance, fence_token FROM acct ORDER BY id'),
	"1|10|\n2|20|5", 'restores every row as it was');

# ---------- logical replication (issue 22, item 5) ----------

my $sub = redlock_cluster('subscriber', nodes => \@redis, preload => 1, no_extension => 1,
	conf => "wal_retrieve_retry_interval = '200ms'\n");
for my $node ($pg, $sub)
{
	$node->safe_psql('postgres', <<'SQL');
CREATE EXTENSION IF NOT EXISTS redlock;
CREATE TABLE repl (id int PRIMARY KEY, v text, fence_token bigint);
CREATE TRIGGER fence BEFORE INSERT OR UPDATE OR DELETE ON repl
	FOR EACH ROW EXECUTE FUNCTION redlock_fence();
SQL
}
$pg->safe_psql('postgres', <<'SQL');
INSERT INTO repl VALUES (1, 'a', 10), (2, 'b', 10);
CREATE PUBLICATION pub FOR TABLE repl;
SQL
$sub->safe_psql('postgres',
	"CREATE SUBSCRIPTION sub CONNECTION 'host=" . $pg->host . ' port=' . $pg->port
	  . " dbname=postgres' PUBLICATION pub");
$sub->wait_for_subscription_sync($pg, 'sub');
is($sub->safe_psql('postgres', 'SELECT count(*) FROM repl'), '2', 'the subscriber has the rows');

# default trigger state: replicated writes apply, local writes are fenced
$pg->safe_psql('postgres', <<'SQL');
UPDATE repl SET v = 'a2', fence_token = 11 WHERE id = 1;
BEGIN; SET LOCAL redlock.fence_token = 11; DELETE FROM repl WHERE id = 2; COMMIT;
SQL
$pg->wait_for_catchup('sub');
is($sub->safe_psql('postgres', 'SELECT id, v, fence_token FROM repl ORDER BY id'),
	'1|a2|11', 'with the trigger in its default state, updates and deletes replicate');
($rc, $out, $err) = $sub->psql('postgres', "UPDATE repl SET v = 'local', fence_token = 11");
like($err, qr/stale fencing token/, 'and a local write on the subscriber is still fenced');

# ENABLE ALWAYS: the apply worker's DELETE stalls, with an error that says why
$sub->safe_psql('postgres', 'SELECT redlock_stats_reset()');
$sub->safe_psql('postgres', 'ALTER TABLE repl ENABLE ALWAYS TRIGGER fence');
my $offset = -s $sub->logfile;
$pg->safe_psql('postgres',
	'BEGIN; SET LOCAL redlock.fence_token = 12; DELETE FROM repl WHERE id = 1; COMMIT');
$offset = $sub->wait_for_log(qr/missing fencing token for table "repl"/, $offset);
my $log = slurp_file($sub->logfile);
like($log, qr/DETAIL:  The write is a change applied by "logical replication (?:apply )?worker for subscription \d+", which runs with session_replication_role = replica; trigger "fence" fires there only because it is enabled ALWAYS or REPLICA/,
	"the apply worker's refusal names the worker and the trigger state");
like($log, qr/HINT:  The publisher's fence has judged the change already\.  On a subscriber, leave the trigger in its default state \(ALTER TABLE public\.repl ENABLE TRIGGER fence\)/,
	'and its hint says how to fix it');
$sub->wait_for_log(qr/missing fencing token for table "repl"/, $offset);
is($sub->safe_psql('postgres', 'SELECT coalesce(sum(fence_rejections), 0) FROM redlock_stats'), '0',
	"the apply worker's retries are not counted as fence rejections");
$sub->safe_psql('postgres', 'ALTER TABLE repl ENABLE TRIGGER fence');
$pg->wait_for_catchup('sub');
is($sub->safe_psql('postgres', 'SELECT count(*) FROM repl'), '0',
	'back in the default state, the subscription applies the DELETE');

$sub->stop;
$pg->stop;
done_testing();
