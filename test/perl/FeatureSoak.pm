# The feature soak's parts (used by test/t/021_feature_soak.pl): a psql
# session driven statement by statement and the workload one session runs
# (in a process of its own); the checker of the history they record is
# test/perl/FeatureSoakCheck.pm.
#
# Every time comes from the host's clock: the servers' clock_timestamp() and
# statement_timestamp() (all servers run on this host) and Perl's time() for
# the nemesis.  A session writes one JSON object per line to its history
# file:
#   grant    lease id, resource, token, kind, mode ('exclusive', or
#            'shared' for a reader's lease: redlock_lock_shared() and its
#            kin), start (statement_timestamp() of the lock call), ret
#            (clock_timestamp() once it returned), server and backend pid,
#            w (its wait_ms) and d (seconds from sending the call to its
#            answer)
#   obs      lease id, t (clock_timestamp() read before validity_ms), v
#            (validity_ms of redlock_leases, or redlock_extend's result),
#            m (the lease's mode in redlock_leases, when read there)
#   release  lease id, t (host time before the unlock, COMMIT or ROLLBACK
#            was sent)
#   lost     server, pid, t (host time the statement that found the
#            connection gone was sent), t_found (when it found it): the
#            session reconnects and goes on; its open leases end no later
#            than the validity they were told (a backend killed in a
#            crash-restart releases nothing: its leases expire)
#            A grant of several resources at once (redlock_lock(text[])
#            and its kin) is one grant per resource, each a lease of its
#            own, with set (the set's id) and set_res (its resources, in
#            the order asked) beside; the same start, ret, server and pid
#   setobs   set id, t, v (resource => validity_ms): what the holder of a
#            set was told of all its resources right after the grant, in
#            one read of redlock_leases (an obs of each lease follows)
#   refused  resource, kind, mode, t (host time the call was sent),
#            sqlstate, server, w, d (as for grant); for a set, res is its
#            resources joined by commas, and set_res lists them
#   write    lease id, resource, token, ok, sqlstate
#   stmt     a statement that took over a second: server, what (the
#            redlock function it calls, else its first word), w (the
#            wait_ms it was given, 0 for none), d, t (sent)
# The checker turns them into intervals (see check()).
package FeatureSoak;

use strict;
use warnings FATAL => 'all';

use IPC::Run;
use JSON::PP;
use POSIX ();
use Time::HiRes qw(time usleep);

# ---------- a psql session, one statement at a time ----------

# FeatureSoak::Psql->new($connstr, $appname): psql reading statements from
# a pipe; query() sends one and returns (ok, output, stderr), or dead => 1
# once psql has exited (its connection was lost).
package FeatureSoak::Psql;

use Time::HiRes qw(time);

sub new
{
	my ($class, $connstr, $app) = @_;
	my $self = bless { in => '', out => '', err => '', n => 0 }, $class;
	local $ENV{PGAPPNAME} = $app;
	local $ENV{PGOPTIONS} = '-c client_min_messages=warning';
	$self->{timer} = IPC::Run::timeout(120);
	$self->{h} = IPC::Run::start(
		[ 'psql', '-XAtq', '-F', '|', '-v', 'ON_ERROR_STOP=0', '-v', 'VERBOSITY=verbose',
			'-d', $connstr ],
		'<', \$self->{in}, '>', \$self->{out}, '2>', \$self->{err},
		$self->{timer});
	my $r = $self->query('SELECT pg_backend_pid()');
	die "psql did not connect: $r->{err}" unless $r->{ok};
	$self->{pid} = $r->{out};
	return $self;
}

sub pid { return $_[0]->{pid}; }

# one statement; { ok, out, err, dead, sent }
sub query
{
	my ($self, $sql) = @_;
	my $mark = "__fsoak_" . ++$self->{n} . "__";
	my $sent = time;
	$self->{out} = '';
	$self->{err} = '';
	$self->{in} .= "$sql;\n\\echo $mark\n\\warn $mark\n";
	$self->{timer}->start(120);
	my $dead = 0;
	eval {
		while ($self->{out} !~ /^$mark$/m || $self->{err} !~ /^$mark$/m)
		{
			if (!$self->{h}->pumpable)
			{
				$dead = 1;
				last;
			}
			$self->{h}->pump;
		}
		1;
	} or $dead = 1;
	my ($out, $err) = ($self->{out}, $self->{err});
	$out =~ s/^$mark\n?//m;
	$err =~ s/^$mark\n?//m;
	chomp $out;
	$self->{dead} = 1 if $dead;
	return { ok => !$dead && $err !~ /(?:ERROR|FATAL|PANIC):/, out => $out, err => $err,
		dead => $dead, sent => $sent };
}

sub close
{
	my ($self) = @_;
	eval {
		$self->{in} .= "\\q\n";
		$self->{timer}->start(20);
		$self->{h}->finish;
		1;
	} or eval { $self->{h}->kill_kill; 1 };
}

package FeatureSoak;

# ---------- the workload of one session ----------

# The kinds of lease cycle, with their weights.  Those named shared* take
# a reader's lease (redlock_lock_shared() and its kin) on the same
# resources as the writers' kinds.
our @KINDS = (
	[ xact => 4 ], [ session => 3 ], [ try => 1 ], [ extend => 2 ],
	[ keepalive => 2 ], [ pause => 2 ], [ nested => 2 ],
	[ multi => 3 ], [ 'multi-try' => 2 ], [ 'multi-xact' => 3 ],
	[ shared => 3 ], [ 'shared-xact' => 3 ], [ 'shared-try' => 1 ],
	[ 'shared-extend' => 1 ], [ 'shared-keepalive' => 2 ]);
our $MAX_TTL_MS = 3000;    # no lease of the workload has a longer TTL

# Run lease cycles until $a{deadline}, as session $a{name} of server
# $a{server} (connection string $a{connstr}); the fenced rows are on
# server $a{data_server} ($a{data_connstr}, undef when that is this
# server).  Writes the history to $a{file}.  Runs in a process of its own
# (forked by the test); returns when done.
sub run_session
{
	my (%a) = @_;
	srand($a{seed});
	open my $log, '>', $a{file} or die "$a{file}: $!";
	$log->autoflush(1);
	my $json = JSON::PP->new->canonical;
	my $emit = sub { print $log $json->encode({@_}), "\n"; };
	my $lease_no = 0;
	my %tok;    # lease id => token
	my ($db, $data);
	my %open;    # lease id => resource, of this connection
	my %granted;    # kind => 1, once this session was granted a lease of it

	# a connection, tried for up to 30 s (a server's crash-restart takes a
	# few seconds)
	my $connect = sub {
		my ($connstr, $app) = @_;
		for my $try (1 .. 150)
		{
			my $c = eval { FeatureSoak::Psql->new($connstr, $app) };
			return $c if $c;
			usleep(200_000);
		}
		die "session $a{name} could not connect";
	};
	$db = $connect->($a{connstr}, "fsoak-$a{name}");
	# the fenced rows live on the first server; sessions of the other one
	# write there through a connection of their own
	my $data_conn = sub {
		return $db unless $a{data_connstr};
		$data = $connect->($a{data_connstr}, "fsoak-$a{name}-data")
		  if !$data || $data->{dead};
		return $data;
	};
	# one statement on connection $c of server $server, allowed $w ms of
	# waiting: one over a second is recorded
	my $timed = sub {
		my ($c, $server, $sql, $w) = @_;
		my $r = $c->query($sql);
		$r->{d} = time - $r->{sent};
		$emit->(ev => 'stmt', server => $server,
			what => $sql =~ /\b(redlock_\w+)\(/ ? $1 : (split ' ', $sql)[0],
			w => $w // 0, d => $r->{d}, t => $r->{sent})
		  if $r->{d} > 1;
		return $r;
	};

	# run a statement on the lease connection; when the connection is gone
	# (a crash-restart of the server, or the backend terminated), record
	# it, forget the open leases (they end by their validity at the
	# latest), and reconnect, as an application does
	my $q = sub {
		my ($sql, $w) = @_;
		my $r = $timed->($db, $a{server}, $sql, $w);
		if ($r->{dead})
		{
			$emit->(ev => 'lost', server => $a{server}, pid => $db->pid, t => $r->{sent},
				t_found => time);
			%open = ();
			$db->close;
			$db = $connect->($a{connstr}, "fsoak-$a{name}");
		}
		return $r;
	};
	my $sqlstate = sub {
		my ($r) = @_;
		return 'dead' if $r->{dead};
		return $1 if $r->{err} =~ /ERROR:\s+([0-9A-Z]{5}):/;
		return 'other';
	};

	# a lock call; returns the lease id, or undef when refused
	my $grant = sub {
		my ($res, $call, $kind, $w) = @_;
		my $pid = $db->pid;
		my $mode = $call =~ /^redlock_\w+_shared\(/ ? 'shared' : 'exclusive';
		my $r = $q->("SELECT tok, extract(epoch FROM statement_timestamp()),"
			  . " extract(epoch FROM clock_timestamp()) FROM (SELECT $call AS tok OFFSET 0) s", $w);
		my ($tok, $start, $ret) = ($r->{out} // '') =~ /^([^|]*)\|([\d.]+)\|([\d.]+)$/;
		if (!$r->{ok} || !defined $tok || $tok eq '')
		{
			$emit->(ev => 'refused', res => $res, kind => $kind, mode => $mode, t => $r->{sent},
				sqlstate => !$r->{ok} ? $sqlstate->($r) : defined $tok ? 'null' : 'no answer',
				server => $a{server},
				w => $w // 0, d => $r->{d});
			return undef;
		}
		my $id = "$a{name}.$pid." . ++$lease_no;
		$tok{$id} = $tok;
		$emit->(ev => 'grant', lease => $id, res => $res, tok => $tok + 0, kind => $kind,
			mode => $mode, start => $start + 0, ret => $ret + 0, server => $a{server},
			pid => $pid + 0, w => $w // 0, d => $r->{d});
		$open{$id} = $res;
		$granted{$kind} = 1;
		return $id;
	};
	# a lock call over the resources @$rs at once: one grant event per
	# resource, each a lease of its own with the set's id and its
	# resources, then what its holder is told of the whole set in one
	# read; returns the lease ids (as many as tokens came back), or ()
	# when refused
	my $set_no = 0;
	my $grant_set = sub {
		my ($rs, $call, $kind, $w) = @_;
		my $pid = $db->pid;
		my $r = $q->("SELECT tok, extract(epoch FROM statement_timestamp()),"
			  . " extract(epoch FROM clock_timestamp()) FROM (SELECT $call AS tok OFFSET 0) s", $w);
		my ($tok, $start, $ret) = ($r->{out} // '') =~ /^([^|]*)\|([\d.]+)\|([\d.]+)$/;
		if (!$r->{ok} || !defined $tok || $tok eq '')
		{
			$emit->(ev => 'refused', res => join(',', @$rs), kind => $kind, mode => 'exclusive',
				t => $r->{sent},
				sqlstate => !$r->{ok} ? $sqlstate->($r) : defined $tok ? 'null' : 'no answer',
				server => $a{server},
				w => $w // 0, d => $r->{d}, set_res => $rs);
			return ();
		}
		my @toks = $tok =~ /^\{(.*)\}$/ ? split(/,/, $1) : ();
		my $sid = "$a{name}.$pid.set" . ++$set_no;
		my @ids;
		for my $i (0 .. $#$rs)
		{
			# a resource without its token is recorded as such: no grant,
			# and the checker finds the set incomplete
			next unless defined $toks[$i] && $toks[$i] =~ /^\d+$/;
			my $id = "$a{name}.$pid." . ++$lease_no;
			$tok{$id} = $toks[$i];
			$emit->(ev => 'grant', lease => $id, res => $rs->[$i], tok => $toks[$i] + 0,
				kind => $kind, mode => 'exclusive', start => $start + 0, ret => $ret + 0,
				server => $a{server}, pid => $pid + 0, w => $w // 0, d => $r->{d}, set => $sid,
				set_res => $rs);
			$open{$id} = $rs->[$i];
			push @ids, $id;
		}
		$granted{$kind} = 1 if @ids;
		# the set as its holder sees it: every resource's validity_ms,
		# read in one scan of redlock_leases (one moment for all)
		my $list = join(', ', map { "'$_'" } @$rs);
		my $o = $q->("SELECT extract(epoch FROM clock_timestamp()), (SELECT string_agg(resource"
			  . " || '=' || validity_ms, ',') FROM redlock_leases WHERE resource IN ($list))");
		if ($o->{ok} && @ids && $open{ $ids[0] } && $o->{out} =~ /^([\d.]+)\|(.*)$/)
		{
			my ($t, $vs) = ($1, $2);
			my %v = map { split /=/, $_, 2 } split /,/, $vs // '';
			$emit->(ev => 'setobs', set => $sid, t => $t + 0, v => { map { $_ => $v{$_} + 0 } keys %v });
			for my $id (@ids)
			{
				$emit->(ev => 'obs', lease => $id, t => $t + 0, v => $v{ $open{$id} } + 0)
				  if defined $v{ $open{$id} };
			}
		}
		return @ids;
	};
	# what the holder is told now: validity_ms of the lease (and its mode,
	# read after it)
	my $observe = sub {
		my ($id) = @_;
		return 0 unless $open{$id};
		my $res = $open{$id};
		my $r = $q->("SELECT extract(epoch FROM clock_timestamp()),"
			  . " (SELECT validity_ms FROM redlock_leases WHERE resource = '$res'),"
			  . " (SELECT mode FROM redlock_leases WHERE resource = '$res')");
		return 0 unless $r->{ok};
		my ($t, $v, $m) = split /\|/, $r->{out};
		return 0 unless defined $v && $v ne '';
		$emit->(ev => 'obs', lease => $id, t => $t + 0, v => $v + 0,
			defined $m && $m ne '' ? (m => $m) : ());
		return $v;
	};
	# redlock_extend of lease $id (on $res) to $ttl ms: what its holder is
	# told then
	my $extend = sub {
		my ($id, $res, $ttl) = @_;
		my $asked = time;
		my $r = $q->("SELECT v, extract(epoch FROM statement_timestamp()) FROM"
			  . " (SELECT redlock_extend('$res', $ttl) AS v OFFSET 0) s");
		# (an answer without its row, seen once as a crash-restart of the
		# server took the connection, tells nothing)
		if ($r->{ok} && $open{$id} && $r->{out} =~ /^(\d+)\|([\d.]+)$/)
		{
			$emit->(ev => 'obs', lease => $id, t => $2 + 0, v => $1 + 0);
			return;
		}
		my $st = $sqlstate->($r);
		$emit->(ev => 'refused', res => $res, kind => 'extend', t => $asked, sqlstate => $st);
		# RL003: the extend found the lease gone from a majority, took its
		# value off the nodes where it was left, and told its holder so:
		# the promise ends where the holder asked
		if ($st eq 'RL003' && $open{$id})
		{
			$emit->(ev => 'release', lease => $id, t => $asked);
			delete $open{$id};
		}
	};
	# release the leases @ids with $sql; $at: when the release began, if
	# before now
	my $release = sub {
		my ($sql, $at, @ids) = @_;
		my @mine = grep { $open{$_} } @ids;
		$emit->(ev => 'release', lease => $_, t => $at // time) for @mine;
		delete $open{$_} for @mine;
		return $q->($sql);
	};
	# the fenced write of the lease's token on its resource's row: on the
	# lease's own connection (and in its transaction, if any) when this
	# server holds the rows, else on the data connection; returns whether
	# it was accepted (and, in list context, when a refused write on the
	# lease's own connection was sent)
	my $write = sub {
		my ($id, $res) = @_;
		return 1 unless $open{$id};
		my ($row) = $res =~ /(\d+)$/;
		my $c = $data_conn->();
		my $r = ($c == $db ? $q : sub { $timed->($c, $a{data_server}, $_[0]) })->(
			"UPDATE fsoak_rows SET v = v + 1, fence_token = $tok{$id}, writer = '$id' WHERE id = $row");
		my $st = $r->{ok} ? undef : $sqlstate->($r);
		$emit->(ev => 'write', lease => $id, res => $res, tok => $tok{$id},
			ok => $r->{ok} ? 1 : 0, sqlstate => $st);
		# an error in the lease's own transaction aborts it there, and
		# with it its transaction leases: the release begins when the
		# write is sent, not at the ROLLBACK that follows
		return wantarray ? ($r->{ok}, $c == $db ? $r->{sent} : undef) : $r->{ok};
	};
	my $nap = sub { usleep(int($_[0] * 1e6)); };

	my $total = 0;
	$total += $_->[1] for @KINDS;
	# every kind is granted at least once per session, even in a short
	# run full of faults: until it is, every other cycle tries a kind
	# not granted yet, in an order of the session's own
	my @todo = map { $_->[0] } sort { $a->[1] <=> $b->[1] } map { [ $_->[0], rand() ] } @KINDS;
	my $cycle = 0;
	while (time < $a{deadline})
	{
		my $kind;
		@todo = grep { !$granted{$_} } @todo;
		if (@todo && $cycle++ % 2 == 0)
		{
			# the first not granted yet goes to the back: a kind that a
			# fault keeps refusing does not hold up the others
			$kind = shift @todo;
			push @todo, $kind;
		}
		else
		{
			my $pick = rand($total);
			for (@KINDS)
			{
				$kind = $_->[0];
				last if ($pick -= $_->[1]) < 0;
			}
		}
		my $rn = 1 + int(rand($a{resources}));
		my $res = "hot:$rn";
		my @waits = (0, 300, 1500, 4000);
		my $wait = $waits[ int(rand(@waits)) ];
		my $hold = 0.05 + rand(0.4);
		my $lock = sub {
			my ($ttl, %o) = @_;
			my $fn = $o{fn} // 'redlock_lock';
			my $args = "'$o{res}', $ttl";
			$args .= ", wait_ms => $o{wait}" if defined $o{wait};
			$args .= ', keep_alive => true' if $o{keep};
			return $grant->($o{res}, "$fn($args)", $o{kind} // $kind, $o{wait});
		};

		if ($kind eq 'xact')
		{
			my $r = $q->('BEGIN');
			next unless $r->{ok};
			my $id = $lock->(2500, fn => 'redlock_xact_lock', res => $res, wait => $wait);
			if (!$id)
			{
				$q->('ROLLBACK');
				next;
			}
			$observe->($id);
			my ($ok, $aborted_at) = $write->($id, $res);
			$nap->($hold) if $ok;
			$observe->($id) if $ok;
			$release->($ok ? 'COMMIT' : 'ROLLBACK', $ok ? undef : $aborted_at, $id);
		}
		elsif ($kind eq 'session' || $kind eq 'try')
		{
			my $id = $kind eq 'try'
			  ? $lock->(2500, fn => 'redlock_try_lock', res => $res)
			  : $lock->(2500, res => $res, wait => $wait);
			next unless $id;
			$observe->($id);
			$nap->($hold);
			$write->($id, $res);
			$observe->($id);
			$release->("SELECT redlock_unlock('$res')", undef, $id);
		}
		elsif ($kind eq 'extend')
		{
			my $id = $lock->(1200, res => $res, wait => $wait);
			next unless $id;
			$observe->($id);
			$nap->(0.2 + rand(0.6));
			$extend->($id, $res, 2500);
			$observe->($id);
			$write->($id, $res);
			$observe->($id);
			$release->("SELECT redlock_unlock('$res')", undef, $id);
		}
		elsif ($kind eq 'keepalive')
		{
			# held past its TTL: the keep-alive worker extends it
			my $id = $lock->(2000, res => $res, wait => $wait, keep => 1);
			next unless $id;
			my $until = time + 2.5 + rand(2.5);
			while (time < $until && $open{$id})
			{
				$observe->($id);
				$nap->(0.3);
			}
			$write->($id, $res);
			$observe->($id);
			$release->("SELECT redlock_unlock('$res')", undef, $id);
		}
		elsif ($kind eq 'pause')
		{
			# a holder that stalls past its TTL, then writes with its token
			my $id = $lock->(800, res => $res, wait => $wait);
			next unless $id;
			$observe->($id);
			$nap->(1.2 + rand(1.0));
			$write->($id, $res);
			$observe->($id);
			$release->("SELECT redlock_unlock('$res')", undef, $id);
		}
		elsif ($kind eq 'nested')
		{
			# another lease of the same session meanwhile
			my $id = $lock->(2500, res => $res, wait => $wait);
			next unless $id;
			$observe->($id);
			my $res2 = 'hot:' . (1 + ($rn % $a{resources}));
			my $id2 = $lock->(2500, res => $res2, wait => int(rand(2)) ? 0 : 500,
				kind => 'nested-inner');
			if ($id2)
			{
				$observe->($id2);
				$write->($id2, $res2);
				$observe->($id2);
			}
			$write->($id, $res);
			$observe->($id);
			$release->("SELECT redlock_unlock('$res2')", undef, $id2) if $id2;
			$release->("SELECT redlock_unlock('$res')", undef, $id);
		}
		elsif ($kind =~ /^multi/)
		{
			# several resources at once, all or none: 2 or 3 of them in
			# an order of their own (sessions ask for overlapping sets in
			# different orders), beside the one-resource leases of the
			# others; each row written with its resource's token
			my @pool = map { "hot:$_" } 1 .. $a{resources};
			my @rs;
			push @rs, splice(@pool, int(rand(@pool)), 1) while @pool && @rs < 2 + int(rand(2));
			my $arr = 'ARRAY[' . join(', ', map { "'$_'" } @rs) . ']';
			my $xact = $kind eq 'multi-xact';
			if ($xact)
			{
				my $r = $q->('BEGIN');
				next unless $r->{ok};
			}
			my @ids = $kind eq 'multi-try'
			  ? $grant_set->(\@rs, "redlock_try_lock($arr, 2500)", $kind)
			  : $grant_set->(\@rs, ($xact ? 'redlock_xact_lock' : 'redlock_lock')
				  . "($arr, 2500, wait_ms => $wait)", $kind, $wait);
			if (!@ids)
			{
				$q->('ROLLBACK') if $xact;
				next;
			}
			my ($ok, $aborted_at) = (1, undef);
			for my $id (@ids)
			{
				next unless $open{$id};
				($ok, $aborted_at) = $write->($id, $open{$id});
				last if $xact && !$ok;
			}
			if ($ok)
			{
				$nap->($hold);
				$observe->($_) for @ids;
			}
			if ($xact)
			{
				$release->($ok ? 'COMMIT' : 'ROLLBACK', $ok ? undef : $aborted_at, @ids);
			}
			elsif (int(rand(3)))
			{
				# the set together, in another order
				my @back = reverse @rs;
				$release->('SELECT redlock_unlock(ARRAY[' . join(', ', map { "'$_'" } @back) . '])',
					undef, @ids);
			}
			else
			{
				# one resource at a time
				my %id_of = map { ($open{$_} // '') => $_ } @ids;
				for my $res (@rs)
				{
					$release->("SELECT redlock_unlock('$res')", undef, $id_of{$res} // ());
				}
			}
		}
		elsif ($kind =~ /^shared/)
		{
			# a reader: a shared lease on a resource the writers' kinds
			# take too, in a transaction or the session's, waiting or not
			# (shared-try: at once, in a transaction half the time),
			# extended with redlock_extend, or kept alive past its TTL;
			# read back while held, no fenced write (a reader does not
			# write), released
			my $try = $kind eq 'shared-try';
			my $keep = $kind eq 'shared-keepalive';
			my $ext = $kind eq 'shared-extend';
			my $xact = $kind eq 'shared-xact' || ($try && int(rand(2)));
			if ($xact)
			{
				my $r = $q->('BEGIN');
				next unless $r->{ok};
			}
			my $fn = 'redlock_' . ($try ? 'try_' : '') . ($xact ? 'xact_' : '') . 'lock_shared';
			my $id = $lock->($keep ? 2000 : $ext ? 1200 : 2500, fn => $fn, res => $res,
				wait => $try ? undef : $wait, keep => $keep);
			if (!$id)
			{
				$q->('ROLLBACK') if $xact;
				next;
			}
			$observe->($id);
			if ($keep)
			{
				my $until = time + 2.5 + rand(2.5);
				while (time < $until && $open{$id})
				{
					$nap->(0.3);
					$observe->($id);
				}
			}
			else
			{
				$nap->($ext ? 0.2 + rand(0.6) : 0.1 + rand(0.6));
				$extend->($id, $res, 2500) if $ext;
				$observe->($id);
			}
			$release->($xact ? 'COMMIT' : "SELECT redlock_unlock_shared('$res')", undef, $id);
		}
		$nap->(rand(0.1));
	}
	$emit->(ev => 'done', t => time);
	$db->close;
	$data->close if $data;
	close $log;
}

1;
