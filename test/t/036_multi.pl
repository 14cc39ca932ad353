# Several resources at once, all or none (redlock_lock(text[])), on two
# servers sharing the Redis nodes: sessions of both take overlapping sets
# in varying orders, with waits, beside one-resource calls on the same
# resources.  The checker: every grant of a set holds each of its
# resources on a majority of the nodes (its keys, read back with
# redlock_holder while it is held), no two holders' intervals overlap on a
# resource, and each resource's tokens grow with its grants.  Then: a set
# refused because one resource is held leaves no key of the set on any
# node (refused everywhere, or won on a minority and withdrawn there); the
# transaction form is released at COMMIT and ROLLBACK; a waiter that is
# cancelled leaves nothing; a backend terminated, or killed, leaves nothing
# past the TTL.  Real Redis nodes and two real clusters.
use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedlockTest;
use Test::More;
use Time::HiRes qw(time usleep);

my @redis = redis_nodes(3);
my ($east, $west) = redlock_pair(nodes => \@redis,
	conf => "redlock.node_timeout = '2s'\nrestart_after_crash = on\n");
my $majority = int(@redis / 2) + 1;

# --- the workload: 2 sessions on each server, 25 calls each
my $worker_sql = <<'SQL';
CREATE TABLE IF NOT EXISTS held (who text, res text, token bigint,
	since timestamptz, until timestamptz, on_nodes int);
SQL
$_->safe_psql('postgres', $worker_sql) for $east, $west;

# each call: a set of two or three of mt:1..mt:4 in a random order (or,
# one time in four, one resource alone), held for up to 20 ms; while it is
# held, on how many nodes this backend holds each resource
sub worker_do
{
	my ($who) = @_;
	return <<"SQL";
DO \$\$
DECLARE
	sets text[] := ARRAY['mt:1 mt:2', 'mt:2 mt:3', 'mt:3 mt:1 mt:4', 'mt:4 mt:2'];
	s text[];
	t bigint[];
	since timestamptz;
	n int[];
BEGIN
	FOR i IN 1 .. 25 LOOP
		s := ARRAY(SELECT x FROM unnest(string_to_array(sets[1 + floor(random() * 4)::int], ' ')) x
				   ORDER BY random());
		IF random() < 0.25 THEN
			s := s[1:1];
			t := ARRAY[redlock_lock(s[1], 10000, wait_ms => 60000)];
		ELSE
			t := redlock_lock(s, 10000, wait_ms => 60000);
		END IF;
		since := clock_timestamp();
		n := ARRAY(SELECT (SELECT count(*) FROM redlock_holder(r)
						    WHERE pid = pg_backend_pid() AND this_server)::int
					 FROM unnest(s) r);
		PERFORM pg_sleep(random() * 0.02);
		INSERT INTO held
			SELECT '$who', s[k], t[k], since, clock_timestamp(), n[k]
			  FROM generate_subscripts(s, 1) k;
		IF cardinality(s) = 1 THEN
			PERFORM redlock_unlock(s[1]);
		ELSE
			PERFORM redlock_unlock(s);
		END IF;
	END LOOP;
END \$\$;
SQL
}

my @workers;
for my $w (['east', $east, 'e1'], ['east', $east, 'e2'], ['west', $west, 'w1'], ['west', $west, 'w2'])
{
	my $s = $w->[1]->background_psql('postgres', on_error_stop => 0);
	$s->query_until(qr/started/, "\\echo started\n" . worker_do($w->[2]) . "\\echo done-$w->[2]\n");
	push @workers, [$s, $w->[2]];
}
for my $w (@workers)
{
	my ($s, $who) = @$w;
	$s->query_until(qr/done-$who/, '');
	pass("worker $who finished");
	like($s->{stderr}, qr/^\s*$/, "worker $who saw no error");
	$s->quit;
}

# every row, both servers, as [who, res, token, since_us, until_us, on_nodes]
my @rows;
for my $pg ($east, $west)
{
	for my $line (split /\n/, $pg->safe_psql('postgres',
			"SELECT who, res, token, extract(epoch FROM since) * 1e6, extract(epoch FROM until) * 1e6, on_nodes FROM held"))
	{
		push @rows, [split /\|/, $line];
	}
}
is(scalar @rows >= 100, 1, "the workers recorded their grants (" . scalar(@rows) . " resource holdings)");
is(scalar(grep { $_->[5] < $majority } @rows), 0,
	'every grant held each of its resources on a majority of the nodes');
my ($overlaps, $tokens_back) = (0, 0);
my %by_res;
push @{ $by_res{ $_->[1] } }, $_ for @rows;
for my $res (sort keys %by_res)
{
	my @r = sort { $a->[3] <=> $b->[3] } @{ $by_res{$res} };
	for my $i (1 .. $#r)
	{
		$overlaps++ if $r[$i]->[3] < $r[$i - 1]->[4];
		$tokens_back++ if $r[$i]->[2] <= $r[$i - 1]->[2];
	}
}
is($overlaps, 0, 'no two holders held a resource at the same time');
is($tokens_back, 0, "each resource's tokens grew with its grants");
ok(no_keys('mt:*', @redis), 'nothing is left on the nodes');

# --- a set refused because one resource is held: no key of it anywhere
my $h = $east->background_psql('postgres', on_error_stop => 0);
$h->query_safe("SELECT redlock_lock('mz:b', 60000)");
my $s = $west->background_psql('postgres', on_error_stop => 0);
is($s->query_safe("SELECT redlock_try_lock(ARRAY['mz:a', 'mz:b', 'mz:c']) IS NULL"), 't',
	'a try-lock of a set with a held resource is refused');
is(key_count('mz:a', @redis) . ' ' . key_count('mz:c', @redis), join(' ', ('0') x (2 * @redis)),
	'and set none of its other keys on any node');
$s->query("SET lock_timeout = '300ms'; SELECT redlock_lock(ARRAY['mz:c', 'mz:b'], 5000)");
like($s->{stderr}, qr/could not obtain leases on "mz:c", "mz:b" within lock_timeout/,
	'a wait for it ends at lock_timeout');
$s->{stderr} = '';
$s->query_safe('RESET lock_timeout');
is(key_count('mz:c', @redis), join(' ', ('0') x @redis), 'leaving no key behind');
$h->query_safe("SELECT redlock_unlock('mz:b')");

# held on a majority by someone else (written on the nodes): the node that
# has it free grants the set, which is then withdrawn there
$redis[$_]->cli('SET', 'redlock:lock:mz:d', 'someone-else', 'PX', '60000') for 0 .. $majority - 1;
is($s->query_safe("SELECT redlock_try_lock(ARRAY['mz:e', 'mz:d']) IS NULL"), 't',
	'a set whose resource a majority has is refused');
ok(no_keys('mz:e', @redis), 'and withdrawn from the node that granted it');
$redis[$_]->cli('DEL', 'redlock:lock:mz:d') for 0 .. $majority - 1;
# held on a minority: granted on the rest, a majority
$redis[0]->cli('SET', 'redlock:lock:mz:d', 'someone-else', 'PX', '60000');
is($s->query_safe("SELECT cardinality(redlock_try_lock(ARRAY['mz:e', 'mz:d']))"), '2',
	'a set whose resource only a minority has is granted');
is(key_count('mz:e', @redis), join(' ', 0, (1) x (@redis - 1)),
	'on the nodes that granted all of it, and none of it on the other');
$s->query_safe("SELECT redlock_unlock(ARRAY['mz:e', 'mz:d'])");
$redis[0]->cli('DEL', 'redlock:lock:mz:d');
ok(no_keys('mz:*', @redis), 'released');

# --- the transaction form: released at COMMIT and at ROLLBACK
for my $end ('COMMIT', 'ROLLBACK')
{
	$s->query_safe('BEGIN');
	$s->query_safe("SELECT redlock_xact_lock(ARRAY['mx:a', 'mx:b'], 60000)");
	is(key_count('mx:*', @redis), join(' ', (2) x @redis), "in a transaction: held on every node ($end)");
	$s->query_safe($end);
	ok(no_keys('mx:*', @redis), "released at $end");
}

# --- a waiter cancelled: its rows and nothing on the nodes are left
$h->query_safe("SELECT redlock_lock('my:b', 60000)");
my ($w, $wpid) = start_waiter($west, 'my:a',
	call => "redlock_lock(ARRAY['my:a', 'my:b'], 60000)");
is($west->safe_psql('postgres', "SELECT count(*) FROM redlock_locks WHERE pid = $wpid AND NOT granted AND place = 0"),
	'2', 'the waiter has a row per resource, with no place in line');
$west->safe_psql('postgres', "SELECT pg_cancel_backend($wpid)");
ok(wait_for(sub { $west->safe_psql('postgres', "SELECT count(*) FROM redlock_locks WHERE pid = $wpid") eq '0' }),
	'cancelled: its rows are gone');
is(key_count('my:a', @redis), join(' ', ('0') x @redis), 'and nothing of it is on the nodes');
$w->quit;
$h->query_safe("SELECT redlock_unlock('my:b')");

# --- a backend terminated releases its set at exit; one killed leaves it
# to its TTL
my $k = $west->background_psql('postgres', on_error_stop => 0);
my $kpid = $k->query_safe("SELECT pg_backend_pid(); SELECT redlock_lock(ARRAY['mk:a', 'mk:b'], 60000) \\g /dev/null");
is(key_count('mk:*', @redis), join(' ', (2) x @redis), 'a set held');
$west->safe_psql('postgres', "SELECT pg_terminate_backend($kpid)");
ok(no_keys('mk:*', @redis), 'terminated: released at exit');

$k = $west->background_psql('postgres', on_error_stop => 0);
$kpid = $k->query_safe("SELECT pg_backend_pid(); SELECT redlock_lock(ARRAY['mk:c', 'mk:d'], 3000) \\g /dev/null");
my $killed = time;
kill 'KILL', $kpid;
$west->poll_query_until('postgres', 'SELECT true') or die 'west did not come back';
ok(wait_for(sub { key_count('mk:*', @redis) eq join(' ', ('0') x @redis) }, 30),
	'killed: nothing is left once the TTL ran out');
cmp_ok(time - $killed, '<', 3 + 10, 'within the TTL and a little');

$h->quit;
$s->quit;
done_testing();
