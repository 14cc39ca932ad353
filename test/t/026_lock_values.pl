# The values redlock writes as a lease's lock: 32 hexadecimal characters of
# strong randomness (drawn in blocks of 32 values by each process), then the
# holder (":system identifier:server start:database:process").  Every value
# must be new: within one session across more than one block, between two
# sessions (backends forked from one postmaster, each drawing its own
# blocks), and after a session ends and another takes its place.  The holder
# part names the session's own database and process.
use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedlockTest;
use Test::More;

my @redis = redis_nodes(3);
my $pg = redlock_cluster('values', nodes => \@redis);
$pg->safe_psql('postgres', 'CREATE DATABASE other');
$pg->safe_psql('other', 'CREATE EXTENSION redlock');

my $n = 70;    # more than two blocks of 32
my $sysid = $pg->safe_psql('postgres', 'SELECT system_identifier FROM pg_control_system()');
my %seen;
my $dup = 0;

# Takes $n leases in one session of $db and returns the session's pid, the
# database's oid and the lock values found on the first node.
sub values_of
{
	my ($db, $tag) = @_;
	my $s = $pg->background_psql($db);
	my $pid = $s->query_safe('SELECT pg_backend_pid()');
	my $oid = $s->query_safe('SELECT oid FROM pg_database WHERE datname = current_database()');
	my $got = $s->query_safe(
		"SELECT count(redlock_try_lock('val:$tag:' || i, 600000)) FROM generate_series(1, $n) i");
	is($got, $n, "$tag: $n leases granted");
	my @keys = map { "redlock:lock:val:$tag:$_" } 1 .. $n;
	my @vals = split /\n/, $redis[0]->cli('MGET', @keys);
	$s->query_safe('SELECT redlock_unlock_all()');
	$s->quit;
	return ($pid, $oid, @vals);
}

for my $case (['postgres', 'a'], ['postgres', 'b'], ['other', 'c'], ['postgres', 'd'])
{
	my ($db, $tag) = @$case;
	my ($pid, $oid, @vals) = values_of($db, $tag);
	is(scalar @vals, $n, "$tag: the node has all $n lock values");
	my @bad = grep { !/^[0-9a-f]{32}:\Q$sysid\E:-?\d+:\Q$oid\E:\Q$pid\E$/ } @vals;
	is(scalar @bad, 0, "$tag: each is 32 hex digits and then this server, database $oid and process $pid")
	  or diag(join("\n", @bad[0 .. ($#bad < 4 ? $#bad : 4)]));
	for my $v (@vals)
	{
		my ($rand) = $v =~ /^([0-9a-f]{32})/ or next;
		$dup++ if $seen{$rand}++;
	}
}
is(scalar keys %seen, 4 * $n, 'every random part of the four sessions is different');
is($dup, 0, 'no random part was handed out twice');

done_testing();
