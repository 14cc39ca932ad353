# A redlock.nodes from the server configuration that the check hook refuses
# leaves the previous value in force (often the empty default).  The lease
# functions then say so, with the refused value and the reason, instead of
# the misleading "redlock.nodes is not set":
#
#   ERROR:  RL004: invalid value for parameter "redlock.nodes" in the server configuration
#   DETAIL:  The value "127.0.0.256:6379" of redlock.nodes from the
#            configuration file was rejected, so the previous value stays in
#            force. The host "127.0.0.256" of entry 1 is not a valid IPv4
#            address.
#
# guc.c remembers the refusal (rl_nodes_rejected_reason()); session_nodes.c's
# rl_session_nodes_ready() raises the error.  Covers a restart, a reload, a session
# that loads the library itself, connection options, and that an
# interactive SET is never taken for the configuration.
use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedlockTest;
use Test::More;

my @redis = redis_nodes(3);
my $nodes = node_list(@redis);

my $invalid = qr/ERROR:  RL004: invalid value for parameter "redlock\.nodes" in the server configuration/;
my $unset = qr/ERROR:  RL004: redlock\.nodes is not set/;

# the error of one lease call in a new session, with its SQLSTATE
sub lease_error
{
	my ($node, %args) = @_;
	my ($rc, $out, $err) = $node->psql('postgres',
		"\\set VERBOSITY verbose\nSELECT redlock_try_lock('x')", %args);
	return $err;
}

# replace the redlock.nodes line of postgresql.conf
sub set_nodes_conf
{
	my ($node, $value) = @_;
	my $conf = $node->data_dir . '/postgresql.conf';
	my $text = slurp_file($conf);
	$text =~ s/^redlock\.nodes = .*\n//mg;
	$text .= "redlock.nodes = '$value'\n" if defined $value;
	open my $fh, '>', $conf or die "$conf: $!";
	print $fh $text;
	close $fh;
}

my $pg = redlock_cluster('rejected', preload => 1);

# ---------- nothing configured: the plain message ----------

my $err = lease_error($pg);
like($err, $unset, 'no redlock.nodes at all: "redlock.nodes is not set"');
unlike($err, qr/invalid value/, 'and nothing about an invalid value');

# ---------- a bad value at server start ----------

set_nodes_conf($pg, '127.0.0.256:6379');
$pg->restart;
$err = lease_error($pg);
like($err, $invalid, 'bad value at start: the lease call says the configured value is invalid');
like($err, qr/DETAIL:  The value "127\.0\.0\.256:6379" of redlock\.nodes from the configuration file was rejected/,
	'the detail names the value and where it came from');
like($err, qr/The host "127\.0\.0\.256" of entry 1 is not a valid IPv4 address\./,
	'and gives the reason');
like(slurp_file($pg->logfile), qr/invalid value for parameter "redlock\.nodes": "127\.0\.0\.256:6379"/,
	'the server log has the refusal too');

# an interactive SET is never taken for the configuration
my ($rc, $out);
($rc, $out, $err) = $pg->psql('postgres',
	"\\set VERBOSITY verbose\nSET redlock.nodes = '';\nSELECT redlock_try_lock('x')");
like($err, $unset, 'after SET redlock.nodes = \'\' in the session: "not set"');
($rc, $out, $err) = $pg->psql('postgres',
	"\\set VERBOSITY verbose\nSET redlock.nodes = '1.2.3:1';\nSELECT redlock_try_lock('x')",
	on_error_stop => 0);
like($err, qr/ERROR:  22023: invalid value for parameter "redlock\.nodes": "1\.2\.3:1"/,
	'an interactive SET of a bad value fails at once');
like($err, $invalid, 'and the lease call still reports the configured value');
like($err, qr/127\.0\.0\.256/, 'not the value of the failed SET');
($rc, $out, $err) = $pg->psql('postgres',
	"SET redlock.nodes = '$nodes';\nSELECT redlock_try_lock('set-in-session') > 0");
is($out, 't', 'a valid SET in the session takes leases');

# nor is a value ALTER SYSTEM refused (it never reached the file)
($rc, $out, $err) = $pg->psql('postgres',
	"\\set VERBOSITY verbose\nALTER SYSTEM SET redlock.nodes = '[::1]:0';\nSELECT redlock_try_lock('x')",
	on_error_stop => 0);
like($err, qr/ERROR:  22023: invalid value for parameter "redlock\.nodes": "\[::1\]:0"/,
	'ALTER SYSTEM refuses a bad value');
like($err, qr/The value "127\.0\.0\.256:6379" of redlock\.nodes from the configuration file was rejected/,
	'and the lease call still reports the value from the file, not that one');
unlike(slurp_file($pg->data_dir . '/postgresql.auto.conf'), qr/redlock/,
	'postgresql.auto.conf is untouched');

# ---------- fixed by a reload ----------

set_nodes_conf($pg, $nodes);
reload_seen($pg);    # new sessions start with what it read
($rc, $out, $err) = $pg->psql('postgres', "SELECT redlock_try_lock('fixed') > 0");
is($out, 't', 'after fixing the file and a reload, leases are granted');

# ---------- a bad value at reload ----------

# a session that stays connected across the reloads
my $s = $pg->background_psql('postgres', on_error_stop => 0);
$s->query_safe('SELECT 1');

set_nodes_conf($pg, undef);
reload_seen($pg);
like(lease_error($pg), $unset, 'line removed and reloaded: "not set" again');
$s->query_safe('SELECT 1');    # the session reloads too

set_nodes_conf($pg, 'redis.example.com.:6379');
reload_seen($pg);
$err = lease_error($pg);
like($err, $invalid, 'a bad value at reload (nothing in force before): invalid, in a new session');
like($err, qr/The value "redis\.example\.com\.:6379" of redlock\.nodes from the configuration file was rejected, so the previous value stays in force\. The host name "redis\.example\.com\." of entry 1 has an empty label\./,
	'with the value and the reason');
$s->{stderr} = '';
$s->query("\\set VERBOSITY verbose\nSELECT redlock_try_lock('x')");
like($s->{stderr}, $invalid, 'and in the session that was connected before the reload');

set_nodes_conf($pg, '[::1]:6379,redis_2:6379');
reload_seen($pg);
$err = lease_error($pg);
like($err, qr/The value "\[::1\]:6379,redis_2:6379" of redlock\.nodes from the configuration file was rejected, so the previous value stays in force\. The host of entry 2 contains "_"/,
	'a later bad value replaces the reason');

# a bad value after a good one: the good one stays in force and works
set_nodes_conf($pg, $nodes);
reload_seen($pg);
set_nodes_conf($pg, '10.0.0.1:6379,10.0.0.1:6379');
reload_seen($pg);
($rc, $out, $err) = $pg->psql('postgres',
	"SELECT current_setting('redlock.nodes') = '$nodes', redlock_try_lock('kept') > 0");
is($out, 't|t', 'a bad value at reload keeps the good value in force, and leases work');
$s->quit;

# ---------- connection options ----------

# with the library preloaded, a bad value in the connection options refuses
# the connection itself (it is checked as the session starts); psql gets
# no statement on its standard input, which it may have closed by the time
# a statement would be written there
set_nodes_conf($pg, undef);
reload_seen($pg);
(undef, undef, $err) = $pg->psql('postgres', undef,
	connstr => $pg->connstr('postgres') . " options='-c redlock.nodes=localhost'");
like($err, qr/FATAL:  invalid value for parameter "redlock\.nodes": "localhost"/,
	'preloaded: a bad value in the connection options refuses the connection');
like(lease_error($pg), $unset, 'other sessions are not affected');

# ---------- the library loaded by the session, not preloaded ----------

$pg->stop;
my $text = slurp_file($pg->data_dir . '/postgresql.conf');
$text =~ s/^shared_preload_libraries = .*\n//mg;
open my $fh, '>', $pg->data_dir . '/postgresql.conf' or die;
print $fh $text;
close $fh;
set_nodes_conf($pg, '127.0.0.1:6379;127.0.0.1:6380');
$pg->start;
$err = lease_error($pg);
like($err, qr/WARNING:  22023: invalid value for parameter "redlock\.nodes"/,
	'not preloaded: loading the library warns about the value');
like($err, $invalid, 'and the lease call reports it');
like($err, qr/The value "127\.0\.0\.1:6379;127\.0\.0\.1:6380" of redlock\.nodes from the configuration file was rejected, so the previous value stays in force\. Entry 1 has ";" after its port\./,
	'with the value and the reason');

# connection options reach a library loaded later as a placeholder value,
# checked (and refused with a WARNING) when the library is loaded
set_nodes_conf($pg, undef);
reload_seen($pg);
$err = lease_error($pg,
	connstr => $pg->connstr('postgres') . " options='-c redlock.nodes=localhost'");
like($err, $invalid, 'not preloaded: a bad value in the connection options is reported');
like($err, qr/The value "localhost" of redlock\.nodes from the connection request was rejected, so the previous value stays in force\. Entry 1 has no port \(expected host:port\)\./,
	'as coming from the connection request');
like(lease_error($pg), $unset, 'other sessions are not affected');

# ALTER ROLE and ALTER DATABASE ... SET store a value unchecked where the
# library is not loaded; a session that gets it reports it the same way
$pg->safe_psql('postgres', 'CREATE ROLE bad_nodes LOGIN SUPERUSER');
$pg->safe_psql('postgres', "ALTER ROLE bad_nodes SET redlock.nodes = 'localhost'");
$err = lease_error($pg, connstr => $pg->connstr('postgres') . ' user=bad_nodes');
like($err, $invalid, 'a bad value from ALTER ROLE ... SET is reported');
like($err, qr/The value "localhost" of redlock\.nodes from .* was rejected, so the previous value stays in force\. Entry 1 has no port/,
	'with the value and the reason');
$pg->safe_psql('postgres', 'CREATE DATABASE bad_nodes_db');
$pg->safe_psql('postgres', "ALTER DATABASE bad_nodes_db SET redlock.nodes = '127.0.0.1:0'");
$pg->safe_psql('bad_nodes_db', 'CREATE EXTENSION redlock');
($rc, $out, $err) = $pg->psql('bad_nodes_db', "\\set VERBOSITY verbose\nSELECT redlock_try_lock('x')");
like($err, $invalid, 'a bad value from ALTER DATABASE ... SET is reported');
like($err, qr/The value "127\.0\.0\.1:0" of redlock\.nodes from .* was rejected/,
	'with the value');
like(lease_error($pg), $unset, 'other roles and databases are not affected');

$pg->stop;
done_testing();
