# A fake Redis server on loopback that answers wrongly on purpose, for the
# hostile-peer tests.  It speaks just enough RESP to read requests, and then
# answers every request according to its mode:
#
#   grant         well-formed answers: acquire -> "$1 0", scripts -> ":1", PING
#                 -> "+PONG" (a sanity check that the framing is right)
#   status        "+OK" to everything (wrong type for the scripts)
#   integer       ":1" to everything (wrong type for acquire)
#   integer2      ":2" to everything (an integer out of range for a flag)
#   array         a two-element array
#   nil_array     "*-1"
#   error         "-ERR fake failure"
#   wrongtype     "-WRONGTYPE ..."
#   noscript      "-NOSCRIPT ..." (a server without Lua)
#   long_error    an error reply of 1 MB
#   huge_bulk     "$1099511627776" (1 TiB) and then nothing
#   max_bulk      "$9223372036854775807"
#   neg_bulk      "$-5"
#   bad_len       "$12x"
#   huge_array    "*2147483647"
#   wrap_array    "*4294967297" (wraps to 1 in a 32-bit count)
#   deep_nest     arrays nested 20 deep
#   nest5         arrays nested 5 deep (below hiredis 0.14's own limit of 7)
#   nest_huge     arrays nested 300,000 deep (hiredis 1.2 recursed on those
#                 until the stack overflowed)
#   bad_counter   "$3 -12"
#   long_counter  "$20 99999999999999999999"
#   zero_counter  "$2 00"
#   counter_max   "$19 9223372036854775807" (no greater token exists)
#   counter_ahead "$19 9000000000000000000" (forces the write-back round)
#   resp3         "%1 ..." (a RESP3 map, which RESP2 clients cannot read)
#   garbage       "HTTP/1.1 400 Bad Request"
#   nul_bytes     NUL bytes
#   cut           half of a well-formed acquire answer, then silence
#   cut_close     half of a well-formed acquire answer, then close
#   close         close the connection after reading the request
#   close_on_connect  accept, then close at once
#   silent        read requests, never answer
#   trickle       a well-formed answer, one byte every 200 ms (slower in all
#                 than any node_timeout of the tests)
#   flood         "$1000000000" and then megabytes of data, as fast as it goes
#   unsolicited   "+HELLO" at connect, then well-formed answers
#   delay         well-formed answers, each 200 ms late (slow but healthy;
#                 not in @MODES: it is no wrong answer).  With
#                 backend => 'host:port' (a real Redis) and delay => seconds,
#                 a slow link instead: each request goes to the backend at
#                 once, and what the backend says (its answers, and the
#                 messages of a subscribed connection) comes back that late.
#                 hold_subscribe => seconds: a SUBSCRIBE (and what follows it
#                 on its connection) reaches the backend that late
#   slow_release  acquire (and the connect script) answered at once,
#                 everything else 100 ms late
#                 (release_delay => seconds: that late), as if the node
#                 ran it only then: each answer is logged when sent
#                 ("conn N: answered release"), and a client that ends its side
#                 (EOF) still gets the answers owed before the close, as
#                 from Redis (not in @MODES either)
#   stream        well-formed answers to INFO server, PING and AUTH; to
#                 anything else (a full INFO too) "$4000000000" and then its
#                 bytes, as fast as they go (up to flood_limit bytes,
#                 default 256 MB, then silence)
#   push_stream   well-formed answers; a SUBSCRIBE is confirmed and then
#                 followed by a message on its first channel whose payload
#                 announces 4000000000 bytes and streams them (flood_limit)
#   mute          well-formed answers until the first SUBSCRIBE is
#                 confirmed; then it reads that connection but never
#                 answers on it again (a stalled subscriber link)
#   (stream, push_stream and mute are not in @MODES either)
#
# Every fake answers the connect script (INFO server and the node's epoch,
# see src/net/node_server.c) with a run_id of its own, so that no two fakes
# look like one server, and an epoch written long ago (no quarantine); the
# modes that give wrong answers (the fixed replies and the counter modes)
# give them to the lock commands, not to that script, while the modes about the connection (cut, close, silent,
# trickle, flood, ...) treat it as any other request.
#
# Every request is appended to a log file (one line: connection number and
# the command, scripts named by what they do), so tests can see what the
# backend sent.
#
# As Redis does, a fake remembers every script an EVAL brought (on any of
# its connections) and runs it for an EVALSHA of its SHA1 (logged as
# "EVALSHA <what it does> ..."); an EVALSHA of a script it does not have
# is answered NOSCRIPT in every mode that answers scripts well.
package FakeRedis;

use strict;
use warnings FATAL => 'all';

use Digest::SHA qw(sha1_hex);
use IO::Select;
use IO::Socket::INET;
use Socket qw(IPPROTO_TCP TCP_NODELAY);
use POSIX ();
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Time::HiRes qw(time usleep);

my @all_fakes;

our @MODES = qw(grant status integer integer2 array nil_array error wrongtype
  noscript long_error huge_bulk max_bulk neg_bulk bad_len huge_array wrap_array deep_nest
  nest5 nest_huge
  bad_counter long_counter zero_counter counter_max counter_ahead resp3 garbage
  nul_bytes cut cut_close close close_on_connect silent trickle flood
  unsolicited);
our @EXTRA_MODES = qw(delay slow_release stream push_stream mute);

sub new
{
	my ($class, %args) = @_;
	my $mode = $args{mode} or die "FakeRedis: mode needed";
	die "FakeRedis: unknown mode $mode" unless grep { $_ eq $mode } @MODES, @EXTRA_MODES;
	my $port = $args{port} // PostgreSQL::Test::Cluster::get_free_port();
	my $dir = $args{dir} // PostgreSQL::Test::Utils::tempdir('fakeredis');
	my $log = "$dir/fake-$port.log";
	my %link = (backend => $args{backend}, delay => $args{delay} // 0.2,
		hold_subscribe => $args{hold_subscribe} // 0,
		release_delay => $args{release_delay} // 0.1,
		flood_limit => $args{flood_limit} // 256 * 1024 * 1024,
		run_id => join('', map { sprintf '%x', int rand 16 } 1 .. 40));
	die "FakeRedis: a backend needs mode delay" if $link{backend} && $mode ne 'delay';

	my $listen = IO::Socket::INET->new(
		LocalAddr => '127.0.0.1',
		LocalPort => $port,
		Listen => 128,
		ReuseAddr => 1,
		Proto => 'tcp') or die "FakeRedis: cannot listen on $port: $!";

	my $pid = fork;
	die "FakeRedis: fork: $!" unless defined $pid;
	if ($pid == 0)
	{
		# the child must never run the test's END blocks.  serve() never
		# returns; if it dies, the reason goes to a file that died() reads:
		# a broken mode must not pass for a dead port
		eval { serve($listen, $mode, $log, \%link); };
		if (open my $fh, '>', "$log.died")
		{
			print $fh $@ || 'serve() returned';
			close $fh;
		}
		POSIX::_exit(1);
	}
	close $listen;
	my $self = bless { port => $port, mode => $mode, pid => $pid, log => $log,
		run_id => $link{run_id} }, $class;
	push @all_fakes, $self;
	return $self;
}

sub port { return $_[0]->{port}; }
sub addr { return "127.0.0.1:$_[0]->{port}"; }
sub mode { return $_[0]->{mode}; }
sub run_id { return $_[0]->{run_id}; }

# bytes streamed so far (flood, stream, push_stream), over all connections,
# as logged every 16 MB and when a connection closes
sub flooded
{
	my ($self) = @_;
	my %per_conn;
	for ($self->requests)
	{
		$per_conn{$1} = $2 if /^conn (\d+): flooded (\d+) bytes/;
	}
	my $sum = 0;
	$sum += $_ for values %per_conn;
	return $sum;
}

# why the fake server died ('' while it runs, or once stopped by stop())
sub died
{
	my ($self) = @_;
	open my $fh, '<', "$self->{log}.died" or return '';
	local $/;
	my $why = <$fh>;
	close $fh;
	return $why eq '' ? 'died' : $why;
}

# the requests received so far, one line each
sub requests
{
	my ($self) = @_;
	open my $fh, '<', $self->{log} or return ();
	my @lines = <$fh>;
	close $fh;
	chomp @lines;
	return @lines;
}

sub stop
{
	my ($self) = @_;
	return unless $self->{pid};
	kill 'KILL', $self->{pid};
	waitpid($self->{pid}, 0);
	$self->{pid} = undef;
}

END
{
	my $status = $?;
	$_->stop for grep { $_->{pid} } @all_fakes;
	$? = $status;
}

# ---------- the server (runs in the child) ----------

# the scripts EVAL brought, by SHA1 (in the fake's own process)
my %scripts;

# the script a request runs (EVAL: its text; EVALSHA: the text an EVAL
# brought), or undef
sub script_of
{
	my ($args) = @_;
	my $cmd = uc($args->[0] // '');
	return $args->[1] if $cmd eq 'EVAL';
	return $scripts{ lc($args->[1] // '') } if $cmd eq 'EVALSHA';
	return undef;
}

sub script_kind
{
	my ($script) = @_;
	return 'epoch' if $script =~ /return \{info, e, now\}/;
	return 'acquire' if $script =~ /'NX'/ || $script =~ /'ZADD', KEYS\[2\]/;
	return 'release' if $script =~ /local function freed\(/;
	return 'extend_many' if $script =~ /PEXPIRE/ && $script =~ /#KEYS/;
	return 'extend' if $script =~ /PEXPIRE/;
	return 'release' if $script =~ /'DEL'/;
	return 'writeback' if $script =~ /local t = ARGV\[2\]/;
	return 'script';
}

sub describe
{
	my ($args) = @_;
	my @a = @$args;
	return '' unless @a;
	my $cmd = uc $a[0];
	if (($cmd eq 'EVAL' || $cmd eq 'EVALSHA') && @a > 1)
	{
		my @rest = @a[ 2 .. $#a ];
		my $script = script_of($args);
		return "$cmd " . (defined $script ? script_kind($script) : 'unknown') . ' ' . join(' ', @rest);
	}
	return join(' ', @a);
}

sub bulk { return '$' . length($_[0]) . "\r\n$_[0]\r\n"; }

# well-formed answer to a command
sub good_answer
{
	my ($args, $link) = @_;
	my $cmd = uc($args->[0] // '');
	return "+PONG\r\n" if $cmd eq 'PING';
	return "+OK\r\n" if $cmd eq 'AUTH';
	my $info = "# Server\r\nredis_version:7.0.0\r\nredis_mode:standalone\r\n"
	  . "run_id:$link->{run_id}\r\nuptime_in_seconds:100\r\n";
	return bulk($info) if $cmd eq 'INFO';
	if ($cmd eq 'SUBSCRIBE' || $cmd eq 'UNSUBSCRIBE')
	{
		my $n = 0;
		return join '', map {
			$n += $cmd eq 'SUBSCRIBE' ? 1 : -1;
			$n = 0 if $n < 0;
			"*3\r\n" . bulk(lc $cmd) . bulk($_) . ":$n\r\n"
		} @$args[ 1 .. $#$args ];
	}
	return "-NOSCRIPT No matching script. Please use EVAL.\r\n"
	  if $cmd eq 'EVALSHA' && !defined script_of($args);
	if ($cmd eq 'EVAL' || $cmd eq 'EVALSHA')
	{
		my $kind = script_kind(script_of($args) // '');
		# the connect script: INFO, an epoch written long ago, the clock
		return "*3\r\n" . bulk($info) . bulk("0 $link->{run_id} seeded")
		  . bulk(int(time * 1000)) if $kind eq 'epoch';
		return "\$1\r\n0\r\n" if $kind eq 'acquire';
		return "*$args->[2]\r\n" . (":1\r\n" x $args->[2]) if $kind eq 'extend_many';
		return ":1\r\n";
	}
	return "+OK\r\n";
}

# the fixed wrong answers, built once: some are megabytes long, and building
# them for every request made the first answers on a connection late
my %fixed = (
	status => "+OK\r\n",
	integer => ":1\r\n",
	integer2 => ":2\r\n",
	array => "*2\r\n\$1\r\na\r\n:5\r\n",
	nil_array => "*-1\r\n",
	error => "-ERR fake failure\r\n",
	wrongtype => "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
	noscript => "-NOSCRIPT No matching script. Please use EVAL.\r\n",
	long_error => '-ERR ' . ('x' x (1024 * 1024)) . "\r\n",
	huge_bulk => "\$1099511627776\r\n",
	max_bulk => "\$9223372036854775807\r\n",
	neg_bulk => "\$-5\r\n",
	bad_len => "\$12x\r\n",
	huge_array => "*2147483647\r\n",
	wrap_array => "*4294967297\r\n:1\r\n",
	deep_nest => ("*1\r\n" x 20) . ":1\r\n",
	nest5 => ("*1\r\n" x 5) . ":1\r\n",
	nest_huge => ("*1\r\n" x 300_000) . ":1\r\n",
	bad_counter => "\$3\r\n-12\r\n",
	long_counter => "\$20\r\n99999999999999999999\r\n",
	zero_counter => "\$2\r\n00\r\n",
	counter_max => "\$19\r\n9223372036854775807\r\n",
	counter_ahead => "\$19\r\n9000000000000000000\r\n",
	resp3 => "%1\r\n+a\r\n:1\r\n",
	garbage => "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n",
	nul_bytes => "\0\0\0\0\r\n",
);

# what to do with one request: list of [delay_s, bytes] chunks, then an action
# ('keep', 'close', 'flood')
sub answer
{
	my ($mode, $args, $link, $c) = @_;
	my $good = good_answer($args, $link);
	my $cmd = uc($args->[0] // '');
	my $script = script_of($args);
	my $kind = defined $script ? script_kind($script) : lc $cmd;

	# the wrong answers are for the lock commands, not for the connect
	# script (INFO server and the epoch) or a plain INFO
	return ([ [ 0, $good ] ], 'keep')
	  if ($cmd eq 'INFO' || $kind eq 'epoch') && (exists $fixed{$mode} || $mode =~ /counter/);
	if ($mode eq 'stream')
	{
		return ([ [ 0, $good ] ], 'keep')
		  if $cmd eq 'PING' || $cmd eq 'AUTH' || $kind eq 'epoch'
		  || ($cmd eq 'INFO' && lc($args->[1] // '') eq 'server');
		return ([ [ 0, "\$4000000000\r\n" ] ], 'flood');
	}
	if ($mode eq 'push_stream')
	{
		return ([ [ 0, $good ] ], 'keep') unless $cmd eq 'SUBSCRIBE' && @$args > 1;
		return ([ [ 0, $good . "*3\r\n" . bulk('message') . bulk($args->[1]) . "\$4000000000\r\n" ] ], 'flood');
	}
	if ($mode eq 'mute')
	{
		return ([], 'keep') if $c->{muted};
		$c->{muted} = 1 if $cmd eq 'SUBSCRIBE';
		return ([ [ 0, $good ] ], 'keep');
	}

	# the counter modes lie only about the acquire; the rest is well-formed
	if ($mode =~ /counter/)
	{
		return ([ [ 0, $kind eq 'acquire' ? $fixed{$mode} : $good ] ], 'keep');
	}
	return ([ [ 0, $fixed{$mode} ] ], 'keep') if exists $fixed{$mode};
	return ([ [ 0, $good ] ], 'keep') if $mode eq 'grant' || $mode eq 'unsolicited';
	my $acq = "\$16\r\n1000000000000000\r\n";
	return ([ [ 0, substr($acq, 0, 9) ] ], 'keep') if $mode eq 'cut';
	return ([ [ 0, substr($acq, 0, 9) ] ], 'close') if $mode eq 'cut_close';
	return ([], 'close') if $mode eq 'close';
	return ([], 'keep') if $mode eq 'silent' || $mode eq 'close_on_connect';
	return ([ map { [ 0.2, $_ ] } split //, $good ], 'keep') if $mode eq 'trickle';
	return ([ [ 0.2, $good ] ], 'keep') if $mode eq 'delay';
	return ([ [ ($kind eq 'acquire' || $kind eq 'epoch' || $cmd eq 'INFO') ? 0 : $link->{release_delay},
				$good, $kind ] ], 'keep')
	  if $mode eq 'slow_release';
	return ([ [ 0, "\$1000000000\r\n" ] ], 'flood') if $mode eq 'flood';
	die "no answer for mode $mode";
}

# one complete RESP request from the front of $$buf, or undef
sub take_request
{
	my ($buf) = @_;
	return undef unless length $$buf;
	if (substr($$buf, 0, 1) ne '*')
	{
		# inline command
		my $nl = index($$buf, "\n");
		return undef if $nl < 0;
		my $line = substr($$buf, 0, $nl + 1, '');
		$line =~ s/\r?\n\z//;
		return [ split ' ', $line ];
	}
	my $nl = index($$buf, "\r\n");
	return undef if $nl < 0;
	my $n = substr($$buf, 1, $nl - 1);
	die "bad request header" unless $n =~ /^\d+$/;
	my $pos = $nl + 2;
	my @args;
	for (1 .. $n)
	{
		my $e = index($$buf, "\r\n", $pos);
		return undef if $e < 0;
		my $hdr = substr($$buf, $pos, $e - $pos);
		die "bad bulk header" unless $hdr =~ /^\$(\d+)$/;
		my $len = $1;
		$pos = $e + 2;
		return undef if length($$buf) < $pos + $len + 2;
		# strict where Redis is lenient: it skips the two bytes after a
		# bulk string without looking, which once hid a header cut short
		die "bulk string of $len bytes not followed by CRLF"
		  unless substr($$buf, $pos + $len, 2) eq "\r\n";
		push @args, substr($$buf, $pos, $len);
		$pos += $len + 2;
	}
	substr($$buf, 0, $pos, '');
	return \@args;
}

# the length of the complete RESP reply at $pos in $$buf, or undef
sub reply_length
{
	my ($buf, $pos) = @_;
	my $nl = index($$buf, "\r\n", $pos);
	return undef if $nl < 0;
	my $type = substr($$buf, $pos, 1);
	my $n = substr($$buf, $pos + 1, $nl - $pos - 1);
	my $end = $nl + 2;
	if ($type eq '$' && $n >= 0)
	{
		$end += $n + 2;
		return undef if length($$buf) < $end;
	}
	elsif ($type eq '*' && $n > 0)
	{
		for (1 .. $n)
		{
			my $len = reply_length($buf, $end) // return undef;
			$end += $len;
		}
	}
	return $end - $pos;
}

# a slow link: the request (none: only those due) goes to the backend when
# due (at once, or held behind an earlier one); what the backend says comes
# back by the loop
sub backend_send
{
	my ($c, $req, $when) = @_;
	if (@$req)
	{
		my $cmd = '*' . @$req . "\r\n" . join('', map { '$' . length($_) . "\r\n$_\r\n" } @$req);
		push @{ $c->{to_backend} }, [ $when, $cmd ];
	}
	while (@{ $c->{to_backend} } && $c->{to_backend}[0][0] <= time)
	{
		my $bytes = shift(@{ $c->{to_backend} })->[1];
		$c->{backend}->syswrite($bytes) == length $bytes or die "backend: $!";
	}
}

# a slow link's client gone: its backend connection goes too
sub unlink_backend
{
	my ($sel, $links, $c) = @_;
	return unless $c->{backend};
	if ($links->{ fileno $c->{backend} })
	{
		$sel->remove($c->{backend});
		delete $links->{ fileno $c->{backend} };
	}
	close $c->{backend};
	delete $c->{backend};
}

sub serve
{
	my ($listen, $mode, $logfile, $link) = @_;
	$SIG{PIPE} = 'IGNORE';
	open my $log, '>>', $logfile or die;
	$log->autoflush(1);
	my $sel = IO::Select->new($listen);
	my %conns;    # fileno => { sock, in, out => [[when, bytes]...], close, flood, id }
	my %links;    # the backend's fileno => its client's conn (a slow link)
	my $nconn = 0;
	my $flood_chunk = 'f' x 65536;

	for (;;)
	{
		my $now = time;
		my $timeout = 0.2;
		for my $c (values %conns)
		{
			for my $q (grep { $_ && @$_ } $c->{out}, $c->{to_backend})
			{
				my $d = $q->[0][0] - $now;
				$timeout = $d < $timeout ? ($d < 0 ? 0 : $d) : $timeout;
			}
		}
		my $wsel = IO::Select->new(map { $_->{sock} } grep { $_->{flood} } values %conns);
		my ($r, $w) = IO::Select::select($sel, $wsel->count ? $wsel : undef, undef, $timeout);
		my @ready = $r ? @$r : ();
		my %writable = map { fileno($_) => 1 } ($w ? @$w : ());
		for my $fh (@ready)
		{
			if ($fh == $listen)
			{
				my $s = $listen->accept or next;
				$s->blocking(0);
				# as Redis does: several answers in a row must not wait
				# for Nagle and the client's delayed ACK
				setsockopt($s, IPPROTO_TCP, TCP_NODELAY, 1);
				$nconn++;
				print $log "conn $nconn: connected\n";
				if ($mode eq 'close_on_connect')
				{
					close $s;
					next;
				}
				my $c = { sock => $s, in => '', out => [], id => $nconn, to_backend => [] };
				if ($link->{backend})
				{
					$c->{backend} = IO::Socket::INET->new(PeerAddr => $link->{backend}, Proto => 'tcp')
					  or die "backend $link->{backend}: $!";
					$links{ fileno $c->{backend} } = $c;
					$sel->add($c->{backend});
				}
				push @{ $c->{out} }, [ 0, "+HELLO\r\n" ] if $mode eq 'unsolicited';
				$conns{ fileno $s } = $c;
				$sel->add($s);
				next;
			}
			if (my $lc = $links{ fileno $fh })
			{
				# the backend speaks: its words reach the client that late
				my $got = sysread($fh, my $said, 65536);
				next if !defined $got && $!{EAGAIN};
				if (!$got)
				{
					$sel->remove($fh);
					delete $links{ fileno $fh };
					$lc->{close} = 1;
					next;
				}
				push @{ $lc->{out} }, [ time + $link->{delay}, $said ];
				next;
			}
			my $c = $conns{ fileno $fh } or next;
			my $got = sysread($fh, my $data, 65536);
			if (!$got)
			{
				next if !defined $got && $!{EAGAIN};
				print $log "conn $c->{id}: flooded $c->{flooded} bytes\n" if $c->{flooded};
				print $log "conn $c->{id}: closed by peer\n";
				if ($mode eq 'slow_release' && @{ $c->{out} })
				{
					# the answers owed, then the close (below)
					$sel->remove($fh);
					$c->{close} = 1;
					next;
				}
				$sel->remove($fh);
				delete $conns{ fileno $fh };
				close $fh;
				unlink_backend($sel, \%links, $c);
				next;
			}
			$c->{in} .= $data;
			while (my $req = take_request(\$c->{in}))
			{
				$scripts{ sha1_hex($req->[1]) } = $req->[1]
				  if uc($req->[0] // '') eq 'EVAL' && @$req > 1;
				print $log "conn $c->{id}: " . describe($req) . "\n";
				next if $c->{close} || $c->{flood} || $c->{flooded};
				if ($c->{backend})
				{
					backend_send($c, $req, time +
						(uc($req->[0] // '') eq 'SUBSCRIBE' ? $link->{hold_subscribe} : 0));
					next;
				}
				my ($chunks, $action) = answer($mode, $req, $link, $c);
				my $t = time;
				for my $ch (@$chunks)
				{
					$t += $ch->[0];
					push @{ $c->{out} }, [ $t, $ch->[1], $ch->[2] ];
				}
				$c->{close} = 1 if $action eq 'close';
				$c->{flood} = 1 if $action eq 'flood';
			}
		}

		# send what is due
		$now = time;
		for my $fd (keys %conns)
		{
			my $c = $conns{$fd};
			backend_send($c, [], 0) if $c->{backend} && @{ $c->{to_backend} } && $c->{to_backend}[0][0] <= $now;
			while (@{ $c->{out} } && $c->{out}[0][0] <= $now)
			{
				my $bytes = $c->{out}[0][1];
				my $n = syswrite($c->{sock}, $bytes);
				if (!defined $n)
				{
					last if $!{EAGAIN};
					$c->{close} = 1;
					$c->{out} = [];
					last;
				}
				if ($n < length $bytes)
				{
					$c->{out}[0][1] = substr($bytes, $n);
					last;
				}
				my $sent = shift @{ $c->{out} };
				print $log "conn $c->{id}: answered $sent->[2]\n" if defined $sent->[2];
			}
			if ($c->{flood} && !@{ $c->{out} } && $writable{$fd})
			{
				# write one chunk per loop: fast, but never blocks the server
				my $n = syswrite($c->{sock}, $flood_chunk);
				if (!defined $n && !$!{EAGAIN})
				{
					$c->{close} = 1;
				}
				else
				{
					my $before = $c->{flooded} // 0;
					$c->{flooded} = $before + ($n // 0);
					print $log "conn $c->{id}: flooded $c->{flooded} bytes\n"
					  if int($c->{flooded} / 16777216) > int($before / 16777216);
					if ($c->{flooded} >= $link->{flood_limit})
					{
						print $log "conn $c->{id}: flooded $c->{flooded} bytes, the limit\n";
						$c->{flood} = 0;
					}
				}
			}
			if ($c->{close} && !@{ $c->{out} })
			{
				print $log "conn $c->{id}: closed by fake\n";
				$sel->remove($c->{sock});
				close $c->{sock};
				delete $conns{$fd};
				unlink_backend($sel, \%links, $c);
			}
		}
	}
}

1;
