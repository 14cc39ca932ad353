# The restart quarantine rests on evidence no PostgreSQL server can lose:
# each node's epoch, a key on the node itself (src/net/node_server.c).  Two
# preloaded servers, east and west; in every case east holds a lease (TTL
# 30 s) granted by a bare majority of fresh nodes, one of which then loses
# its memory, and west, which would win the lease with that node's vote,
# must be refused while east's validity lasts, the node named quarantined:
#   - the node restarts empty, then west crash-restarts (a backend killed
#     with SIGKILL: PostgreSQL reinitialises shared memory);
#   - the node restarts empty, then west's backend reaches 75 other node
#     names (the old per-server table of sightings held 64);
#   - FLUSHALL on the node (the same process, the same connection);
#   - the node restarts empty, and a server that never saw it before asks;
#   - the node restarts from an older snapshot that holds the epoch but not
#     east's lock (another process wrote the epoch).
# Then what is shown (redlock_nodes, redlock_stats_nodes: the epoch, since
# when, why, until when) and misuse: a node whose ACL lacks what the check
# needs, a read-only replica listed as a node, a TTL longer than the
# quarantine.  The quarantine passing and the control without it are in
# 022_restart_quarantine.pl.
#
# Each lease is an interval on this host's clock: from its grant to the end
# of the validity its holder was told.
use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedlockTest;
use Test::More;
use Time::HiRes qw(time usleep);

my $quarantine_s = 40;
my $ttl_ms = 30000;    # within the quarantine
my $conf = "redlock.restart_quarantine = '${quarantine_s}s'\n"
  . "redlock.connect_timeout = '200ms'\n"
  . "redlock.node_timeout = '1s'\n"
  . "restart_after_crash = on\n";

my ($east, $west) = redlock_pair(conf => $conf);
my %pm_start = map { $_->name => $_->safe_psql('postgres', 'SELECT pg_postmaster_start_time()') }
  ($east, $west);

# fresh nodes, seeded, and their redlock.nodes list
sub fresh_nodes
{
	my ($n, %args) = @_;
	my @nodes = redis_nodes($n, %args);
	seed_epoch(@nodes);
	return @nodes;
}

# east takes $res on @nodes, granted by all but the last $blocked of them
# (a key of someone else's there until we delete it); returns (session,
# token, end of its validity: lower bound)
sub east_lease
{
	my ($res, $blocked, @nodes) = @_;
	my @out = @nodes[ $#nodes - $blocked + 1 .. $#nodes ];
	$_->cli('SET', "redlock:lock:$res", 'someone', 'PX', '60000') for @out;
	my $s = $east->background_psql('postgres', on_error_stop => 0);
	$s->query_safe("SET redlock.nodes = '${\ node_list(@nodes) }'");
	my $token = $s->query_safe("SELECT redlock_lock('$res', $ttl_ms)");
	my $t0 = time;
	my $validity = $s->query_safe(
		"SELECT validity_ms FROM redlock_leases WHERE resource = '$res'");
	like($token, qr/^\d+$/, "$res: east holds it (token $token, validity $validity ms)");
	$_->cli('DEL', "redlock:lock:$res") for @out;
	return ($s, $token, $t0 + $validity / 1000);
}

# west (or $pg) asks for $res on @nodes, waiting 300 ms: must be refused
# while east's validity lasts, node $x named quarantined
sub refused
{
	my ($pg, $res, $end, $x, $what, @nodes) = @_;
	my $t0 = time;
	my ($rc, $out, $err) = $pg->psql('postgres',
		"SET redlock.nodes = '${\ node_list(@nodes) }';"
		  . "SELECT redlock_lock('$res', $ttl_ms, wait_ms => 300)",
		extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	unlike($out // '', qr/^\d+$/, "$what: not granted the lease east holds");
	cmp_ok($t0, '<', $end, "$what: asked while east's validity lasts");
	like($err, qr/\Q${\ $x->addr }\E: quarantined until \d\d:\d\d:\d\d\.\d{3} \(redlock\.restart_quarantine\)/,
		"$what: the node that lost its memory is named, quarantined")
	  or diag $err;
	return $err;
}

# ---------------- a crash restart of west ----------------
{
	my @n = fresh_nodes(3);
	my ($tok) = $west->safe_psql('postgres',
		"SET redlock.nodes = '${\ node_list(@n) }'; SELECT redlock_try_lock('c:warm', 5000)");
	like($tok, qr/^\d+$/, 'crash: west has seen the nodes');
	my ($s, $token, $end) = east_lease('c:r', 1, @n);
	$n[0]->restart;

	my $victim = $west->background_psql('postgres', on_error_stop => 0);
	my $pid = $victim->query_safe('SELECT pg_backend_pid()');
	my $logpos = -s $west->logfile;
	kill 'KILL', $pid;
	ok($west->wait_for_log(qr/terminated; reinitializing/, $logpos)
		  && $west->wait_for_log(qr/database system is ready to accept connections/, $logpos),
		'crash: west restarted after a backend was killed');
	eval { $victim->quit };
	refused($west, 'c:r', $end, $n[0], 'crash: west after its crash restart', @n);
	$s->query("SELECT redlock_unlock('c:r')");
	$s->quit;
}

# ---------------- 75 other node names ----------------
{
	my @alias = map { "127.0.0.$_" } 2 .. 16;
	my @n = fresh_nodes(5, also_bind => \@alias);
	my $list = node_list(@n);
	$west->safe_psql('postgres', "SET redlock.nodes = '$list'; SELECT redlock_try_lock('n:warm', 5000)");
	my ($s, $token, $end) = east_lease('n:r', 2, @n);
	$n[0]->restart;
	# one backend of west sees 75 names first: 5 lists of 15 aliases
	my $sql = '';
	for my $k (0 .. 4)
	{
		my $names = join ',', map { "$_:" . $n[$k]->port } @alias;
		$sql .= "SET redlock.nodes = '$names'; SELECT count(*) FROM redlock_nodes WHERE reachable;\n";
	}
	$sql .= "SET redlock.nodes = '$list';\n"
	  . "SELECT redlock_lock('n:r', $ttl_ms, wait_ms => 300);\n";
	my $t0 = time;
	my ($rc, $out, $err) = $west->psql('postgres', $sql,
		extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	is($out, join("\n", ('15') x 5), 'names: west reached the 75 aliases');
	cmp_ok($t0, '<', $end, "names: asked while east's validity lasts");
	like($err, qr/\Q${\ $n[0]->addr }\E: quarantined until/,
		'names: still refused after 75 other names, the node named quarantined')
	  or diag $err;
	$s->query("SELECT redlock_unlock('n:r')");
	$s->quit;
}

# ---------------- FLUSHALL ----------------
my @flushed = fresh_nodes(3);
{
	my $list = node_list(@flushed);
	# a session of west whose connections stay open across the flush
	my $w = $west->background_psql('postgres', on_error_stop => 0);
	$w->query_safe("SET redlock.nodes = '$list'");
	$w->query_safe("SELECT redlock_try_lock('f:warm', 5000)");
	$w->query_safe("SELECT redlock_unlock('f:warm')");
	my ($s, $token, $end) = east_lease('f:r', 1, @flushed);
	my $t_flush = time;
	is($flushed[0]->cli('FLUSHALL'), 'OK', 'flushall: node 1 flushed (same run_id)');
	my $t0 = time;
	my ($out, $err) = $w->query("SELECT redlock_lock('f:r', $ttl_ms, wait_ms => 300)");
	$err = $w->{stderr};
	unlike($out // '', qr/^\d+$/, 'flushall: west, on the same connections, is not granted');
	cmp_ok($t0, '<', $end, "flushall: asked while east's validity lasts");
	like($err, qr/\Q${\ $flushed[0]->addr }\E: quarantined until .*no epoch \(it is new, restarted without its data, or was flushed\)/,
		'flushall: the node is named quarantined, and why') or diag $err;
	$w->quit;
	refused($west, 'f:r', $end, $flushed[0], 'flushall, a new session', @flushed);

	# what west shows of node 1: redlock_nodes probes, redlock_stats_nodes
	# is what its requests read
	my $row = $west->safe_psql('postgres',
		"SET redlock.nodes = '$list';"
		  . " SELECT extract(epoch FROM quarantined_until), extract(epoch FROM epoch_since),"
		  . " epoch_run_id, epoch_reason, warnings::text"
		  . " FROM redlock_nodes WHERE node = '${\ $flushed[0]->addr }'");
	my ($until, $since, $rid, $why, $warn) = split /\|/, $row;
	my ($node_rid) = $flushed[0]->cli('INFO', 'server') =~ /run_id:(\w+)/;
	cmp_ok($since, '>=', $t_flush - 1, 'redlock_nodes: epoch_since is after the flush');
	cmp_ok(abs($until - ($since + $quarantine_s)), '<', 1.5,
		'redlock_nodes: quarantined_until is epoch_since + the quarantine');
	is($rid, $node_rid, "redlock_nodes: epoch_run_id is the node's run_id");
	like($why, qr/flushed/, 'redlock_nodes: epoch_reason says why');
	like($warn, qr/restart quarantine/, 'redlock_nodes: a warning says so');
	like($west->safe_psql('postgres',
			"SELECT quarantined_until IS NOT NULL, epoch_reason FROM redlock_stats_nodes"
			  . " WHERE node = '${\ $flushed[0]->addr }'"),
		qr/^t\|.*flushed/, 'redlock_stats_nodes: quarantined, and why');
	is($west->safe_psql('postgres',
			"SET redlock.nodes = '$list'; SELECT count(*) FROM redlock_nodes"
			  . " WHERE quarantined_until IS NULL AND epoch_reason LIKE '%operator%'"),
		'2', 'redlock_nodes: the other two nodes, seeded, are not quarantined');
	$s->query("SELECT redlock_unlock('f:r')");
	$s->quit;
}

# ---------------- a server that never saw the node ----------------
{
	my @n = fresh_nodes(3);
	my ($s, $token, $end) = east_lease('s:r', 1, @n);
	$n[0]->restart;
	my $north = redlock_cluster('north', preload => 1, conf => $conf);
	refused($north, 's:r', $end, $n[0], 'new server', @n);
	$s->query("SELECT redlock_unlock('s:r')");
	$s->quit;
	$north->stop;
}

# ---------------- an older snapshot: the epoch of another process ----------------
{
	my @n = fresh_nodes(3);
	$west->safe_psql('postgres', "SET redlock.nodes = '${\ node_list(@n) }'; SELECT redlock_try_lock('o:warm', 5000)");
	is($n[0]->cli('SAVE'), 'OK', 'snapshot: node 1 saved before the lease');
	my ($s, $token, $end) = east_lease('o:r', 1, @n);
	$n[0]->restart;    # loads the snapshot: the epoch, not the lock
	like($n[0]->cli('GET', 'redlock:epoch'), qr/ seeded$/, 'snapshot: the epoch came back with it');
	is(key_count('o:r', $n[0]), '0', "snapshot: east's lock did not");
	my $err = refused($west, 'o:r', $end, $n[0], 'snapshot', @n);
	like($err, qr/another server process answers than the one that wrote the epoch/,
		'snapshot: the DETAIL says why');
	$s->query("SELECT redlock_unlock('o:r')");
	$s->quit;
}

# ---------------- misuse ----------------
# an ACL without what the check needs: a clear error, not a skipped check
{
	my ($n) = fresh_nodes(1);
	$n->cli('ACL', 'SETUSER', 'default', '-info');
	my ($rc, $out, $err) = $west->psql('postgres',
		"SET redlock.nodes = '${\ $n->addr }'; SELECT redlock_lock('acl', 5000)",
		extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	like($err, qr/RL002.*could not read its epoch \(redlock\.restart_quarantine\).*(?:can't run this command|no permissions to run).*HINT:.*allowed EVAL, INFO, TIME/s,
		'ACL without +info: RL002 names the epoch check, the refusal and what to allow')
	  or diag $err;
	($rc, $out, $err) = $west->psql('postgres',
		"SET redlock.restart_quarantine = 0; SET redlock.nodes = '${\ $n->addr }';"
		  . " SELECT redlock_lock('acl', 5000) > 0");
	is($out, 't', '... and with the quarantine off, the node is not checked');
}

# a read-only replica listed as a node
{
	my ($master) = fresh_nodes(1);
	my ($replica) = redis_nodes(1, args => [ '--replicaof', '127.0.0.1', $master->port ]);
	ok(wait_for(sub { $replica->cli('INFO', 'replication') =~ /master_link_status:up/ }, 30),
		'a replica is in sync');
	my ($rc, $out, $err) = $west->psql('postgres',
		"SET redlock.nodes = '${\ $replica->addr }'; SELECT redlock_lock('ro', 5000)",
		extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	like($err, qr/could not read its epoch.*READONLY.*HINT:.*read-only replica/s,
		'a read-only replica: the error says so') or diag $err;
}

# a TTL longer than the quarantine: a WARNING, once per session
{
	my $long = ($quarantine_s + 5) * 1000;
	my $s = $west->background_psql('postgres', on_error_stop => 0);
	$s->query_safe("SET redlock.nodes = '${\ node_list(@flushed[1, 2]) }'");
	$s->query("SELECT redlock_try_lock('long', $long)");
	like($s->{stderr}, qr/WARNING:  lease TTL 45000 ms is longer than redlock.restart_quarantine \(40000 ms\)/,
		'a TTL longer than the quarantine: a WARNING');
	$s->{stderr} = '';
	$s->query("SELECT redlock_unlock('long')");
	$s->query("SELECT redlock_try_lock('long2', $long)");
	is($s->{stderr}, '', '... once per session');
	$s->query("SELECT redlock_unlock('long2')");
	$s->quit;
}

nothing_crashed($east, $pm_start{ $east->name }, 'east: ');
done_testing();
