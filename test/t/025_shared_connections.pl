# The dispatcher's shared connections (src/shared/shared_rounds.c,
# src/workers/dispatcher.c, src/net/node_batch.c): under concurrency the
# lock calls of the server's backends go through one connection per node
# held by the dispatcher worker; a session alone keeps its own.  Real Redis
# nodes, a real cluster with redlock in shared_preload_libraries.
#
# - auto (the default): one session alone never goes through the
#   dispatcher; 8 pgbench sessions do, and every lease they were told of
#   holds as an interval (no two holders of one resource overlap, tokens
#   grow with the grants), no call on an uncontended resource is refused,
#   and no key is left behind.
# - always: a single session's calls go through it; statement_timeout ends
#   a call whose round waits for paused nodes, the session's next calls
#   work and the abandoned attempt leaves no key; a node killed does not
#   stop the calls; the dispatcher terminated: calls go on (their own
#   connections) and go through it again once it is back.
# - auto, the load going up and down (pgbench with 1, 8, 2, then 8
#   sessions on the same resources, one more session running all along):
#   sessions move between their own connections and the shared ones, and
#   still no key is left and no uncontended call is refused.
# - always, and a database whose redlock.nodes differs from the server's
#   (the same nodes in another order, three of them): its sessions keep
#   their own connections, and their calls are granted.
# - always, a session that sets another node list (the same nodes in
#   another order): its own connections until it resets it.
# - always, the dispatcher stopped (SIGSTOP): a call handed to it fails
#   after a bounded wait, its DETAIL naming the dispatcher, long before
#   statement_timeout; once it runs again the calls go through it and no
#   key is left.
# - always, a release of more leases than a slot holds (unlock_all of 40):
#   it runs on the session's own connections and releases them all.
use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedlockTest;
use Test::More;
use Time::HiRes qw(time);
use IPC::Run;

my @redis = redis_nodes(5);
my $pg = redlock_cluster('shared', nodes => \@redis, preload => 1,
	conf => "redlock.node_timeout = '10s'\nmax_connections = 40\n");
my $pm_start = $pg->safe_psql('postgres', 'SELECT pg_postmaster_start_time()');

ok(wait_for(sub { worker_pid($pg, 'dispatcher') ne '' }), 'the dispatcher runs');
is($pg->safe_psql('postgres', 'SHOW redlock.shared_connections'), 'auto',
	'redlock.shared_connections is auto by default');

sub rounds
{
	my $r = $pg->safe_psql('postgres',
		'SELECT rounds_shared, rounds_own FROM redlock_dispatcher');
	return split /\|/, $r;
}

# the checks of the grants table (filled by t_lock and t_unlock below)
sub check_grants
{
	my ($what) = @_;
	my $q = sub { $pg->safe_psql('postgres', $_[0]) };
	cmp_ok($q->("SELECT count(*) FROM grants WHERE resource = 'hot' AND token IS NOT NULL"),
		'>', 0, "${what}the hot resource was granted");
	cmp_ok($q->("SELECT count(*) FROM grants WHERE resource LIKE 'own:%'"),
		'>', 0, "${what}the sessions' own resources were asked for");
	is($q->("SELECT count(*) FROM grants WHERE resource LIKE 'own:%' AND token IS NULL"),
		'0', "${what}no call on a resource nobody else wanted was refused");
	is($q->("SELECT count(*) FROM grants WHERE token IS NOT NULL AND released IS NULL"),
		'0', "${what}every lease granted was released by its holder");

	# every lease as an interval: from the return of the call that granted it
	# to the end of the validity its holder was told, or its release if sooner.
	# In token order, per resource, each holder's interval starts after the
	# previous one's ended, and a later grant has a greater token.
	is($q->(q{
	SELECT count(*) FROM (
	  SELECT resource, token, granted,
	         lag(least(valid_until, released)) OVER w AS prev_end,
	         lag(granted) OVER w AS prev_granted
	    FROM grants WHERE token IS NOT NULL
	  WINDOW w AS (PARTITION BY resource ORDER BY token)) x
	 WHERE granted < prev_end OR granted <= prev_granted}),
		'0', "${what}no two holders of one resource overlapped, tokens grew with the grants");
	is($q->('SELECT count(*) - count(DISTINCT (resource, token)) FROM grants WHERE token IS NOT NULL'),
		'0', "${what}no token was given twice for one resource");
	ok(no_keys('*', @redis), "${what}no lock key is left on any node");
}

# --- auto: a session alone keeps its own connections
my $s = long_session($pg);
my ($sh0, $own0) = rounds();
for my $i (1 .. 20)
{
	$s->query_safe("SELECT redlock_try_lock('solo', 30000)");
	$s->query_safe("SELECT redlock_unlock('solo')");
}
my ($sh1, $own1) = rounds();
is($sh1 - $sh0, 0, 'a session alone never goes through the dispatcher');
cmp_ok($own1 - $own0, '>=', 40, 'its 40 calls ran on its own connections');

# --- auto, 8 sessions: each call is two statements (lock, then unlock), as
# an application makes them; half of them on one hot resource
$pg->safe_psql('postgres', q{
CREATE TABLE grants (id bigserial, client int, resource text, token bigint,
                     asked timestamptz, granted timestamptz,
                     valid_until timestamptz, released timestamptz);
CREATE FUNCTION t_lock(c int, hot int) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    r text := CASE WHEN hot = 1 THEN 'hot' ELSE 'own:' || c END;
    t0 timestamptz := clock_timestamp();
    tok bigint := redlock_try_lock(r, 30000);
    t1 timestamptz := clock_timestamp();
    v int;
BEGIN
    SELECT validity_ms INTO v FROM redlock_leases WHERE resource = r;
    INSERT INTO grants (client, resource, token, asked, granted, valid_until)
    VALUES (c, r, tok, t0, t1,
            CASE WHEN tok IS NOT NULL
                 THEN clock_timestamp() + v * interval '1 ms' END);
END $$;
CREATE FUNCTION t_unlock(c int) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    l record;
BEGIN
    FOR l IN SELECT resource, token FROM redlock_leases LOOP
        UPDATE grants SET released = clock_timestamp()
         WHERE resource = l.resource AND token = l.token;
        PERFORM redlock_unlock(l.resource);
    END LOOP;
END $$;
});
my $cycle = q{
\set hot random(0, 1)
SELECT t_lock(:client_id, :hot);
SELECT t_unlock(:client_id);
};
($sh0, $own0) = rounds();
$pg->pgbench('-n -c 8 -j 2 -T 4', 0, [qr/processed: [1-9]/], [qr/^$/],
	'8 sessions lock and unlock for 4 s',
	{ '025_cycle' => $cycle });
($sh1, $own1) = rounds();
cmp_ok($sh1 - $sh0, '>', 0,
	'under concurrency calls went through the dispatcher (' . ($sh1 - $sh0)
	  . ' shared rounds, ' . ($own1 - $own0) . ' own)');

my $q = sub { $pg->safe_psql('postgres', $_[0]) };
check_grants('');

# --- auto, the load going up and down on the same resources: pgbench with
# 1, 8, 2, then 8 sessions, and one more session (client 100) cycling all
# along; the sessions move between their own connections and the shared
# ones as the rounds under way come and go, and a session must not leave
# a command behind on one path while the next goes by the other
$q->('TRUNCATE grants');
my $along_sql = $pg->basedir . '/025_along.sql';
append_to_file($along_sql, q{
\set hot random(0, 1)
SELECT t_lock(100, :hot);
SELECT t_unlock(100);
});
my ($along_out, $along_err) = ('', '');
my $along = IPC::Run::start(
	[ 'pgbench', '-n', '-c', '1', '-T', '16', '-f', $along_sql,
		'-h', $pg->host, '-p', $pg->port, 'postgres' ],
	'<', \'', '>', \$along_out, '2>', \$along_err,
	IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default));
my $run = 0;
for my $c (1, 8, 2, 8)
{
	$run++;
	($sh0, $own0) = rounds();
	$pg->pgbench("-n -c $c -j " . ($c > 1 ? 2 : 1) . ' -T 3', 0,
		[qr/processed: [1-9]/], [qr/^$/],
		"$c session(s) lock and unlock for 3 s beside the one all along",
		{ "025_load_$run" => $cycle });
	($sh1, $own1) = rounds();
	note "$c + 1 sessions: " . ($sh1 - $sh0) . ' shared rounds, '
	  . ($own1 - $own0) . ' own';
	cmp_ok($sh1 - $sh0, '>', 0, "with 8 + 1 sessions, calls went through the dispatcher")
	  if $c == 8;
}
ok($along->finish, 'the session all along ran to its end (exit status 0)')
  or diag $along_err;
like($along_out, qr/processed: [1-9]/, 'and made calls');
cmp_ok($q->('SELECT count(*) FROM grants WHERE client = 100'), '>', 0,
	'its grants are in the table');
check_grants('load going up and down: ');

# --- always: every eligible call of a session goes through the dispatcher
$pg->append_conf('postgresql.conf', "redlock.shared_connections = always\n");
$pg->reload;
ok(wait_for(sub { $s->query_safe('SHOW redlock.shared_connections') eq 'always' }),
	'the setting reached the session');
($sh0, $own0) = rounds();
for my $i (1 .. 10)
{
	$s->query_safe("SELECT redlock_lock('alone', 30000)");
	$s->query_safe("SELECT redlock_unlock('alone')");
}
($sh1, $own1) = rounds();
cmp_ok($sh1 - $sh0, '>=', 20, "with always, a session alone goes through it too");

# statement_timeout ends a call whose round waits for paused nodes
$_->pause for @redis[0 .. 2];
$s->query("SET statement_timeout = '500ms'");
$s->query("SELECT redlock_lock('stuck', 30000)");
like($s->{stderr}, qr/canceling statement due to statement timeout/,
	'statement_timeout ends a call waiting for the dispatcher');
$s->{stderr} = '';
$s->query_safe('RESET statement_timeout');
$_->resume for @redis[0 .. 2];
my $tok = $s->query_safe("SELECT redlock_lock('stuck', 30000)");
like($tok, qr/^\d+$/, 'the session\'s next call is granted once the nodes answer');
$s->query_safe("SELECT redlock_unlock('stuck')");
ok(no_keys('stuck', @redis), 'neither the abandoned attempt nor the lease left a key');

# a node killed: the calls go on with four
$redis[4]->kill9;
($sh0, $own0) = rounds();
$tok = $s->query_safe("SELECT redlock_lock('four', 30000)");
like($tok, qr/^\d+$/, 'with a node killed, a call through the dispatcher is granted');
$s->query_safe("SELECT redlock_unlock('four')");
($sh1, $own1) = rounds();
cmp_ok($sh1 - $sh0, '>=', 2, 'and went through it');
$redis[4]->start;

# the dispatcher terminated: calls go on, and through it again once it is back
my $old = worker_pid($pg, 'dispatcher');
$q->("SELECT pg_terminate_backend($old)");
for my $i (1 .. 5)
{
	$tok = $s->query_safe("SELECT redlock_lock('gone', 30000)");
	like($tok, qr/^\d+$/, "call $i while the dispatcher restarts is granted");
	$s->query_safe("SELECT redlock_unlock('gone')");
}
ok(wait_for(sub { my $p = worker_pid($pg, 'dispatcher'); $p ne '' && $p ne $old }),
	'the dispatcher is back');
ok(wait_for(sub {
	my ($a) = rounds();
	$s->query_safe("SELECT redlock_lock('back', 30000)");
	$s->query_safe("SELECT redlock_unlock('back')");
	my ($b) = rounds();
	$b > $a;
}), 'calls go through it again');

# --- a session whose node settings are not the server's keeps its own
# connections (the dispatcher's would ask other nodes, or the same ones
# under other indexes): a database that lists the same nodes in reverse
# order, and one that lists three of them
for my $d ([ 'reordered', node_list(reverse @redis) ],
	[ 'three', node_list(@redis[ 0 .. 2 ]) ])
{
	my ($db, $nodes) = @$d;
	$q->("CREATE DATABASE $db");
	$q->("ALTER DATABASE $db SET redlock.nodes = '$nodes'");
	$pg->safe_psql($db, 'CREATE EXTENSION redlock');
	my $o = long_session($pg, $db);
	is($o->query_safe('SHOW redlock.nodes'), $nodes,
		"a session of database $db has its own node list");
	($sh0, $own0) = rounds();
	my $granted = 0;
	for my $i (1 .. 10)
	{
		my ($tok) = run_in($o, "SELECT redlock_lock('$db', 30000)");
		$granted++ if $tok =~ /^\d+$/;
		run_in($o, "SELECT redlock_unlock('$db')");
	}
	($sh1, $own1) = rounds();
	is($granted, 10, "with always, every call of a session of $db is granted");
	is($sh1 - $sh0, 0, 'and none went through the dispatcher');
	cmp_ok($own1 - $own0, '>=', 20, 'they ran on its own connections');
	$o->quit;
	ok(no_keys($db, @redis), "the calls of $db left no key");
}

# --- a session that went through the dispatcher sets another node list
# (the same nodes in another order): its calls keep to its own
# connections (its settings are not the dispatcher's any more) until it
# resets it, then go through the dispatcher again
{
	my $reordered = node_list(reverse @redis);
	my $granted = 0;

	$s->query_safe("SET redlock.nodes = '$reordered'");
	($sh0, $own0) = rounds();
	for my $i (1 .. 5)
	{
		$granted++
		  if $s->query_safe("SELECT redlock_lock('set_nodes', 30000)") =~ /^\d+$/;
		$s->query_safe("SELECT redlock_unlock('set_nodes')");
	}
	($sh1, $own1) = rounds();
	is($granted, 5, 'SET redlock.nodes in a session: its calls are granted');
	is($sh1 - $sh0, 0, 'and none went through the dispatcher');
	$s->query_safe('RESET redlock.nodes');
	ok(wait_for(sub {
		my ($a) = rounds();
		$s->query_safe("SELECT redlock_lock('set_nodes', 30000)");
		$s->query_safe("SELECT redlock_unlock('set_nodes')");
		my ($b) = rounds();
		$b > $a;
	}), 'RESET redlock.nodes: its calls go through the dispatcher again');
	ok(no_keys('set_nodes', @redis), 'and left no key');
}

# --- the dispatcher stopped: a call handed to it waits for the time of
# two attempts at every node and a second (with the session's timeouts
# here, 2 * (200 ms + 200 ms) + 1 s), then fails on every node with a
# detail naming the dispatcher.  statement_timeout, far beyond that bound
# (and short of the bound with the server's node_timeout of 10 s), must
# not be what ends it.
$s->query_safe("SET redlock.node_timeout = '200ms'");
$s->query_safe("SET redlock.connect_timeout = '200ms'");
$s->query_safe("SET statement_timeout = '10s'");
my $disp = worker_pid($pg, 'dispatcher');
kill 'STOP', $disp;
my $t0 = time;
my ($out, $err) = run_in($s, "SELECT redlock_lock('stopped', 30000)");
my $took = time - $t0;
kill 'CONT', $disp;
like($err,
	qr/could not acquire lease on "stopped": fewer than a majority of Redis nodes could answer.*DETAIL:.*the dispatcher worker did not answer in time/s,
	sprintf('a call handed to the stopped dispatcher fails, naming it (after %.1f s)', $took));
$s->query_safe('RESET statement_timeout');
$s->query_safe('RESET redlock.node_timeout');
$s->query_safe('RESET redlock.connect_timeout');
($sh0, $own0) = rounds();
for my $i (1 .. 3)
{
	$tok = $s->query_safe("SELECT redlock_lock('stopped', 30000)");
	like($tok, qr/^\d+$/, "call $i once the dispatcher runs again is granted");
	$s->query_safe("SELECT redlock_unlock('stopped')");
}
($sh1, $own1) = rounds();
cmp_ok($sh1 - $sh0, '>=', 6, 'and went through it');
ok(no_keys('stopped', @redis), 'neither the failed call nor the next ones left a key');

# --- a release of more leases than a slot holds (40 in one command):
# redlock_unlock_all runs it on the session's own connections
for my $i (1 .. 40)
{
	$s->query_safe("SELECT redlock_lock('many:$i', 60000)");
}
is($s->query_safe("SELECT count(*) FROM redlock_leases WHERE resource LIKE 'many:%'"),
	'40', 'the session holds 40 leases');
($sh0, $own0) = rounds();
$s->query_safe('SELECT redlock_unlock_all()');
($sh1, $own1) = rounds();
cmp_ok($own1 - $own0, '>=', 1, 'redlock_unlock_all of 40 leases ran on the session\'s own connections');
is($s->query_safe('SELECT count(*) FROM redlock_leases'), '0', 'the session holds none');
ok(no_keys('many:*', @redis), 'every one of the 40 was released on every node');
ok(wait_for(sub {
	my ($a) = rounds();
	$s->query_safe("SELECT redlock_lock('many:1', 30000)");
	$s->query_safe("SELECT redlock_unlock('many:1')");
	my ($b) = rounds();
	$b > $a;
}), 'the session\'s calls go through the dispatcher again');

ok(no_keys('*', @redis), 'no lock key is left on any node');

$s->quit;
nothing_crashed($pg, $pm_start);
$pg->stop;
done_testing();
