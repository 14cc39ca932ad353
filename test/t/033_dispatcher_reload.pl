# Nothing handed to the dispatcher is lost when it reloads its settings or
# exits (src/workers/dispatcher.c, src/shared/shared_rounds.c,
# src/net/node_conn.c): a release queued under the old node settings is
# still sent, and the releases it keeps for a node it cannot reach are
# still sent once the node is back.  Real Redis nodes, a real cluster
# (redlock.shared_connections = always).
#
# - queued, then a reload: a session's release, handed to the stopped
#   dispatcher and given up (statement_timeout), waits in its queue while
#   the server's redlock.nodes changes (the same nodes, another order); the
#   dispatcher, running again, reads the new settings: it sends the release
#   queued under the old ones first, and the lock is gone at once (not at
#   its TTL).
# - kept, then a reload: node 5 down (killed; it keeps its data on disk),
#   a session's release reaches the other four and is kept for node 5; the
#   node list changes again, and node 5 comes back with the lock: the
#   dispatcher sends it the kept release on its next connection.
# - kept, then the dispatcher exits: the same, with the dispatcher
#   terminated instead of reloaded: the next dispatcher sends it.
# - queued, then the dispatcher exits: a release in the queue of a stopped
#   dispatcher that is terminated is sent by the next one.
use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedisNode;
use RedlockTest;
use Test::More;

# node 5 writes every command to its append-only file: killed and started
# again, it has its locks back
my @redis = (redis_nodes(4),
	RedisNode->new(args => [ '--appendonly', 'yes', '--appendfsync', 'always' ]));
my $pg = redlock_cluster('reload', nodes => \@redis, preload => 1,
	conf => "redlock.shared_connections = always\n");
my $pm_start = $pg->safe_psql('postgres', 'SELECT pg_postmaster_start_time()');
ok(wait_for(sub { worker_pid($pg, 'dispatcher') ne '' }), 'the dispatcher runs');


# the server's node list: @redis in this order; read by $s before returning
sub set_nodes
{
	my ($s, @order) = @_;
	$pg->append_conf('postgresql.conf', "redlock.nodes = '" . node_list(@order) . "'\n");
	reload_seen($pg, $s);
}

# a dispatcher waiting for rounds: its pid
sub waiting_dispatcher
{
	my $pid;
	wait_for(sub {
		$pid = worker_pid($pg, 'dispatcher');
		$pid ne '' && $pg->safe_psql('postgres',
			"SELECT wait_event IS NOT NULL FROM pg_stat_activity WHERE pid = $pid") eq 't';
	}) or die 'no dispatcher waits for rounds';
	return $pid;
}

my $s = long_session($pg);

# a lease through the dispatcher, and its release handed to the stopped
# dispatcher and given up while queued (the session does not take it
# back: its node_timeout, 5 s, is longer than its statement_timeout)
sub release_left_queued
{
	my ($res) = @_;
	my ($sh0) = dispatcher_rounds($pg);
	like($s->query_safe("SELECT redlock_lock('$res', 60000)"), qr/^\d+$/,
		"a lease on $res");
	my ($sh1) = dispatcher_rounds($pg);
	cmp_ok($sh1 - $sh0, '>=', 1, 'through the dispatcher');
	my $disp = waiting_dispatcher();
	kill 'STOP', $disp;
	$s->query_safe("SET redlock.node_timeout = '5s'");
	$s->query_safe("SET statement_timeout = '300ms'");
	my ($out, $err) = run_in($s, "SELECT redlock_unlock('$res')");
	like($err, qr/canceling statement due to statement timeout/,
		'its release, handed to the stopped dispatcher, is given up');
	$s->query_safe('RESET statement_timeout');
	$s->query_safe('RESET redlock.node_timeout');
	is(key_count($res, @redis), '1 1 1 1 1', 'the lock is still on every node');
	return $disp;
}

# --- queued, then a reload
my $disp = release_left_queued('queued');
set_nodes($s, reverse @redis);
kill 'CONT', $disp;
ok(no_keys('queued', @redis),
	'the dispatcher, reading new node settings, sent the release queued under the old ones');
is(worker_pid($pg, 'dispatcher'), $disp, 'the same dispatcher');

# --- kept, then a reload, or an exit
for my $how ('reload', 'exit')
{
	my $res = "kept_$how";
	like($s->query_safe("SELECT redlock_lock('$res', 60000)"), qr/^\d+$/,
		"$how: a lease on $res");
	is(key_count($res, @redis), '1 1 1 1 1', 'on every node');
	$redis[4]->kill9;
	$s->query_safe("SELECT redlock_unlock('$res')");
	is(key_count($res, @redis[0 .. 3]), '0 0 0 0',
		'its release reached the four nodes that run');
	if ($how eq 'reload')
	{
		set_nodes($s, @redis);
		waiting_dispatcher();
	}
	else
	{
		my $old = worker_pid($pg, 'dispatcher');
		$pg->safe_psql('postgres', "SELECT pg_terminate_backend($old)");
		wait_for(sub { my $p = worker_pid($pg, 'dispatcher'); $p ne '' && $p ne $old })
		  or die 'the dispatcher did not come back';
		waiting_dispatcher();
	}
	$redis[4]->start;
	is(key_count($res, $redis[4]), '1', 'node 5 is back, with the lock');
	# rounds through the dispatcher reach node 5 again once its backoff ends
	ok(wait_for(sub {
		$s->query_safe("SELECT redlock_lock('other', 30000)");
		$s->query_safe("SELECT redlock_unlock('other')");
		key_count($res, $redis[4]) eq '0';
	}, 20), "$how: the dispatcher sent node 5 the release it kept for it");
}

# --- queued, then the dispatcher exits
$disp = release_left_queued('queued_exit');
$pg->safe_psql('postgres', "SELECT pg_terminate_backend($disp)");
kill 'CONT', $disp;
wait_for(sub { my $p = worker_pid($pg, 'dispatcher'); $p ne '' && $p ne $disp })
  or die 'the dispatcher did not come back';
ok(no_keys('queued_exit', @redis),
	'the next dispatcher sent the release its predecessor left in the queue');

ok(no_keys('*', @redis), 'no lock key is left on any node');
$s->quit;
nothing_crashed($pg, $pm_start);
$pg->stop;
done_testing();
