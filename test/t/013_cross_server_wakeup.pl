# Two PostgreSQL servers sharing the Redis nodes: a release on one wakes a
# waiter on the other at once (the wake-up worker hears it from the nodes),
# with redlock.retry_delay at 60 s so that polling cannot explain it.  Real
# Redis nodes and two real clusters.
use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedlockTest;
use Test::More;
use Time::HiRes qw(time usleep);

my @redis = redis_nodes(3);
my ($east, $west) = redlock_pair(nodes => \@redis,
	conf => "redlock.retry_delay = '60s'\nredlock.retry_jitter = 0\n");

# a waiter granted well before its backstop (retry_delay, 60 s, the most it
# can be) was woken; half of it leaves a busy machine room
my $woken_within = 30;

# a waiter on west for $res; returns the session once it is queued, asleep
# and heard (west's wake-up worker listens for the key on every node)
sub west_waiter
{
	my ($res) = @_;
	my ($w, $pid) = remote_waiter($west, $res, \@redis);
	return wantarray ? ($w, $pid) : $w;
}

like(worker_pid($west, 'wake-up'), qr/^\d+$/, 'the wake-up worker runs');

# --- unlock on east wakes the waiter on west
my $h = $east->background_psql('postgres', on_error_stop => 0);
my $t1 = $h->query_safe("SELECT redlock_lock('x:a', 60000)");
my $w = west_waiter('x:a');
my $t0 = time;
$h->query_safe("SELECT redlock_unlock('x:a')");
my $t2 = $w->query_safe('SELECT :got');
my $took = time - $t0;
cmp_ok($t2, '>', $t1, 'the west waiter got the lease with a newer token');
cmp_ok($took, '<', $woken_within, "east's release woke it (${\ sprintf '%.2f', $took }s; retry_delay is 60 s)");
$w->query_safe("SELECT redlock_unlock('x:a')");
$w->quit;

# --- the holder on east exits (terminated): its release at exit wakes west
my $hpid = $h->query_safe("SELECT pg_backend_pid(); SELECT redlock_lock('x:b', 60000) \\g /dev/null");
$w = west_waiter('x:b');
$t0 = time;
$east->safe_psql('postgres', "SELECT pg_terminate_backend($hpid)");
$w->query_safe('SELECT :got');
$took = time - $t0;
cmp_ok($took, '<', $woken_within, "the east holder's exit woke the west waiter (${\ sprintf '%.2f', $took }s)");
$w->query_safe("SELECT redlock_unlock('x:b')");
$w->quit;

# --- no longer awaited: the worker unsubscribes, 2 s after the last waiter
# left (it left when it was granted, after $t0: a lower bound, which load
# can only make longer)
ok(unsubscribed('redlock:lock:x:a', @redis), 'keys nobody waits for are unsubscribed');
ok(unsubscribed('redlock:lock:x:b', @redis), 'x:b too');
my $kept = time - $t0;
cmp_ok($kept, '>=', 2,
	"x:b stayed subscribed at least 2 s after its last waiter (${\ sprintf '%.2f', $kept }s)");

# --- a node restarted: the worker subscribes again on the new connection
$h = $east->background_psql('postgres', on_error_stop => 0);
$h->query_safe("SELECT redlock_lock('x:c', 60000)");
$w = west_waiter('x:c');
$redis[0]->restart;
ok(subscribed('redlock:lock:x:c', @redis), 'after a node restart the worker listens there again');
$t0 = time;
$h->query_safe("SELECT redlock_unlock('x:c')");
$w->query_safe('SELECT :got');
$took = time - $t0;
cmp_ok($took, '<', $woken_within, "and the release still wakes the waiter (${\ sprintf '%.2f', $took }s)");
$w->query_safe("SELECT redlock_unlock('x:c')");
$w->quit;
$h->quit;

# --- a release between the waiter's refused attempt and the worker's
# subscription is not lost: once a majority confirm the new subscription,
# the waiter asks once more.  The wake-up worker is stopped (SIGSTOP) while
# the waiter starts and the holder releases.
$h = $east->background_psql('postgres', on_error_stop => 0);
$h->query_safe("SELECT redlock_lock('x:race', 60000)");
my $wkr = worker_pid($west, 'wake-up');
kill 'STOP', $wkr;
($w, my $race_pid) = start_waiter($west, 'x:race');
is(wait_event_of($west, $race_pid), 'Extension/' . expected_wait_event($west, 'lease'),
	'the waiter shows the lease wait event');
$h->query_safe("SELECT redlock_unlock('x:race')");    # nobody listens yet
$t0 = time;
kill 'CONT', $wkr;
like($w->query_safe('SELECT :got'), qr/^\d+$/, 'a release before the subscription: the waiter still gets the lease');
$took = time - $t0;
cmp_ok($took, '<', $woken_within, "once the worker subscribed (${\ sprintf '%.2f', $took }s; retry_delay is 60 s)");
$w->query_safe("SELECT redlock_unlock('x:race')");
$w->quit;
$h->quit;

# --- a release heard from a minority of the nodes does not wake the waiter
# (the lock is not free where it counts, asking would only be refused); a
# majority does.  The worker gives a minority node_timeout, 10 s here, before
# it wakes the waiter anyway.
$west->safe_psql('postgres', "ALTER SYSTEM SET redlock.node_timeout = '10s'; SELECT pg_reload_conf()");
$h = $east->background_psql('postgres', on_error_stop => 0);
$h->query_safe("SELECT redlock_lock('x:m', 60000)");
($w, my $mpid) = west_waiter('x:m');
settled($west, $mpid);
my $mon = $west->background_psql('postgres', on_error_stop => 0);
my $attempts = sub { $mon->query_safe('SELECT coalesce(sum(attempts), 0) FROM redlock_stats') };
my $a0 = $attempts->();
# watched for half of node_timeout after the publication (the worker hears
# it after redis-cli returns: the window is at least that long)
$t0 = time;
$redis[0]->cli('PUBLISH', 'redlock:lock:x:m', '');
my $quiet = 1;
while (time - $t0 < 5)
{
	$quiet = 0, last if $attempts->() ne $a0;
	usleep(200_000);
}
# Watched over the window, the waiter was seen asking the nodes about 10 s
# after its start: PostgreSQL's idle statistics flush, armed (10 s) when
# the session went idle before the call, sets the latch inside it, and the
# waiter took any latch for a wake-up.  It now asks only when woken for a
# reason (src/lease/lease_wait.c, rl_lock_table_take_wake).
ok($quiet, 'a release heard from one node of three does not wake the waiter (watched 5 s of its 10 s node_timeout)');
$redis[1]->cli('PUBLISH', 'redlock:lock:x:m', '');
my $woke = 0;
for (1 .. 50)
{
	$woke = 1, last if $attempts->() > $a0;
	usleep(100_000);
}
ok($woke, 'heard from a majority, it asks the nodes at once (and is refused: east still holds)');
$h->query_safe("SELECT redlock_unlock('x:m')");
like($w->query_safe('SELECT :got'), qr/^\d+$/, 'and the real release grants it');
$w->query_safe("SELECT redlock_unlock('x:m')");
$w->quit;
$h->quit;
$mon->quit;
$west->safe_psql('postgres', "ALTER SYSTEM RESET redlock.node_timeout; SELECT pg_reload_conf()");

# --- who holds a resource, asked from the other server
$h = $east->background_psql('postgres', on_error_stop => 0);
my $epid = $h->query_safe("SELECT pg_backend_pid(); SELECT redlock_lock('x:who', 60000) \\g /dev/null");
my $esys = $east->safe_psql('postgres', 'SELECT system_identifier FROM pg_control_system()');
my $edb = $east->safe_psql('postgres', "SELECT oid FROM pg_database WHERE datname = 'postgres'");
is($west->safe_psql('postgres',
		"SELECT count(*), min(system_identifier) = max(system_identifier), min(system_identifier), "
		  . "min(datid), min(pid), bool_and(remaining_ms BETWEEN 1 AND 60000), bool_or(this_server) "
		  . "FROM redlock_holder('x:who')"),
	"3|t|$esys|$edb|$epid|t|f",
	'redlock_holder on west names the east holder on every node');
is($east->safe_psql('postgres', "SELECT bool_and(this_server) FROM redlock_holder('x:who')"),
	't', 'and on east it is this server');
$h->query_safe("SELECT redlock_unlock('x:who')");
is($west->safe_psql('postgres', "SELECT count(*) FROM redlock_holder('x:who')"), '0',
	'nobody holds it once released');
$h->quit;

# --- a lost message costs latency, never liveness: the wake-up worker is
# stopped (SIGSTOP: it neither hears the release nor restarts and
# subscribes anew), so only the waiter's backstop (retry_delay, 500 ms
# here) can get it the lease.  The waiter has no lock_timeout (a wait that
# ends makes a last attempt, which would get it the lease without any
# backstop) and is given 20 s, forty backstops: without the backstop it
# would sleep for the server's retry_delay, 60 s.  (A waiter with no
# backstop used to be woken about 10 s after its start anyway, by
# PostgreSQL's idle statistics flush timer; it no longer asks for that.)
$west->safe_psql('postgres', "ALTER SYSTEM SET redlock.retry_delay = '500ms'; SELECT pg_reload_conf()");
$west->poll_query_until('postgres', "SELECT current_setting('redlock.retry_delay') = '500ms'")
  or die 'the reload did not take';
$h = $east->background_psql('postgres', on_error_stop => 0);
$h->query_safe("SELECT redlock_lock('x:d', 60000)");
my $wk = worker_pid($west, 'wake-up');
like($wk, qr/^\d+$/, 'the wake-up worker runs');
my ($w2, $dpid) = start_waiter($west, 'x:d', set => "SET lock_timeout = 0");
kill 'STOP', $wk;
$h->query_safe("SELECT redlock_unlock('x:d')");
ok(wait_for(sub {
	$west->safe_psql('postgres',
		"SELECT count(*) FROM redlock_locks WHERE resource = 'x:d' AND granted AND pid = $dpid") eq '1'
}, 20), 'without the wake-up worker the waiter still gets the lease (retry_delay 500 ms, given 20 s)');
kill 'CONT', $wk;
like($w2->query_safe('SELECT :got'), qr/^\d+$/, 'with a token');
$w2->quit;
$h->quit;

$_->stop for $east, $west;
done_testing();
