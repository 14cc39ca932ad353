# A server's connections to each Redis node are bounded
# (redlock.max_connections_per_node, 16 by default: the three workers' and
# at most 13 backends' own), whatever the number of backends:
# - 48 pgbench sessions queueing on one hot resource (lock with wait_ms,
#   unlock: two prepared statements), then 48 on resources of their own:
#   no node ever sees more than 16 clients of the server, and no call fails
#   (backends without connections of their own go through the dispatcher);
# - 20 idle sessions that each made a call: still at most 16; with
#   redlock.idle_connection_timeout lowered, the idle ones close theirs, and
#   only the workers' remain;
# - a call the dispatcher cannot take (redlock_nodes, a probe) while every
#   permit is held by an idle session: it waits for one, which an idle
#   holder gives back at once for it; redlock_dispatcher counts the wait;
# - with room for one backend, held by a call in progress (three nodes
#   paused, node_timeout 8 s), such a call fails after its wait with
#   53300, saying why; its session, exiting with a lease, releases it and
#   gives its place back.
use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedlockTest;
use Test::More;
use Time::HiRes qw(usleep time);
use IPC::Run;

my @redis = redis_nodes(5);
my $pg = redlock_cluster('bound', nodes => \@redis, preload => 1,
	conf => "max_connections = 80\n");
my $pm_start = $pg->safe_psql('postgres', 'SELECT pg_postmaster_start_time()');
is($pg->safe_psql('postgres', 'SHOW redlock.max_connections_per_node'), '16',
	'the bound is 16 connections per node by default');
is($pg->safe_psql('postgres',
		'SELECT backends_connected_max FROM redlock_dispatcher'), '13',
	'... 13 of them for backends (the three workers have one each)');

# clients of the server on node $n now (the sampling client not counted)
sub clients
{
	my ($n) = @_;
	my ($c) = $n->cli('INFO', 'clients') =~ /connected_clients:(\d+)/;
	return defined $c ? $c - 1 : -1;
}

# pgbench with $script for $secs seconds, $c clients; the most clients any
# node had meanwhile (sampled every 50 ms), and pgbench's output
sub load
{
	my ($script, $c, $secs) = @_;
	my $file = $pg->basedir . "/040_$c.sql";
	unlink $file;
	append_to_file($file, $script);
	my ($out, $err) = ('', '');
	my $bench = IPC::Run::start(
		[ 'pgbench', '-n', '-M', 'prepared', '-c', $c, '-j', '2', '-T', $secs,
			'-f', $file, '-h', $pg->host, '-p', $pg->port, 'postgres' ],
		'<', \'', '>', \$out, '2>', \$err,
		IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default));
	my $most = 0;
	while ($bench->pumpable)
	{
		for my $n (@redis)
		{
			my $k = clients($n);
			$most = $k if $k > $most;
		}
		usleep(50_000);
		$bench->pump_nb;
	}
	my $ok = $bench->finish;
	return ($most, $ok, $out, $err);
}

my ($most, $ok, $out, $err) = load(q{
SELECT redlock_lock('hot', 5000, wait_ms => 20000);
SELECT redlock_unlock('hot');
}, 48, 5);
ok($ok, '48 sessions on one hot resource: pgbench ran to its end') or diag $err;
like($out, qr/processed: [1-9]/, '... the sessions made calls');
unlike($err, qr/error|abort/i, '... and no call failed');
cmp_ok($most, '<=', 16, "... no node had more than 16 clients of the server ($most)");
cmp_ok($most, '>', 3, '... (the sampling saw the backends\' own too)');

($most, $ok, $out, $err) = load(q{
SELECT redlock_lock('own:' || :client_id, 5000);
SELECT redlock_unlock('own:' || :client_id);
}, 48, 5);
ok($ok, '48 sessions on resources of their own: pgbench ran to its end') or diag $err;
unlike($err, qr/error|abort/i, '... and no call failed');
cmp_ok($most, '<=', 16, "... no node had more than 16 clients of the server ($most)");
ok(no_keys('*', @redis), 'no lock is left on the nodes');

# --- idle sessions that each made a call
my @idle;
for my $i (1 .. 20)
{
	my $s = long_session($pg);
	$s->query_safe("SELECT redlock_lock('idle:$i', 5000) > 0, redlock_unlock('idle:$i')");
	push @idle, $s;
}
my $now = 0;
$now = ($now > $_ ? $now : $_) for map { clients($_) } @redis;
cmp_ok($now, '<=', 16, "20 idle sessions that made calls: at most 16 clients on any node ($now)");
my $held = $pg->safe_psql('postgres', 'SELECT backends_connected FROM redlock_dispatcher');
cmp_ok($held, '<=', 13, "redlock_dispatcher: $held backends hold connections of their own");

# --- a probe waits for a permit, which an idle holder gives back for it
my $waits0 = $pg->safe_psql('postgres', 'SELECT connection_waits FROM redlock_dispatcher');
my @more;
for my $i (1 .. 13)
{
	my $s = long_session($pg);
	$s->query_safe("SELECT redlock_lock('fill:$i', 5000) > 0, redlock_unlock('fill:$i')");
	push @more, $s;
	last if $pg->safe_psql('postgres', 'SELECT backends_connected FROM redlock_dispatcher') >= 13;
}
is($pg->safe_psql('postgres', 'SELECT backends_connected FROM redlock_dispatcher'), '13',
	'every permit is held by an idle session');
my $t0 = time;
my ($rc, $probe, $perr) = $pg->psql('postgres',
	'SELECT count(*) FILTER (WHERE reachable) FROM redlock_nodes');
my $took = time - $t0;
is($probe, '5', 'a probe (redlock_nodes) while every permit is held: it waited for one')
  or diag $perr;
note sprintf('the probe took %.2f s', $took);
cmp_ok($pg->safe_psql('postgres', 'SELECT connection_waits FROM redlock_dispatcher'),
	'>', $waits0, 'redlock_dispatcher counted the wait');
is($pg->safe_psql('postgres', 'SELECT connection_waits_failed FROM redlock_dispatcher'), '0',
	'... and no wait failed');
$now = 0;
$now = ($now > $_ ? $now : $_) for map { clients($_) } @redis;
cmp_ok($now, '<=', 16, "still at most 16 clients on any node ($now)");

# --- idle connections close after redlock.idle_connection_timeout
$pg->append_conf('postgresql.conf', "redlock.idle_connection_timeout = '300ms'\n");
$pg->reload;
# each idle backend reads the new setting only with its next statement:
# one statement each, then idle
$_->query_safe('SELECT 1') for @idle, @more;
ok( wait_for(
		sub {
			$pg->safe_psql('postgres', 'SELECT backends_connected FROM redlock_dispatcher') eq '0';
		},
		30),
	'the idle sessions closed their connections and gave their permits back');
ok(wait_for(sub { (grep { clients($_) > 3 } @redis) == 0 }, 30),
	'... only the workers\' connections remain on the nodes');
# a session whose connections were closed while idle calls again: granted
my ($o, $e) = run_in($idle[0], "SELECT redlock_lock('after_idle', 5000) > 0, redlock_unlock('after_idle')");
is($e, '', 'a session whose connections closed while idle calls again: no error');
is($o, 't|t', '... granted and released');
$_->quit for @idle, @more;

# --- room for one backend, held by a call in progress: a probe fails
$pg->append_conf('postgresql.conf',
	"redlock.max_connections_per_node = 4\nredlock.idle_connection_timeout = '10s'\n");
$pg->reload;
my $a = long_session($pg);
reload_seen($pg, $a);
$_->pause for @redis[ 0 .. 2 ];
$a->query_until(qr/asking/,
	"\\echo asking\nSET redlock.node_timeout = '8s';\nSELECT redlock_try_lock('slow', 30000);\n");
ok(wait_for(sub { $pg->safe_psql('postgres', 'SELECT backends_connected FROM redlock_dispatcher') eq '1' }, 10),
	'the only permit is held by a call in progress');
($rc, $probe, $perr) = $pg->psql('postgres', 'SELECT count(*) FROM redlock_nodes',
	extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($perr, qr/ERROR:  53300: no connection to the Redis nodes came free/,
	'a probe that finds no permit in time fails with 53300');
like($perr, qr/DETAIL:  This server opens at most 4 connections to each node \(redlock\.max_connections_per_node\), 1 of them for backends/,
	'... saying what the bound is');
like($perr, qr/HINT:  Raise redlock\.max_connections_per_node/, '... and what to do');
$_->resume for @redis[ 0 .. 2 ];
my ($ao, $ae) = run_in($a, "SELECT 'done'");
like($ao, qr/done/, 'the call in progress ended, and the session goes on');
# a session that exits holding a lease: its exit releases it (a round on
# its own connections), and gives its place back after that
($ao, $ae) = run_in($a, "SELECT redlock_lock('at_exit', 30000) > 0");
is($ao, 't', 'the session takes a lease, and exits holding it');
$a->quit;
ok(wait_for(sub { key_count('at_exit', @redis) eq '0 0 0 0 0' }, 10),
	'its exit released the lease on every node');
ok( wait_for(
		sub {
			$pg->safe_psql('postgres', 'SELECT backends_connected FROM redlock_dispatcher') eq '0';
		},
		10),
	'... and gave its place back (no place is lost at exit)');

unlike(slurp_file($pg->logfile), qr/Redis node \S+ (is failing|stopped answering)/,
	'no node was blamed for a connection the idle timer ended and the node closed');

nothing_crashed($pg, $pm_start);
$pg->stop;
done_testing();
