# The feature soak: two PostgreSQL servers sharing five Redis nodes (AOF,
# appendfsync always), three sessions on each taking leases on three hot
# resources as an application does, one statement at a time: transaction
# leases, session leases, try_lock, leases extended with redlock_extend,
# keep-alive leases held past their TTL, waits with wait_ms (so that local
# wake-ups and handoffs across the servers happen), a second lease of the
# same session meanwhile, holders that stall past their TTL, sets of 2 or 3
# of the resources at once (redlock_lock, redlock_try_lock and
# redlock_xact_lock over text[], each set in an order of its own, released
# together or one by one), and a fenced write with the token while holding;
# and readers beside them: shared leases on the same resources
# (redlock_lock_shared, redlock_xact_lock_shared and the try forms, with
# and without waits, extended, kept alive past their TTL), read back while
# held and released, with no write (test/perl/FeatureSoak.pm).
#
# Meanwhile a nemesis, at random from a seed, with at most two nodes out at
# once (a node in its restart quarantine counts as out): stops one or two
# nodes (SIGSTOP), stops two and then wipes one of the three that granted
# meanwhile (the delayed restart's own case), the same and then kills a
# backend of one server with SIGKILL (PostgreSQL crash-restarts that whole
# server, which so forgets all it saw of the wiped node), kills one node
# (kill -9) and restarts it from its AOF, wipes one's data and restarts
# it, kills a backend of one server (a lease holder's when there is one:
# its leases stay on the nodes, and every session of that server reconnects
# and goes on, as an application does), SIGTERMs a server's wake-up or
# keep-alive worker, reloads a server's configuration unchanged and with a
# real change of a setting, terminates a lease holder, and jumps one node's
# clock forward past every lease's TTL (libfaketime).
#
# And it cuts the network between each server and single nodes: the two
# servers' majorities overlapping in one node (east cut from two nodes,
# west from the other two), the same with the shared node wiped meanwhile,
# one server in a minority (cut from three nodes), flapping cuts (one
# server from one or two nodes, cut and healed every 100-400 ms for 2-4 s),
# and a node whose replies to one server are dropped (its requests arrive
# and are applied, the answers are lost); the main phase ends with both
# servers in a minority while a probe session on each keeps asking, and
# then the network heals.  How: every node also listens on 127.0.0.2,
# which east's redlock.nodes names, and on 127.0.0.3, which west's names
# (RedisNode's also_bind), and the test's own redis-cli uses 127.0.0.1; a
# cut drops the packets to and from one address and node port (nftables
# rules in a table of their own, test/netfault.sh).  Matching addresses
# and ports, not a second OS user for west (meta skuid), because the test
# runs as one user (postgres, under run-tests.sh as root) and its
# PostgreSQL::Test::Cluster starts, stops and reads both servers as that
# user: a second user would need a root helper to create it and to start,
# signal and read a server for it, where addresses need nothing but the
# nodes' extra listening addresses; and the rules then name exactly this
# run's node ports, so they cannot touch another test's traffic.  nft
# needs root: run-tests.sh (as root) starts the helper for this suite and
# names its directory in REDLOCK_NETFAULT (test/perl/NetFault.pm writes
# its commands).  Without it (not root, no nft) the network faults are
# skipped, and the test says so.
#
# Two phases.  A short control phase with redlock.restart_quarantine = 0
# wipes nodes of a bare majority (and, with the network faults, the node
# two partitioned majorities share): the overlaps it finds are what the
# quarantine prevents (reported, not failed).  Then the quarantine is
# turned on (by a reload, longer than every TTL of the workload) and, once
# every statement begun without it has ended, the main phase runs every
# fault.
#
# The checker (FeatureSoakCheck::check) reads the history: no two holders'
# lease intervals on one resource overlap (only those across a clock
# jump, Redlock's known limit, and across a wipe without the quarantine
# are counted apart; a lease whose connection was lost, as in a
# crash-restart, ends no earlier than its validity), unless both are
# shared: readers' intervals may overlap (counted, and some must have),
# a reader's and a writer's must not; tokens increase in the order of the
# grants, of either mode (each resource of a set is a lease of its own
# here, against every other holder's, of one resource or of a set), every
# lease reads back the mode it asked for, every set held all its
# resources or none (a grant with its token for each, one grant time, and
# one validity for all as its holder read them right after), every fenced
# row accepted only increasing tokens (an audit trigger logs every
# accepted update), no statement runs longer than its wait_ms + 2 s (it
# reports each server's longest lock call), and both servers lease again
# within 2 s of the end of the faults (the network healed; beyond a
# quarantine still running, if a majority of the nodes is in one).  It
# first proves on constructed histories that it reports each kind of
# violation (and not readers together), and at the end on the run's own
# history broken four times: a set's grant of one resource dropped,
# another holder's grant moved into a set's lease, another holder's
# exclusive grant moved into a shared lease (an overlap), and another
# reader's grant moved there (none).
#
# SOAK_SECONDS (default 60): how long the faults go on, the control phase
# (SOAK_CONTROL_SECONDS, default 10) included; SOAK_SEED (printed) replays
# a schedule.  The history (the sessions' events, the faults, the audit,
# the phases' times) goes to SOAK_HISTORY if set, else to a fresh directory
# under /tmp that is removed when every check passed; its name is printed.
# test/soak-picture.sh draws it.
use strict;
use warnings FATAL => 'all';
use sort 'stable';

use File::Copy ();
use File::Path qw(make_path rmtree);
use File::Temp ();
use FeatureSoak;
use FeatureSoakCheck;
use JSON::PP ();
use POSIX ();
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedisNode;
use NetFault;
use RedlockTest qw(faketime_preload worker_pid seed_epoch);
use Test::More;
use List::Util qw(max);
use Time::HiRes qw(time usleep);

my $seconds = $ENV{SOAK_SECONDS} // 60;
my $seed = length($ENV{SOAK_SEED} // '') ? $ENV{SOAK_SEED} : int(time) % 100000;
my $per_server = 3;
my $resources = 3;
my $tail = 5;    # fault-free seconds at the end
my $final_net = 3;    # the network's last fault, at the end of the main phase
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
		{ ev => 'obs', lease => 'n', t => 700.2, v => 2000 },
		# t: a holder whose connection was lost at 800.5 (its server
		# crash-restarted) holds until its validity ends, at 802.1
		{ ev => 'grant', lease => 'o', res => 't', tok => 180, kind => 'session',
			start => 800.0, ret => 800.1, server => 'east', pid => 5, w => 0, d => 0.1 },
		{ ev => 'obs', lease => 'o', t => 800.1, v => 2000 },
		{ ev => 'lost', server => 'east', pid => 5, t => 800.5, t_found => 800.6 },
		{ ev => 'grant', lease => 'p', res => 't', tok => 190, kind => 'session',
			start => 801.0, ret => 801.5, server => 'east', pid => 6, w => 1500, d => 0.5 },
		{ ev => 'obs', lease => 'p', t => 801.5, v => 2000 },
		# statements: within wait_ms + 2 s, and over it
		{ ev => 'refused', res => 't', kind => 'session', t => 801.0, sqlstate => 'RL002',
			server => 'east', w => 4000, d => 5.9 },
		{ ev => 'stmt', server => 'east', what => 'redlock_lock', w => 4000, d => 5.9, t => 801.0 },
		{ ev => 'stmt', server => 'west', what => 'COMMIT', w => 0, d => 2.1, t => 802.0 },
		{ ev => 'stmt', server => 'west', what => 'redlock_xact_lock', w => 300, d => 2.2, t => 803.0 },
		# sets of several resources: S1 (q1, q2) is granted at 900.1 and
		# released at 900.5; west 2 is granted q2 alone at 900.3, an
		# overlap with the set's q2
		(map {
			({ ev => 'grant', lease => "s1$_", res => "q$_", tok => 200, kind => 'multi',
				start => 900.0, ret => 900.1, server => 'east', pid => 7, set => 'S1',
				set_res => [ 'q2', 'q1' ] },
			{ ev => 'obs', lease => "s1$_", t => 900.1, v => 2000 })
		} 1, 2),
		{ ev => 'setobs', set => 'S1', t => 900.1, v => { q1 => 2000, q2 => 2000 } },
		(map { +{ ev => 'release', lease => "s1$_", t => 900.5 } } 1, 2),
		{ ev => 'grant', lease => 'q2w', res => 'q2', tok => 205, kind => 'session',
			start => 900.2, ret => 900.3, server => 'west', pid => 2 },
		{ ev => 'obs', lease => 'q2w', t => 900.3, v => 2000 },
		# S2 (q1, q3) after S1's release: all of it, no overlap
		(map {
			({ ev => 'grant', lease => "s2$_", res => "q$_", tok => 210, kind => 'multi-try',
				start => 900.6, ret => 900.7, server => 'west', pid => 3, set => 'S2',
				set_res => [ 'q1', 'q3' ] },
			{ ev => 'obs', lease => "s2$_", t => 900.7, v => 1000 })
		} 1, 3),
		{ ev => 'setobs', set => 'S2', t => 900.7, v => { q1 => 1000, q3 => 1000 } },
		# S3 asked for q4 and q5 and has a grant of q4 only
		{ ev => 'grant', lease => 's34', res => 'q4', tok => 220, kind => 'multi',
			start => 910.0, ret => 910.1, server => 'east', pid => 7, set => 'S3',
			set_res => [ 'q4', 'q5' ] },
		# S4: its grants of q6 and q7 returned at different times
		(map {
			+{ ev => 'grant', lease => "s4$_", res => "q$_", tok => 230, kind => 'multi-xact',
				start => 911.0, ret => 911.0 + $_ / 100, server => 'east', pid => 7, set => 'S4',
				set_res => [ 'q6', 'q7' ] }
		} 6, 7),
		# S5: granted whole, but its holder was told of q8 only, and S6
		# of q8 and q9 with two validities
		(map {
			my $s = $_;
			map {
				+{ ev => 'grant', lease => "s$s$_", res => "q$_", tok => 240 + $s, kind => 'multi',
					start => 912.0 + $s, ret => 912.1 + $s, server => 'east', pid => 7, set => "S$s",
					set_res => [ 'q8', 'q9' ] }
			} 8, 9
		} 5, 6),
		{ ev => 'setobs', set => 'S5', t => 917.1, v => { q8 => 2000 } },
		{ ev => 'setobs', set => 'S6', t => 918.1, v => { q8 => 2000, q9 => 1999 } });
	my @terminated = ({ kind => 'terminate', server => 'east', pid => 3, t => 400.5, t_end => 400.6 },
		{ kind => 'terminate', server => 'east', pid => 4, t => 700.0, t_end => 700.1 });
	my $r = FeatureSoakCheck::check(
		events => \@ev,
		faults => [ { kind => 'clock', t => 200.5 }, @terminated ],
		audit => [ { row => 1, old => undef, new => 10 }, { row => 1, old => 10, new => 20 },
			{ row => 1, old => 20, new => 15 }, { row => 2, old => 5, new => 5 } ]);
	is(join(' ', map { "$_->{res}:$_->{first}/$_->{second}" } @{ $r->{overlaps} }), 'q2:s12/q2w t:o/p x:a/b',
		'checker self-test: the overlaps of two holders are reported (a lost connection cuts no lease; a resource of a set is a lease of its own), and only they');
	is(join(' ', map { "$_->{set}: $_->{why}" } @{ $r->{multi_bad} }),
		'S3: no grant of q5 S4: ret differs between its resources S5: q9 not held right after its grant'
		  . ' S6: validity differs between its resources (q8=2000 q9=1999)',
		'checker self-test: a set granted in part, at two times, or told of in part or with two validities is reported');
	is(join(' ', map { "$_:$r->{multi}{$_}" } qw(sets resources observed met)), 'sets:6 resources:11 observed:4 met:2',
		'checker self-test: the sets are counted');
	is(join(' ', map { "$_->{res}:$_->{first}/$_->{second}" } @{ $r->{overlaps_clock} }), 'y:c/d',
		'checker self-test: an overlap across a clock jump is counted apart');
	is(join(' ', map { "$_->{res}:$_->{earlier}/$_->{later}" } @{ $r->{token_order} }), 'z:e/f',
		'checker self-test: a token going backwards is reported');
	is(join(' ', map { "$_->{row}:$_->{new}" } @{ $r->{fence} }), '1:15 2:5',
		'checker self-test: accepted stale and equal tokens are reported');
	is(join(' ', map { "$_->{server}:$_->{what}" } @{ $r->{slow} }), 'west:COMMIT',
		'checker self-test: a statement over its wait_ms + 2 s is reported');
	is(join(' ', map { "$_:$r->{longest}{$_}{d}" } sort keys %{ $r->{longest} }), 'east:5.9',
		"checker self-test: each server's longest lock call is reported");
	is(join(' ', map { "$_:$r->{refused}{$_}" } sort keys %{ $r->{refused} }), 'RL002:1',
		'checker self-test: refusals are counted by their SQLSTATE');
	my $r2 = FeatureSoakCheck::check(events => \@ev, faults => [ { kind => 'wipe', t => 200.5 } ],
		audit => []);
	is(scalar @{ $r2->{overlaps_wipe} }, 1,
		'checker self-test: an overlap across a wipe without the quarantine is counted apart');
	my $r3 = FeatureSoakCheck::check(events => \@ev,
		faults => [ { kind => 'wipe', t => 200.5, quarantine => 4 }, @terminated ], audit => []);
	is(join(' ', map { "$_->{res}:$_->{first}/$_->{second}" } @{ $r3->{overlaps} }), 'q2:s12/q2w t:o/p x:a/b y:c/d',
		'checker self-test: an overlap across a wipe under the quarantine is an overlap');
}
# shared leases: readers together are no overlap; a writer inside a
# reader's lease, or a reader inside a writer's, is one
{
	my $lease = sub {
		my ($id, $res, $tok, $mode, $start, $ret, $server, $pid, $v, $rel, $told) = @_;
		return ({ ev => 'grant', lease => $id, res => $res, tok => $tok, mode => $mode,
				kind => $mode eq 'shared' ? 'shared' : 'session', start => $start, ret => $ret,
				server => $server, pid => $pid },
			{ ev => 'obs', lease => $id, t => $ret, v => $v, m => $told // $mode },
			defined $rel ? { ev => 'release', lease => $id, t => $rel } : ());
	};
	my @ev = (
		# r1: east 1 reads [1000.1, 1001.5); west 2 reads [1000.5, 1001.0),
		# and east 3 [1000.8, 1001.2): three readers together
		$lease->('ra', 'r1', 300, 'shared', 1000.0, 1000.1, 'east', 1, 2000, 1001.5),
		$lease->('rb', 'r1', 310, 'shared', 1000.4, 1000.5, 'west', 2, 2000, 1001.0),
		$lease->('rc', 'r1', 320, 'shared', 1000.7, 1000.8, 'east', 3, 2000, 1001.2),
		# r2: east 1 reads [1100.1, 1101.5); west 2 writes from 1101.0
		$lease->('rd', 'r2', 330, 'shared', 1100.0, 1100.1, 'east', 1, 2000, 1101.5),
		$lease->('we', 'r2', 340, 'exclusive', 1100.9, 1101.0, 'west', 2, 2000, 1101.2),
		# r3: east 1 writes [1200.1, 1201.5); west 2 reads from 1201.0,
		# told its lease is exclusive
		$lease->('wf', 'r3', 350, 'exclusive', 1200.0, 1200.1, 'east', 1, 2000, 1201.5),
		$lease->('rg', 'r3', 360, 'shared', 1200.9, 1201.0, 'west', 2, 2000, 1201.2, 'exclusive'),
		# r4: a reader granted after a writer returned, and after it let
		# go, with a smaller token; then a writer after the reader let go
		$lease->('wh', 'r4', 400, 'exclusive', 1300.0, 1300.1, 'east', 1, 500, 1300.3),
		$lease->('ri', 'r4', 390, 'shared', 1301.0, 1301.1, 'west', 2, 500, 1301.3),
		$lease->('wj', 'r4', 410, 'exclusive', 1302.0, 1302.1, 'east', 1, 500, 1302.3),
		# r5: the same reader session again, and a writer after both
		$lease->('rk', 'r5', 500, 'shared', 1400.0, 1400.1, 'east', 1, 2000, 1400.5),
		$lease->('rl', 'r5', 510, 'shared', 1400.2, 1400.3, 'east', 1, 2000, 1400.6),
		$lease->('wm', 'r5', 520, 'exclusive', 1400.7, 1400.8, 'west', 2, 2000, 1401.0));
	my $r = FeatureSoakCheck::check(events => \@ev, faults => [], audit => []);
	is(join(' ', map { "$_->{res}:$_->{first}/$_->{second}($_->{modes})" } @{ $r->{overlaps} }),
		'r2:rd/we(shared exclusive) r3:wf/rg(exclusive shared)',
		"checker self-test: a writer inside a reader's lease, and a reader inside a writer's, are overlaps");
	is(join(' ', map { "$_->{res}:$_->{first}/$_->{second}" } @{ $r->{together} }),
		'r1:ra/rb r1:ra/rc r1:rb/rc',
		'checker self-test: readers of different holders together are counted apart, not reported');
	is(join(' ', map { "$_->{res}:$_->{earlier}/$_->{later}" } @{ $r->{token_order} }), 'r4:wh/ri',
		"checker self-test: a reader's token below an earlier writer's is reported");
	is(join(' ', map { "$_->{lease}:$_->{asked}/$_->{told}" } @{ $r->{mode_bad} }),
		'rg:shared/exclusive',
		'checker self-test: a lease read back in another mode is reported');
	is(join(' ', map { "$_:$r->{modes}{$_}" } sort keys %{ $r->{modes} }), 'exclusive:5 shared:8',
		'checker self-test: the grants are counted by their mode');
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
# each node listens on 127.0.0.1 for the test's own redis-cli, on
# 127.0.0.2 for east and on 127.0.0.3 for west: the network faults cut an
# address and a node's port (see the header)
my %addr = (east => '127.0.0.2', west => '127.0.0.3');
my @redis = map {
	my $i = $_;
	node_env($i, sub {
		RedisNode->new(also_bind => [ sort values %addr ],
			args => [ '--appendonly', 'yes', '--appendfsync', 'always' ]);
	});
} 0 .. 4;
# the nodes are new and hold no lock: their epochs written as old, as an
# operator may (doc/operating.md), so that they count at once when the quarantine is
# turned on; a node that restarts later begins a new epoch
seed_epoch(@redis);
# node $i as server $s names it
sub node_of { my ($s, $i) = @_; return "$addr{$s}:" . $redis[$i]->port; }
# the network faults need the root helper (run-tests.sh as root)
my $net = NetFault->new;
diag 'SKIPPED the network faults (partitions, flapping cuts, dropped replies): '
  . NetFault::why_not()
  unless $net;

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
	my $nodes = join(',', map { node_of($name, $_) } 0 .. 4);
	$node->append_conf('postgresql.conf', <<"EOC");
shared_preload_libraries = 'redlock'
redlock.nodes = '$nodes'
redlock.node_timeout = 100
# the control phase's; the main phase turns it on
redlock.restart_quarantine = 0
# a backend killed with SIGKILL: the server restarts (the crash faults)
restart_after_crash = on
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
					data_server => 'east',
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

# one probe session per server, connected (and with its Redis connections
# made) before the faults, and again after a crash-restart of its server;
# it leases at the end (section 6)
my %probe;
sub probe_connect
{
	my ($s) = @_;
	$probe{$s}->close if $probe{$s};
	$probe{$s} = eval { FeatureSoak::Psql->new($server{$s}->connstr('postgres'), "probe-$s") };
	$probe{$s}->query("SELECT redlock_unlock('probe:$s:0') FROM (SELECT redlock_try_lock('probe:$s:0', 2000)) s")
	  if $probe{$s};
}
probe_connect($_) for 'east', 'west';

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
# the servers a server fault may go to: not one in its crash-restart
my %restarting;    # server => its crash fault, until it accepts connections again
my $servers_up = sub { return grep { !$restarting{$_} } 'east', 'west'; };
my %setting = (east => 0, west => 0);
my $max_skew = 0;

# the servers see a node restarted under the quarantine as quarantined
my %quarantine_seen;    # server => times redlock_nodes showed it
my $look_for_quarantine = sub {
	my ($i) = @_;
	my @s = $servers_up->() or return;
	my $s = $pick->(@s);
	my $n = $server{$s}->safe_psql('postgres',
		"SELECT count(*) FROM redlock_nodes WHERE node = '${\ node_of($s, $i) }'"
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
# kill -9 node $i, its data wiped too if $wipe; it restarts after $for, and
# then $after runs, if given
my $down = sub {
	my ($i, $for, $wipe, $label, $after) = @_;
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
		$after->() if $after;
	} ];
	return 1;
};
# Redlock's delayed restart: while two nodes are stopped (longer than any
# key lives on them), leases are granted and renewed by exactly the other
# three; one of these loses its data once the two answer again, and with
# it (without the quarantine) the three would grant those leases again.
# $after runs once the wiped node is up again.
my $wipe_bare = sub {
	my ($label, $after) = @_;
	return 0 if $n_out->() > 0;
	my @up = $up_nodes->();
	my @n = map { splice(@up, int(rand(@up)), 1) } 1 .. 2;
	my $k = $pick->(@up);
	my $f = $stop->(1.8 + rand(1), $label, @n);
	push @heal, [ $f->{until}, sub {
		$resume->($f, @n);
		$redis[$_]->ping for @n;
		$out[$k] = 1;    # no other node fault meanwhile
		push @heal, [ time + 0.05, sub {
			$down->($k, 0.05 + rand(0.2), 1, 'wipe a node of a bare majority', $after);
		} ];
	} ];
	return 1;
};

# SIGKILL a backend of server $s, a lease holder's when one holds: the
# postmaster restarts the whole server (every session's connection fails);
# the fault ends when its log says it accepts connections again
my %killed;    # server => { pid => 1 }: the backends killed
my $crash = sub {
	my ($s, $label) = @_;
	my $pid = $server{$s}->safe_psql('postgres',
		"SELECT pid FROM pg_stat_activity WHERE application_name LIKE 'fsoak-%' ORDER BY"
		  . " pid IN (SELECT pid FROM redlock_locks WHERE granted) DESC, random() LIMIT 1");
	return 0 unless $pid;
	my $offset = -s $server{$s}->logfile;
	return 0 unless kill 'KILL', $pid;
	$killed{$s}{$pid} = 1;
	$restarting{$s} = $fault->(kind => 'crash', server => $s, pid => $pid, label => $label);
	$restarting{$s}{log_offset} = $offset;
	return 1;
};
my $crash_over = sub {
	for my $s (sort keys %restarting)
	{
		my $f = $restarting{$s};
		next unless slurp_file($server{$s}->logfile, $f->{log_offset})
		  =~ /terminated; reinitializing.*ready to accept connections/s;
		$f->{t_end} = time;
		delete $f->{log_offset};
		delete $restarting{$s};
		probe_connect($s);
	}
};

# the network faults, through the root helper (NetFault): cut (both
# directions dropped) or mute (the node's replies dropped) the pairs
# [server, node] of fault $f; each pair's interval is kept in $f->{cuts}
# as [server, node, from, to, how].  One network fault at a time.
my $net_busy = 0;
my $net_on = sub {
	my ($f, $how, @pairs) = @_;
	for my $p (@pairs)
	{
		my ($s, $i) = @$p;
		$how eq 'mute'
		  ? $net->drop_replies($addr{$s}, $redis[$i]->port)
		  : $net->cut($addr{$s}, $redis[$i]->port);
		push @{ $f->{cuts} }, [ $s, $i, time, undef, $how ];
	}
};
my $net_off = sub {
	my ($f) = @_;
	for my $c (grep { !defined $_->[3] } @{ $f->{cuts} })
	{
		$net->heal($addr{ $c->[0] }, $redis[ $c->[1] ]->port);
		$c->[3] = time;
	}
};
# the pairs @pairs cut (or muted) for $for s; returns the fault
my $partition = sub {
	my ($label, $for, $how, @pairs) = @_;
	return undef if !$net || $net_busy;
	my $f = $fault->(kind => 'net', label => $label, cuts => []);
	$net_on->($f, $how, @pairs);
	$net_busy = 1;
	push @heal, [ time + $for, sub {
		$net_off->($f);
		$f->{t_end} = time;
		$net_busy = 0;
	} ];
	return $f;
};
my $shuffled = sub {
	my @a = @_;
	return map { splice(@a, int(rand(@a)), 1) } 1 .. @a;
};
# east cut from two nodes and west from two others: their majorities share
# one node (the first of the list)
my $overlapping = sub {
	my ($k, @n) = $shuffled->(0 .. 4);
	return ($k, (map { [ 'east', $_ ] } @n[ 0, 1 ]), map { [ 'west', $_ ] } @n[ 2, 3 ]);
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
	wipe_bare => sub { return $wipe_bare->('SIGSTOP two nodes, then wipe a third'); },
	# the same, and then one server crash-restarts: it forgets all it saw
	# of the wiped node before (the quarantine must not depend on it)
	wipe_crash => sub {
		return $wipe_bare->('SIGSTOP two nodes, wipe a third, crash-restart a server', sub {
			my @s = $servers_up->();
			$crash->($pick->(@s), 'SIGKILL a backend after a wipe (crash-restart)') if @s == 2;
		});
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
		my @s = $servers_up->() or return 0;
		my $s = $pick->(@s);
		my $pid = worker_pid($server{$s}, 'wake-up');
		return 0 unless $pid;
		kill 'TERM', $pid;
		$fault->(kind => 'worker', server => $s, label => 'SIGTERM wake-up worker');
		return 1;
	},
	term_keepalive => sub {
		my @s = $servers_up->() or return 0;
		my $s = $pick->(@s);
		my $pid = worker_pid($server{$s}, 'keep-alive');
		return 0 unless $pid;
		kill 'TERM', $pid;
		$fault->(kind => 'worker', server => $s, label => 'SIGTERM keep-alive worker');
		return 1;
	},
	reload => sub {
		my @s = $servers_up->() or return 0;
		my $s = $pick->(@s);
		$server{$s}->safe_psql('postgres', 'SELECT pg_reload_conf()');
		$fault->(kind => 'reload', server => $s, label => 'pg_reload_conf() unchanged');
		return 1;
	},
	reload_change => sub {
		my @s = $servers_up->() or return 0;
		my $s = $pick->(@s);
		$setting{$s} = !$setting{$s};
		my ($nt, $rd) = $setting{$s} ? ('150ms', '300ms') : ('100ms', '200ms');
		$server{$s}->safe_psql('postgres',
			"ALTER SYSTEM SET redlock.node_timeout = '$nt'; "
			  . "ALTER SYSTEM SET redlock.retry_delay = '$rd'; SELECT pg_reload_conf()");
		$fault->(kind => 'reload', server => $s, label => 'reload with a changed setting');
		return 1;
	},
	terminate => sub {
		my @s = $servers_up->() or return 0;
		my $s = $pick->(@s);
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
	},
	# one crash-restart at a time
	crash => sub {
		my @s = $servers_up->();
		return 0 unless @s == 2;
		return $crash->($pick->(@s), 'SIGKILL a backend (crash-restart)');
	});
# the network faults, with the helper
%act = (%act,
	part_overlap => sub {
		my ($k, @pairs) = $overlapping->();
		return $partition->('majorities overlapping in one node', 1 + rand(2), 'cut', @pairs) ? 1 : 0;
	},
	part_minority => sub {
		my $s = $pick->('east', 'west');
		my @n = ($shuffled->(0 .. 4))[ 0 .. 2 ];
		return $partition->('one server in a minority', 1 + rand(2), 'cut', map { [ $s, $_ ] } @n)
		  ? 1 : 0;
	},
	drop_replies => sub {
		return $partition->('replies of a node to one server dropped', 1 + rand(2), 'mute',
			[ $pick->('east', 'west'), int(rand(5)) ]) ? 1 : 0;
	},
	# the cuts of one server from one or two nodes come and go every
	# 100-400 ms, for 2-4 s
	part_flap => sub {
		return 0 if $net_busy;
		my $s = $pick->('east', 'west');
		my @n = ($shuffled->(0 .. 4))[ 0 .. int(rand(2)) ];
		my $f = $fault->(kind => 'net', label => 'flapping cuts', cuts => []);
		my $until = time + 2 + rand(2);
		$net_busy = 1;
		my $toggle;
		$toggle = sub {
			my ($all) = @_;
			my $cut = grep { !defined $_->[3] } @{ $f->{cuts} };
			$net_off->($f) if $cut;
			if ($all || time >= $until)
			{
				$f->{t_end} = time;
				$net_busy = 0;
				return;
			}
			$net_on->($f, 'cut', map { [ $s, $_ ] } @n) unless $cut;
			push @heal, [ time + 0.1 + rand(0.3), $toggle ];
		};
		$toggle->(0);
		return 1;
	},
	# the two majorities overlap in one node, which is then wiped: east
	# still holds its leases on the other two of its nodes, and west could
	# take them with the wiped node and its own two, but for the quarantine
	part_wipe => sub {
		return 0 if $net_busy || $n_out->() > 0;
		my ($k, @pairs) = $overlapping->();
		$partition->('majorities overlapping in one node, which is wiped', 3 + rand(1), 'cut',
			@pairs);
		$out[$k] = 1;    # no other node fault meanwhile
		push @heal, [ time + 0.8 + rand(0.7), sub {
			$down->($k, 0.05 + rand(0.2), 1, 'wipe the node two majorities share');
		} ];
		return 1;
	}) if $net;
my %label = (pause => 'SIGSTOP one node', pause2 => 'SIGSTOP two nodes',
	wipe_bare => 'SIGSTOP two nodes, then wipe a third',
	wipe_crash => 'SIGSTOP two nodes, wipe a third, crash-restart a server',
	kill9 => 'kill -9, restart from AOF', wipe => 'wipe data, restart',
	clock => 'clock jump (one node)', term_wakeup => 'SIGTERM wake-up worker',
	term_keepalive => 'SIGTERM keep-alive worker', reload => 'pg_reload_conf() unchanged',
	reload_change => 'reload with a changed setting',
	terminate => 'pg_terminate_backend(holder)', crash => 'SIGKILL a backend (crash-restart)',
	part_overlap => 'majorities overlapping in one node',
	part_minority => 'one server in a minority', drop_replies => 'replies of a node to one server dropped',
	part_flap => 'flapping cuts', part_wipe => 'majorities overlapping in one node, which is wiped');

# what ends the faults, in time order; all of it with $all
my $run_heals = sub {
	my ($all) = @_;
	while (@heal)
	{
		@heal = sort { $a->[0] <=> $b->[0] } @heal;
		last unless $all || $heal[0][0] <= time;
		(shift @heal)->[1]->($all);
	}
};
# faults of @kinds until $until: every kind once first, in a random order
# (one that cannot run now comes again), then at random; then every fault
# ends (a server in its crash-restart is waited for).  A fault that needs
# every node in (two nodes stopped, a wipe of a node two majorities hold
# alone): once picked and refused, it waits in a queue; the first there is
# tried at every turn before any other fault, and takes the place of every
# node fault that has run once until it could run (with the quarantine on,
# nodes are often out).  The wipe of the node two
# majorities share needs the network free as well: while it waits first,
# it takes the place of the network faults that have run once too (in CI
# a main phase once passed without it, the network always busy when the
# nodes were all in).
my %node_fault = map { $_ => 1 } qw(pause pause2 wipe_bare wipe_crash kill9 wipe part_wipe);
my %needs_all = map { $_ => 1 } qw(pause2 wipe_bare wipe_crash part_wipe);
my %due_first = (pause2 => 0, part_wipe => 1, wipe_bare => 2, wipe_crash => 2);
my %net_fault = map { $_ => 1 } qw(part_overlap part_minority drop_replies part_flap part_wipe);
my $blocks = sub {
	my ($due, $want) = @_;
	return $node_fault{$want} || ($due eq 'part_wipe' && $net_fault{$want});
};
my $nemesis = sub {
	my ($until, @kinds) = @_;
	my @todo = $shuffled->(@kinds);
	my %did;
	my @due;    # faults that need every node in, in the order they waited
	my $next = time + 0.5;
	while (time < $until)
	{
		$run_heals->(0);
		$crash_over->();
		if (time >= $next && @due && $act{ $due[0] }->())
		{
			# the fault waiting first could run now: it takes this turn
			# (in CI a main phase once passed without SIGSTOP two nodes,
			# every node in only while other faults' turns came)
			$did{ $due[0] } = 1;
			shift @due;
			$next = time + 0.3 + rand(1.2);
		}
		if (time >= $next)
		{
			my $want = @todo ? shift @todo : $pick->(@kinds);
			my $kind = @due && $blocks->($due[0], $want) && $did{$want} ? $due[0] : $want;
			my $ran = $act{$kind}->();
			if ($needs_all{$kind})
			{
				@due = grep { $_ ne $kind } @due;
				push @due, $kind unless $ran || $did{$kind};
				# the one that restarts no node first: it leaves every node
				# in for the next (with the quarantine, a wipe keeps a node
				# out for seconds; runs passed without SIGSTOP two nodes)
				@due = sort { $due_first{$a} <=> $due_first{$b} } @due;
			}
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
	my $wait = time + 60;
	while (%restarting && time < $wait)
	{
		$crash_over->();
		usleep(100_000);
	}
	die 'a server did not come back from its crash-restart in 60 s' if %restarting;
};
my @net_kinds = grep { /^part_(?!wipe)|^drop_/ } sort keys %act;

# the control phase: the quarantine off, nodes of two majorities wiped
$nemesis->($control_end, 'wipe_bare', $net ? 'part_wipe' : ());
# the quarantine on; no node faults until every statement begun without it
# has ended
$phase = 'switch';
for my $pg (@pg)
{
	$pg->safe_psql('postgres',
		"ALTER SYSTEM SET redlock.restart_quarantine = '${quarantine_s}s'; SELECT pg_reload_conf()");
}
$quarantine_now = $quarantine_s;
my @not_nodes = (qw(term_wakeup term_keepalive reload reload_change terminate crash), @net_kinds);
$nemesis->($main_start, @not_nodes);
# the main phase: every fault, with the quarantine (the wipes of a node of
# a bare majority more often); the network's last fault ends it
$phase = 'main';
# (the clock jump needs libfaketime, which Valkey does not run under)
my @all_kinds = grep { $_ ne 'clock' || defined $fake_node } sort keys %act;
$nemesis->($faults_end - ($net ? $final_net : 0), @all_kinds, ('wipe_bare', 'wipe_crash') x 2);
# every node runs again
for my $i (0 .. 4)
{
	$redis[$i]->resume if $redis[$i]{pid};
	next if $redis[$i]{pid} && $redis[$i]->ping;
	start_node($i);
	$started[$i] = time;
}

# ---------- 6. leasing again after the faults ----------

my $probe_no = 0;
# each probe session asks for a lease of its own, the two servers in turn:
# $n tries (or until $until) of the servers in @todo; returns the time of
# each server's grant (on its own clock)
my $ask = sub {
	my ($until, $n, @todo) = @_;
	my %at;
	while (@todo && $n-- > 0 && time < $until)
	{
		my $s = shift @todo;
		probe_connect($s) if !$probe{$s} || $probe{$s}{dead};
		my $res = 'probe:' . $s . ':' . ++$probe_no;
		my $r = $probe{$s}
		  ? $probe{$s}->query("SELECT tok, extract(epoch FROM clock_timestamp()) FROM"
			  . " (SELECT redlock_try_lock('$res', 2000) AS tok OFFSET 0) s")
		  : {};
		my ($tok, $at) = split /\|/, $r->{out} // '';
		if ($r->{ok} && defined $tok && $tok ne '')
		{
			$at{$s} = $at;
		}
		else
		{
			push @todo, $s;
			usleep(10_000);
		}
	}
	return %at;
};
# the network's last fault: both servers in a minority while their probes
# keep asking (and their connections to the cut nodes fail), then the
# network heals
if ($net)
{
	my ($k, @n) = $shuffled->(0 .. 4);
	my $f = $fault->(kind => 'net', label => 'both servers in a minority, then all heals',
		cuts => []);
	$net_on->($f, 'cut', (map { [ 'east', $_ ] } $k, @n[ 0, 1 ]), map { [ 'west', $_ ] } $k,
		@n[ 2, 3 ]);
	my $until = time + $final_net;
	while (time < $until)
	{
		$ask->($until, 2, 'east', 'west');
		usleep(200_000);
	}
	$net_off->($f);
	$net->heal_all;
	$f->{t_end} = time;
}
my $healed = time;
# leases can be had again once a majority of the nodes is out of its
# quarantine (nodes restarted by the last faults are in it)
my @free_at = sort { $a <=> $b }
  map { $quarantined->($_) ? $started[$_] + $quarantine_now + 2 : $healed } 0 .. 4;
my $ready = $free_at[2];
my %granted_at = $ask->($ready + 60, 1000, 'east', 'west');
my %recovery = map { $_ => defined $granted_at{$_} ? $granted_at{$_} - $ready : undef } 'east', 'west';
$_->close for values %probe;

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

my $history = FeatureSoakCheck::read_history(grep { -e } @files);
my $rep = FeatureSoakCheck::check(events => $history, faults => \@faults, audit => \@audit);

# waits that ended in a grant: was the holder before on this server or the
# other (a local wake-up or handoff, or one across the servers)?  (A reader
# after a reader waited for no one.)
my (%waited, %prev);
for my $l (sort { $a->{ret} <=> $b->{ret} } @{ $rep->{leases} })
{
	my $p = $prev{ $l->{res} };
	if ($p && $l->{ret} - $l->{start} > 0.05 && $l->{start} < $p->{to}
		&& !($p->{mode} eq 'shared' && $l->{mode} eq 'shared'))
	{
		$waited{ $p->{server} eq $l->{server} ? 'local' : 'other server' }++;
	}
	$prev{ $l->{res} } = $l;
}
my $kept_alive = grep { $_->{kind} eq 'keepalive' && $_->{to} - $_->{ret} > 2.0 } @{ $rep->{leases} };
my $kept_alive_shared =
  grep { $_->{kind} eq 'shared-keepalive' && $_->{to} - $_->{ret} > 2.0 } @{ $rep->{leases} };
# readers together, and of them those of the two servers
my @together = @{ $rep->{together} };
my %server_of = map { $_->{lease} => $_->{server} } @{ $rep->{leases} };
my $together_across = grep { $server_of{ $_->{first} } ne $server_of{ $_->{second} } } @together;
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
my $multi = $rep->{multi};
$summary .= sprintf("  %-50s %d (%d resources)\n", 'multi-resource grants checked (all or none)',
	$multi->{sets}, $multi->{resources});
$summary .= sprintf("  %-50s %d\n", "multi-resource grants: $_", $multi->{kinds}{$_})
  for sort keys %{ $multi->{kinds} // {} };
$summary .= sprintf("  %-50s %d\n", 'multi-resource grants whose validity was read', $multi->{observed});
$summary .= sprintf("  %-50s %d\n", "a set's lease next to another holder's", $multi->{met});
$summary .= sprintf("  %-50s %d\n", 'waits granted after a holder on this server', $waited{local} // 0);
$summary .= sprintf("  %-50s %d\n", 'waits granted after a holder on the other', $waited{'other server'} // 0);
$summary .= sprintf("  %-50s %d\n", 'keep-alive leases held past their TTL', $kept_alive);
$summary .= sprintf("  %-50s %d\n", 'SHARED: leases granted', $rep->{modes}{shared} // 0);
$summary .= sprintf("  %-50s %d\n", 'SHARED: keep-alive leases held past their TTL', $kept_alive_shared);
$summary .= sprintf("  %-50s %d (%d across the servers)\n", 'SHARED: overlaps of two readers (allowed)',
	scalar @together, $together_across);
$summary .= sprintf("  %-50s %d\n", 'fenced writes accepted', $rep->{writes_ok});
$summary .= sprintf("  %-50s %d\n", "fenced writes refused: $_", $rep->{writes_refused}{$_})
  for sort keys %{ $rep->{writes_refused} };
$summary .= sprintf("  %-50s %d\n", "fault: $_", $count{$_}) for sort grep { !/^control: / } keys %count;
$summary .= "  network faults SKIPPED: " . NetFault::why_not() . "\n" unless $net;
$summary .= sprintf("  %-50s %d\n", 'quarantined nodes seen in redlock_nodes', $quarantine_seen);
$summary .= sprintf("  %-50s %d\n", "connections lost ($_)", $rep->{lost}{$_} // 0) for 'east', 'west';
my @crashes = grep { $_->{kind} eq 'crash' } @faults;
$summary .= sprintf("  %-50s %.1f s\n", 'crash-restarts: longest until connections again',
	max(map { $_->{t_end} - $_->{t} } @crashes))
  if @crashes;
for my $s ('east', 'west')
{
	my ($l, $b) = ($rep->{longest}{$s}, $rep->{beyond}{$s});
	$summary .= sprintf("  %-50s %.3f s (wait_ms %d, %s)\n", "longest lock call ($s)", $l->{d}, $l->{w},
		$l->{ev} eq 'grant' ? 'granted' : "refused $l->{sqlstate}")
	  if $l;
	$summary .= sprintf("  %-50s %.3f s (%s, wait_ms %d)\n", "longest beyond its wait_ms ($s)",
		$b->{d} - $b->{w} / 1000, $b->{what}, $b->{w})
	  if $b;
}
$summary .= sprintf("  %-50s %d\n", 'STATEMENTS over their wait_ms + 2 s', scalar @{ $rep->{slow} });
$summary .= sprintf("  %-50s %.1f s\n", 'node clock ahead after the jumps', $max_skew) if $max_skew;
$summary .= sprintf("  %-50s %d\n", 'OVERLAPS of two holders', scalar @{ $rep->{overlaps} });
$summary .= sprintf("  %-50s %d\n", 'of which on a resource of a set', scalar grep { $_->{multi} } @{ $rep->{overlaps} });
$summary .= sprintf("  %-50s %d\n", 'of which SHARED: a reader and a writer',
	scalar grep { $_->{shared} } @{ $rep->{overlaps} });
$summary .= sprintf("  %-50s %d\n", 'MODES: leases read back in another mode',
	scalar @{ $rep->{mode_bad} });
$summary .= sprintf("  %-50s %d\n", 'MULTI: sets not held whole (all or none)', scalar @{ $rep->{multi_bad} });
$summary .= sprintf("  %-50s %d\n", 'overlaps after a clock jump (known limit)', scalar @{ $rep->{overlaps_clock} });
$summary .= sprintf("  %-50s %d\n", 'TOKENS out of grant order', scalar @{ $rep->{token_order} });
$summary .= sprintf("  %-50s %d\n", 'FENCE: stale tokens accepted', scalar @{ $rep->{fence} });
$summary .= sprintf("  %-50s %s\n", "lease again after the faults ($_)",
	defined $recovery{$_} ? sprintf('%.3f s', $recovery{$_}) : 'never') for 'east', 'west';
$summary .= sprintf("  %-50s %.1f s\n", 'of which a running quarantine (not counted)', $ready - $healed)
  if $ready > $healed;
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
	diag sprintf("overlap on %s: %s and %s (tokens %s, %s), %.3f s from %.3f",
		$o->{res}, $o->{first}, $o->{second}, $o->{tokens}, $o->{modes}, $o->{to} - $o->{from},
		$o->{from} - $t0);
}
# the two leases of an overlap, as their holders saw them (times from the start)
sub show_lease
{
	my ($id) = @_;
	my ($l) = grep { $_->{lease} eq $id } @{ $rep->{leases} };
	return sprintf("  %s %s (%s) on %s token %s: call %.3f, granted %.3f, told %s, cut %s\n",
		$l->{lease}, $l->{kind}, $l->{mode}, $l->{server}, $l->{tok}, $l->{start} - $t0,
		$l->{ret} - $t0,
		join(' ', map { sprintf('%.3f+%d', $_->[0] - $t0, $_->[1]) } @{ $l->{seen} // [] }),
		defined $l->{cut} ? sprintf('%.3f', $l->{cut} - $t0) : '-');
}
for my $o (@{ $rep->{overlaps} }, @{ $rep->{overlaps_clock} }, @{ $rep->{overlaps_wipe} })
{
	diag "leases of an overlap:\n" . show_lease($o->{first}) . show_lease($o->{second});
}
# the faults' times, for reading the overlaps above
sub fault_place
{
	my ($f) = @_;
	return $f->{node} // $f->{server} // join(' ', sort { $a cmp $b } keys %{
		{ map { ("$_->[0]-" . ($_->[1] + 1) => 1) } @{ $f->{cuts} } } });
}
diag join('', map {
	sprintf("fault at %.3f: %s %s\n", $_->{t} - $t0, $_->{label}, fault_place($_))
} @faults)
  if @{ $rep->{overlaps} } || @{ $rep->{overlaps_clock} } || @{ $rep->{token_order} } || @{ $rep->{fence} };
diag "set $_->{set} ($_->{kind}, $_->{res}) not held whole: $_->{why}" for @{ $rep->{multi_bad} };
diag "token order: $_->{res}: $_->{earlier} ($_->{earlier_tok}) before $_->{later} ($_->{later_tok})"
  for @{ $rep->{token_order} };
diag "fence: row $_->{row} accepted $_->{new} after $_->{old} ($_->{writer})" for @{ $rep->{fence} };
diag sprintf("mode: %s on %s asked %s, read back %s at %.3f", $_->{lease}, $_->{res}, $_->{asked},
	$_->{told}, $_->{t} - $t0) for @{ $rep->{mode_bad} };
diag sprintf("slow: %s on %s took %.3f s with wait_ms %d, sent at %.3f", $_->{what}, $_->{server},
	$_->{d}, $_->{w}, $_->{t} - $t0) for @{ $rep->{slow} };

cmp_ok($rep->{grants}, '>', 30, 'the sessions were granted leases');
for my $k (qw(xact session extend keepalive pause nested nested-inner))
{
	cmp_ok($rep->{kinds}{$k} // 0, '>', 0, "leases of kind $k were granted");
}
for my $k (qw(multi multi-xact))
{
	cmp_ok($multi->{kinds}{$k} // 0, '>', 0, "sets of several resources of kind $k were granted");
}
cmp_ok($multi->{observed}, '>', $multi->{sets} * 0.8, 'most sets were read by their holders right after their grant');
cmp_ok($multi->{met}, '>', 0, "sets' leases came next to other holders' leases of their resources");
# the checker on this run's own history, broken: one resource of a set
# dropped (all or none), and another holder's grant moved into a set's
# lease of that resource (an overlap)
{
	my ($drop) = grep { $_->{ev} eq 'grant' && defined $_->{set} && @{ $_->{set_res} } > 1 } @$history;
	my @mut = grep { $_ != $drop } @$history;
	my $m = FeatureSoakCheck::check(events => \@mut, faults => \@faults, audit => []);
	is(join(' ', map { "$_->{set}: $_->{why}" } @{ $m->{multi_bad} }), "$drop->{set}: no grant of $drop->{res}",
		"the checker finds this run's set $drop->{set} held in part once its grant of $drop->{res} is dropped");
	# a set's lease, and a later lease of its resource by another holder
	# (both of some length), that one moved to begin inside the first
	my ($in, $later);
	for my $l (grep { defined $_->{set} && $_->{to} - $_->{ret} > 0.05 } @{ $rep->{leases} })
	{
		($later) = grep {
			$_->{res} eq $l->{res} && $_->{ret} > $l->{to} && $_->{to} - $_->{ret} > 0.05
			  && !($_->{server} eq $l->{server} && $_->{pid} == $l->{pid})
		} @{ $rep->{leases} };
		$in = $l, last if $later;
	}
	ok($in, "a set's lease was followed by another holder's lease of its resource");
	if ($in)
	{
		my ($other) = grep { $_->{ev} eq 'grant' && $_->{lease} eq $later->{lease} } @$history;
		my %moved = (%$other, start => $in->{ret}, ret => $in->{ret} + 0.01);
		my @mut2 = map { $_ == $other ? \%moved : $_ } @$history;
		my $m2 = FeatureSoakCheck::check(events => \@mut2, faults => \@faults, audit => []);
		ok((grep { $_->{first} eq $in->{lease} && $_->{second} eq $other->{lease} && $_->{multi} }
			map { @{ $m2->{$_} } } qw(overlaps overlaps_clock overlaps_wipe)),
			"the checker finds an overlap once another holder's grant of $in->{res} ($other->{lease})"
			  . " is moved into set $in->{set}'s lease of it ($in->{lease})");
	}
}
# the same with shared leases: another holder's exclusive grant moved
# into a reader's lease is an overlap; another reader's grant moved there
# is none (readers together)
for my $mode ('exclusive', 'shared')
{
	my ($in, $later);
	for my $l (grep { $_->{mode} eq 'shared' && $_->{to} - $_->{ret} > 0.05 } @{ $rep->{leases} })
	{
		($later) = grep {
			$_->{res} eq $l->{res} && $_->{mode} eq $mode && !defined $_->{set}
			  && $_->{ret} > $l->{to} && $_->{to} - $_->{ret} > 0.05
			  && !($_->{server} eq $l->{server} && $_->{pid} == $l->{pid})
		} @{ $rep->{leases} };
		$in = $l, last if $later;
	}
	ok($in, "a shared lease was followed by another holder's $mode lease of its resource");
	next unless $in;
	my ($other) = grep { $_->{ev} eq 'grant' && $_->{lease} eq $later->{lease} } @$history;
	my %moved = (%$other, start => $in->{ret}, ret => $in->{ret} + 0.01);
	my $m = FeatureSoakCheck::check(events => [ map { $_ == $other ? \%moved : $_ } @$history ],
		faults => \@faults, audit => []);
	my $pair = sub {
		return grep { $_->{first} eq $in->{lease} && $_->{second} eq $other->{lease} } @_;
	};
	my @flagged = $pair->(map { @{ $m->{$_} } } qw(overlaps overlaps_clock overlaps_wipe));
	my @along = $pair->(@{ $m->{together} });
	if ($mode eq 'exclusive')
	{
		ok(@flagged == 1 && $flagged[0]{shared} && !@along,
			"the checker finds an overlap once another holder's exclusive grant of $in->{res}"
			  . " ($other->{lease}) is moved into a shared lease of it ($in->{lease})");
	}
	else
	{
		ok(!@flagged && @along == 1,
			"the checker finds no overlap, but readers together, once another reader's grant of"
			  . " $in->{res} ($other->{lease}) is moved into a shared lease of it ($in->{lease})");
	}
}
cmp_ok($rep->{observed}, '>', $rep->{grants} * 0.8, 'most leases were observed by their holders');
cmp_ok($kept_alive, '>', 0, 'keep-alive leases were held past their TTL');
cmp_ok($rep->{modes}{shared} // 0, '>', 0, 'shared leases were granted');
for my $k (qw(shared shared-xact shared-keepalive))
{
	cmp_ok($rep->{kinds}{$k} // 0, '>', 0, "shared leases of kind $k were granted");
}
cmp_ok($kept_alive_shared, '>', 0, 'shared keep-alive leases were held past their TTL');
cmp_ok(scalar @together, '>', 0, 'readers of different sessions held a resource together');
cmp_ok($together_across, '>', 0, 'readers of the two servers held a resource together');
cmp_ok($waited{local} // 0, '>', 0, 'waiters were granted after a holder on their own server');
cmp_ok($waited{'other server'} // 0, '>', 0, 'waiters were granted after a holder on the other server');
cmp_ok($rep->{writes_ok}, '>', 0, 'fenced writes were accepted');
for my $k (@all_kinds)
{
	cmp_ok($count{ $label{$k} } // 0, '>', 0, "fault injected: $label{$k}");
}
cmp_ok(($rep->{lost}{east} // 0) + ($rep->{lost}{west} // 0), '>', 0,
	'sessions lost their connections in crash-restarts, and went on');
cmp_ok($count{'control: wipe a node of a bare majority'} // 0, '>', 0,
	'the control phase wiped nodes of a bare majority, with the quarantine off');
cmp_ok($quarantine_seen, '>', 0, 'the servers quarantined nodes that restarted in the main phase');
cmp_ok($max_skew, '>', 3, "libfaketime moved the node's clock forward") if defined $fake_node;
is(scalar @{ $rep->{overlaps} }, 0,
	'no two holders held a resource at once (outside clock jumps; wipes included, under the quarantine)');
is(scalar(grep { $_->{shared} } @{ $rep->{overlaps} }), 0,
	'no shared lease overlapped an exclusive one (the same exceptions)');
is(scalar @{ $rep->{mode_bad} }, 0, 'every lease was read back in the mode it asked for');
is(scalar @{ $rep->{multi_bad} }, 0, 'every set of several resources was held whole (all or none)');
is(scalar @{ $rep->{token_order} }, 0, 'tokens increase in the order of the grants');
is(scalar @{ $rep->{fence} }, 0, 'every fenced row accepted only increasing tokens');
is(scalar @{ $rep->{slow} }, 0, 'no statement ran longer than its wait_ms + 2 s');
for my $s ('east', 'west')
{
	ok(defined $recovery{$s} && $recovery{$s} <= 2.0,
		"$s leases again within 2 s of the end of the faults" . ($net ? ' (the network healed)' : ''));
}
# no backend died but those the nemesis killed with SIGKILL
for my $pg (@pg)
{
	# (PostgreSQL 18 names it "client backend", 15 "server process")
	my @bad = grep { !(/(?:server process|client backend) \(PID (\d+)\) was terminated by signal 9\b/ && $killed{ $pg->name }{$1}) }
	  grep { /terminated by signal|PANIC/ } split /\n/, slurp_file($pg->logfile);
	is(join("\n", @bad), '', $pg->name . ': no backend crashed but those the nemesis killed');
}

$_->stop for @pg;
rmtree($histdir) if Test::More->builder->is_passing && !$ENV{SOAK_HISTORY};
done_testing();

# a failing run's history stays, with the servers' and the nodes' logs (also
# when the test died on the way), and its place is printed
END
{
	my $exit = $?;
	# the helper removes its rules when run-tests.sh stops it; heal now
	eval { $net->heal_all if $net; 1 } or diag "healing the network: $@";
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
