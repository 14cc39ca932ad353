#!/usr/bin/env bash
# META.json (the PGXN distribution metadata) agrees with redlock.control and
# the rest of the tree: the name is the extension's; version and the
# extension's provided version are default_version as a semantic version
# (PGXN requires three numbers: '1.1' is 1.1.0); the abstract is the control
# file's comment; the license is the one LICENSE states; the files it names
# exist; the PostgreSQL prerequisite is the oldest major debian/pgversions
# builds for; debian/changelog's version is default_version.  The fields
# PGXN's meta spec 1.0.0 requires are present.  Needs only perl (JSON::PP).
#
#   bash test/meta-json.sh
set -euo pipefail
cd "$(dirname "$0")/.."

perl -MJSON::PP -e '
	use strict;
	use warnings;
	my @fail;
	sub check { my ($ok, $what) = @_; push @fail, $what unless $ok; }
	sub slurp { open my $f, "<", $_[0] or die "$_[0]: $!\n"; local $/; my $s = <$f>; close $f; $s }

	my $meta = eval { JSON::PP->new->decode(slurp("META.json")) }
	  or die "META.json is not valid JSON: $@";
	my $control = slurp("redlock.control");
	my %c;
	$c{$1} = $2 while $control =~ /^\s*(\w+)\s*=\s*\x27((?:[^\x27]|\x27\x27)*)\x27/mg;
	my $ext = "redlock";
	my $semver = $c{default_version};
	$semver .= ".0" while ($semver =~ tr/.//) < 2;

	for my $f (qw(name abstract version maintainer license provides meta-spec)) {
		check(defined $meta->{$f}, "META.json has no \"$f\" (required by the meta spec)");
	}
	check(($meta->{"meta-spec"}{version} // "") eq "1.0.0", "meta-spec version is 1.0.0");
	check(($meta->{name} // "") eq $ext, "name is $ext");
	check(($meta->{version} // "") eq $semver,
		"version " . ($meta->{version} // "none") . " is default_version $c{default_version} ($semver)");
	check(($meta->{abstract} // "") eq $c{comment}, "abstract is the comment of redlock.control");
	my $p = $meta->{provides}{$ext} // {};
	check(keys %{ $meta->{provides} // {} } == 1 && %$p, "provides the extension $ext, and only it");
	check(($p->{version} // "") eq $semver, "provides.$ext.version is $semver");
	check(($p->{abstract} // "") eq $c{comment}, "provides.$ext.abstract is the comment of redlock.control");
	for my $k (qw(file docfile)) {
		check(defined $p->{$k} && -f $p->{$k}, "provides.$ext.$k names a file of the tree");
	}
	check(($p->{file} // "") eq "sql/$ext--1.0.sql", "provides.$ext.file is the base install script");
	check(($meta->{license} // "") eq "postgresql" && slurp("LICENSE") =~ /PostgreSQL License/,
		"license is postgresql, as LICENSE states");
	my ($min) = slurp("debian/pgversions") =~ /^(\d+)\+?\s*$/m;
	check(defined $min && ($meta->{prereqs}{runtime}{requires}{PostgreSQL} // "") eq "$min.0.0",
		"prereqs: PostgreSQL " . ($min // "?") . ".0.0, the oldest major of debian/pgversions");
	my ($deb) = slurp("debian/changelog") =~ /^\S+ \(([^)]+)\)/;
	check(($deb // "") eq $c{default_version}, "debian/changelog version " . ($deb // "none") . " is default_version");
	check(($c{module_pathname} // "") eq "\$libdir/$ext", "redlock.control loads \$libdir/$ext");

	if (@fail) { print "not ok: $_\n" for @fail; exit 1; }
	print "ok: META.json $meta->{name} $meta->{version} agrees with redlock.control (default_version $c{default_version})\n";
'
