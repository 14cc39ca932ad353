# A waiter's offer is heard of on every node, even on one where the wake-up
# worker's subscription comes late.  Node 0 is reached through a slow link
# (a FakeRedis relay in front of a real Redis): its answers come 50 ms late,
# so a round is decided by nodes 1 and 2 before node 0 answers, and a
# SUBSCRIBE reaches it 1 s late.  A holder on west holds 'late' on nodes 1
# and 2 (its lock on node 0 is removed by hand).  East's waiter asks: node 0
# grants, nodes 1 and 2 refuse and queue its offer; the attempt is withdrawn
# on node 0, which then says "offer -" (the offer is not there), to nobody
# while the worker is not subscribed there yet.  The worker wakes the
# waiter to ask once more only once every node confirmed its subscription;
# that attempt's word from node 0 is heard.  Node 1's queue is emptied by
# hand, so the holder's release leaves node 1 free (one no) and hands node 2
# to the offer (one yes): node 0's no decides, and the waiter is granted at
# once, not node_timeout (20 s) later.  Before, the worker woke the waiter
# at a majority of confirmations, and node 0's word on that attempt was
# lost as well (test 037 failed so in CI, and in one of the first three
# runs here).
# Real Redis nodes and two real clusters.
use strict;
use warnings FATAL => 'all';

use FakeRedis;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedlockTest;
use Test::More;
use Time::HiRes qw(time usleep);

my @redis = redis_nodes(3);
my $link = FakeRedis->new(mode => 'delay', backend => $redis[0]->addr,
	delay => 0.05, hold_subscribe => 1);
my @nodes = ($link, @redis[1, 2]);
my $conf = "redlock.retry_delay = '60s'\nredlock.retry_jitter = 0\n";
my $east = redlock_cluster('east', preload => 1, nodes => \@nodes,
	conf => $conf . "redlock.node_timeout = '20s'\n");
my $west = redlock_cluster('west', preload => 1, nodes => \@nodes, conf => $conf);

# the slow link answers, late, what node 0 answers
is($east->safe_psql('postgres', "SELECT count(*) FROM redlock_nodes WHERE reachable"), '3',
	'all three nodes answer, node 0 through the slow link');

# the wake-up worker connected to every node and listening (one wait for
# another resource), so that what follows is its first SUBSCRIBE of 'late'
my $h = $west->background_psql('postgres', on_error_stop => 0);
$h->query_safe("SELECT redlock_lock('warm', 60000)");
my ($ww) = start_waiter($east, 'warm');
ok(wait_for(sub { ($redis[0]->cli('PUBSUB', 'NUMSUB', 'redlock:lock:warm') =~ /\n(\d+)$/)[0] >= 1 }, 10),
	'the wake-up worker listens on node 0');
$h->query_safe("SELECT redlock_unlock('warm')");
like($ww->query_safe('SELECT :got'), qr/^\d+$/, 'and its waiter was woken and granted');
$ww->query_safe("SELECT redlock_unlock('warm')");
$ww->quit;

my $t = $h->query_safe("SELECT redlock_lock('late', 60000)");
like($t, qr/^\d+$/, 'a holder on west');
ok(wait_for(sub { ($redis[0]->cli('GET', 'redlock:lock:late') // '') ne '' }, 10),
	'its lock reached node 0 too');
$redis[0]->cli('DEL', 'redlock:lock:late');

my ($w, $wpid) = start_waiter($east, 'late');
ok(wait_for(sub { $redis[1]->cli('LLEN', 'redlock:wait:late') == 1
			  && $redis[2]->cli('LLEN', 'redlock:wait:late') == 1
			  && ($redis[0]->cli('GET', 'redlock:lock:late') // '') eq '' }, 10),
	'the waiter\'s attempt won node 0, was withdrawn there, and left its offer on nodes 1 and 2');
ok(wait_for(sub { ($redis[0]->cli('PUBSUB', 'NUMSUB', 'redlock:lock:late') =~ /\n(\d+)$/)[0] >= 1 }, 10),
	'the wake-up worker\'s subscription reached node 0, late');
# the attempt that wake makes, and node 0's word on it
usleep(1_000_000);
is($redis[0]->cli('LLEN', 'redlock:wait:late'), '0', 'node 0 has no offer');

$redis[1]->cli('DEL', 'redlock:wait:late');
my $t0 = time;
$h->query_safe("SELECT redlock_unlock('late')");
my ($tw, $after) = granted_after($w, $t0);
cmp_ok($tw, '>', $t, 'the holder gone, the waiter is granted');
cmp_ok($after, '<', 5, '... at once, not at node_timeout');
$w->query_safe("SELECT redlock_unlock('late')");
ok(no_keys('late', @redis), 'released: the lock is gone');
$_->quit for $h, $w;

done_testing();
