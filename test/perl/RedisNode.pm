# A real redis-server on loopback for process-level tests: start, kill,
# pause (SIGSTOP), resume, restart with or without its data.
#
# With tls => { cert => ..., key => ..., ca => ..., auth_clients => 'yes',
# client_cert => ..., client_key => ... } the node listens for TLS only
# (--port 0 --tls-port PORT), and redis-cli talks to it over TLS.
#
# With also_bind => ['127.0.0.2'] the node listens on those addresses too:
# one server reached under two names.
#
# With host => ADDRESS the node listens on that address instead of
# 127.0.0.1.  A node in protected mode (no password) bound to an address
# that is not loopback refuses every client connecting from it with DENIED;
# it counts as up all the same (ping).
#
# With cluster => 1 the node runs in cluster mode, its cluster bus on a
# free port of its own (by default the bus takes port + 10000, which may lie
# in the ephemeral range and be taken by some client's connection).
#
# The server binary is $ENV{REDLOCK_REDIS_SERVER} (run-tests.sh
# --redis-server sets it, e.g. to /usr/bin/valkey-server), by default
# redis-server.
package RedisNode;

use strict;
use warnings FATAL => 'all';

use File::Path qw(rmtree);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Time::HiRes qw(usleep);

my @all_nodes;

sub new
{
	my ($class, %args) = @_;
	my $self = {
		port => $args{port} // PostgreSQL::Test::Cluster::get_free_port(),
		dir => $args{dir} // PostgreSQL::Test::Utils::tempdir('redis'),
		args => $args{args} // [],
		tls => $args{tls},
		host => $args{host} // '127.0.0.1',
		also_bind => $args{also_bind} // [],
		cluster => $args{cluster},
		pid => undef,
	};
	bless $self, $class;
	push @all_nodes, $self;
	return $self if $args{no_start};
	if (defined $args{port})
	{
		$self->start;
		return $self;
	}
	# someone may take the free port before redis-server binds it: then
	# start() finds another process serving it, and we try another port
	for my $try (1 .. 10)
	{
		last if eval { $self->start; 1 };
		die $@ if $try == 10;
		print "# redis-server on port $self->{port}: $@# trying another port\n";
		$self->{port} = PostgreSQL::Test::Cluster::get_free_port();
	}
	return $self;
}

sub port { return $_[0]->{port}; }
sub host { return $_[0]->{host}; }

sub addr
{
	my ($self) = @_;
	return $self->{host} =~ /:/
	  ? "[$self->{host}]:$self->{port}"
	  : "$self->{host}:$self->{port}";
}

sub start
{
	my ($self) = @_;
	my $pidfile = "$self->{dir}/redis.pid";
	unlink $pidfile;
	# a killed predecessor may hold the port for a moment
	for (1 .. 200)
	{
		last unless $self->ping;
		usleep(25_000);
	}
	die "port $self->{port} is still in use" if $self->ping;
	my @listen = ('--port', $self->{port});
	if (my $t = $self->{tls})
	{
		@listen = ('--port', 0, '--tls-port', $self->{port},
			'--tls-cert-file', $t->{cert}, '--tls-key-file', $t->{key},
			'--tls-ca-cert-file', $t->{ca},
			'--tls-auth-clients', $t->{auth_clients} // 'no');
	}
	push @listen, '--cluster-enabled', 'yes',
	  '--cluster-config-file', "nodes-$self->{port}.conf",
	  '--cluster-port', PostgreSQL::Test::Cluster::get_free_port()
	  if $self->{cluster};
	system($ENV{REDLOCK_REDIS_SERVER} || 'redis-server', @listen, '--bind', $self->{host},
		@{ $self->{also_bind} },
		'--dir', $self->{dir}, '--save', '', '--appendonly', 'no',
		'--daemonize', 'yes', '--pidfile', $pidfile,
		'--logfile', "$self->{dir}/redis.log", @{ $self->{args} }) == 0
	  or die "could not start redis-server on port $self->{port}";
	for (1 .. 200)
	{
		last if -s $pidfile && $self->ping;
		usleep(25_000);
	}
	unless ($self->ping)
	{
		my $logfile = "$self->{dir}/redis.log";
		my $log = -e $logfile ? slurp_file($logfile) : '';
		my @tail = (split /\n/, $log)[-5 .. -1];
		die "redis-server on port $self->{port} did not start; its log ends:\n"
		  . join('', map { defined $_ ? "#   $_\n" : '' } @tail);
	}
	open my $fh, '<', $pidfile or die "no pid file: $!";
	chomp($self->{pid} = <$fh>);
	close $fh;
	# the server answering on the port must be the one we started
	my $info = $self->cli('INFO', 'server');
	if ($info =~ /process_id:(\d+)/ && $1 != $self->{pid})
	{
		die "port $self->{port} is served by pid $1, not by the new pid $self->{pid}";
	}
	return $self;
}

# redis-cli's options to reach the node
sub cli_opts
{
	my ($self) = @_;
	my $t = $self->{tls} or return "-h $self->{host} -p $self->{port}";
	my $o = "--tls --insecure -h $self->{host} -p $self->{port}";
	$o .= " --cert '$t->{client_cert}' --key '$t->{client_key}'" if $t->{client_cert};
	return $o;
}

sub ping
{
	my ($self) = @_;
	my $opts = $self->cli_opts;
	my $out = `redis-cli $opts ping 2>/dev/null`;
	# NOAUTH: up, wants a password; DENIED: up, in protected mode, and
	# this client is not on loopback
	return defined $out && $out =~ /PONG|NOAUTH|DENIED/;
}

# run a redis-cli command, return its output without the trailing newline
sub cli
{
	my ($self, @cmd) = @_;
	my @quoted = map { my $a = $_; $a =~ s/'/'\\''/g; "'$a'" } @cmd;
	my $opts = $self->cli_opts;
	my $out = `redis-cli $opts @quoted 2>&1`;
	chomp $out;
	return $out;
}

sub kill9
{
	my ($self) = @_;
	return unless $self->{pid};
	kill 'CONT', $self->{pid};
	kill 'KILL', $self->{pid};
	# gone, or a zombie waiting for init to reap it
	for (1 .. 500)
	{
		last unless kill(0, $self->{pid});
		my $stat = '';
		if (open my $fh, '<', "/proc/$self->{pid}/stat")
		{
			$stat = <$fh> // '';
			close $fh;
		}
		last if $stat =~ /^\d+ \(.*\) Z/;
		usleep(10_000);
	}
	$self->{pid} = undef;
}

sub pause { kill 'STOP', $_[0]->{pid}; }
sub resume { kill 'CONT', $_[0]->{pid}; }

# restart on the same port; its dataset is gone (no persistence)
sub restart
{
	my ($self) = @_;
	$self->kill9;
	$self->start;
}

END
{
	for my $n (@all_nodes)
	{
		next unless $n->{pid};
		kill 'CONT', $n->{pid};
		kill 'KILL', $n->{pid};
	}
}

1;
