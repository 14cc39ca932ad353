# What the messages of issue 32 say, as a user meets them, on real Redis
# nodes and a real cluster (redlock preloaded):
#
# - RL002's hint names the cause: nodes late for the round name
#   redlock.node_timeout and how long their last answer took; nodes that
#   refuse connections ask whether they are running and reachable; a node
#   at its maxclients (a real redis-server with --maxclients 1 and its one
#   client taken) gives its own words in DETAIL and a hint naming its
#   maxclients setting; a node in protected mode (no password, bound to
#   this machine's non-loopback address, which it refuses as a client
#   address not on loopback: skipped on a machine without one) gives its
#   own words and a hint naming protected mode.  (TLS failures: 010; a
#   stalled dispatcher: 025.)
# - a node that requires a password and gets none says NOAUTH, with a hint
#   naming redlock.password, also for a lock call that waits (before, its
#   longer command got "ERR Protocol error: unauthenticated multibulk
#   length" after the refused INFO).
# - COMMIT of a transaction whose transaction lease ran out warns, naming
#   the resource and the token the lock call returned.
# - redlock_xact_lock() outside a transaction block warns also through the
#   extended query protocol (pgbench -M extended), and not in a procedure
#   called outside one.
use strict;
use warnings FATAL => 'all';

use IO::Socket::INET;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedisNode;
use RedlockTest;
use Test::More;

my @redis = redis_nodes(3);
my $pg = redlock_cluster('messages', nodes => \@redis, preload => 1,
	conf => "redlock.connect_timeout = '2s'\n");

# one statement (or several) in a fresh session with verbose errors and the
# given settings: (stdout, stderr)
sub attempt
{
	my ($sql, %set) = @_;
	my $pre = "\\set VERBOSITY verbose\n";
	$pre .= "SET redlock.$_ = '$set{$_}';\n" for sort keys %set;
	my ($rc, $out, $err) = $pg->psql('postgres', $pre . $sql, on_error_stop => 0);
	return ($out, $err);
}

my ($out, $err);

# ------------------------------------------------------------------------
# RL002 hints

# nodes late: node_timeout, and how long the last answer took
my $s = $pg->background_psql('postgres', on_error_stop => 0);
$s->query_safe("SET redlock.node_timeout = '1s'");
like($s->query_safe("SELECT redlock_try_lock('late', 5000)"), qr/^\d+$/,
	'a lease while every node answers');
$s->query_safe("SELECT redlock_unlock('late')");
$_->pause for @redis[0, 1];
($out, $err) = run_in($s, "SELECT redlock_try_lock('late2', 5000)");
$_->resume for @redis[0, 1];
like($err, qr/RL002|fewer than a majority of Redis nodes could answer/, 'two nodes paused: RL002');
like($err, qr/HINT:  2 nodes did not answer within redlock\.node_timeout \(1000 ms\); the last answer of 127\.0\.0\.1:\d+ took \d+\.\d ms\./,
	'... the hint names node_timeout and the last answer\'s latency');
unlike($err, qr/running and reachable/, '... not the hint for nodes that are down');
$s->quit;

# a session that never heard the nodes: their latency is not known
$_->pause for @redis[0, 1];
($out, $err) = attempt("SELECT redlock_try_lock('late3', 5000)", node_timeout => '500ms');
$_->resume for @redis[0, 1];
like($err, qr/HINT:  2 nodes did not answer within redlock\.node_timeout \(500 ms\)\.  Check the nodes' load and latency \(redlock_nodes\.rtt_ms\)/,
	'nodes never heard: the hint names node_timeout and where their latency shows');

# nothing listens: are they running and reachable
my @closed = map { free_port() } 1 .. 3;
($out, $err) = attempt("SELECT redlock_try_lock('down', 5000)",
	nodes => join(',', map { "127.0.0.1:$_" } @closed));
like($err, qr/127\.0\.0\.1:$closed[0]: could not connect: Connection refused/, 'nodes down: refused');
like($err, qr/HINT:  Check that the nodes in redlock\.nodes are running and reachable/,
	'... the hint asks whether they are running and reachable');

# a node at its maxclients: its own words, and a hint naming maxclients
my $full = RedisNode->new(args => [ '--maxclients', '1' ]);
my $taken = IO::Socket::INET->new(PeerAddr => $full->host, PeerPort => $full->port)
  or die "connect to the maxclients node: $!";
print $taken "PING\r\n";
my $pong = <$taken>;
like($pong, qr/^\+PONG/, 'the node\'s one client slot is taken');
for my $call ("redlock_try_lock('full', 5000)", "redlock_lock('full', 5000)")
{
	($out, $err) = attempt("SELECT $call", nodes => $full->addr);
	like($err, qr/\Q${\ $full->addr }\E: refused the connection: ERR max number of clients reached/,
		"$call, a node at its maxclients: DETAIL gives the node's words");
	like($err, qr/HINT:  A node refused the connection because it has as many clients as its maxclients setting allows: raise maxclients on the node/,
		'... and the hint names its maxclients setting');
}
close $taken;

# a node in protected mode: no password, bound to an address that is not
# loopback; a client connecting to that address comes from it, which is
# not loopback either, and is refused with DENIED
SKIP:
{
	my ($ip) = grep { /^\d+\.\d+\.\d+\.\d+$/ && !/^127\./ }
	  split ' ', (`hostname -I 2>/dev/null` // '');
	skip 'no non-loopback IPv4 address on this machine (hostname -I): '
	  . 'a node in protected mode refuses only clients that are not on loopback', 5
	  unless defined $ip;
	my $guarded = RedisNode->new(host => $ip, args => [ '--protected-mode', 'yes' ]);
	like($guarded->cli('PING'), qr/^DENIED/, "the node on $ip refuses a client from $ip");
	for my $call ("redlock_try_lock('guarded', 5000)", "redlock_lock('guarded', 5000)")
	{
		($out, $err) = attempt("SELECT $call", nodes => $guarded->addr);
		like($err, qr/\Q${\ $guarded->addr }\E: refused the connection: DENIED (?:Redis is running|Running) in protected mode/,
			"$call, a node in protected mode: DETAIL gives the node's words");
		like($err, qr/HINT:  A node in protected mode refused a connection from another host: give the node a password \(requirepass, and redlock\.password here\)/,
			'... and the hint names protected mode');
	}
}

# ------------------------------------------------------------------------
# NOAUTH: a node that wants a password, and none is set

my $locked = RedisNode->new(args => [ '--requirepass', 's3cret' ]);
for my $call ("redlock_try_lock('auth', 5000)", "redlock_lock('auth', 5000)",
	"redlock_xact_lock('auth', 5000)")
{
	($out, $err) = attempt("SELECT $call", nodes => $locked->addr);
	like($err, qr/\Q${\ $locked->addr }\E: Redis error: NOAUTH Authentication required/,
		"$call: the detail says NOAUTH");
	unlike($err, qr/unauthenticated/, '... not the protocol error that follows it');
	like($err, qr/HINT:  A node requires authentication: set redlock\.password/,
		'... and the hint names redlock.password');
}
($out, $err) = attempt("SELECT redlock_lock('auth', 5000) > 0", nodes => $locked->addr,
	password => 's3cret');
is($out, 't', 'with redlock.password set: granted');

# ------------------------------------------------------------------------
# COMMIT after the transaction lease ran out: the resource and the token

($out, $err) = attempt("BEGIN;\nSELECT redlock_xact_lock('short', 50);\n"
	  . "SELECT pg_sleep(0.1);\nCOMMIT;");
my ($token) = $out =~ /^(\d+)$/m;
ok(defined $token, 'a transaction lease of 50 ms');
like($err, qr/WARNING:  RL003: transaction lease on "short" had expired before COMMIT\nDETAIL:  Its fencing token $token may have been superseded/,
	'COMMIT warns, naming the resource and the token');
($out, $err) = attempt("BEGIN;\nSELECT redlock_xact_lock('long', 60000) > 0;\nCOMMIT;");
unlike($err, qr/WARNING/, 'no warning while the lease is valid');

# ------------------------------------------------------------------------
# redlock_xact_lock() outside a transaction block

my $script = $pg->basedir . '/xact_lock.sql';
open my $fh, '>', $script or die "$script: $!";
print $fh "\\set n 1\nSELECT redlock_xact_lock('ext:' || :n) > 0;\n";
close $fh;
my ($pgb_out, $pgb_err) = run_command(
	[ 'pgbench', '-n', '-t', '1', '-M', 'extended', '-f', $script,
		$pg->connstr('postgres') ]);
like($pgb_err, qr/WARNING:  redlock_xact_lock\(\) can only be used in transaction blocks/,
	'outside a transaction block, through the extended query protocol: a WARNING');
$pg->safe_psql('postgres', q{CREATE PROCEDURE take(r text) LANGUAGE plpgsql AS $$
BEGIN PERFORM redlock_xact_lock(r); END $$});
($out, $err) = attempt("CALL take('proc')");
unlike($err, qr/WARNING/, 'a procedure called outside one: no warning');
($out, $err) = attempt("SELECT redlock_xact_lock('plain') > 0");
like($err, qr/WARNING:  25P01: redlock_xact_lock\(\) can only be used in transaction blocks\nDETAIL:  The transaction lease on "plain" is released when this statement ends\./,
	'a SELECT of its own: the WARNING with SQLSTATE 25P01');

$pg->stop;
done_testing();
