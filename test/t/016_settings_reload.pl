# Settings as servers are run: the connection settings (TLS, DNS servers,
# Redis user and password) in postgresql.conf, reloaded with pg_reload_conf()
# while sessions hold leases; the password kept from pg_monitor; verify-ca
# without a CA file of its own; a Redis user without a password; and what a
# backend keeps after many changes of the node list.  Real redis-server
# processes with TLS (certificates made here with the openssl command line),
# host names from a DNS server of our own on loopback (test/perl/FakeDNS.pm),
# and a real cluster with redlock in shared_preload_libraries.
use strict;
use warnings FATAL => 'all';

use File::Copy qw(copy);
use FakeDNS;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedlockTest;
use TlsFiles;
use Test::More;
use Time::HiRes qw(time usleep);

my $tls = TlsFiles->new;
my $ca = $tls->file('ca.crt');
# a certificate for the name the nodes are reached by
$tls->_cert('node', 'ca', 'node.redlock.test',
	san => 'DNS:node.redlock.test,DNS:localhost,IP:127.0.0.1');

# three nodes that want a client certificate, with ACL users: locker and
# locker2 with passwords, nopw without one (nopass)
my @redis = map { $tls->node('node', auth_clients => 'yes') } 1 .. 3;
for my $r (@redis)
{
	is($r->cli('ACL', 'SETUSER', 'locker', 'on', '>lockpw', '~*', '&*', '+@all'), 'OK', 'ACL user locker');
	$r->cli('ACL', 'SETUSER', 'locker2', 'on', '>lockpw2', '~*', '&*', '+@all');
	$r->cli('ACL', 'SETUSER', 'nopw', 'on', 'nopass', '~*', '&*', '+@all');
}
my $dns = FakeDNS->new(records => { 'node.redlock.test' => ['127.0.0.1'] });
my $dns2 = FakeDNS->new(records => { 'node.redlock.test' => ['127.0.0.1'] });
my @names = map { 'node.redlock.test:' . $_->port } @redis;
my $nodes = join(',', @names);

# OpenSSL's "system" CA store is what SSL_CERT_FILE names: here our test CA,
# so that verify-ca without redlock.tls_ca_file can be seen trusting it
$ENV{SSL_CERT_FILE} = $ca;

my $pg = redlock_cluster('settings', preload => 1, conf => <<"EOC");
redlock.nodes = '$nodes'
redlock.tls_mode = 'verify-full'
redlock.tls_ca_file = '$ca'
redlock.tls_cert_file = '${\ $tls->file('client.crt') }'
redlock.tls_key_file = '${\ $tls->file('client.key') }'
redlock.dns_servers = '${\ $dns->addr }'
redlock.username = 'locker'
redlock.password = 'lockpw'
redlock.connect_timeout = '5s'
redlock.node_timeout = '2s'
EOC

# the lock's value on each node ('-' where it is not set)
sub values_on_nodes
{
	my ($res) = @_;
	return join ' ', lock_values($res, @redis);
}

# connections to the nodes that are authenticated as $user
sub connections_of
{
	my ($user) = @_;
	my $n = 0;
	$n += () = $_->cli('CLIENT', 'LIST') =~ /\buser=\Q$user\E\b/g for @redis;
	return $n;
}

# ------------------------------------------------ a reload keeps the leases

my $s = $pg->background_psql('postgres', on_error_stop => 0);
my $t_session = $s->query_safe("SELECT redlock_lock('rl:session', 30000)");
my $t_ka = $s->query_safe("SELECT redlock_lock('rl:ka', 3000, keep_alive => true)");
$s->query_safe('BEGIN');
my $t_xact = $s->query_safe("SELECT redlock_xact_lock('rl:xact', 30000)");
like("$t_session $t_ka $t_xact", qr/^\d+ \d+ \d+$/, 'session, keep-alive and transaction leases taken over TLS');
# a call returns once a majority answered: the last node is waited for
ok(wait_for(sub { connections_of('locker') >= 3 }), 'the backend is authenticated as locker on every node');
my %value;
ok(wait_for(sub {
	%value = map { $_ => values_on_nodes("rl:$_") } qw(session ka xact);
	join(' ', values %value) !~ /(?:^| )-(?: |$)/ }), 'every lease is set on every node');

for my $round (1 .. 2)
{
	reload_seen($pg, $s);
	# the next redlock calls, in separate statements
	my ($out, $err) = run_in($s, "SELECT redlock_lock('rl:session', 30000)");
	is($out, $t_session, "reload $round: the session lease is still held (re-entry, same token)");
	is($err, '', "reload $round: no warning");
	($out, $err) = run_in($s, "SELECT redlock_xact_lock('rl:xact', 30000)");
	is($out, $t_xact, "reload $round: the transaction lease is still held, in its transaction");
	is($err, '', "reload $round: no warning");
	($out, $err) = run_in($s, "SELECT redlock_extend('rl:session', 30000) > 0");
	is($out, 't', "reload $round: the session lease can be extended") or diag $err;
	is($s->query_safe(
			"SELECT string_agg(resource || ':' || (validity_ms > 0 AND NOT lost), ' ' ORDER BY resource) FROM redlock_leases"),
		'rl:ka:true rl:session:true rl:xact:true', "reload $round: all three listed, valid, none lost");
	is(values_on_nodes("rl:$_"), $value{$_}, "reload $round: rl:$_ is still set on every node, unchanged")
	  for qw(session xact);
	is($pg->safe_psql('postgres',
			"SELECT string_agg(coalesce(redlock_try_lock(r, 1000)::text, 'refused'), ' ') FROM unnest(ARRAY['rl:session', 'rl:ka', 'rl:xact']) r"),
		'refused refused refused', "reload $round: another session is refused every one of them");
}
run_in($s, "SELECT redlock_unlock('rl:session')");    # the re-entry's hold

# the keep-alive worker read the configuration too, and goes on extending
# (every TTL/3, 1 s: a minute is ample)
my ($until) = run_in($s, "SELECT valid_until FROM redlock_locks WHERE resource = 'rl:ka'");
ok(wait_for(sub {
	(run_in($s, "SELECT valid_until > '$until' AND NOT lost FROM redlock_locks WHERE resource = 'rl:ka'"))[0] eq 't'
}, 60), 'keep-alive: extended again after the reloads');
is(values_on_nodes('rl:ka'), $value{ka}, 'keep-alive: the same lock on every node');
is((run_in($s, "SELECT validity_ms > 0 AND NOT lost FROM redlock_leases WHERE resource = 'rl:ka'"))[0],
	't', 'keep-alive: its holder sees it valid');
run_in($s, 'COMMIT');
run_in($s, 'SELECT redlock_unlock_all()');
ok(wait_for(sub { values_on_nodes('rl:xact') . ' ' . values_on_nodes('rl:session') eq join(' ', ('-') x 6) }),
	'COMMIT and unlock_all released them on every node');

# ------------------------------------------ a real change releases them

copy($ca, $tls->file('ca2.crt')) or die;
copy($tls->file('client.crt'), $tls->file('client2.crt')) or die;
copy($tls->file('client.key'), $tls->file('client2.key')) or die;
chmod 0600, $tls->file('client2.key');
$_->cli('ACL', 'SETUSER', 'locker', '>lockpw2') for @redis;    # a second password
my @changes = (
	[ password => "redlock.password = 'lockpw2'" ],
	[ username => "redlock.username = 'locker2'" ],
	[ tls_ca_file => "redlock.tls_ca_file = '${\ $tls->file('ca2.crt') }'" ],
	[ tls_cert_file => "redlock.tls_cert_file = '${\ $tls->file('client2.crt') }'" ],
	[ tls_key_file => "redlock.tls_key_file = '${\ $tls->file('client2.key') }'" ],
	[ tls_mode => "redlock.tls_mode = 'verify-ca'" ],
	[ dns_servers => "redlock.dns_servers = '${\ $dns2->addr }'" ],
	[ nodes => "redlock.nodes = '" . join(',', reverse @names) . "'" ],);
for my $c (@changes)
{
	my ($name, $line) = @$c;
	my $tok = $s->query_safe("SELECT redlock_lock('rl:c', 30000)");
	$pg->append_conf('postgresql.conf', "$line\n");
	reload_seen($pg, $s);
	my ($out, $err) = run_in($s, "SELECT redlock_try_lock('rl:probe', 5000) > 0");
	like($err, qr/WARNING:  releasing 1 lease held on the previous Redis nodes/,
		"$name changed: the lease on the old settings is released, with a warning");
	is($out, 't', "$name changed: the new settings work");
	ok(wait_for(sub { values_on_nodes('rl:c') eq '- - -' }), "$name changed: released on every node");
	is($s->query_safe("SELECT string_agg(resource, ' ') FROM redlock_leases"), 'rl:probe',
		"$name changed: only the new lease is listed");
	$s->query_safe('SELECT redlock_unlock_all()');
}
ok(wait_for(sub { connections_of('locker2') >= 3 }), 'the changed user name is the one authenticated');
ok(1 <= $dns2->queries('node.redlock.test'), 'the changed DNS server is asked');
# and with the new settings in force, a reload of them keeps the lease
$s->query_safe("SELECT redlock_lock('rl:c', 30000)");
reload_seen($pg, $s);
my ($out, $err) = run_in($s,
	"SELECT count(*) FROM redlock_leases WHERE resource = 'rl:c' AND redlock_extend('rl:c', 30000) > 0");
is($out, '1', 'after the changes, a reload keeps the lease again');
is($err, '', '... without a warning');
$s->query_safe('SELECT redlock_unlock_all()');
$s->quit;

# ------------------------------------------------ the password is a secret

$pg->safe_psql('postgres', 'CREATE ROLE mon LOGIN IN ROLE pg_monitor; CREATE ROLE plain LOGIN');
sub as_role
{
	my ($role, $sql) = @_;
	my ($rc, $out, $err) = $pg->psql('postgres', $sql, extra_params => [ '-U', $role ]);
	return "$out$err";
}
is(as_role('mon', 'SHOW redlock.password'), '********', 'pg_monitor: SHOW masks the password');
is(as_role('mon', "SELECT current_setting('redlock.password')"), '********',
	'pg_monitor: current_setting() masks it');
is(as_role('mon', "SELECT count(*) FROM pg_settings WHERE name = 'redlock.password'"), '0',
	'pg_monitor: pg_settings has no row for it (its reset_val would show it)');
is(as_role('mon',
		"SELECT count(*) FROM pg_settings WHERE concat_ws(' ', setting, reset_val, boot_val) LIKE '%lockpw%'"),
	'0', 'pg_monitor: no value in pg_settings holds it');
unlike(as_role('mon', 'SHOW ALL'), qr/lockpw/, 'pg_monitor: SHOW ALL does not show it');
like(as_role('mon', 'SELECT count(*) FROM pg_file_settings'), qr/permission denied/,
	'pg_monitor: pg_file_settings is for superusers');
like(as_role('plain', 'SHOW redlock.password'), qr/permission denied|must be superuser|pg_read_all_settings/,
	'a user outside pg_read_all_settings cannot read it at all');
is($pg->safe_psql('postgres', 'SHOW redlock.password'), 'lockpw2', 'a superuser sees it');
is(as_role('mon', 'SHOW redlock.username'), 'locker2', 'the user name is not a secret');
# the catalogs every user reads do not get it
my $rc;
($rc, $out, $err) = $pg->psql('postgres', "ALTER ROLE mon SET redlock.password = 'x'");
like($err, qr/invalid value for parameter "redlock.password".*\n.*DETAIL:  .*a catalog that every user can read/,
	'ALTER ROLE ... SET redlock.password is refused');
($rc, $out, $err) = $pg->psql('postgres', "ALTER DATABASE postgres SET redlock.password = 'x'");
like($err, qr/invalid value for parameter "redlock.password"/, 'ALTER DATABASE ... SET too');
($rc, $out, $err) = $pg->psql('postgres',
	"CREATE FUNCTION f() RETURNS int LANGUAGE sql SET redlock.password = 'x' AS 'SELECT 1'");
like($err, qr/invalid value for parameter "redlock.password"/, "a function's SET clause too");
is(as_role('mon', "SELECT count(*) FROM pg_roles WHERE array_to_string(rolconfig, ' ') LIKE '%password%'"),
	'0', 'nothing reached pg_roles.rolconfig');
# (should any of them have been taken, the rest of the test goes on without)
$pg->psql('postgres', 'ALTER ROLE mon RESET redlock.password');
$pg->psql('postgres', 'ALTER DATABASE postgres RESET redlock.password');
$pg->psql('postgres', 'DROP FUNCTION IF EXISTS f()');

# ------------------------------------------------- verify-ca needs a CA file

my $wrong = $tls->node('wrongname');
my $good = $tls->node('server');
sub attempt
{
	my ($node, $mode, $cafile) = @_;
	my ($rc, $out, $err) = $pg->psql('postgres', <<"EOS");
SET redlock.nodes = '${\ $node->addr }';
SET redlock.username = '';
SET redlock.password = '';
SET redlock.tls_mode = '$mode';
SET redlock.tls_ca_file = '$cafile';
SELECT redlock_try_lock('ca:test', 5000) > 0;
EOS
	return ($out, $err);
}
($out, $err) = attempt($wrong, 'verify-ca', '');
is($out, '', 'verify-ca without a CA file: refused, though the system store trusts the certificate');
like($err, qr/ERROR:  redlock.tls_mode "verify-ca" needs redlock.tls_ca_file\nDETAIL:  .*any publicly issued certificate would pass/,
	'... with a clear error');
($out, $err) = attempt($wrong, 'verify-ca', $ca);
is($out, 't', 'verify-ca with a CA file: granted (no name check, as in libpq)') or diag $err;
($out, $err) = attempt($good, 'verify-full', '');
is($out, 't', 'verify-full may use the system store') or diag $err;
($out, $err) = attempt($wrong, 'verify-full', '');
like($err, qr/certificate verify failed: IP address mismatch/, '... and checks the name');

# --------------------------------------- a user name without a password

my $u = $pg->background_psql('postgres', on_error_stop => 0);
$u->query_safe("SET redlock.username = 'nopw'; SET redlock.password = ''");
($out, $err) = run_in($u, "SELECT redlock_try_lock('auth:nopw', 5000) > 0");
is($out, 't', 'a user with nopass and no password set: granted') or diag $err;
# a node whose TLS handshake was still under way when the call returned at a
# majority goes on with it at the session's next call: poke the session
ok(wait_for(sub { $u->query_safe("SELECT count(*) FROM redlock_holder('auth:nopw')"); connections_of('nopw') == 3 }),
	'... authenticated as that user on every node, not as default')
  or diag 'connections as nopw: ' . connections_of('nopw');
$u->query_safe("SELECT redlock_unlock_all(); SET redlock.username = 'locker'");
($out, $err) = run_in($u, "SELECT redlock_try_lock('auth:nopw', 5000)");
like($err, qr/authentication failed: WRONGPASS/,
	'a user with a password and none set: refused, with the node\'s reason');
$u->quit;

# ------------------------------ no memory kept across node list changes

my @plain = redis_nodes(3);
my $list_a = join(',', map { $_->addr } @plain);
my $list_b = join(',', map { $_->addr } reverse @plain);
my $m = $pg->background_psql('postgres', on_error_stop => 1);
$m->query_safe("SET redlock.tls_mode = 'disable'; SET redlock.username = ''; SET redlock.password = ''");
my $pid = $m->query_safe('SELECT pg_backend_pid()');
my $switch = <<"EOS";
DO \$\$
BEGIN
	FOR i IN 1 .. %d LOOP
		PERFORM set_config('redlock.nodes', CASE mod(i, 2) WHEN 0 THEN '$list_a' ELSE '$list_b' END, false);
		PERFORM count(*) FROM redlock_holder('leak');
	END LOOP;
END \$\$;
EOS
$m->query_safe(sprintf($switch, 200));    # warm up
my $rss0 = proc_kb($pid, 'VmRSS');
$m->query_safe(sprintf($switch, 2000));
my $grown = proc_kb($pid, 'VmRSS') - $rss0;
# leaking each node's 4 kB output buffer at each change would be 24 MB
cmp_ok($grown, '<', 8192, "2000 node list changes of 3 nodes: the backend grew by $grown kB");
$m->quit;

# ------------------------------------------------ the lease clock

# Leases are timed with CLOCK_BOOTTIME, which goes on while the machine is
# suspended; a test cannot suspend the machine, so it checks that validity
# counts down with real time and never exceeds what the nodes hold.
my $c = $pg->background_psql('postgres', on_error_stop => 1);
$c->query_safe("SELECT redlock_lock('clock', 20000)");
# The call returned once a majority answered; a node whose TLS handshake was
# still under way gets the lock at the session's next call.  What the lease
# promises is a majority: its validity is within the TTL that a majority of
# nodes still hold (of three, the second largest PTTL).  Read the PTTLs
# before the validity, so that time passing can only make the check harder.
my @pttl = sort { $b <=> $a } map { $_->cli('PTTL', 'redlock:lock:clock') } @redis;
my $pttl = $pttl[ int(@redis / 2) ];
my $t0 = time;
my $v1 = $c->query_safe("SELECT validity_ms FROM redlock_leases WHERE resource = 'clock'");
my $t0_done = time;
cmp_ok($v1, '<=', $pttl, "validity ($v1 ms) is within the remaining TTL of a majority of nodes ($pttl ms; all: @pttl)");
usleep(300_000);
my $t1 = time;
my $v2 = $c->query_safe("SELECT validity_ms FROM redlock_leases WHERE resource = 'clock'");
my $gap_ms = int(($t1 - $t0_done) * 1000);
cmp_ok($v2, '<=', $v1 - $gap_ms + 1, "validity counts down with real time ($v1 -> $v2 ms over at least $gap_ms ms)");
cmp_ok($v2, '>', 0, 'and is still positive');
$c->quit;

$pg->stop;
done_testing();
