# Two PostgreSQL servers sharing the Redis nodes: a release on one wakes a
# waiter on the other at once (the wake-up worker hears it from the nodes),
# with redlock.retry_delay at 10 s so that polling cannot explain it.  Real
# Redis nodes and two real clusters.
use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedisNode;
use Test::More;
use Time::HiRes qw(time usleep);

my @redis = map { RedisNode->new } 1 .. 3;
my $nodes = join(',', map { $_->addr } @redis);

my @pg;
for my $name ('east', 'west')
{
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init;
	$node->append_conf('postgresql.conf',
		"shared_preload_libraries = 'redlock'\nredlock.nodes = '$nodes'\n"
		  . "redlock.retry_delay = '10s'\nredlock.retry_jitter = 0\n");
	$node->start;
	$node->safe_psql('postgres', 'CREATE EXTENSION redlock');
	push @pg, $node;
}
my ($east, $west) = @pg;

# every node has a subscriber for the key: the west server listens
sub subscribed
{
	my ($key) = @_;
	for (1 .. 100)
	{
		my $all = 1;
		for my $r (@redis)
		{
			my $out = $r->cli('PUBSUB', 'NUMSUB', $key);
			$all = 0 unless $out =~ /\n1$/;
		}
		return 1 if $all;
		usleep(50_000);
	}
	return 0;
}

# a waiter on west for $res; returns the session once it is queued and heard
sub west_waiter
{
	my ($res) = @_;
	my $w = $west->background_psql('postgres', on_error_stop => 0);
	$w->query_until(qr/waiting/,
		"\\echo waiting\nSELECT redlock_lock('$res', 60000) AS got \\gset\n");
	$west->poll_query_until('postgres',
		"SELECT count(*) > 0 FROM redlock_locks WHERE resource = '$res' AND NOT granted")
	  or die "no waiter";
	ok(subscribed("redlock:lock:$res"), "west's wake-up worker listens for $res on every node");
	return $w;
}

like($west->safe_psql('postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'redlock wake-up'"),
	qr/^1$/, 'the wake-up worker runs');

# --- unlock on east wakes the waiter on west
my $h = $east->background_psql('postgres', on_error_stop => 0);
my $t1 = $h->query_safe("SELECT redlock_lock('x:a', 60000)");
my $w = west_waiter('x:a');
my $t0 = time;
$h->query_safe("SELECT redlock_unlock('x:a')");
my $t2 = $w->query_safe('SELECT :got');
my $took = time - $t0;
cmp_ok($t2, '>', $t1, 'the west waiter got the lease with a newer token');
cmp_ok($took, '<', 5, "east's release woke it (${\ sprintf '%.2f', $took }s; retry_delay is 10 s)");
$w->query_safe("SELECT redlock_unlock('x:a')");
$w->quit;

# --- the holder on east exits (terminated): its release at exit wakes west
my $hpid = $h->query_safe("SELECT pg_backend_pid(); SELECT redlock_lock('x:b', 60000) \\g /dev/null");
$w = west_waiter('x:b');
$t0 = time;
$east->safe_psql('postgres', "SELECT pg_terminate_backend($hpid)");
$w->query_safe('SELECT :got');
$took = time - $t0;
cmp_ok($took, '<', 5, "the east holder's exit woke the west waiter (${\ sprintf '%.2f', $took }s)");
$w->query_safe("SELECT redlock_unlock('x:b')");
$w->quit;

# --- no longer awaited: the worker unsubscribes
my $gone = 0;
for (1 .. 100)
{
	$gone = 1, last
	  unless grep { $_->cli('PUBSUB', 'NUMSUB', 'redlock:lock:x:a') =~ /\n1$/ } @redis;
	usleep(50_000);
}
ok($gone, 'keys nobody waits for are unsubscribed');

# --- a node restarted: the worker subscribes again on the new connection
$h = $east->background_psql('postgres', on_error_stop => 0);
$h->query_safe("SELECT redlock_lock('x:c', 60000)");
$w = west_waiter('x:c');
$redis[0]->restart;
ok(subscribed('redlock:lock:x:c'), 'after a node restart the worker listens there again');
$t0 = time;
$h->query_safe("SELECT redlock_unlock('x:c')");
$w->query_safe('SELECT :got');
$took = time - $t0;
cmp_ok($took, '<', 5, "and the release still wakes the waiter (${\ sprintf '%.2f', $took }s)");
$w->query_safe("SELECT redlock_unlock('x:c')");
$w->quit;
$h->quit;

# --- a release between the waiter's refused attempt and the worker's
# subscription is not lost: once a majority confirm the new subscription,
# the waiter asks once more.  The wake-up worker is stopped (SIGSTOP) while
# the waiter starts and the holder releases.
$h = $east->background_psql('postgres', on_error_stop => 0);
$h->query_safe("SELECT redlock_lock('x:race', 60000)");
my $wkr = $west->safe_psql('postgres', "SELECT pid FROM pg_stat_activity WHERE backend_type = 'redlock wake-up'");
kill 'STOP', $wkr;
$w = $west->background_psql('postgres', on_error_stop => 0);
$w->query_until(qr/waiting/, "\\echo waiting\nSELECT redlock_lock('x:race', 60000) AS got \\gset\n");
$west->poll_query_until('postgres',
	"SELECT count(*) > 0 FROM redlock_locks WHERE resource = 'x:race' AND NOT granted")
  or die 'no waiter on x:race';
$west->poll_query_until('postgres',
	"SELECT wait_event IN ('Extension', 'RedlockLease') FROM pg_stat_activity WHERE query LIKE '%x:race%' AND backend_type = 'client backend' AND pid <> pg_backend_pid()")
  or die 'the west waiter is not asleep';
$h->query_safe("SELECT redlock_unlock('x:race')");    # nobody listens yet
$t0 = time;
kill 'CONT', $wkr;
like($w->query_safe('SELECT :got'), qr/^\d+$/, 'a release before the subscription: the waiter still gets the lease');
$took = time - $t0;
cmp_ok($took, '<', 5, "once the worker subscribed (${\ sprintf '%.2f', $took }s; retry_delay is 10 s)");
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
$w = west_waiter('x:m');
$west->poll_query_until('postgres',
	"SELECT wait_event IN ('Extension', 'RedlockLease') FROM pg_stat_activity WHERE query LIKE '%x:m%' AND backend_type = 'client backend' AND pid <> pg_backend_pid()")
  or die 'the west waiter is not asleep';
my $attempts = sub { $west->safe_psql('postgres', 'SELECT attempts FROM redlock_stats') };
my $a0 = $attempts->();
$redis[0]->cli('PUBLISH', 'redlock:lock:x:m', '');
sleep 1;
is($attempts->(), $a0, 'a release heard from one node of three does not wake the waiter');
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

# --- a lost message costs latency, never liveness: without the worker the
# waiter still gets the lease at its backstop (retry_delay, 1 s here)
$west->safe_psql('postgres', "ALTER SYSTEM SET redlock.retry_delay = '1s'; SELECT pg_reload_conf()");
$h = $east->background_psql('postgres', on_error_stop => 0);
$h->query_safe("SELECT redlock_lock('x:d', 60000)");
my $wk = $west->safe_psql('postgres', "SELECT pid FROM pg_stat_activity WHERE backend_type = 'redlock wake-up'");
my $w2 = $west->background_psql('postgres', on_error_stop => 0);
$w2->query_until(qr/waiting/, "\\echo waiting\nSELECT redlock_lock('x:d', 60000) AS got \\gset\n");
$west->poll_query_until('postgres',
	"SELECT count(*) > 0 FROM redlock_locks WHERE resource = 'x:d' AND NOT granted");
$west->safe_psql('postgres', "SELECT pg_terminate_backend($wk)");
$h->query_safe("SELECT redlock_unlock('x:d')");
like($w2->query_safe('SELECT :got'), qr/^\d+$/, 'without the wake-up worker the waiter still gets the lease');
$w2->quit;
$h->quit;

$_->stop for @pg;
done_testing();
