# The SQL blocks of README.md, for tests that must run exactly what the
# README shows (so that the README cannot drift from what is tested).
package ReadmeSQL;

use strict;
use warnings FATAL => 'all';

use FindBin;

# README.md: $ENV{REDLOCK_README} (set by test/run-tests.sh), else the one
# above test/t or t/
sub path
{
	return $ENV{REDLOCK_README} if $ENV{REDLOCK_README};
	for my $p ("$FindBin::RealBin/../../README.md", "$FindBin::RealBin/../README.md")
	{
		return $p if -f $p;
	}
	die "README.md not found; set REDLOCK_README";
}

# A page of doc/ (e.g. "testing.md"): beside the README that path() finds
# (test/run-tests.sh copies doc/ next to the README it names)
sub doc_path
{
	my ($name) = @_;
	my $dir = path();
	$dir =~ s{[^/]*$}{};
	my $p = "${dir}doc/$name";
	die "$p not found" unless -f $p;
	return $p;
}

# The plain ```sql blocks (not ```sql norun or the like) of the README
# section whose heading is $heading, up to the next heading of the same or a
# higher level, in order.  Dies when the section or its blocks are missing.
sub blocks
{
	my ($heading) = @_;
	my $file = path();
	open my $fh, '<', $file or die "$file: $!";
	my ($level, $in_block, @blocks);
	while (my $line = <$fh>)
	{
		if (!$in_block && $line =~ /^(#+)\s+(.*?)\s*$/)
		{
			last if defined $level && length($1) <= $level;
			$level = length($1) if $2 eq $heading;
			next;
		}
		next unless defined $level;
		if ($line =~ /^```/)
		{
			if ($in_block) { $in_block = 0; }
			elsif ($line =~ /^```sql\s*$/) { $in_block = 1; push @blocks, ''; }
			else { $in_block = -1; }    # another kind of block: skipped
			next;
		}
		$blocks[-1] .= $line if $in_block && $in_block > 0;
	}
	close $fh;
	die "$file: no section \"$heading\"" unless defined $level;
	die "$file: no ```sql block in section \"$heading\"" unless @blocks;
	return @blocks;
}

1;
