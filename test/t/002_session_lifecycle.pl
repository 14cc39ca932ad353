# What happens to leases when sessions wait, are cancelled, time out, are
# terminated or crash, and when Redis wants a password.
use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedlockTest;
use FakeRedis;
use Test::More;
use Time::HiRes qw(time usleep);

my @redis = redis_nodes(3);
my $nodes = node_list(@redis);
my $pg = redlock_cluster('main', nodes => \@redis,
	conf => "redlock.retry_delay = 20\nredlock.retry_jitter = 10\nrestart_after_crash = on\n");

sub lock_keys
{
	return keys_on($redis[0], '*');
}

my $holder = $pg->background_psql('postgres', on_error_stop => 0);
my $t1 = $holder->query_safe("SELECT redlock_lock('life:r', 60000)");
like($t1, qr/^\d+$/, 'holder got a token');

# --- redlock_lock waits and gives up at lock_timeout with 55P03
my ($rc, $out, $err) = $pg->psql('postgres',
	"SET lock_timeout = '300ms'; SELECT redlock_lock('life:r')",
	extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($err, qr/55P03: could not obtain lease on "life:r" within lock_timeout \(300 ms\)/,
	'lock_timeout ends the wait with 55P03');
like($err, qr/held by another owner/, 'the detail shows the nodes that refused');

# --- statement_timeout and cancel interrupt the wait; nothing is left held
($rc, $out, $err) = $pg->psql('postgres',
	"SET statement_timeout = '300ms'; SELECT redlock_lock('life:r')");
like($err, qr/canceling statement due to statement timeout/,
	'statement_timeout interrupts the wait');

my $waiter = $pg->background_psql('postgres', on_error_stop => 0);
my $waiter_pid = $waiter->query_safe('SELECT pg_backend_pid()');
$waiter->query_until(qr/waiting/, "\\echo waiting\nSELECT redlock_lock('life:r');\n");
# it waits: asleep between its attempts (no lock table without preloading:
# it polls every retry_delay), or in the middle of one
ok($pg->poll_query_until('postgres',
		"SELECT state = 'active' AND query LIKE '%redlock_lock(''life:r'')%' AND wait_event_type = 'Extension' FROM pg_stat_activity WHERE pid = $waiter_pid"),
	'the waiter waits in redlock_lock');
$pg->safe_psql('postgres', "SELECT pg_cancel_backend($waiter_pid)");
$out = $waiter->query("SELECT count(*) FROM redlock_leases");
like($waiter->{stderr}, qr/canceling statement due to user request/,
	'cancel interrupts the wait');
$waiter->{stderr} = '';
is($out, '0', 'the cancelled session holds nothing');
is($holder->query_safe("SELECT count(*) FROM redlock_leases"), '1',
	'the holder still holds its lease');

# --- the holder releases; the waiter then gets a greater token
$holder->query_safe("SELECT redlock_unlock('life:r')");
my $t2 = $waiter->query_safe("SELECT redlock_lock('life:r', 60000)");
cmp_ok($t2, '>', $t1, 'next holder gets a greater token');

# --- a terminated backend releases its leases on the way out
my $waiter_pid2 = $waiter->query_safe('SELECT pg_backend_pid()');
$pg->safe_psql('postgres', "SELECT pg_terminate_backend($waiter_pid2, 5000)");
$waiter->quit;
my $t3 = $pg->safe_psql('postgres', "SELECT redlock_try_lock('life:r', 60000)");
like($t3, qr/^\d+$/, 'lease of a terminated backend was released at exit');
cmp_ok($t3, '>', $t2, 'and the token increased');
# its exit's release goes out without waiting for every node: waited for
# (10 s, well within the lease's TTL of 60 s)
ok(wait_for(sub { lock_keys() eq '' }, 10), 'the one-statement session released at its exit too');

# --- a backend killed with SIGKILL cannot release: its lease expires by TTL
my $victim = $pg->background_psql('postgres', on_error_stop => 0);
my $victim_pid = $victim->query_safe('SELECT pg_backend_pid()');
my $t4 = $victim->query_safe("SELECT redlock_lock('life:crash', 5000)");
my $log_offset = -s $pg->logfile;
kill 'KILL', $victim_pid;
# straight from the nodes, before the crash restart: the key is still there
# (nothing released it), with its TTL running
# (the call returned at a majority: the last node's script may still be on
# its way; the killed backend sent it before)
my @pttl;
ok(wait_for(sub {
	@pttl = map { $_->cli('PTTL', 'redlock:lock:life:crash') } @redis;
	scalar(grep { $_ > 0 } @pttl) == scalar(@redis) }, 4),
	"right after the crash the lease is still held on every node (PTTL @pttl)");
$victim->{run}->kill_kill;
# the postmaster restarts all backends after a crash; wait for its log to
# say it is done (poll_query_until would die, not retry, when its psql
# exits before taking the query: "ack Broken pipe" during the restart)
$pg->wait_for_log(qr/terminated; reinitializing.*ready to accept connections/s, $log_offset);
my $t5;
ok(wait_for(sub { ($t5 = $pg->safe_psql('postgres', "SELECT redlock_try_lock('life:crash')")) ne '' }, 60),
	'after its TTL the lease is free again');
cmp_ok($t5, '>', $t4, 'after expiry the next holder gets a greater token');
$holder->quit;

# --- AUTH: a password-protected node set
my @secure = redis_nodes(3, args => [ '--requirepass', 's3cret' ]);
my $secure_nodes = join(',', map { $_->addr } @secure);
# whether each of the password-protected nodes has the lock of $res: "1,0,1"
sub secure_exists
{
	my ($res) = @_;
	return join(',', map { $_->cli('-a', 's3cret', '--no-auth-warning', 'EXISTS', "redlock:lock:$res") } @secure);
}
($rc, $out, $err) = $pg->psql('postgres',
	"SET redlock.nodes = '$secure_nodes'; SELECT redlock_try_lock('life:auth')",
	extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($err, qr/RL005/, 'no password: node protocol error SQLSTATE');
like($err, qr/NOAUTH/, 'no password: the detail shows NOAUTH');
($rc, $out, $err) = $pg->psql('postgres',
	"SET redlock.nodes = '$secure_nodes'; SET redlock.password = 'wrong'; SELECT redlock_try_lock('life:auth')");
like($err, qr/authentication failed: (WRONGPASS|ERR invalid password)/,
	'wrong password: authentication failed per node');
$out = $pg->safe_psql('postgres',
	"SET redlock.nodes = '$secure_nodes'; SET redlock.password = 's3cret'; SELECT redlock_try_lock('life:auth') > 0");
is($out, 't', 'right password: granted');

# an ACL user limited to what redlock needs
for my $n (@secure)
{
	$n->cli('-a', 's3cret', '--no-auth-warning', 'ACL', 'SETUSER', 'locker',
		'on', '>lockpw', 'resetkeys', '~redlock:*', 'resetchannels', '-@all',
		'+eval', '+get', '+set', '+del', '+pexpire', '+ping', '+info');
}
$out = $pg->safe_psql('postgres',
	"SET redlock.nodes = '$secure_nodes'; SET redlock.username = 'locker'; SET redlock.password = 'lockpw';"
	  . " SELECT redlock_try_lock('life:acl') > 0, redlock_unlock('life:acl')");
is($out, 't|t', 'ACL user restricted to EVAL on redlock:* keys can lock and unlock');
# the release script's offer and PUBLISH commands are pcall'd: it releases
# (a call returns once a majority answered: the last node is waited for)
ok(wait_for(sub { secure_exists('life:acl') eq join(',', map { '0' } @secure) }),
	'and the release under that ACL removed the lock from every node');
($rc, $out, $err) = $pg->psql('postgres',
	"SET redlock.nodes = '$secure_nodes'; SET redlock.key_prefix = 'other:'; SET redlock.username = 'locker'; SET redlock.password = 'lockpw';"
	  . " SELECT redlock_try_lock('life:acl')");
like($err, qr/NOPERM|No permissions/, 'the ACL keeps that user out of keys outside its prefix');
# shared leases need the sorted-set commands (doc/operating.md): without
# them the nodes' error, said; with them, granted
($rc, $out, $err) = $pg->psql('postgres',
	"SET redlock.nodes = '$secure_nodes'; SET redlock.username = 'locker'; SET redlock.password = 'lockpw';"
	  . " SELECT redlock_try_lock_shared('life:acl-shared')");
like($err, qr/Redis nodes answered with errors.*(can't run this command|no permissions to run)/s,
	'a shared lease under that ACL: the nodes\' error, said');
for my $n (@secure)
{
	$n->cli('-a', 's3cret', '--no-auth-warning', 'ACL', 'SETUSER', 'locker',
		'+time', '+pttl', '+zadd', '+zrem', '+zscore', '+zrange', '+zrangebyscore',
		'+zremrangebyscore');
}
$out = $pg->safe_psql('postgres',
	"SET redlock.nodes = '$secure_nodes'; SET redlock.username = 'locker'; SET redlock.password = 'lockpw';"
	  . " SELECT redlock_try_lock_shared('life:acl-shared') > 0, redlock_unlock_shared('life:acl-shared')");
is($out, 't|t', 'with the sorted-set commands the documented ACL takes and releases shared leases');
ok(wait_for(sub { secure_exists('life:acl-shared') eq join(',', map { '0' } @secure) }),
	'and leaves no lock behind');

# scripts a connection ran before go by their SHA1 (EVALSHA); that ACL
# allows EVAL only: the node refuses EVALSHA with NOPERM, and the session
# sends its scripts by their text again
sub secure_stat
{
	my ($pattern) = @_;
	my $n = 0;
	for my $r (@secure)
	{
		my $info = $r->cli('-a', 's3cret', '--no-auth-warning', 'INFO', 'commandstats');
		$n += $1 if $info =~ $pattern;
	}
	return $n;
}
# the same per node, as a list
sub secure_stat_each
{
	my ($pattern) = @_;
	return map {
		my $info = $_->cli('-a', 's3cret', '--no-auth-warning', 'INFO', 'commandstats');
		$info =~ $pattern ? $1 : 0 } @secure;
}
# whether every node has run (or refused) at least $n scripts
sub secure_scripts_seen
{
	my ($n) = @_;
	my @eval = secure_stat_each(qr/^cmdstat_eval:calls=(\d+)/m);
	my @refused = secure_stat_each(qr/^cmdstat_evalsha:.*rejected_calls=(\d+)/m);
	return !grep { $eval[$_] + $refused[$_] < $n } 0 .. $#secure;
}
$_->cli('-a', 's3cret', '--no-auth-warning', 'CONFIG', 'RESETSTAT') for @secure;
# A session's first cycle sends the scripts by their text, its second by
# their SHA1, which every node refuses.  A call returns once a majority
# answered, so the slowest node's refusals may be read only at a later
# call (on a busy machine, after all of a statement's calls were sent to
# it): the refusals are counted once every node has answered, and the
# session's next statement reads them before it sends anything.  From
# then on no connection may send EVALSHA again: a connection that forgot
# the refusal would collect 20 more (every script of ten cycles).
my $acl = $pg->background_psql('postgres', on_error_stop => 0);
$acl->query_safe("SET redlock.nodes = '$secure_nodes'; SET redlock.username = 'locker'; SET redlock.password = 'lockpw'");
my $cycle = "SELECT redlock_try_lock('life:acl') > 0, redlock_unlock('life:acl');";
my $cycles = 10;
$out = $acl->query_safe($cycle x 2);
is($out, "t|t\nt|t", 'the ACL user without EVALSHA locks and unlocks');
# the first cycle's two scripts by their text, the second's lock by its
# SHA1 (refused), its unlock by its SHA1 or, if the lock's refusal was
# read in time, by its text
ok(wait_for(sub { secure_scripts_seen(4) }), 'every node answered both cycles');
ok(!grep({ $_ == 0 } secure_stat_each(qr/^cmdstat_evalsha:.*rejected_calls=(\d+)/m)),
	'every node refused the EVALSHA of the second cycle');
my $refused_first = secure_stat(qr/^cmdstat_evalsha:.*rejected_calls=(\d+)/m);
$out = $acl->query_safe($cycle x $cycles);
is($out, join("\n", ('t|t') x $cycles), 'and again and again in one session');
# every node's answers to the ten cycles too
ok(wait_for(sub { secure_scripts_seen(4 + 2 * $cycles) }), 'every node answered the ten cycles');
my $refused = secure_stat(qr/^cmdstat_evalsha:.*rejected_calls=(\d+)/m);
is($refused, $refused_first,
	"once a refusal was read, no connection tried EVALSHA again ($refused_first refusals on "
	  . @secure . " connections in the second cycle, $refused in all)");
cmp_ok(secure_stat(qr/^cmdstat_eval:calls=(\d+)/m), '>=', 2 * $cycles * @secure,
	'and sent its scripts by their text from then on');
$acl->quit;
ok(wait_for(sub { secure_exists('life:acl') eq join(',', map { '0' } @secure) }), 'nothing is left locked');

# one node whose ACL refuses EVALSHA among nodes that allow it: a round's
# command and its EVALSHA form are built once for all its nodes, but each
# node's connection decides whether it gets the EVALSHA form.  The node
# that refuses it sees EVALSHA until it said so once; the others go on
# using it.
sub secure_scripts_answered
{
	my ($n) = @_;
	my @eval = secure_stat_each(qr/^cmdstat_eval:calls=(\d+)/m);
	my @sha = secure_stat_each(qr/^cmdstat_evalsha:calls=(\d+)/m);
	my @refused = secure_stat_each(qr/^cmdstat_evalsha:.*rejected_calls=(\d+)/m);
	return !grep { $eval[$_] + $sha[$_] + $refused[$_] < $n } 0 .. $#secure;
}
for my $i (0 .. $#secure)
{
	$secure[$i]->cli('-a', 's3cret', '--no-auth-warning', 'ACL', 'SETUSER', 'mixed',
		'on', '>mixedpw', 'resetkeys', '~redlock:*', 'resetchannels', '-@all',
		'+eval', '+get', '+set', '+del', '+pexpire', '+ping', '+info',
		$i == $#secure ? () : ('+evalsha'));
}
$_->cli('-a', 's3cret', '--no-auth-warning', 'CONFIG', 'RESETSTAT') for @secure;
my $mixed = $pg->background_psql('postgres', on_error_stop => 0);
$mixed->query_safe("SET redlock.nodes = '$secure_nodes'; SET redlock.username = 'mixed'; SET redlock.password = 'mixedpw'");
my $mixed_cycle = "SELECT redlock_try_lock('life:mixed') > 0, redlock_unlock('life:mixed');";
is($mixed->query_safe($mixed_cycle x 2), "t|t\nt|t", 'mixed ACLs: the session locks and unlocks');
ok(wait_for(sub { secure_scripts_answered(4) }), 'mixed ACLs: every node answered both cycles');
my $mixed_refused = (secure_stat_each(qr/^cmdstat_evalsha:.*rejected_calls=(\d+)/m))[-1];
cmp_ok($mixed_refused, '>=', 1, 'mixed ACLs: the last node refused the EVALSHA of the second cycle');
is($mixed->query_safe($mixed_cycle x $cycles), join("\n", ('t|t') x $cycles),
	'mixed ACLs: and again and again');
ok(wait_for(sub { secure_scripts_answered(4 + 2 * $cycles) }), 'mixed ACLs: every node answered the ten cycles');
my @mixed_refusals = secure_stat_each(qr/^cmdstat_evalsha:.*rejected_calls=(\d+)/m);
is(join(',', @mixed_refusals), join(',', (0) x $#secure, $mixed_refused),
	'mixed ACLs: the EVALSHA form went to no node that refused it once that was read');
my @mixed_sha = secure_stat_each(qr/^cmdstat_evalsha:calls=(\d+)/m);
ok(!grep({ $_ < 2 * $cycles } @mixed_sha[0 .. $#secure - 1]),
	'mixed ACLs: the nodes that allow EVALSHA got it every cycle (' . join(',', @mixed_sha) . ')');
$mixed->quit;
ok(wait_for(sub { secure_exists('life:mixed') eq join(',', map { '0' } @secure) }),
	'mixed ACLs: nothing is left locked');

# a node that forgot the scripts (SCRIPT FLUSH) answers EVALSHA with
# NOSCRIPT: the command goes again by its text, a release (must-deliver,
# kept by its text) also when its round no longer waits for that node
# (stopped meanwhile), and a lock for the round that waits for it
my $fl = $pg->background_psql('postgres', on_error_stop => 0);
$fl->query_safe("SET redlock.nodes = '$secure_nodes'; SET redlock.password = 's3cret'");
$fl->query_safe("SELECT redlock_try_lock('life:fl1') > 0, redlock_unlock('life:fl1')");
like($fl->query_safe("SELECT redlock_try_lock('life:fl2', 600000)"), qr/^\d+$/, 'flush: a lease held (for 10 minutes)');
$_->cli('-a', 's3cret', '--no-auth-warning', 'CONFIG', 'RESETSTAT') for @secure;
$_->cli('-a', 's3cret', '--no-auth-warning', 'SCRIPT', 'FLUSH') for @secure;
$secure[2]->pause;
is($fl->query_safe("SELECT redlock_unlock('life:fl2')"), 't',
	'flush: released after the nodes forgot the scripts (one of them stopped)');
$secure[2]->resume;
# its NOSCRIPT comes after the round: taken with the session's next call
$fl->query_safe("SELECT redlock_try_lock('life:fl3') > 0, redlock_unlock('life:fl3')");
ok(wait_for(sub { join(',', map { $_->cli('-a', 's3cret', '--no-auth-warning', 'EXISTS', 'redlock:lock:life:fl2') } @secure)
		  eq join(',', map { '0' } @secure) }, 30),
	'flush: the release reached every node, the one that answered late too');
# one EVALSHA of the release on every node; the node that answered late may
# also have been sent fl3's lock and unlock by their SHA1 (pipelined) before
# its NOSCRIPT was read
my $sha_calls = secure_stat(qr/^cmdstat_evalsha:calls=(\d+)/m);
ok($sha_calls >= @secure && $sha_calls <= @secure + 2,
	"flush: the release went by its SHA1 first ($sha_calls EVALSHA calls on " . @secure . " nodes)");
$fl->query_safe("SELECT redlock_try_lock('life:fl3') > 0, redlock_unlock('life:fl3')");
$_->cli('-a', 's3cret', '--no-auth-warning', 'CONFIG', 'RESETSTAT') for @secure;
$_->cli('-a', 's3cret', '--no-auth-warning', 'SCRIPT', 'FLUSH') for @secure;
like($fl->query_safe("SELECT redlock_try_lock('life:fl4')"), qr/^\d+$/, 'flush: a lock granted after the nodes forgot the scripts');
# the call returned at a majority: the last node's EVALSHA is waited for
wait_for(sub { secure_stat(qr/^cmdstat_evalsha:calls=(\d+)/m) >= @secure });
is(secure_stat(qr/^cmdstat_evalsha:calls=(\d+)/m), scalar @secure, 'flush: the lock went by its SHA1 first');
# once more by its text on the nodes the round waited for: at least a
# majority (a node whose NOSCRIPT comes after the round ended is left alone)
my $again = secure_stat(qr/^cmdstat_eval:calls=(\d+)/m);
ok($again >= int(@secure / 2) + 1 && $again <= @secure, "flush: and once more by its text ($again nodes)");
is($fl->query_safe("SELECT redlock_unlock('life:fl4')"), 't', 'flush: and released');
$fl->quit;

# --- scripts by SHA1, framed whole for every size of argument count: a
# proxy that reads every request strictly (a bulk string must end in CRLF)
# in front of a real node.  Releases of 1, 3, 60 and 400 leases make
# EVALSHA commands of 1, 2 and 3 digits of arguments.  (A header buffer cut
# short once sent the SHA1 without its last digit and two stray bytes for
# its CRLF, which Redis forgives but answers with NOSCRIPT.)
my $proxy = FakeRedis->new(mode => 'delay', backend => $redis[0]->addr, delay => 0);
my $fr = $pg->background_psql('postgres', on_error_stop => 0);
$fr->query_safe("SET redlock.nodes = '${\ $proxy->addr }'");
for my $n (1, 1, 3, 60, 400)
{
	$fr->query_safe("SELECT count(redlock_lock('frame:$n:' || g, 60000)) FROM generate_series(1, $n) g");
	$fr->query_safe('SELECT redlock_unlock_all()');
}
$fr->quit;
is($proxy->died, '', 'scripts by SHA1: the strict proxy read every request whole');
# the release's first argument is its number of keys, one per lease
my %released = map { /^conn \d+: EVALSHA release (\d+) / ? ($1 => 1) : () } $proxy->requests;
is(join(' ', sort { $a <=> $b } keys %released), '1 3 60 144 256',
	'releases of 1, 3, 60 and 400 leases (in chunks of 256) went by SHA1: 6 to 516 arguments');
is(scalar(grep { /: EVALSHA unknown/ } $proxy->requests), 0,
	'and every SHA1 named a script the node had been sent');
ok(no_keys('frame:*', $redis[0]), 'every lease released on the node');

# --- leases are released when the credentials change while they are held
my $cred = $pg->background_psql('postgres', on_error_stop => 0);
$cred->query_safe("SET redlock.nodes = '$secure_nodes'; SET redlock.username = 'locker'; SET redlock.password = 'lockpw'");
like($cred->query_safe("SELECT redlock_lock('life:cred', 60000)"), qr/^\d+$/, 'a lease taken as Redis user locker');
ok(wait_for(sub { secure_exists('life:cred') eq '1,1,1' }), 'every node has its key');
$cred->{stderr} = '';
$cred->query("SET redlock.username = 'default'; SET redlock.password = 's3cret'");
is($cred->query("SELECT redlock_try_lock('life:cred2', 60000) IS NOT NULL"), 't',
	'new credentials: the next lease call is granted');
like($cred->{stderr}, qr/WARNING:  releasing 1 lease held on the previous Redis nodes/,
	'with a warning that the lease held with the old ones is released');
$cred->{stderr} = '';
ok(wait_for(sub { join(',', map { $_->cli('-a', 's3cret', '--no-auth-warning', 'EXISTS', 'redlock:lock:life:cred') } @secure) eq '0,0,0' }, 10),
	'and it is released on every node');
is($cred->query_safe("SELECT string_agg(resource, ',') FROM redlock_leases"), 'life:cred2',
	'the session holds only the new lease');
$cred->quit;

# --- statistics without shared_preload_libraries: a clear error, leases work
($rc, $out, $err) = $pg->psql('postgres', 'SELECT * FROM redlock_stats');
like($err, qr/redlock statistics are not being collected/,
	'statistics without preload: clear error');
like($err, qr/shared_preload_libraries/, 'and the hint names the setting');

# --- node health warnings, read from the nodes themselves
my $evicting = RedisNode->new(args => [ '--maxmemory-policy', 'allkeys-lru' ]);
my $durable = RedisNode->new(args => [ '--appendonly', 'yes' ]);
my $replica = RedisNode->new(args => [ '--replicaof', '127.0.0.1', $durable->port ]);
my $health_nodes = join(',', map { $_->addr } $evicting, $durable, $replica);
$out = $pg->safe_psql('postgres',
	"SET redlock.nodes = '$health_nodes'; SELECT node, persistence, maxmemory_policy, role, array_to_string(warnings, ' | ') FROM redlock_nodes");
my @rows = split /\n/, $out;
like($rows[0], qr/\|none\|allkeys-lru\|master\|.*maxmemory-policy is allkeys-lru: lock keys can be evicted.*no persistence|\|none\|allkeys-lru\|master\|no persistence.*maxmemory-policy is allkeys-lru/,
	'evicting node without persistence: both warnings');
like($rows[1], qr/\|aof\|noeviction\|master\|$/, 'node with AOF and noeviction: no warning');
like($rows[2], qr/\|(slave|replica)\|.*replication role is (slave|replica)/,
	'replica: role warning');

$pg->stop;
done_testing();
