#!/usr/bin/env bash
# The layer check: src/ is built in layers that point one way.  This script
# fails when a file uses a name from a higher layer, when files use each
# other in a circle, or when a private header is used outside its family
# (X_internal.h belongs to the files X*.c of its folder and layer, or to the
# whole folder X/).  The layers are declared below, in LAYERS, and nowhere
# else.
#
#   bash test/check-layers.sh [--pg-config PATH] [--quiet]
#
# --pg-config  the PostgreSQL whose headers the objects are built with
#              (default: Debian 12's PostgreSQL 15,
#              /usr/lib/postgresql/15/bin/pg_config)
# --quiet      print only what is wrong and the counts, not every use
#
# What "uses" means:
#   - functions and variables: the compiler's own output.  Every object of
#     OBJS (the Makefile's) is built with -O0 in a temporary copy of the
#     tree (nothing is installed); nm tells which file defines a symbol and
#     which files leave it undefined, i.e. use it.
#   - types, macros, enum values and inline functions: universal-ctags lists
#     what each of our headers defines; a file (.c or .h) uses such a name
#     when the name appears in its code (comments and strings left out, not
#     after "." or "->") and the header is among the headers it includes,
#     directly or not.  A header included but none of whose names (nor
#     functions it declares) is used counts as a use of it ("#include").
# For circles, a header goes with the .c file of the same name in the same
# folder (guc.h with guc.c: "guc.c+h"); a header without one stands alone,
# and so does a family's private header (what lock_table_internal.h takes
# from lock_table.h, which it extends, leads nowhere back).  A .c file and
# its header must be in the same layer.  A use is upward when the definer's
# layer is above the user's; uses within one layer are fine as long as they
# make no circle.
#
# Output: every use, one line per user and definer ("user -> definer:
# names"; a file's use of its own header is left out), then the layer
# table's problems, the circles (each with one way round it and every use
# inside it), the upward uses and the private header uses, and a last line
# with the counts.
#
# Needs no server and no Redis; about 30 s on a busy 2-core machine, nearly
# all of it the build.  Missing tools (universal-ctags, a C compiler, the
# headers of hiredis, c-ares, OpenSSL and PostgreSQL 15) are installed from
# Debian's packages when run as root, as test/install-deps.sh does.  Exits
# 0 when the tree keeps its layers, 1 when it does not, 2 when it cannot
# tell (usage, tools, build).
set -euo pipefail

# ---------------------------------------------------------------------------
# The layers, lowest first.  A layer may use its own files and those of the
# layers below it; a lower layer that must tell a higher one something calls
# a hook the higher one registered.  Each line: layer name, then the files
# (paths relative to src/; * and ? match within one folder, so "net/*" is a
# whole folder).  Every .c and .h under src/ must belong to exactly one
# layer; a line may go on in the next one when that starts with white space.
# ---------------------------------------------------------------------------
LAYERS='
# settings, and pure logic without I/O: the redlock.* settings and their
# check hooks, the quorum rules, the limits and SQLSTATEs, the wait events
base      redlock.h guc.h guc.c guc_net.c node_list.c quorum.h quorum.c
          wait_events.h wait_events.c
# the network: connections, TLS, resolving, pipelines, rounds
net       nodes.h node_internal.h node_conn.c node_sock.c node_tls.c
          node_resolve.c node_pipeline.c node_round.c node_wait.c
          node_server.c node_report.c node_script.c
# the Redlock protocol and its scripts
protocol  protocol.h protocol_internal.h protocol.c protocol_extend.c
          protocol_handoff.c protocol_release.c
# shared state: the lock table, the handoff, the statistics
shared    lock_table.h lock_table_internal.h lock_table.c lock_table_keep.c
          lock_table_index.c handoff.h handoff.c handoff_remote.c stats.h stats.c
          restart_memory.h restart_memory.c
# a backend'"'"'s leases and their lifecycle
lease     registry.h registry.c lifecycle.h lifecycle.c lease_wait.h
          lease_wait.c
# the SQL surface and the workers
sql       redlock.c lease_sql.h lease_sql.c locks_view.c health.c
          fence_internal.h fence.c fence_refuse.c worker.h worker.c wakeup.c
'

usage() {
	echo "usage: bash test/check-layers.sh [--pg-config PATH] [--quiet]" >&2
	exit 2
}

pg_config=
quiet=0
while [ $# -gt 0 ]; do
	case "$1" in
	--pg-config) [ $# -ge 2 ] || usage; pg_config=$2; shift 2 ;;
	--pg-config=*) pg_config=${1#*=}; shift ;;
	--quiet) quiet=1; shift ;;
	*) usage ;;
	esac
done

top=$(cd "$(dirname "$0")/.." && pwd)

# --- tools -----------------------------------------------------------------
missing=()
command -v make > /dev/null && command -v cc > /dev/null && command -v nm > /dev/null ||
	missing+=(build-essential)
ctags --version 2> /dev/null | grep -q 'Universal Ctags' || missing+=(universal-ctags)
command -v perl > /dev/null || missing+=(perl)
if [ -z "$pg_config" ]; then
	pg_config=/usr/lib/postgresql/15/bin/pg_config
	[ -x "$pg_config" ] || missing+=(postgresql-server-dev-15)
fi
if command -v dpkg-query > /dev/null; then
	for p in libhiredis-dev libc-ares-dev libssl-dev; do
		dpkg-query -W -f='${Status}' "$p" 2> /dev/null | grep -q 'install ok installed' || missing+=("$p")
	done
fi
if [ ${#missing[@]} -gt 0 ]; then
	if [ "$(id -u)" -ne 0 ] || ! command -v apt-get > /dev/null; then
		echo "check-layers: missing, and not root on Debian to install: ${missing[*]}" >&2
		exit 2
	fi
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${missing[@]}" > /dev/null
fi
[ -x "$pg_config" ] || { echo "check-layers: no pg_config at $pg_config" >&2; exit 2; }

# --- build the objects in a copy of the tree ---------------------------------
tmp=$(mktemp -d "${TMPDIR:-/tmp}/check-layers.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/tree"
cp -a "$top/Makefile" "$top/src" "$tmp/tree/"
cp -a "$top"/*.control "$tmp/tree/" 2> /dev/null || true
# OBJS as the Makefile says, not as guessed from the files
# shellcheck disable=SC2016  # make expands $(OBJS), not the shell
printf 'rl-check-layers-objs:\n\t@echo $(OBJS)\n' > "$tmp/objs.mk"
objs=$(make -s -C "$tmp/tree" -f Makefile -f "$tmp/objs.mk" PG_CONFIG="$pg_config" rl-check-layers-objs)
[ -n "$objs" ] || { echo "check-layers: the Makefile lists no OBJS" >&2; exit 2; }
jobs=$(nproc 2> /dev/null || echo 2)
[ "$jobs" -le 4 ] || jobs=4
# shellcheck disable=SC2086
if ! make -s -C "$tmp/tree" -j"$jobs" PG_CONFIG="$pg_config" COPT='-O0 -g0' $objs > "$tmp/build.log" 2>&1; then
	tail -n 40 "$tmp/build.log" >&2
	echo "check-layers: building the objects failed (see above)" >&2
	exit 2
fi

# --- what each header defines, and what each file defines itself -------------
(cd "$tmp/tree" && find src -name '*.[ch]' | sort > "$tmp/files" &&
	ctags -x --languages=C --langmap=C:.c.h --kinds-C=defgstuvpx \
		--_xformat='%N	%K	%F	%n' -L "$tmp/files" > "$tmp/tags")

# --- the analysis ------------------------------------------------------------
cat > "$tmp/check.pl" << 'PERL'
use strict;
use warnings;

my ($root, $tagfile, $listfile, $quiet, $layers, @objs) = @ARGV;
my $bad = 0;

sub slurp
{
	my ($f) = @_;
	open(my $fh, '<', $f) or die "check-layers: cannot read $f: $!\n";
	local $/;
	my $s = <$fh>;
	close $fh;
	return $s;
}

sub dir_of { my ($f) = @_; return $f =~ m{^(.*)/[^/]*$} ? $1 : '.'; }

# files: every .c and .h under src/; the .c files checked are OBJS'
my @files = grep { length } split /\n/, slurp($listfile);
my %is_file = map { $_ => 1 } @files;
my @cfiles = map { (my $c = $_) =~ s/\.o$/.c/; $c } @objs;
for my $c (@cfiles)
{
	die "check-layers: $c is in OBJS but not under src/\n" unless $is_file{$c};
}
my %built = map { $_ => 1 } @cfiles;
my @hfiles = grep { /\.h$/ } @files;
my @checked = sort(@cfiles, @hfiles);

# --- the layer table
my (@layer_names, %layer_rank, @rules);
my $cur;
for my $line (split /\n/, $layers)
{
	next if $line =~ /^\s*(#|$)/;
	my @w = split ' ', $line;
	if ($line !~ /^\s/)
	{
		$cur = shift @w;
		die "check-layers: layer $cur declared twice\n" if exists $layer_rank{$cur};
		$layer_rank{$cur} = scalar @layer_names;
		push @layer_names, $cur;
	}
	die "check-layers: the layer table starts with a continuation\n" unless defined $cur;
	for my $pat (@w)
	{
		(my $re = quotemeta("src/$pat")) =~ s/\\\*/[^\/]*/g;
		$re =~ s/\\\?/[^\/]/g;
		push @rules, { layer => $cur, pat => $pat, re => qr/^$re$/, hits => 0 };
	}
}

my %layer_of;
my @table_problems;
for my $f (@checked)
{
	my @m = grep { $f =~ $_->{re} } @rules;
	$_->{hits}++ for @m;
	my %ls = map { $_->{layer} => 1 } @m;
	if (!@m)
	{
		push @table_problems, "$f belongs to no layer: declare it in LAYERS (test/check-layers.sh)";
	}
	elsif (keys %ls > 1)
	{
		push @table_problems, "$f is declared in more than one layer: " . join(', ', sort keys %ls);
	}
	else
	{
		$layer_of{$f} = $m[0]{layer};
	}
}
for my $r (@rules)
{
	push @table_problems, "LAYERS names $r->{pat} (layer $r->{layer}), which matches no file"
	  unless $r->{hits};
}

# --- units: foo.c with foo.h of the same folder
my %unit;
for my $f (@checked)
{
	# foo.h goes with foo.c
	(my $stem = $f) =~ s/\.[ch]$//;
	$unit{$f} = ($built{"$stem.c"} && $is_file{"$stem.h"}) ? $stem : $f;
}
for my $f (@checked)
{
	next unless $f =~ /\.h$/ && $unit{$f} ne $f;
	my $c = $unit{$f} . '.c';
	next unless defined $layer_of{$f} && defined $layer_of{$c};
	push @table_problems, "$c [$layer_of{$c}] and $f [$layer_of{$f}] go together by name "
	  . "but are declared in different layers: rename the header or move the .c"
	  if $layer_of{$f} ne $layer_of{$c};
}

sub unit_name
{
	my ($u) = @_;
	return $u =~ /\.[ch]$/ ? $u : "$u.c+h";
}

# --- uses: $use{user}{definer}{name} = 1
my %use;

# functions and variables, from the objects
my (%defined_in, %undef_in);
for my $o (@objs)
{
	(my $c = $o) =~ s/\.o$/.c/;
	open(my $nm, '-|', 'nm', '-P', "$root/$o") or die "check-layers: nm $o: $!\n";
	while (my $l = <$nm>)
	{
		my ($name, $type) = split ' ', $l;
		next unless defined $type;
		if ($type eq 'U')
		{
			$undef_in{$c}{$name} = 1;
		}
		elsif ($type =~ /^[TDBRCGSVW]$/)
		{
			push @{ $defined_in{$name} }, $c;
		}
	}
	close $nm or die "check-layers: nm $o failed\n";
}
for my $c (@cfiles)
{
	for my $name (keys %{ $undef_in{$c} || {} })
	{
		my $d = $defined_in{$name} or next;	# PostgreSQL's, a library's
		$use{$c}{ $d->[0] }{$name} = 1 if $d->[0] ne $c;
	}
}

# what the headers define (types, macros, enum values, inline functions),
# and what every file defines itself
my (%hdefs, %own, %declared);
for my $l (split /\n/, slurp($tagfile))
{
	my ($name, $kind, $file, $line) = split /\t/, $l;
	next unless defined $line && $is_file{$file};
	if ($kind eq 'prototype' || $kind eq 'externvar')
	{
		# the use of a function or variable goes to the .c file that
		# defines it (nm); naming it only makes its header a used one
		$declared{$name}{$file} = 1 if $file =~ /\.h$/;
		next;
	}
	$own{$file}{$name} = 1;
	next unless $file =~ /\.h$/;
	if ($kind eq 'macro')
	{
		# include guards define nothing anyone uses
		my @lines = split /\n/, slurp("$root/$file");
		next if ($lines[ $line - 1 ] // '') =~ /^\s*#\s*define\s+\w+\s*$/ && $name =~ /_H$/;
	}
	$hdefs{$name}{$file} = 1;
}

# the code of a file, without comments, strings and #include lines
my (%code, %includes);
for my $f (@checked)
{
	my $s = slurp("$root/$f");
	my @inc;
	while ($s =~ /^[ \t]*#[ \t]*include[ \t]*["<]([^">]+)[">]/mg)
	{
		my $name = $1;
		for my $cand (dir_of($f) . "/$name", "src/$name")
		{
			(my $n = $cand) =~ s{/\./}{/}g;
			1 while $n =~ s{[^/]+/\.\./}{};
			if ($is_file{$n}) { push @inc, $n; last; }
		}
	}
	$includes{$f} = \@inc;
	$s =~ s{/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*'}{
		(my $m = $&) =~ tr/\n//cd; " $m" }gse;
	$s =~ s/^[ \t]*#[ \t]*include[^\n]*//mg;
	$code{$f} = $s;
}

sub closure
{
	my ($f) = @_;
	my %seen;
	my @todo = @{ $includes{$f} };
	while (@todo)
	{
		my $h = shift @todo;
		next if $seen{$h}++;
		push @todo, @{ $includes{$h} || [] };
	}
	delete $seen{$f};
	return \%seen;
}

for my $f (@checked)
{
	my $vis = closure($f);
	my %used_hdr;
	while ($code{$f} =~ /(\.|->)?\s*\b([A-Za-z_]\w*)/g)
	{
		next if defined $1;
		my $name = $2;
		if (my $decl = $declared{$name})
		{
			$vis->{$_} && ($used_hdr{$_} = 1) for keys %$decl;
		}
		my $d = $hdefs{$name} or next;
		next if $own{$f}{$name};
		for my $h (sort keys %$d)
		{
			next unless $vis->{$h};
			$use{$f}{$h}{$name} = 1;
			$used_hdr{$h} = 1;
			last;
		}
	}
	for my $h (@{ $includes{$f} })
	{
		$use{$f}{$h}{'#include'} = 1 unless $used_hdr{$h} || $h eq $f;
	}
}

# --- report every use
sub names { my ($u, $d) = @_; return join(' ', sort keys %{ $use{$u}{$d} }); }
my @edges;
for my $u (sort keys %use)
{
	for my $d (sort keys %{ $use{$u} })
	{
		push @edges, [ $u, $d ];
	}
}
unless ($quiet)
{
	print "== uses: user -> definer: names (functions and variables from nm,\n";
	print "   types and macros from the headers)\n";
	for my $e (@edges)
	{
		my ($u, $d) = @$e;
		next if $unit{$u} eq $unit{$d};
		printf "%s -> %s: %s\n", $u, $d, names($u, $d);
	}
	print "\n";
}

# --- the layer table's own problems
if (@table_problems)
{
	printf "== the layer table (%d problem%s)\n", scalar @table_problems, @table_problems == 1 ? '' : 's';
	print "$_\n" for @table_problems;
	print "\n";
	$bad += @table_problems;
}

# --- circles: strongly connected components of the unit graph
sub circles
{
	my ($code_only) = @_;
	my %g;
	for my $e (@edges)
	{
		my ($u, $d) = @$e;
		next if $unit{$u} eq $unit{$d};
		next if $code_only && ($u !~ /\.c$/ || $d !~ /\.c$/);
		# foo_internal.h extends foo.h: not a way back to foo.c
		next if $u =~ /^(.*)_internal\.h$/ && $d eq "$1.h";
		$g{ $unit{$u} }{ $unit{$d} } = 1;
	}
	my %units = map { $unit{$_} => 1 } @checked;
	my ($index, @stack, %on, %idx, %low, @sccs) = (0);
	my $strong;
	$strong = sub {
		my ($v) = @_;
		$idx{$v} = $low{$v} = $index++;
		push @stack, $v;
		$on{$v} = 1;
		for my $w (sort keys %{ $g{$v} || {} })
		{
			if (!exists $idx{$w})
			{
				$strong->($w);
				$low{$v} = $low{$w} if $low{$w} < $low{$v};
			}
			elsif ($on{$w})
			{
				$low{$v} = $idx{$w} if $idx{$w} < $low{$v};
			}
		}
		if ($low{$v} == $idx{$v})
		{
			my @c;
			while (1)
			{
				my $w = pop @stack;
				$on{$w} = 0;
				push @c, $w;
				last if $w eq $v;
			}
			push @sccs, [ sort @c ] if @c > 1;
		}
	};
	for my $v (sort keys %units)
	{
		$strong->($v) unless exists $idx{$v};
	}
	undef $strong;
	return (\%g, [ sort { @$b <=> @$a || $a->[0] cmp $b->[0] } @sccs ]);
}

# a shortest way round a circle, from its first unit
sub example_cycle
{
	my ($g, $scc) = @_;
	my %in = map { $_ => 1 } @$scc;
	my $start = $scc->[0];
	my %prev;
	my @q = ($start);
	my %seen;
	while (@q)
	{
		my $v = shift @q;
		for my $w (sort keys %{ $g->{$v} })
		{
			next unless $in{$w};
			if ($w eq $start)
			{
				my @path = ($v);
				unshift @path, $prev{ $path[0] } while exists $prev{ $path[0] };
				return join(' -> ', map { unit_name($_) } @path, $start);
			}
			next if $seen{$w}++;
			$prev{$w} = $v;
			push @q, $w;
		}
	}
	return '';
}

my ($g_all, $sccs) = circles(0);
my (undef, $sccs_code) = circles(1);
printf "== circles (%d): files that use each other, through some chain\n", scalar @$sccs;
my $n = 0;
for my $scc (@$sccs)
{
	$n++;
	my %in = map { $_ => 1 } @$scc;
	printf "circle %d (%d files): %s\n", $n, scalar @$scc, join(' ', map { unit_name($_) } @$scc);
	printf "  e.g. %s\n", example_cycle($g_all, $scc);
	for my $e (@edges)
	{
		my ($u, $d) = @$e;
		next unless $in{ $unit{$u} } && $in{ $unit{$d} } && $unit{$u} ne $unit{$d};
		next if $u =~ /^(.*)_internal\.h$/ && $d eq "$1.h";
		printf "  %s -> %s: %s\n", $u, $d, names($u, $d);
	}
}
printf "  (by functions and variables alone: %d circle%s%s)\n", scalar @$sccs_code,
  @$sccs_code == 1 ? '' : 's',
  join('', map { '; ' . join(' ', map { unit_name($_) } @$_) } @$sccs_code);
print "\n";
$bad += @$sccs;

# --- uses that go up a layer, and private headers used from outside:
# one line per user file and definer (a .c and its header together)
sub grouped
{
	my @g;
	my %at;
	for my $e (@_)
	{
		my ($u, $d) = @$e;
		my $k = "$u\0$unit{$d}";
		if (!exists $at{$k})
		{
			$at{$k} = scalar @g;
			push @g, [ $u, $unit{$d}, {} ];
		}
		$g[ $at{$k} ][2]{$_} = 1 for keys %{ $use{$u}{$d} };
	}
	return @g;
}
sub layer_of_unit
{
	my ($un) = @_;
	my %l = map { ($layer_of{$_} // '?') => 1 } grep { $unit{$_} eq $un } @checked;
	return join('/', sort keys %l);
}

my @up = grouped(grep {
	my ($u, $d) = @$_;
	defined $layer_of{$u} && defined $layer_of{$d}
	  && $layer_rank{ $layer_of{$d} } > $layer_rank{ $layer_of{$u} }
} @edges);
printf "== upward uses (%d): user [layer] -> definer [higher layer]: names\n", scalar @up;
for my $e (@up)
{
	my ($u, $du, $names) = @$e;
	printf "%s [%s] -> %s [%s]: %s\n", $u, $layer_of{$u}, unit_name($du), layer_of_unit($du),
	  join(' ', sort keys %$names);
}
print "\n";
$bad += @up;

# X_internal.h is private to the files X*.c of its folder (to every file of
# its folder when X is the folder's name, as in net/net_internal.h)
sub private_to
{
	my ($u, $d) = @_;
	my ($stem) = $d =~ m{([^/]+)_internal\.h$};
	my ($folder) = dir_of($d) =~ m{([^/]+)$};
	(my $base = $u) =~ s{^.*/}{};
	return 0 if dir_of($u) ne dir_of($d);
	return 0 if ($layer_of{$u} // '') ne ($layer_of{$d} // '');
	return $folder eq $stem || index($base, $stem) == 0;
}
# what each file takes from a private header: its types and macros, and
# the functions and variables only a private header declares
my %puse;
for my $e (@edges)
{
	my ($u, $d) = @$e;
	for my $name (keys %{ $use{$u}{$d} })
	{
		if ($d =~ /_internal\.h$/)
		{
			$puse{$u}{$d}{$name} = 1;
			next;
		}
		my @decl = keys %{ $declared{$name} || {} };
		next unless @decl && !grep { !/_internal\.h$/ } @decl;
		$puse{$u}{$_}{$name} = 1 for @decl;
	}
}
my @priv;
for my $u (sort keys %puse)
{
	for my $h (sort keys %{ $puse{$u} })
	{
		next if $unit{$u} eq $unit{$h} || private_to($u, $h);
		push @priv, [ $u, $h, $puse{$u}{$h} ];
	}
}
printf "== private headers used outside their family (%d): X_internal.h is for X*.c\n", scalar @priv;
print "   of its folder and layer (for every file of folder X/ in X/X_internal.h)\n";
for my $e (@priv)
{
	my ($u, $h, $names) = @$e;
	printf "%s [%s] -> %s [%s]: %s\n", $u, $layer_of{$u} // '?', $h, $layer_of{$h} // '?',
	  join(' ', sort keys %$names);
}
print "\n";
$bad += @priv;

printf "check-layers: %d circle%s, %d upward use%s, %d private header use%s, %d layer table problem%s: %s\n",
  scalar @$sccs, @$sccs == 1 ? '' : 's', scalar @up, @up == 1 ? '' : 's',
  scalar @priv, @priv == 1 ? '' : 's', scalar @table_problems, @table_problems == 1 ? '' : 's',
  $bad ? 'FAILED' : 'ok';
exit($bad ? 1 : 0);
PERL

# shellcheck disable=SC2086
cd "$tmp/tree" && perl "$tmp/check.pl" "$tmp/tree" "$tmp/tags" "$tmp/files" "$quiet" "$LAYERS" $objs
