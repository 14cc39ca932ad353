# A stall of the dispatcher worker (src/workers/dispatcher.c) under load:
# five 200 ms SIGSTOPs of it while 16 pgbench sessions lock and unlock
# their own resources through it (prepared statements, lock and unlock as
# two statements, as drivers send them), with a node_timeout of 50 ms (a
# quarter of each stall; the default is 250 ms).  Calls get slower; none fails: no error, no lock refused (each
# session's resource is its own, so a refusal is a lock of its own left
# behind), no lock left on the nodes once the load stops, and no healthy
# node blamed for the worker's stall in the server log.  Then a stall of the
# worker between queueing a batch and writing it (a debug delay there; the
# nodes' clocks start at the queueing: it failed every call once).  Then a
# node paused under load: its connection, far behind, is asked nothing new
# rather than failed and replaced.  Then the worker
# stopped with the nodes it waits for (as in a stall of the machine): they
# are judged on the time it ran, and named beside it when they stay silent.
use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedlockTest;
use Test::More;
use Time::HiRes qw(usleep);
use IPC::Run;

my @redis = redis_nodes(5);
my $pg = redlock_cluster('stalls', nodes => \@redis, preload => 1,
	conf => "max_connections = 40\nredlock.node_timeout = '50ms'\n");
my $pm_start = $pg->safe_psql('postgres', 'SELECT pg_postmaster_start_time()');
ok(wait_for(sub { worker_pid($pg, 'dispatcher') ne '' }), 'the dispatcher runs');
is($pg->safe_psql('postgres', 'SHOW redlock.node_timeout'), '50ms',
	'node_timeout is 50 ms, a quarter of each stall');

# a refusal of a session's own resource is an error, which ends its client
$pg->safe_psql('postgres', q{
CREATE FUNCTION t_lock(c int, ttl int DEFAULT 5000) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    tok bigint := redlock_try_lock('own:' || c, ttl);
BEGIN
    IF tok IS NULL THEN
        RAISE EXCEPTION 'session % was refused its own resource', c;
    END IF;
    RETURN tok;
END $$;
});
my $script = $pg->basedir . '/032_cycle.sql';
append_to_file($script, q{
SELECT t_lock(:client_id);
SELECT redlock_unlock('own:' || :client_id);
});


my $log_from = -s $pg->logfile;
my ($sh0, $own0) = dispatcher_rounds($pg);
my ($out, $err) = ('', '');
my $bench = IPC::Run::start(
	[ 'pgbench', '-n', '-M', 'prepared', '-c', '16', '-j', '2', '-T', '8',
		'-f', $script, '-h', $pg->host, '-p', $pg->port, 'postgres' ],
	'<', \'', '>', \$out, '2>', \$err,
	IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default));

# the load under way (through the dispatcher), then five stalls of it
ok(wait_for(sub { my ($sh) = dispatcher_rounds($pg); $sh - $sh0 > 200 }),
	'the 16 sessions\' calls go through the dispatcher');
my $disp = worker_pid($pg, 'dispatcher');
for my $i (1 .. 5)
{
	kill 'STOP', $disp;
	usleep(200_000);
	kill 'CONT', $disp;
	usleep(400_000);
}
ok($bench->finish, 'pgbench ran to its end: no session failed a call')
  or diag "pgbench: $err";
like($out, qr/processed: [1-9]/, 'the sessions made calls');
unlike($err, qr/error|abort/i, 'no call failed (no lock refused, no error)');
my ($sh1, $own1) = dispatcher_rounds($pg);
note 'rounds: ' . ($sh1 - $sh0) . ' shared, ' . ($own1 - $own0) . ' own';
ok(no_keys('*', @redis), 'no lock is left on the nodes');
my $log = substr(slurp_file($pg->logfile), $log_from);
unlike($log, qr/Redis node \S+ is failing/,
	'no node was blamed in the log for the worker\'s stalls');
is(worker_pid($pg, 'dispatcher'), $disp, 'the same dispatcher ran throughout');

# --- a stall of the worker between queueing a batch on its connections and
# writing it (redlock.debug_dispatch_delay: 200 ms there, four times the
# node_timeout): a node's clock starts when the command is queued, so the
# stall must be counted from there, or the nodes are judged late the moment
# the command is written.  Each call is granted and released.
$pg->append_conf('postgresql.conf',
	"redlock.shared_connections = always\nredlock.debug_dispatch_delay = '200ms'\n");
my $s = long_session($pg);
reload_seen($pg, $s);
usleep(300_000);	# the worker, woken by SIGHUP, reads it too
my ($sh2) = dispatcher_rounds($pg);
for my $i (1 .. 3)
{
	my ($out, $err) = run_in($s,
		"SELECT redlock_lock('delayed', 5000) > 0, redlock_unlock('delayed')");
	is($err, '', "a stall before the write, call $i: no error");
	is($out, 't|t', "call $i: granted and released");
}
my ($sh3) = dispatcher_rounds($pg);
cmp_ok($sh3 - $sh2, '>=', 6, 'the calls went through the worker');
ok(no_keys('*', @redis), 'no lock is left on the nodes');

# --- a node kept off the CPU while the load goes on: the worker's
# connection to it owes more and more replies.  Owing three quarters of
# what it may (redlock.debug_owed_limit, 64 here, for a test of it), it is
# asked nothing new, and kept: failing it ("too many requests queued on a
# stalled connection") and reconnecting would let a new connection's
# commands reach the node before the old one's (a lock applied after its
# release, as seen on an overloaded machine: sessions refused their own
# resource).  Node 5 paused for 1.5 s (node_timeout 200 ms: the silence
# limit is 2 s) under 8 sessions: no call fails, the node is not blamed,
# nothing is left on the nodes once it runs again.  The releases sent
# while it was behind reach it on that connection, behind its backlog,
# however many: the leases here have a TTL of 60 s, and no lock may be
# left 10 s after the load (more than 32 of them used to be kept for the
# node and the oldest dropped, the releases of the last locks it had
# been sent: those locks stayed to their TTL).
$pg->append_conf('postgresql.conf',
	"redlock.debug_dispatch_delay = 0\nredlock.debug_owed_limit = 64\nredlock.node_timeout = '200ms'\n");
reload_seen($pg, $s);
usleep(300_000);	# the worker, woken by SIGHUP, reads it too
$log_from = -s $pg->logfile;
my $script_long = $pg->basedir . '/032_cycle_long.sql';
append_to_file($script_long, q{
SELECT t_lock(:client_id, 60000);
SELECT redlock_unlock('own:' || :client_id);
});
($out, $err) = ('', '');
$bench = IPC::Run::start(
	[ 'pgbench', '-n', '-M', 'prepared', '-c', '8', '-j', '2', '-T', '4',
		'-f', $script_long, '-h', $pg->host, '-p', $pg->port, 'postgres' ],
	'<', \'', '>', \$out, '2>', \$err,
	IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default));
usleep(1_000_000);
$redis[4]->pause;
usleep(1_500_000);
$redis[4]->resume;
ok($bench->finish, 'a node paused under load: pgbench ran to its end') or diag "pgbench: $err";
unlike($err, qr/error|abort/i, '... no call failed');
$log = substr(slurp_file($pg->logfile), $log_from);
unlike($log, qr/too many requests queued|Redis node \S+ is failing/,
	'... its connection was not failed, nor the node blamed');
ok(no_keys('*', @redis), '... and nothing is left on the nodes (long before the leases\' TTL)')
  or diag join(' ', map { my $k = keys_on($_, '*'); $k =~ s/\n/ /g; "[$k]" } @redis);

# --- the worker stopped with the nodes it waits for (as in a stall of the
# whole machine): a node is judged on the time the worker ran.  A session
# (always) waits for its lock, which the worker sent and waits for from
# nodes 1-3 (paused; node_timeout 1 s); the worker is stopped for 1.5 s.
# Running again before the nodes (by 100 ms), it gives them what was left
# of their node_timeout: the lock is granted.  Nodes that stay silent are
# judged late after that, their DETAIL naming the stalled worker.
$pg->append_conf('postgresql.conf',
	"redlock.debug_owed_limit = 0\nredlock.node_timeout = '1s'\n");
reload_seen($pg, $s);
usleep(300_000);	# the worker, woken by SIGHUP, reads it too
my $spid = $s->query_safe('SELECT pg_backend_pid()');
for my $case ('nodes back', 'nodes silent')
{
	my $res = $case eq 'nodes back' ? 'stall_back' : 'stall_silent';
	$_->pause for @redis[0 .. 2];
	$s->query_until(qr/asking/, "\\echo asking\nSELECT redlock_lock('$res', 30000);\n");
	ok(wait_for(sub { keys_on($redis[3], $res) ne '' && keys_on($redis[4], $res) ne '' }),
		"$case: the worker sent the lock");
	kill 'STOP', $disp;
	usleep(1_500_000);
	kill 'CONT', $disp;
	if ($case eq 'nodes back')
	{
		usleep(100_000);
		$_->resume for @redis[0 .. 2];
		my ($out, $err) = run_in($s, "SELECT count(*) FROM redlock_leases WHERE resource = '$res'");
		is($err, '', 'the lock call did not fail');
		like($out, qr/\A\d+\n1\z/, 'it was granted: a token, and the lease is held');
		is(key_count($res, @redis), '1 1 1 1 1', 'on every node');
		run_in($s, "SELECT redlock_unlock('$res')");
	}
	else
	{
		my ($out, $err) = run_in($s, "SELECT 'after'");
		like($err, qr/could not acquire lease on "$res"/, 'the lock call fails');
		like($err,
			qr/(?:no reply for|timed out after) \d+ ms[^\n]*\(not counting \d+ ms when the redlock dispatcher was not running\)/,
			'its DETAIL names the stalled dispatcher beside the silent nodes');
		note $err;
		$_->resume for @redis[0 .. 2];
	}
}
ok(no_keys('*', @redis), 'no lock is left on the nodes');

$s->quit;

nothing_crashed($pg, $pm_start);
$pg->stop;
done_testing();
