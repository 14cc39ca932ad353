# Keep-alive leases and the lock table: an extend with a shorter TTL, a lost
# lease and its local waiters, redlock.keep_alive_limit, a hot standby, no
# keep-alive worker at all, node lists and key prefixes per database, and
# the session user behind a SECURITY DEFINER function.  Real Redis nodes and
# real clusters (a primary with a streaming standby) with redlock in
# shared_preload_libraries.
use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedlockTest;
use Test::More;
use Time::HiRes qw(time usleep);

my @a = redis_nodes(3);    # the server's nodes
my @b = redis_nodes(3);    # a database's own nodes
my $nodes_b = node_list(@b);

# a retry delay of 10 s: a waiter granted sooner than that was woken
my $pg = redlock_cluster('keep', nodes => \@a, preload => 1, init => { allows_streaming => 1 },
	conf => "redlock.retry_delay = '10s'\nredlock.retry_jitter = 0\n"
	  # every node is up: a busy machine must not turn a slow reply into a refusal
	  . "redlock.node_timeout = '1s'\n");

# $sql returns 't' in $session, waited for (at most $secs seconds, 10)
sub becomes
{
	my ($session, $sql, $secs) = @_;
	return wait_for(sub { $session->query_safe($sql) eq 't' }, $secs // 10);
}

# --- redlock_extend with a shorter TTL on a keep-alive lease: the holder
# is told the shorter validity, and the worker goes on with the shorter TTL
my $h = $pg->background_psql('postgres', on_error_stop => 0);
my $o = $pg->background_psql('postgres', on_error_stop => 0);
$h->query_safe("SELECT redlock_lock('ka:short', 30000, keep_alive => true)");
my $v = $h->query_safe("SELECT redlock_extend('ka:short', 300)");
cmp_ok($v, '<=', 300, "extend to 300 ms returns the new validity ($v ms)");
is($h->query_safe("SELECT validity_ms <= 300 FROM redlock_leases WHERE resource = 'ka:short'"),
	't', 'and redlock_leases shows it, not the 30 s of the grant');

# For 2 s, the holder reads its validity and another session tries to take
# the lease.  A grant at g1 (or earlier) overlaps any validity the holder
# was told that ends after g1: a report started at r0 saying v ms ends no
# earlier than r0 + v.
my (@told, $granted_at);
my $t_end = time + 2;
while (time < $t_end)
{
	my $r0 = time;
	my ($left, $lost) = split /\|/, $h->query_safe(
		"SELECT validity_ms, lost FROM redlock_leases WHERE resource = 'ka:short'");
	push @told, $r0 + $left / 1000 if $left > 0;
	my $tok = $o->query_safe("SELECT redlock_try_lock('ka:short', 60000)");
	if ($tok ne '')
	{
		$granted_at = time;
		last;
	}
	usleep(50_000);
}
my @overlap = defined $granted_at ? grep { $_ > $granted_at } @told : ();
is(scalar @overlap, 0,
	'no grant to another session within a validity its holder was told');
diag(defined $granted_at ? 'the other session was granted it' : 'nobody else was granted it');
$o->query_safe('SELECT redlock_unlock_all()');
$h->query_safe('SELECT redlock_unlock_all()');

# the worker goes on with the shorter TTL (1.5 s here: the machine may be
# too busy to run the worker every 100 ms)
$h->query_safe("SELECT redlock_lock('ka:mid', 30000, keep_alive => true)");
$h->query_safe("SELECT redlock_extend('ka:mid', 1500)");
usleep(4_500_000);
is($h->query_safe("SELECT validity_ms BETWEEN 1 AND 1500 AND NOT lost FROM redlock_leases WHERE resource = 'ka:mid'"),
	't', 'three TTLs after an extend to 1.5 s the lease is valid, for at most 1.5 s at a time');
is($o->query_safe("SELECT redlock_try_lock('ka:mid', 60000) IS NULL"), 't',
	'and nobody else can take it');
my @pttl = map { $_->cli('PTTL', 'redlock:lock:ka:mid') } @a;
is(scalar(grep { $_ > 0 && $_ <= 1500 } @pttl), 3,
	"the nodes have it with the 1.5 s TTL (@pttl ms left)");
$h->query_safe('SELECT redlock_unlock_all()');

# --- a lost keep-alive lease no longer holds back local waiters
$h->query_safe("SELECT redlock_lock('ka:gone', 9000, keep_alive => true)");
$_->cli('DEL', 'redlock:lock:ka:gone') for @a;
# a waiter that starts before the worker finds out: woken when it does
my $t0 = time;
my ($rc, $out, $err) = $pg->psql('postgres',
	"SELECT redlock_lock('ka:gone', 5000, wait_ms => 7000) > 0");
my $took = time - $t0;
is($out, 't', "a waiter is granted the lease the worker lost (${\ sprintf '%.1f', $took }s; the stale validity was 9 s)");
like($err, qr/^$/, 'without an error');
is($h->query_safe("SELECT lost FROM redlock_leases WHERE resource = 'ka:gone'"), 't',
	'the holder sees it lost');
($rc, $out, $err) = $pg->psql('postgres',
	"SELECT redlock_lock('ka:gone', 5000, wait_ms => 2500) > 0");
is($out, 't', 'and a later waiter with wait_ms => 2500 is granted at once');
$h->query_safe('SELECT redlock_unlock_all()');

# --- redlock.keep_alive_limit: logged once, shown, and the real expiry
$h->query_safe("SET redlock.keep_alive_limit = '1s'");
$h->query_safe("SELECT redlock_lock('ka:limit', 1000, keep_alive => true)");
ok(becomes($h, "SELECT limit_reached FROM redlock_leases WHERE resource = 'ka:limit'"),
	'redlock_leases shows the keep-alive limit reached');
ok(becomes($h, "SELECT validity_ms = 0 FROM redlock_leases WHERE resource = 'ka:limit'"),
	'then the lease expires by its TTL');
is($h->query_safe("SELECT lost FROM redlock_leases WHERE resource = 'ka:limit'"), 'f',
	'it was not lost: the limit ended it');
my $row1 = $pg->safe_psql('postgres',
	"SELECT valid_until, valid_until < now(), limit_reached FROM redlock_locks WHERE resource = 'ka:limit'");
usleep(500_000);
my $row2 = $pg->safe_psql('postgres',
	"SELECT valid_until, valid_until < now(), limit_reached FROM redlock_locks WHERE resource = 'ka:limit'");
like($row1, qr/\|t\|t$/, 'redlock_locks: valid_until has passed, limit_reached');
my ($u1) = split /\|/, $row1;
my ($u2) = split /\|/, $row2;
is($pg->safe_psql('postgres', "SELECT abs(extract(epoch FROM '$u2'::timestamptz - '$u1'::timestamptz)) < 0.05"),
	't', "valid_until is the real expiry, not the moment it is read ($u1, $u2)");
my $log = slurp_file($pg->logfile);
my @limit_lines = $log =~ /keep-alive of the lease on "ka:limit" held by process \d+ ended at redlock.keep_alive_limit \(1 s\)/g;
is(scalar @limit_lines, 1, 'the end of the keep-alive is logged once');
unlike($log, qr/redlock: (keep-alive|lease on)/,
	'keep-alive and extend log lines carry no "redlock:" prefix');
$h->query_safe('SELECT redlock_unlock_all()');
$h->query_safe('RESET redlock.keep_alive_limit');

# --- node lists and key prefixes per database
$pg->safe_psql('postgres', "CREATE DATABASE other_nodes");
$pg->safe_psql('postgres', "ALTER DATABASE other_nodes SET redlock.nodes = '$nodes_b'");
$pg->safe_psql('other_nodes', 'CREATE EXTENSION redlock');
$h->query_safe("SELECT redlock_lock('same', 60000)");
my $other = $pg->background_psql('other_nodes', on_error_stop => 0);
# (wait_ms: a wait for the other database's holder would fail with 55P03)
is($other->query_safe("SELECT redlock_lock('same', 60000, wait_ms => 3000) > 0"), 't',
	'a database with nodes of its own is granted a resource held on the server\'s nodes, without waiting');
# redlock_locks names the node list of each lease, as redlock_nodes names
# each session's own: the two granted rows on one key are told apart
my $mine = $h->query_safe('SELECT string_agg(DISTINCT node_list, \',\') FROM redlock_nodes');
my $theirs = $other->query_safe('SELECT string_agg(DISTINCT node_list, \',\') FROM redlock_nodes');
like($mine, qr/^[0-9a-f]{16}$/, "redlock_nodes names the session's node list: one id, 16 hex digits ($mine)");
isnt($theirs, $mine, "the other database's list has another id ($theirs)");
is($pg->safe_psql('postgres',
		"SELECT string_agg(datname || '=' || key || ' on ' || node_list, ' ' ORDER BY datname) FROM redlock_locks WHERE resource = 'same' AND granted"),
	"other_nodes=redlock:lock:same on $theirs postgres=redlock:lock:same on $mine",
	'redlock_locks: two holders of one key, each row with the node_list its own session sees');
$other->query_safe("SELECT redlock_unlock('same')");
is($other->query_safe(
		"SET redlock.nodes = '" . join(',', reverse map { $_->addr } @b) . "';"
		  . ' SELECT string_agg(DISTINCT node_list, \',\') FROM redlock_nodes'),
	$theirs, 'the same nodes in another order: the same id');
$other->quit;
($rc, $out, $err) = $pg->psql('other_nodes',
	"SELECT redlock_lock('ka:b', 2000, keep_alive => true)");
like($err, qr/keep_alive is not available with this session's redlock.nodes/,
	'keep_alive on nodes other than the worker\'s is refused');
$h->query_safe("SELECT redlock_unlock('same')");

for my $t (1, 2)
{
	$pg->safe_psql('postgres', "CREATE DATABASE tenant$t");
	$pg->safe_psql('postgres', "ALTER DATABASE tenant$t SET redlock.key_prefix = 't$t:'");
	$pg->safe_psql("tenant$t", 'CREATE EXTENSION redlock');
}
my @tenant = map { $pg->background_psql("tenant$_", on_error_stop => 0) } 1, 2;
$_->query_safe("SELECT redlock_lock('job', 60000)") for @tenant;
is($pg->safe_psql('postgres',
		"SELECT string_agg(datname || '=' || key, ' ' ORDER BY datname) FROM redlock_locks WHERE resource = 'job'"),
	'tenant1=t1:lock:job tenant2=t2:lock:job',
	'redlock_locks tells two tenants\' leases on one name apart by key');
is($pg->safe_psql('tenant2', "SELECT DISTINCT key FROM redlock_holder('job')"),
	't2:lock:job', 'redlock_holder names the key it asked about');
$_->query_safe('SELECT redlock_unlock_all()') for @tenant;
$_->quit for @tenant;

# --- a lease taken through a SECURITY DEFINER function shows its session user
$pg->safe_psql('postgres', q{
	CREATE ROLE alice LOGIN;
	CREATE FUNCTION take(r text) RETURNS bigint SECURITY DEFINER
		LANGUAGE sql AS $$ SELECT redlock_lock(r, 60000) $$;
	REVOKE ALL ON FUNCTION take(text) FROM PUBLIC;
	GRANT EXECUTE ON FUNCTION take(text) TO alice;
});
my $alice = $pg->background_psql('postgres', on_error_stop => 0,
	extra_params => [ '-U', 'alice' ]);
$alice->query_safe("SELECT take('definer')");
is($pg->safe_psql('postgres', "SELECT usename FROM redlock_locks WHERE resource = 'definer'"),
	'alice', 'redlock_locks shows the session user, not the function\'s owner');
$alice->quit;

# --- a hot standby runs the workers: keep-alive works there
$pg->backup('b');
my $sb = PostgreSQL::Test::Cluster->new('standby');
$sb->init_from_backup($pg, 'b', has_streaming => 1);
$sb->start;
$pg->wait_for_catchup($sb);
my $s = $sb->background_psql('postgres', on_error_stop => 0);
ok(becomes($s,
		"SELECT count(*) = 2 FROM pg_stat_activity WHERE backend_type IN ('redlock keep-alive', 'redlock wake-up')",
		30),
	'both workers run on the standby');
like($s->query_safe("SELECT redlock_lock('sb:k', 1500, keep_alive => true)"), qr/^\d+$/,
	'a keep-alive lease taken on the standby');
usleep(4_500_000);
is($s->query_safe("SELECT validity_ms > 0 AND NOT lost FROM redlock_leases WHERE resource = 'sb:k'"),
	't', 'three TTLs later it is still valid');
is($pg->safe_psql('postgres', "SELECT redlock_try_lock('sb:k') IS NULL"), 't',
	'and the primary cannot take it');
# a standby shares its primary's system identifier: redlock_holder tells
# them apart by their start time
is($pg->safe_psql('postgres',
		"SELECT count(*) >= 3 AND bool_and(NOT this_server) AND bool_and(server_started = "
		  . $s->query_safe('SELECT pg_postmaster_start_time()')
		  =~ s/^(.*)$/'$1'/r
		  . ") FROM redlock_holder('sb:k')"),
	't', 'redlock_holder on the primary: the standby holds it, not this server');
is($s->query_safe(
		"SELECT count(*) >= 3 AND bool_and(this_server) AND bool_and(pid = (SELECT pid FROM redlock_locks WHERE resource = 'sb:k')) FROM redlock_holder('sb:k')"),
	't', 'and on the standby: this server, the holder\'s pid');
$s->query_safe('SELECT redlock_unlock_all()');
$s->quit;
$sb->stop;

# --- no keep-alive worker: keep_alive is refused
my $nw = redlock_cluster('noworker', nodes => \@a, preload => 1, conf => "max_worker_processes = 0\n");
($rc, $out, $err) = $nw->psql('postgres',
	"\\set VERBOSITY verbose\nSELECT redlock_lock('nw:k', 2000, keep_alive => true)");
like($err, qr/55000: keep_alive is not available: no redlock keep-alive worker is running/,
	'keep_alive without a keep-alive worker is refused (55000)');
like($nw->safe_psql('postgres', "SELECT redlock_lock('nw:k', 2000)"), qr/^\d+$/,
	'leases without keep_alive still work');
$nw->stop;

$h->quit;
$o->quit;
$pg->stop;
done_testing();
