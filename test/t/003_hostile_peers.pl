# Hostile peers: a fake Redis server (test/perl/FakeRedis.pm) that answers
# wrongly in every way we could think of.  For each kind of wrong answer:
# a clear error (RL002/RL005) or a NULL grant, never a crash, never a
# backend hung past its deadline, and no lease left behind on the healthy
# nodes.  With the liar in the minority, the healthy majority still grants.
# A call that hangs meets statement_timeout (30 s, far beyond any deadline
# of these calls), and its error fails the checks of the answer: no elapsed
# time is asserted (psql start-up and a busy machine are in it).
use strict;
use warnings FATAL => 'all';

use FakeRedis;
use ReadmeSQL;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedlockTest;
use Test::More;
use Time::HiRes qw(time usleep);

my @redis = redis_nodes(2);
my $pg = redlock_cluster('hostile', nodes => \@redis,
	# node_timeout 500 ms: the healthy nodes and the fake (a Perl process)
	# answer well within it on a busy machine
	conf => "redlock.node_timeout = 500\nredlock.connect_timeout = 1000\n"
	  . "redlock.retry_delay = 20\nredlock.retry_jitter = 10\n");
my $pm_start = $pg->safe_psql('postgres', 'SELECT pg_postmaster_start_time()');

# doc/testing.md counts the fake server's ways of answering wrongly
like(slurp_file(ReadmeSQL::doc_path('testing.md')), qr/answers wrongly in ${\ scalar @FakeRedis::MODES } ways/,
	'doc/testing.md counts the fake server\'s modes right (' . scalar(@FakeRedis::MODES) . ')');

# lock keys of a key prefix on a real node
sub keys_left
{
	my ($node, $prefix) = @_;
	my $out = $node->cli('KEYS', "${prefix}lock:*");
	return $out;
}

# keys are released without waiting for the answer: give them a moment
sub no_keys_left
{
	my ($prefix) = @_;
	return wait_for(sub { !grep { keys_left($_, $prefix) ne '' } @redis }, 10);
}

# run SQL in a fresh session with the given node list; returns
# (stdout, stderr, seconds)
sub run_sql
{
	my ($nodes, $prefix, $sql) = @_;
	my $t0 = time;
	my ($rc, $out, $err) = $pg->psql('postgres',
		"SET statement_timeout = '30s'; SET redlock.nodes = '$nodes'; SET redlock.key_prefix = '$prefix';\n$sql",
		extra_params => [ '-v', 'VERBOSITY=verbose' ],
		on_error_stop => 0,
		timeout => 60);
	return ($out, $err, time - $t0);
}

my %outcomes;
for my $mode (@FakeRedis::MODES)
{
	my @fake = map { FakeRedis->new(mode => $mode) } 1 .. 2;
	my $prefix = "h-$mode:";

	# --- the liars are the majority: no grant, a clear answer, quickly
	my $nodes = join(',', $redis[0]->addr, map { $_->addr } @fake);
	my ($out, $err, $took) = run_sql($nodes, $prefix,
		"SELECT coalesce(redlock_try_lock('res', 5000)::text, 'NULL');\n"
		  . "SELECT 'alive', count(*) FROM redlock_leases;");
	my $first = (split /\n/, $out)[0] // '';
	my ($state) = $err =~ /ERROR:\s+(\w{5}):/;
	$state //= '';
	if ($mode eq 'grant' || $mode eq 'counter_ahead')
	{
		# well-formed answers are believed (a liar majority is not in the model)
		like($first, qr/^\d+$/, "$mode, majority fake: granted (well-formed answers)");
	}
	elsif ($mode eq 'nil_array')
	{
		is($first, 'NULL', "$mode, majority fake: NULL grant (nil means held)");
	}
	else
	{
		like($state, qr/^RL00[25]$/,
			"$mode, majority fake: refused with RL002/RL005 (got '$state')")
		  or diag $err;
		like($err, qr/\Q${\ $fake[0]->addr }\E: /, "$mode: the detail names the fake node")
		  if $state && $mode ne 'counter_max';
	}
	like($out, qr/alive\|0/, "$mode, majority fake: the backend lives on and holds nothing")
	  unless $mode eq 'grant' || $mode eq 'counter_ahead';
	unlike($err, qr/statement timeout/, "$mode, majority fake: answered, no hang (${\ sprintf '%.2f', $took }s)");
	$outcomes{$mode} = $state || $first;

	# the waiting form must not wait on a liar majority either (except for
	# "held", which it waits out until lock_timeout)
	($out, $err, $took) = run_sql($nodes, $prefix . 'w:',
		"SET lock_timeout = '3s';\nSELECT redlock_lock('res', 5000) IS NOT NULL AS got;");
	($state) = $err =~ /ERROR:\s+(\w{5}):/;
	$state //= '';
	if ($mode eq 'grant' || $mode eq 'counter_ahead')
	{
		is($out, 't', "$mode, majority fake: redlock_lock granted");
	}
	elsif ($mode eq 'nil_array')
	{
		is($state, '55P03', "$mode: redlock_lock waits until lock_timeout");
	}
	else
	{
		like($state, qr/^RL00[25]$/, "$mode: redlock_lock refused at once (got '$state')");
	}
	unlike($err, qr/statement timeout/,
		"$mode, majority fake: redlock_lock answered, no hang (${\ sprintf '%.2f', $took }s)");
	ok(no_keys_left($prefix) && no_keys_left($prefix . 'w:'),
		"$mode, majority fake: no lease left on the healthy node");

	# --- the liar is the minority: the healthy majority grants, the unlock
	# releases, nothing is left behind
	$nodes = join(',', $redis[0]->addr, $redis[1]->addr, $fake[0]->addr);
	($out, $err, $took) = run_sql($nodes, $prefix . 'm:',
		"SELECT coalesce(redlock_try_lock('res', 5000)::text, 'NULL');\n"
		  . "SELECT redlock_extend('res', 5000) > 0;\n"
		  . "SELECT redlock_unlock('res');\n"
		  . "SELECT 'alive', count(*) FROM redlock_leases;");
	($state) = $err =~ /ERROR:\s+(\w{5}):/;
	$state //= '';
	$first = (split /\n/, $out)[0] // '';
	if ($mode eq 'counter_max' && $state ne '')
	{
		# the liar answered before the healthy majority did: a well-formed
		# counter with no greater token, a clear error
		is($state, 'RL005', "$mode, minority fake: counter exhausted is RL005");
	}
	else
	{
		like($first, qr/^\d+$/, "$mode, minority fake: the healthy majority grants")
		  or diag $err;
		like($out, qr/^t\nt\nalive\|0$/m, "$mode, minority fake: extended and released");
	}
	unlike($err, qr/statement timeout/,
		"$mode, minority fake: done, no hang (${\ sprintf '%.2f', $took }s)");
	ok(no_keys_left($prefix . 'm:'), "$mode, minority fake: no lease left behind");

	is(join('', map { $_->died } @fake), '', "$mode: the fake servers ran their mode to the end");
	$_->stop for @fake;
}
note join(', ', map { "$_=$outcomes{$_}" } @FakeRedis::MODES);

# --- nested arrays are refused by our own reader limit (two levels), not by
# whatever limit the hiredis version has (0.14: 7 levels; 1.2: none, and a
# deep enough nesting overflowed the stack)
for my $mode (qw(nest5 deep_nest nest_huge))
{
	my @fake = map { FakeRedis->new(mode => $mode) } 1 .. 2;
	my ($out, $err) = run_sql(join(',', $redis[0]->addr, map { $_->addr } @fake),
		"n-$mode:", "SELECT redlock_try_lock('res', 5000);");
	like($err, qr/\Q${\ $fake[0]->addr }\E: protocol error: array reply nested too deeply/,
		"$mode: refused by our reader as nested too deeply");
	is(join('', map { $_->died } @fake), '', "$mode: the fake servers ran their mode to the end");
	$_->stop for @fake;
}

# --- one long-lived session meets every liar in turn and still works after:
# with the liar in the minority, each lock is granted (or, for counter_max,
# refused with RL005) and released, and nothing stays held
my $s = $pg->background_psql('postgres', on_error_stop => 0);
$s->query_safe("SET statement_timeout = '30s'");
$s->query_safe("\\set VERBOSITY verbose");
my @long_wrong;
for my $mode (@FakeRedis::MODES)
{
	my $fake = FakeRedis->new(mode => $mode);
	my $nodes = join(',', $redis[0]->addr, $fake->addr, $redis[1]->addr);
	$s->query_safe("SET redlock.nodes = '$nodes'");
	for my $i (1 .. 3)
	{
		$s->{stderr} = '';
		my $tok = $s->query("SELECT redlock_try_lock('long:$i', 2000)");
		my $err = $s->{stderr};
		$s->{stderr} = '';
		my $unl = $s->query("SELECT redlock_unlock('long:$i')");
		my $unl_err = $s->{stderr};
		my $held = $s->query("SELECT count(*) FROM redlock_leases");
		# the two healthy nodes are a majority: the release is confirmed
		# without a word, whatever the liar answers
		my $ok = ($tok =~ /^\d+$/ && $unl eq 't' && $unl_err !~ /WARNING/)
		  || ($mode eq 'counter_max' && $err =~ /ERROR:  RL005:/);
		push @long_wrong,
		  "$mode #$i: token '$tok', unlock '$unl', error '$err', unlock said '$unl_err'"
		  unless $ok && $held eq '0';
	}
	$s->{stderr} = '';
	push @long_wrong, "$mode: " . $fake->died if $fake->died;
	$fake->stop;
}
is(scalar(@long_wrong), 0, 'one session went through every liar: each lock granted and released')
  or diag join("\n", @long_wrong);
$s->query_safe("SET redlock.nodes = '${\ $redis[0]->addr },${\ $redis[1]->addr }'");
like($s->query_safe("SELECT redlock_try_lock('long:end', 2000)"), qr/^\d+$/,
	'and then takes a lease on the healthy nodes');
is($s->query_safe("SELECT redlock_unlock_all(); SELECT count(*) FROM redlock_leases"),
	"\n0", 'and releases it');
$s->quit;
ok(no_keys_left('redlock:'), 'the long-lived session left nothing behind');

# --- a slow but healthy node: every answer 200 ms late, well within
# node_timeout.  Rounds decided by the fast majority go by (a few thousand a
# second) without waiting for it, so it owes hundreds of replies at a
# time; it must not be declared down for that (it was, at 64 owed replies).
my $slow = FakeRedis->new(mode => 'delay');
my $logpos = -s $pg->logfile;
my ($out, $err, $took) = run_sql(
	join(',', $redis[0]->addr, $redis[1]->addr, $slow->addr), 'slow:',
	"SET redlock.node_timeout = '2s';\n"
	  . "DO \$\$ BEGIN FOR g IN 1 .. 2000 LOOP\n"
	  . "  PERFORM redlock_try_lock('s' || g, 5000); PERFORM redlock_unlock('s' || g);\n"
	  . "  PERFORM pg_sleep(0.0005);\n"
	  . "END LOOP; END \$\$;\nSELECT 'done';");
is($out, 'done', 'with a slow node: 2000 lock/unlock cycles') or diag $err;
unlike(slurp_file($pg->logfile, $logpos), qr/stopped answering/,
	'the slow but healthy node was never declared down');
my $sent = 0;
for (1 .. 100)
{
	$sent = grep { /EVAL/ } $slow->requests;
	last if $sent >= 4000;
	usleep(50_000);
}
cmp_ok($sent, '>=', 4000, 'and it was sent every request');
is($slow->died, '', 'the slow fake server ran to the end');
$slow->stop;

# --- many leases released at once while every node answers releases late:
# the releases are pipelined, but never more than a connection may owe, so
# every node gets every release (it used to fail the nodes past 1024 owed
# replies and drop the rest of the releases)
my @lagging = map { FakeRedis->new(mode => 'slow_release') } 1 .. 3;
($out, $err, $took) = run_sql(join(',', map { $_->addr } @lagging), 'lag:',
	"SET redlock.node_timeout = '5s';\n"
	  . "SELECT count(redlock_try_lock('l' || g, 60000)) FROM generate_series(1, 1100) g;\n"
	  . "SELECT redlock_unlock_all();\nSELECT 'done';");
like($out, qr/^1100\n\ndone$/, '1100 leases taken and released on lagging nodes') or diag $err;
my @released;
for (1 .. 100)
{
	# one release command carries many leases: count the leases
	@released = map {
		my $n = 0;
		$n += $_ for map { /EVAL(?:SHA)? release (\d+)/ ? $1 : 0 } $_->requests;
		$n
	} @lagging;
	last unless grep { $_ < 1100 } @released;
	usleep(50_000);
}
is("@released", '1100 1100 1100', 'every lagging node was sent every release');
is(join('', map { $_->died } @lagging), '', 'the lagging fake servers ran to the end');
$_->stop for @lagging;

# --- no backend crashed: the postmaster never restarted
nothing_crashed($pg, $pm_start);

$pg->stop;
done_testing();
