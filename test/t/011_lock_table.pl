# The lock table in shared memory: redlock_locks, waiters woken at release
# (not after a polling delay), the keep-alive worker, a full table, and
# waiters while nodes fail.  Real Redis nodes and a real cluster with redlock
# in shared_preload_libraries.
use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use FakeRedis;
use RedisNode;
use Test::More;
use Time::HiRes qw(time usleep);

my @redis = map { RedisNode->new } 1 .. 3;
my $nodes = join(',', map { $_->addr } @redis);

my $pg = PostgreSQL::Test::Cluster->new('locktable');
$pg->init;
# a retry delay of 10 s: a waiter granted sooner than that was woken
$pg->append_conf('postgresql.conf',
	"shared_preload_libraries = 'redlock'\nredlock.nodes = '$nodes'\n"
	  . "redlock.max_leases = 16\nredlock.retry_delay = '10s'\nredlock.retry_jitter = 0\n");
$pg->start;
$pg->safe_psql('postgres', 'CREATE EXTENSION redlock');

sub keys_of
{
	my ($pattern) = @_;
	return join ' ', map { $_->cli('EVAL', "return #redis.call('KEYS', ARGV[1])", '0', "redlock:lock:$pattern") } @redis;
}

# start a waiter for $res in a new session; returns the session
sub start_waiter
{
	my ($res, $nth) = @_;
	$nth //= 1;
	my $w = $pg->background_psql('postgres', on_error_stop => 0);
	$w->query_until(qr/waiting/,
		"\\echo waiting\nSELECT redlock_lock('$res', 60000) AS got \\gset\n");
	# seen as the nth waiter in the lock table
	$pg->poll_query_until('postgres',
		"SELECT count(*) >= $nth FROM redlock_locks WHERE resource = '$res' AND NOT granted")
	  or die "no waiter on $res";
	return $w;
}

# how many are waiting for $res
sub waiting
{
	my ($res) = @_;
	return $pg->safe_psql('postgres',
		"SELECT count(*) FROM redlock_locks WHERE resource = '$res' AND NOT granted");
}

# the waiter's grant: waits for it, returns seconds since $t0
sub granted_after
{
	my ($w, $t0) = @_;
	my $tok = $w->query_safe('SELECT :got');
	my $at = time;
	return ($tok, $at - $t0);
}

# --- redlock_locks: a holder and a waiter, and the waiter's wait event
my $h = $pg->background_psql('postgres', on_error_stop => 0);
my $t1 = $h->query_safe("SELECT redlock_lock('lt:a', 60000)");
my $w = start_waiter('lt:a');
is($pg->safe_psql('postgres',
		"SELECT string_agg(format('%s/%s/%s/%s', granted, token IS NOT NULL, waitstart IS NOT NULL, scope), ' ' ORDER BY granted DESC) FROM redlock_locks WHERE resource = 'lt:a'"),
	't/t/f/session f/f/t/', 'redlock_locks: one holder with its token, one waiter with its wait start');
like($pg->safe_psql('postgres',
		"SELECT wait_event_type || '/' || wait_event FROM pg_stat_activity WHERE query LIKE '%redlock_lock(''lt:a''%' AND pid <> pg_backend_pid() AND state = 'active'"),
	qr{^Extension/(Extension|RedlockLease)$}, 'the waiter shows a redlock wait event');

# --- woken at release: unlock, COMMIT, ROLLBACK, DISCARD ALL, exit
my $t0 = time;
$h->query_safe("SELECT redlock_unlock('lt:a')");
my ($tok, $took) = granted_after($w, $t0);
cmp_ok($tok, '>', $t1, 'unlock: the waiter got a newer token');
cmp_ok($took, '<', 5, "unlock woke the waiter (${\ sprintf '%.2f', $took }s; retry_delay is 10 s)");
$w->query_safe("SELECT redlock_unlock('lt:a')");
$w->quit;

for my $end ('COMMIT', 'ROLLBACK')
{
	$h->query_safe("BEGIN; SELECT redlock_xact_lock('lt:x', 60000)");
	$w = start_waiter('lt:x');
	$t0 = time;
	$h->query_safe($end);
	($tok, $took) = granted_after($w, $t0);
	like($tok, qr/^\d+$/, "$end: the waiter was granted");
	cmp_ok($took, '<', 5, "$end woke the waiter (${\ sprintf '%.2f', $took }s)");
	$w->query_safe("SELECT redlock_unlock('lt:x')");
	$w->quit;
}

$h->query_safe("SELECT redlock_lock('lt:d', 60000)");
$w = start_waiter('lt:d');
$t0 = time;
$h->query_safe('DISCARD ALL');
($tok, $took) = granted_after($w, $t0);
cmp_ok($took, '<', 5, "DISCARD ALL woke the waiter (${\ sprintf '%.2f', $took }s)");
$w->query_safe("SELECT redlock_unlock('lt:d')");
$w->quit;

my $hpid = $h->query_safe("SELECT pg_backend_pid(); SELECT redlock_lock('lt:e', 60000) \\g /dev/null");
$w = start_waiter('lt:e');
$t0 = time;
$pg->safe_psql('postgres', "SELECT pg_terminate_backend($hpid)");
($tok, $took) = granted_after($w, $t0);
cmp_ok($took, '<', 5, "the holder's exit woke the waiter (${\ sprintf '%.2f', $took }s)");
$w->query_safe("SELECT redlock_unlock('lt:e')");
$w->quit;
eval { $h->quit };

$h = $pg->background_psql('postgres', on_error_stop => 0);

# --- first come, first served; a cancelled waiter passes its turn
$h->query_safe("SELECT redlock_lock('lt:q', 60000)");
my @q = map { start_waiter('lt:q', $_) } 1 .. 3;
my @qpids = split /\n/, $pg->safe_psql('postgres',
	"SELECT pid FROM redlock_locks WHERE resource = 'lt:q' AND NOT granted ORDER BY waitstart");
is(scalar @qpids, 3, 'three waiters queued');
$pg->safe_psql('postgres', "SELECT pg_cancel_backend($qpids[1])");    # the second
$q[1]->query('SELECT 1');
like($q[1]->{stderr}, qr/canceling statement due to user request/, 'the second waiter was cancelled');
is(waiting('lt:q'), '2', 'and left the queue');
$h->query_safe("SELECT redlock_unlock('lt:q')");
my ($first) = granted_after($q[0], time);
like($first, qr/^\d+$/, 'the first waiter got the lease at release');
is(waiting('lt:q'), '1', 'the third still waits');
$q[0]->query_safe("SELECT redlock_unlock('lt:q')");
my ($third) = granted_after($q[2], time);
cmp_ok($third, '>', $first, 'then the third, with a newer token');
$q[2]->query_safe("SELECT redlock_unlock('lt:q')");
$_->quit for @q;

# --- woken at a local holder's expiry: the holder keeps a 1 s lease
$h->query_safe("SELECT redlock_lock('lt:exp', 1000)");
$w = start_waiter('lt:exp');
$t0 = time;
($tok, $took) = granted_after($w, $t0);
cmp_ok($took, '<', 5, "the waiter woke at the holder's expiry (${\ sprintf '%.2f', $took }s)");
$w->query_safe("SELECT redlock_unlock('lt:exp')");
$w->quit;
$h->query("SELECT redlock_unlock_all()");

# --- wait_ms: a limit of the call's own
my ($rc, $out, $err) = $pg->psql('postgres', "SELECT redlock_lock('lt:busy', 60000)");
$h->query_safe("SELECT redlock_lock('lt:busy', 60000)");
$t0 = time;
($rc, $out, $err) = $pg->psql('postgres', "SELECT redlock_lock('lt:busy', 60000, wait_ms => 300)");
$took = time - $t0;
like($err, qr/could not obtain lease on "lt:busy" within wait_ms \(300 ms\)/, 'wait_ms ends the wait with 55P03');
cmp_ok($took, '<', 5, "wait_ms did not wait for retry_delay (${\ sprintf '%.2f', $took }s)");
($rc, $out, $err) = $pg->psql('postgres', "SELECT redlock_lock('lt:busy', 60000, wait_ms => -1)");
like($err, qr/wait_ms must not be negative/, 'a negative wait_ms is refused');
$h->query_safe("SELECT redlock_unlock('lt:busy')");

# --- a full lock table: a clear error, nothing left on the nodes
$h->query_safe("SELECT count(redlock_lock('full:' || g, 60000)) FROM generate_series(1, 16) g");
($rc, $out, $err) = $pg->psql('postgres', "SELECT redlock_try_lock('full:17', 60000)");
like($err, qr/out of shared memory for redlock leases/, 'the 17th lease of a 16-slot table is refused');
like($err, qr/Increase redlock.max_leases/, 'with a hint');
is(keys_of('full:17'), '0 0 0', 'and left no lock key on the nodes');
$h->query_safe('SELECT redlock_unlock_all()');
like($pg->safe_psql('postgres', "SELECT redlock_try_lock('full:17', 60000)"), qr/^\d+$/,
	'after the release the table has room again');
is($pg->safe_psql('postgres', 'SELECT count(*) FROM redlock_locks'), '0',
	'no lock table row outlives its session');

# --- keep-alive: a 1 s lease lives on while its backend does
my $k = $pg->background_psql('postgres', on_error_stop => 0);
my $kpid = $k->query_safe('SELECT pg_backend_pid()');
like($k->query_safe("SELECT redlock_lock('ka:a', 1000, keep_alive => true)"), qr/^\d+$/,
	'a keep-alive lease with a 1 s TTL');
sleep 3;
is($k->query_safe("SELECT validity_ms > 0 AND keep_alive AND NOT lost FROM redlock_leases WHERE resource = 'ka:a'"),
	't', 'three TTLs later it is still valid');
is($pg->safe_psql('postgres', "SELECT redlock_try_lock('ka:a') IS NULL"), 't',
	'and nobody else can take it');
is($pg->safe_psql('postgres', "SELECT keep_alive FROM redlock_locks WHERE resource = 'ka:a'"),
	't', 'redlock_locks shows it kept alive');

# the worker restarts (after 1 s) and goes on: a lease whose TTL outlasts
# the restart is still kept
like($k->query_safe("SELECT redlock_lock('ka:r', 3000, keep_alive => true)"), qr/^\d+$/,
	'a keep-alive lease with a 3 s TTL');
my $wpid = $pg->safe_psql('postgres',
	"SELECT pid FROM pg_stat_activity WHERE backend_type = 'redlock keep-alive'");
like($wpid, qr/^\d+$/, 'the keep-alive worker runs');
$pg->safe_psql('postgres', "SELECT pg_terminate_backend($wpid)");
sleep 5;
is($pg->safe_psql('postgres', "SELECT redlock_try_lock('ka:r') IS NULL"), 't',
	'after a worker restart the lease is still kept');
isnt($pg->safe_psql('postgres',
		"SELECT pid FROM pg_stat_activity WHERE backend_type = 'redlock keep-alive'"),
	$wpid, 'by a new worker');

# the holder is terminated: the lease ends within one TTL
$pg->safe_psql('postgres', "SELECT pg_terminate_backend($kpid)");
$t0 = time;
my $free;
for (1 .. 100)
{
	# a session of its own: its exit releases what it got
	$free = $pg->safe_psql('postgres', "SELECT redlock_try_lock('ka:a') IS NOT NULL");
	last if $free eq 't';
	usleep(100_000);
}
is($free, 't', "a terminated holder's keep-alive lease ends (${\ sprintf '%.1f', time - $t0 }s)");

# a lease the worker cannot extend (the nodes no longer have it) is lost
$k = $pg->background_psql('postgres', on_error_stop => 0);
$k->query_safe("SELECT redlock_lock('ka:lost', 1500, keep_alive => true)");
$_->cli('DEL', 'redlock:lock:ka:lost') for @redis;

# whether the session's keep-alive lease on $res is marked lost within 5 s
sub becomes_lost
{
	my ($session, $res) = @_;
	for (1 .. 50)
	{
		return 1 if $session->query_safe(
			"SELECT lost FROM redlock_leases WHERE resource = '$res'") eq 't';
		usleep(100_000);
	}
	return 0;
}
ok(becomes_lost($k, 'ka:lost'), 'a keep-alive lease taken away from the nodes is marked lost');
like(slurp_file($pg->logfile), qr/keep-alive could not extend the lease on "ka:lost"/,
	'and the log says so');
$k->query("SELECT redlock_unlock('ka:lost')");
$k->quit;

# --- waiters while nodes fail
$h->query_safe("SELECT redlock_lock('nf:a', 60000)");
$w = start_waiter('nf:a');
$redis[2]->kill9;    # a minority: the waiter still gets the lease at release
$t0 = time;
$h->query_safe("SELECT redlock_unlock('nf:a')");
($tok, $took) = granted_after($w, $t0);
like($tok, qr/^\d+$/, 'minority down: the waiter is granted at release');
$w->query_safe("SELECT redlock_unlock('nf:a')");
$w->quit;

$h->query_safe("SELECT redlock_lock('nf:b', 60000)");
$w = start_waiter('nf:b');
$redis[1]->kill9;    # now a majority is down
$t0 = time;
$h->query("SELECT redlock_unlock('nf:b')");
$w->query('SELECT 1');
like($w->{stderr}, qr/fewer than a majority of Redis nodes could answer/,
	'majority down: the woken waiter fails with RL002');
$took = time - $t0;
cmp_ok($took, '<', 5, "promptly (${\ sprintf '%.2f', $took }s), not at retry_delay");
$w->quit;
$h->quit;
$redis[1]->start;
$redis[2]->start;

# --- keep-alive of many leases: one command per node and round.  Five
# nodes; once 50 leases with a 1.5 s TTL are taken, one node is black-holed
# (SIGSTOP), one is down, and one answers 150 ms late behind a slow link, so
# every majority needs the slow node.  One lease per round, a pass would
# take 50 x 150 ms, and most leases would expire waiting their turn.
my @r5 = map { RedisNode->new } 1 .. 5;
my $slow = FakeRedis->new(mode => 'delay', backend => $r5[2]->addr, delay => 0.15);
my @addrs = map { $_->addr } @r5;
$addrs[2] = $slow->addr;
my $kb = PostgreSQL::Test::Cluster->new('keepbatch');
$kb->init;
$kb->append_conf('postgresql.conf',
	"shared_preload_libraries = 'redlock'\nredlock.nodes = '" . join(',', @addrs)
	  . "'\nredlock.max_leases = 64\nredlock.node_timeout = '500ms'\n");
$kb->start;
$kb->safe_psql('postgres', 'CREATE EXTENSION redlock');
$k = $kb->background_psql('postgres', on_error_stop => 0);
is($k->query_safe("SELECT count(redlock_lock('kb:' || g, 1500, keep_alive => true)) FROM generate_series(1, 50) g"),
	'50', '50 keep-alive leases with a 1.5 s TTL');
$r5[3]->pause;
$r5[4]->kill9;
usleep(4_500_000);
my $kb_valid = "SELECT count(*) FROM redlock_leases WHERE resource LIKE 'kb:%' AND validity_ms > 0 AND NOT lost";
is($k->query_safe($kb_valid), '50',
	'three TTLs later, with one node black-holed, one down and one slow, all 50 are valid');
my %on;
for my $n (@r5[0 .. 2])
{
	$on{$_}++ for split /\n/, $n->cli('EVAL',
		"local r = {} for _, k in ipairs(redis.call('KEYS', ARGV[1])) do if redis.call('PTTL', k) > 0 then r[#r + 1] = k end end return r",
		'0', 'redlock:lock:kb:*');
}
is(scalar(grep { $on{$_} == 3 } keys %on), 50,
	'and each is held on a majority: the three nodes that answer');
ok((grep { /EVAL extend_many (\d+)/ && $1 > 1 } $slow->requests),
	'extended several at a time');

# each lease of a batch is decided on its own: one taken away is lost alone
$_->cli('DEL', 'redlock:lock:kb:7') for @r5[0 .. 2];
ok(becomes_lost($k, 'kb:7'), 'a lease taken away from the nodes is marked lost');
is($k->query_safe($kb_valid), '49', 'while the 49 others of its batches stay valid');
$r5[3]->resume;
$k->query('SELECT redlock_unlock_all()');
$k->quit;
$kb->stop;
$slow->stop;

# --- without shared_preload_libraries: a clear error, leases still work
my $plain = PostgreSQL::Test::Cluster->new('nopreload');
$plain->init;
$plain->append_conf('postgresql.conf', "redlock.nodes = '$nodes'\n");
$plain->start;
$plain->safe_psql('postgres', 'CREATE EXTENSION redlock');
($rc, $out, $err) = $plain->psql('postgres', 'SELECT * FROM redlock_locks');
like($err, qr/the redlock lease table is not available/, 'redlock_locks without preload: a clear error');
($rc, $out, $err) = $plain->psql('postgres', "SELECT redlock_lock('np:a', 1000, keep_alive => true)");
like($err, qr/keep_alive needs redlock in shared_preload_libraries/, 'keep_alive without preload: a clear error');
like($plain->safe_psql('postgres', "SELECT redlock_lock('np:a', 1000)"), qr/^\d+$/,
	'leases work without preload');
$plain->stop;

$pg->stop;
done_testing();
