# Redlock's delayed restart, enforced (redlock.restart_quarantine): two
# PostgreSQL servers, east (A) and west (B), share 5 real Redis nodes without
# persistence.  A lease is granted to east by exactly nodes 1-3 (4 and 5
# down); node 1 restarts empty; 4 and 5 come back.  West, which had seen
# node 1 before its restart, must not be granted the lease while east's
# validity lasts: node 1 is quarantined, refusals name it, redlock_nodes
# shows until when, and west is granted once the quarantine has passed.
# The same with the quarantine off shows the double grant it prevents.
#
# Each lease is an interval on this host's clock: from its grant to the end
# of the validity its holder was told (observation time + validity_ms).
use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedlockTest;
use Test::More;
use Time::HiRes qw(time usleep);

my $quarantine_s = 12;
my $ttl_ms = 10000;    # within the quarantine, as doc/operating.md asks

my @redis = redis_nodes(5);
seed_epoch(@redis);    # new nodes: they count at once (028 shows the wait)
# 4 and 5 are down before either server ever reaches them
$_->kill9 for @redis[ 3, 4 ];

my ($east, $west) = redlock_pair(nodes => \@redis,
	conf => "redlock.restart_quarantine = '${quarantine_s}s'\n"
	  . "redlock.connect_timeout = '100ms'\n"
	  # nodes are up or refuse at once: a slow reply must not become a refusal
	  . "redlock.node_timeout = '1s'\n");
my %pm_start = map { $_->name => $_->safe_psql('postgres', 'SELECT pg_postmaster_start_time()') }
  ($east, $west);

# one attempt on $pg: (token or '', stderr, time before, time after)
sub try_lock
{
	my ($pg, $res, $ttl, $set) = @_;
	$set //= '';
	my $t0 = time;
	my ($rc, $out, $err) = $pg->psql('postgres',
		"$set SELECT redlock_try_lock('$res', $ttl)",
		extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	return ($out // '', $err // '', $t0, time);
}

# a lease granted to east by nodes 1-3 only; returns (session, token,
# end of its validity: lower and upper bound)
sub east_lease
{
	my ($res, $ttl) = @_;
	my $s = $east->background_psql('postgres', on_error_stop => 0);
	# (the control below takes a TTL longer than the quarantine: a WARNING)
	my $token = $s->query("SELECT redlock_lock('$res', $ttl)");
	$s->{stderr} = '';
	my $t0 = time;
	my $validity = $s->query_safe(
		"SELECT validity_ms FROM redlock_leases WHERE resource = '$res'");
	my $t1 = time;
	like($token, qr/^\d+$/, "east holds $res (token $token, validity $validity ms)");
	is(key_count($res, @redis[ 0 .. 2 ]), '1 1 1', "its lock is on nodes 1-3");
	return ($s, $token, $t0 + $validity / 1000, $t1 + $validity / 1000);
}

# --- west sees nodes 1-3 (a lease taken and released): it knows node 1
my ($tok) = try_lock($west, 'q:warm', 5000);
like($tok, qr/^\d+$/, 'west takes a lease while nodes 4 and 5 are down');
$west->safe_psql('postgres', "SELECT redlock_unlock('q:warm')");

# ---------------- the quarantine on ----------------
my ($a, $a_token, $a_end_lo, $a_end_hi) = east_lease('q:r', $ttl_ms);

my $restart_t0 = time;
$redis[0]->restart;    # empty: no persistence
my $restart_t1 = time;
is(key_count('q:r', $redis[0]), '0', 'node 1 restarted without the lock');

# while 4 and 5 are still down: too few nodes count (RL002), node 1 named
my ($out, $err, $t0) = try_lock($west, 'q:other', $ttl_ms);
is($out, '', 'west: no lease with node 1 quarantined and 4, 5 down');
like($err, qr/RL002/, 'refused with RL002 (no majority)');
like($err, qr/\Q${\ $redis[0]->addr }\E: quarantined until \d\d:\d\d:\d\d\.\d{3} \(redlock\.restart_quarantine\)/,
	"the detail names node 1, quarantined, and until when");

$_->start for @redis[ 3, 4 ];
seed_epoch(@redis[ 3, 4 ]);    # empty, as new: they count at once

# now 4 and 5 would grant with node 1: the quarantine refuses
($out, $err, $t0) = try_lock($west, 'q:r', $ttl_ms);
my $t_refused = time;
is($out, '', 'west is not granted the lease east holds');
is($err, '', 'refused as held (a majority answered)');
cmp_ok($t_refused, '<', $a_end_lo, "refused while east's validity lasts");

my ($rc, $o2, $e2) = $west->psql('postgres',
	"SELECT redlock_lock('q:r', $ttl_ms, wait_ms => 300)");
like($e2, qr/within wait_ms.*\Q${\ $redis[0]->addr }\E: quarantined until/s,
	'a wait that ends names node 1, quarantined');
cmp_ok(time, '<', $a_end_lo, "still within east's validity");

# redlock_nodes on west: node 1 quarantined until (its start + 12 s)
my $q = $west->safe_psql('postgres',
	"SELECT node, extract(epoch FROM quarantined_until) FROM redlock_nodes WHERE quarantined_until IS NOT NULL");
my ($qnode, $quntil) = split /\|/, $q;
is($qnode, $redis[0]->addr, 'redlock_nodes on west: node 1 (only) is quarantined');
cmp_ok($quntil, '>=', $restart_t0 + $quarantine_s - 1.5, 'until about its start + the quarantine');
cmp_ok($quntil, '<=', $restart_t1 + $quarantine_s + 1.5, '... and no later');
like($west->safe_psql('postgres',
		"SELECT warnings::text FROM redlock_nodes WHERE node = '${\ $redis[0]->addr }'"),
	qr/restart quarantine/, 'its warnings say why');
is($east->safe_psql('postgres',
		"SELECT node FROM redlock_nodes WHERE quarantined_until IS NOT NULL"),
	$redis[0]->addr, 'east, which saw node 1 before too, quarantines it as well');

# once the quarantine has passed, west is granted, after east's validity
ok(wait_for(sub {
	$west->safe_psql('postgres', 'SELECT count(quarantined_until) FROM redlock_nodes') eq '0'
}), 'the quarantine passes');
my ($b_token, $b_err, $b_start) = try_lock($west, 'q:r', $ttl_ms);
like($b_token, qr/^\d+$/, 'west is granted the lease once the quarantine has passed');
cmp_ok($b_start, '>=', $a_end_hi, "after the end of east's validity: no overlap");
cmp_ok($b_token, '>', $a_token, 'with a greater token');
$west->safe_psql('postgres', "SELECT redlock_unlock('q:r')");
$a->query("SELECT redlock_unlock('q:r')");
$a->quit;

# ---------------- the same with the quarantine off ----------------
# (a check that the scenario is real: the double grant it prevents)
# East must count node 1 again first: each server dates the node's start
# from its own INFO (uptime in whole seconds), so east's quarantine of it
# may end up to a second after west's.
ok(wait_for(sub {
	$east->safe_psql('postgres', 'SELECT count(quarantined_until) FROM redlock_nodes') eq '0'
}), "east's quarantine of node 1 passes too");
$_->kill9 for @redis[ 3, 4 ];
my ($a2, $a2_token, $a2_end_lo) = east_lease('q:s', 30000);
$redis[0]->restart;
$_->start for @redis[ 3, 4 ];
seed_epoch(@redis[ 3, 4 ]);    # empty, as new: they count at once
my ($b2, $b2_err) = try_lock($west, 'q:s', 30000, 'SET redlock.restart_quarantine = 0;');
my $b2_granted = time;
like($b2, qr/^\d+$/, 'quarantine off: west is granted the lease east holds (nodes 1, 4, 5)');
cmp_ok($b2_granted, '<', $a2_end_lo,
	"while east's validity lasts: the two intervals overlap (what the quarantine prevents)");
$a2->query("SELECT redlock_unlock('q:s')");
$a2->quit;

# ---------------- the setting ----------------
my ($rc3, $o3, $e3) = $west->psql('postgres', "SET redlock.restart_quarantine = '500ms'");
like($e3, qr/invalid value for parameter "redlock.restart_quarantine".*whole seconds/s,
	'a quarantine under a second is refused');
is($west->safe_psql('postgres', 'SHOW redlock.restart_quarantine'), "${quarantine_s}s",
	'the setting shows in its unit');
is($east->safe_psql('postgres', "SET redlock.restart_quarantine = 0; SHOW redlock.restart_quarantine"),
	'0', '0 turns it off');

nothing_crashed($_, $pm_start{ $_->name }, $_->name . ': ') for ($east, $west);
done_testing();
