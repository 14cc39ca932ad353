# What the TAP tests of test/t share: real Redis nodes and a real cluster
# with redlock (the bootstrap), two clusters on the same nodes (the pair),
# waiting for a state instead of sleeping (wait_for, a waiter that is queued
# and asleep, the wait event it must show on this server version, keys
# subscribed on every node), probes of the lock keys on the nodes, and the
# "nothing crashed" checks.  README blocks: test/perl/ReadmeSQL.pm.
package RedlockTest;

use strict;
use warnings FATAL => 'all';

use Exporter 'import';
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedisNode;
use Test::More;
use Time::HiRes qw(time usleep);

our @EXPORT = qw(redis_nodes node_list redlock_cluster redlock_pair wait_for
  free_port subscribed unsubscribed settled key_count keys_on no_keys start_waiter seed_epoch
  dispatcher_rounds
  asleep wait_event_of expected_wait_event nothing_crashed faketime_preload);

# $n real redis-server processes (args: extra redis-server arguments)
sub redis_nodes
{
	my ($n, %args) = @_;
	return map { RedisNode->new(%args) } 1 .. $n;
}

# Write each node's epoch (the restart quarantine's evidence, the key
# redlock:epoch) as old, as an operator may for nodes just provisioned that
# hold no lock: they count at once, without waiting out the quarantine.
sub seed_epoch
{
	for my $node (@_)
	{
		my ($rid) = $node->cli('INFO', 'server') =~ /run_id:(\w+)/;
		$node->cli('SET', 'redlock:epoch', "0 $rid seeded");
	}
}

# the rounds $pg's sessions sent through the dispatcher and on their own
# connections (redlock_dispatcher): (rounds_shared, rounds_own)
sub dispatcher_rounds
{
	my ($pg) = @_;
	return split /\|/, $pg->safe_psql('postgres',
		'SELECT rounds_shared, rounds_own FROM redlock_dispatcher');
}

# the redlock.nodes value of these nodes
sub node_list
{
	return join(',', map { $_->addr } @_);
}

# A started cluster with the extension created.  Options: nodes => [nodes]
# (redlock.nodes; none: not set), preload => 1 (shared_preload_libraries),
# conf => extra postgresql.conf text, no_extension => 1, init => {options
# of PostgreSQL::Test::Cluster's init, e.g. allows_streaming => 1}.
sub redlock_cluster
{
	my ($name, %opt) = @_;
	my $pg = PostgreSQL::Test::Cluster->new($name);
	$pg->init(%{ $opt{init} // {} });
	# restarted nodes count at once, as the tests expect (a test of the
	# quarantine sets its own, later in the file: the last line wins)
	my $conf = "redlock.restart_quarantine = 0\n";
	$conf .= "shared_preload_libraries = 'redlock'\n" if $opt{preload};
	$conf .= "redlock.nodes = '" . node_list(@{ $opt{nodes} }) . "'\n" if $opt{nodes};
	$conf .= $opt{conf} if defined $opt{conf};
	$pg->append_conf('postgresql.conf', $conf);
	$pg->start;
	$pg->safe_psql('postgres', 'CREATE EXTENSION redlock') unless $opt{no_extension};
	return $pg;
}

# Two preloaded clusters, east and west, on the same nodes (the options of
# redlock_cluster)
sub redlock_pair
{
	my (%opt) = @_;
	return map { redlock_cluster($_, preload => 1, %opt) } 'east', 'west';
}

# poll $cond every 100 ms for up to $seconds (default: the TAP framework's
# timeout, 180 s): true once it holds
sub wait_for
{
	my ($cond, $seconds) = @_;
	$seconds //= $PostgreSQL::Test::Utils::timeout_default;
	for (1 .. 10 * $seconds)
	{
		return 1 if $cond->();
		usleep(100_000);
	}
	return 0;
}

sub free_port
{
	return PostgreSQL::Test::Cluster::get_free_port();
}

# every node has exactly one subscriber for the key (the wake-up worker of
# one server), waited for
sub subscribed
{
	my ($key, @redis) = @_;
	return wait_for(sub { !grep { $_->cli('PUBSUB', 'NUMSUB', $key) !~ /\n1$/ } @redis });
}

# no node has a subscriber for the key, waited for
sub unsubscribed
{
	my ($key, @redis) = @_;
	return wait_for(sub { !grep { $_->cli('PUBSUB', 'NUMSUB', $key) !~ /\n0$/ } @redis });
}

# the number of lock keys matching the pattern (after "redlock:lock:") on
# each node, as a string "n1 n2 ..." (counted on the server: names may hold
# CR/LF)
sub key_count
{
	my ($pattern, @redis) = @_;
	return join ' ', map {
		$_->cli('EVAL', "return #redis.call('KEYS', ARGV[1])", '0', "redlock:lock:$pattern")
	} @redis;
}

# the lock keys matching the pattern on one node, as redis-cli lists them
sub keys_on
{
	my ($node, $pattern) = @_;
	return $node->cli('KEYS', "redlock:lock:$pattern");
}

# no node has a lock key matching the pattern, waited for up to 10 s
# (releases are sent without waiting for every node's answer; a lease left
# behind keeps its key for its TTL, longer than that in these tests)
sub no_keys
{
	my ($pattern, @redis) = @_;
	my $zero = join ' ', ('0') x @redis;
	return wait_for(sub { key_count($pattern, @redis) eq $zero }, 10);
}

# The wait event a backend of $pg shows while it waits for its turn
# ('lease') or for the Redis nodes ('nodes'): RedlockLease and RedlockNodes
# from PostgreSQL 17 on, the generic Extension before.
sub expected_wait_event
{
	my ($pg, $kind) = @_;
	my $v = $pg->safe_psql('postgres', 'SHOW server_version_num');
	return 'Extension' if $v < 170000;
	return $kind eq 'nodes' ? 'RedlockNodes' : 'RedlockLease';
}

# "type/event" of the backend $pid
sub wait_event_of
{
	my ($pg, $pid) = @_;
	return $pg->safe_psql('postgres',
		"SELECT wait_event_type || '/' || wait_event FROM pg_stat_activity WHERE pid = $pid");
}

# the backend $pid waits with the wait event of $kind, waited for
sub asleep
{
	my ($pg, $pid, $kind) = @_;
	my $ev = expected_wait_event($pg, $kind // 'lease');
	return $pg->poll_query_until('postgres',
		"SELECT wait_event_type = 'Extension' AND wait_event = '$ev' FROM pg_stat_activity WHERE pid = $pid");
}

# A session of $pg waiting in $call (default redlock_lock('$res', 60000))
# after the settings $set; its result goes to the psql variable "got".
# Returns the session and its pid once it is queued in redlock_locks (with
# preload; queued => 0 for a server without) and asleep (asleep => 0: do
# not wait for that, e.g. when its first attempt is still under way).
sub start_waiter
{
	my ($pg, $res, %opt) = @_;
	my $call = $opt{call} // "redlock_lock('$res', 60000)";
	my $w = $pg->background_psql('postgres', on_error_stop => 0);
	my $pid = $w->query_safe('SELECT pg_backend_pid()');
	$w->query_safe($opt{set}) if $opt{set};
	$call = "SELECT $call AS got \\gset" unless $call =~ /^DO /;
	$w->query_until(qr/waiting/, "\\echo waiting\n$call\n");
	if ($opt{queued} // 1)
	{
		$pg->poll_query_until('postgres',
			"SELECT count(*) = 1 FROM redlock_locks WHERE resource = '$res' AND NOT granted AND pid = $pid")
		  or die "no waiter on $res";
	}
	if ($opt{asleep} // 1)
	{
		asleep($pg, $pid, 'lease') or die "the waiter on $res is not asleep";
	}
	return ($w, $pid);
}

# The waiter $pid of $pg is asleep for good: the attempt that a new
# subscription of the wake-up worker makes it take (a release before the
# subscription must not be lost), or any other wake-up, is over: the
# server's attempts stayed the same for 6 s while it is asleep.  (Waiters
# were seen asking once more up to about 5 s after their key was
# subscribed, a new subscription's window in src/workers/wakeup.c: 300 ms of quiet
# was not enough.)  Call once the key is subscribed on every node.
sub settled
{
	my ($pg, $pid) = @_;
	my $ev = expected_wait_event($pg, 'lease');
	my ($prev, $since) = (-1, time);
	for (1 .. 600)
	{
		my $n = $pg->safe_psql('postgres', 'SELECT coalesce(sum(attempts), 0) FROM redlock_stats');
		my $asleep = $pg->safe_psql('postgres',
			"SELECT wait_event = '$ev' FROM pg_stat_activity WHERE pid = $pid") eq 't';
		($prev, $since) = ($n, time) if $n != $prev || !$asleep;
		return 1 if time - $since >= 6;
		usleep(300_000);
	}
	die "the waiter $pid does not settle";
}

# the checks that nothing crashed: the postmaster never restarted (it
# started at $pm_start) and the log shows no backend that died abnormally
sub nothing_crashed
{
	my ($pg, $pm_start, $what) = @_;
	$what //= '';
	is($pg->safe_psql('postgres', 'SELECT pg_postmaster_start_time()'), $pm_start,
		"${what}the postmaster never restarted (no backend crashed)");
	unlike(slurp_file($pg->logfile),
		qr/terminated by signal|server process .* exited with exit code [^0]|PANIC/,
		"${what}no backend died abnormally");
}


# What LD_PRELOAD runs the Redis server binary on a clock a test can step
# (libfaketime, Debian's faketime), or an empty list, with the reason, when
# this machine cannot: libfaketime missing, or the binary does not survive
# it (valkey-server 8 dies at once under it).  libc's malloc is preloaded
# ahead of libfaketime: redis-server's jemalloc reads the clock while
# libfaketime starts up, which libfaketime cannot survive (Redis uses only
# malloc, free and malloc_usable_size).
sub faketime_preload
{
	my $bin = $ENV{REDLOCK_REDIS_SERVER} || 'redis-server';
	my ($libfaketime) = glob('/usr/lib/*/faketime/libfaketime.so.1');
	return (undef, 'libfaketime is not installed (Debian package faketime)')
	  unless $libfaketime;
	my ($libc) = `ldd \$(command -v $bin)` =~ m{(\S+/libc\.so\.6)};
	return (undef, "no libc.so.6 found for $bin") unless $libc;
	my $out = `timeout 10 env LD_PRELOAD='$libfaketime $libc' FAKETIME='+0' $bin --version 2>&1`;
	return (undef, "$bin does not run under libfaketime (exit status $?)")
	  unless $? == 0 && $out =~ /v=/;
	return ("$libfaketime $libc", undef);
}

# The privileges and initial privileges (pg_init_privs) of every redlock
# function and view, and of the views' columns that have privileges of
# their own, one line each, for comparing an updated installation with a
# fresh one (the ACL items sorted: a REVOKE and a GRANT can reorder them)
push @EXPORT, qw(privileges_sql);

sub privileges_sql
{
	return <<'SQL';
CREATE FUNCTION pg_temp.sorted(a aclitem[]) RETURNS text LANGUAGE sql
	AS $$ SELECT array_agg(x ORDER BY x::text)::text FROM unnest(a) x $$;
SELECT p.oid::regprocedure::text, pg_temp.sorted(coalesce(p.proacl, acldefault('f', p.proowner))),
       pg_temp.sorted(i.initprivs)
  FROM pg_proc p LEFT JOIN pg_init_privs i ON i.objoid = p.oid AND i.classoid = 'pg_proc'::regclass
 WHERE p.proname LIKE 'redlock\_%'
UNION ALL
SELECT c.oid::regclass::text || coalesce('.' || a.attname, ''),
       pg_temp.sorted(coalesce(a.attacl, c.relacl)), pg_temp.sorted(i.initprivs)
  FROM pg_class c
  LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attacl IS NOT NULL
  LEFT JOIN pg_init_privs i ON i.objoid = c.oid AND i.classoid = 'pg_class'::regclass
        AND i.objsubid = coalesce(a.attnum, 0)
 WHERE c.relname LIKE 'redlock\_%' AND c.relkind = 'v'
 ORDER BY 1
SQL
}

# ------------------------------------------------------------------------
# Sessions, workers and nodes as several tests look at them, and two
# servers on the same nodes (redlock_pair): a waiter on one that the other's
# releases must reach.

push @EXPORT, qw(run_in lease_ran_out long_session granted_after waiters reload_seen
  worker_pid proc_kb socket_inodes net_sockets attempts lock_values offer_values queued_offers command_calls
  remote_waiter);

# one statement in a background session: (stdout, stderr), neither undef
sub run_in
{
	my ($session, $sql) = @_;
	$session->{stderr} = '';
	my $out = $session->query($sql);
	my $err = $session->{stderr};
	$session->{stderr} = '';
	return ($out // '', $err // '');
}

# wait until the validity of background session $session's lease on
# $resource has run out (validity_ms 0 in redlock_leases, within $seconds,
# default 10): true once it has
sub lease_ran_out
{
	my ($session, $resource, $seconds) = @_;
	return wait_for(sub {
		(run_in($session,
			"SELECT validity_ms FROM redlock_leases WHERE resource = '$resource'"))[0] eq '0'
	}, $seconds // 10);
}

# a background session of $pg (on database $db, default postgres) that
# lives long: the TAP framework's timeout applies to each query, not to the
# whole session
sub long_session
{
	my ($pg, $db) = @_;
	my $s = $pg->background_psql($db // 'postgres', on_error_stop => 0);
	$s->set_query_timer_restart();
	return $s;
}

# the grant of start_waiter's session $w, waited for: its token and the
# seconds since $t0
sub granted_after
{
	my ($w, $t0) = @_;
	my $tok = $w->query_safe('SELECT :got');
	return ($tok, time - $t0);
}

# how many sessions of $pg wait for $res (in redlock_locks, not granted)
sub waiters
{
	my ($pg, $res) = @_;
	return $pg->safe_psql('postgres',
		"SELECT count(*) FROM redlock_locks WHERE resource = '$res' AND NOT granted");
}

# pg_reload_conf() on $pg, and wait until the configuration was read again:
# by $session (a backend reads it between statements), or, without one, by
# a new session (which starts with what the postmaster read)
sub reload_seen
{
	my ($pg, $session) = @_;
	my $sql = 'SELECT pg_conf_load_time()';
	my $before = $session ? $session->query_safe($sql) : $pg->safe_psql('postgres', $sql);
	$pg->safe_psql('postgres', 'SELECT pg_reload_conf()');
	my $seen = "SELECT pg_conf_load_time() > '$before'";
	wait_for(sub { ($session ? $session->query_safe($seen) : $pg->safe_psql('postgres', $seen)) eq 't' })
	  or die 'the configuration was not read again';
}

# the pid of $pg's redlock worker of that kind ('wake-up', 'keep-alive'),
# '' when none runs
sub worker_pid
{
	my ($pg, $kind) = @_;
	return $pg->safe_psql('postgres',
		"SELECT pid FROM pg_stat_activity WHERE backend_type = 'redlock $kind'");
}

# kB of a field of /proc/PID/status (VmRSS, VmHWM: the peak, RssAnon); a
# reading that fails dies, so that it never reads the same on both sides
sub proc_kb
{
	my ($pid, $field) = @_;
	open my $fh, '<', "/proc/$pid/status" or die "/proc/$pid/status: $!";
	my ($kb) = map { /^\Q$field\E:\s+(\d+) kB/ ? $1 : () } <$fh>;
	close $fh;
	die "no $field in /proc/$pid/status" unless defined $kb;
	return $kb;
}

# the inodes of the sockets process $pid has open (inode => 1; none when
# its fds cannot be read: it exited)
sub socket_inodes
{
	my ($pid) = @_;
	my %inodes;
	opendir(my $dh, "/proc/$pid/fd") or return %inodes;
	for my $fd (readdir $dh)
	{
		my $link = readlink("/proc/$pid/fd/$fd") // next;
		$inodes{$1} = 1 if $link =~ /^socket:\[(\d+)\]$/;
	}
	closedir $dh;
	return %inodes;
}

# the kernel's sockets of $proto ('tcp' or 'udp', IPv4 and IPv6), from
# /proc/net: a hash each of its local and peer port, state (hex: '0A' is a
# listening TCP socket) and inode
sub net_sockets
{
	my ($proto) = @_;
	my @sockets;
	for my $table ("/proc/net/$proto", "/proc/net/${proto}6")
	{
		open my $fh, '<', $table or next;
		while (my $line = <$fh>)
		{
			my @f = split ' ', $line;
			next unless @f > 9 && $f[9] =~ /^\d+$/;
			my ($local, $peer) = map { /:([0-9A-F]{4})$/ ? hex($1) : -1 } @f[ 1, 2 ];
			push @sockets, { local_port => $local, peer_port => $peer, state => $f[3], inode => $f[9] };
		}
		close $fh;
	}
	return @sockets;
}

# acquire attempts of every backend of $pg so far (asking the nodes)
sub attempts
{
	my ($pg) = @_;
	return $pg->safe_psql('postgres', 'SELECT coalesce(sum(attempts), 0) FROM redlock_stats');
}

# on each node: the value of $res's lock, '-' for none
sub lock_values
{
	my ($res, @redis) = @_;
	return map { my $v = $_->cli('GET', "redlock:lock:$res"); $v eq '' ? '-' : $v } @redis;
}

# on each node: the value of the first live offer in the waiters' queue
# for $res (the list "redlock:wait:<res>", each offer a hash
# "redlock:offer:<value>" while it lives), '-' for none
sub offer_values
{
	my ($res, @redis) = @_;
	return map { (queued_offers($res, $_), '-')[0] } @redis;
}

# the values of the live offers in $res's waiters' queue on the node, in
# order (read in one script: a waiter's attempt may replace its offer
# between two commands)
sub queued_offers
{
	my ($res, $r) = @_;
	my $lua = "local r = {} for _, v in ipairs(redis.call('LRANGE', KEYS[1], 0, -1)) do "
	  . "if redis.call('EXISTS', ARGV[1] .. v) == 1 then r[#r + 1] = v end end return r";
	return grep { $_ ne '' }
	  split /\n/, $r->cli('EVAL', $lua, '1', "redlock:wait:$res", 'redlock:offer:');
}

# the calls of a Redis command the nodes ran since their start or their last
# CONFIG RESETSTAT, all nodes together ('eval' counts EVAL and EVALSHA)
sub command_calls
{
	my ($cmd, @redis) = @_;
	my $re = $cmd eq 'eval' ? 'eval(?:sha)?' : quotemeta($cmd);
	my $n = 0;
	for my $r (@redis)
	{
		my $info = $r->cli('INFO', 'commandstats');
		$n += $1 while $info =~ /^cmdstat_$re:calls=(\d+)/mg;
	}
	return $n;
}

# A waiter on $pg for $res that releases on another server (which shares
# the nodes @$redis) must reach: start_waiter's session (its options), once
# the wake-up worker of $pg listens for the key on every node; with
# settled => 1, also asleep for good (see settled).
sub remote_waiter
{
	my ($pg, $res, $redis, %opt) = @_;
	my $settle = delete $opt{settled};
	my ($w, $pid) = start_waiter($pg, $res, %opt);
	subscribed("redlock:lock:$res", @$redis)
	  or die $pg->name . "'s wake-up worker does not listen for $res on every node";
	settled($pg, $pid) if $settle;
	return ($w, $pid);
}

1;
