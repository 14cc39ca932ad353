# A lease released on one server handed to a waiter on another in the
# release script itself: the waiter's refused attempt leaves an offer (a
# queue "redlock:wait:<resource>") on the nodes, the holder's release sets
# the waiter's value there and publishes it, and the waiter's wake-up worker
# gathers the nodes' word.  The waiter makes no attempt of its own after the
# release.  Also: the lease's validity, a waiter that gives up or is
# terminated (nothing left on the nodes), a second waiter behind the first,
# a holder whose lease expires, a session with another node list, a node
# stopped during the release, and a holder whose Redis user lacks the
# offer's commands.
# redlock.retry_delay is 30 s, without jitter: polling cannot explain a
# grant within 5 s, and a waiter that settled (6 s without an attempt, see
# RedlockTest::settled) makes no attempt of its own while a check runs.  Real Redis nodes and two real clusters.
use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedlockTest;
use Test::More;
use Time::HiRes qw(time usleep);

my @redis = redis_nodes(3);
my ($east, $west) = redlock_pair(nodes => \@redis,
	conf => "redlock.retry_delay = '30s'\nredlock.retry_jitter = 0\n");
my $woken_within = 5;

# every node has the offer of the backend $pid (the lock for it); no node
# has an offer (a lock) of anyone
sub all_offer { my ($res, $pid) = @_; return !grep { !/:$pid$/ } offer_values($res, @redis); }
sub all_lock { my ($res, $pid) = @_; return !grep { !/:$pid$/ } lock_values($res, @redis); }
sub no_offer { my ($res) = @_; return !grep { $_->cli('EXISTS', "redlock:wait:$res") ne '0' } @redis; }
sub no_lock { my ($res) = @_; return !grep { $_->cli('EXISTS', "redlock:lock:$res") ne '0' } @redis; }

# A session on west waiting in $call (redlock_lock('$res', 60000) unless
# given) after the settings $set, once its slot is in the lock table (its
# first attempt may still be under way); with settled => 1, once west's
# wake-up worker listens for the key on every node and the waiter is asleep
# for good (the attempt its new subscription caused, a release before it
# must not be lost, see 013, or any other wake-up, is over).  Returns it
# and its pid.
sub west_waiter
{
	my ($res, $call, $set, %opt) = @_;
	return remote_waiter($west, $res, \@redis, call => $call, set => $set, asleep => 0, %opt)
	  if $opt{settled};
	return start_waiter($west, $res, call => $call, set => $set, asleep => 0);
}

like(worker_pid($west, 'wake-up'), qr/^\d+$/, 'the wake-up worker runs on west');

my $h = long_session($east);

# --- 1. east's unlock hands the lease to the west waiter in its release
# script: one script call per node in all, no attempt of the waiter's own
my $t1 = $h->query_safe("SELECT redlock_lock('r1', 60000)");
ok(wait_for(sub { !grep { $_ eq '-' } lock_values('r1', @redis) }), 'r1: east holds it on every node');
my ($w, $wpid) = west_waiter('r1', undef, undef, settled => 1);
ok(wait_for(sub { all_offer('r1', $wpid) }),
	'r1: while it waits, every node has the offer of the west waiter (redlock:wait:r1)');
is(join(' ', map { scalar(queued_offers('r1', $_)) } @redis), '1 1 1', 'r1: alone in the queue');
is(join(' ', map { my ($v) = queued_offers('r1', $_); $_->cli('HGET', "redlock:offer:$v", 'x') } @redis),
	'60000 60000 60000', 'r1: with the TTL of its call');
my ($offered) = offer_values('r1', @redis);
my $a0 = attempts($west);
$_->cli('CONFIG', 'RESETSTAT') for @redis;
my $t0 = time;
$h->query_safe("SELECT redlock_unlock('r1')");
my $t2 = $w->query_safe('SELECT :got');
my $took = time - $t0;
cmp_ok($t2, '>', $t1, 'r1: the west waiter got the lease with a newer token');
cmp_ok($took, '<', $woken_within, "r1: at east's release (${\ sprintf '%.2f', $took }s; retry_delay is 30 s)");
ok(wait_for(sub { all_lock('r1', $wpid) }), 'r1: every node holds the lock for the west waiter');
is(join(' ', lock_values('r1', @redis)), join(' ', ($offered) x @redis), 'r1: with the value it offered');
ok(wait_for(sub { no_offer('r1') }), 'r1: no offer is left on any node');
is(attempts($west) - $a0, 0, 'r1: the waiter made no attempt of its own after the release');
# besides east's release (one script call on every node): the waiter's
# offer is older than a round, so it confirms the handoff on the nodes that
# handed it over (protocol_handoff.c); it also withdraws earlier offers from
# nodes that had not answered its last attempts when their rounds were
# decided, as many as a busy machine made (seen: 3 1 4, 1 3 5), so no upper
# bound here: that it made no attempt of its own is checked above
my @evals = map { command_calls('eval', $_) } @redis;
ok(!grep({ $_ < 1 } @evals) && (grep { $_ >= 2 } @evals) >= 2,
	"r1: east's release was the handoff, confirmed by the waiter on a majority (script calls per node: @evals)");
$w->query_safe("SELECT redlock_unlock('r1')");
ok(wait_for(sub { no_lock('r1') }), 'r1: nothing is left after its unlock');
$w->quit;

# --- 2. the validity of a lease handed over counts from the waiter's
# confirmation of the handoff on the nodes (after the release), not from
# its attempt at least 3 s earlier.  TTL 20 s: counted from the
# confirmation, at most the time since the release began is gone; counted
# from the attempt, 3 s more would be.  The bound sits in between, whatever
# the machine's load stretched.
my $r2_ttl = 20000;
$t1 = $h->query_safe("SELECT redlock_lock('r2', 60000)");
($w, $wpid) = west_waiter('r2', "redlock_lock('r2', $r2_ttl)", undef, settled => 1);
ok(wait_for(sub { all_offer('r2', $wpid) }), 'r2: every node has the offer of the west waiter');
sleep 3;
$a0 = attempts($west);
my $released_at = time;
$h->query_safe("SELECT redlock_unlock('r2')");
cmp_ok($w->query_safe('SELECT :got'), '>', $t1, 'r2: the west waiter got the lease after 3 s');
is(attempts($west) - $a0, 0, 'r2: handed over, not taken by an attempt of its own');
# every node has run the handoff (the release returned at a majority)
ok(wait_for(sub { all_lock('r2', $wpid) }), 'r2: every node holds the lock for the west waiter');
my @pttl = map { $_->cli('PTTL', 'redlock:lock:r2') } @redis;
my $validity = $w->query_safe("SELECT validity_ms FROM redlock_leases WHERE resource = 'r2'");
my $since_ms = int((time - $released_at) * 1000);
cmp_ok($validity, '>', $r2_ttl - $since_ms - 1500,
	"r2: its validity counts from the handoff ($validity ms of $r2_ttl, $since_ms ms after the release began)");
cmp_ok($validity, '<=', (sort { $a <=> $b } @pttl)[0],
	"r2: and never beyond the lock's TTL on a node (PTTL @pttl)");
$w->query_safe("SELECT redlock_unlock('r2')");
$w->quit;

# --- 3. a waiter that gives up takes its offer back: a release after that
# leaves the lock free, for anyone to take at once.  It gives up at its
# wait_ms, at statement_timeout, cancelled, and at its wait_ms in a PL/pgSQL
# block that catches the error (a subtransaction abort: the session goes on)
my %give_up = (
	'r3-wait' => [ "redlock_lock('r3-wait', 60000, wait_ms => 3000)", '',
		qr/ERROR:  55P03: could not obtain lease on "r3-wait" within wait_ms/ ],
	'r3-st' => [ "redlock_lock('r3-st', 60000)", "SET statement_timeout = '3s'",
		qr/ERROR:  57014: canceling statement due to statement timeout/ ],
	'r3-cancel' => [ "redlock_lock('r3-cancel', 60000)", '',
		qr/ERROR:  57014: canceling statement due to user request/ ],
	'r3-sub' => [ "DO \$\$ BEGIN PERFORM redlock_lock('r3-sub', 60000, wait_ms => 3000); "
		  . "EXCEPTION WHEN lock_not_available THEN RAISE NOTICE 'gave up: %', SQLSTATE; END \$\$;",
		'', qr/NOTICE:  00000: gave up: 55P03/ ]);
for my $res (sort keys %give_up)
{
	my ($call, $set, $err) = @{ $give_up{$res} };
	$h->query_safe("SELECT redlock_lock('$res', 60000)");
	($w, $wpid) = west_waiter($res, $call, "\\set VERBOSITY verbose\n$set");
	ok(wait_for(sub { all_offer($res, $wpid) }), "$res: every node has the offer of the west waiter");
	$west->safe_psql('postgres', "SELECT pg_cancel_backend($wpid)") if $res eq 'r3-cancel';
	$w->query('SELECT 1');
	like($w->{stderr}, $err, "$res: the waiter gave up");
	ok(wait_for(sub { no_offer($res) }), "$res: its offer is gone from every node");
	$h->query_safe("SELECT redlock_unlock('$res')");
	ok(no_lock($res), "$res: east's release handed it to nobody: no lock on any node");
	is($east->safe_psql('postgres', "SELECT redlock_try_lock('$res', 60000) IS NOT NULL"), 't',
		"$res: a new session on east takes it at once");
	$w->{stderr} = '';
	is($w->query('SELECT count(*) FROM redlock_leases'), '0', "$res: the waiter's session holds nothing");
	$w->quit;
}

# --- 4. the same for a waiter terminated while it waits
$h->query_safe("SELECT redlock_lock('r4', 60000)");
($w, $wpid) = west_waiter('r4');
ok(wait_for(sub { all_offer('r4', $wpid) }), 'r4: every node has the offer of the west waiter');
$west->safe_psql('postgres', "SELECT pg_terminate_backend($wpid)");
ok(wait_for(sub { no_offer('r4') }), 'r4: terminated, its offer is gone from every node');
$h->query_safe("SELECT redlock_unlock('r4')");
ok(no_lock('r4'), "r4: east's release handed it to nobody: no lock on any node");
is($east->safe_psql('postgres', "SELECT redlock_try_lock('r4', 60000) IS NOT NULL"), 't',
	'r4: a new session on east takes it at once');
eval { $w->quit };

# --- 5. two west waiters: the first is handed the lease by east's release,
# the second by the first's (a local handoff)
$t1 = $h->query_safe("SELECT redlock_lock('r5', 60000)");
my ($w1, $pid1) = west_waiter('r5', undef, undef, settled => 1);
my ($w2, $pid2) = west_waiter('r5', undef, undef, settled => 1);
ok(all_offer('r5', $pid1), 'r5: the offer on every node is the first waiter\'s');
$a0 = attempts($west);
$t0 = time;
$h->query_safe("SELECT redlock_unlock('r5')");
$t2 = $w1->query_safe('SELECT :got');
$took = time - $t0;
cmp_ok($t2, '>', $t1, 'r5: the first west waiter got it from east, with a newer token');
cmp_ok($took, '<', $woken_within, "r5: at east's release (${\ sprintf '%.2f', $took }s)");
ok(wait_for(sub { all_lock('r5', $pid1) }), 'r5: every node holds it for the first waiter');
$t0 = time;
$w1->query_safe("SELECT redlock_unlock('r5')");
my $t3 = $w2->query_safe('SELECT :got');
$took = time - $t0;
cmp_ok($t3, '>', $t2, 'r5: the second got it from the first, with a newer token still');
cmp_ok($took, '<', $woken_within, "r5: at the first's release (${\ sprintf '%.2f', $took }s)");
is(attempts($west) - $a0, 0, 'r5: both were handed the lease: no attempt of their own');
ok(wait_for(sub { all_lock('r5', $pid2) }), 'r5: every node holds it for the second waiter');
$w2->query_safe("SELECT redlock_unlock('r5')");
ok(wait_for(sub { no_lock('r5') && no_offer('r5') }), 'r5: nothing is left on the nodes');
$w1->quit;
$w2->quit;

# --- 6. east's lease expires without a release (nothing to hand over):
# the waiter takes it by an attempt of its own (retry_delay 300 ms here),
# and that attempt removes its offer
my $e = $east->background_psql('postgres', on_error_stop => 0);
$t1 = $e->query_safe("SELECT redlock_try_lock('r6', 3000)");
($w, $wpid) = west_waiter('r6', undef, "SET redlock.retry_delay = '300ms'");
ok(wait_for(sub { all_offer('r6', $wpid) }), 'r6: every node has the offer of the west waiter');
cmp_ok($w->query_safe('SELECT :got'), '>', $t1, "r6: east's lease expired: the waiter got it");
ok(wait_for(sub { all_lock('r6', $wpid) }), 'r6: every node holds it for the west waiter');
ok(wait_for(sub { no_offer('r6') }), 'r6: no offer is left on any node');
$w->query_safe("SELECT redlock_unlock('r6')");
$w->quit;
$e->quit;

# --- 7. a session whose node list is in another order than the wake-up
# worker's leaves no offer (the worker could not gather the nodes' word
# for it); east's plain release wakes it, and it asks the nodes itself.
# The same session with the server's list leaves one.
my $permuted = join(',', map { $_->addr } reverse @redis);
$t1 = $h->query_safe("SELECT redlock_lock('r7', 60000)");
($w, $wpid) = west_waiter('r7', undef, "SET redlock.nodes = '$permuted'", settled => 1);
ok(no_offer('r7'), 'r7: another node list: no offer on any node');
$a0 = attempts($west);
$t0 = time;
$h->query_safe("SELECT redlock_unlock('r7')");
$t2 = $w->query_safe('SELECT :got');
$took = time - $t0;
cmp_ok($t2, '>', $t1, 'r7: the waiter still got the lease, with a newer token');
cmp_ok($took, '<', $woken_within, "r7: woken by east's release (${\ sprintf '%.2f', $took }s)");
is(attempts($west) - $a0, 1, 'r7: by an attempt of its own');
# (a majority: the node that had not yet run east's release when the
# waiter asked refused it, and no offer hands it over there later)
ok(wait_for(sub { (grep { /:$wpid$/ } lock_values('r7', @redis)) >= 2 }) && no_offer('r7'),
	'r7: a majority of the nodes hold it for the waiter, no offer');
$w->query_safe("SELECT redlock_unlock('r7'); RESET redlock.nodes");
$h->query_safe("SELECT redlock_lock('r7', 60000)");
$w->query_until(qr/waiting/, "\\echo waiting\nSELECT redlock_lock('r7', 60000) AS got \\gset\n");
ok(wait_for(sub { all_offer('r7', $wpid) }), 'r7: with the server\'s node list its wait leaves an offer');
$h->query_safe("SELECT redlock_unlock('r7')");
like($w->query_safe('SELECT :got'), qr/^\d+$/, 'r7: and it is handed the lease');
$w->query_safe("SELECT redlock_unlock('r7')");
ok(wait_for(sub { no_lock('r7') && no_offer('r7') }), 'r7: nothing is left on the nodes');
$w->quit;

# --- 8. a node stopped during the release: the two others hand the lease
# over, a majority; once the third runs again, east's release (must-deliver)
# hands it the same value there, or leaves nothing: never another owner
$t1 = $h->query_safe("SELECT redlock_lock('r8', 60000)");
($w, $wpid) = west_waiter('r8', undef, undef, settled => 1);
ok(wait_for(sub { all_offer('r8', $wpid) }), 'r8: every node has the offer of the west waiter');
($offered) = offer_values('r8', @redis);
$redis[2]->pause;
$a0 = attempts($west);
$t0 = time;
$h->query_safe("SELECT redlock_unlock('r8')");
$t2 = $w->query_safe('SELECT :got');
$took = time - $t0;
cmp_ok($t2, '>', $t1, 'r8: one node stopped: the west waiter still got the lease');
cmp_ok($took, '<', $woken_within, "r8: at east's release (${\ sprintf '%.2f', $took }s)");
is(attempts($west) - $a0, 0, 'r8: handed over by the two running nodes');
# (not a word to the stopped node: redis-cli would wait for it)
is(join(' ', map { $_->cli('GET', 'redlock:lock:r8') } @redis[0, 1]), "$offered $offered",
	'r8: they hold the value it offered');
$redis[2]->resume;
ok(wait_for(sub { $redis[2]->cli('EXISTS', 'redlock:wait:r8') eq '0' }),
	'r8: the third node, running again, has no offer left');
like($redis[2]->cli('GET', 'redlock:lock:r8'), qr/^(\Q$offered\E)?$/,
	"r8: and the waiter's value or none");
$w->query_safe("SELECT redlock_unlock('r8')");
ok(wait_for(sub { no_lock('r8') && no_offer('r8') }), 'r8: nothing is left after its unlock');
$w->quit;

# --- 9. a holder whose Redis user has the minimal ACL of doc/operating.md (no
# HGET, HMGET, TIME or PUBLISH: the release script pcalls them): its
# release cannot see the offer and says nothing, but it releases; the
# waiter, on its own backstop (300 ms here), asks and gets the lease, and
# its attempt removes its old offer
for my $r (@redis)
{
	$r->cli('ACL', 'SETUSER', 'locker', 'on', '>lockpw', 'resetkeys', '~redlock:*',
		'resetchannels', '-@all', '+eval', '+get', '+set', '+del', '+pexpire', '+ping', '+info');
}
my $acl = $east->background_psql('postgres', on_error_stop => 0);
$acl->query_safe("SET redlock.username = 'locker'; SET redlock.password = 'lockpw'");
$t1 = $acl->query_safe("SELECT redlock_lock('r9', 60000)");
($w, $wpid) = west_waiter('r9', undef, "SET redlock.retry_delay = '300ms'");
ok(wait_for(sub { all_offer('r9', $wpid) }), 'r9: every node has the offer of the west waiter');
is($acl->query_safe("SELECT redlock_unlock('r9')"), 't',
	"r9: a holder whose ACL lacks the offer's commands releases");
$t2 = $w->query_safe('SELECT :got');
cmp_ok($t2, '>', $t1, 'r9: the west waiter got the lease, with a newer token');
ok(all_lock('r9', $wpid) && no_offer('r9'), 'r9: every node holds it for the waiter, no offer left');
$w->query_safe("SELECT redlock_unlock('r9')");
ok(wait_for(sub { no_lock('r9') && no_offer('r9') }), 'r9: nothing is left after its unlock');
$w->quit;
$acl->quit;

# --- 10. no offer for a call that does not wait (wait_ms => 0)
$h->query_safe("SELECT redlock_lock('r10', 60000)");
my ($rc, $out, $err) = $west->psql('postgres', "SELECT redlock_lock('r10', 60000, wait_ms => 0)");
like($err, qr/could not obtain lease on "r10" within wait_ms \(0 ms\)/, 'r10: wait_ms => 0 gives up at once');
ok(no_offer('r10'), 'r10: and left no offer on any node');
$h->query_safe("SELECT redlock_unlock('r10')");

# --- 11. an offer's lifetime: retry_delay + retry_jitter + node_timeout
# (30 s + 0 + 250 ms here).  A waiter whose server dies (stopped at once:
# nothing takes the offer back) leaves it to expire by that.
$h->query_safe("SELECT redlock_lock('r11', 60000)");
($w, $wpid) = west_waiter('r11');
ok(wait_for(sub { all_offer('r11', $wpid) }), 'r11: every node has the offer of the west waiter');
my @opttl = map { $_->cli('PTTL', 'redlock:wait:r11') } @redis;
is(scalar(grep { $_ > 0 && $_ <= 30250 } @opttl), scalar(@redis),
	"r11: the offer expires within retry_delay + retry_jitter + node_timeout (PTTL @opttl)");
$west->stop('immediate');
eval { $w->quit };
ok(!no_offer('r11'), 'r11: its server stopped, the offer is still on the nodes');
ok(wait_for(sub { no_offer('r11') }, 60), 'r11: and expires by its lifetime');
$h->query_safe("SELECT redlock_unlock('r11')");
ok(wait_for(sub { no_lock('r11') }, 10), "r11: east's release then hands it to nobody");

$h->quit;
$east->stop;
done_testing();
