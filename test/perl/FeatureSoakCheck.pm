# The feature soak's checker (test/t/021_feature_soak.pl, and
# test/soak-picture.sh, which draws what it found): reads the sessions'
# history files (written by test/perl/FeatureSoak.pm, whose header
# describes the events) and turns them, with the faults and the fence's
# audit, into a report.
package FeatureSoakCheck;

use strict;
use warnings FATAL => 'all';

use JSON::PP;

# Read the sessions' history files: a list of events.
sub read_history
{
	my (@files) = @_;
	my @ev;
	for my $f (@files)
	{
		open my $fh, '<', $f or die "$f: $!";
		while (<$fh>)
		{
			chomp;
			next if $_ eq '';
			push @ev, decode_json($_);
		}
	}
	return \@ev;
}

# check(events => [...], faults => [...], audit => [...]) returns a report:
#
# Each lease is an interval on the host's clock: from the moment its grant
# returned to the end of what its holder was told (the largest observation
# time + validity_ms), cut at the moment its holder began to release it, or
# was terminated (faults of kind 'terminate' with server, pid, and t and
# t_end around the signal: the backend released its leases as it exited).
# A lost connection cuts nothing: its holder knows only that its lease ends
# by its validity, and that is all a backend killed in a crash-restart
# (faults of kind 'crash') leaves: its leases stay on the nodes and expire.
# Leases of different holders (server and backend) on one resource must not
# overlap, unless both are shared (grant events' mode 'shared', a reader's
# lease): readers hold a resource together, and their overlaps are only
# counted (together).  A shared lease overlapping an exclusive one is an
# overlap as two exclusive ones are (each carries modes, and shared when
# one of its leases is).  An overlap whose first lease was asked for
# before, and whose second was granted after, a clock jump (faults of kind
# 'clock') is counted apart: a key expired early on that node, Redlock's
# known limit.  So is one across a wipe of a node's data (kind 'wipe')
# made while the servers' restart quarantine was off (its field quarantine
# false): the node forgot the key and counted at once.  Under a quarantine
# (quarantine: its seconds) a wipe excuses nothing.
#
# Several resources at once: a set's grant (grant events with the same
# set id) is one lease per resource, each an interval of its own in the
# overlap and token checks above, against every other holder's lease of
# that resource, of one resource or of a set.  And it holds all its
# resources or none: a grant for each resource it asked for (set_res),
# each with its token, none for another, all with the same start, ret,
# server and pid (one call), and what its holder read of it right after
# (setobs) names every resource with one validity.  A set that breaks
# any of this is reported (multi_bad, with why).
#
# Tokens: a grant whose call returned before another's began has the
# smaller token (the order of grants in real time), whatever the modes of
# the two: each grant, a reader's too, gets a token above every earlier
# grant of the resource.
#
# Modes: a lease's mode as its holder read it in redlock_leases (obs
# events' m) is the mode it asked for (mode_bad otherwise).
#
# Audit (one row per accepted update of a fenced row, in the order of the
# updates: row, old token, new token): every new token is greater than the
# previous accepted one of the row, and than the row's old token.
#
# Time: no statement runs longer than its wait_ms + 2 s (events stmt: every
# statement over a second); the longest lock call of each server (grant and
# refused events' d) is reported with its wait_ms, and so is each server's
# longest time beyond a statement's wait_ms.
our $SLACK_S = 2;

sub check
{
	my (%h) = @_;
	my (%lease, @leases, @slow, %longest, %beyond, %sets, @mode_bad);
	my %term;
	for my $f (@{ $h{faults} })
	{
		next unless $f->{kind} eq 'terminate';
		push @{ $term{"$f->{server}/$f->{pid}"} }, $f;
	}
	my %rep = (grants => 0, refused => {}, writes_ok => 0, writes_refused => {},
		kinds => {});
	for my $e (@{ $h{events} })
	{
		my $ev = $e->{ev};
		# a lock call, granted or refused: how long it took
		if (($ev eq 'grant' || $ev eq 'refused') && defined $e->{d})
		{
			my $m = $longest{ $e->{server} };
			$longest{ $e->{server} } = $e if !$m || $e->{d} > $m->{d};
		}
		if ($ev eq 'grant')
		{
			my $l = { %$e, end => $e->{ret}, cut => undef, obs => 0,
				mode => $e->{mode} // 'exclusive' };
			$lease{ $e->{lease} } = $l;
			push @leases, $l;
			$rep{grants}++;
			$rep{kinds}{ $e->{kind} }++;
			$rep{modes}{ $l->{mode} }++;
			if (defined $e->{set})
			{
				my $set = $sets{ $e->{set} } //= { set => $e->{set}, kind => $e->{kind},
					res => $e->{set_res}, grants => [] };
				push @{ $set->{grants} }, $l;
			}
		}
		elsif ($ev eq 'setobs')
		{
			$sets{ $e->{set} }{setobs} //= $e;
		}
		elsif ($ev eq 'obs')
		{
			my $l = $lease{ $e->{lease} } or next;
			push @{ $l->{seen} }, [ $e->{t}, $e->{v} ];
			push @mode_bad, { lease => $l->{lease}, res => $l->{res}, asked => $l->{mode},
				told => $e->{m}, t => $e->{t} }
			  if defined $e->{m} && $e->{m} ne $l->{mode};
			# validity_ms 0: expired or lost, which promises nothing
			next unless $e->{v} > 0;
			my $end = $e->{t} + $e->{v} / 1000;
			$l->{end} = $end if $end > $l->{end};
			$l->{obs}++;
		}
		elsif ($ev eq 'release')
		{
			my $l = $lease{ $e->{lease} } or next;
			$l->{cut} = $e->{t} if !defined $l->{cut} || $e->{t} < $l->{cut};
		}
		elsif ($ev eq 'lost')
		{
			$rep{lost}{ $e->{server} }++;
		}
		elsif ($ev eq 'refused')
		{
			$rep{refused}{ $e->{sqlstate} }++;
		}
		elsif ($ev eq 'stmt')
		{
			my $over = $e->{d} - $e->{w} / 1000;
			push @slow, $e if $over > $SLACK_S;
			my $b = $beyond{ $e->{server} };
			$beyond{ $e->{server} } = $e if !$b || $over > $b->{d} - $b->{w} / 1000;
		}
		elsif ($ev eq 'write')
		{
			if ($e->{ok}) { $rep{writes_ok}++ }
			else { $rep{writes_refused}{ $e->{sqlstate} // '?' }++ }
		}
	}
	# cut each lease where its holder let go or was terminated
	for my $l (@leases)
	{
		my $k = "$l->{server}/$l->{pid}";
		my @at;
		# the signal left between t and t_end: a lease whose call began
		# before t_end may have been granted before it arrived, and ends
		# there (or at once, if granted meanwhile)
		for my $f (@{ $term{$k} // [] })
		{
			next if $l->{start} > ($f->{t_end} // $f->{t});
			push @at, $f->{t} > $l->{start} ? $f->{t} : $l->{start};
		}
		for my $t (@at)
		{
			$l->{cut} = $t if !defined $l->{cut} || $t < $l->{cut};
		}
		$l->{to} = $l->{end};
		$l->{to} = $l->{cut} if defined $l->{cut} && $l->{cut} < $l->{to};
	}

	my @jumps = map { $_->{t} } grep { $_->{kind} eq 'clock' } @{ $h{faults} };
	my @wipes = map { $_->{t} } grep { $_->{kind} eq 'wipe' && !$_->{quarantine} } @{ $h{faults} };
	my $between = sub {
		my ($from, $to, @at) = @_;
		return scalar grep { $_ >= $from && $_ <= $to } @at;
	};

	my %by_res;
	push @{ $by_res{ $_->{res} } }, $_ for @leases;
	my (@overlaps, @overlaps_clock, @overlaps_wipe, @together, @token_order);
	my $met = 0;
	for my $res (sort keys %by_res)
	{
		my @ls = sort { $a->{ret} <=> $b->{ret} } @{ $by_res{$res} };
		# a set's resource next to another holder's lease of it, in grant
		# order: how often the sets met the others
		for my $i (1 .. $#ls)
		{
			my ($p, $n) = @ls[ $i - 1, $i ];
			$met++ if ($p->{set} || $n->{set})
			  && !($p->{server} eq $n->{server} && $p->{pid} == $n->{pid});
		}
		# overlaps: a sweep over the leases in grant order
		my @active;
		for my $b (@ls)
		{
			@active = grep { $_->{to} > $b->{ret} } @active;
			for my $a (@active)
			{
				next if $a->{server} eq $b->{server} && $a->{pid} == $b->{pid};
				next unless $b->{to} > $b->{ret};    # an empty interval
				my $o = { res => $res, first => $a->{lease}, second => $b->{lease},
					from => $b->{ret}, to => ($a->{to} < $b->{to} ? $a->{to} : $b->{to}),
					tokens => "$a->{tok} $b->{tok}", modes => "$a->{mode} $b->{mode}",
					multi => ($a->{set} || $b->{set}) ? 1 : 0,
					shared => ($a->{mode} eq 'shared' || $b->{mode} eq 'shared') ? 1 : 0 };
				# two readers together: allowed
				if ($a->{mode} eq 'shared' && $b->{mode} eq 'shared') { push @together, $o }
				elsif ($between->($a->{start}, $b->{ret}, @jumps)) { push @overlaps_clock, $o }
				elsif ($between->($a->{start}, $b->{ret}, @wipes)) { push @overlaps_wipe, $o }
				else { push @overlaps, $o }
			}
			push @active, $b;
		}
		# token order: the largest token of the grants that returned
		# before this one's call began must be below its token
		my @by_ret = @ls;
		my @by_start = sort { $a->{start} <=> $b->{start} } @ls;
		my ($i, $max, $max_lease) = (0, undef, undef);
		for my $b (@by_start)
		{
			while ($i < @by_ret && $by_ret[$i]{ret} < $b->{start})
			{
				if (!defined $max || $by_ret[$i]{tok} > $max)
				{
					$max = $by_ret[$i]{tok};
					$max_lease = $by_ret[$i]{lease};
				}
				$i++;
			}
			push @token_order, { res => $res, earlier => $max_lease, earlier_tok => $max,
				later => $b->{lease}, later_tok => $b->{tok} }
			  if defined $max && $b->{tok} <= $max;
		}
	}

	# sets: all their resources or none
	my @multi_bad;
	my %multi = (sets => 0, resources => 0, observed => 0);
	for my $id (sort keys %sets)
	{
		my $set = $sets{$id};
		my @why;
		my @want = @{ $set->{res} // [] };
		my @g = @{ $set->{grants} };
		if (!@g)
		{
			push @why, 'a validity read of a set with no grant';
		}
		else
		{
			$multi{sets}++;
			$multi{kinds}{ $set->{kind} }++;
			$multi{resources} += @g;
			my %got;
			$got{ $_->{res} }++ for @g;
			push @why, "no grant of $_" for grep { !$got{$_} } @want;
			my %asked = map { $_ => 1 } @want;
			push @why, "a grant of $_, not asked for" for grep { !$asked{$_} } sort keys %got;
			push @why, "$_ granted twice" for grep { $got{$_} > 1 } sort keys %got;
			push @why, "no token for $_->{res}"
			  for grep { !defined $_->{tok} || $_->{tok} !~ /^\d+$/ || $_->{tok} <= 0 } @g;
			for my $f (qw(start ret server pid))
			{
				my %v = map { ($_->{$f} // '') => 1 } @g;
				push @why, "$f differs between its resources" if keys %v > 1;
			}
		}
		if (my $o = $set->{setobs})
		{
			$multi{observed}++;
			my %v = %{ $o->{v} };
			push @why, "$_ not held right after its grant" for grep { !exists $v{$_} } @want;
			my %vals = map { $v{$_} => 1 } grep { exists $v{$_} } @want;
			push @why, 'validity differs between its resources ('
			  . join(' ', map { "$_=$v{$_}" } grep { exists $v{$_} } @want) . ')'
			  if keys %vals > 1;
		}
		push @multi_bad, { set => $id, kind => $set->{kind}, why => join('; ', @why),
			res => join(',', @want) }
		  if @why;
	}

	my (@fence, %prev);
	for my $a (@{ $h{audit} })
	{
		my ($row, $old, $new) = @$a{qw(row old new)};
		push @fence, $a
		  if (defined $prev{$row} && $new <= $prev{$row})
		  || (defined $old && $new <= $old);
		$prev{$row} = $new;
	}

	$rep{leases} = \@leases;
	$rep{overlaps} = \@overlaps;
	$rep{overlaps_clock} = \@overlaps_clock;
	$rep{overlaps_wipe} = \@overlaps_wipe;
	$rep{together} = \@together;
	$rep{mode_bad} = \@mode_bad;
	$rep{token_order} = \@token_order;
	$rep{fence} = \@fence;
	$multi{met} = $met;
	$rep{multi} = \%multi;
	$rep{multi_bad} = \@multi_bad;
	$rep{observed} = scalar grep { $_->{obs} } @leases;
	$rep{slow} = \@slow;
	$rep{longest} = \%longest;
	$rep{beyond} = \%beyond;
	return \%rep;
}

1;
