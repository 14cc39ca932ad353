# Hostile or broken nodes, as a user meets them: a node that streams an
# endless reply (to a lock call, to redlock_nodes, to the wake-up worker's
# subscription), a subscriber link that goes mute, one server listed under
# two names, and nodes whose failures must be told clearly (long Redis
# errors, TLS on one side only, cluster mode, out of memory, credentials and
# ACLs), and nodes that fork for an AOF rewrite or a snapshot.  Real Redis
# and real PostgreSQL; the fake server (test/perl/FakeRedis.pm) only for
# replies no Redis sends.
use strict;
use warnings FATAL => 'all';

use FakeRedis;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedisNode;
use RedlockTest;
use TlsFiles;
use Test::More;
use Time::HiRes qw(time usleep);

# the first node also listens on 127.0.0.2: one server under two names
# (section 3), with no help from /etc/hosts, where "localhost" may name ::1
my @redis = (RedisNode->new(also_bind => ['127.0.0.2']), redis_nodes(2));
my ($r1, $r2, $r3) = @redis;

my $pg = redlock_cluster('hostile_nodes', nodes => \@redis, preload => 1,
	conf => "redlock.connect_timeout = '1s'\nredlock.retry_delay = '200ms'\n");
my $pm_start = $pg->safe_psql('postgres', 'SELECT pg_postmaster_start_time()');

# a new session with verbose errors and the given settings
sub session
{
	my (%set) = @_;
	my $s = $pg->background_psql('postgres', on_error_stop => 0);
	$s->query_safe("\\set VERBOSITY verbose");
	$s->query_safe("SET redlock.$_ = '$set{$_}'") for sort keys %set;
	return $s;
}

# one statement in a fresh session with the given settings
sub attempt
{
	my ($sql, %set) = @_;
	my $s = session(%set);
	my ($out, $err) = run_in($s, $sql);
	$s->quit;
	return ($out, $err);
}

# ------------------------------------------------------------------------
# 1. A node that answers a lock call with "$4000000000" and streams: the
# connection is closed once the reply passes 1 MB, with a clear error, and
# the backend's memory stays small.  (Without the limit, the backend reads
# the stream until node_timeout: tens of MB even from this slow fake.)

my $stream = FakeRedis->new(mode => 'stream');
my $silent = FakeRedis->new(mode => 'silent');
my $s = session(nodes => join(',', $r1->addr, $stream->addr, $silent->addr),
	node_timeout => '5s');
my $pid = $s->query_safe('SELECT pg_backend_pid()');
$s->query_safe('SELECT count(*) FROM redlock_leases');
my $hwm0 = proc_kb($pid, 'VmHWM');
my ($out, $err) = run_in($s, "SELECT redlock_try_lock('big', 5000)");
my $hwm1 = proc_kb($pid, 'VmHWM');
like($err, qr/ERROR:\s+RL005/, 'a streamed reply to a lock call: RL005');
like($err, qr/\Q${\ $stream->addr }\E: protocol error: reply larger than 1 MB \(the most redlock accepts\); the connection was closed/,
	'... and the detail says the reply was too large');
like($err, qr/HINT:\s+A node sent a reply larger than redlock accepts/, '... with a hint saying so');
cmp_ok($hwm1 - $hwm0, '<', 16 * 1024,
	"the backend's peak memory grew by ${\ ($hwm1 - $hwm0) } kB only");
note "streamed to the backend: ${\ $stream->flooded } bytes";
is($s->query_safe('SELECT 1'), '1', 'the backend lives on');

# the same for redlock_nodes (INFO, PING and CONFIG GET are replies too),
# in a new session: new connections, whose full INFO is streamed
$s->quit;
$s = session(nodes => join(',', $r1->addr, $stream->addr, $silent->addr),
	node_timeout => '5s');
$pid = $s->query_safe('SELECT pg_backend_pid()');
$s->query_safe('SELECT count(*) FROM redlock_leases');
$hwm0 = proc_kb($pid, 'VmHWM');
# (the node is failing since the lock call: the server logged that then,
# and its errors go on in redlock_stats_nodes)
my $other_errors = "SELECT errors_other FROM redlock_stats_nodes WHERE node = '${\ $stream->addr }'";
my $cut_before = $pg->safe_psql('postgres', $other_errors);
($out, $err) = run_in($s, "SELECT node, reachable FROM redlock_nodes ORDER BY node");
$hwm1 = proc_kb($pid, 'VmHWM');
is($err, '', 'redlock_nodes with a streaming node: no error');
cmp_ok($hwm1 - $hwm0, '<', 16 * 1024,
	"redlock_nodes: the backend's peak memory grew by ${\ ($hwm1 - $hwm0) } kB only");
cmp_ok($pg->safe_psql('postgres', $other_errors), '>', $cut_before,
	'redlock_nodes: the streamed INFO was cut');
like($pg->safe_psql('postgres',
		"SELECT state || ': ' || last_error FROM redlock_stats_nodes WHERE node = '${\ $stream->addr }'"),
	qr/^failing: protocol error: reply larger than 1 MB/, '... the server says why');
$s->quit;
$stream->stop;
$silent->stop;

# ------------------------------------------------------------------------
# 2. The wake-up worker's subscriber connections owe no replies, yet a node
# that streams a huge pub/sub message is cut off there too; and a
# subscriber link that goes mute is pinged and reconnected.

# a holder of $res and a waiter for it (the worker subscribes on every node)
sub holder_and_waiter
{
	my ($res, $nodes) = @_;
	my $h = session(nodes => $nodes);
	like($h->query_safe("SELECT redlock_lock('$res', 60000)"), qr/^\d+$/, "$res: held");
	my ($w) = start_waiter($pg, $res, set => "SET redlock.nodes = '$nodes'",
		call => "redlock_lock('$res', 60000, wait_ms => 60000)", asleep => 0);
	return ($h, $w);
}

# the workers use the server's node list: set it for the whole server
sub server_nodes
{
	my ($nodes) = @_;
	$pg->safe_psql('postgres',
		"ALTER SYSTEM SET redlock.nodes = '$nodes'; SELECT pg_reload_conf();");
	$pg->poll_query_until('postgres', "SELECT current_setting('redlock.nodes') = '$nodes'")
	  or die "reload";
}

my $pushy = FakeRedis->new(mode => 'push_stream');
my $nodes = join(',', $r1->addr, $r2->addr, $pushy->addr);
server_nodes($nodes);
my $wpid = worker_pid($pg, 'wake-up');
my $whwm0 = proc_kb($wpid, 'VmHWM');
my $logpos = -s $pg->logfile;
my ($h, $w) = holder_and_waiter('pushed', $nodes);

# wait for the state either way: the worker took in most of what the fake
# can stream (it has no limit), or it cut the connection twice
my $cuts = 0;
for (1 .. 600)
{
	$cuts = grep { /closed by peer/ } $pushy->requests;
	last if $cuts >= 2 || $pushy->flooded >= 200 * 1024 * 1024;
	usleep(100_000);
}
my $whwm1 = proc_kb($wpid, 'VmHWM');
note "streamed to the wake-up worker: ${\ $pushy->flooded } bytes; connections cut: $cuts";
cmp_ok($cuts, '>=', 2, 'the wake-up worker cut the streaming subscriber connection');
cmp_ok($whwm1 - $whwm0, '<', 16 * 1024,
	"the wake-up worker's peak memory grew by ${\ ($whwm1 - $whwm0) } kB only");
like(slurp_file($pg->logfile, $logpos),
	qr/node \Q${\ $pushy->addr }\E is failing: protocol error: reply larger than 1 MB/,
	'the log says why');
is($h->query_safe("SELECT redlock_unlock('pushed')"), 't', 'the holder releases');
like($w->query_safe('SELECT :got'), qr/^\d+$/, 'the waiter is granted by the healthy majority');
is(worker_pid($pg, 'wake-up'), $wpid, 'the wake-up worker never crashed');
$h->quit;
$w->quit;
$pushy->stop;

my $mute = FakeRedis->new(mode => 'mute');
$nodes = join(',', $r1->addr, $r2->addr, $mute->addr);
server_nodes($nodes);
$logpos = -s $pg->logfile;
($h, $w) = holder_and_waiter('muted', $nodes);

# connections of the fake that subscribed: the worker's
sub subscriber_conns
{
	my %c;
	for ($mute->requests)
	{
		$c{$1} = 1 if /^conn (\d+): SUBSCRIBE/;
	}
	return sort { $a <=> $b } keys %c;
}
my @subs;
for (1 .. 300)
{
	@subs = subscriber_conns();
	last if @subs >= 2;
	usleep(100_000);
}
cmp_ok(scalar(@subs), '>=', 2, 'a mute subscriber link is replaced by a new one');
ok((grep { /^conn $subs[0]: PING/ } $mute->requests), '... after a PING it did not answer')
  if @subs;
like(slurp_file($pg->logfile, $logpos),
	qr/node \Q${\ $mute->addr }\E is failing: .*no reply for \d+ ms/,
	'the log says the node stopped answering');
$h->query_safe("SELECT redlock_unlock('muted')");
like($w->query_safe('SELECT :got'), qr/^\d+$/, 'and the waiter is granted');
$h->quit;
$w->quit;
$mute->stop;
server_nodes(join(',', map { $_->addr } @redis));

# ------------------------------------------------------------------------
# 3. One server under two names is refused, naming both entries; the
# server's identity is asked once per connection, never per call.
#
# The identity comes with each connection's first reply.  A session's first
# round may reach its majority over two distinct servers before the second
# name's first reply is in (the lease is then sound); the next call knows
# both identities and refuses.  So the session first reads redlock_nodes,
# which waits for every node, as an application's earlier calls would.

my $p1 = $r1->port;
my $dup_nodes = "127.0.0.1:$p1,127.0.0.2:$p1,${\ $r2->addr }";
($out, $err) = attempt(
	"SELECT count(*) FROM redlock_nodes; SELECT redlock_try_lock('dup', 5000)",
	nodes => $dup_nodes);
like($err, qr/ERROR:\s+RL004: redlock.nodes names the same Redis server twice: "127.0.0.1:$p1" and "127.0.0.2:$p1"/,
	'one server under two names: refused with RL004 naming both entries');
like($err, qr/DETAIL:\s+Both entries reach the Redis server with run_id [0-9a-f]{40}/,
	'... the detail gives its run_id');
is($r1->cli('KEYS', 'redlock:lock:dup*'), '', '... and no lock is left on it');
($out, $err) = attempt(
	"SELECT node, array_to_string(warnings, '; ') FROM redlock_nodes ORDER BY node",
	nodes => $dup_nodes);
is($err, '', 'redlock_nodes does not raise for it');
like($out, qr/^127\.0\.0\.2:$p1\|.*the same Redis server as 127\.0\.0\.1:$p1 \(run_id [0-9a-f]{40}\)/m,
	'redlock_nodes warns on the second entry');

# the reported case: the third entry down, and the call said "held elsewhere"
$r2->kill9;
($out, $err) = attempt("SELECT coalesce(redlock_try_lock('dup2', 5000)::text, 'NULL')",
	nodes => $dup_nodes);
isnt($out, 'NULL', 'with the third entry down: no NULL ("held elsewhere")');
like($err, qr/RL004: redlock.nodes names the same Redis server twice/, '... but RL004');
$r2->start;

# once per connection: ten lock calls, one INFO per node
$_->cli('CONFIG', 'RESETSTAT') for @redis;
$s = session();
my $granted = 0;
for my $i (1 .. 10)
{
	$granted++ if $s->query_safe("SELECT redlock_try_lock('fast', 5000)") =~ /^\d+$/;
	$s->query_safe("SELECT redlock_unlock('fast')");
}
is($granted, 10, 'ten leases in one session');
$s->quit;
for my $r (@redis)
{
	my $stats = $r->cli('INFO', 'commandstats');
	my ($info) = $stats =~ /cmdstat_info:calls=(\d+)/;
	my $eval = 0;
	$eval += $1 while $stats =~ /cmdstat_eval(?:sha)?:calls=(\d+)/g;
	# one connection of the session (a worker's reconnect could add one)
	ok(defined $info && $info >= 1 && $info <= 2,
		"node ${\ $r->addr }: INFO asked ${\ ($info // 0) } times for ${\ ($eval // 0) } scripts");
}

# ------------------------------------------------------------------------
# 4. Failures told in full words, with what is likely wrong.

# a long Redis error: a script error quoting where it happened.  The token
# counters hold lists, so the acquire script's GET fails.
for my $r ($r1, $r2)
{
	$r->cli('RPUSH', "wt:token-counter:$_", 'x') for 0 .. 63;
}
($out, $err) = attempt("SELECT redlock_try_lock('w', 5000)",
	nodes => join(',', $r1->addr, $r2->addr, $r3->addr), key_prefix => 'wt:');
like($err, qr/RL005/, 'a script error on a majority: RL005');
like($err, qr/\Q${\ $r1->addr }\E: Redis error: WRONGTYPE .* on \@user_script:\d+\.$/m,
	'the Redis error is quoted whole');
like($err, qr/HINT:\s+A key under redlock.key_prefix holds a value redlock did not write/,
	'... and the hint says what it means');

# TLS on one side only
my $tls = TlsFiles->new;
my $tls_node = $tls->node('server');
($out, $err) = attempt("SELECT redlock_try_lock('t', 5000)", nodes => $tls_node->addr);
like($err, qr/\Q${\ $tls_node->addr }\E: connection lost: (closed by the server|Connection reset by peer)/,
	'a TLS node reached without TLS: the connection is lost');
like($err, qr/HINT:\s+A node closed the connection before answering anything, as a Redis that accepts only TLS on that port does: if so, set redlock.tls_mode/,
	'... and the hint names redlock.tls_mode');
($out, $err) = attempt("SELECT redlock_try_lock('t', 5000)",
	nodes => $r1->addr, tls_mode => 'require');
like($err, qr/\Q${\ $r1->addr }\E: TLS handshake timed out after \d+ ms: the node never answered the TLS hello/,
	'a plain-TCP node under TLS: the handshake got no answer');
like($err, qr/HINT:\s+A node did not complete the TLS handshake: check that redlock.nodes names the nodes' TLS ports/,
	'... and the hint says what to check');

# cluster mode
my $cluster = RedisNode->new(cluster => 1);
($out, $err) = attempt(
	"SELECT array_to_string(warnings, '; ') FROM redlock_nodes", nodes => $cluster->addr);
like($out, qr/cluster mode is enabled \(cluster_enabled:1\)/, 'redlock_nodes warns about cluster mode');
($out, $err) = attempt("SELECT redlock_try_lock('c', 5000)", nodes => $cluster->addr);
like($err, qr/HINT:\s+A node runs in cluster mode/, 'a lock call on it: the hint says cluster mode');
$cluster->kill9;

# out of memory with noeviction
$r3->cli('CONFIG', 'SET', 'maxmemory', '1');
($out, $err) = attempt(
	"SELECT array_to_string(warnings, '; ') FROM redlock_nodes", nodes => $r3->addr);
like($out, qr/used_memory \(\d+ bytes\) is over maxmemory \(1 bytes\) with noeviction: the node refuses writes \(OOM\)/,
	'redlock_nodes warns about a node over maxmemory');
($out, $err) = attempt("SELECT redlock_try_lock('m', 5000)", nodes => $r3->addr);
like($err, qr/Redis error: OOM /, 'a lock call on it: OOM');
like($err, qr/HINT:\s+A node is out of memory and refuses writes/, '... and the hint says so');
$r3->cli('CONFIG', 'SET', 'maxmemory', '0');

# credentials and ACLs
$r3->cli('CONFIG', 'SET', 'requirepass', 'sekrit');
($out, $err) = attempt("SELECT redlock_try_lock('a', 5000)", nodes => $r3->addr);
like($err, qr/NOAUTH/, 'no password for a node that wants one: NOAUTH');
like($err, qr/HINT:\s+A node requires authentication: set redlock.password/, '... hint: set the password');
($out, $err) = attempt("SELECT redlock_try_lock('a', 5000)", nodes => $r3->addr,
	password => 'wrong');
like($err, qr/WRONGPASS/, 'a wrong password: WRONGPASS');
like($err, qr/HINT:\s+A node refused redlock.username and redlock.password/, '... hint: check them');
my $auth = "-a sekrit --no-auth-warning";
system("redis-cli -h 127.0.0.1 -p ${\ $r3->port } $auth ACL SETUSER lockless on '>pw' '~*' -\@all +ping +info >/dev/null") == 0
  or die "ACL SETUSER";
($out, $err) = attempt("SELECT redlock_try_lock('a', 5000)", nodes => $r3->addr,
	username => 'lockless', password => 'pw');
like($err, qr/NOPERM/, 'an ACL user without EVAL: NOPERM');
like($err, qr/HINT:\s+The node's ACL user lacks a command, key or channel that redlock uses: grant the minimal ACL given in redlock's documentation \(doc\/operating\.md\)/,
	'... hint: the ACL, and the page that gives it');
system("redis-cli -h 127.0.0.1 -p ${\ $r3->port } $auth CONFIG SET requirepass '' >/dev/null");

# ------------------------------------------------------------------------
# 5. A node that forks (AOF rewrite, snapshot) may stall: redlock_nodes
# shows it.  rdb-key-save-delay makes the child take its time.

for my $case ([ $r1, 'BGREWRITEAOF', qr/AOF rewrite in progress \(a fork\)/ ],
	[ $r2, 'BGSAVE', qr/RDB snapshot in progress \(a fork\)/ ])
{
	my ($r, $cmd, $want) = @$case;
	$r->cli('SET', "fill:$_", 'x' x 100) for 1 .. 40;
	$r->cli('CONFIG', 'SET', 'rdb-key-save-delay', '250000');
	$r->cli($cmd);
	my $seen = '';
	for (1 .. 50)
	{
		($seen) = attempt("SELECT array_to_string(warnings, '; ') FROM redlock_nodes",
			nodes => $r->addr);
		last if $seen =~ $want;
		usleep(100_000);
	}
	like($seen, $want, "$cmd in progress: redlock_nodes shows it");
	$r->cli('CONFIG', 'SET', 'rdb-key-save-delay', '0');
}

# ------------------------------------------------------------------------
nothing_crashed($pg, $pm_start);

$pg->stop;
done_testing();
