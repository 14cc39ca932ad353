# The safety of a lease handed over to a waiter, when the nodes' clocks
# step and when nodes miss commands:
#   1. a waiter on another server is told a validity that its own clock
#      allows, whatever the nodes' clocks did between its offer and the
#      release (they step forward 4 s here);
#   2. a handoff that reaches its waiter late (the waiter's backend stopped
#      meanwhile) is never granted with a token below one that was granted
#      since (the lock expired on two nodes whose clocks ran ahead, and
#      another session was granted it there);
#   3. a handoff on this server won while a node was stopped leaves no
#      value of the waiter on that node once it runs again;
#   4. a wait whose earlier offer is on a node its later attempts did not
#      reach (the node was down) leaves no offer or lock behind, whether it
#      is cancelled or granted;
#   6. a release that nobody waits for reads no offer and publishes nothing.
# The nodes' clocks are stepped with libfaketime (Debian's faketime
# package), one timestamp file per node.  Real Redis nodes, two real
# clusters sharing them.
use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedisNode;
use RedlockTest;
use Test::More;
use Time::HiRes qw(time usleep);

my ($preload, $why_not) = faketime_preload();
plan skip_all => $why_not unless $preload;

# node i runs with the clock offset in $clock[i]; step_clock changes it
my @clock = map { PostgreSQL::Test::Utils::tempdir('clock') . '/offset' } 1 .. 3;
my @offset = (0, 0, 0);
sub step_clock
{
	my ($i, $by) = @_;
	$offset[$i] += $by;
	open my $fh, '>', "$clock[$i].tmp" or die $!;
	print $fh sprintf("%+d\n", $offset[$i]);
	close $fh;
	rename "$clock[$i].tmp", $clock[$i] or die $!;
}
sub faked
{
	my ($i, $code) = @_;
	local $ENV{LD_PRELOAD} = $preload;
	local $ENV{FAKETIME_TIMESTAMP_FILE} = $clock[$i];
	local $ENV{FAKETIME_NO_CACHE} = 1;
	local $ENV{FAKETIME_DONT_FAKE_MONOTONIC} = 1;
	return $code->();
}
step_clock($_, 0) for 0 .. 2;
# the third node keeps its data across a restart (section 4)
my @redis = map {
	my $i = $_;
	faked($i, sub {
		RedisNode->new($i == 2 ? (args => [ '--appendonly', 'yes', '--appendfsync', 'always' ]) : ())
	});
} 0 .. 2;
my ($east, $west) = redlock_pair(nodes => \@redis,
	conf => "redlock.retry_delay = '10s'\nredlock.retry_jitter = 0\n");

# node $r's lock and offer values of $res ('-' for none)
sub lock_of { my ($r, $res) = @_; return (lock_values($res, $r))[0]; }
sub offer_of { my ($r, $res) = @_; return (offer_values($res, $r))[0]; }

# every node has the offer of backend $pid
sub all_offer
{
	my ($res, $pid) = @_;
	return !grep { !/:$pid$/ } offer_values($res, @redis);
}

# the keys and offers (any in the waiters' queue) of backend $pid on the
# nodes, but for the values in @allowed: "node: lock|offer value" each
sub leftovers
{
	my ($res, $pid, @allowed) = @_;
	my %ok = map { $_ => 1 } @allowed;
	my @left;
	for my $i (0 .. $#redis)
	{
		my $l = lock_of($redis[$i], $res);
		push @left, "node $i: lock $l" if $l =~ /:$pid$/ && !$ok{$l};
		for my $o (queued_offers($res, $redis[$i]))
		{
			push @left, "node $i: offer $o" if $o =~ /:$pid$/ && !$ok{$o};
		}
	}
	return @left;
}

# a session on west waiting in $call after the settings $set; returns it and
# its pid once it is asleep for good: the wake-up worker listens for the key
# on every node and no attempt is under way
sub west_waiter
{
	my ($res, $call, $set) = @_;
	return remote_waiter($west, $res, \@redis, call => $call, set => $set, settled => 1);
}

my $h = $east->background_psql('postgres', on_error_stop => 0);

# --- 1. the nodes' clocks step forward 4 s between the waiter's offer and
# the release: the validity the waiter is told must still end within its
# TTL of the moment its own call returned (it cannot have been granted
# later), as its own clock counts
# (its offer lives retry_delay + node_timeout on a node: 30 s, so that the
# step does not end it)
my $ttl = 20000;
$h->query_safe("SELECT redlock_lock('c1', 60000)");
my ($w, $wpid) = west_waiter('c1', "redlock_lock('c1', $ttl)", "SET redlock.retry_delay = '30s'");
ok(all_offer('c1', $wpid), 'c1: every node has the offer of the west waiter');
sleep 1;
step_clock($_, 4) for 0 .. 2;
# (TIME's seconds and microseconds: the seconds alone lose up to 1 s)
my $skew = $redis[0]->cli('TIME') =~ /^(\d+)\n(\d+)/ ? $1 + $2 / 1e6 - time : 0;
cmp_ok($skew, '>', 3, "c1: the nodes' clocks stepped forward (${\ sprintf '%.1f', $skew } s ahead)");
ok(all_offer('c1', $wpid), 'c1: and the offer is still there');
my $a0 = attempts($west);
$h->query_safe("SELECT redlock_unlock('c1')");
my $t1 = $w->query_safe('SELECT :got');
my $got_at = time;
like($t1, qr/^\d+$/, 'c1: the west waiter got the lease');
is(attempts($west) - $a0, 0, "c1: handed over by east's release, not by an attempt of its own");
my $validity = $w->query_safe("SELECT validity_ms FROM redlock_leases WHERE resource = 'c1'");
my $told_end = time + ($validity + 1) / 1000;
cmp_ok($told_end, '<=', $got_at + $ttl / 1000,
	sprintf('c1: the validity it was told (%d ms) ends within its TTL of its own clock (%.3f s past)',
		$validity, $told_end - ($got_at + $ttl / 1000)));
$w->query_safe("SELECT redlock_unlock('c1')");
$w->quit;

# --- 2. a handoff reaches a waiter that was stopped (SIGSTOP) after the
# release: meanwhile the lock expired on two nodes whose clocks ran 70 s
# ahead, and another session was granted it there.  The waiter may be
# granted the lease only after that session's, and with a greater token.
$h->query_safe("SELECT redlock_lock('c2', 60000)");
($w, $wpid) = west_waiter('c2', "redlock_lock('c2', 60000)");
ok(all_offer('c2', $wpid), 'c2: every node has the offer of the west waiter');
kill 'STOP', $wpid;
$h->query_safe("SELECT redlock_unlock('c2')");
ok(wait_for(sub { !grep { lock_of($_, 'c2') !~ /:$wpid$/ } @redis }),
	"c2: east's release handed the lock to the stopped waiter on every node");
step_clock($_, 70) for 1, 2;
ok(wait_for(sub { !grep { lock_of($_, 'c2') ne '-' } @redis[1, 2] }),
	'c2: it expired on the two nodes whose clocks ran ahead');
my $x = $east->background_psql('postgres', on_error_stop => 0);
my $tx = $x->query_safe("SELECT redlock_try_lock('c2', 60000)");
like($tx, qr/^\d+$/, "c2: another session was granted c2 meanwhile (token $tx)");
kill 'CONT', $wpid;
# the waiter must not come back with the lease while that session holds it
usleep(2_000_000);
is($x->query_safe("SELECT count(*) FROM redlock_leases WHERE resource = 'c2' AND validity_ms > 0"),
	'1', 'c2: the other session still holds its lease');
$x->query_safe("SELECT redlock_unlock('c2')");
my $t2 = $w->query_safe('SELECT :got');
cmp_ok($t2, '>', $tx, "c2: the waiter's token ($t2) is above the one granted since ($tx)");
$w->query_safe("SELECT redlock_unlock('c2')");
$w->quit;
$x->quit;

# --- 3. a handoff on this server while the third node is stopped: the
# two others hand the lease over; once the third runs again, the waiter's
# value is not left on it (the lease does not count that node, and its own
# release may have passed there before the holder's handoff command)
my $lh = $west->background_psql('postgres', on_error_stop => 0);
my $hpid = $lh->query_safe('SELECT pg_backend_pid()');
my $th = $lh->query_safe("SELECT redlock_lock('c3', 60000)");
my $lw = $west->background_psql('postgres', on_error_stop => 0);
my $lpid = $lw->query_safe('SELECT pg_backend_pid()');
$lw->query_until(qr/waiting/, "\\echo waiting\nSELECT redlock_lock('c3', 60000) AS got \\gset\n");
asleep($west, $lpid) or die 'no local waiter on c3';
$redis[2]->pause;
$lh->query_safe("SELECT redlock_unlock('c3')");
cmp_ok($lw->query_safe('SELECT :got'), '>', $th, 'c3: the local waiter was handed the lease by two nodes');
$redis[2]->resume;
ok(wait_for(sub { lock_of($redis[2], 'c3') !~ /:($hpid|$lpid)$/ }),
	"c3: the third node, running again, holds neither the holder's value nor the waiter's");
$lw->query_safe("SELECT redlock_unlock('c3')");
$lw->quit;
$lh->quit;

# --- 4. a lock held by a client of its own on every node; the west waiter's
# first attempt leaves its offer everywhere.  The third node goes down (it
# keeps its data), a "free" announcement from the two others wakes the
# waiter, whose second attempt replaces the offer on those two only.  The
# third comes back with the first offer.  (Before every offer of a wait was
# remembered, a later attempt replaced only the offer just before its own,
# and a wait that ended withdrew only its last one: the first stayed on the
# third node.)
sub hold_outside
{
	my ($res, @on) = @_;
	$_->cli('SET', "redlock:lock:$res", 'outside', 'PX', 120000) for @on;
}
sub second_offer
{
	my ($res, $wset) = @_;
	hold_outside($res, @redis);
	my ($w, $pid) = west_waiter($res, "redlock_lock('$res', 60000)", $wset);
	ok(all_offer($res, $pid), "$res: every node has the first offer of the west waiter");
	my $first = offer_of($redis[0], $res);
	$redis[2]->kill9;
	my $a0 = attempts($west);
	$_->cli('PUBLISH', "redlock:lock:$res", '') for @redis[0, 1];
	ok(wait_for(sub { attempts($west) > $a0 && !grep { offer_of($_, $res) !~ /:$pid$/ || offer_of($_, $res) eq $first } @redis[0, 1] }),
		"$res: woken, its second attempt replaced the offer on the two running nodes");
	faked(2, sub { $redis[2]->start });
	# (the worker subscribes there again, and the waiter may ask once more:
	# that attempt may replace the first offer there, or not)
	like(offer_of($redis[2], $res), qr/:$pid$/, "$res: the third node is back with an offer of the waiter");
	return ($w, $pid);
}

# Its offers live retry_delay + node_timeout on a node (60 s here): longer
# than the section lasts, so that none is gone by itself.
#
# A withdrawal meant for the third node while the session's connection
# there is down, or backing off after the restart (a busy machine), is kept
# and goes out first in the session's next round that asks that node.  So
# each check below polls with calls of the session, which ask the node
# again once its backoff (2 s at most) is over.
sub poke
{
	my ($w, $res) = @_;
	$w->query_safe("SELECT CASE WHEN redlock_try_lock('$res', 1000) IS NOT NULL THEN redlock_unlock('$res') END");
}
# 4a. the waiter is cancelled: none of its offers is left anywhere
($w, $wpid) = second_offer('c4', "SET redlock.retry_delay = '60s'");
$west->safe_psql('postgres', "SELECT pg_cancel_backend($wpid)");
$w->query('SELECT 1');
like($w->{stderr}, qr/canceling statement due to user request/, 'c4: the waiter was cancelled');
$w->{stderr} = '';
ok(wait_for(sub { poke($w, 'c4-other'); !leftovers('c4', $wpid) }, 20),
	'c4: no offer or lock of the waiter is left on any node: ' . join(', ', leftovers('c4', $wpid)));
$w->quit;

# 4b. the outside holder leaves the two running nodes (the third keeps it):
# the waiter's next attempt is granted there, while the third is down again,
# so that attempt does not take back the earlier offer there: the end of the
# wait must.  What is left of the waiter on the nodes is the lease's own
# value, or the offer its release removes too
($w, $wpid) = second_offer('c5', "SET redlock.retry_delay = '60s'");
$redis[2]->kill9;
$_->cli('DEL', 'redlock:lock:c5') for @redis[0, 1];
$_->cli('PUBLISH', 'redlock:lock:c5', '') for @redis[0, 1];
like($w->query_safe('SELECT :got'), qr/^\d+$/, 'c5: the waiter was granted the lease');
my $lease = lock_of($redis[0], 'c5');
(my $lease_offer = $lease) =~ s/^./w/;
faked(2, sub { $redis[2]->start });
my $earlier = offer_of($redis[2], 'c5');
ok($earlier =~ /:$wpid$/ && $earlier ne $lease_offer,
	"c5: the third node is back with an earlier offer of the waiter ($earlier)");
ok(wait_for(sub { poke($w, 'c5-other'); !leftovers('c5', $wpid, $lease, $lease_offer) }, 20),
	'c5: no other offer or lock of the waiter is left on any node: '
	  . join(', ', leftovers('c5', $wpid, $lease, $lease_offer)));
$w->query_safe("SELECT redlock_unlock('c5')");
ok(wait_for(sub { !leftovers('c5', $wpid) }, 20),
	'c5: after its release, nothing of the waiter is left: ' . join(', ', leftovers('c5', $wpid)));
$w->quit;

# --- 6. an uncontended release pays nothing for the handoff machinery:
# no offer lookup, no publish (issue 18); with a waiter on west, the same
# release hands the lease over
sub calls { return command_calls($_[0], @redis) }
# a cycle first: a connection made now (the node restarted in 4b) runs the
# connect script, which reads the node's clock (TIME) for its epoch
$h->query_safe("SELECT redlock_lock('c6:warm', 60000)");
$h->query_safe("SELECT redlock_unlock('c6:warm')");
$_->cli('CONFIG', 'RESETSTAT') for @redis;
$h->query_safe("SELECT redlock_lock('c6', 60000)");
$h->query_safe("SELECT redlock_unlock('c6')");
ok(wait_for(sub { calls('eval') + calls('evalsha') >= 2 * @redis }),
	'c6: the lock and the unlock ran on every node');
is(join(' ', map { calls($_) } qw(lrange hget hmget hset publish time)), '0 0 0 0 0 0',
	'c6: no waiter: the release looked up no offer and published nothing (LRANGE HGET HMGET HSET PUBLISH TIME)');
$h->query_safe("SELECT redlock_lock('c6', 60000)");
($w, $wpid) = west_waiter('c6', "redlock_lock('c6', 60000)");
$_->cli('CONFIG', 'RESETSTAT') for @redis;
$h->query_safe("SELECT redlock_unlock('c6')");
like($w->query_safe('SELECT :got'), qr/^\d+$/, 'c6: with a waiter on west, the release handed it the lease');
cmp_ok(calls('publish'), '>=', 2, 'c6: and published it on a majority');
$w->query_safe("SELECT redlock_unlock('c6')");
$w->quit;

$h->quit;
$_->stop for $east, $west;
done_testing();
