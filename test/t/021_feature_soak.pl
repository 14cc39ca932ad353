# The feature soak: two PostgreSQL servers sharing five Redis nodes (AOF,
# appendfsync always), three sessions on each taking leases on three hot
# resources as an application does, one statement at a time: transaction
# leases, session leases, try_lock, leases extended with redlock_extend,
# keep-alive leases held past their TTL, waits with wait_ms (so that local
# wake-ups and handoffs across the servers happen), a second lease of the
# same session meanwhile, holders that stall past their TTL, and a fenced
# write with the token while holding (test/perl/FeatureSoak.pm).
#
# Meanwhile a nemesis, at random from a seed, with at most two nodes out at
# once (a node in its restart quarantine counts as out): stops one or two
# nodes (SIGSTOP), stops two and then wipes one of the three that granted
# meanwhile (the delayed restart's own case), kills one (kill -9) and
# restarts it from its AOF, wipes one's data and restarts it, SIGTERMs a
# server's wake-up or keep-alive worker, reloads a server's configuration
# unchanged and with a real change of a setting, terminates a lease holder,
# and jumps one node's clock forward past every lease's TTL (libfaketime).
#
# Two phases.  A short control phase with redlock.restart_quarantine = 0
# wipes nodes of a bare majority: the overlaps it finds are what the
# quarantine prevents (reported, not failed).  Then the quarantine is turned
# on (by a reload, longer than every TTL of the workload) and, once every
# statement begun without it has ended, the main phase runs every fault.
#
# The checker (FeatureSoak::check) reads the history: no two holders' lease
# intervals on one resource overlap (only those across a clock jump,
# Redlock's known limit, and across a wipe without the quarantine are
# counted apart), tokens increase in the order of the grants, every fenced
# row accepted only increasing tokens (an audit trigger logs every accepted
# update), and both servers lease again within 2 s of the end of the
# faults.  It first proves on a constructed history that it reports each
# kind of violation.
#
# SOAK_SECONDS (default 60): how long the faults go on, the control phase
# (SOAK_CONTROL_SECONDS, default 10) included; SOAK_SEED (printed) replays
# a schedule.  The history (the sessions' events, the faults, the audit,
# the phases' times) goes to SOAK_HISTORY if set, else to a fresh directory
# under /tmp that is removed when every check passed; its name is printed.
# test/soak-picture.sh draws it.
use strict;
use warnings FATAL => 'all';

use File::Copy ();
use File::Path qw(make_path rmtree);
use File::Temp ();
use FeatureSoak;
use JSON::PP ();
use POSIX ();
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedisNode;
use RedlockTest qw(faketime_preload);
use Test::More;
use Time::HiRes qw(time usleep);

my $seconds = $ENV{SOAK_SECONDS} // 60;
my $seed = length($ENV{SOAK_SEED} // '') ? $ENV{SOAK_SEED} : int(time) % 100000;
my $per_server = 3;
my $resources = 3;
my $tail = 5;    # fault-free seconds at the end
# the quarantine of the main phase: longer than every TTL of the workload
my $quarantine_s = int($FeatureSoak::MAX_TTL_MS / 1000) + 1;
my $control = $ENV{SOAK_CONTROL_SECONDS} // 10;    # its faults: quarantine off
# between the phases, no node faults while the quarantine turns on: longer
# than a statement begun before the reload (a wait lasts up to 4 s)
my $switch = 6;
my $main = $seconds - $control - $switch;
$main = 20 if $main < 20;
note "feature soak: seed $seed, $control s of control faults (quarantine off), $switch s to turn"
  . " the quarantine ($quarantine_s s) on, $main s of faults with it, $per_server sessions per server";

my $histdir = $ENV{SOAK_HISTORY}
  // File::Temp::tempdir("redlock-soak-$seed-XXXX", TMPDIR => 1, CLEANUP => 0);
make_path($histdir);
unlink glob("$histdir/*.jsonl"), glob("$histdir/*.json"), glob("$histdir/*.log"),
  "$histdir/summary.txt";
note "history in $histdir (kept when a check fails, or when named by SOAK_HISTORY)";

# ---------- 1. the checker can fail ----------
{
	my @ev = (
		# x: east 1 holds [100.1, 101.5); west 2 is granted at 101.0
		{ ev => 'grant', lease => 'a', res => 'x', tok => 50, kind => 'session',
			start => 100.0, ret => 100.1, server => 'east', pid => 1 },
		{ ev => 'obs', lease => 'a', t => 100.1, v => 2000 },
		{ ev => 'release', lease => 'a', t => 101.5 },
		{ ev => 'grant', lease => 'b', res => 'x', tok => 60, kind => 'session',
			start => 100.2, ret => 101.0, server => 'west', pid => 2 },
		{ ev => 'obs', lease => 'b', t => 101.0, v => 2000 },
		{ ev => 'release', lease => 'b', t => 101.2 },
		# y: the same overlap, after a clock jump at 200.5
		{ ev => 'grant', lease => 'c', res => 'y', tok => 70, kind => 'session',
			start => 200.0, ret => 200.1, server => 'east', pid => 1 },
		{ ev => 'obs', lease => 'c', t => 200.1, v => 2000 },
		{ ev => 'grant', lease => 'd', res => 'y', tok => 80, kind => 'session',
			start => 200.6, ret => 201.0, server => 'west', pid => 2 },
		{ ev => 'obs', lease => 'd', t => 201.0, v => 2000 },
		# z: a token going backwards (granted after e returned, smaller)
		{ ev => 'grant', lease => 'e', res => 'z', tok => 90, kind => 'session',
			start => 300.0, ret => 300.1, server => 'east', pid => 1 },
		{ ev => 'obs', lease => 'e', t => 300.1, v => 500 },
		{ ev => 'grant', lease => 'f', res => 'z', tok => 85, kind => 'session',
			start => 301.0, ret => 301.1, server => 'west', pid => 2 },
		# w: a holder terminated at 400.5 is no longer a holder at 401
		{ ev => 'grant', lease => 'g', res => 'w', tok => 100, kind => 'session',
			start => 400.0, ret => 400.1, server => 'east', pid => 3 },
		{ ev => 'obs', lease => 'g', t => 400.1, v => 2000 },
		{ ev => 'grant', lease => 'h', res => 'w', tok => 110, kind => 'session',
			start => 400.2, ret => 401.0, server => 'west', pid => 2 },
		{ ev => 'obs', lease => 'h', t => 401.0, v => 2000 },
		# v: the same session re-taking its lease is not an overlap
		{ ev => 'grant', lease => 'i', res => 'v', tok => 120, kind => 'session',
			start => 500.0, ret => 500.1, server => 'east', pid => 1 },
		{ ev => 'obs', lease => 'i', t => 500.1, v => 2000 },
		{ ev => 'grant', lease => 'j', res => 'v', tok => 130, kind => 'session',
			start => 500.2, ret => 500.3, server => 'east', pid => 1 },
		{ ev => 'obs', lease => 'j', t => 500.3, v => 2000 },
		# u: a holder told 0 ms (expired) at 602 no longer holds at 601
		{ ev => 'grant', lease => 'k', res => 'u', tok => 140, kind => 'pause',
			start => 600.0, ret => 600.1, server => 'east', pid => 1 },
		{ ev => 'obs', lease => 'k', t => 600.1, v => 500 },
		{ ev => 'obs', lease => 'k', t => 602.0, v => 0 },
		{ ev => 'grant', lease => 'l', res => 'u', tok => 150, kind => 'session',
			start => 600.2, ret => 601.0, server => 'west', pid => 2 },
		{ ev => 'obs', lease => 'l', t => 601.0, v => 2000 },
		# s: a lease granted while pg_terminate_backend() ran (700.0 to
		# 700.1) may have ended at once
		{ ev => 'grant', lease => 'm', res => 's', tok => 160, kind => 'session',
			start => 700.05, ret => 700.06, server => 'east', pid => 4 },
		{ ev => 'obs', lease => 'm', t => 700.06, v => 2000 },
		{ ev => 'grant', lease => 'n', res => 's', tok => 170, kind => 'session',
			start => 700.0, ret => 700.2, server => 'west', pid => 2 },
		{ ev => 'obs', lease => 'n', t => 700.2, v => 2000 });
	my @terminated = ({ kind => 'terminate', server => 'east', pid => 3, t => 400.5, t_end => 400.6 },
		{ kind => 'terminate', server => 'east', pid => 4, t => 700.0, t_end => 700.1 });
	my $r = FeatureSoak::check(
		events => \@ev,
		faults => [ { kind => 'clock', t => 200.5 }, @terminated ],
		audit => [ { row => 1, old => undef, new => 10 }, { row => 1, old => 10, new => 20 },
			{ row => 1, old => 20, new => 15 }, { row => 2, old => 5, new => 5 } ]);
	is(join(' ', map { "$_->{res}:$_->{first}/$_->{second}" } @{ $r->{overlaps} }), 'x:a/b',
		'checker self-test: the overlap of two holders is reported, and only it');
	is(join(' ', map { "$_->{res}:$_->{first}/$_->{second}" } @{ $r->{overlaps_clock} }), 'y:c/d',
		'checker self-test: an overlap across a clock jump is counted apart');
	is(join(' ', map { "$_->{res}:$_->{earlier}/$_->{later}" } @{ $r->{token_order} }), 'z:e/f',
		'checker self-test: a token going backwards is reported');
	is(join(' ', map { "$_->{row}:$_->{new}" } @{ $r->{fence} }), '1:15 2:5',
		'checker self-test: accepted stale and equal tokens are reported');
	my $r2 = FeatureSoak::check(events => \@ev, faults => [ { kind => 'wipe', t => 200.5 } ],
		audit => []);
	is(scalar @{ $r2->{overlaps_wipe} }, 1,
		'checker self-test: an overlap across a wipe without the quarantine is counted apart');
	my $r3 = FeatureSoak::check(events => \@ev,
		faults => [ { kind => 'wipe', t => 200.5, quarantine => 4 }, @terminated ], audit => []);
	is(join(' ', map { "$_->{res}:$_->{first}/$_->{second}" } @{ $r3->{overlaps} }), 'x:a/b y:c/d',
		'checker self-test: an overlap across a wipe under the quarantine is an overlap');
}

# ---------- 2. the nodes, one of them on a clock it can jump ----------

my ($preload, $why_not) = faketime_preload();
my $fake_node = $preload ? 4 : undef;
diag "$why_not: no clock jumps" unless defined $fake_node;
my $clock_file = PostgreSQL::Test::Utils::tempdir('clock') . '/offset';
my $clock_offset = 0;
sub set_clock
{
	open my $fh, '>', "$clock_file.tmp" or die $!;
	print $fh sprintf("%+d\n", $clock_offset);
	close $fh;
	rename "$clock_file.tmp", $clock_file or die $!;
}
set_clock();
# run $code with node $i's environment: libfaketime for the clock node
# (libc's malloc ahead of it: redis-server's jemalloc reads the clock while
# libfaketime starts, which it cannot survive; see 019)
sub node_env
{
	my ($i, $code) = @_;
	return $code->() unless defined $fake_node && $i == $fake_node;
	local $ENV{LD_PRELOAD} = $preload;
	local $ENV{FAKETIME_TIMESTAMP_FILE} = $clock_file;
	local $ENV{FAKETIME_NO_CACHE} = 1;
	local $ENV{FAKETIME_DONT_FAKE_MONOTONIC} = 1;
	return $code->();
}
my @redis = map {
	my $i = $_;
	node_env($i, sub { RedisNode->new(args => [ '--appendonly', 'yes', '--appendfsync', 'always' ]) });
} 0 .. 4;
my $nodes = join(',', map { $_->addr } @redis);

sub start_node
{
	my ($i) = @_;
	for my $try (1 .. 5)
	{
		return if eval { node_env($i, sub { $redis[$i]->start }); 1 };
		diag "restarting node $i: $@";
		usleep(300_000);
	}
	die "could not restart node $i";
}

# ---------- 3. two servers; the fenced rows live on the first ----------

my @pg;
for my $name ('east', 'west')
{
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init;
	$node->append_conf('postgresql.conf', <<"EOC");
shared_preload_libraries = 'redlock'
redlock.nodes = '$nodes'
redlock.node_timeout = 100
# the control phase's; the main phase turns it on
redlock.restart_quarantine = 0
max_connections = 40
log_line_prefix = '%m [%p] %a '
EOC
	$node->start;
	$node->safe_psql('postgres', 'CREATE EXTENSION redlock');
	push @pg, $node;
}
my ($east, $west) = @pg;
my %server = (east => $east, west => $west);
$east->safe_psql('postgres', <<"SQL");
CREATE TABLE fsoak_rows (id int PRIMARY KEY, v bigint NOT NULL DEFAULT 0, fence_token bigint,
	writer text);
CREATE TRIGGER fence BEFORE UPDATE ON fsoak_rows
	FOR EACH ROW EXECUTE FUNCTION redlock_fence();
CREATE TABLE fsoak_audit (seq bigserial PRIMARY KEY, row_id int, old_token bigint,
	new_token bigint, writer text, at timestamptz DEFAULT clock_timestamp());
CREATE FUNCTION fsoak_audit() RETURNS trigger LANGUAGE plpgsql AS \$\$
BEGIN
	INSERT INTO fsoak_audit (row_id, old_token, new_token, writer)
	VALUES (NEW.id, OLD.fence_token, NEW.fence_token, NEW.writer);
	RETURN NEW;
END \$\$;
CREATE TRIGGER audit AFTER UPDATE ON fsoak_rows
	FOR EACH ROW EXECUTE FUNCTION fsoak_audit();
INSERT INTO fsoak_rows (id) SELECT generate_series(1, $resources);
SQL

# ---------- 4. the sessions, each a process of its own ----------

my $t0 = time;
my $control_end = $t0 + $control;
my $main_start = $control_end + $switch;
my $faults_end = $main_start + $main;
my $deadline = $faults_end + $tail;
my (@kids, @files);
for my $sname (qw(east west))
{
	for my $s (1 .. $per_server)
	{
		my $name = "$sname$s";
		my $file = "$histdir/session-$name.jsonl";
		push @files, $file;
		my $pid = fork;
		die "fork: $!" unless defined $pid;
		if ($pid == 0)
		{
			my $ok = eval {
				FeatureSoak::run_session(
					name => $name, server => $sname, file => $file,
					connstr => $server{$sname}->connstr('postgres'),
					data_connstr => $sname eq 'east' ? undef : $east->connstr('postgres'),
					deadline => $deadline, resources => $resources,
					seed => $seed * 100 + length($sname) * 10 + $s);
				1;
			};
			if (!$ok)
			{
				open my $fh, '>', "$file.error";
				print $fh $@;
			}
			POSIX::_exit($ok ? 0 : 1);
		}
		push @kids, $pid;
	}
}

my %probe;
for my $s ('east', 'west')
{
	$probe{$s} = FeatureSoak::Psql->new($server{$s}->connstr('postgres'), "probe-$s");
	$probe{$s}->query("SELECT redlock_unlock('probe:$s:0') FROM (SELECT redlock_lock('probe:$s:0', 2000)) s");
}

# ---------- 5. the nemesis ----------

srand($seed);
my @faults;    # { kind, t, ... } in the order they happened
my %count;     # faults by label ("control: " ahead in the control phase)
my @heal;      # [ time, sub ]: what ends a fault, run in time order
my @out = (0) x 5;        # node i is stopped or down
my @started = (0) x 5;    # when node i last restarted
my $phase = 'control';
my $quarantine_now = 0;    # redlock.restart_quarantine in force, in s
# a restarted node is out of every majority until the quarantine has passed
# since its start (which the servers read from its uptime in whole
# seconds: 2 s to spare)
my $quarantined = sub {
	my ($i) = @_;
	return $quarantine_now && $started[$i] + $quarantine_now + 2 > time;
};
my $pick = sub { return $_[ int(rand(@_)) ]; };
my $fault = sub {
	my (%f) = @_;
	$f{t} //= time;
	$f{phase} = $phase;
	$f{quarantine} = $quarantine_now;
	push @faults, \%f;
	$count{ ($phase eq 'control' ? 'control: ' : '') . $f{label} }++;
	return \%f;
};
my $up_nodes = sub { return grep { !$out[$_] && !$quarantined->($_) } 0 .. 4; };
my $n_out = sub { return 5 - scalar $up_nodes->(); };
my $worker_pid = sub {
	my ($pg, $type) = @_;
	return $pg->safe_psql('postgres',
		"SELECT pid FROM pg_stat_activity WHERE backend_type = '$type' LIMIT 1");
};
my %setting = (east => 0, west => 0);
my $max_skew = 0;

# the servers see a node restarted under the quarantine as quarantined
my %quarantine_seen;    # server => times redlock_nodes showed it
my $look_for_quarantine = sub {
	my ($i) = @_;
	my $s = $pick->('east', 'west');
	my $n = $server{$s}->safe_psql('postgres',
		"SELECT count(*) FROM redlock_nodes WHERE node = '${\ $redis[$i]->addr }'"
		  . " AND quarantined_until > now()");
	$quarantine_seen{$s}++ if $n;
};
# SIGSTOP nodes @n until $for from now; returns the fault
my $stop = sub {
	my ($for, $label, @n) = @_;
	for my $i (@n)
	{
		$redis[$i]->pause;
		$out[$i] = 1;
	}
	return $fault->(kind => 'pause', node => join(',', @n), label => $label, until => time + $for);
};
my $resume = sub {
	my ($f, @n) = @_;
	for my $i (@n)
	{
		$redis[$i]->resume;
		$out[$i] = 0;
	}
	$f->{t_end} = time;
};
# kill -9 node $i, its data wiped too if $wipe; it restarts after $for
my $down = sub {
	my ($i, $for, $wipe, $label) = @_;
	$redis[$i]->kill9;
	$out[$i] = 1;
	if ($wipe)
	{
		rmtree("$redis[$i]{dir}/appendonlydir");
		unlink glob("$redis[$i]{dir}/*.aof"), "$redis[$i]{dir}/dump.rdb";
	}
	my $f = $fault->(kind => $wipe ? 'wipe' : 'kill9', node => $i, label => $label);
	push @heal, [ time + $for, sub {
		start_node($i);
		$started[$i] = time;
		$out[$i] = 0;
		$f->{t_end} = time;
		$look_for_quarantine->($i) if $quarantine_now;
	} ];
	return 1;
};

my %act = (
	pause => sub {
		return 0 if $n_out->() >= 2;
		my $i = $pick->($up_nodes->());
		my $f = $stop->(0.3 + rand(2), 'SIGSTOP one node', $i);
		push @heal, [ $f->{until}, sub { $resume->($f, $i) } ];
		return 1;
	},
	pause2 => sub {
		return 0 if $n_out->() > 0;
		my @up = $up_nodes->();
		my @n = map { splice(@up, int(rand(@up)), 1) } 1 .. 2;
		my $f = $stop->(0.3 + rand(1.5), 'SIGSTOP two nodes', @n);
		push @heal, [ $f->{until}, sub { $resume->($f, @n) } ];
		return 1;
	},
	# Redlock's delayed restart: while two nodes are stopped (longer than
	# any key lives on them), leases are granted and renewed by exactly the
	# other three; one of these loses its data once the two answer again,
	# and with it (without the quarantine) the three would grant those
	# leases again
	wipe_bare => sub {
		return 0 if $n_out->() > 0;
		my @up = $up_nodes->();
		my @n = map { splice(@up, int(rand(@up)), 1) } 1 .. 2;
		my $k = $pick->(@up);
		my $f = $stop->(1.8 + rand(1), 'SIGSTOP two nodes, then wipe a third', @n);
		push @heal, [ $f->{until}, sub {
			$resume->($f, @n);
			$redis[$_]->ping for @n;
			$out[$k] = 1;    # no other node fault meanwhile
			push @heal, [ time + 0.05, sub {
				$down->($k, 0.05 + rand(0.2), 1, 'wipe a node of a bare majority');
			} ];
		} ];
		return 1;
	},
	kill9 => sub {
		return 0 if $n_out->() >= 2;
		return $down->($pick->($up_nodes->()), 0.2 + rand(1.5), 0, 'kill -9, restart from AOF');
	},
	wipe => sub {
		return 0 if $n_out->() >= 2;
		return $down->($pick->($up_nodes->()), 0.2 + rand(1), 1, 'wipe data, restart');
	},
	clock => sub {
		return 0 unless defined $fake_node;
		# forward past every lease's TTL
		$clock_offset += int($FeatureSoak::MAX_TTL_MS / 1000) + 3;
		set_clock();
		$fault->(kind => 'clock', node => $fake_node, label => 'clock jump (one node)');
		return 1;
	},
	term_wakeup => sub {
		my $s = $pick->('east', 'west');
		my $pid = $worker_pid->($server{$s}, 'redlock wake-up');
		return 0 unless $pid;
		kill 'TERM', $pid;
		$fault->(kind => 'worker', server => $s, label => 'SIGTERM wake-up worker');
		return 1;
	},
	term_keepalive => sub {
		my $s = $pick->('east', 'west');
		my $pid = $worker_pid->($server{$s}, 'redlock keep-alive');
		return 0 unless $pid;
		kill 'TERM', $pid;
		$fault->(kind => 'worker', server => $s, label => 'SIGTERM keep-alive worker');
		return 1;
	},
	reload => sub {
		my $s = $pick->('east', 'west');
		$server{$s}->safe_psql('postgres', 'SELECT pg_reload_conf()');
		$fault->(kind => 'reload', server => $s, label => 'pg_reload_conf() unchanged');
		return 1;
	},
	reload_change => sub {
		my $s = $pick->('east', 'west');
		$setting{$s} = !$setting{$s};
		my ($nt, $rd) = $setting{$s} ? ('150ms', '300ms') : ('100ms', '200ms');
		$server{$s}->safe_psql('postgres',
			"ALTER SYSTEM SET redlock.node_timeout = '$nt'; "
			  . "ALTER SYSTEM SET redlock.retry_delay = '$rd'; SELECT pg_reload_conf()");
		$fault->(kind => 'reload', server => $s, label => 'reload with a changed setting');
		return 1;
	},
	terminate => sub {
		my $s = $pick->('east', 'west');
		# the server's clock just before and after the signal
		my ($pid, $t, $ok, $t_end) = split /\|/, $server{$s}->safe_psql('postgres',
			"SELECT pid, extract(epoch FROM clock_timestamp()), pg_terminate_backend(pid),"
			  . " extract(epoch FROM clock_timestamp()) FROM"
			  . " (SELECT l.pid FROM redlock_locks l JOIN pg_stat_activity a USING (pid)"
			  . "   WHERE l.granted AND a.application_name LIKE 'fsoak-%'"
			  . "   ORDER BY random() LIMIT 1 OFFSET 0) h");
		return 0 unless $pid && $ok eq 't';
		$fault->(kind => 'terminate', server => $s, pid => $pid, t => $t, t_end => $t_end,
			label => 'pg_terminate_backend(holder)');
		return 1;
	});
my %label = (pause => 'SIGSTOP one node', pause2 => 'SIGSTOP two nodes',
	wipe_bare => 'SIGSTOP two nodes, then wipe a third',
	kill9 => 'kill -9, restart from AOF', wipe => 'wipe data, restart',
	clock => 'clock jump (one node)', term_wakeup => 'SIGTERM wake-up worker',
	term_keepalive => 'SIGTERM keep-alive worker', reload => 'pg_reload_conf() unchanged',
	reload_change => 'reload with a changed setting',
	terminate => 'pg_terminate_backend(holder)');

# what ends the faults, in time order; all of it with $all
my $run_heals = sub {
	my ($all) = @_;
	while (@heal)
	{
		@heal = sort { $a->[0] <=> $b->[0] } @heal;
		last unless $all || $heal[0][0] <= time;
		(shift @heal)->[1]->();
	}
};
# faults of @kinds until $until: every kind once first, in a random order
# (one that cannot run now comes again), then at random; then every fault
# ends.  The wipe of a node of a bare majority needs every node in: once
# picked, it takes the place of every node fault until it could run (with
# the quarantine on, nodes are often out).
my %node_fault = map { $_ => 1 } qw(pause pause2 wipe_bare kill9 wipe);
my $nemesis = sub {
	my ($until, @kinds) = @_;
	my @todo;
	{
		my @k = @kinds;
		push @todo, splice(@k, int(rand(@k)), 1) while @k;
	}
	my %did;
	my $bare_due = 0;
	my $next = time + 0.5;
	while (time < $until)
	{
		$run_heals->(0);
		if (time >= $next)
		{
			my $want = @todo ? shift @todo : $pick->(@kinds);
			my $kind = $bare_due && $node_fault{$want} ? 'wipe_bare' : $want;
			my $ran = $act{$kind}->();
			$bare_due = !$ran if $kind eq 'wipe_bare';
			$did{$kind} = 1 if $ran;
			push @todo, $want unless $did{$want};
			$next = time + 0.3 + rand(1.2);
		}
		if (defined $fake_node && $clock_offset && !$max_skew && !$out[$fake_node])
		{
			my $skew = $redis[$fake_node]->cli('TIME') =~ /^(\d+)/ ? $1 - time : 0;
			$max_skew = $skew if $skew > 3;
		}
		usleep(50_000);
	}
	$run_heals->(1);
};

# the control phase: the quarantine off, nodes of a bare majority wiped
$nemesis->($control_end, 'wipe_bare');
# the quarantine on; no node faults until every statement begun without it
# has ended
$phase = 'switch';
for my $pg (@pg)
{
	$pg->safe_psql('postgres',
		"ALTER SYSTEM SET redlock.restart_quarantine = '${quarantine_s}s'; SELECT pg_reload_conf()");
}
$quarantine_now = $quarantine_s;
my @not_nodes = qw(term_wakeup term_keepalive reload reload_change terminate);
$nemesis->($main_start, @not_nodes);
# the main phase: every fault, with the quarantine (the wipe of a node of
# a bare majority more often)
$phase = 'main';
my @all_kinds = sort keys %act;
$nemesis->($faults_end, @all_kinds, ('wipe_bare') x 2);
# the faults end: every node runs again
for my $i (0 .. 4)
{
	$redis[$i]->resume if $redis[$i]{pid};
	next if $redis[$i]{pid} && $redis[$i]->ping;
	start_node($i);
	$started[$i] = time;
}
my $healed = time;

# ---------- 6. leasing again after the faults ----------

# one probe session per server, connected (and with its Redis connections
# made) before the faults, asks for a lease of its own again and again once
# they end, the two servers in turn
my %recovery;
{
	my @todo = ('east', 'west');
	my $n = 0;
	while (@todo && $n++ < 400)
	{
		my $s = shift @todo;
		my $r = $probe{$s}->query("SELECT tok, extract(epoch FROM clock_timestamp()) FROM"
			  . " (SELECT redlock_try_lock('probe:$s:$n', 2000) AS tok OFFSET 0) s");
		my ($tok, $at) = split /\|/, $r->{out} // '';
		if ($r->{ok} && defined $tok && $tok ne '')
		{
			$recovery{$s} = $at - $healed;
		}
		else
		{
			push @todo, $s;
			usleep(10_000);
		}
	}
	$_->close for values %probe;
}

# ---------- 7. the sessions end; the history ----------

my %failed_kids;
for my $k (@kids)
{
	my $until = time + 120;
	my $done = 0;
	while (time < $until)
	{
		my $r = waitpid($k, POSIX::WNOHANG());
		if ($r == $k)
		{
			$failed_kids{$k} = $? if $?;
			$done = 1;
			last;
		}
		usleep(100_000);
	}
	if (!$done)
	{
		kill 'KILL', $k;
		waitpid($k, 0);
		$failed_kids{$k} = 'hung';
	}
}
for my $f (@files)
{
	diag "session error ($f): " . slurp_file("$f.error") if -e "$f.error";
}
is(scalar keys %failed_kids, 0, 'every session ran to its end');

my @audit = map {
	my ($row, $old, $new, $w) = split /\|/, $_, 4;
	{ row => $row, old => ($old eq '' ? undef : $old), new => $new, writer => $w }
} grep { $_ ne '' } split /\n/,
  $east->safe_psql('postgres', 'SELECT row_id, old_token, new_token, writer FROM fsoak_audit ORDER BY seq');

# the rest of the history, beside the sessions' (test/soak-picture.sh
# reads it all)
{
	my $json = JSON::PP->new->canonical;
	my $put = sub {
		my ($name, @rows) = @_;
		open my $fh, '>', "$histdir/$name" or die "$histdir/$name: $!";
		print $fh $json->encode($_), "\n" for @rows;
		close $fh;
	};
	$put->('faults.jsonl', @faults);
	$put->('audit.jsonl', @audit);
	$put->('run.json', { seed => $seed, t0 => $t0, control_end => $control_end,
		main_start => $main_start, faults_end => $faults_end, healed => $healed,
		deadline => $deadline, quarantine_s => $quarantine_s, resources => $resources,
		nodes => [ map { $_->addr } @redis ], recovery => \%recovery });
}

my $history = FeatureSoak::read_history(grep { -e } @files);
my $rep = FeatureSoak::check(events => $history, faults => \@faults, audit => \@audit);

# waits that ended in a grant: was the holder before on this server or the
# other (a local wake-up or handoff, or one across the servers)?
my (%waited, %prev);
for my $l (sort { $a->{ret} <=> $b->{ret} } @{ $rep->{leases} })
{
	my $p = $prev{ $l->{res} };
	if ($p && $l->{ret} - $l->{start} > 0.05 && $l->{start} < $p->{to})
	{
		$waited{ $p->{server} eq $l->{server} ? 'local' : 'other server' }++;
	}
	$prev{ $l->{res} } = $l;
}
my $kept_alive = grep { $_->{kind} eq 'keepalive' && $_->{to} - $_->{ret} > 2.0 } @{ $rep->{leases} };
my $minutes = ($deadline - $t0) / 60;
my $control_grants = grep { $_->{ret} < $control_end } @{ $rep->{leases} };
my $quarantine_seen = 0;
$quarantine_seen += $_ for values %quarantine_seen;

my $summary = sprintf("feature soak, seed %s: %d s of faults with the quarantine off (control),"
	  . " %d s turning it on (%d s), %d s of faults with it, %d s without\n",
	$seed, $control, $switch, $quarantine_s, $main, $tail);
$summary .= sprintf("  %-50s %d (%.0f per minute)\n", 'grants', $rep->{grants}, $rep->{grants} / $minutes);
$summary .= sprintf("  %-50s %d\n", 'grants in the control phase', $control_grants);
$summary .= sprintf("  %-50s %d\n", "grants: $_", $rep->{kinds}{$_}) for sort keys %{ $rep->{kinds} };
$summary .= sprintf("  %-50s %d\n", "refused: $_", $rep->{refused}{$_}) for sort keys %{ $rep->{refused} };
$summary .= sprintf("  %-50s %d\n", 'waits granted after a holder on this server', $waited{local} // 0);
$summary .= sprintf("  %-50s %d\n", 'waits granted after a holder on the other', $waited{'other server'} // 0);
$summary .= sprintf("  %-50s %d\n", 'keep-alive leases held past their TTL', $kept_alive);
$summary .= sprintf("  %-50s %d\n", 'fenced writes accepted', $rep->{writes_ok});
$summary .= sprintf("  %-50s %d\n", "fenced writes refused: $_", $rep->{writes_refused}{$_})
  for sort keys %{ $rep->{writes_refused} };
$summary .= sprintf("  %-50s %d\n", "fault: $_", $count{$_}) for sort grep { !/^control: / } keys %count;
$summary .= sprintf("  %-50s %d\n", 'quarantined nodes seen in redlock_nodes', $quarantine_seen);
$summary .= sprintf("  %-50s %.1f s\n", 'node clock ahead after the jumps', $max_skew) if $max_skew;
$summary .= sprintf("  %-50s %d\n", 'OVERLAPS of two holders', scalar @{ $rep->{overlaps} });
$summary .= sprintf("  %-50s %d\n", 'overlaps after a clock jump (known limit)', scalar @{ $rep->{overlaps_clock} });
$summary .= sprintf("  %-50s %d\n", 'TOKENS out of grant order', scalar @{ $rep->{token_order} });
$summary .= sprintf("  %-50s %d\n", 'FENCE: stale tokens accepted', scalar @{ $rep->{fence} });
$summary .= sprintf("  %-50s %s\n", "lease again after the faults ($_)",
	defined $recovery{$_} ? sprintf('%.3f s', $recovery{$_}) : 'never') for sort keys %recovery;
$summary .= "  the control phase (quarantine off):\n";
$summary .= sprintf("  %-50s %d\n", $_, $count{$_}) for sort grep { /^control: / } keys %count;
$summary .= sprintf("  %-50s %d\n", 'control: overlaps after a wipe (not failed)',
	scalar @{ $rep->{overlaps_wipe} });
diag "\n$summary";
{
	open my $fh, '>', "$histdir/summary.txt" or die $!;
	print $fh $summary;
}
for my $o (@{ $rep->{overlaps} }, @{ $rep->{overlaps_clock} }, @{ $rep->{overlaps_wipe} })
{
	diag sprintf("overlap on %s: %s and %s (tokens %s), %.3f s from %.3f",
		$o->{res}, $o->{first}, $o->{second}, $o->{tokens}, $o->{to} - $o->{from}, $o->{from} - $t0);
}
# the two leases of an overlap, as their holders saw them (times from the start)
sub show_lease
{
	my ($id) = @_;
	my ($l) = grep { $_->{lease} eq $id } @{ $rep->{leases} };
	return sprintf("  %s %s on %s token %s: call %.3f, granted %.3f, told %s, cut %s\n",
		$l->{lease}, $l->{kind}, $l->{server}, $l->{tok}, $l->{start} - $t0, $l->{ret} - $t0,
		join(' ', map { sprintf('%.3f+%d', $_->[0] - $t0, $_->[1]) } @{ $l->{seen} // [] }),
		defined $l->{cut} ? sprintf('%.3f', $l->{cut} - $t0) : '-');
}
for my $o (@{ $rep->{overlaps} }, @{ $rep->{overlaps_clock} }, @{ $rep->{overlaps_wipe} })
{
	diag "leases of an overlap:\n" . show_lease($o->{first}) . show_lease($o->{second});
}
# the faults' times, for reading the overlaps above
diag join('', map {
	sprintf("fault at %.3f: %s %s\n", $_->{t} - $t0, $_->{label}, $_->{node} // $_->{server})
} @faults)
  if @{ $rep->{overlaps} } || @{ $rep->{overlaps_clock} } || @{ $rep->{token_order} } || @{ $rep->{fence} };
diag "token order: $_->{res}: $_->{earlier} ($_->{earlier_tok}) before $_->{later} ($_->{later_tok})"
  for @{ $rep->{token_order} };
diag "fence: row $_->{row} accepted $_->{new} after $_->{old} ($_->{writer})" for @{ $rep->{fence} };

cmp_ok($rep->{grants}, '>', 30, 'the sessions were granted leases');
for my $k (qw(xact session extend keepalive pause nested nested-inner))
{
	cmp_ok($rep->{kinds}{$k} // 0, '>', 0, "leases of kind $k were granted");
}
cmp_ok($rep->{observed}, '>', $rep->{grants} * 0.8, 'most leases were observed by their holders');
cmp_ok($kept_alive, '>', 0, 'keep-alive leases were held past their TTL');
cmp_ok($waited{local} // 0, '>', 0, 'waiters were granted after a holder on their own server');
cmp_ok($waited{'other server'} // 0, '>', 0, 'waiters were granted after a holder on the other server');
cmp_ok($rep->{writes_ok}, '>', 0, 'fenced writes were accepted');
for my $k (@all_kinds)
{
	next if $k eq 'clock' && !defined $fake_node;
	cmp_ok($count{ $label{$k} } // 0, '>', 0, "fault injected: $label{$k}");
}
cmp_ok($count{'control: wipe a node of a bare majority'} // 0, '>', 0,
	'the control phase wiped nodes of a bare majority, with the quarantine off');
cmp_ok($quarantine_seen, '>', 0, 'the servers quarantined nodes that restarted in the main phase');
cmp_ok($max_skew, '>', 3, "libfaketime moved the node's clock forward") if defined $fake_node;
is(scalar @{ $rep->{overlaps} }, 0,
	'no two holders held a resource at once (outside clock jumps; wipes included, under the quarantine)');
is(scalar @{ $rep->{token_order} }, 0, 'tokens increase in the order of the grants');
is(scalar @{ $rep->{fence} }, 0, 'every fenced row accepted only increasing tokens');
for my $s ('east', 'west')
{
	ok(defined $recovery{$s} && $recovery{$s} <= 2.0,
		"$s leases again within 2 s of the end of the faults");
}
for my $pg (@pg)
{
	unlike(slurp_file($pg->logfile), qr/terminated by signal|PANIC/, $pg->name . ': no backend crashed');
}

$_->stop for @pg;
rmtree($histdir) if Test::More->builder->is_passing && !$ENV{SOAK_HISTORY};
done_testing();

# a failing run's history stays, with the servers' and the nodes' logs (also
# when the test died on the way), and its place is printed
END
{
	my $exit = $?;
	if (defined $histdir && -d $histdir)
	{
		if ($exit || !Test::More->builder->is_passing)
		{
			File::Copy::copy($_->logfile, "$histdir/postgres-" . $_->name . '.log') for @pg;
			for my $i (0 .. $#redis)
			{
				File::Copy::copy("$redis[$i]{dir}/redis.log", "$histdir/redis-$i.log");
			}
		}
		diag "the history of this run is in $histdir (test/soak-picture.sh draws it)";
	}
	$? = $exit;
}
