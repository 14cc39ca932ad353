# The paths a lease can end on besides a clean unlock, with real Redis nodes:
# a release interrupted by statement_timeout and caught, a commit while every
# node hangs, a commit that cannot open a file, DISCARD ALL, and the
# messages a user sees when nodes fail.
use strict;
use warnings FATAL => 'all';

use IO::Socket::INET;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedlockTest;
use Test::More;
use Time::HiRes qw(time usleep);

my @redis = redis_nodes(3);
my $pg = redlock_cluster('lifecycle', nodes => \@redis,
	conf => "redlock.retry_delay = 20\nredlock.retry_jitter = 10\nrestart_after_crash = on\n");
my $pm_start = $pg->safe_psql('postgres', 'SELECT pg_postmaster_start_time()');

sub wait_no_keys
{
	my ($pattern) = @_;
	return no_keys($pattern, @redis);
}

# --- 1. a release interrupted by statement_timeout and caught in PL/pgSQL:
# the lease must not come back as held with its old token
my $s1 = $pg->background_psql('postgres', on_error_stop => 0);
$s1->query_safe('BEGIN');
my $t1 = $s1->query_safe("SELECT redlock_lock('ph:x', 60000)");
like($t1, qr/^\d+$/, 'first session got a token');
$_->pause for @redis;
$s1->query_safe("SET LOCAL redlock.node_timeout = '10s'");
$s1->query_safe("SET LOCAL statement_timeout = '300ms'");
my $caught = $s1->query(
	"DO \$\$ BEGIN PERFORM redlock_unlock('ph:x'); "
	  . "EXCEPTION WHEN query_canceled THEN RAISE NOTICE 'release interrupted'; END \$\$");
like($s1->{stderr}, qr/release interrupted/, 'the unlock was interrupted and the error caught');
$s1->{stderr} = '';
$s1->query_safe("SET LOCAL statement_timeout = 0");
is($s1->query_safe("SELECT count(*) FROM redlock_leases"), '0',
	'redlock_leases no longer shows the lease whose release was started');
$_->resume for @redis;
ok(wait_no_keys('ph:x'), 'the interrupted release reached the nodes when they resumed');

my $t2 = $pg->safe_psql('postgres',
	"SELECT redlock_lock('ph:x', 60000) AS t \\gset\nSELECT redlock_unlock('ph:x') \\g /dev/null\nSELECT :t");
cmp_ok($t2, '>', $t1, 'another session was granted the resource with a newer token');
my $t3 = $s1->query_safe("SELECT redlock_lock('ph:x', 60000)");
cmp_ok($t3, '>', $t2,
	'taking it again in the first transaction asks the nodes and gets a newer token');
$s1->query_safe('COMMIT');
$s1->query_safe("SELECT redlock_unlock('ph:x')");
ok(wait_no_keys('ph:x'), 'and it is released normally');

# --- 2. commit time does not grow with the number of leases: 5120
# transaction leases (20 release commands of 256), then every node hangs on
# connect (a listener whose accept queue is full).  One connect attempt per
# node for the whole commit: one connect_timeout, 3 s; two in a row would be
# 6 s, one per command 60 s.
my $nleases = 5120;
my $connect_timeout = 3;
my $s2 = $pg->background_psql('postgres', on_error_stop => 0);
$s2->query_safe("SET redlock.connect_timeout = '${connect_timeout}s'; SET redlock.node_timeout = '100ms'");
$s2->query_safe('BEGIN');
is($s2->query_safe(
		"SELECT count(redlock_xact_lock('many:' || g, 60000)) FROM generate_series(1, $nleases) g"),
	$nleases, "$nleases transaction leases taken");
my @blackholes;
for my $r (@redis)
{
	$r->kill9;
	my $listen;
	for (1 .. 100)
	{
		$listen = IO::Socket::INET->new(
			LocalAddr => '127.0.0.1',
			LocalPort => $r->port,
			Listen => 1,
			ReuseAddr => 1);
		last if $listen;
		usleep(20_000);
	}
	die "could not listen on ${\ $r->port }: $!" unless $listen;
	# fill the accept queue (backlog 1): further connects hang in SYN-SENT
	my @fill;
	for (1 .. 8)
	{
		my $c = IO::Socket::INET->new(
			PeerAddr => '127.0.0.1',
			PeerPort => $r->port,
			Blocking => 0);
		push @fill, $c if $c;
	}
	push @blackholes, [ $listen, @fill ];
}
# a failed probe in a subtransaction finds the connections dead (their
# connects then hang until connect_timeout), so COMMIT finds every node
# closed and out of backoff: it must connect, and every connect hangs
$s2->query('SAVEPOINT probe');
$s2->query("SELECT redlock_try_lock('probe', 60000)");
like($s2->{stderr}, qr/connect timed out after ${connect_timeout}000 ms/, 'connects to the nodes now hang');
$s2->{stderr} = '';
$s2->query_safe('ROLLBACK TO SAVEPOINT probe');
# past any reconnect backoff (at most 2 s), so that COMMIT connects
usleep(2_200_000);
my $t0 = time;
$s2->query_safe('COMMIT');
my $took = time - $t0;
note "COMMIT with $nleases leases and every node hanging took ${took}s";
# It must have waited for the hanging connects (at least about one
# connect_timeout: had it not connected, this check would prove nothing),
# and not for two in a row: the bound leaves a loaded machine 3 s over what
# the commit needs, and fails two connects in a row as well as one per
# command.
cmp_ok($took, '>', 0.9 * $connect_timeout, 'COMMIT waited for the hanging connects');
cmp_ok($took, '<', 2 * $connect_timeout,
	"COMMIT waited one connect_timeout (${connect_timeout} s), not two in a row nor one per command of 256 leases");
is($s2->query_safe("SELECT count(*) FROM redlock_leases"), '0', 'no lease is left after COMMIT');
like(slurp_file($pg->logfile), qr/release of $nleases leases was not confirmed by a majority of Redis nodes/,
	'the unconfirmed release is logged once, with the count');
$s2->quit;
@blackholes = ();
$_->start for @redis;

# --- 3. the commit path raises nothing, even when no file can be opened: a
# node's connection dies, the backend may open no new file descriptor
# (RLIMIT_NOFILE lowered to 3: a new descriptor takes the lowest free
# number, so a limit just below what is open would still let the socket
# take the number the dead connection frees), and COMMIT releases.
SKIP:
{
	skip 'prlimit not available', 6 if system('prlimit --version > /dev/null 2>&1') != 0;
	my $s3 = $pg->background_psql('postgres', on_error_stop => 0);
	my $pid = $s3->query_safe('SELECT pg_backend_pid()');
	$s3->query_safe('BEGIN');
	like($s3->query_safe("SELECT redlock_xact_lock('nofile:a', 60000)"),
		qr/^\d+$/, 'a transaction lease before the file limit');
	$redis[0]->restart;    # its connection to this backend is now dead
	# the others answer late, so the release round has to wait for them
	$redis[1]->pause;
	$redis[2]->pause;
	my $logpos = -s $pg->logfile;
	system("prlimit --pid $pid --nofile=3:") == 0 or die 'prlimit failed';
	$s3->{stderr} = '';
	$s3->query('COMMIT');
	my $commit_err = $s3->{stderr};
	system("prlimit --pid $pid --nofile=1024:") == 0 or die 'prlimit failed';
	$redis[1]->resume;
	$redis[2]->resume;
	unlike($commit_err, qr/ERROR|PANIC|FATAL/, 'COMMIT under the file limit raised nothing')
	  or diag $commit_err;
	like(slurp_file($pg->logfile, $logpos),
		qr/\Q${\ $redis[0]->addr }\E.*could not create socket: Too many open files/,
		'... where the socket to the restarted node could not be opened');
	is($s3->query_safe("SELECT 1; SELECT count(*) FROM redlock_leases"),
		"1\n0", 'the backend survived the commit, holding nothing');
	is($pg->safe_psql('postgres', 'SELECT pg_postmaster_start_time()'),
		$pm_start, 'no PANIC: the postmaster did not restart');
	ok(wait_no_keys('nofile:*'), 'the lease committed under the file limit is released');
	$s3->quit;
}

# --- 4. DISCARD ALL releases session leases, as it releases advisory locks
my $s4 = $pg->background_psql('postgres', on_error_stop => 0);
my $before = $s4->query_safe("SELECT redlock_lock('pool:a', 60000)");
# its own transaction: gone with the statement, and a WARNING says so
my ($o4, $e4) = run_in($s4, "SELECT redlock_xact_lock('pool:b', 60000)");
like($e4, qr/WARNING:  redlock_xact_lock\(\) can only be used in transaction blocks/,
	'a transaction lease outside a transaction block: a WARNING');
$s4->query_safe('DISCARD ALL');
is($s4->query_safe('SELECT count(*) FROM redlock_leases'), '0',
	'DISCARD ALL: the session holds no lease');
ok(wait_no_keys('pool:a'), 'DISCARD ALL released the session lease on the nodes');
my $after = $pg->safe_psql('postgres',
	"SELECT redlock_try_lock('pool:a') AS t \\gset\nSELECT redlock_unlock('pool:a') \\g /dev/null\nSELECT :t");
cmp_ok($after, '>', $before, 'the next client of the resource gets a newer token');
$s4->query('BEGIN; DISCARD ALL');
like($s4->{stderr}, qr/DISCARD ALL cannot run inside a transaction block/,
	'DISCARD ALL in a transaction block is refused as usual');
$s4->{stderr} = '';
$s4->query_safe('ROLLBACK');
$s4->quit;

# --- 5. messages that say what happened
my $s5 = $pg->background_psql('postgres', on_error_stop => 0);
$s5->query_safe("SET redlock.node_timeout = '200ms'");
$s5->query_safe("SELECT redlock_lock('msg:a', 60000)");
$s5->query_safe("SELECT redlock_lock('msg:b', 60000)");
$redis[1]->pause;
$redis[2]->pause;
$s5->query("SELECT redlock_extend('msg:a', 60000)");
like($s5->{stderr}, qr/could not extend lease on "msg:a": fewer than a majority/,
	'a failed extend says it could not extend, not acquire');
like($s5->{stderr}, qr/2 of 3 nodes failed; a majority is 2/, 'and counts the failed nodes');
$s5->{stderr} = '';

# the stalled nodes still owe a reply: the next call must not claim they
# timed out after node_timeout when it did not wait that long
$t0 = time;
$s5->query("SELECT redlock_try_lock('msg:c', 60000)");
$took = time - $t0;
like($s5->{stderr}, qr/no reply for \d+ ms; it still owed \d+ earlier repl/,
	'a node with a backlog is reported as silent since its last reply');
$s5->{stderr} = '';

# unlock with a majority gone: true, with a warning
my $unlocked = $s5->query("SELECT redlock_unlock('msg:b')");
is($unlocked, 't', 'unlock with a majority stalled still drops the hold');
like($s5->{stderr}, qr/release of lease on "msg:b" was not confirmed by a majority of Redis nodes/,
	'and warns that the release was not confirmed');
like($s5->{stderr}, qr/its TTL runs out/, 'saying the lease expires by TTL');
$s5->{stderr} = '';
$redis[1]->resume;
$redis[2]->resume;

# nodes in backoff: the detail says they were not asked, and why
my $holder = $pg->background_psql('postgres', on_error_stop => 0);
$holder->query_safe("SELECT redlock_lock('msg:f', 60000)");
$redis[2]->kill9;
$s5->query_safe("SELECT redlock_try_lock('msg:d')");    # node 2 fails: backoff
$s5->query("SET lock_timeout = '250ms'; SELECT redlock_lock('msg:f')");
like($s5->{stderr}, qr/could not obtain lease on "msg:f" within lock_timeout/,
	'lock_timeout ends the wait');
like($s5->{stderr}, qr/not asked: it failed \d+ ms ago \(could not connect: Connection refused\), next attempt in \d+ ms/,
	'a node in backoff is reported as not asked, with its last failure');
$s5->{stderr} = '';
$s5->quit;
$holder->quit;
$redis[2]->start;

nothing_crashed($pg, $pm_start);
$pg->stop;
done_testing();
