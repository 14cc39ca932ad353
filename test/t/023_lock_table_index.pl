# The lock table's index by key (src/shared/lock_table_index.c): keys that share a
# bucket, a slot taken out of the middle of a chain and reused for another
# key, and a full table whose freed slots are reused.  The index hashes a
# key as SQL's hashtext() does, so the test picks keys that share a bucket
# of a 16-slot table (16 buckets).  Real Redis nodes, a real cluster with
# redlock in shared_preload_libraries.
use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedlockTest;
use Test::More;
use Time::HiRes qw(time);

my @redis = redis_nodes(3);
# a retry delay of 60 s (the most it can be) and TTLs of 60 s: a waiter
# granted within half of that was woken at release, found through the index
my $pg = redlock_cluster('lockindex', nodes => \@redis, preload => 1,
	conf => "redlock.max_leases = 16\nredlock.retry_delay = '60s'\nredlock.retry_jitter = 0\n");
my $pm_start = $pg->safe_psql('postgres', 'SELECT pg_postmaster_start_time()');
my $woken_within = 30;

my $prefix = $pg->safe_psql('postgres', 'SHOW redlock.key_prefix');
my $bucket = "hashtext('${prefix}lock:' || r) & 15";
my $names = "(SELECT 'ix:' || g AS r, g FROM generate_series(1, 10000) g) n";
my @same = split /\n/, $pg->safe_psql('postgres',
	"SELECT r FROM $names WHERE $bucket = 5 ORDER BY g LIMIT 4");
my @other = split /\n/, $pg->safe_psql('postgres',
	"SELECT r FROM $names WHERE $bucket <> 5 ORDER BY g LIMIT 40");
is(scalar @same, 4, 'four resources whose keys share a bucket');
my ($A, $B, $C, $D) = @same;

# --- a slot out of the middle of a chain, reused for a key of another
# bucket: the slots after it in the chain are still found
my $x = long_session($pg);
my $y = long_session($pg);
my $t1 = $x->query_safe("SELECT redlock_lock('$A', 60000)");
my ($w) = start_waiter($pg, $A);                 # the chain: w, x
$y->query_safe("SELECT redlock_lock('$B', 60000)");
$y->query_safe("SELECT redlock_lock('$C', 60000)");    # C, B, w, x
$y->query_safe("SELECT redlock_unlock('$B')");         # C, w, x
$y->query_safe("SELECT redlock_lock('$other[0]', 60000)");    # B's slot, reused
my $t0 = time;
$x->query_safe("SELECT redlock_unlock('$A')");
my ($tok, $took) = granted_after($w, $t0);
cmp_ok($tok, '>', $t1, 'the waiter behind a slot taken out of the chain got a newer token');
cmp_ok($took, '<', $woken_within,
	"and was woken at release (${\ sprintf '%.2f', $took }s; retry_delay is 60 s)");
$w->query_safe("SELECT redlock_unlock('$A')");
$w->quit;
$y->query_safe("SELECT redlock_unlock('$C'); SELECT redlock_unlock('$other[0]')");

# --- two waiters on keys of one bucket: each release wakes its own
$x->query_safe("SELECT redlock_lock('$A', 60000); SELECT redlock_lock('$B', 60000)");
my ($wa) = start_waiter($pg, $A);
my ($wb) = start_waiter($pg, $B);
$t0 = time;
$x->query_safe("SELECT redlock_unlock('$B')");
($tok, $took) = granted_after($wb, $t0);
cmp_ok($took, '<', $woken_within,
	"the release of $B woke its waiter (${\ sprintf '%.2f', $took }s)");
is(waiters($pg, $A), '1', "the waiter for $A, in the same bucket, still waits");
$t0 = time;
$x->query_safe("SELECT redlock_unlock('$A')");
($tok, $took) = granted_after($wa, $t0);
cmp_ok($took, '<', $woken_within,
	"the release of $A woke its waiter (${\ sprintf '%.2f', $took }s)");
$wa->query_safe("SELECT redlock_unlock('$A')");
$wb->query_safe("SELECT redlock_unlock('$B')");
$wa->quit;
$wb->quit;

# --- a full table: freed slots come back, every time
my @full = (@same, @other[1 .. 12]);
$x->query_safe("SELECT redlock_lock('$_', 60000)") for @full;
is($pg->safe_psql('postgres', 'SELECT count(*) FROM redlock_locks'), '16', 'all 16 slots in use');
my ($rc, $out, $err) = $pg->psql('postgres', "SELECT redlock_try_lock('$other[13]', 60000)");
like($err, qr/out of shared memory for redlock leases/, 'a 17th lease is refused');
my $refused = 0;
for my $i (0 .. 23)
{
	# free one slot, take it for another key (of the bucket, or not)
	my $old = $full[$i % 16];
	my $new = $i % 2 ? "$old.$i" : $other[14 + $i];
	$x->query('SELECT redlock_unlock(' . "'$old'" . ')');
	$x->query("SELECT redlock_lock('$new', 60000)");
	$refused++ if $x->{stderr} =~ /out of shared memory/;
	$full[$i % 16] = $new;
}
is($refused, 0, 'a freed slot is taken again, 24 times over in a full table');
is($pg->safe_psql('postgres', 'SELECT count(*) FROM redlock_locks'), '16', 'still 16 slots in use');
$x->query_safe("SELECT redlock_unlock('$_')") for @full;
is($pg->safe_psql('postgres', 'SELECT count(*) FROM redlock_locks'), '0', 'all released');
$x->query_safe("SELECT count(redlock_lock('again:' || g, 60000)) FROM generate_series(1, 16) g");
is($pg->safe_psql('postgres', 'SELECT count(*) FROM redlock_locks'), '16',
	'the emptied table fills again to 16');
$x->query_safe("SELECT redlock_unlock_all()");
$x->quit;
$y->quit;

nothing_crashed($pg, $pm_start);
$pg->stop;
done_testing();
