# A backend's commands reach each node in the order it sent them, also
# across the dispatcher's shared connections and its own
# (src/shared/shared_rounds_backend.c, src/workers/dispatcher.c): it never
# sends on its own connections while a round of it is queued, running or
# owed a reply in the dispatcher.  Real Redis nodes, a real cluster.
#
# On loopback a node takes its commands in the order they reach it, so a
# command on the session's own connection overtakes one of the dispatcher
# only where the dispatcher's reaches the node later: here, on a connection
# the dispatcher opened to a paused node (waiting to be accepted), which
# the node takes up after the established connections that have input.
# Each case restarts the dispatcher (no connections), pauses nodes, and
# has the session's next command go out while the dispatcher's wait there.
#
# - owed: a session kept on the shared connections by two busy ones (auto)
#   takes a lock through the dispatcher with node 3 paused, decided without
#   node 3's reply; the two stop, and the session, alone, unlocks at once.
#   The unlock must follow the lock through the dispatcher: node 3 owes the
#   lock a reply.  redlock.debug_complete_delay widens the gap between the
#   dispatcher publishing what it still owes and handing the round back
#   (dispatcher.c round_done), where the session would otherwise read a
#   stale "nothing owed" and unlock on its own connection; once node 3
#   runs, no lock may remain there.
# - tags: a session's rounds through one dispatcher count as answered for
#   the next one (it tags its rounds above every tag its predecessor
#   completed, and a starting dispatcher writes no slot it does not own):
#   with the new one owing a reply (node 3 paused), the session, alone,
#   goes back to its own connections at its next call.
# - running: with nodes 1-3 paused, a session (always) hands the
#   dispatcher three releases, which it sends and cannot decide, and which
#   the session gives up on (they run on in the dispatcher), then a lock;
#   the dispatcher is stopped once it sent the lock.  With the session's
#   slots full, the withdrawal of its attempt must not go out on its own
#   connections while the lock runs in the stopped worker (it would reach
#   nodes 1-3 first, and the lock, applied after it, would stay on a
#   majority for its TTL: the session's own resource refused, as seen
#   after a dispatcher stall).  The lock call fails, nothing runs on the
#   session's own connections while the worker holds its rounds, and once
#   all run again the resource is granted and no key is left.
use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedlockTest;
use Test::More;
use Time::HiRes qw(usleep);

my @redis = redis_nodes(5);
# node X: the two busy sessions' own node list, paused so that their
# rounds stay under way
my ($x) = redis_nodes(1);
my $pg = redlock_cluster('order', nodes => \@redis, preload => 1,
	conf => "redlock.node_timeout = '2s'\nmax_connections = 40\n");
my $pm_start = $pg->safe_psql('postgres', 'SELECT pg_postmaster_start_time()');
ok(wait_for(sub { worker_pid($pg, 'dispatcher') ne '' }), 'the dispatcher runs');


# restart the dispatcher: the new one has no connection yet; returns its pid
sub new_dispatcher
{
	my $old = worker_pid($pg, 'dispatcher');
	$pg->safe_psql('postgres', "SELECT pg_terminate_backend($old)");
	my $new;
	wait_for(sub { $new = worker_pid($pg, 'dispatcher'); $new ne '' && $new ne $old })
	  or die 'the dispatcher did not come back';
	wait_for(sub {
		$pg->safe_psql('postgres',
			"SELECT wait_event IS NOT NULL FROM pg_stat_activity WHERE pid = $new") eq 't'
	}) or die 'the dispatcher does not wait for rounds';
	return $new;
}

# --- owed: the unlock follows a lock node 3 still owes a reply to
my $s = long_session($pg);
# its own connections to every node, opened while alone (auto)
like($s->query_safe("SELECT redlock_lock('warm', 30000)"), qr/^\d+$/,
	'the session, alone, takes a lock on its own connections');
$s->query_safe("SELECT redlock_unlock('warm')");

# Two sessions whose rounds stay under way on their own connections
# (their node list, node X alone, is not the dispatcher's; X is paused):
# the others under way that keep a session in auto on the shared
# connections.  Stopped (cancelled), they leave it alone.
sub start_busy
{
	my @busy;
	$x->pause;
	for my $i (1 .. 2)
	{
		my $b = long_session($pg);
		my $pid = $b->query_safe('SELECT pg_backend_pid()');
		$b->query_safe("SET redlock.nodes = '" . node_list($x) . "'");
		$b->query_safe("SET redlock.node_timeout = '60s'");
		$b->query_until(qr/busy/, "\\echo busy\nSELECT redlock_lock('busy:$i', 30000);\n");
		push @busy, [ $b, $pid ];
	}
	return @busy;
}

sub stop_busy
{
	my (@busy) = @_;
	$pg->safe_psql('postgres', "SELECT pg_cancel_backend($_->[1])") for @busy;
	for my $b (@busy)
	{
		my ($out, $err) = run_in($b->[0], "SELECT 'stopped'");
		like($err, qr/canceling statement/, 'a busy session is stopped');
		$b->[0]->quit;
	}
	$x->resume;
}

# a session of the server ($s or another) goes through the dispatcher
sub goes_shared
{
	my ($session) = @_;
	return wait_for(sub {
		my ($a) = dispatcher_rounds($pg);
		$session->query_safe("SELECT redlock_lock('warm', 30000)");
		$session->query_safe("SELECT redlock_unlock('warm')");
		my ($b) = dispatcher_rounds($pg);
		$b > $a;
	});
}

my @busy = start_busy();
ok(goes_shared($s), 'beside two busy sessions, the session\'s calls go through the dispatcher');

# a dispatcher whose rounds are handed back long after it published what
# it owes, and that has no connection yet
$pg->append_conf('postgresql.conf', "redlock.debug_complete_delay = '3s'\n");
reload_seen($pg, $s);
new_dispatcher();
$redis[2]->pause;
like($s->query_safe("SELECT redlock_lock('owed', 30000)"), qr/^\d+$/,
	'with node 3 paused, a lock through the dispatcher is granted');
stop_busy(@busy);
$s->query_safe("SELECT redlock_unlock('owed')");
$redis[2]->resume;
ok(no_keys('owed', @redis),
	'node 3, running again, took the lock and then its release: no key is left');
is(keys_on($redis[2], 'owed'), '', 'none on node 3');

# --- tags: the session's rounds through one dispatcher are answered for
# the next one, whose connections start owing at once (node 3 paused,
# another session's lock sent to it): the session, alone, goes back to its
# own connections at its next call.  (A dispatcher that tagged its rounds
# from 1 again would take the session's last tag, from its predecessor,
# for one of its own still owed.)
$pg->append_conf('postgresql.conf', "redlock.debug_complete_delay = 0\n");
reload_seen($pg, $s);
@busy = start_busy();
ok(goes_shared($s), 'the session goes through the dispatcher again');
for my $i (1 .. 20)
{
	$s->query_safe("SELECT redlock_lock('many', 30000)");
	$s->query_safe("SELECT redlock_unlock('many')");
}
my $t = long_session($pg);
ok(goes_shared($t), 'so does another session');
new_dispatcher();
$redis[2]->pause;
like($t->query_safe("SELECT redlock_lock('owed2', 30000)"), qr/^\d+$/,
	'the other session takes a lock through the new dispatcher, node 3 paused');
stop_busy(@busy);
my ($sh0, $own0) = dispatcher_rounds($pg);
like($s->query_safe("SELECT redlock_try_lock('alone', 30000)"), qr/^\d+$/,
	'the session, alone, takes a lock');
my ($sh1, $own1) = dispatcher_rounds($pg);
is($sh1 - $sh0, 0, 'not through the new dispatcher');
cmp_ok($own1 - $own0, '>=', 1, 'on its own connections');
$s->query_safe("SELECT redlock_unlock('alone')");
$redis[2]->resume;
$t->query_safe("SELECT redlock_unlock('owed2')");
$t->quit;
ok(no_keys('*', @redis), 'no key is left');

# --- running: the session's rounds held by a stopped dispatcher.  The
# dispatcher waits up to 10 s for a node; the session gives up on a round
# after 1.8 s (two attempts at every node with its own timeouts, and a
# second), leaving it running there.
$pg->append_conf('postgresql.conf',
	"redlock.debug_complete_delay = 0\nredlock.shared_connections = always\nredlock.node_timeout = '10s'\n");
reload_seen($pg, $s);
$s->query_safe("SET redlock.node_timeout = '200ms'");
$s->query_safe("SET redlock.connect_timeout = '200ms'");
my $spid = $s->query_safe('SELECT pg_backend_pid()');
for my $r ('a', 'b', 'c')
{
	like($s->query_safe("SELECT redlock_lock('$r', 60000)"), qr/^\d+$/,
		"the session holds $r");
}
my $disp = new_dispatcher();
$_->pause for @redis[0 .. 2];
(undef, $own0) = dispatcher_rounds($pg);
# three releases the dispatcher sends and cannot decide, given up by the
# session (a warning each), running still
for my $r ('a', 'b', 'c')
{
	my ($out, $err) = run_in($s, "SELECT redlock_unlock('$r')");
	like($err, qr/release of lease on "$r" was not confirmed/,
		"the release of $r is given up, running in the dispatcher");
}
$s->query_until(qr/locking/, "\\echo locking\nSELECT redlock_try_lock('x', 60000);\n");
# the dispatcher stops once it sent the lock (if it takes it), or once the
# call ended
wait_for(sub {
	(keys_on($redis[3], 'x') ne '' && keys_on($redis[4], 'x') ne '')
	  || $pg->safe_psql('postgres', "SELECT state FROM pg_stat_activity WHERE pid = $spid") eq 'idle'
}, 10);
kill 'STOP', $disp;
my ($out, $err) = run_in($s, "SELECT 'after'");
like($err, qr/could not acquire lease on "x"/, 'the lock call fails');
note "the lock call: $err";
(undef, $own1) = dispatcher_rounds($pg);
is($own1 - $own0, 0,
	'nothing of the session ran on its own connections while the worker held its rounds');
$_->resume for @redis[0 .. 2];
kill 'CONT', $disp;
ok(wait_for(sub {
	my $tok = $s->query_safe("SELECT redlock_try_lock('x', 60000)");
	$tok =~ /^\d+$/;
}, 15), 'once all run again, the session\'s resource is granted to it');
run_in($s, "SELECT redlock_unlock('x')");
ok(no_keys('*', @redis), 'no lock key is left on any node');

$s->quit;
nothing_crashed($pg, $pm_start);
$pg->stop;
done_testing();
