# Node health across the server (redlock_stats_nodes): five real Redis
# nodes, one preloaded server, four sessions taking and releasing leases.
# A minority fails: node 4 is killed, node 5 answers OOM to writes
# (maxmemory 1 with noeviction).  Read as a member of pg_monitor, the view
# shows both failing with their reasons, while leases are still granted;
# the log says so once per node for the whole server, not once per session.
# Then node 4 comes back (quarantined after its restart, which the view
# shows) and node 5 gets its memory back: both healthy again, logged once.
# Reading the view asks no node anything.  Then node 5 flaps (its memory
# fills and frees round after round): the log says at most a line per node
# every 5 s, and its last word on the node, once the gap has passed, is
# its state, with the count of the changes folded.
use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedlockTest;
use Test::More;
use Time::HiRes qw(time);

my @redis = redis_nodes(5);
seed_epoch(@redis);    # new nodes: they count at once
my ($down, $full) = @redis[ 3, 4 ];
my ($down_addr, $full_addr) = ($down->addr, $full->addr);

# node_timeout 1 s: a busy machine must not make healthy nodes fail; the
# quarantine long enough to be seen after node 4's restart
my $pg = redlock_cluster('health', preload => 1, nodes => \@redis,
	conf => "redlock.node_timeout = '1s'\nredlock.restart_quarantine = '60s'\n");
my $pm_start = $pg->safe_psql('postgres', 'SELECT pg_postmaster_start_time()');
$pg->safe_psql('postgres',
	'CREATE ROLE watcher LOGIN IN ROLE pg_monitor; CREATE ROLE outsider LOGIN');

# the view as the monitoring role sees it: node => { column => value }
my @cols = qw(state failing_since requests errors_refused errors_timeout errors_redis
  errors_tls errors_resolve errors_other last_error last_error_at last_success_at
  quarantined_until);
sub health
{
	my $out = $pg->safe_psql('postgres',
		'SELECT node, ' . join(', ', map { "coalesce($_\::text, '')" } @cols)
		  . ' FROM redlock_stats_nodes',
		extra_params => [ '-U', 'watcher', '-F', "\t" ]);
	my %h;
	for (split /\n/, $out)
	{
		my ($node, @v) = split /\t/, $_, -1;
		@{ $h{$node} }{@cols} = @v;
	}
	return \%h;
}

# each session takes its own lease and releases it; all are granted
my @sessions = map { $pg->background_psql('postgres') } 1 .. 4;
sub leases_round
{
	my $granted = 0;
	for my $i (0 .. $#sessions)
	{
		my $s = $sessions[$i];
		$granted++ if $s->query_safe("SELECT redlock_lock('health:$i', 10000) IS NOT NULL") eq 't';
		$s->query_safe("SELECT redlock_unlock('health:$i')");
	}
	return $granted;
}

# ---------------- all nodes answering ----------------
is(leases_round(), 4, 'four sessions take and release leases on five nodes');
my $h = health();
is(join(',', sort keys %$h), join(',', sort map { $_->addr } @redis),
	'the view has a row for each node, as the monitoring role reads it');
is(join(',', map { $h->{ $_->addr }{state} } @redis), 'healthy,healthy,healthy,healthy,healthy',
	'every node is healthy');
ok(!grep({ $h->{ $_->addr }{requests} < 8 } @redis),
	'each node counted the requests of four lock and four unlock calls, at least')
  or diag explain $h;

# reading the view asks no node anything: three new sessions read it, and
# no node received a connection but the one that asks it (redis-cli's)
sub connections
{
	return map { $_->cli('INFO', 'stats') =~ /total_connections_received:(\d+)/ } @redis;
}
my @before = connections();
health() for 1 .. 3;
my @after = connections();
is(join(' ', map { $after[$_] - $before[$_] } 0 .. $#redis), '1 1 1 1 1',
	'reading the view in new sessions opened no connection to any node');

my $logpos = -s $pg->logfile;

# ---------------- a failing minority ----------------
$down->kill9;
$full->cli('CONFIG', 'SET', 'maxmemory-policy', 'noeviction');
$full->cli('CONFIG', 'SET', 'maxmemory', '1');
like($full->cli('SET', 'probe', 'x'), qr/OOM/, 'node 5 refuses writes: OOM');
my $t0 = time;
my ($rounds, $all_granted) = (0, 1);
my $shown = wait_for(
	sub {
		$rounds++;
		$all_granted = 0 if leases_round() != 4;
		$h = health();
		return $h->{$down_addr}{state} eq 'failing' && $h->{$full_addr}{state} eq 'failing';
	},
	60);
my $elapsed = time - $t0;
ok($shown, 'the view shows both failing nodes');
note sprintf('shown %.2f s after the faults, after %d rounds of 4 leases', $elapsed, $rounds);
ok($all_granted, 'every lease was granted meanwhile (three of five nodes answer)');

# the reasons: node 4 refuses connections, node 5 answers with an error
cmp_ok($h->{$down_addr}{errors_refused}, '>', 0, 'node 4: its failures count as refused');
like($h->{$down_addr}{last_error}, qr/^(could not connect: Connection refused|connection lost)/,
	'node 4: the last error says the connection was refused (or lost)');
is($h->{$down_addr}{errors_redis}, '0', 'node 4: no Redis error');
cmp_ok($h->{$full_addr}{errors_redis}, '>', 0, 'node 5: its failures count as Redis errors');
like($h->{$full_addr}{last_error}, qr/^Redis error: OOM /, 'node 5: the last error is the OOM reply');
is($h->{$full_addr}{errors_refused}, '0', 'node 5: no refused connection');
ok($h->{$down_addr}{failing_since} ne '' && $h->{$full_addr}{failing_since} ne '',
	'both say since when they fail');
is(join(',', map { $h->{ $_->addr }{state} } @redis[ 0 .. 2 ]), 'healthy,healthy,healthy',
	'nodes 1-3 stay healthy');

# more leases while they fail: the log still says it once per node
leases_round() for 1 .. 5;
$h = health();
is($h->{$full_addr}{state}, 'failing',
	'node 5 stays failing although it answers the releases (only a lock granted ends it)');
my $log = slurp_file($pg->logfile, $logpos);
my $failing = () = $log =~ /LOG:  Redis node \Q$down_addr\E is failing: (could not connect: Connection refused|connection lost)/g;
is($failing, 1, 'the log says once for the server that node 4 is failing, with why');
$failing = () = $log =~ /LOG:  Redis node \Q$full_addr\E is failing: Redis error: OOM /g;
is($failing, 1, 'and once that node 5 is failing, with why');
like($log, qr/Redis node \Q$full_addr\E is failing: .*\n.*HINT:  A node is out of memory/,
	'... with the hint for OOM');
unlike($log, qr/Redis node \S+ (stopped answering|is answering again)/,
	'no session logs the nodes on its own');

# ---------------- recovery ----------------
$logpos = -s $pg->logfile;
$down->start;
$full->cli('CONFIG', 'SET', 'maxmemory', '0');
$t0 = time;
my $quarantine_seen = 0;
ok( wait_for(
		sub {
			leases_round();
			$h = health();
			$quarantine_seen ||= $h->{$down_addr}{quarantined_until} ne '';
			return $h->{$down_addr}{state} eq 'healthy' && $h->{$full_addr}{state} eq 'healthy'
			  && $quarantine_seen;
		},
		60),
	'the view shows both nodes healthy again');
note sprintf('healthy %.2f s after the repairs', time - $t0);
ok($quarantine_seen, 'node 4 restarted: the view shows until when it is quarantined');
is($h->{$down_addr}{failing_since}, '', 'a healthy node has no failing_since');
# the log says it too, within its gap of 5 s since the lines that said
# they were failing (which may have been moments before)
ok( wait_for(
		sub {
			leases_round();
			my $l = slurp_file($pg->logfile, $logpos);
			return $l =~ /Redis node \Q$down_addr\E is healthy again/
			  && $l =~ /Redis node \Q$full_addr\E is healthy again/;
		},
		15),
	'the log says both nodes are healthy again, at most a gap later');
leases_round() for 1 .. 3;
$log = slurp_file($pg->logfile, $logpos);
my $healthy = () = $log =~ /LOG:  Redis node \Q$down_addr\E is healthy again/g;
is($healthy, 1, 'the log says once that node 4 is healthy again');
$healthy = () = $log =~ /LOG:  Redis node \Q$full_addr\E is healthy again/g;
is($healthy, 1, 'and once that node 5 is');
unlike($log, qr/is failing/, 'and no node failed again');

# ---------------- a flapping node: the log rate-limited ----------------
# node 5's memory fills and frees between every round for about 3 s: each
# round makes it failing, the next healthy again.  The log writes at most a
# line per node every 5 s, folding the changes between; its last word on
# the node, once the gap has passed, is that it is healthy, with the count.
$logpos = -s $pg->logfile;
my $flips = 0;
my $flap_end = time + 3;
while (time < $flap_end)
{
	$full->cli('CONFIG', 'SET', 'maxmemory', '1');
	leases_round();
	$full->cli('CONFIG', 'SET', 'maxmemory', '0');
	leases_round();
	$flips += 2;
}
$h = health();
cmp_ok($flips, '>=', 6, "node 5 flapped ($flips changes)");
$log = slurp_file($pg->logfile, $logpos);
my $lines = () = $log =~ /LOG:  Redis node \Q$full_addr\E is (?:failing|healthy again)/g;
cmp_ok($lines, '<=', 2, "while it flapped for 3 s the log said at most 2 lines about it ($lines)");
sleep 6;
leases_round() for 1 .. 2;
$log = slurp_file($pg->logfile, $logpos);
my @said = $log =~ /LOG:  Redis node \Q$full_addr\E is (failing|healthy again)/g;
is($said[-1], 'healthy again', 'after the gap the log\'s last word on it: healthy again');
like($log,
	qr/Redis node \Q$full_addr\E is healthy again\n[^\n]*DETAIL:  It had been failing since [^\n]*, and its health changed \d+ more times since the last line about it, not logged: at most one line per node is written every 5 seconds/,
	'... with the count of the changes it folded');
cmp_ok(scalar(@said), '<=', 3, 'in all at most 3 lines about it in the 9 s');

# ---------------- who may read it ----------------
my ($rc, $out, $err) = $pg->psql('postgres', 'SELECT count(*) FROM redlock_stats_nodes',
	extra_params => [ '-U', 'outsider' ]);
like($err, qr/permission denied for view redlock_stats_nodes/,
	'a role outside pg_monitor and redlock_user may not read it');

$_->quit for @sessions;
nothing_crashed($pg, $pm_start);
done_testing();
