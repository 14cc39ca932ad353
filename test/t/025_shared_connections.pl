# The dispatcher's shared connections (src/shared/shared_rounds.c,
# src/workers/dispatcher.c, src/net/node_batch.c): under concurrency the
# lock calls of the server's backends go through one connection per node
# held by the dispatcher worker; a session alone keeps its own.  Real Redis
# nodes, a real cluster with redlock in shared_preload_libraries.
#
# - auto (the default): one session alone never goes through the
#   dispatcher; 8 pgbench sessions do, and every lease they were told of
#   holds as an interval (no two holders of one resource overlap, tokens
#   grow with the grants), no call on an uncontended resource is refused,
#   and no key is left behind.
# - always: a single session's calls go through it; statement_timeout ends
#   a call whose round waits for paused nodes, the session's next calls
#   work and the abandoned attempt leaves no key; a node killed does not
#   stop the calls; the dispatcher terminated: calls go on (their own
#   connections) and go through it again once it is back.
use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedlockTest;
use Test::More;

my @redis = redis_nodes(5);
my $pg = redlock_cluster('shared', nodes => \@redis, preload => 1,
	conf => "redlock.node_timeout = '10s'\nmax_connections = 40\n");
my $pm_start = $pg->safe_psql('postgres', 'SELECT pg_postmaster_start_time()');

ok(wait_for(sub { worker_pid($pg, 'dispatcher') ne '' }), 'the dispatcher runs');
is($pg->safe_psql('postgres', 'SHOW redlock.shared_connections'), 'auto',
	'redlock.shared_connections is auto by default');

sub rounds
{
	my $r = $pg->safe_psql('postgres',
		'SELECT rounds_shared, rounds_own FROM redlock_dispatcher');
	return split /\|/, $r;
}

# --- auto: a session alone keeps its own connections
my $s = long_session($pg);
my ($sh0, $own0) = rounds();
for my $i (1 .. 20)
{
	$s->query_safe("SELECT redlock_try_lock('solo', 30000)");
	$s->query_safe("SELECT redlock_unlock('solo')");
}
my ($sh1, $own1) = rounds();
is($sh1 - $sh0, 0, 'a session alone never goes through the dispatcher');
cmp_ok($own1 - $own0, '>=', 40, 'its 40 calls ran on its own connections');

# --- auto, 8 sessions: each call is two statements (lock, then unlock), as
# an application makes them; half of them on one hot resource
$pg->safe_psql('postgres', q{
CREATE TABLE grants (id bigserial, client int, resource text, token bigint,
                     asked timestamptz, granted timestamptz,
                     valid_until timestamptz, released timestamptz);
CREATE FUNCTION t_lock(c int, hot int) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    r text := CASE WHEN hot = 1 THEN 'hot' ELSE 'own:' || c END;
    t0 timestamptz := clock_timestamp();
    tok bigint := redlock_try_lock(r, 30000);
    t1 timestamptz := clock_timestamp();
    v int;
BEGIN
    SELECT validity_ms INTO v FROM redlock_leases WHERE resource = r;
    INSERT INTO grants (client, resource, token, asked, granted, valid_until)
    VALUES (c, r, tok, t0, t1,
            CASE WHEN tok IS NOT NULL
                 THEN clock_timestamp() + v * interval '1 ms' END);
END $$;
CREATE FUNCTION t_unlock(c int) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    l record;
BEGIN
    FOR l IN SELECT resource, token FROM redlock_leases LOOP
        UPDATE grants SET released = clock_timestamp()
         WHERE resource = l.resource AND token = l.token;
        PERFORM redlock_unlock(l.resource);
    END LOOP;
END $$;
});
($sh0, $own0) = rounds();
$pg->pgbench('-n -c 8 -j 2 -T 4', 0, [qr/processed: [1-9]/], [qr/^$/],
	'8 sessions lock and unlock for 4 s',
	{ '025_cycle' => q{
\set hot random(0, 1)
SELECT t_lock(:client_id, :hot);
SELECT t_unlock(:client_id);
} });
($sh1, $own1) = rounds();
cmp_ok($sh1 - $sh0, '>', 0,
	'under concurrency calls went through the dispatcher (' . ($sh1 - $sh0)
	  . ' shared rounds, ' . ($own1 - $own0) . ' own)');

my $q = sub { $pg->safe_psql('postgres', $_[0]) };
cmp_ok($q->("SELECT count(*) FROM grants WHERE resource = 'hot' AND token IS NOT NULL"),
	'>', 0, 'the hot resource was granted');
cmp_ok($q->("SELECT count(*) FROM grants WHERE resource LIKE 'own:%'"),
	'>', 0, 'the sessions\' own resources were asked for');
is($q->("SELECT count(*) FROM grants WHERE resource LIKE 'own:%' AND token IS NULL"),
	'0', 'no call on a resource nobody else wanted was refused');
is($q->("SELECT count(*) FROM grants WHERE token IS NOT NULL AND released IS NULL"),
	'0', 'every lease granted was released by its holder');

# every lease as an interval: from the return of the call that granted it
# to the end of the validity its holder was told, or its release if sooner.
# In token order, per resource, each holder's interval starts after the
# previous one's ended, and a later grant has a greater token.
is($q->(q{
SELECT count(*) FROM (
  SELECT resource, token, granted,
         lag(least(valid_until, released)) OVER w AS prev_end,
         lag(granted) OVER w AS prev_granted
    FROM grants WHERE token IS NOT NULL
  WINDOW w AS (PARTITION BY resource ORDER BY token)) x
 WHERE granted < prev_end OR granted <= prev_granted}),
	'0', 'no two holders of one resource overlapped, tokens grew with the grants');
is($q->('SELECT count(*) - count(DISTINCT (resource, token)) FROM grants WHERE token IS NOT NULL'),
	'0', 'no token was given twice for one resource');
ok(no_keys('*', @redis), 'no lock key is left on any node');

# --- always: every eligible call of a session goes through the dispatcher
$pg->append_conf('postgresql.conf', "redlock.shared_connections = always\n");
$pg->reload;
ok(wait_for(sub { $s->query_safe('SHOW redlock.shared_connections') eq 'always' }),
	'the setting reached the session');
($sh0, $own0) = rounds();
for my $i (1 .. 10)
{
	$s->query_safe("SELECT redlock_lock('alone', 30000)");
	$s->query_safe("SELECT redlock_unlock('alone')");
}
($sh1, $own1) = rounds();
cmp_ok($sh1 - $sh0, '>=', 20, "with always, a session alone goes through it too");

# statement_timeout ends a call whose round waits for paused nodes
$_->pause for @redis[0 .. 2];
$s->query("SET statement_timeout = '500ms'");
$s->query("SELECT redlock_lock('stuck', 30000)");
like($s->{stderr}, qr/canceling statement due to statement timeout/,
	'statement_timeout ends a call waiting for the dispatcher');
$s->{stderr} = '';
$s->query_safe('RESET statement_timeout');
$_->resume for @redis[0 .. 2];
my $tok = $s->query_safe("SELECT redlock_lock('stuck', 30000)");
like($tok, qr/^\d+$/, 'the session\'s next call is granted once the nodes answer');
$s->query_safe("SELECT redlock_unlock('stuck')");
ok(no_keys('stuck', @redis), 'neither the abandoned attempt nor the lease left a key');

# a node killed: the calls go on with four
$redis[4]->kill9;
($sh0, $own0) = rounds();
$tok = $s->query_safe("SELECT redlock_lock('four', 30000)");
like($tok, qr/^\d+$/, 'with a node killed, a call through the dispatcher is granted');
$s->query_safe("SELECT redlock_unlock('four')");
($sh1, $own1) = rounds();
cmp_ok($sh1 - $sh0, '>=', 2, 'and went through it');
$redis[4]->start;

# the dispatcher terminated: calls go on, and through it again once it is back
my $old = worker_pid($pg, 'dispatcher');
$q->("SELECT pg_terminate_backend($old)");
for my $i (1 .. 5)
{
	$tok = $s->query_safe("SELECT redlock_lock('gone', 30000)");
	like($tok, qr/^\d+$/, "call $i while the dispatcher restarts is granted");
	$s->query_safe("SELECT redlock_unlock('gone')");
}
ok(wait_for(sub { my $p = worker_pid($pg, 'dispatcher'); $p ne '' && $p ne $old }),
	'the dispatcher is back');
ok(wait_for(sub {
	my ($a) = rounds();
	$s->query_safe("SELECT redlock_lock('back', 30000)");
	$s->query_safe("SELECT redlock_unlock('back')");
	my ($b) = rounds();
	$b > $a;
}), 'calls go through it again');
ok(no_keys('*', @redis), 'no lock key is left on any node');

$s->quit;
nothing_crashed($pg, $pm_start);
$pg->stop;
done_testing();
