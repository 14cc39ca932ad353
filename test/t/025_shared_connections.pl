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
# - always, the dispatcher stopped (SIGSTOP) before it took a round: the
#   session takes the round back after its node_timeout and runs it on its
#   own connections, and stays there (later calls do not wait for it);
#   calls are granted (one session, then
#   4 pgbench sessions whose leases still hold as intervals), and go
#   through the dispatcher again once it runs.
# - always, the dispatcher stopped after it took a round (three nodes
#   paused, so the round is in flight): the call fails after a bounded
#   wait, its DETAIL naming the dispatcher and its HINT blaming it, not the
#   nodes, long before statement_timeout, and so does the session's next
#   call (not taken back, nor sent on the session's own connections: it
#   would overtake the first); no key is left once both run again.
# - a session leaving the shared connections (auto, alone) while its
#   release waits in a stopped dispatcher's queue: the release is taken
#   back and sent ahead of its next call of the same resource, which is
#   granted.
# - always, a release of more leases than a slot holds (unlock_all of 40):
#   it runs on the session's own connections and releases them all.
# - two sessions whose release statement_timeout ended while it waited for
#   the dispatcher (always, three nodes paused), idle since, do not count as
#   rounds under way: back in auto, a new session alone keeps its own
#   connections.
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
my ($sh0, $own0) = dispatcher_rounds($pg);
for my $i (1 .. 20)
{
	$s->query_safe("SELECT redlock_try_lock('solo', 30000)");
	$s->query_safe("SELECT redlock_unlock('solo')");
}
my ($sh1, $own1) = dispatcher_rounds($pg);
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
($sh0, $own0) = dispatcher_rounds($pg);
$pg->pgbench('-n -c 8 -j 2 -T 4', 0, [qr/processed: [1-9]/], [qr/^$/],
	'8 sessions lock and unlock for 4 s',
	{ '025_cycle' => $cycle });
($sh1, $own1) = dispatcher_rounds($pg);
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
	($sh0, $own0) = dispatcher_rounds($pg);
	$pg->pgbench("-n -c $c -j " . ($c > 1 ? 2 : 1) . ' -T 3', 0,
		[qr/processed: [1-9]/], [qr/^$/],
		"$c session(s) lock and unlock for 3 s beside the one all along",
		{ "025_load_$run" => $cycle });
	($sh1, $own1) = dispatcher_rounds($pg);
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
($sh0, $own0) = dispatcher_rounds($pg);
for my $i (1 .. 10)
{
	$s->query_safe("SELECT redlock_lock('alone', 30000)");
	$s->query_safe("SELECT redlock_unlock('alone')");
}
($sh1, $own1) = dispatcher_rounds($pg);
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
($sh0, $own0) = dispatcher_rounds($pg);
$tok = $s->query_safe("SELECT redlock_lock('four', 30000)");
like($tok, qr/^\d+$/, 'with a node killed, a call through the dispatcher is granted');
$s->query_safe("SELECT redlock_unlock('four')");
($sh1, $own1) = dispatcher_rounds($pg);
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
	my ($a) = dispatcher_rounds($pg);
	$s->query_safe("SELECT redlock_lock('back', 30000)");
	$s->query_safe("SELECT redlock_unlock('back')");
	my ($b) = dispatcher_rounds($pg);
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
	($sh0, $own0) = dispatcher_rounds($pg);
	my $granted = 0;
	for my $i (1 .. 10)
	{
		my ($tok) = run_in($o, "SELECT redlock_lock('$db', 30000)");
		$granted++ if $tok =~ /^\d+$/;
		run_in($o, "SELECT redlock_unlock('$db')");
	}
	($sh1, $own1) = dispatcher_rounds($pg);
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
	($sh0, $own0) = dispatcher_rounds($pg);
	for my $i (1 .. 5)
	{
		$granted++
		  if $s->query_safe("SELECT redlock_lock('set_nodes', 30000)") =~ /^\d+$/;
		$s->query_safe("SELECT redlock_unlock('set_nodes')");
	}
	($sh1, $own1) = dispatcher_rounds($pg);
	is($granted, 5, 'SET redlock.nodes in a session: its calls are granted');
	is($sh1 - $sh0, 0, 'and none went through the dispatcher');
	$s->query_safe('RESET redlock.nodes');
	ok(wait_for(sub {
		my ($a) = dispatcher_rounds($pg);
		$s->query_safe("SELECT redlock_lock('set_nodes', 30000)");
		$s->query_safe("SELECT redlock_unlock('set_nodes')");
		my ($b) = dispatcher_rounds($pg);
		$b > $a;
	}), 'RESET redlock.nodes: its calls go through the dispatcher again');
	ok(no_keys('set_nodes', @redis), 'and left no key');
}

# --- the dispatcher stopped (SIGSTOP) before it took a round: nothing of
# the round reached a node, so the session takes it back once it waited
# its node_timeout and runs it on its own connections, and keeps them
# while the worker does not take what the session left in its queue.
# Calls are granted, alone and with 4 pgbench sessions, and the leases
# still hold as intervals; once the worker runs again, the calls go
# through it again.  (After the first call, a node_timeout of 5 s and a
# statement_timeout of 2 s: the calls do not wait for the stopped worker
# again.)
$s->query_safe("SET redlock.node_timeout = '200ms'");
$s->query_safe("SET redlock.connect_timeout = '200ms'");
my $disp = worker_pid($pg, 'dispatcher');
kill 'STOP', $disp;
($sh0, $own0) = dispatcher_rounds($pg);
for my $i (1 .. 3)
{
	$tok = $s->query_safe("SELECT redlock_lock('stopped', 30000)");
	like($tok, qr/^\d+$/, "call $i with the dispatcher stopped is granted");
	$s->query_safe("SELECT redlock_unlock('stopped')");
	if ($i == 1)
	{
		$s->query_safe("SET redlock.node_timeout = '5s'");
		$s->query_safe("SET statement_timeout = '2s'");
	}
}
$s->query_safe('RESET statement_timeout');
$s->query_safe("SET redlock.node_timeout = '200ms'");
($sh1, $own1) = dispatcher_rounds($pg);
is($sh1 - $sh0, 0, 'none of them went through the stopped dispatcher');
cmp_ok($own1 - $own0, '>=', 6, 'they ran on the session\'s own connections');
$q->('TRUNCATE grants');
{
	local $ENV{PGOPTIONS} = '-c redlock.node_timeout=200ms';
	$pg->pgbench('-n -c 4 -j 2 -T 3', 0, [qr/processed: [1-9]/], [qr/^$/],
		'4 sessions lock and unlock for 3 s with the dispatcher stopped',
		{ '025_stopped' => $cycle });
}
($sh0, $own0) = dispatcher_rounds($pg);
cmp_ok($own0 - $own1, '>', 0, 'their calls ran on their own connections');
check_grants('the dispatcher stopped: ');
kill 'CONT', $disp;
ok(wait_for(sub {
	my ($a) = dispatcher_rounds($pg);
	$s->query_safe("SELECT redlock_lock('stopped', 30000)");
	$s->query_safe("SELECT redlock_unlock('stopped')");
	my ($b) = dispatcher_rounds($pg);
	$b > $a;
}), 'once the dispatcher runs again, calls go through it again');
ok(no_keys('stopped', @redis), 'no call left a key');

# --- the dispatcher stopped after it took a round (sent to every node,
# three of them paused so that it cannot be decided): the round may be
# partly sent, so the call waits for it within its bound (two attempts at
# every node and a second: with the session's timeouts, 2 * (200 ms + 2 s)
# + 1 s), then fails on every node with a detail naming the dispatcher;
# statement_timeout, far beyond that bound, is not what ends it.  The
# session's next call must not overtake that round on its own
# connections: it is not taken back (its slots taken, it is not even
# queued), and fails naming the dispatcher.
$s->query_safe("SET redlock.node_timeout = '2s'");
$s->query_safe("SET statement_timeout = '30s'");
$_->pause for @redis[0 .. 2];
$s->query_until(qr/sent/, "\\echo sent\nSELECT redlock_lock('taken', 30000);\n");
ok(wait_for(sub { keys_on($redis[3], 'taken') ne '' && keys_on($redis[4], 'taken') ne '' }),
	'the dispatcher sent the call\'s round to the nodes that run');
kill 'STOP', $disp;
my ($out, $err) = run_in($s, "SELECT 'after'");
like($err,
	qr/could not acquire lease on "taken": fewer than a majority of Redis nodes could answer.*DETAIL:.*the dispatcher worker did not answer in time/s,
	'a call whose round the stopped dispatcher had taken fails, naming it');
like($err, qr/HINT:  The dispatcher worker, which runs this server's rounds on shared connections, is stalled or gone: it failed the round, not the nodes/,
	'... and its hint blames the dispatcher, not the nodes');
($out, $err) = run_in($s, "SELECT redlock_lock('taken2', 30000)");
like($err,
	qr/could not acquire lease on "taken2": fewer than a majority of Redis nodes could answer.*DETAIL:.*the dispatcher worker (?:did not answer in time|still holds an earlier round of this session)/s,
	'the session\'s next call is not taken back: it fails, naming the dispatcher');
kill 'CONT', $disp;
$_->resume for @redis[0 .. 2];
$s->query_safe('RESET statement_timeout');
$s->query_safe('RESET redlock.node_timeout');
$s->query_safe('RESET redlock.connect_timeout');
for my $i (1 .. 3)
{
	$tok = $s->query_safe("SELECT redlock_lock('taken', 30000)");
	like($tok, qr/^\d+$/, "call $i once the dispatcher and the nodes run again is granted");
	$s->query_safe("SELECT redlock_unlock('taken')");
}
ok(no_keys('taken*', @redis), 'neither the failed calls nor the next ones left a key');

# --- a session's commands reach each node in the order sent, also when it
# leaves the shared connections.  A lease taken through the dispatcher; the
# dispatcher restarted (its successor owes the session nothing) and
# stopped once it waits for rounds; the session's release of the lease,
# handed to it, given up (statement_timeout) while it waits in the queue;
# then, with the setting auto and the session alone, its next call of the
# same resource leaves the shared connections.  The release must reach
# the nodes first: taken back from the stopped dispatcher and sent ahead
# on the session's own connections, it frees the resource and the call is
# granted; had the call gone first, it would find the session's own
# earlier value on every node and be refused.
my $o = long_session($pg);
($sh0, $own0) = dispatcher_rounds($pg);
$tok = $o->query_safe("SELECT redlock_try_lock('order', 60000)");
like($tok, qr/^\d+$/, 'a lease through the dispatcher');
($sh1, $own1) = dispatcher_rounds($pg);
cmp_ok($sh1 - $sh0, '>=', 1, 'it went through the dispatcher');
my $v1;
ok(wait_for(sub {
	my %v = map { $_ => 1 } lock_values('order', @redis);
	($v1) = keys %v;
	keys %v == 1 && $v1 ne '-';
}), 'its value is on every node');
$old = worker_pid($pg, 'dispatcher');
$q->("SELECT pg_terminate_backend($old)");
ok(wait_for(sub { my $p = worker_pid($pg, 'dispatcher'); $p ne '' && $p ne $old }),
	'the dispatcher restarted');
$disp = worker_pid($pg, 'dispatcher');
ok(wait_for(sub { $q->("SELECT wait_event IS NOT NULL FROM pg_stat_activity WHERE pid = $disp") eq 't' }),
	'it waits for rounds');
kill 'STOP', $disp;
$o->query_safe("SET statement_timeout = '1s'");
($out, $err) = run_in($o, "SELECT redlock_unlock('order')");
like($err, qr/canceling statement due to statement timeout/,
	'the release, handed to the stopped dispatcher, is given up');
$o->query_safe('RESET statement_timeout');
is(join(' ', lock_values('order', @redis)), join(' ', ($v1) x @redis),
	'the lease\'s value is still on every node');
$pg->append_conf('postgresql.conf', "redlock.shared_connections = auto\n");
reload_seen($pg, $o);
$o->query_safe("SET redlock.node_timeout = '200ms'");
($sh0, $own0) = dispatcher_rounds($pg);
$tok = $o->query_safe("SELECT redlock_try_lock('order', 60000)");
like($tok, qr/^\d+$/,
	'the session\'s next call of the resource, leaving the shared connections, is granted');
($sh1, $own1) = dispatcher_rounds($pg);
cmp_ok($own1 - $own0, '>=', 1, 'it ran on the session\'s own connections');
my %v2 = map { $_ => 1 } lock_values('order', @redis);
ok(keys %v2 == 1 && !$v2{$v1} && !$v2{'-'}, 'a new value is on every node');
kill 'CONT', $disp;
$o->query_safe("SELECT redlock_unlock('order')");
$o->quit;
ok(no_keys('order', @redis), 'the resource is free');
$pg->append_conf('postgresql.conf', "redlock.shared_connections = always\n");
reload_seen($pg, $s);

# --- a release of more leases than a slot holds (40 in one command):
# redlock_unlock_all runs it on the session's own connections
for my $i (1 .. 40)
{
	$s->query_safe("SELECT redlock_lock('many:$i', 60000)");
}
is($s->query_safe("SELECT count(*) FROM redlock_leases WHERE resource LIKE 'many:%'"),
	'40', 'the session holds 40 leases');
($sh0, $own0) = dispatcher_rounds($pg);
$s->query_safe('SELECT redlock_unlock_all()');
($sh1, $own1) = dispatcher_rounds($pg);
cmp_ok($own1 - $own0, '>=', 1, 'redlock_unlock_all of 40 leases ran on the session\'s own connections');
is($s->query_safe('SELECT count(*) FROM redlock_leases'), '0', 'the session holds none');
ok(no_keys('many:*', @redis), 'every one of the 40 was released on every node');
ok(wait_for(sub {
	my ($a) = dispatcher_rounds($pg);
	$s->query_safe("SELECT redlock_lock('many:1', 30000)");
	$s->query_safe("SELECT redlock_unlock('many:1')");
	my ($b) = dispatcher_rounds($pg);
	$b > $a;
}), 'the session\'s calls go through the dispatcher again');

ok(no_keys('*', @redis), 'no lock key is left on any node');

# --- two sessions whose round statement_timeout ended while it waited for
# the dispatcher (always, three nodes paused), idle since, are not rounds
# under way: back in auto, a new session alone keeps its own connections
my @idle = map { long_session($pg) } 1 .. 2;
for my $i (0 .. 1)
{
	like($idle[$i]->query_safe("SELECT redlock_lock('err:$i', 30000)"),
		qr/^\d+$/, "idle session $i holds a lease");
}
$_->pause for @redis[0 .. 2];
for my $i (0 .. 1)
{
	$idle[$i]->query("SET statement_timeout = '300ms'");
	$idle[$i]->{stderr} = '';
	$idle[$i]->query("SELECT redlock_unlock('err:$i')");
	like($idle[$i]->{stderr}, qr/canceling statement due to statement timeout/,
		"statement_timeout ended idle session ${i}'s release in the dispatcher");
	$idle[$i]->{stderr} = '';
	$idle[$i]->query_safe('RESET statement_timeout');
}
$_->resume for @redis[0 .. 2];
$pg->append_conf('postgresql.conf', "redlock.shared_connections = auto\n");
reload_seen($pg, $s);

# a new session: its connections owe nothing, so it would move at its first
# round if the two counted as busy
my $fresh = long_session($pg);
($sh0, $own0) = dispatcher_rounds($pg);
for my $i (1 .. 20)
{
	$fresh->query_safe("SELECT redlock_try_lock('solo', 30000)");
	$fresh->query_safe("SELECT redlock_unlock('solo')");
}
($sh1, $own1) = dispatcher_rounds($pg);
is($sh1 - $sh0, 0,
	'beside two idle sessions whose rounds an error ended, a new session alone keeps its own connections');
$fresh->quit;
for my $i (0 .. 1)
{
	$idle[$i]->query_safe('SELECT redlock_unlock_all()');
	$idle[$i]->quit;
}
ok(wait_for(sub { no_keys('*', @redis) }), 'and no lock key is left on any node');

$s->quit;
nothing_crashed($pg, $pm_start);
$pg->stop;
done_testing();
