# Shared leases (redlock_lock_shared() and the other shared forms) on two
# servers sharing the Redis nodes.  Readers of both servers hold a
# resource together, each with its own token; the nodes hold the lock as
# "shared" and the readers beside it.  A writer that waits stops new
# readers of either server, is granted when the last reader leaves (a
# wake-up, not a poll: the retry delay is 60 s), and a reader that waits
# behind it is granted when it releases, across servers.  A keep-alive
# reader outlives its TTL; the lock lives as long as its last reader; a
# reader terminated releases at exit, one killed leaves its place to its
# TTL, one cancelled while it waits leaves nothing.  A reader woken while
# its own round is still in the dispatcher's hands is granted at once, not
# at the retry delay.  A writer whose attempt won a node and was refused on
# the others is granted at once when handed the lock, not at node_timeout.
# Real Redis nodes and two real clusters.
use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedlockTest;
use Test::More;
use Time::HiRes qw(time usleep);

my @redis = redis_nodes(3);
my ($east, $west) = redlock_pair(nodes => \@redis,
	conf => "redlock.retry_delay = '60s'\nredlock.retry_jitter = 0\nrestart_after_crash = on\n");

# what each node has: the lock's value, and how many readers
sub on_nodes
{
	my ($res) = @_;
	return join ' ', map {
		($_->cli('GET', "redlock:lock:$res") // '') . '/'
		  . $_->cli('ZCARD', "redlock:read:$res")
	} @redis;
}

sub session
{
	my ($pg) = @_;
	return $pg->background_psql('postgres', on_error_stop => 0);
}

# --- readers of both servers together
my $r1 = session($east);
my $r2 = session($west);
my $t1 = $r1->query_safe("SELECT redlock_lock_shared('sh:1', 60000)");
my $t2 = $r2->query_safe("SELECT redlock_lock_shared('sh:1', 60000)");
ok($t1 > 0 && $t2 > $t1, 'readers on both servers hold the resource together, tokens in grant order');
is(on_nodes('sh:1'), join(' ', ('shared/2') x @redis),
	'each node holds the lock as "shared", with both readers');
is($r1->query_safe("SELECT count(*) FROM redlock_holder('sh:1') WHERE mode = 'shared'"),
	2 * @redis, 'redlock_holder shows both readers on every node');
is($west->safe_psql('postgres', "SELECT redlock_try_lock('sh:1') IS NULL"), 't',
	'an exclusive try is refused while readers hold it');

# --- a writer waits: no new reader of either server, then it gets the
# resource when the last reader leaves
my ($w, $wpid) = start_waiter($east, 'sh:1');
my $r3 = session($west);
my $refused = 1;
for (1 .. 10)
{
	my $t = $r3->query_safe("SELECT redlock_try_lock_shared('sh:1', 60000)");
	if ($t ne '')
	{
		$refused = 0;
		$r3->query_safe("SELECT redlock_unlock_shared('sh:1')");
		last;
	}
	usleep(50_000);
}
ok($refused, 'while a writer waits, a new reader of the other server is refused');
my $r4 = session($east);
is($r4->query_safe("SELECT redlock_try_lock_shared('sh:1', 60000) IS NULL"), 't',
	'... and one of the same server');
$r2->query_safe("SELECT redlock_unlock_shared('sh:1')");
usleep(300_000);
is(waiters($east, 'sh:1'), '1', 'one reader left: the writer still waits');
my $t0 = time;
$r1->query_safe("SELECT redlock_unlock_shared('sh:1')");
my ($tw, $after) = granted_after($w, $t0);
ok($tw > $t2, 'the last reader gone, the writer is granted, with a token above the readers\'');
cmp_ok($after, '<', 10, 'woken by the release (the retry delay is 60 s)');
like(on_nodes('sh:1'), qr/^(?!shared)\S+\/0( (?!shared)\S+\/0)*$/, 'the nodes hold it exclusively now, no reader left');

# --- a reader of the other server waits behind the writer, and is woken
# by its release
my ($rw, $rwpid) = start_waiter($west, 'sh:1', call => "redlock_lock_shared('sh:1', 60000)");
is($west->safe_psql('postgres',
		"SELECT mode || ' ' || place FROM redlock_locks WHERE pid = $rwpid"),
	'shared 0', 'a waiting reader shows as shared, with no place in line');
$t0 = time;
$w->query_safe("SELECT redlock_unlock('sh:1')");
my ($tr, $after_r) = granted_after($rw, $t0);
ok($tr > $tw, 'the writer gone, the waiting reader is granted, token above the writer\'s');
cmp_ok($after_r, '<', 10, 'woken across servers by the release');
$rw->query_safe("SELECT redlock_unlock_shared('sh:1')");
ok(no_keys('sh:1', @redis), 'released: the lock is gone');
is(join(' ', map { $_->cli('EXISTS', 'redlock:read:sh:1') } @redis), join(' ', ('0') x @redis),
	'and so are the readers');

# --- the lock lives as long as its last reader
$r1->query_safe("SELECT redlock_lock_shared('sh:2', 60000)");
$r2->query_safe("SELECT redlock_lock_shared('sh:2', 2000)");
$r1->query_safe("SELECT redlock_unlock_shared('sh:2')");
my @pttl = map { $_->cli('PTTL', 'redlock:lock:sh:2') } @redis;
is(scalar(grep { $_ > 0 && $_ <= 2000 } @pttl), scalar @redis,
	"a long reader gone, the lock lives as long as the short one left (@pttl ms)");
$r2->query_safe("SELECT redlock_unlock_shared('sh:2')");

# --- keep-alive: a reader outlives its TTL, a writer of the other server
# stays out
$r1->query_safe("SELECT redlock_lock_shared('sh:k', 1000, keep_alive => true)");
sleep 3;
is($r2->query_safe("SELECT redlock_try_lock('sh:k') IS NULL"), 't',
	'a keep-alive reader holds the resource past its TTL');
is($r1->query_safe("SELECT validity_ms > 0 AND mode = 'shared' FROM redlock_leases WHERE resource = 'sh:k'"),
	't', 'and its lease is still valid');
$r1->query_safe("SELECT redlock_unlock_shared('sh:k')");
isnt($r2->query_safe("SELECT redlock_try_lock('sh:k')"), '', 'released, a writer gets it');
$r2->query_safe("SELECT redlock_unlock('sh:k')");

# --- a reader terminated releases at exit: the waiting writer is granted
my $k = session($west);
my $kpid = $k->query_safe("SELECT pg_backend_pid(); SELECT redlock_lock_shared('sh:t', 60000) \\g /dev/null");
($w, $wpid) = start_waiter($east, 'sh:t');
$t0 = time;
$west->safe_psql('postgres', "SELECT pg_terminate_backend($kpid)");
my (undef, $after_t) = granted_after($w, $t0);
cmp_ok($after_t, '<', 10, 'a reader terminated releases at exit: the writer is granted at once');
$w->query_safe("SELECT redlock_unlock('sh:t')");

# --- a reader killed leaves its place to its TTL (the writer polls: no
# release will announce it)
$k = session($west);
$kpid = $k->query_safe("SELECT pg_backend_pid(); SELECT redlock_lock_shared('sh:x', 3000) \\g /dev/null");
my $killed = time;
kill 'KILL', $kpid;
$west->poll_query_until('postgres', 'SELECT true') or die 'west did not come back';
($w, $wpid) = start_waiter($east, 'sh:x', set => "SET redlock.retry_delay = '200ms'");
my (undef, $after_k) = granted_after($w, $killed);
cmp_ok($after_k, '>=', 2.5, 'a reader killed keeps the resource until its TTL');
cmp_ok($after_k, '<', 3 + 10, '... and no longer');
$w->query_safe("SELECT redlock_unlock('sh:x')");

# --- a wake-up that comes while the waiter's own round is still out
# (here, on the dispatcher's shared connections) is not lost: the waiter
# reads its wake mark before it sleeps, not only its latch.  East's rounds
# go through the dispatcher; a writer of west holds the resource and a
# reader of east waits for it.  A second reader of east asks with the
# dispatcher stopped: its round stays queued, and the session is stopped
# in its wait for the round (its node_timeout is long: it does not take
# the round back).  The dispatcher goes on and hands the round back (the
# nodes refused: the writer holds), then the writer's release wakes both
# readers while the second one is still stopped: its latch was set for
# the round and for the release, and is seen once.  Both readers must be
# granted at once, not at the 60 s retry delay.  (The second reader's
# session idles 11 s before its call: PostgreSQL's idle statistics flush,
# armed for up to 10 s when a session goes idle, would otherwise set its
# latch in the sleep and end it anyway.)
$east->append_conf('postgresql.conf', "redlock.shared_connections = always\n");
reload_seen($east);
my $rb = session($east);
my $rbpid = $rb->query_safe('SELECT pg_backend_pid()');
$rb->query_safe("SET redlock.node_timeout = '60s'");
my $idle_since = time;
my $hw = session($west);
$hw->query_safe("SELECT redlock_lock('sh:d', 60000)");
my ($ra, $rapid) = remote_waiter($east, 'sh:d', \@redis,
	call => "redlock_lock_shared('sh:d', 60000)", settled => 1);
usleep(1_000_000 * ($idle_since + 11 - time)) if time < $idle_since + 11;
my $disp = worker_pid($east, 'dispatcher');
my $evals = command_calls('eval', @redis);
my $asked = attempts($east);
kill 'STOP', $disp;
$rb->query_until(qr/waiting/,
	"\\echo waiting\nSELECT redlock_lock_shared('sh:d', 60000) AS got \\gset\n");
ok(wait_for(sub {
	attempts($east) > $asked && $east->safe_psql('postgres',
		"SELECT wait_event_type = 'Extension' FROM pg_stat_activity WHERE pid = $rbpid") eq 't'
}), 'a reader asks with the dispatcher stopped: it waits for its round');
kill 'STOP', $rbpid;
kill 'CONT', $disp;
ok(wait_for(sub { command_calls('eval', @redis) >= $evals + @redis }),
	'the dispatcher runs its round on every node');
$t0 = time;
$hw->query_safe("SELECT redlock_unlock('sh:d')");
my (undef, $after_a) = granted_after($ra, $t0);
cmp_ok($after_a, '<', 10, 'the writer gone, the first reader is woken and granted');
$t0 = time;
kill 'CONT', $rbpid;
my ($tb, $after_b) = granted_after($rb, $t0);
like($tb, qr/^\d+$/, 'the reader stopped meanwhile is granted too');
cmp_ok($after_b, '<', 10, '... at once: its wake-up, heard during its round, is not lost');
$ra->query_safe("SELECT redlock_unlock_shared('sh:d')");
$rb->query_safe("SELECT redlock_unlock_shared('sh:d')");
ok(no_keys('sh:d', @redis), 'both gone: the lock is gone');
$east->append_conf('postgresql.conf', "redlock.shared_connections = auto\n");
reload_seen($east);
$_->quit for $hw, $ra, $rb;

# --- a writer's attempt that wins a node where no reader is, and is
# refused where one is, takes the lock back on that node announcing nothing
# and leaves its offer on the others only: that node never speaks of the
# offer.  Here a reader of west holds the resource on nodes 1 and 2 (its
# place on node 0 is taken away by hand), and the offer of east's writer is
# taken out of node 1's queue, so that the reader's release leaves the lock
# free there (one no) and hands it to the offer on node 2 (one yes).  The
# wake-up worker must count node 0's no at once and wake the writer, which
# asks again and is granted, not wait for node 0 until node_timeout (20 s
# here).
$east->append_conf('postgresql.conf', "redlock.node_timeout = '20s'\n");
reload_seen($east);
my $rs = session($west);
$rs->query_safe("SELECT redlock_lock_shared('sh:s', 60000)");
my $rv = $redis[0]->cli('ZRANGE', 'redlock:read:sh:s', '0', '-1');
$redis[0]->cli('ZREM', 'redlock:read:sh:s', $rv);
$redis[0]->cli('DEL', 'redlock:lock:sh:s');
my ($ws, $wspid) = start_waiter($east, 'sh:s');
ok(wait_for(sub { $redis[1]->cli('LLEN', 'redlock:wait:sh:s') == 1
			  && $redis[2]->cli('LLEN', 'redlock:wait:sh:s') == 1
			  && ($redis[0]->cli('GET', 'redlock:lock:sh:s') // '') eq '' }),
	'the writer\'s attempt won node 0, took it back, and left its offer on nodes 1 and 2');
usleep(300_000);
$redis[1]->cli('DEL', 'redlock:wait:sh:s');
$t0 = time;
$rs->query_safe("SELECT redlock_unlock_shared('sh:s')");
my ($tws, $after_ws) = granted_after($ws, $t0);
ok($tws ne '', 'the reader gone, the writer is granted');
cmp_ok($after_ws, '<', 5, '... at once, not at node_timeout');
$ws->query_safe("SELECT redlock_unlock('sh:s')");
$east->append_conf('postgresql.conf', "redlock.node_timeout = '250ms'\n");
reload_seen($east);
ok(no_keys('sh:s', @redis), 'released: the lock is gone');
$_->quit for $rs, $ws;

# --- a waiting reader cancelled leaves nothing
$r1 = session($east);
$r1->query_safe("SELECT redlock_lock('sh:c', 60000)");
my ($c, $cpid) = start_waiter($west, 'sh:c', call => "redlock_lock_shared('sh:c', 60000)");
$west->safe_psql('postgres', "SELECT pg_cancel_backend($cpid)");
ok(wait_for(sub { $west->safe_psql('postgres', "SELECT count(*) FROM redlock_locks WHERE pid = $cpid") eq '0' }),
	'a waiting reader cancelled: its row is gone');
my $out = $c->query('SELECT 1');
like($c->{stderr}, qr/canceling statement due to user request/, 'its call ended with the cancel');
is($out, '1', 'and its session goes on');
$r1->query_safe("SELECT redlock_unlock('sh:c')");
ok(no_keys('sh:*', @redis), 'nothing is left on the nodes');
is(join(' ', map { scalar(() = $_->cli('KEYS', 'redlock:read:*') =~ /\S+/g) } @redis),
	join(' ', ('0') x @redis), 'no readers\' set either');

$_->quit for $r1, $r2, $r3, $r4, $w, $c;
done_testing();
