# The validity a waiter is told for a lease handed over by a holder on
# another server, when its server hears of the handoff late: west's
# wake-up worker is stopped (SIGSTOP) just before east's release and runs
# again 3 s later.  The waiter must be granted through the handoff (its
# value on every node, no attempt of its own), and the validity it is told
# must be backed by the nodes: it ends no later than its lock on a
# majority of them (PTTL, read just before), and before another session
# is granted the lease once the lock expired there.  The lock was set by
# the release, with the waiter's TTL, after the waiter's offer: counted
# from the offer, the validity would end before it; a handoff heard that
# late is first confirmed on the nodes that handed it over, which renews
# the lock there and counts the validity from the confirmation (so "the
# offer + TTL" is no bound, and the nodes' PTTL is).  Counted from when
# the worker heard the release, it would end 3 s after the lock, and
# another holder would be granted the lease meanwhile.
# redlock.retry_delay is 30 s, without jitter: the waiter makes no attempt
# of its own while the worker is stopped.  redlock.node_timeout is 1 s: a
# handoff heard that recently is granted without a confirmation (a busy
# machine that delays the waiter's waking by more than 50 ms would
# otherwise hide a validity counted from the hearing behind a
# confirmation).  Real Redis nodes and two real clusters.
use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedlockTest;
use Test::More;
use Time::HiRes qw(time);

my @redis = redis_nodes(3);
my ($east, $west) = redlock_pair(nodes => \@redis,
	conf => "redlock.retry_delay = '30s'\nredlock.retry_jitter = 0\nredlock.node_timeout = '1s'\n");
my $ttl = 8000;			# the waiter's TTL (ms): its lock outlives the 3 s stop
my $stopped_for = 3;	# seconds west's wake-up worker is stopped

my $wk = worker_pid($west, 'wake-up');
like($wk, qr/^\d+$/, 'the wake-up worker runs on west');

# east holds v1; a waiter on west asleep for good, its offer on every node
my $h = long_session($east);
my $t1 = $h->query_safe("SELECT redlock_lock('v1', 60000)");
my ($w, $wpid) = remote_waiter($west, 'v1', \@redis, call => "redlock_lock('v1', $ttl)",
	asleep => 0, settled => 1);
my @offered = offer_values('v1', @redis);
is(scalar(grep { /:$wpid$/ && $_ eq $offered[0] } @offered), scalar(@redis),
	'every node has the same offer of the west waiter');
is(join(' ', map { $_->cli('HGET', "redlock:offer:$offered[0]", 'x') } @redis), join(' ', ($ttl) x @redis),
	'with the TTL of its call');

# east releases while west's wake-up worker is stopped; it runs again
# $stopped_for s later (nothing between the two signals may die: a stopped
# worker would hold up the cluster's stop)
my $a0 = attempts($west);
kill 'STOP', $wk;
my $released = $h->query("SELECT redlock_unlock('v1')");
sleep $stopped_for;
kill 'CONT', $wk;
is($released, 't', "east's release, while west's wake-up worker is stopped");

# (a) granted through the handoff
my $t2 = $w->query_safe('SELECT :got');
cmp_ok($t2, '>', $t1, 'the west waiter got the lease, with a newer token');
is(attempts($west) - $a0, 0, "handed over by east's release, not by an attempt of its own");
is(join(' ', lock_values('v1', @redis)), join(' ', ($offered[0]) x @redis),
	'every node holds the lock for the value it offered');

# (b) its validity, read right after the grant (the nodes' PTTL first: a
# validity read later can only be smaller), ends no later than the lock on
# a majority of the nodes (not every node: the worker hands the outcome
# over at a majority, and the confirmation renews the lock on the nodes
# counted; a third node keeps the release's TTL, seen: PTTL 4869 7887 7901)
my @pttl = sort { $a <=> $b } map { $_->cli('PTTL', 'redlock:lock:v1') } @redis;
my $majority_pttl = $pttl[ @redis - int(@redis / 2) - 1 ];
my $read_at = time;
my $validity = $w->query_safe("SELECT validity_ms FROM redlock_leases WHERE resource = 'v1'");
cmp_ok($validity, '>', 0, "the waiter's lease is valid ($validity ms of $ttl)");
cmp_ok($validity, '<=', $majority_pttl,
	"its validity ends no later than its lock on a majority of the nodes (PTTL @pttl)");

# (c) no other holder's interval overlaps it: a session on east, trying
# every 100 ms, is granted the lease only once the waiter's validity is
# over (its end is at least $read_at + validity; the grant at most when
# the successful call returned), and with a newer token still
my $e = long_session($east);
my ($t3, $granted_by) = ('', 0);
ok(wait_for(sub {
	$t3 = $e->query_safe("SELECT redlock_try_lock('v1', 60000)");
	$granted_by = time;
	return $t3 ne '';
}, 60), 'a session on east is granted the lease once the lock expired on the nodes');
my $told_end = $read_at + $validity / 1000;
cmp_ok($told_end, '<=', $granted_by,
	sprintf("east's grant comes after the end of the waiter's validity (%.3f s before it)",
		$granted_by - $told_end));
cmp_ok($t3, '>', $t2, 'with a newer token');

$e->query_safe("SELECT redlock_unlock('v1')");
$w->query("SELECT redlock_unlock('v1')");
ok(wait_for(sub { !grep { $_ ne '-' } lock_values('v1', @redis) }, 10), 'nothing is left on the nodes');
is(worker_pid($west, 'wake-up'), $wk, 'the same wake-up worker still runs on west');
$w->quit;
$e->quit;
$h->quit;
done_testing();
