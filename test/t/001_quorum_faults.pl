# Quorum behaviour with real Redis nodes failing: killed, stopped (SIGSTOP),
# restarted empty; tokens stay strictly increasing through all of it.
use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedisNode;
use RedlockTest;
use Test::More;
use Time::HiRes qw(time usleep);

my @redis = redis_nodes(5);
my $nodes = node_list(@redis);
# Nodes restarted here are needed for a majority at once (a restarted node
# is reconnected and granted; a node back during its backoff is asked):
# that is what these cases check, so the restart quarantine, which would
# keep them out (test/t/022_restart_quarantine.pl), is off.
# node_timeout 2 s: a busy machine can keep a running node off the CPU for
# longer than the default 50 ms, and the rounds here that need every
# running node (two of five down) must not lose one to that; the sections
# about stopped nodes set their own.
my $pg = redlock_cluster('main', nodes => \@redis,
	conf => "redlock.restart_quarantine = 0\nredlock.node_timeout = '2s'\n");

# one attempt; returns (token or '', stderr)
sub try_lock
{
	my ($res, $ttl, %opt) = @_;
	$ttl //= 5000;
	my $pre = $opt{pre} // '';
	my ($rc, $out, $err) = $pg->psql('postgres',
		"$pre SELECT redlock_try_lock('$res', $ttl)");
	return ($out, $err);
}

# take and release in one session; returns the token
sub lock_cycle
{
	my ($res, %opt) = @_;
	my $pre = $opt{pre} // '';
	return $pg->safe_psql('postgres',
		"$pre SELECT redlock_lock('$res', 5000) AS t \\gset\n"
		  . "SELECT redlock_unlock('$res') \\g /dev/null\nSELECT :t");
}

# --- two of five killed: still granted
$redis[3]->kill9;
$redis[4]->kill9;
my ($tok, $err) = try_lock('f:two-down');
like($tok, qr/^\d+$/, 'two of five nodes killed: lease still granted');

# --- three of five killed: a quick error naming every node's outcome
$redis[2]->kill9;
my $t0 = time;
($tok, $err) = try_lock('f:three-down', 60000);
my $took = time - $t0;
is($tok, '', 'three of five killed: no token');
like($err, qr/RL002|fewer than a majority of Redis nodes could answer/,
	'three of five killed: not-granted error');
like($err, qr/3 of 5 nodes failed; a majority is 3/, 'detail counts the failed nodes');
for my $i (2 .. 4)
{
	my $addr = $redis[$i]->addr;
	like($err, qr/\Q$addr\E: could not connect: Connection refused/,
		"detail names node $i as refusing connections");
}
like($err, qr/\Q${\ $redis[0]->addr }\E: (granted|not waited for \(outcome already decided\))/,
	'detail shows the healthy node granted or was not waited for');
cmp_ok($took, '<', 3, "refusal came quickly (${took}s, no hang)");
# its withdrawal goes out without waiting for the node's answer: waited for
# (10 s, well within the attempt's TTL of 60 s)
ok(no_keys('*', $redis[0]), 'the failed attempt left no lock key behind');

$_->start for @redis[2 .. 4];

# --- two of five stopped (SIGSTOP) with a huge node_timeout: granted without
# waiting for them, because a majority already decided
$redis[3]->pause;
$redis[4]->pause;
$t0 = time;
($tok, $err) = try_lock('f:two-stopped', 5000,
	pre => "SET redlock.node_timeout = '10s';");
$took = time - $t0;
like($tok, qr/^\d+$/, 'two of five stopped: lease granted');
cmp_ok($took, '<', 5, "granted without waiting for the stopped nodes (${took}s, node_timeout 10s)");
$redis[3]->resume;
$redis[4]->resume;

# --- three stopped: refused after node_timeout, not hanging
$redis[$_]->pause for 2 .. 4;
$t0 = time;
($tok, $err) = try_lock('f:three-stopped', 5000,
	pre => "SET redlock.node_timeout = '300ms';");
$took = time - $t0;
is($tok, '', 'three of five stopped: no token');
like($err, qr/timed out after 300 ms/, 'detail says the stopped nodes timed out');
cmp_ok($took, '<', 5, "refused after node_timeout (${took}s)");
$redis[$_]->resume for 2 .. 4;

# --- nodes restarted with an empty dataset: tokens keep increasing, because
# proposals come from the clock, which is ahead of every token issued so far
my $before = lock_cycle('f:empty');
$redis[1]->restart;
$redis[2]->restart;
my $after = lock_cycle('f:empty');
cmp_ok($after, '>', $before, 'tokens increase after two nodes lost their data');

# --- the node-subset sequence: tokens strictly increase.  One node's counter
# is raised far ahead of the clock so that proposals lose and the token must
# come from the counters and be written back (the second round).
my $ahead = $pg->safe_psql('postgres',
	"SELECT (extract(epoch FROM clock_timestamp()) * 1e6)::bigint + 1000000000000");
$redis[0]->cli('EVAL',
	"for i = 0, 63 do redis.call('SET', 'redlock:token-counter:' .. i, ARGV[1]) end",
	'0', $ahead);
my @tokens;
for my $down ([ 3, 4 ], [ 0, 1 ], [ 2, 3 ], [ 3, 4 ], [ 0, 1 ], [ 2, 3 ])
{
	$redis[$_]->pause for @$down;
	push @tokens,
	  lock_cycle('f:seq', pre => "SET redlock.node_timeout = '200ms';");
	$redis[$_]->resume for @$down;
}
note "tokens: @tokens";
ok($tokens[0] > $ahead, 'first token beat the counter that was ahead of the clock');
my $increasing = 1;
for my $i (1 .. $#tokens)
{
	$increasing = 0 unless $tokens[$i] > $tokens[ $i - 1 ];
}
ok($increasing, 'tokens strictly increase across shifting majorities');

# --- a restarted node is reconnected: afterwards it is needed for a majority
my $s = $pg->background_psql('postgres', on_error_stop => 0);
$s->query_safe("SELECT redlock_try_lock('f:warm'); SELECT redlock_unlock('f:warm')");
$redis[0]->restart;
usleep(2_500_000);    # longer than the largest reconnect backoff
$redis[1]->pause;
$redis[2]->pause;
my $out = $s->query("SELECT redlock_try_lock('f:reconnected') IS NOT NULL");
is($out, 't', 'a restarted node was reconnected and granted');
$redis[1]->resume;
$redis[2]->resume;
$s->query_safe("SELECT redlock_unlock_all()");

# --- one connection per node per backend across many cycles; successful
# calls log nothing
sub connections_received
{
	my ($node) = @_;
	$node->cli('INFO', 'stats') =~ /total_connections_received:(\d+)/
	  or die "no total_connections_received from ${\ $node->addr }";
	return $1;
}
my $clients_before = connections_received($redis[3]);
my $logpos = -s $pg->logfile;
$s->query_safe("SELECT count(redlock_try_lock('f:reuse')) + count(redlock_unlock('f:reuse')) FROM generate_series(1, 500)");
my $clients_after = connections_received($redis[3]);
# the second INFO's own redis-cli connection is the one new connection
is($clients_after - $clients_before, 1, '500 cycles opened no new connections to a node');
is(join('', grep { /redlock/ && !/LOG:  statement: / } split /\n/, slurp_file($pg->logfile, $logpos)), '',
	'500 successful cycles logged nothing');
$s->quit;

# --- a node slower than node_timeout keeps its connection, so the release of
# a lease held across the slow spell still reaches it (a dropped connection
# would lose the release and leave the key to its TTL).  node_timeout is
# 1 s: a node silent for longer is slow; one silent for ten times that,
# 10 s, would be dropped.  The node is stopped (SIGSTOP) while a call and
# the release are sent to it, the release more than twice node_timeout
# after the call (a connection dropped at node_timeout would be gone by
# then), and well before the 10 s.
my $slowpoke = $pg->background_psql('postgres');
$slowpoke->query_safe("SET redlock.node_timeout = '1s'; SELECT redlock_lock('f:slow', 60000)");
# the node's connections from backends (their last command a script), by id
sub backend_clients
{
	return sort map { /\bid=(\d+)\b/ ? $1 : () } grep { /\bcmd=eval/ } split /\n/, $redis[0]->cli('CLIENT', 'LIST');
}
# the call returned at a majority: the node's connection shows the script
# once the node has run it
my @clients_before;
ok(wait_for(sub { @clients_before = backend_clients(); @clients_before > 0 }),
	'the backend is connected to the node');
$redis[0]->pause;
# this round goes on without the node, which owes it a reply from now on
$slowpoke->query_safe("SELECT redlock_try_lock('f:other', 60000)");
my $silent_since = time;
usleep(100_000) while time - $silent_since < 2.5;
$slowpoke->query_safe("SELECT redlock_unlock('f:slow')");
my $silent_for = time - $silent_since;
$redis[0]->resume;
note sprintf 'the release was sent after %.1f s of silence', $silent_for;
ok(wait_for(sub { $redis[0]->cli('EXISTS', 'redlock:lock:f:slow') eq '0' }, 30),
	'the slow node applied the release pipelined behind its backlog');
my %after = map { $_ => 1 } backend_clients();
is(join(' ', grep { !$after{$_} } @clients_before), '',
	'and the backend kept its connection to the slow node (the same client ids)');
$slowpoke->quit;

# --- a release that cannot reach a node (it is down) is replayed when the
# node is back: with AOF the node still has the lock after its restart
my @durable = redis_nodes(3, args => [ '--appendonly', 'yes' ]);
my $durable_nodes = join(',', map { $_->addr } @durable);
my $replayer = $pg->background_psql('postgres');
$replayer->query_safe("SET redlock.nodes = '$durable_nodes'");
$replayer->query_safe("SELECT redlock_lock('f:replay', 60000)");
# the call returned at a majority: the node to be killed has run it too
wait_for(sub { $durable[0]->cli('EXISTS', 'redlock:lock:f:replay') eq '1' })
  or die 'the lock never reached the first durable node';
$durable[0]->kill9;
$replayer->query_safe("SELECT redlock_unlock('f:replay')");
$durable[0]->start;
is($durable[0]->cli('EXISTS', 'redlock:lock:f:replay'), '1',
	'the restarted node still holds the lock it had (AOF)');
usleep(2_200_000);    # past the reconnect backoff
# the first call reconnects; the kept release goes out with the connection
# (at the latest with the session's next call, if the quorum was decided
# before the connect completed)
$replayer->query_safe("SELECT redlock_try_lock('f:replay-other') IS NOT NULL");
$replayer->query_safe("SELECT redlock_try_lock('f:replay-other2') IS NOT NULL");
my $replayed = 0;
for (1 .. 50)
{
	$replayed = 1, last
	  if $durable[0]->cli('EXISTS', 'redlock:lock:f:replay') eq '0';
	# on a busy machine the connect may finish after those calls: each call
	# flushes what the connection holds
	$replayer->query_safe("SELECT count(*) FROM redlock_nodes");
	usleep(20_000);
}
ok($replayed, 'the release it missed was replayed on reconnect');

# --- the same for a release the node was sent but never answered: it
# went by its SHA1 (the connection had run the script), the node is killed
# while it owes the reply and comes back without the script, so the kept
# release must go to the new connection by its text
$replayer->query_safe("SELECT redlock_try_lock('f:replay2') > 0, redlock_unlock('f:replay2')");
$replayer->query_safe("SELECT redlock_lock('f:replay2', 60000)");
wait_for(sub { $durable[0]->cli('EXISTS', 'redlock:lock:f:replay2') eq '1' })
  or die 'the lock never reached the first durable node';
$durable[0]->cli('CONFIG', 'RESETSTAT');
$durable[0]->pause;
$replayer->query_safe("SELECT redlock_unlock('f:replay2')");
# killed while stopped, so it never reads the release (kill9 continues the
# process before it kills it)
kill 'KILL', $durable[0]->{pid};
$durable[0]->kill9;
# the session's next call finds the connection gone, and keeps the release
$replayer->query_safe("SELECT redlock_try_lock('f:replay-other3') IS NOT NULL");
$durable[0]->start;
is($durable[0]->cli('EXISTS', 'redlock:lock:f:replay2'), '1',
	'owed by SHA1: the restarted node still holds the lock (AOF)');
usleep(2_200_000);    # past the reconnect backoff
$replayed = 0;
for (1 .. 50)
{
	$replayed = 1, last
	  if $durable[0]->cli('EXISTS', 'redlock:lock:f:replay2') eq '0';
	$replayer->query_safe("SELECT count(*) FROM redlock_nodes");
	usleep(20_000);
}
ok($replayed, 'owed by SHA1: the release was replayed by its text on reconnect');
$replayer->quit;

# --- a node in reconnect backoff is still asked when the round needs it:
# A is back but in backoff, B is stalled; C alone is no majority of three
my $backoff = $pg->background_psql('postgres', on_error_stop => 0);
my $backoff_pid = $backoff->query_safe('SELECT pg_backend_pid()');
$backoff->query_safe("SET redlock.nodes = '${\ $redis[0]->addr },${\ $redis[1]->addr },${\ $redis[2]->addr }'");
$backoff->query_safe("SELECT redlock_try_lock('f:warmup') IS NOT NULL");
$logpos = -s $pg->logfile;
$redis[0]->kill9;
$backoff->query_safe("SELECT redlock_try_lock('f:backoff1') IS NOT NULL");
usleep(150_000);
$backoff->query_safe("SELECT redlock_try_lock('f:backoff2') IS NOT NULL");    # backoff now 200 ms
$redis[0]->start;
$redis[1]->pause;
$out = $backoff->query("SELECT redlock_try_lock('f:backoff3') IS NOT NULL");
is($out, 't', 'a node that came back during its backoff was asked and granted');
$backoff->{stderr} = '';
$redis[1]->resume;
$backoff->quit;
# one LOG line when the node went away, one when it answered again
my $addr0 = quotemeta($redis[0]->addr);
my @node0 = grep { /Redis node $addr0 / } split /\n/, slurp_file($pg->logfile, $logpos);
is(scalar(grep { /\[$backoff_pid\]|\b$backoff_pid\b/ && /stopped answering/ } @node0), 1,
	'the backend logged once that the killed node stopped answering')
  or diag join("\n", @node0);
is(scalar(grep { /\b$backoff_pid\b/ && /is answering again/ } @node0), 1,
	'and once that it is answering again');

# --- keys stay inside redlock.key_prefix whatever the resource name says
my @hostile = ('token-counter:0', '../token-counter:1', 'redlock:token-counter:2', '*',
	'lock:*', "a\r\n*1\r\n\$8\r\nFLUSHALL\r\n", "x') redis.call('FLUSHALL') --",
	'{hash}tag', 'other:key', "\\x00");
$redis[0]->cli('SET', 'outside:key', 'keep');
# the largest token counter on the node; -1 if any counter is not a number
my $max_counter_script = q{
local m = '0'
for _, k in ipairs(redis.call('KEYS', 'redlock:token-counter:*')) do
  local v = redis.call('GET', k)
  if not string.match(v, '^%d+$') then return '-1' end
  if #v > #m or (#v == #m and v > m) then m = v end
end
return m};
my $holder = $pg->background_psql('postgres');
for my $name (@hostile)
{
	my $q = $name;
	$q =~ s/'/''/g;
	$holder->query_safe("SELECT redlock_lock('$q', 60000)");
}
# count on the server: some names hold CR/LF, so no line-based listing.
# The calls returned at a majority: the node may run the last ones later.
my $count_script = q{
local inside, outside = 0, 0
for _, k in ipairs(redis.call('KEYS', '*')) do
  if string.sub(k, 1, 13) == 'redlock:lock:' then inside = inside + 1
  elseif string.sub(k, 1, 22) ~= 'redlock:token-counter:' and k ~= 'outside:key'
    and k ~= 'redlock:epoch' then outside = outside + 1 end
end
return {inside, outside}};
my ($inside, $outside);
wait_for(sub { ($inside, $outside) = split /\n/, $redis[0]->cli('EVAL', $count_script, '0'); $inside >= @hostile });
is($outside, 0, 'hostile names created no key outside redlock:lock:* (but the counters and the epoch)');
is($redis[0]->cli('GET', 'outside:key'), 'keep', 'a key outside the prefix is untouched');
like($redis[0]->cli('EVAL', $max_counter_script, '0'), qr/^[1-9]\d*$/,
	'every token counter is still a positive number');
is($inside, scalar(@hostile), 'one lock key per hostile name, each under redlock:lock:');
$holder->quit;

$pg->stop;
done_testing();
