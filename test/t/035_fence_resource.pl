# The fence bound to the row's resource (issue 31): with 'held' and
# 'resource=COLUMN', a write is accepted only with the token of a valid
# lease the writing session holds on that row's own resource.  Two
# sessions, leases on acct:1 and acct:2: the cross-resource write refused,
# the own-resource write accepted, an expired lease refused, an UPDATE that
# moves a row between resources, a row without a resource.  Real Redis
# nodes.
use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedlockTest;
use Test::More;

my @redis = redis_nodes(3);
my $pg = redlock_cluster('resource', nodes => \@redis, preload => 1);

$pg->safe_psql('postgres', <<'SQL');
CREATE TABLE acct (id int PRIMARY KEY, balance int NOT NULL,
	res text NOT NULL GENERATED ALWAYS AS ('acct:' || id) STORED,
	fence_token bigint);
CREATE TRIGGER fence BEFORE INSERT OR UPDATE OR DELETE ON acct
	FOR EACH ROW EXECUTE FUNCTION redlock_fence('fence_token', 'allow_equal', 'held', 'resource=res');
SQL

my $a = $pg->background_psql('postgres', on_error_stop => 0);
my $b = $pg->background_psql('postgres', on_error_stop => 0);
run_in($_, '\set VERBOSITY verbose') for ($a, $b);
my ($ta1) = run_in($a, "SELECT redlock_lock('acct:1', 60000)");
my ($tb2) = run_in($b, "SELECT redlock_lock('acct:2', 60000)");
like("$ta1 $tb2", qr/^\d+ \d+$/, "A holds acct:1 ($ta1), B holds acct:2 ($tb2)");

# ---------- each session writes its own resource's row, and only that ----------

my ($out, $err) = run_in($a, "INSERT INTO acct (id, balance, fence_token) VALUES (1, 100, $ta1)");
is($err, '', "A inserts acct:1's row with acct:1's token");
($out, $err) = run_in($b,
	"BEGIN; SET LOCAL redlock.fence_token = $tb2; INSERT INTO acct (id, balance) VALUES (2, 200) RETURNING fence_token; COMMIT");
is("$out|$err", "$tb2|", "B inserts acct:2's row with the setting, stamped into the row");

($out, $err) = run_in($b, "UPDATE acct SET balance = 0, fence_token = $tb2 WHERE id = 1");
like($err, qr/ERROR:  RL001: fencing token for table "acct" belongs to a lease on another resource/,
	"B, holding acct:2, cannot write acct:1's row with its valid token");
like($err, qr/DETAIL:  Offered token $tb2 is the token of this session's lease on "acct:2", and the row's resource \(column "res"\) is "acct:1"\./,
	'the detail names both resources');
like($err, qr/HINT:  Take the lease on "acct:1" and write the row with its token\./, 'the hint says what to do');
($out, $err) = run_in($b, "BEGIN; SET LOCAL redlock.fence_token = $tb2; DELETE FROM acct WHERE id = 1; COMMIT");
like($err, qr/belongs to a lease on another resource/, 'nor delete it with the setting');
run_in($b, 'ROLLBACK');
($out, $err) = run_in($b, "UPDATE acct SET balance = 0, fence_token = $ta1 WHERE id = 1");
like($err, qr/RL001: fencing token for table "acct" is not held by this session/,
	"nor with A's token");
like($err, qr/DETAIL:  Offered token $ta1 is not the token of a lease this session holds, nor does it hold one on "acct:1", the row's resource, which trigger "fence" requires\./,
	'the detail says B holds no lease on acct:1');
($out, $err) = run_in($a, "UPDATE acct SET balance = 0, fence_token = $ta1 WHERE id = 2");
like($err, qr/belongs to a lease on another resource/, "and A cannot write acct:2's row");

($out, $err) = run_in($a, "UPDATE acct SET balance = 110 WHERE id = 1 RETURNING balance");
like($err, qr/missing fencing token/, 'a write offering no token is still refused as missing');
($out, $err) = run_in($a, "UPDATE acct SET balance = 110, fence_token = $ta1 WHERE id = 1 RETURNING balance");
is("$out|$err", '110|', "A writes acct:1's row again ('allow_equal')");
($out, $err) = run_in($b, "UPDATE acct SET balance = 210, fence_token = $tb2 WHERE id = 2 RETURNING balance");
is("$out|$err", '210|', "and B acct:2's");

# a session's lease on the row's resource, with another token than offered
($out, $err) = run_in($a, "UPDATE acct SET balance = 0, fence_token = $ta1 - 1 WHERE id = 1");
like($err, qr/DETAIL:  Offered token \d+ is not the token of a lease this session holds; its lease on "acct:1", the row's resource, has token $ta1\./,
	"a token that is not the lease's on the row's resource: the detail gives the lease's");

# ---------- an expired lease ----------

my ($ts) = run_in($a, "SELECT redlock_lock('acct:3', 200)");
ok(lease_ran_out($a, 'acct:3'), "A's short lease on acct:3 ran out");
($out, $err) = run_in($a, "INSERT INTO acct (id, balance, fence_token) VALUES (3, 300, $ts)");
like($err, qr/RL001: fencing token for table "acct" belongs to an expired lease\n.*lease on "acct:3"/,
	"its token is refused on acct:3's row");
run_in($a, "SELECT redlock_unlock('acct:3')");

# ---------- an UPDATE that moves a row between resources ----------

my ($ta5) = run_in($a, "SELECT redlock_lock('acct:5', 60000)");
($out, $err) = run_in($a, "UPDATE acct SET id = 5, fence_token = $ta1 WHERE id = 1");
like($err, qr/belongs to a lease on another resource.*\n.*lease on "acct:1", and the row's resource \(column "res"\) is "acct:5"/,
	'moving acct:1 to acct:5 with the token of acct:1: refused, the new row is of acct:5 (its generated column computed)');
($out, $err) = run_in($a, "UPDATE acct SET id = 5, fence_token = $ta5 WHERE id = 1 RETURNING res, fence_token");
is("$out|$err", "acct:5|$ta5|", 'holding both, A moves the row to acct:5 with the token of acct:5');

my ($tb6) = run_in($b, "SELECT redlock_lock('acct:6', 60000)");
($out, $err) = run_in($b, "UPDATE acct SET id = 6, fence_token = $tb6 WHERE id = 5");
like($err, qr/ERROR:  RL001: row of table "acct" cannot leave resource "acct:5" without a valid lease on it/,
	"B, holding acct:6 but not acct:5, cannot move A's row to acct:6");
like($err, qr/DETAIL:  The UPDATE moves the row from resource "acct:5" to "acct:6" \(column "res"\), and this session holds no lease on "acct:5"\./,
	'the detail says which resource it lacks');
($out, $err) = run_in($b, "UPDATE acct SET id = 6, fence_token = $tb6 WHERE id = 2 RETURNING res");
is("$out|$err", 'acct:6|', 'B moves its own row from acct:2 to acct:6');

# the old resource's lease answers for the stored token: a newer holder of
# acct:5 wrote the row (here a write past the fence stands in for it)
$pg->safe_psql('postgres', <<"SQL");
ALTER TABLE acct DISABLE TRIGGER fence;
UPDATE acct SET fence_token = $ta5 + 1000 WHERE id = 5;
ALTER TABLE acct ENABLE TRIGGER fence;
SQL
my ($ta7) = run_in($a, "SELECT redlock_lock('acct:7', 60000)");
($out, $err) = run_in($a, "UPDATE acct SET id = 7, fence_token = $ta7 WHERE id = 5");
like($err, qr/RL001: stale fencing token for table "acct"/, "A's lease on acct:5 is older than the row's token: refused");
like($err, qr/DETAIL:  The UPDATE moves the row from resource "acct:5" to "acct:7"; this session's lease on "acct:5" has token $ta5, less than the stored token \d+\./,
	'the detail says whose token is behind');

# moving out of a resource whose lease ran out
my ($t8) = run_in($a, "SELECT redlock_lock('acct:8', 1500)");
($out, $err) = run_in($a, "INSERT INTO acct (id, balance, fence_token) VALUES (8, 800, $t8)");
is($err, '', 'A inserts a row of acct:8 under a short lease');
ok(lease_ran_out($a, 'acct:8'), 'which runs out');
($out, $err) = run_in($a, "UPDATE acct SET id = 7, fence_token = $ta7 WHERE id = 8");
like($err, qr/cannot leave resource "acct:8" without a valid lease on it\n.*this session's lease on "acct:8" has run out\./,
	'the row cannot leave acct:8 then');
run_in($a, "SELECT redlock_unlock('acct:8')");

is($pg->safe_psql('postgres', 'SELECT id, res, balance FROM acct ORDER BY id'),
	"5|acct:5|110\n6|acct:6|210\n8|acct:8|800", 'no refused write landed');
is($pg->safe_psql('postgres', "SELECT rejections FROM redlock_stats_fence WHERE relname = 'acct'"),
	'11', 'every refusal is counted as a fence rejection');

# ---------- a row without a resource ----------

$pg->safe_psql('postgres', <<'SQL');
CREATE TABLE jobs (id int PRIMARY KEY, res varchar(40), fence_token bigint);
CREATE TRIGGER fence BEFORE INSERT OR UPDATE OR DELETE ON jobs
	FOR EACH ROW EXECUTE FUNCTION redlock_fence('fence_token', 'held', 'resource=res');
SQL
($out, $err) = run_in($b, "INSERT INTO jobs VALUES (1, NULL, $tb2)");
like($err, qr/ERROR:  23502: null value in resource column "res" of table "jobs"/,
	'a NULL resource is refused with 23502');
($out, $err) = run_in($b, "INSERT INTO jobs VALUES (1, 'acct:2', $tb2) RETURNING res");
is("$out|$err", 'acct:2|', 'a varchar resource column works');

# ---------- a virtual generated column (PostgreSQL 18): never stored ----------

SKIP:
{
	skip 'virtual generated columns came with PostgreSQL 18', 3
	  if $pg->safe_psql('postgres', 'SHOW server_version_num') < 180000;
	$pg->safe_psql('postgres', <<'SQL');
CREATE TABLE vacct (id int PRIMARY KEY, res text GENERATED ALWAYS AS ('acct:' || id) VIRTUAL,
	fence_token bigint);
CREATE TRIGGER fence BEFORE INSERT OR UPDATE OR DELETE ON vacct
	FOR EACH ROW EXECUTE FUNCTION redlock_fence('fence_token', 'allow_equal', 'held', 'resource=res');
SQL
	($out, $err) = run_in($b, "INSERT INTO vacct (id, fence_token) VALUES (6, $tb6) RETURNING res");
	is("$out|$err", 'acct:6|', 'B inserts a row of acct:6 (virtual resource column)');
	($out, $err) = run_in($a, "UPDATE vacct SET fence_token = $ta7 WHERE id = 6");
	like($err, qr/belongs to a lease on another resource/, 'A cannot write it with the token of acct:7');
	($out, $err) = run_in($b, "UPDATE vacct SET id = 2, fence_token = $tb2 WHERE id = 6 RETURNING res");
	is("$out|$err", 'acct:2|', 'B moves it to acct:2, the old row computed too');
}

$a->quit;
$b->quit;
$pg->stop;
done_testing();
