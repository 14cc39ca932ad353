# The chaos soak: K concurrent sessions take leases on a few contended rows
# and write under the fence while a nemesis kills, stops, empties and slows
# the Redis nodes and terminates lease holders, on a schedule drawn from a
# fixed seed.  A checker reads the history afterwards (test/perl/SoakSQL.pm).
#
# Phases, all on the same nemesis schedule:
#   fenced   the workload with redlock_fence(): the checker must find nothing
#   control  the same with the fence trigger dropped: the checker must find
#            violations (it can fail)
#   majority three of five nodes down: every call is refused with RL002 within
#            its bound, none hangs, nothing is granted
#
# Environment: SOAK_SECONDS (fenced phase, default 40), SOAK_CONTROL_SECONDS
# (default: as long as the fenced phase, at most 300), SOAK_SESSIONS (8),
# SOAK_ROWS (4), SOAK_SEED (default 20240601; printed, for replay),
# SOAK_TLS=1 (the nodes speak TLS only, and the backends connect with
# redlock.tls_mode = verify-full).
use strict;
use warnings FATAL => 'all';

use File::Path qw(rmtree);
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedisNode;
use RedlockTest;
use SoakSQL;
use Test::More;
use TlsFiles;
use Time::HiRes qw(time usleep);

my $seconds = $ENV{SOAK_SECONDS} // 40;
my $control_seconds = $ENV{SOAK_CONTROL_SECONDS} // ($seconds > 300 ? 300 : $seconds);
my $sessions = $ENV{SOAK_SESSIONS} // 8;
my $rows = $ENV{SOAK_ROWS} // 4;
my $seed = $ENV{SOAK_SEED} // 20240601;
my $majority_seconds = 6;
my $lock_timeout_ms = 1000;
my $node_timeout_ms = 50;
my $connect_timeout_ms = 200;
# one attempt: up to a connect and a node timeout in each of its rounds (a
# reconnect, the acquire, a token write-back, the release of an own expired
# lease), plus room for a loaded 2-core machine
my $single_bound_ms = 2 * $connect_timeout_ms + 3 * $node_timeout_ms + 1500;

note "soak: seed $seed, $sessions sessions, $rows rows, fenced ${seconds}s, control ${control_seconds}s";

my $tls = $ENV{SOAK_TLS} ? TlsFiles->new : undef;
my $tls_conf = $tls
  ? "redlock.tls_mode = 'verify-full'\nredlock.tls_ca_file = '${\ $tls->file('ca.crt') }'\n"
  : '';
note 'soak over TLS (verify-full)' if $tls;

# three nodes with AOF (appendfsync everysec), two without persistence
my @redis;
for my $i (0 .. 4)
{
	my @args = ('--enable-debug-command', 'yes');
	push @args, '--appendonly', 'yes', '--appendfsync', 'everysec' if $i < 3;
	my %t;
	%t = (tls => { cert => $tls->file('server.crt'), key => $tls->file('server.key'),
		ca => $tls->file('ca.crt') }) if $tls;
	push @redis, RedisNode->new(args => \@args, %t);
}
my $nodes = join(',', map { $_->addr } @redis);

my $pg = redlock_cluster('soak', nodes => \@redis, conf => <<"EOC");
redlock.node_timeout = $node_timeout_ms
redlock.connect_timeout = $connect_timeout_ms
redlock.retry_delay = 30
redlock.retry_jitter = 30
max_connections = 60
${tls_conf}log_min_messages = warning
log_line_prefix = '%m [%p] %a '
EOC
$pg->safe_psql('postgres', $SoakSQL::SCHEMA);

my @checks = qw(token_not_increasing lost_update version_gap final_row_mismatch
  stale_write_accepted stale_write_not_RL001 token_granted_twice);

# ---------- the checker can fire: one history per check that breaks it ----------

$pg->safe_psql('postgres', 'ALTER TABLE soak_rows DISABLE TRIGGER fence');
my %selftest = map { $_->[0] => $_->[1] } SoakSQL::selftest_histories();
is(join(' ', sort keys %selftest), join(' ', sort @checks), 'a broken history for every check');
for my $check (@checks)
{
	$pg->safe_psql('postgres', $selftest{$check});
	my %r = map { split /\|/ } split /\n/,
	  $pg->safe_psql('postgres', SoakSQL::checker($check, $single_bound_ms, $lock_timeout_ms));
	cmp_ok($r{$check}, '>', 0, "the checker finds $check in a history that has it");
}
$pg->safe_psql('postgres', 'ALTER TABLE soak_rows ENABLE TRIGGER fence');

# ---------- the nemesis ----------

# The schedule: [time offset, kind, node index or undef, duration].  At most
# $max_down nodes are out (killed, stopped or sleeping) at any moment.
sub schedule
{
	my ($duration, $max_down) = @_;
	srand($seed);
	my @events;
	my @down_until = (0) x @redis;
	my $t = 1.0;
	my @kinds = (
		('kill9_restart') x 3, ('sigstop') x 3, ('restart_empty') x 2,
		('debug_sleep') x 3, ('terminate_holder') x 3);
	while ($t < $duration - 1)
	{
		my $kind = $kinds[ int(rand(@kinds)) ];
		my $len = 0.2 + rand(1.3);
		if ($kind eq 'terminate_holder')
		{
			push @events, [ $t, $kind, undef, 0 ];
		}
		else
		{
			$len = 0.2 if $kind eq 'debug_sleep';
			$len = 0 if $kind eq 'restart_empty';
			my @up = grep { $down_until[$_] <= $t } 0 .. $#redis;
			my $ndown = @redis - @up;
			if (@up && $ndown < $max_down)
			{
				my $n = $up[ int(rand(@up)) ];
				$down_until[$n] = $t + $len + 0.3;    # + restart time
				push @events, [ $t, $kind, $n, $len ];
			}
		}
		$t += 0.25 + rand(0.9);
	}
	return @events;
}

# Start a node again.  Rarely, under load, the previous incarnation (or a
# child it forked) still holds the port for a moment after kill -9: find the
# processes that hold this node's listening socket (ours: the port was
# allocated for this node), kill them, and try again.
sub port_holders
{
	my ($port) = @_;
	my %listening = map { $_->{inode} => 1 }
	  grep { $_->{local_port} == $port && $_->{state} eq '0A' } net_sockets('tcp');
	my @pids;
	for my $dir (glob '/proc/[0-9]*')
	{
		my ($pid) = $dir =~ m{^/proc/(\d+)$} or next;
		my %open = socket_inodes($pid);
		push @pids, $pid if grep { $listening{$_} } keys %open;
	}
	return @pids;
}

sub start_node
{
	my ($node) = @_;
	for my $try (1 .. 5)
	{
		return if eval { $node->start; 1 };
		diag "restarting redis on port $node->{port}: $@";
		kill 'KILL', $_ for port_holders($node->{port});
		usleep(300_000);
	}
	die "could not restart the redis node on port $node->{port}";
}

sub wipe_data
{
	my ($node) = @_;
	rmtree("$node->{dir}/appendonlydir");
	unlink glob("$node->{dir}/*.aof"), "$node->{dir}/dump.rdb";
}

# Run the schedule until $end; returns fault counts by kind.
sub nemesis
{
	my ($end, @events) = @_;
	my $t0 = time;
	my %count;
	my @actions;    # [time, sub]
	for my $e (@events)
	{
		my ($at, $kind, $n, $len) = @$e;
		my $node = defined $n ? $redis[$n] : undef;
		my $persist = defined $n && $n < 3 ? 'aof' : 'no persistence';
		if ($kind eq 'kill9_restart')
		{
			push @actions, [ $at, sub { $node->kill9; $count{"kill -9, restart ($persist)"}++ } ];
			push @actions, [ $at + $len, sub { start_node($node) } ];
		}
		elsif ($kind eq 'sigstop')
		{
			push @actions, [ $at, sub { $node->pause; $count{'SIGSTOP/SIGCONT'}++ } ];
			push @actions, [ $at + $len, sub { $node->resume } ];
		}
		elsif ($kind eq 'restart_empty')
		{
			push @actions, [ $at, sub {
				$node->kill9; wipe_data($node); start_node($node);
				$count{'restart with empty dataset'}++ } ];
		}
		elsif ($kind eq 'debug_sleep')
		{
			push @actions, [ $at, sub {
				system("redis-cli ${\ $node->cli_opts } DEBUG SLEEP 0.2 >/dev/null 2>&1 &");
				$count{'DEBUG SLEEP 0.2'}++ } ];
		}
		elsif ($kind eq 'terminate_holder')
		{
			push @actions, [ $at, sub {
				my $n = $pg->safe_psql('postgres',
					"SELECT count(pg_terminate_backend(pid)) FROM (SELECT pid FROM pg_stat_activity"
					  . " WHERE application_name LIKE 'soak-%-holder' ORDER BY random() LIMIT 1) s");
				$count{'pg_terminate_backend(holder)'} += $n;
			} ];
		}
	}
	@actions = sort { $a->[0] <=> $b->[0] } @actions;
	for my $a (@actions)
	{
		last if $t0 + $a->[0] > $end;
		my $wait = $t0 + $a->[0] - time;
		usleep(int($wait * 1e6)) if $wait > 0;
		$a->[1]->();
	}
	# bring every node back
	for my $node (@redis)
	{
		$node->resume if $node->{pid};
		start_node($node) unless $node->{pid} && $node->ping;
	}
	my $wait = $end - time;
	usleep(int($wait * 1e6)) if $wait > 0;
	return \%count;
}

# ---------- the workload ----------

sub start_workers
{
	my ($run, $duration) = @_;
	my $deadline = time + $duration;
	my $connstr = $pg->connstr('postgres');
	my @h;
	for my $s (1 .. $sessions)
	{
		# a terminated session's psql exits; the loop reconnects
		my $script = <<"EOS";
while [ "\$(date +%s)" -lt ${\ int($deadline + 1) } ]; do
	psql -X -q -d "$connstr" -c "CALL soak_run('$run', $s, $deadline, $rows, $seed, $lock_timeout_ms)" >/dev/null 2>&1 || sleep 0.1
done
EOS
		local $ENV{PGAPPNAME} = "soak-$s";
		local $ENV{PGOPTIONS} = '-c client_min_messages=error';
		push @h, IPC::Run::start([ 'bash', '-c', $script ], '<', \undef,
			'>', \my $out, '2>', \my $err);
	}
	return ($deadline, @h);
}

sub run_phase
{
	my ($run, $duration, $fenced) = @_;
	$pg->safe_psql('postgres',
		"INSERT INTO soak_rows (run, id) SELECT '$run', g FROM generate_series(1, $rows) g");
	$pg->safe_psql('postgres', 'DROP TRIGGER fence ON soak_rows') unless $fenced;
	my ($deadline, @workers) = start_workers($run, $duration);
	my $faults = nemesis($deadline, schedule($duration, 2));
	$_->finish for @workers;
	my %res = map { split /\|/ } split /\n/,
	  $pg->safe_psql('postgres',
		SoakSQL::checker($run, $single_bound_ms, $lock_timeout_ms));
	return ($faults, \%res);
}

my ($faults_f, $res_f) = run_phase('fenced', $seconds, 1);
my ($faults_c, $res_c) = run_phase('control', $control_seconds, 0);

# ---------- majority down: refused fast, never granted ----------

$pg->safe_psql('postgres',
	"INSERT INTO soak_rows (run, id) SELECT 'majority', g FROM generate_series(1, $rows) g");
$redis[0]->kill9;
$redis[3]->kill9;
$redis[4]->pause;
my ($deadline, @workers) = start_workers('majority', $majority_seconds);
my $t_end_wait = time;
$_->finish for @workers;
my $worker_overrun = time - $deadline;
$redis[4]->resume;
start_node($redis[$_]) for 0, 3;
my %maj = map { split /\|/ } split /\n/, $pg->safe_psql('postgres', <<'SQL');
SELECT 'calls', count(*) FROM soak_history WHERE run = 'majority' AND kind = 'acquire'
UNION ALL
SELECT 'granted', count(*) FROM soak_history WHERE run = 'majority' AND kind = 'acquire' AND accepted
UNION ALL
SELECT 'not RL002', count(*) FROM soak_history
 WHERE run = 'majority' AND kind = 'acquire' AND sqlstate IS DISTINCT FROM 'RL002'
UNION ALL
SELECT 'max ms', coalesce(round(max(ms))::bigint, 0) FROM soak_history
 WHERE run = 'majority' AND kind = 'acquire'
SQL

# ---------- the summary ----------

my %kinds;
$kinds{$_} = 1 for keys %$faults_f, keys %$faults_c;
my @info = sort grep { /^info:/ } keys %{ { %$res_f, %$res_c } };
my $table = sprintf("%-40s %12s %12s\n", "soak (seed $seed, $sessions sessions, $rows rows)",
	'fenced', 'no fence');
$table .= sprintf("%-40s %12s %12s\n", 'duration (s)', $seconds, $control_seconds);
for my $k (@info)
{
	(my $label = $k) =~ s/^info://;
	$table .= sprintf("%-40s %12s %12s\n", $label, $res_f->{$k} // 0, $res_c->{$k} // 0);
}
for my $k (sort keys %kinds)
{
	$table .= sprintf("%-40s %12s %12s\n", "fault: $k", $faults_f->{$k} // 0,
		$faults_c->{$k} // 0);
}
my ($viol_f, $viol_c) = (0, 0);
for my $k (@checks)
{
	$table .= sprintf("%-40s %12s %12s\n", "VIOLATION $k", $res_f->{$k}, $res_c->{$k});
	$viol_f += $res_f->{$k};
	$viol_c += $res_c->{$k};
}
$table .= sprintf("%-40s %12s %12s\n", 'VIOLATIONS total', $viol_f, $viol_c);
$table .= sprintf("%-40s %12s\n", "majority down: calls ($majority_seconds s)", $maj{calls});
$table .= sprintf("%-40s %12s\n", 'majority down: granted', $maj{granted});
$table .= sprintf("%-40s %12s\n", 'majority down: not RL002', $maj{'not RL002'});
$table .= sprintf("%-40s %12s\n", 'majority down: slowest call (ms)', $maj{'max ms'});
diag "\n$table";

cmp_ok($res_f->{'info:operations'}, '>', 100, 'the fenced run did real work');
cmp_ok($res_f->{'info:grants'}, '>', 50, 'with grants');
cmp_ok($res_f->{'info:deliberately stale writes'}, '>', 0,
	'and deliberately stale writes');
is($res_f->{$_}, 0, "fenced: no $_") for @checks;
cmp_ok($res_c->{'info:deliberately stale writes'}, '>', 0,
	'control: stale writes happened too');
cmp_ok($viol_c, '>', 0, 'control (no fence): the checker reports violations');
cmp_ok($res_c->{stale_write_accepted}, '>', 0,
	'control: stale writes were accepted without the fence');
cmp_ok($maj{calls}, '>', 20, 'majority down: the sessions kept calling');
is($maj{granted}, 0, 'majority down: nothing granted');
is($maj{'not RL002'}, 0, 'majority down: every call refused with RL002');
note "majority down: the slowest refusal took $maj{'max ms'} ms (bound $single_bound_ms ms; timing, not checked)";
# a call that hung would hold its session past the deadline until the
# framework's timeout; a busy machine delays them by seconds at most
cmp_ok($worker_overrun, '<', 60, 'majority down: the sessions stopped (none hung)');

# the nodes are healthy again: a lease works
like($pg->safe_psql('postgres', "SELECT redlock_try_lock('soak:after', 1000)"),
	qr/^\d+$/, 'after the soak, leases are granted again');
my $log = slurp_file($pg->logfile);
unlike($log, qr/terminated by signal/, 'no backend crashed');

$pg->stop;
done_testing();
