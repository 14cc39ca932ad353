# A released lease handed straight to the next waiter of this server: the
# holder's release round takes the lock for the sleeping waiter, so the
# handoff is one round on the nodes, not a release and then an acquire.
# Also the paths where it goes wrong: the waiter gives up while the holder
# hands it the lease, the holder is interrupted in the middle, and several
# leases end at one COMMIT.  Real Redis nodes, a real preloaded cluster.
use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedlockTest;
use Test::More;
use Time::HiRes qw(time usleep);

my @redis = redis_nodes(3);
# a retry delay of 60 s (the most it can be): a waiter granted within half
# of that was not polling
# node_timeout 2 s: the rounds counted below must not lose a node that a
# busy machine kept off the CPU for the default 50 ms (a round that loses
# one resends to it); the sections that stop nodes set their own
my $pg = redlock_cluster('handoff', nodes => \@redis, preload => 1,
	conf => "redlock.retry_delay = '60s'\nredlock.retry_jitter = 0\nredlock.node_timeout = '2s'\n");
my $woken_within = 30;

# script calls and publications the nodes have run so far, all together
sub evals { return command_calls('eval', @redis) }
sub publishes { return command_calls('publish', @redis) }

# how many nodes a round may not have waited for: it ends at a majority
my $late = @redis - int(@redis / 2) - 1;

my $h = long_session($pg);
my $hpid = $h->query_safe('SELECT pg_backend_pid()');

# --- unlock: one round hands the lease over
my $t1 = $h->query_safe("SELECT redlock_lock('ho:a', 60000)");
my ($w, $wpid) = start_waiter($pg, 'ho:a');
ok(wait_for(sub { !grep { $_ eq '-' } lock_values('ho:a', @redis) }), 'the holder holds it on every node');
my ($e0, $a0) = (evals(), attempts($pg));
my $t0 = time;
is($h->query_safe("SELECT redlock_unlock('ho:a')"), 't', 'the holder unlocks');
my $tok = $w->query_safe('SELECT :got');
my $took = time - $t0;
cmp_ok($tok, '>', $t1, 'the waiter was granted a newer token');
cmp_ok($took, '<', $woken_within, "at the release (${\ sprintf '%.2f', $took }s; retry_delay is 60 s)");
wait_for(sub { evals() - $e0 >= @redis });    # the round ended at a majority
usleep(200_000);
# plus, on the nodes it had not heard from when it ended, a must-deliver
# release of the holder's own value (a no-op there once the handoff ran)
cmp_ok(evals() - $e0, '<=', @redis + $late,
	'the release and the grant were one round: one EVAL per node (and a release where it did not wait)');
is(attempts($pg) - $a0, 0, 'the waiter made no attempt of its own');
is(join(' ', map { /:(\d+)$/ ? $1 : $_ } lock_values('ho:a', @redis)), join(' ', ($wpid) x @redis),
	'every node holds the lock for the waiter');
is($pg->safe_psql('postgres',
		"SELECT pid = $wpid AND granted AND scope = 'session' FROM redlock_locks WHERE resource = 'ho:a'"),
	't', 'redlock_locks shows the waiter as the holder');
is($w->query_safe("SELECT validity_ms BETWEEN 50000 AND 60000 FROM redlock_leases WHERE resource = 'ho:a'"),
	't', "its validity counts its own TTL from the holder's round");
is($w->query_safe("SELECT redlock_unlock('ho:a')"), 't', 'the new holder unlocks');
ok(wait_for(sub { join(' ', lock_values('ho:a', @redis)) eq join(' ', ('-') x @redis) }),
	'and nothing is left on the nodes');
$w->quit;

# --- COMMIT and ROLLBACK of transaction leases, and the holder's exit
for my $end ('COMMIT', 'ROLLBACK')
{
	$t1 = $h->query_safe("BEGIN; SELECT redlock_xact_lock('ho:x', 60000)");
	($w, $wpid) = start_waiter($pg, 'ho:x');
	$a0 = attempts($pg);
	$h->query_safe($end);
	$tok = $w->query_safe('SELECT :got');
	cmp_ok($tok, '>', $t1, "$end hands the lease over, with a newer token");
	is(attempts($pg) - $a0, 0, "$end: the waiter made no attempt of its own");
	$w->query_safe("SELECT redlock_unlock('ho:x')");
	$w->quit;
}

$t1 = $h->query_safe("SELECT redlock_lock('ho:e', 60000)");
($w, $wpid) = start_waiter($pg, 'ho:e');
$a0 = attempts($pg);
$pg->safe_psql('postgres', "SELECT pg_terminate_backend($hpid)");
$tok = $w->query_safe('SELECT :got');
cmp_ok($tok, '>', $t1, "the holder's exit hands the lease over");
is(attempts($pg) - $a0, 0, "exit: the waiter made no attempt of its own");
$w->query_safe("SELECT redlock_unlock('ho:e')");
$w->quit;
eval { $h->quit };
$h = long_session($pg);
$hpid = $h->query_safe('SELECT pg_backend_pid()');

# --- one COMMIT ends three leases, two of them awaited
$h->query_safe("BEGIN; SELECT count(redlock_xact_lock('ho:m' || g, 60000)) FROM generate_series(1, 3) g");
my ($w1) = start_waiter($pg, 'ho:m1');
my ($w2) = start_waiter($pg, 'ho:m2');
$h->query_safe('COMMIT');
like($w1->query_safe('SELECT :got'), qr/^\d+$/, 'COMMIT of three leases: the first waiter is granted');
like($w2->query_safe('SELECT :got'), qr/^\d+$/, 'and the second');
$w1->query_safe('SELECT redlock_unlock_all()');
$w2->query_safe('SELECT redlock_unlock_all()');
ok(wait_for(sub { join(' ', map { lock_values("ho:m$_", @redis) } 1 .. 3) eq join(' ', ('-') x (3 * @redis)) }),
	'nothing of the three is left on the nodes');
$w1->quit;
$w2->quit;

# --- a refused attempt withdraws only where it may have set something, and
# announces nothing (nobody waits for a lock that was never held)
$h->query_safe("SELECT redlock_lock('ho:r', 60000)");
# the grant needs a majority: wait until the last node has run it too
ok(wait_for(sub { !grep { $_ eq '-' } lock_values('ho:r', @redis) }), 'the holder holds it on every node');
($e0, my $p0) = (evals(), publishes());
is($pg->safe_psql('postgres', "SELECT redlock_try_lock('ho:r') IS NULL"), 't', 'a second session is refused');
# the round ends once a majority refused: the withdrawal still goes to the
# nodes that had not answered by then (with 3 nodes, at most one), never
# to those that refused
usleep(200_000);
# (a new session: each of its new connections first runs the connect
# script, one EVAL more per node)
cmp_ok(evals() - $e0, '<=', 2 * @redis + $late,
	'refused by every node: one EVAL per node, no withdrawal where it was refused');
$redis[0]->cli('DEL', 'redlock:lock:ho:r');    # as if the holder's grant never reached it
$e0 = evals();
is($pg->safe_psql('postgres', "SELECT redlock_try_lock('ho:r') IS NULL"), 't', 'refused again');
ok(wait_for(sub { $redis[0]->cli('EXISTS', 'redlock:lock:ho:r') eq '0' }),
	'granted by one node only: the withdrawal reached it');
usleep(200_000);
cmp_ok(evals() - $e0, '<=', 2 * @redis + 1 + $late, 'and no node that refused');
is(publishes() - $p0, 0, 'and no refused attempt published anything');
$h->query_safe("SELECT redlock_unlock('ho:r')");

# --- the waiter gives up while the holder hands it the lease: two of the
# three nodes are stopped, so the holder's round waits for its node_timeout
$h->query_safe("SELECT redlock_lock('ho:g', 60000)");
($w, $wpid) = start_waiter($pg, 'ho:g');
$_->pause for @redis[1, 2];
$h->query_safe("SET redlock.node_timeout = '3s'");
$h->query_until(qr/unlocking/, "\\echo unlocking\nSELECT redlock_unlock('ho:g');\n");
# the holder's handoff reached the running node: the lock is the waiter's there
ok(wait_for(sub { (lock_values('ho:g', $redis[0]))[0] =~ /:$wpid$/ }),
	'the handoff set the waiter\'s value on the running node');
$pg->safe_psql('postgres', "SELECT pg_cancel_backend($wpid)");
$w->query('SELECT 1');
like($w->{stderr}, qr/canceling statement due to user request/, 'the waiter was cancelled meanwhile');
$_->resume for @redis[1, 2];
$h->query('SELECT 1');    # the unlock has finished
ok(wait_for(sub { join(' ', lock_values('ho:g', @redis)) eq join(' ', ('-') x @redis) }),
	'nothing of the handoff is left on any node');
like($pg->safe_psql('postgres', "SELECT redlock_try_lock('ho:g', 60000)"), qr/^\d+$/,
	'the next session takes the lease at once');
$w->quit;

# --- the holder is interrupted in the middle of the handoff: the waiter
# goes on and takes the lease itself
$t1 = $h->query_safe("RESET redlock.node_timeout; SELECT redlock_lock('ho:i', 60000)");
($w, $wpid) = start_waiter($pg, 'ho:i', set => "SET redlock.node_timeout = '10s'");
$_->pause for @redis[1, 2];
$h->query_safe("SET redlock.node_timeout = '10s'; SET statement_timeout = '5s'");
$h->query_until(qr/unlocking/, "\\echo unlocking\nSELECT redlock_unlock('ho:i');\n");
ok(wait_for(sub { (lock_values('ho:i', $redis[0]))[0] =~ /:$wpid$/ }),
	'the holder\'s handoff reached the running node');
$h->query('SELECT 1');    # returns once the unlock has ended
like($h->{stderr}, qr/canceling statement due to statement timeout/,
	'then the holder\'s unlock was interrupted by statement_timeout');
$h->query('RESET statement_timeout; RESET redlock.node_timeout');
$_->resume for @redis[1, 2];
$tok = $w->query_safe('SELECT :got');
cmp_ok($tok, '>', $t1, 'the waiter took the lease itself, with a newer token');
ok(wait_for(sub { join(' ', map { /:(\d+)$/ ? $1 : $_ } lock_values('ho:i', @redis)) eq join(' ', ($wpid) x @redis) }),
	'every node holds it for the waiter');
$w->query_safe("SELECT redlock_unlock('ho:i')");
ok(wait_for(sub { join(' ', lock_values('ho:i', @redis)) eq join(' ', ('-') x @redis) }),
	'and nothing is left after its unlock');
is($h->query("SELECT count(*) FROM redlock_leases"), "0", "the holder holds nothing");
$w->quit;

# --- a waiter that talks to other nodes (here: the same nodes in another
# order) is not handed the lease: the holder's votes would not be its own.
# It asks the nodes itself.
my $permuted = join(',', map { $_->addr } reverse @redis);
$h->quit;    # a new holder session: this one's last error stays in its stderr
$h = long_session($pg);
$h->query_safe("SET redlock.nodes = '$permuted'");
$t1 = $h->query_safe("SELECT redlock_lock('ho:n', 60000)");
($w, $wpid) = start_waiter($pg, 'ho:n');
$a0 = attempts($pg);
$h->query_safe("SELECT redlock_unlock('ho:n')");
$tok = $w->query_safe('SELECT :got');
cmp_ok($tok, '>', $t1, 'another node list: the waiter still gets the lease, with a newer token');
is(attempts($pg) - $a0, 1, 'by an attempt of its own, not a handoff');
$w->query_safe("SELECT redlock_unlock('ho:n')");
$w->quit;
$h->query_safe('RESET redlock.nodes');

# --- the waiter's own limit holds while a holder hands it the lease: two
# of three nodes stopped, the holder's round waits up to its 60 s
# node_timeout, the waiter's wait_ms is 3 s: the waiter is done while the
# holder's unlock still runs.  The waiter catches the error
# in a PL/pgSQL block (a subtransaction abort) and its session goes on.
$h->query_safe("SELECT redlock_lock('ho:t', 60000)");
$w = $pg->background_psql('postgres', on_error_stop => 0);
$wpid = $w->query_safe('SELECT pg_backend_pid()');
$w->query_until(qr/waiting/,
	"\\echo waiting\nDO \$\$ BEGIN PERFORM redlock_lock('ho:t', 60000, wait_ms => 3000); "
	  . "EXCEPTION WHEN lock_not_available THEN RAISE NOTICE 'gave up: %', SQLERRM; END \$\$;\n");
asleep($pg, $wpid, 'lease') or die 'the waiter on ho:t is not asleep';
$_->pause for @redis[1, 2];
$h->query_safe("SET redlock.node_timeout = '60s'");
my $hpid_t = $h->query_safe('SELECT pg_backend_pid()');
$t0 = time;
$h->query_until(qr/unlocking/, "\\echo unlocking\nSELECT redlock_unlock('ho:t');\n");
ok(wait_for(sub { (lock_values('ho:t', $redis[0]))[0] =~ /:$wpid$/ }), 'the holder is handing the lease over');
$w->query('SELECT 1');
$took = time - $t0;
like($w->{stderr}, qr/gave up: could not obtain lease on "ho:t" within wait_ms/,
	'the waiter gives up at its wait_ms (caught in a PL/pgSQL block)');
is($pg->safe_psql('postgres', "SELECT state FROM pg_stat_activity WHERE pid = $hpid_t"), 'active',
	"without waiting for the holder's round, still under way (${\ sprintf '%.2f', $took }s; node_timeout 60 s)");
$_->resume for @redis[1, 2];
$h->query('RESET redlock.node_timeout');
ok(wait_for(sub { join(' ', lock_values('ho:t', @redis)) eq join(' ', ('-') x @redis) }),
	'nothing of the handoff is left on any node');
$w->{stderr} = '';
is($w->query('SELECT count(*) FROM redlock_leases'), '0', 'the waiter\'s session holds nothing');
like($w->query("SELECT redlock_try_lock('ho:t', 60000)"), qr/^\d+$/, 'and takes the lease when it is free');
$w->quit;

$h->quit;
$pg->stop;
done_testing();

