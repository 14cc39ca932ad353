# Network faults for a TAP test, through the root helper test/netfault.sh
# (nftables), which test/run-tests.sh starts when it runs as root for a
# suite whose file names REDLOCK_NETFAULT, and names to the test in that
# variable (the helper's directory).
#
#   my $net = NetFault->new or note "no network faults: " . NetFault->why_not;
#   $net->cut('127.0.0.2', $port);           # both directions dropped
#   $net->drop_replies('127.0.0.2', $port);  # requests applied, answers lost
#   $net->heal('127.0.0.2', $port);
#   $net->heal_all;
#
# Each call returns once the helper has changed the rules (it dies when the
# helper refuses or does not answer in 30 s).  Only loopback addresses other
# than 127.0.0.1 are accepted (the helper checks again): a node listening
# there too (RedisNode's also_bind) is cut for the clients that use that
# address, and never for the test's own redis-cli on 127.0.0.1.
package NetFault;

use strict;
use warnings FATAL => 'all';

use Time::HiRes qw(time usleep);

# why new() returns undef
sub why_not
{
	my $dir = $ENV{REDLOCK_NETFAULT} // '';
	return 'REDLOCK_NETFAULT is not set (test/run-tests.sh sets it when it runs as root'
	  . ' with nftables installed)'
	  unless length $dir;
	return "$dir/netfault.fifo is missing (the helper test/netfault.sh is not running)"
	  unless -p "$dir/netfault.fifo";
	return undef;
}

sub new
{
	my ($class) = @_;
	return undef if defined why_not();
	my $dir = $ENV{REDLOCK_NETFAULT};
	# the helper holds the FIFO open for reading: this does not block
	open my $w, '>', "$dir/netfault.fifo" or die "$dir/netfault.fifo: $!";
	open my $r, '<', "$dir/netfault.log" or die "$dir/netfault.log: $!";
	my $self = bless { w => $w, r => $r, n => int(time * 1000) % 1_000_000 * 100, buf => '' },
	  $class;
	return $self;
}

# send one command and wait for its answer
sub command
{
	my ($self, @words) = @_;
	my $id = ++$self->{n};
	{
		# a helper that has exited leaves no reader: an error, not SIGPIPE
		local $SIG{PIPE} = 'IGNORE';
		syswrite($self->{w}, "$id @words\n") or die "netfault: cannot write to the helper: $!";
	}
	my $until = time + 30;
	while (time < $until)
	{
		my $got = sysread($self->{r}, my $chunk, 4096);
		$self->{buf} .= $chunk if $got;
		while ($self->{buf} =~ s/^([^\n]*)\n//)
		{
			my $line = $1;
			next unless $line =~ /^$id (.*)$/;
			return 1 if $1 eq 'ok';
			die "netfault: '@words' refused: $1";
		}
		usleep(2_000);
	}
	# what there is to tell of the helper, for whoever reads the failure
	my $dir = $ENV{REDLOCK_NETFAULT} // '';
	my $tail = '';
	if (open my $fh, '<', "$dir/netfault.log")
	{
		my @l = <$fh>;
		$tail = join '', @l[ ($#l > 4 ? $#l - 4 : 0) .. $#l ];
	}
	die "netfault: no answer to '$id @words' in 30 s (its FIFO "
	  . (-p "$dir/netfault.fifo" ? 'is there' : 'is gone: the helper exited')
	  . "); the helper's last lines:\n$tail";
}

sub cut { my ($self, $addr, $port) = @_; return $self->command('cut', $addr, $port); }
sub heal { my ($self, $addr, $port) = @_; return $self->command('heal', $addr, $port); }

sub drop_replies
{
	my ($self, $addr, $port) = @_;
	return $self->command('drop-replies', $addr, $port);
}
sub heal_all { return $_[0]->command('heal-all'); }

1;
