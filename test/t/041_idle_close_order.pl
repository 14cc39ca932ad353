# A backend's connections ended by its idle timer still owe a node's
# answer: its next round reads that answer (or the node's close) before it
# sends anything to that node on another connection, for as long as a
# round may take, not only node_timeout.  Otherwise the next command (here
# a lock of the same resource, through the dispatcher) can reach the node
# before the release the node has not run yet, and be refused there: under
# load, with a majority of nodes that slow, a session's own resource was
# refused until its TTL (bench/scale.sh, one function per cycle, 64 and
# 128 sessions).
#
# Four Redis nodes and a fake one that answers a lock at once and a
# release 2.6 s late, as a node that runs it only then
# (FakeRedis slow_release: it logs each answer when sent).  node_timeout
# 100 ms, connect_timeout 2 s: a round may take 2 x (2 s + 100 ms).  Room
# for one backend's own connections (max_connections_per_node 4).
# Session A locks and unlocks on its own connections (the fake's answer to
# the release owed); session B asks for a probe (redlock_nodes), which
# needs connections of its own: A's idle timer ends A's connections for it
# (the fake sees A's side closed) and B keeps the place.  A locks the
# resource again, through the dispatcher: the fake must have answered the
# release before the dispatcher's connection brings it the lock.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use FakeRedis;
use RedlockTest;
use Test::More;

my @redis = redis_nodes(4);
my $fake = FakeRedis->new(mode => 'slow_release', release_delay => 2.6);
my $pg = redlock_cluster('order', nodes => [ @redis, $fake ], preload => 1,
	conf => "redlock.node_timeout = '100ms'\nredlock.connect_timeout = '2s'\n"
	  . "redlock.max_connections_per_node = 4\nredlock.idle_connection_timeout = '10s'\n");

my $s = $pg->background_psql('postgres', on_error_stop => 0);
is($s->query_safe("SELECT redlock_lock('ord-x', 30000) > 0"), 't', 'a lease, the fake among its nodes');
is($s->query_safe("SELECT redlock_unlock('ord-x')"), 't',
	'released: confirmed by the Redis nodes, the fake owes its answer');
is($pg->safe_psql('postgres', 'SELECT backends_connected FROM redlock_dispatcher'), '1',
	'the session holds the one place for connections of its own');

my $b = $pg->background_psql('postgres', on_error_stop => 0);
is($b->query_safe('SELECT count(*) FROM redlock_nodes'), '5',
	'another session ran a probe, which waited for that place');

# the connection the release came on, and its end by the idle timer
my $conn;
ok(wait_for(sub {
	($conn) = map { /^conn (\d+): EVAL(?:SHA)? release .*ord-x/ ? $1 : () } $fake->requests;
	defined $conn }, 10), 'the fake got the release') or diag join("\n", $fake->requests);
ok(wait_for(sub { grep { $_ eq "conn $conn: closed by peer" } $fake->requests }, 10),
	"the idle timer ended the first session's connections for it (the fake saw its side closed)")
  or diag join("\n", $fake->requests);
ok(!grep({ $_ eq "conn $conn: answered release" } $fake->requests),
	'... while the answer to the release was still owed');

my ($shared0) = dispatcher_rounds($pg);
is($s->query_safe("SELECT redlock_lock('ord-x', 30000) > 0"), 't', 'the first session locks the resource again');
my ($shared1) = dispatcher_rounds($pg);
cmp_ok($shared1, '>', $shared0, '... through the dispatcher (the place is taken)');
# the lock reaches the fake on the dispatcher's connection (opened after
# the round was decided by the Redis nodes, perhaps)
my (@log, $answered, $relock);
wait_for(sub {
	@log = $fake->requests;
	($answered) = grep { $log[$_] eq "conn $conn: answered release" } 0 .. $#log;
	($relock) = grep {
		$log[$_] =~ /^conn (\d+): EVAL(?:SHA)? acquire .*ord-x/ && $1 != $conn
	} 0 .. $#log;
	defined $answered && defined $relock }, 10);
ok(defined $answered && defined $relock && $answered < $relock,
	'the fake answered the release before the dispatcher brought it the next lock')
  or diag join("\n", @log);
is($s->query_safe("SELECT redlock_unlock('ord-x')"), 't', 'and unlocks it');

$s->quit;
$b->quit;
is($fake->died, '', 'the fake server ran to the end');
$pg->stop;
done_testing();
