# A DNS server on loopback (UDP) for the host-name tests: it answers A and
# AAAA questions from a zone the test sets and changes while it runs, says
# NXDOMAIN for every other name, and never answers names marked "hang" (a
# resolver that reads and never replies).  Point the backend at it with
# redlock.dns_servers, so that no lookup ever leaves the machine.
#
#   my $dns = FakeDNS->new(records => { 'a.redlock.test' => ['127.0.0.1'] });
#   $dns->set('b.redlock.test' => ['::1', '127.0.0.1'], 'slow.test' => 'hang');
#   $dns->addr           # "127.0.0.1:PORT"
#   $dns->queries('a.redlock.test')   # questions received for the name
package FakeDNS;

use strict;
use warnings FATAL => 'all';

use IO::Socket::INET;
use PostgreSQL::Test::Utils;
use Socket qw(AF_INET AF_INET6 inet_pton);

my @all;

sub new
{
	my ($class, %args) = @_;
	my $dir = PostgreSQL::Test::Utils::tempdir('dns');
	my $sock = IO::Socket::INET->new(
		Proto => 'udp',
		LocalAddr => '127.0.0.1',
		LocalPort => 0) or die "could not open a UDP socket: $!";
	my $self = bless {
		dir => $dir,
		port => $sock->sockport,
		zone => "$dir/zone",
		log => "$dir/queries.log",
		records => {},
	}, $class;
	$self->set(%{ $args{records} // {} });
	open my $lf, '>', $self->{log} or die;
	close $lf;
	my $pid = fork;
	die "fork: $!" unless defined $pid;
	if ($pid == 0)
	{
		$self->_serve($sock);
		POSIX::_exit(0);
	}
	close $sock;
	$self->{pid} = $pid;
	push @all, $self;
	return $self;
}

sub addr { return "127.0.0.1:$_[0]->{port}"; }

# set names: name => [addresses] or name => 'hang'; undef removes the name
sub set
{
	my ($self, %recs) = @_;
	for my $name (keys %recs)
	{
		if (defined $recs{$name}) { $self->{records}{ lc $name } = $recs{$name}; }
		else { delete $self->{records}{ lc $name }; }
	}
	my $tmp = "$self->{zone}.tmp";
	open my $fh, '>', $tmp or die "$tmp: $!";
	for my $name (sort keys %{ $self->{records} })
	{
		my $r = $self->{records}{$name};
		print $fh ref $r ? "$name @$r\n" : "$name $r\n";
	}
	close $fh;
	rename $tmp, $self->{zone} or die "rename: $!";
}

# how many questions (A and AAAA) were asked for a name
sub queries
{
	my ($self, $name) = @_;
	open my $fh, '<', $self->{log} or return 0;
	my $n = grep { /^\Q$name\E / } <$fh>;
	close $fh;
	return $n;
}

sub _zone
{
	my ($self) = @_;
	my %z;
	open my $fh, '<', $self->{zone} or return \%z;
	while (<$fh>)
	{
		chomp;
		my ($name, @vals) = split ' ';
		$z{$name} = (@vals == 1 && $vals[0] eq 'hang') ? 'hang' : \@vals;
	}
	close $fh;
	return \%z;
}

sub _serve
{
	my ($self, $sock) = @_;
	require POSIX;
	while (1)
	{
		my $peer = $sock->recv(my $q, 4096);
		next unless defined $peer && length($q) >= 12;
		my ($id, $flags, $qd) = unpack('n n n', $q);
		my $off = 12;
		my @labels;
		while ($off < length $q)
		{
			my $len = ord substr($q, $off, 1);
			$off++;
			last if $len == 0;
			push @labels, substr($q, $off, $len);
			$off += $len;
		}
		next if $off + 4 > length $q;
		my ($qtype, $qclass) = unpack('n n', substr($q, $off, 4));
		my $question = substr($q, 12, $off + 4 - 12);
		my $name = lc join('.', @labels);
		if (open my $lf, '>>', $self->{log})
		{
			print $lf "$name $qtype\n";
			close $lf;
		}
		my $rec = $self->_zone->{$name};
		next if defined $rec && !ref $rec;    # hang: read, never reply
		my $rcode = defined $rec ? 0 : 3;     # NXDOMAIN for unknown names
		my @answers;
		for my $a (@{ $rec // [] })
		{
			my ($type, $data);
			if ($a =~ /:/) { ($type, $data) = (28, inet_pton(AF_INET6, $a)); }
			else { ($type, $data) = (1, inet_pton(AF_INET, $a)); }
			next unless $type == $qtype;
			push @answers, pack('n n n N n', 0xC00C, $type, 1, 0, length $data) . $data;
		}
		my $hdr = pack('n n n n n n', $id, 0x8180 | ($flags & 0x0100) | $rcode,
			1, scalar @answers, 0, 0);
		$sock->send($hdr . $question . join('', @answers), 0, $peer);
	}
}

sub stop
{
	my ($self) = @_;
	return unless $self->{pid};
	local $?;    # do not let the child's status become the test's
	kill 'KILL', $self->{pid};
	waitpid $self->{pid}, 0;
	$self->{pid} = undef;
}

END
{
	$_->stop for @all;
}

1;
