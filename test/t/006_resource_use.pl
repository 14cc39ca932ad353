# Resource use: many lock/unlock cycles in one session leave the backend's
# memory (PostgreSQL memory contexts, and the malloc heap that hiredis uses)
# and its connections to the nodes flat.  RESOURCE_CYCLES sets the number of
# cycles (default 100,000, which takes about 30 s).
use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedlockTest;
use Test::More;
use Time::HiRes qw(time usleep);

my $cycles = $ENV{RESOURCE_CYCLES} // 100_000;
my $batch = 1000;

my @redis = redis_nodes(3);
# a generous node_timeout: this test is about resources, and the machine
# running it may be busy (a late answer would fail a cycle with RL002)
my $pg = redlock_cluster('resources', nodes => \@redis, conf => "redlock.node_timeout = '1s'\n");

my $s = $pg->background_psql('postgres', on_error_stop => 1);
# the framework's timeout per query, not for the whole session (a hundred
# batches on a busy machine take longer than it)
$s->set_query_timer_restart();
my $pid = $s->query_safe('SELECT pg_backend_pid()');

# one batch: session leases (lock and try_lock, re-entered once), a
# transaction lease, an extend, and a lease that is contended by nobody but
# released by unlock_all
$s->query_safe(<<'SQL');
CREATE PROCEDURE cycles(n int) LANGUAGE plpgsql AS $$
BEGIN
	FOR i IN 1 .. n LOOP
		CASE i % 4
		WHEN 0 THEN
			PERFORM redlock_lock('ru:a', 5000);
			PERFORM redlock_lock('ru:a', 5000);
			PERFORM redlock_unlock('ru:a');
			PERFORM redlock_unlock('ru:a');
		WHEN 1 THEN
			PERFORM redlock_try_lock('ru:b:' || (i % 7), 5000);
			PERFORM redlock_extend('ru:b:' || (i % 7), 5000);
			PERFORM redlock_unlock('ru:b:' || (i % 7));
		WHEN 2 THEN
			PERFORM redlock_xact_lock('ru:c', 5000);
			COMMIT;
		ELSE
			PERFORM redlock_try_lock('ru:d', 5000);
			PERFORM redlock_unlock_all();
		END CASE;
	END LOOP;
END $$;
SQL

sub context_bytes
{
	my $b = $s->query_safe('SELECT sum(total_bytes) FROM pg_backend_memory_contexts');
	die "no memory context sizes: '$b'" unless $b =~ /^\d+$/;
	return $b;
}

# (proc_kb dies when it cannot read: it never reads the same on both sides)
sub heap_kb { return proc_kb($pid, 'RssAnon'); }

sub clients
{
	my ($node) = @_;
	my $info = $node->cli('INFO', 'clients');
	my ($conn) = $info =~ /connected_clients:(\d+)/;
	die "no client count from ${\ $node->addr }: $info" unless defined $conn;
	return $conn;
}

# The node's client id of the backend's connection to it (ids are never
# reused), so that a new connection of the backend shows whatever else
# connects to the node (the machine may be shared: a client of some other
# test that finds this node on a port it used before counts in the node's
# totals, not here).  The connection is the backend's socket whose peer is
# the node's port.
sub backend_client_id
{
	my ($node) = @_;
	my %mine = socket_inodes($pid);
	my @ports = map { $_->{local_port} }
	  grep { $mine{ $_->{inode} } && $_->{peer_port} == $node->{port} } net_sockets('tcp');
	die "the backend has " . scalar(@ports) . " connections to ${\ $node->addr }, not 1"
	  unless @ports == 1;
	my $list = $node->cli('CLIENT', 'LIST');
	my ($id) = $list =~ /^id=(\d+) addr=\S+:$ports[0] /m
	  or die "no client with port $ports[0] on ${\ $node->addr }: $list";
	return $id;
}

# warm up: every code path once, caches filled
$s->query_safe("CALL cycles($batch)");
my $ctx0 = context_bytes();
my $heap0 = heap_kb();
my @conn0 = map { clients($_) } @redis;
my @id0 = map { backend_client_id($_) } @redis;
my $logpos = -s $pg->logfile;

my $t0 = time;
my @ctx_trace;
for (my $done = 0; $done < $cycles; $done += $batch)
{
	$s->query_safe("CALL cycles($batch)");
	push @ctx_trace, context_bytes() if ($done / $batch) % 5 == 0;
}
my $took = time - $t0;
my $ctx1 = context_bytes();
my $heap1 = heap_kb();
my @conn1 = map { clients($_) } @redis;
my @id1 = map { backend_client_id($_) } @redis;

note sprintf("%d cycles in %.1fs; memory contexts %d -> %d bytes; heap %d -> %d kB; trace: %s",
	$cycles, $took, $ctx0, $ctx1, $heap0, $heap1, join(' ', @ctx_trace));
is($s->query_safe('SELECT count(*) FROM redlock_leases'), '0', 'nothing held after the cycles');
cmp_ok($ctx1 - $ctx0, '<=', 16 * 1024,
	"memory contexts flat over $cycles cycles ($ctx0 -> $ctx1 bytes)");
cmp_ok($heap1 - $heap0, '<=', 512,
	"malloc heap flat over $cycles cycles ($heap0 -> $heap1 kB RssAnon)");
for my $i (0 .. $#redis)
{
	is($conn1[$i], $conn0[$i], "node $i: connected_clients unchanged ($conn0[$i] -> $conn1[$i])");
	# a node that stalls on a busy machine may make the backend drop its
	# connection and open a new one, which it logs ("stopped answering")
	my $addr = quotemeta($redis[$i]->addr);
	my $again = () = slurp_file($pg->logfile, $logpos) =~ /\[$pid\].*Redis node $addr stopped answering/g;
	if ($again == 0)
	{
		is($id1[$i], $id0[$i], "node $i: the backend kept its connection over $cycles cycles (client id $id0[$i])");
	}
	else
	{
		isnt($id1[$i], $id0[$i], "node $i: the backend connected again after the $again failures it logged");
	}
}

# many leases released at once (unlock_all, COMMIT, backend exit) go out
# pipelined: more of them than a connection may owe replies must still all
# be released on every node
sub lock_keys
{
	return key_count('many*', @redis);
}

# Each of $n leases matching $pattern is on a majority of the nodes: what a
# grant promises.  Not every node: a call returns once a majority answered,
# and on a busy machine a node can fall so far behind a loop of 1500 calls
# that its connection owes too many replies and is dropped ("stopped
# answering"), with the locks queued on it (a lock is not sent again).
sub held_by_majority
{
	my ($pattern, $n) = @_;
	my %nodes_of;
	for my $r (@redis)
	{
		$nodes_of{$_}++ for grep { $_ ne '' } split /\n/, keys_on($r, $pattern);
	}
	return $n == grep { $_ >= int(@redis / 2) + 1 } values %nodes_of;
}
$s->query_safe("SELECT count(redlock_lock('many:' || g, 60000)) FROM generate_series(1, 1500) g");
ok(wait_for(sub { held_by_majority('many:*', 1500) }), '1500 session leases, each held on a majority of nodes')
  or diag 'keys on the nodes: ' . lock_keys();
$s->query_safe('SELECT redlock_unlock_all()');
ok(no_keys('many*', @redis), 'unlock_all released all 1500 on every node');
$s->query_safe("BEGIN; SELECT count(redlock_xact_lock('manyx:' || g, 60000)) FROM generate_series(1, 1500) g");
$s->query_safe('COMMIT');
ok(no_keys('many*', @redis), 'COMMIT released 1500 transaction leases on every node');

# a node that stops reading for a moment while many leases are released:
# the round ends at the two others, and what did not fit into the socket to
# the third is pushed out as soon as it reads again, not at the session's
# next call (an idle session may never make one).  Long names, so that the
# releases are far more than the sockets buffer.
my $long = 'x' x 400;
$s->query_safe("SELECT count(redlock_lock('manyp:$long:' || g, 60000)) FROM generate_series(1, 1500) g");
ok(wait_for(sub { held_by_majority('manyp:*', 1500) }), '1500 leases with long names, each held on a majority of nodes')
  or diag 'keys on the nodes: ' . lock_keys();
$redis[2]->pause;
$s->query_until(qr/releasing/, "\\echo releasing\nSELECT redlock_unlock_all();\n");
usleep(300_000);
$redis[2]->resume;
$s->query_safe('SELECT 1');    # unlock_all has returned; the session is idle
ok(no_keys('many*', @redis),
	'released on every node, the one that stopped reading for 0.3 s too, without another call')
  or diag 'lock keys left: ' . lock_keys();

$s->query_safe("SELECT count(redlock_lock('manye:' || g, 60000)) FROM generate_series(1, 1500) g");
$s->quit;
ok(no_keys('many*', @redis), 'backend exit released 1500 session leases on every node');

$pg->stop;
done_testing();
