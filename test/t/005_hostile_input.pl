# Hostile input beyond sql/lease_api.sql: random resource names that are
# valid text (control characters, every UTF-8 length, Redis and Lua syntax,
# printf directives), the byte limit with multi-byte characters, a 64-byte
# key prefix with a 512-byte name, TTL limits, and garbage for every setting
# (for redlock.nodes, hosts that are neither IPv4 addresses, IPv6 addresses
# in brackets nor DNS host names among them) through SET, ALTER SYSTEM and a
# reloaded postgresql.conf.
use strict;
use warnings FATAL => 'all';

use Encode qw(encode);
use Time::HiRes ();
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedlockTest;
use Test::More;

my @redis = redis_nodes(3);
my $nodes = node_list(@redis);
my $pg = redlock_cluster('input', nodes => \@redis);

sub hex_of { return unpack('H*', $_[0]); }
sub sql_text { return "convert_from('\\x" . hex_of($_[0]) . "'::bytea, 'UTF8')"; }

# ---------- random names that are valid text ----------

srand(4242);
my @pieces = (
	(map { chr } 0x20 .. 0x7e),
	(map { chr } 1 .. 31, 127),
	"\x{e9}", "\x{df}", "\x{42f}", "\x{65e5}", "\x{20ac}", "\x{fffd}", "\x{feff}",
	"\x{1f512}", "\x{1d11e}", "\x{10ffff}", "\x{200b}", "\x{301}",
	"\r\n", "*1\r\n\$8\r\nFLUSHALL\r\n", '$-1', ':0', '-ERR', '+OK',
	"redis.call('FLUSHALL')", ']]', '--[[', "'); os.exit() --", '%s', '%n',
	'%d%d%d', '\\', "'", '"', '{tag}', '*', '?', '[a-z]', 'KEYS[1]', 'ARGV[2]');
my %seen;
my @names;
while (@names < 300)
{
	my $name = '';
	my $want = 1 + int(rand(rand() < 0.1 ? 200 : 30));
	$name .= $pieces[ int(rand(@pieces)) ] for 1 .. $want;
	my $bytes = encode('UTF-8', $name);
	# trim to at most 512 bytes on a character boundary
	while (length($bytes) > 512)
	{
		chop $name;
		$bytes = encode('UTF-8', $name);
	}
	next if $bytes eq '' || $seen{$bytes}++;
	push @names, $bytes;
}

my $prefix = 'hin:';
my $sql = "SET redlock.key_prefix = '$prefix';\n"
  . "SELECT count(*) FROM (VALUES "
  . join(",\n", map { '(' . sql_text($_) . ')' } @names)
  . ") AS n(name) WHERE redlock_lock(name, 600000) > 0;\n"
  . "SELECT encode(convert_to(resource, 'UTF8'), 'hex') FROM redlock_leases ORDER BY 1;\n";
my $s = $pg->background_psql('postgres', on_error_stop => 0);
my $out = $s->query($sql);
my @lines = split /\n/, $out;
is(shift @lines, scalar @names, 'all 300 random names were granted');
is_deeply(\@lines, [ sort map { hex_of($_) } @names ],
	'redlock_leases gives every name back byte for byte');

# every key is on the nodes under exactly its name (asked in one call: 300
# redis-cli runs took longer than a minute on a busy machine).  A call
# returns once a majority answered: the last node's locks are waited for,
# and the names are read on a node that has as many keys as names (a node
# that fell far behind on a busy machine may have lost its connection,
# and the locks queued on it, while the others granted them)
my $lock_keys = sub { $_[0]->cli('EVAL', "return #redis.call('KEYS', ARGV[1])", '0', "${prefix}lock:*") };
wait_for(sub { !grep { $lock_keys->($_) < @names } @redis }, 10);
my ($full) = grep { $lock_keys->($_) == @names } @redis;
ok(defined $full, 'a node has a lock key for each name')
  or diag 'lock keys on the nodes: ' . join(' ', map { $lock_keys->($_) } @redis);
$full //= $redis[0];
my $missing = $full->cli('EVAL',
	"local m = 0 for _, k in ipairs(KEYS) do if redis.call('EXISTS', k) == 0 then m = m + 1 end end return m",
	scalar(@names), map { "${prefix}lock:$_" } @names);
is($missing, 0, '... under the exact name: every key exists, so there are no others');
my @counters = split /\n/, $redis[2]->cli('KEYS', 'hin:token-counter*');
ok(@counters > 0 && !grep({ $redis[2]->cli('GET', $_) !~ /^\d+$/ } @counters),
	'the token counters are intact decimals (no name overwrote one)');

$s->query_safe('SELECT redlock_unlock_all()');
# (waited for: the release goes out without waiting for every node; the
# leases' TTL is 10 minutes)
ok(wait_for(sub { $lock_keys->($redis[0]) eq '0' }, 10), 'unlock_all released every random name');

# names that differ only in case or Unicode normalization are distinct leases
my $other = $pg->background_psql('postgres', on_error_stop => 0);
my @twins = (encode('UTF-8', "\x{c4}"), encode('UTF-8', "A\x{308}"), 'a', 'A');
for my $i (0 .. 1)
{
	my $a = $s->query_safe("SELECT redlock_try_lock(${\ sql_text($twins[2*$i]) }, 5000) IS NOT NULL");
	my $b = $other->query_safe("SELECT redlock_try_lock(${\ sql_text($twins[2*$i+1]) }, 5000) IS NOT NULL");
	ok($a eq 't' && $b eq 't', "names that differ only in " . ($i ? 'case' : 'normalization')
		  . ' are different leases');
}
$s->query_safe('SELECT redlock_unlock_all()');
$other->query_safe('SELECT redlock_unlock_all()');

# ---------- limits in bytes, with multi-byte characters ----------

for my $case ([ 510, "\x{e9}", 1 ], [ 511, "\x{e9}", 0 ], [ 509, "\x{65e5}", 1 ],
	[ 510, "\x{65e5}", 0 ], [ 508, "\x{1f512}", 1 ], [ 509, "\x{1f512}", 0 ])
{
	my ($n, $ch, $ok) = @$case;
	my $name = ('x' x $n) . encode('UTF-8', $ch);
	my $len = length $name;
	my $r = $s->query("SELECT redlock_try_lock(${\ sql_text($name) }, 5000) IS NOT NULL");
	if ($ok)
	{
		is($r, 't', "$len bytes ending in a multi-byte character: granted");
	}
	else
	{
		like($s->{stderr}, qr/resource name is too long/,
			"$len bytes ending in a multi-byte character: too long");
	}
	$s->{stderr} = '';
}
$s->query_safe('SELECT redlock_unlock_all()');

# the longest key: a 64-byte prefix and a 512-byte name
my $p64 = ('p' x 63) . ':';
my $n512 = 'n' x 512;
$s->query_safe("SET redlock.key_prefix = '$p64'");
like($s->query_safe("SELECT redlock_try_lock('$n512', 60000)"), qr/^\d+$/,
	'64-byte prefix with a 512-byte name: granted');
# the node may be the one that answers after the call returned
ok(wait_for(sub { $redis[0]->cli('EXISTS', "${p64}lock:$n512") eq '1' }), 'the 581-byte key is intact on the node');
like($redis[0]->cli('KEYS', "${p64}token-counter*"), qr/^\Q${p64}token-counter\E/,
	'and so is the counter key');
$s->query_safe('SELECT redlock_unlock_all()');
ok(wait_for(sub { $redis[0]->cli('EXISTS', "${p64}lock:$n512") eq '0' }, 10), 'and it is released');
$s->query_safe('RESET redlock.key_prefix');

# printf directives in a name stay literal in every message
$other->query_safe("SELECT redlock_lock('fmt:%s%n%x', 60000)");
$s->query("SET lock_timeout = '100ms'; SELECT redlock_lock('fmt:%s%n%x')");
like($s->{stderr}, qr/could not obtain lease on "fmt:%s%n%x" within lock_timeout/,
	'55P03 message quotes a name with printf directives literally');
$s->{stderr} = '';
$s->query("SELECT redlock_extend('fmt:%n%n%n', 1000)");
like($s->{stderr}, qr/holds no lease on "fmt:%n%n%n"/, 'extend error quotes it literally');
$s->{stderr} = '';
$s->query("SET redlock.nodes = '127.0.0.1:1,127.0.0.1:2,127.0.0.1:3'; SELECT redlock_try_lock('fmt:%s%s%s%s')");
like($s->{stderr}, qr/could not acquire lease on "fmt:%s%s%s%s"/, 'RL002 message quotes it literally');
$s->{stderr} = '';
$s->query_safe("RESET redlock.nodes; RESET lock_timeout");
$other->query_safe('SELECT redlock_unlock_all()');

# TTL limits: 10 ms and one day are granted with the TTL asked for.  A
# 10 ms lease keeps about 7.9 ms of validity after the drift allowance, so
# a round slower than that (the first one after RESET redlock.nodes
# connects again; CI machines are loaded) is refused as expired: the right
# answer for that round.  So the connections are warmed first, and the
# smallest TTL must be granted within 20 tries, each refusal being that
# expiry and not a complaint about the TTL.
like($s->query_safe("SELECT redlock_try_lock('ttl:warm', 60000)"), qr/^\d+$/, 'a first call after RESET connects again');
$s->query_safe("SELECT redlock_unlock('ttl:warm')");
my ($ttl_min, @ttl_refusals);
for my $try (1 .. 20)
{
	$s->{stderr} = '';
	$ttl_min = $s->query("SELECT redlock_try_lock('ttl:min', 10)");
	last if $ttl_min =~ /^\d+$/;
	push @ttl_refusals, $s->{stderr};
}
like($ttl_min, qr/^\d+$/, 'ttl 10 ms granted (after ' . scalar(@ttl_refusals) . ' refusals)');
is(scalar(grep { !/lease on "ttl:min" expired before it was granted/ } @ttl_refusals), 0,
	'... and every refusal before it was the expiry of a slow round')
  or diag(join("\n", @ttl_refusals));
$s->{stderr} = '';
like($s->query_safe("SELECT redlock_try_lock('ttl:day', 86400000)"), qr/^\d+$/, 'ttl one day granted');
my $pttl;
wait_for(sub { ($pttl = $redis[0]->cli('PTTL', 'redlock:lock:ttl:day')) > 0 });
ok($pttl > 86_000_000 && $pttl <= 86_400_000, "the node holds it for a day (pttl $pttl)");
$s->query_safe('SELECT redlock_unlock_all()');

# ---------- garbage for every setting ----------

$s->query_safe(<<'SQL');
CREATE FUNCTION pg_temp.try_set(g text, v text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
	before text := current_setting(g);
	st text := 'accepted';
BEGIN
	BEGIN
		PERFORM set_config(g, v, false);
	EXCEPTION WHEN OTHERS THEN
		st := SQLSTATE;
	END;
	IF st = 'accepted' THEN
		PERFORM set_config(g, before, false);
		RETURN st;
	END IF;
	RETURN st || CASE WHEN current_setting(g) = before THEN ' kept' ELSE ' CHANGED' END;
END $$;
SQL

my $long_host = 'h' x 256;
my %bad = (
	'redlock.nodes' => [
		'127.0.0.1:6379;127.0.0.1:6380', '127.0.0.1:+6379', '127.0.0.1:-1',
		'127.0.0.1:99999999999999999999', ':6379', '[]:6379', '[::1]', '[::1]6379',
		"h\x{f6}st:6379", "$long_host:1", "127.0.0.1:6379\n127.0.0.1:6380",
		'redis://127.0.0.1:6379', '%s:%n', "127.0.0.1:6379\t,", '127.0.0.1:6379:1',
		"127.0.0.1:6379,127.0.0.1:6379", '[fe80::1%eth0]:6379',
		'127.0.0.256:6379', '1.2.3:6379', '00.0.0.1:1', '999999999999:1', '[127.0.0.1]:1',
		'[::g]:1', '[1:2:3:4:5:6:7:8:9]:1', 'redis_1:1', '-a:1', 'a-:1', 'a..b:1', '.a:1',
		'a.:1', ('a' x 64) . ':1', join('.', ('a' x 63) x 4) . ':1', "a\x{200b}b:1" ],
	'redlock.connect_timeout' => [ '61s', '1h', '-1', '2147483648', '1.5.5', '', '10 parsecs' ],
	'redlock.node_timeout' => [ '0', 'abc', '61s', '1e10', '-2147483649' ],
	'redlock.drift_factor' => [ '-0.1', 'Infinity', '-Infinity', '0.51', '1e309', '', '0,1' ],
	'redlock.retry_delay' => [ '60001', '0ms', 'forever' ],
	'redlock.retry_jitter' => [ '60001', '-5', '1 2' ],
	'redlock.key_prefix' => [ 'a' x 65, "\x{e9}:", "tab\t", "a\nb", 'a?b', 'a[b', 'a]b',
		'a\\b', "del\x7f" ],
	'redlock.username' => [ 'u' x 513, "a\tb", "a\x01b", "a\rb" ],
	'redlock.password' => [ 'p' x 513, "a\nb", "a\x1bb" ],
	'redlock.fence_token' => [ '+5', ' 5', '5 ', '0x10', '1e3', '-0', '9223372036854775807 ',
		'99999999999999999999', "\x{665}" ],
);
my %good = (
	'redlock.nodes' => [ join('.', ('h' x 63) x 3, 'h' x 61) . ':1', '[::1]:6379',
		'[::ffff:127.0.0.1]:1', 'a:1', 'a-b.c-d:1', '0.0.0.0:1', '255.255.255.255:65535',
		join(',', map { "10.0.0.$_:6379" } 1 .. 15) ],
	'redlock.connect_timeout' => [ '60s', '1ms' ],
	'redlock.node_timeout' => [ '1', '60000' ],
	'redlock.drift_factor' => [ '0', '0.5' ],
	'redlock.retry_delay' => [ '1' ],
	'redlock.retry_jitter' => [ '0' ],
	'redlock.key_prefix' => [ 'a' x 64, '{tag}:', '~!@#$%^&()_+-=:;,.<>/|' ],
	'redlock.username' => [ 'u' x 512 ],
	'redlock.password' => [ 'p' x 512 ],
	'redlock.fence_token' => [ '', '1', '9223372036854775807' ],
);
for my $g (sort keys %bad)
{
	my @r = map {
		my $v = encode('UTF-8', $_);
		my $r = $s->query("SELECT pg_temp.try_set('$g', ${\ sql_text($v) })");
		$s->{stderr} = '';
		$r
	} @{ $bad{$g} };
	my @wrong = grep { $r[$_] !~ /^(22023|22P02|42704) kept$/ } 0 .. $#r;
	is(scalar @wrong, 0, "$g: " . scalar(@r) . ' garbage values rejected, old value kept')
	  or diag join("\n", map { "'$bad{$g}[$_]' -> $r[$_]" } @wrong);
	my @g = map { scalar $s->query("SELECT pg_temp.try_set('$g', ${\ sql_text(encode('UTF-8', $_)) })") }
	  @{ $good{$g} };
	is_deeply(\@g, [ ('accepted') x @g ], "$g: boundary values accepted");
	$s->{stderr} = '';
}
like($s->query_safe("SELECT redlock_try_lock('after:garbage')"), qr/^\d+$/,
	'after all that garbage the settings in force still work');
$s->query_safe('SELECT redlock_unlock_all()');

# ALTER SYSTEM refuses garbage once the library is loaded in the session
# (without it, PostgreSQL cannot check a placeholder: see the note below)
for my $case ([ 'redlock.node_timeout', '0' ], [ 'redlock.nodes', 'nonsense' ],
	[ 'redlock.key_prefix', 'a b' ])
{
	my ($rc, $o, $e) = $pg->psql('postgres',
		"LOAD 'redlock'; ALTER SYSTEM SET $case->[0] = '$case->[1]'");
	# refused by the setting's own check, not for any other reason
	like($e, qr/ERROR:  (invalid value for parameter|.* is outside the valid range for parameter) "\Q$case->[0]\E"/,
		"ALTER SYSTEM refuses $case->[0] = '$case->[1]' as an invalid value");
}
is(slurp_file($pg->data_dir . '/postgresql.auto.conf') =~ /redlock/ ? 'written' : 'clean',
	'clean', 'postgresql.auto.conf was left alone');

# a garbage postgresql.conf at reload: sessions that have the library keep
# the values in force
my $before = $s->query_safe(
	"SELECT current_setting('redlock.nodes') = '$nodes', current_setting('redlock.key_prefix'), current_setting('redlock.drift_factor')");
is($before, 't|redlock:|0.01', 'settings before the reload');
my $logpos = -s $pg->logfile;
$pg->append_conf('postgresql.conf',
	"redlock.nodes = '127.0.0.1:1,,'\nredlock.key_prefix = 'a b'\nredlock.drift_factor = 7\n");
$pg->reload;
my $ok = 0;
for (1 .. 100)
{
	my $log = slurp_file($pg->logfile, $logpos);
	if ($log =~ /redlock\.nodes/ && $log =~ /redlock\.key_prefix/ && $log =~ /redlock\.drift_factor/)
	{
		$ok = 1;
		last;
	}
	Time::HiRes::usleep(50_000);
}
ok($ok, 'the reload logged the three garbage settings');
Time::HiRes::usleep(200_000);
is($s->query_safe(
	"SELECT current_setting('redlock.nodes') = '$nodes', current_setting('redlock.key_prefix'), current_setting('redlock.drift_factor')"),
	't|redlock:|0.01', 'a session with the library loaded keeps the old values');
like($s->query_safe("SELECT redlock_try_lock('after:reload')"), qr/^\d+$/,
	'and still takes leases on the old node list');
# a new session loads the library after the reload: the garbage is refused
# with a WARNING and the built-in default applies (not the old value: the
# library was not preloaded, so nothing checked the file for it)
my ($rc, $o, $e) = $pg->psql('postgres',
	"LOAD 'redlock'; SELECT current_setting('redlock.key_prefix'), current_setting('redlock.drift_factor')");
is($o, 'redlock:|0.01', 'a new session never uses the garbage values');
like($e, qr/invalid value for parameter "redlock.nodes"/, 'and is warned about them');

$s->quit;
$other->quit;
$pg->stop;
done_testing();
