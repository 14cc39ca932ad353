# Waiters of every server that shares the nodes queue in one order (the
# waiters' queue on the nodes), with at most redlock.local_handoffs (K)
# handoffs in a row to waiters of the holder's own server while a waiter of
# another server waits.  Four preloaded clusters on the same 5 real Redis
# nodes:
#   - the setting: a small number, checked, server-wide;
#   - line: waiters of s2, then s3, then a second of s3 are granted in that
#     order, and redlock_locks shows their places 1, 2, 3;
#   - turns: with K = 1, an s1 holder hands the lease to one s1 waiter, then
#     to the s2 waiter queued on the nodes, which queues the second s1
#     waiter behind it, then to that one;
#   - leave: a waiter that gives up (wait_ms) leaves the queue at once;
#   - one hot resource: 4, 2, 3 and 4 sessions on s1..s4 loop
#       SELECT redlock_lock('hot', 5000, wait_ms => 20000); SELECT redlock_unlock('hot');
#     (pgbench, prepared statements) for 10 s, each grant recorded with its
#     token (tokens grow with every grant, so they order the grants of all
#     servers) and when its lock call began.  Nobody times out; every
#     server's share of the grants is at least half its fair share (its
#     sessions over all sessions); and every grant came after at most the
#     bound of grants to others since its call began (doc/reference.md,
#     "Waiting"),
#     (S - 1)(K + 1) ceil(n / (K + 1)) + n - 1 for a server with n sessions
#     and S = 4 servers, plus K + 1 for what the measure from the call's
#     start also counts (see $slack).
# Before the order across servers, two servers passed the lease back and
# forth along their own sessions while every session of the other two
# waited out its wait_ms (issue 33).
use strict;
use warnings FATAL => 'all';

use IPC::Run;
use POSIX qw(ceil);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedlockTest;
use Test::More;
use Time::HiRes qw(usleep);

my $secs = 10;
my %sessions = (s1 => 4, s2 => 2, s3 => 3, s4 => 4);
my @names = sort keys %sessions;
my $total = 0;
$total += $_ for values %sessions;

my @redis = redis_nodes(5);
# node_timeout 500 ms: a node kept off the CPU of a busy machine for the
# default 50 ms would fail the round it was in (a failed round is allowed
# for, but costs the retry delay)
my %pg = map {
	$_ => redlock_cluster($_, nodes => \@redis, preload => 1,
		conf => "redlock.node_timeout = '500ms'\nmax_connections = 20\n")
} @names;

my $k = $pg{s1}->safe_psql('postgres', "SELECT current_setting('redlock.local_handoffs', true)");
like($k, qr/^\d+$/, "redlock.local_handoffs is K = $k") or $k = 3;

# --- the setting: a small number, checked; server-wide (the releasing
# holder's server decides its own local handoffs)
my ($rc, $out, $err) = $pg{s1}->psql('postgres', 'ALTER SYSTEM SET redlock.local_handoffs = 17');
like($err, qr/invalid value for parameter "redlock.local_handoffs": 17.*DETAIL:  Each local handoff in a row may make a waiter of another server wait one more hold/s,
	'redlock.local_handoffs: 17 is refused, with the reason');
($rc, $out, $err) = $pg{s1}->psql('postgres', 'SET redlock.local_handoffs = 1');
like($err, qr/cannot be changed now/, 'redlock.local_handoffs: not per session');

# the live offers in the waiters' queue of $res on every node, as
# "pid,pid node pid,pid ..." (their backends)
sub queues
{
	my ($res) = @_;
	return join ' ', map {
		join ',', map { /:(\d+)$/ ? $1 : $_ } queued_offers($res, $_)
	} @redis;
}
# a waiter of server $s for $res (start_waiter's options), once at least
# $nsub wake-up workers listen for the key on every node
sub waiter_on
{
	my ($s, $res, $nsub, %opt) = @_;
	my ($w, $pid) = start_waiter($pg{$s}, $res, %opt);
	wait_for(sub {
		!grep { ($_->cli('PUBSUB', 'NUMSUB', "redlock:lock:$res") =~ /\n(\d+)$/)[0] < $nsub } @redis
	}) or die "$s: the wake-up workers do not listen for $res on every node";
	return ($w, $pid);
}
sub place
{
	my ($s, $pid) = @_;
	return $pg{$s}->safe_psql('postgres', "SELECT place FROM redlock_locks WHERE pid = $pid AND NOT granted");
}

# --- 1. one line across servers: a waiter on s2, then one on s3, then a
# second on s3 (who waits behind the first of its server, in the lock
# table) are granted in that order as the lease is released; each shows
# its place in redlock_locks
my $h = $pg{s1}->background_psql('postgres', on_error_stop => 0);
my $t = $h->query_safe("SELECT redlock_lock('line', 60000)");
my ($wa, $wapid) = waiter_on('s2', 'line', 1);
ok(wait_for(sub { queues('line') eq join(' ', ($wapid) x @redis) }), 'line: the s2 waiter is queued on every node');
my ($wb, $wbpid) = waiter_on('s3', 'line', 2);
ok(wait_for(sub { queues('line') eq join(' ', ("$wapid,$wbpid") x @redis) }),
	'line: the s3 waiter is queued behind it on every node');
my ($c, $cpid) = start_waiter($pg{s3}, 'line');
is(queues('line'), join(' ', ("$wapid,$wbpid") x @redis), 'line: the second s3 waiter waits in the lock table only');
ok(wait_for(sub { place('s2', $wapid) eq '1' && place('s3', $wbpid) eq '2' && place('s3', $cpid) eq '3' }),
	'line: redlock_locks shows places 1, 2 and 3: ' . join(' ', place('s2', $wapid), place('s3', $wbpid), place('s3', $cpid)));
$h->query_safe("SELECT redlock_unlock('line')");
my $ta = $wa->query_safe('SELECT :got');
cmp_ok($ta, '>', $t, 'line: the s2 waiter was granted first');
$wa->query_safe("SELECT redlock_unlock('line')");
my $tb = $wb->query_safe('SELECT :got');
cmp_ok($tb, '>', $ta, 'line: then the first s3 waiter');
$wb->query_safe("SELECT redlock_unlock('line')");
my $tc = $c->query_safe('SELECT :got');
cmp_ok($tc, '>', $tb, 'line: then the second s3 waiter');
$c->query_safe("SELECT redlock_unlock('line')");
$_->quit for $wa, $wb, $c;

# --- 2. at most redlock.local_handoffs (1 on s1 here) handoffs in a row to
# waiters of the holder's server while a waiter of another server waits:
# s1 holds, two s1 waiters sleep, an s2 waiter is queued on the nodes.  The
# first release goes to the first s1 waiter, the next to the s2 waiter
# (s1's turn is over), which queues the second s1 waiter behind it on the
# nodes, and that one is next.
$pg{s1}->safe_psql('postgres', 'ALTER SYSTEM SET redlock.local_handoffs = 1');
reload_seen($pg{s1}, $h);
# (TTL 10 s, wait_ms 5 s: a release that goes elsewhere fails a check, it
# does not hold the test up)
$t = $h->query_safe("SELECT redlock_lock('turns', 10000)");
my ($x, $xpid) = waiter_on('s2', 'turns', 1, call => "redlock_lock('turns', 10000, wait_ms => 5000)");
ok(wait_for(sub { queues('turns') eq join(' ', ($xpid) x @redis) }), 'turns: the s2 waiter is queued on every node');
my ($l1, $l1pid) = start_waiter($pg{s1}, 'turns', call => "redlock_lock('turns', 10000, wait_ms => 5000)");
my ($l2, $l2pid) = start_waiter($pg{s1}, 'turns', call => "redlock_lock('turns', 10000, wait_ms => 5000)");
# the token a waiter's call returned, or 0 if it failed
sub got { my ($w) = @_; my $v = $w->query('SELECT :got'); return $v =~ /^\d+$/ ? $v : 0; }
$h->query_safe("SELECT redlock_unlock('turns')");
my $t1 = got($l1);
cmp_ok($t1, '>', $t, 'turns: the first s1 waiter was handed the lease');
is(queues('turns'), join(' ', ($xpid) x @redis), 'turns: the s2 waiter is still first on every node');
$l1->query("SELECT redlock_unlock('turns')");
my $tx = got($x);
cmp_ok($tx, '>', $t1, 'turns: the next release went to the s2 waiter');
ok(wait_for(sub { queues('turns') eq join(' ', ($l2pid) x @redis) }, 10),
	'turns: the second s1 waiter, refused by that release, was queued on every node');
is($pg{s1}->safe_psql('postgres', "SELECT count(*) FROM redlock_locks WHERE pid = $l2pid AND NOT granted"), '1',
	'turns: and still waits');
$x->query("SELECT redlock_unlock('turns')");
cmp_ok(got($l2), '>', $tx, 'turns: then the second s1 waiter');
# (its lease is the value the refused handoff queued: the end of its wait
# withdraws its other offers, not that one; once it did, and the lock was
# gone from the nodes while the waiter held it.  A majority, not every node:
# the waiter's backstop attempt may meet the release halfway, take back the
# lock handed to its queued offer on some nodes, and, refused by the others,
# withdraw it there; the release then hands the others to its new offer.)
usleep(300_000);
my @held = map { /:(\d+)$/ ? $1 : $_ } lock_values('turns', @redis);
my $others = grep { $_ ne $l2pid && $_ ne '-' } @held;
ok((grep { $_ eq $l2pid } @held) >= ceil((@redis + 1) / 2) && $others == 0,
	'turns: and holds it on a majority of the nodes, nobody else on any') or diag("lock on the nodes: @held");
$_->query("SELECT redlock_unlock_all()") for $x, $l1, $l2;
$_->quit for $x, $l1, $l2;
$pg{s1}->safe_psql('postgres', 'ALTER SYSTEM RESET redlock.local_handoffs');
reload_seen($pg{s1}, $h);

# --- 3. a waiter that gives up (its wait_ms) leaves the line at once: the
# one behind it, on another server, is next
$t = $h->query_safe("SELECT redlock_lock('leave', 60000)");
($wa, $wapid) = waiter_on('s2', 'leave', 1, call => "redlock_lock('leave', 60000, wait_ms => 3000)");
ok(wait_for(sub { queues('leave') eq join(' ', ($wapid) x @redis) }), 'leave: the s2 waiter is queued on every node');
($wb, $wbpid) = waiter_on('s3', 'leave', 2);
ok(wait_for(sub { queues('leave') eq join(' ', ("$wapid,$wbpid") x @redis) }), 'leave: the s3 waiter behind it');
$wa->query('SELECT 1');
like($wa->{stderr}, qr/could not obtain lease on "leave" within wait_ms/, 'leave: the s2 waiter gave up');
ok(wait_for(sub { queues('leave') eq join(' ', ($wbpid) x @redis) }), 'leave: its offer left the queue on every node');
$h->query_safe("SELECT redlock_unlock('leave')");
cmp_ok($wb->query_safe('SELECT :got'), '>', $t, 'leave: the s3 waiter was granted next');
$wb->query_safe("SELECT redlock_unlock('leave')");
$_->quit for $wa, $wb;
$h->quit;

# --- 4. four servers on one hot resource
my $sql = $pg{s1}->basedir . '/034_cycle.sql';
append_to_file($sql, q{
SELECT statement_timestamp() AS t0, redlock_lock('hot', 5000, wait_ms => 20000) AS tok, clock_timestamp() AS t1 \gset
SELECT redlock_unlock('hot');
INSERT INTO ev VALUES (pg_backend_pid(), :t0, :t1, :tok);
});
for my $s (@names)
{
	$pg{$s}->safe_psql('postgres',
		'CREATE UNLOGGED TABLE ev (pid int, t0 timestamptz, t1 timestamptz, token bigint)');
	# every session connected and the wake-up worker subscribed before the
	# clock starts: one lock and unlock of the resource on each server
	$pg{$s}->safe_psql('postgres', "SELECT redlock_lock('hot', 5000); SELECT redlock_unlock('hot')");
}

my %run;
for my $s (@names)
{
	my ($out, $err) = ('', '');
	$run{$s} = {
		out => \$out,
		err => \$err,
		h => IPC::Run::start(
			[ 'pgbench', '-n', '-M', 'prepared', '-c', $sessions{$s}, '-j', '1',
				'-T', $secs, '-f', $sql, '-h', $pg{$s}->host, '-p', $pg{$s}->port,
				'postgres' ],
			'<', \'', '>', \$out, '2>', \$err,
			IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default))
	};
}
for my $s (@names)
{
	my $ok = $run{$s}{h}->finish;
	ok($ok, "$s: pgbench with $sessions{$s} sessions ran to its end (no session failed)")
	  or diag ${ $run{$s}{err} };
	unlike(${ $run{$s}{err} } . ${ $run{$s}{out} }, qr/aborted|55P03|could not obtain/,
		"$s: nobody timed out");
}

# every grant: server, session, when its call began, when it was granted
# (epoch seconds), token
my @grants;
for my $s (@names)
{
	for my $row (split /\n/, $pg{$s}->safe_psql('postgres',
		'SELECT pid, extract(epoch FROM t0), extract(epoch FROM t1), token FROM ev'))
	{
		my ($pid, $t0, $t1, $token) = split /\|/, $row;
		push @grants, { srv => $s, pid => $pid, t0 => $t0, t1 => $t1, token => $token };
	}
}
@grants = sort { $a->{token} <=> $b->{token} } @grants;
my %tokens;
$tokens{ $_->{token} }++ for @grants;
is(scalar(grep { $_ > 1 } values %tokens), 0, 'every grant had a token of its own (no two holders)');
cmp_ok(scalar(@grants), '>', 100, scalar(@grants) . " grants in ${secs} s");

# shares
my %n;
$n{ $_->{srv} }++ for @grants;
for my $s (@names)
{
	my $fair = $sessions{$s} / $total;
	my $share = ($n{$s} // 0) / @grants;
	cmp_ok($share, '>=', $fair / 2,
		sprintf('%s (%d sessions): %.1f %% of the grants (%d), at least half its fair share of %.1f %%',
			$s, $sessions{$s}, 100 * $share, $n{$s} // 0, 100 * $fair));
}

# the bound, in grants to others while a call waited: the grants are in
# token order, so those to others between a call's beginning and its grant
# are those before it in that order whose grant was recorded after it began
# the bound counts from the moment the call is queued on the nodes; the
# measure, from the call's start, also counts what came before: the grant
# in flight when it began, one recorded just after it began, and when its
# call begins just as its server's turn ends, the turn of another server
# whose waiter was queued while the call's first round was on its way
my $slack = $k + 1;
my %worst;
my %worst_seq;
my %longest;
for my $i (0 .. $#grants)
{
	my $g = $grants[$i];
	my $ahead = 0;
	for (my $j = $i - 1; $j >= 0; $j--)
	{
		my $h = $grants[$j];
		last if $h->{t1} < $g->{t0} - 1;	# long before: none earlier counts
		$ahead++ if $h->{t1} > $g->{t0} && $h->{pid} . $h->{srv} ne $g->{pid} . $g->{srv};
	}
	if ($ahead > ($worst{ $g->{srv} } // -1))
	{
		$worst{ $g->{srv} } = $ahead;
		my @seq;
		for (my $j = $i - 1; $j >= 0 && @seq < 40; $j--)
		{
			my $h = $grants[$j];
			last if $h->{t1} < $g->{t0} - 0.05;
			unshift @seq, ($h->{t1} > $g->{t0} ? '' : '(') . substr($h->{srv}, 1) . "." . ($h->{pid} % 1000) . ($h->{t1} > $g->{t0} ? '' : ')');
		}
		$worst_seq{ $g->{srv} } = join(' ', @seq) . " -> " . substr($g->{srv}, 1) . "." . ($g->{pid} % 1000);
	}
	my $wait = $g->{t1} - $g->{t0};
	$longest{ $g->{srv} } = $wait if $wait > ($longest{ $g->{srv} } // -1);
}
my $servers = @names;
for my $s (@names)
{
	my $nz = $sessions{$s};
	my $bound = ($servers - 1) * ($k + 1) * ceil($nz / ($k + 1)) + $nz - 1;
	cmp_ok($worst{$s}, '<=', $bound + $slack,
		sprintf('%s: at most %d grants to others during any wait (the bound %d + %d), longest wait %.0f ms',
			$s, $worst{$s}, $bound, $slack, 1000 * $longest{$s}));
}

diag "$_: $worst_seq{$_}" for @names;
$pg{$_}->stop for @names;
done_testing();
