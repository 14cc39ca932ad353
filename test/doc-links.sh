#!/usr/bin/env bash
# The links of the documentation's pages resolve: README.md,
# ARCHITECTURE.md, doc/*.md and bench/*.md.  For every link or image,
# [text](target) or ![text](target), outside code blocks and code spans,
# whose target is not a URL (a scheme such as https:):
#   - its file, relative to the page, exists (a file or a directory);
#   - its #anchor, when it has one, names a heading of that file (or of the
#     page itself, for a target that is only #anchor), spelt as GitHub
#     spells heading anchors: lower case, punctuation other than - and _
#     dropped, spaces turned into -, and -1, -2 ... added to repeats.
# Prints every broken link with its page and line, and exits non-zero if
# there is one.
#
#   bash test/doc-links.sh [FILE...]     default: the pages above
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
if [ $# -eq 0 ]; then
	set -- README.md ARCHITECTURE.md doc/*.md bench/*.md
fi

perl -e '
use strict;
use warnings;
use File::Basename qw(dirname);
use File::Spec;

my %anchors;    # file => { anchor => 1 }

# the lines of FILE outside fenced code blocks, as [number, text]
sub prose_lines
{
	my ($file) = @_;
	open my $fh, "<", $file or die "$file: $!\n";
	my ($fence, @out);
	my $n = 0;
	while (my $line = <$fh>)
	{
		$n++;
		chomp $line;
		if ($line =~ /^\s*(```+|~~~+)/)
		{
			if (!defined $fence) { $fence = $1; }
			elsif (substr($1, 0, 1) eq substr($fence, 0, 1) && length($1) >= length($fence)) { undef $fence; }
			next;
		}
		next if defined $fence;
		push @out, [ $n, $line ];
	}
	close $fh;
	return @out;
}

sub anchors_of
{
	my ($file) = @_;
	return $anchors{$file} if $anchors{$file};
	my (%seen, %a);
	for my $l (prose_lines($file))
	{
		my $text = $l->[1];
		while ($text =~ /<a\s+(?:name|id)="([^"]+)"/g) { $a{$1} = 1; }
		next unless $text =~ /^#{1,6}\s+(.*?)\s*#*\s*$/;
		my $h = $1;
		$h =~ s/!?\[([^\]]*)\]\([^)]*\)/$1/g;    # links: their text
		$h =~ s/<[^>]+>//g;                      # HTML tags
		$h = lc $h;
		$h =~ s/[^\w\- ]//g;                     # punctuation, backticks
		$h =~ s/ /-/g;
		my $id = $h;
		$id = $h . "-" . $seen{$h} if $seen{$h};
		$seen{$h}++;
		$a{$id} = 1;
	}
	return $anchors{$file} = \%a;
}

my $broken = 0;
my $links = 0;
for my $page (@ARGV)
{
	# paragraphs: runs of lines without a blank one (a link may span lines)
	my @paras;
	my $last = -1;
	for my $l (prose_lines($page))
	{
		my ($n, $line) = @$l;
		if ($line =~ /^\s*$/) { $last = -1; next; }
		if ($last == $n - 1 && @paras) { $paras[-1][1] .= "\n" . $line; }
		else { push @paras, [ $n, $line ]; }
		$last = $n;
	}
	for my $para (@paras)
	{
		my ($first, $text) = @$para;
		# code spans, kept as blanks so that line numbers stay right
		$text =~ s/(`+)(.*?)\1/my $c = "$1$2$1"; $c =~ s![^\n]! !g; $c/gse;
		while ($text =~ /!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+"[^"]*")?\s*\)/g)
		{
			my $target = $1;
			my $n = $first + (substr($text, 0, $-[0]) =~ tr/\n//);
			next if $target =~ /^[a-z][a-z0-9+.-]*:/i;    # a URL
			$links++;
			my ($path, $anchor) = $target =~ /^([^#]*)(?:#(.*))?$/;
			my $file = $page;
			if ($path ne "")
			{
				$file = File::Spec->catfile(dirname($page), $path);
				if (!-e $file)
				{
					print STDERR "$page:$n: $target: no such file ($file)\n";
					$broken++;
					next;
				}
			}
			next unless defined $anchor && $anchor ne "";
			if (-d $file || $file !~ /\.md$/)
			{
				print STDERR "$page:$n: $target: an anchor into a file that is not a page\n";
				$broken++;
				next;
			}
			if (!anchors_of($file)->{$anchor})
			{
				print STDERR "$page:$n: $target: $file has no heading with the anchor #$anchor\n";
				$broken++;
			}
		}
	}
}
printf "doc links: %d links on %d pages, %d broken\n", $links, scalar(@ARGV), $broken;
exit($broken ? 1 : 0);
' "$@"
