#!/usr/bin/env bash
# Draw a stretch of a feature soak's history (test/t/021_feature_soak.pl) as
# a PNG: each resource's holders as bars on a time axis (one colour per
# session; a bar is the interval the checker used: from the grant's return
# to the end of the validity its holder was told, cut where it let go), the
# overlaps the checker found shaded red, each node's faults on a lane of
# its own (stopped, killed, wiped, in its restart quarantine, its clock
# jumped; the network between it and east above the lane, and west below
# it: cut, or its replies dropped) and each server's (worker SIGTERMed,
# reload, holder terminated, a backend SIGKILLed and the crash-restart
# until it accepts connections again) on another, and the phases of the
# run.
#
#   bash test/soak-picture.sh HISTORY_DIR OUT.png [FROM TO]
#
# HISTORY_DIR: what the soak wrote (SOAK_HISTORY=DIR bash test/run-tests.sh
# --only 'TAP 021' --seconds N keeps it; a failing run keeps it anyway and
# prints where).  FROM, TO: seconds from the start of the soak (default: the
# first 30 s of the main phase).  The intervals come from the soak's own
# checker (test/perl/FeatureSoakCheck.pm), run again on the history.  Needs
# gnuplot (Debian's gnuplot-nox, installed with apt-get when missing and
# run as root) and perl with IPC::Run (libipc-run-perl).
set -euo pipefail

usage() {
	echo "usage: bash test/soak-picture.sh HISTORY_DIR OUT.png [FROM TO]" >&2
	exit 2
}
[ $# -eq 2 ] || [ $# -eq 4 ] || usage
hist=$1
out=$2
from=${3:-}
to=${4:-}
[ -f "$hist/run.json" ] && [ -f "$hist/faults.jsonl" ] ||
	{ echo "soak-picture: $hist holds no soak history (run.json, faults.jsonl)" >&2; exit 2; }
top=$(cd "$(dirname "$0")/.." && pwd)

if ! command -v gnuplot > /dev/null; then
	if [ "$(id -u)" -ne 0 ]; then
		echo "soak-picture: gnuplot is missing; install Debian's gnuplot-nox" >&2
		exit 1
	fi
	apt-get install -y -q gnuplot-nox > /dev/null ||
		{ apt-get update -q > /dev/null && apt-get install -y -q gnuplot-nox > /dev/null; }
fi

work=$(mktemp -d)
trap '[ -n "${SOAK_PICTURE_KEEP:-}" ] || rm -rf "$work"' EXIT

# the data files and the gnuplot script
PERL5LIB="$top/test/perl${PERL5LIB:+:$PERL5LIB}" perl - "$hist" "$work" "$out" "$from" "$to" <<'PERL'
use strict;
use warnings FATAL => 'all';
use FeatureSoakCheck;
use JSON::PP;

my ($hist, $work, $out, $from, $to) = @ARGV;
sub slurp { local (@ARGV, $/) = @_; return <>; }
sub jsonl { return map { decode_json($_) } grep { /\S/ } split /\n/, slurp($_[0]); }
my $run = decode_json(slurp("$hist/run.json"));
my $t0 = $run->{t0};
my @faults = jsonl("$hist/faults.jsonl");
my @audit = -e "$hist/audit.jsonl" ? jsonl("$hist/audit.jsonl") : ();
my $events = FeatureSoakCheck::read_history(glob("$hist/session-*.jsonl"));
my $rep = FeatureSoakCheck::check(events => $events, faults => \@faults, audit => \@audit);

my $end = $run->{deadline} - $t0;
if ($from eq '')
{
	$from = $run->{main_start} - $t0;
	$to = $from + 30;
}
$to = $end if $to > $end;
die "soak-picture: nothing between $from and $to s\n" unless $to > $from;
my $seen = sub { my ($a, $b) = @_; return $b > $from && $a < $to; };
my $clip = sub {
	my ($a, $b) = @_;
	return ($a < $from ? $from : $a, $b > $to ? $to : $b);
};

# the lanes, from the top: resources, servers, nodes
my $nres = $run->{resources};
my $nnodes = scalar @{ $run->{nodes} };
my %y;
my $y = $nres + 2 + $nnodes + 1.5;
$y{"hot:$_"} = $y - $_ for 1 .. $nres;
$y = $y{"hot:$nres"} - 1.3;
$y{east} = $y;
$y{west} = $y - 0.6;
$y{"node$_"} = $y{west} - 1.0 - $_ for 0 .. $nnodes - 1;
my $ymin = $y{ 'node' . ($nnodes - 1) } - 0.7;
my $ymax = $y{'hot:1'} + 0.9;

my %colour = (east1 => 0x1f77b4, east2 => 0x17becf, east3 => 0x9467bd,
	west1 => 0xff7f0e, west2 => 0xd62728, west3 => 0x8c564b);
my %state = (pause => 0x9e9e9e, kill9 => 0x303030, wipe => 0xc0392b, quarantine => 0xf4d03f,
	crash => 0x6a1b9a);
# the network between a server and a node: a thin bar above (east) or
# below (west) the node's lane, solid where cut, hatched where the node's
# replies were dropped
my %net_colour = (east => 0x0b3d91, west => 0xb34700);
my %net_side = (east => 0.31, west => -0.31);

my $put = sub {
	my ($name, @rows) = @_;
	open my $fh, '>', "$work/$name" or die $!;
	print $fh join("\t", @$_), "\n" for @rows;
	# gnuplot wants a row: one far outside the picture
	print $fh $from - 1000, "\t0\t0.1\t0.1\t0\n" unless @rows;
	close $fh;
};
my $box = sub {    # x y xdelta ydelta colour of [a, b) on lane $lane
	my ($a, $b, $lane, $h, $c) = @_;
	($a, $b) = $clip->($a, $b);
	return [ ($a + $b) / 2, $y{$lane}, ($b - $a) / 2, $h, $c ];
};

# a resource's leases in the order of their grants, a little higher and
# lower by turns: one that begins where the last ended, and two that
# overlap, both show
my (@leases, %sessions, %turn);
for my $l (sort { $a->{ret} <=> $b->{ret} } @{ $rep->{leases} })
{
	my ($a, $b) = ($l->{ret} - $t0, $l->{to} - $t0);
	next unless $b > $a;
	my $up = $turn{ $l->{res} }++ % 2 ? -0.09 : 0.09;
	next unless $seen->($a, $b);
	my ($s) = $l->{lease} =~ /^([a-z]+\d+)\./;
	$sessions{$s} = 1;
	my $bar = $box->($a, $b, $l->{res}, 0.27, $colour{$s} // 0x777777);
	$bar->[1] += $up;
	push @leases, $bar;
}
# the checker's overlaps: red (a failure), magenta across a clock jump
# (Redlock's known limit), black across a wipe without the quarantine
my %overlap_colour = (overlaps => 0xff0000, overlaps_clock => 0xe040fb, overlaps_wipe => 0x000000);
my %overlap_title = (overlaps => 'overlap of two holders',
	overlaps_clock => 'overlap after a clock jump',
	overlaps_wipe => 'overlap after a wipe, quarantine off');
my %overlap_seen;
for my $kind (qw(overlaps overlaps_clock overlaps_wipe))
{
	my @bars;
	for my $o (@{ $rep->{$kind} })
	{
		my ($a, $b) = ($o->{from} - $t0, $o->{to} - $t0);
		next unless $seen->($a, $b);
		my $bar = $box->($a, $b, $o->{res}, 0.45, $overlap_colour{$kind});
		$bar->[2] = 0.05 if $bar->[2] < 0.05;    # a short one still shows
		push @bars, $bar;
	}
	$put->("$kind.dat", @bars);
	$overlap_seen{$kind} = 1 if @bars;
}

my (@states, @marks, @lines, @cuts, @mutes, %used);
my %clock_node = map { $_->{node} => 1 } grep { $_->{kind} eq 'clock' } @faults;
for my $f (@faults)
{
	my $t = $f->{t} - $t0;
	my $t_end = defined $f->{t_end} ? $f->{t_end} - $t0 : $t;
	if ($f->{kind} eq 'pause' || $f->{kind} eq 'kill9' || $f->{kind} eq 'wipe')
	{
		for my $n (split /,/, $f->{node})
		{
			if ($seen->($t, $t_end))
			{
				push @states, $box->($t, $t_end, "node$n", 0.22, $state{ $f->{kind} });
				$used{ $f->{kind} } = 1;
			}
			next unless $f->{kind} ne 'pause' && $f->{quarantine};
			my $q_end = $t_end + $f->{quarantine};
			if ($seen->($t_end, $q_end))
			{
				push @states, $box->($t_end, $q_end, "node$n", 0.22, $state{quarantine});
				$used{quarantine} = 1;
			}
		}
		push @lines, $t if $t >= $from && $t <= $to;
	}
	elsif ($f->{kind} eq 'net')
	{
		for my $c (@{ $f->{cuts} })
		{
			my ($s, $n, $a, $b, $how) = @$c;
			($a, $b) = ($a - $t0, (defined $b ? $b : $f->{t_end} // $f->{t}) - $t0);
			next unless $seen->($a, $b);
			my $bar = $box->($a, $b, "node$n", 0.07, $net_colour{$s});
			$bar->[1] += $net_side{$s};
			push @{ $how eq 'mute' ? \@mutes : \@cuts }, $bar;
			$used{ $how eq 'mute' ? "mute_$s" : "cut_$s" } = 1;
		}
	}
	elsif ($f->{kind} eq 'crash')
	{
		next unless $seen->($t, $t_end);
		my $bar = $box->($t, $t_end, $f->{server}, 0.2, $state{crash});
		$bar->[2] = 0.05 if $bar->[2] < 0.05;    # a short one still shows
		push @states, $bar;
		push @marks, [ $t, $y{ $f->{server} }, 'crash' ] if $t >= $from;
		push @lines, $t if $t >= $from && $t <= $to;
		$used{crash} = 1;
	}
	elsif ($f->{kind} eq 'clock')
	{
		next unless $t >= $from && $t <= $to;
		push @marks, [ $t, $y{"node$f->{node}"}, 'clock' ];
		push @lines, $t;
	}
	elsif ($t >= $from && $t <= $to)
	{
		my $tag = $f->{label} =~ /wake-up/ ? 'wk'
		  : $f->{label} =~ /keep-alive/ ? 'ka'
		  : $f->{label} =~ /changed/ ? 'rl*'
		  : $f->{kind} eq 'reload' ? 'rl'
		  : $f->{kind} eq 'terminate' ? 'term'
		  : $f->{kind};
		push @marks, [ $t, $y{ $f->{server} }, $tag ];
	}
}
$put->('leases.dat', @leases);
$put->('states.dat', @states);
$put->('cuts.dat', @cuts);
$put->('mutes.dat', @mutes);
open my $mk, '>', "$work/marks.dat" or die $!;
print $mk "$_->[0]\t$_->[1]\t\"$_->[2]\"\n" for @marks;
print $mk $from - 1000, "\t0\t\"-\"\n" unless @marks;
close $mk;

my $ytics = join(', ',
	(map { "\"hot:$_\" $y{\"hot:$_\"}" } 1 .. $nres),
	"\"east: server faults\" $y{east}", "\"west: server faults\" $y{west}",
	map { "\"node " . ($_ + 1) . ($clock_node{$_} ? ' (its clock jumps)' : '') . "\" $y{\"node$_\"}" }
	  0 .. $nnodes - 1);
my @arrows = map { "set arrow from $_, graph 0 to $_, graph 1 nohead dt 3 lw 0.8 lc rgb '#b0b0b0' back" } @lines;
for my $p ([ $run->{control_end}, 'control phase: quarantine off ', 'right' ],
	[ $run->{main_start}, " main phase: quarantine $run->{quarantine_s} s", 'left' ],
	[ $run->{faults_end}, ' faults end', 'left' ])
{
	my $t = $p->[0] - $t0;
	next unless $t >= $from && $t <= $to;
	push @arrows, "set arrow from $t, graph 0 to $t, graph 1 nohead lw 1.5 lc rgb '#2e7d32' front",
	  "set label \"$p->[1]\" at $t, graph 1.015 $p->[2] tc rgb '#2e7d32' font ',9'";
}
my @keys = (map { sprintf("NaN with boxes fs solid lc rgb '#%06x' title '%s'", $colour{$_}, $_) }
	  sort keys %sessions);
my %state_title = (pause => 'node stopped (SIGSTOP)', kill9 => 'node killed (kill -9)',
	wipe => 'node wiped', quarantine => 'restart quarantine',
	crash => 'server crash-restart (a backend SIGKILLed)');
push @keys, map { sprintf("NaN with boxes fs solid lc rgb '#%06x' title '%s'", $state{$_}, $state_title{$_}) }
  grep { $used{$_} } qw(pause kill9 wipe quarantine crash);
push @keys, map {
	my ($how, $s) = split /_/;
	sprintf("NaN with boxes fs %s lc rgb '#%06x' title '%s'", $how eq 'cut' ? 'solid' : 'pattern 4',
		$net_colour{$s}, $how eq 'cut' ? "cut from $s (" . ($s eq 'east' ? 'above' : 'below') . ' the lane)'
		: "replies to $s dropped");
} grep { $used{$_} } qw(cut_east cut_west mute_east mute_west);
my $overlap_style = sub {
	my ($kind) = @_;
	return sprintf("fs transparent solid 0.4 border lc rgb '#%06x' lw 2 lc rgb '#%06x'",
		$overlap_colour{$kind}, $overlap_colour{$kind});
};
my @overlap_plots = map {
	"'$work/$_.dat' using 1:2:3:4 with boxxyerror " . $overlap_style->($_) . ' notitle'
} qw(overlaps overlaps_clock overlaps_wipe);
push @keys, map { 'NaN with boxes ' . $overlap_style->($_) . " title '$overlap_title{$_}'" }
  grep { $overlap_seen{$_} } qw(overlaps overlaps_clock overlaps_wipe);

my $title = sprintf('feature soak, seed %s: %.0f to %.0f s of %.0f; in the whole run %d grants, overlaps of two holders: %d'
	  . ' (and %d after a clock jump, %d after a wipe without the quarantine)',
	$run->{seed}, $from, $to, $end, $rep->{grants}, scalar @{ $rep->{overlaps} },
	scalar @{ $rep->{overlaps_clock} }, scalar @{ $rep->{overlaps_wipe} });
open my $gp, '>', "$work/plot.gp" or die $!;
print $gp <<"GP";
set terminal pngcairo size 1600,780 font 'Sans,10'
set output '$out'
set title '$title'
set xrange [$from:$to]
set yrange [$ymin:$ymax]
set ytics ($ytics) nomirror
set xtics 1 nomirror
set mxtics 2
set grid xtics lc rgb '#eeeeee'
set xlabel "seconds from the start of the soak (the host clock)\\nserver faults: wk = wake-up worker SIGTERMed, ka = keep-alive worker SIGTERMed, rl = reload, rl* = reload with a changed setting, term = holder terminated, crash = a backend SIGKILLed"
set key outside bottom center horizontal maxrows 2 reverse Left width 1
set border 3
@{[ join("\n", @arrows) ]}
plot '$work/leases.dat' using 1:2:3:4:5 with boxxyerror fs solid 1.0 border lc rgb 'white' lc rgb variable notitle, \\
     '$work/states.dat' using 1:2:3:4:5 with boxxyerror fs solid 1.0 noborder lc rgb variable notitle, \\
     '$work/cuts.dat' using 1:2:3:4:5 with boxxyerror fs solid 1.0 noborder lc rgb variable notitle, \\
     '$work/mutes.dat' using 1:2:3:4:5 with boxxyerror fs pattern 4 noborder lc rgb variable notitle, \\
     @{[ join(", \\\n     ", @overlap_plots) ]}, \\
     '$work/marks.dat' using 1:2:3 with labels point pt 9 ps 1.2 lc rgb '#000000' offset 0,0.8 font ',9' notitle, \\
     @{[ join(", \\\n     ", @keys) ]}
GP
close $gp;
PERL

gnuplot "$work/plot.gp"
echo "soak-picture: wrote $out"
