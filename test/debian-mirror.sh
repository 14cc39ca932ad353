#!/usr/bin/env bash
# Print the Debian archive address this machine's apt sources use (its
# "deb" entries in /etc/apt/sources.list and /etc/apt/sources.list.d/, in
# one-line or deb822 form; the security archive is skipped), without a
# trailing slash.  The scripts that add a suite (bookworm-backports for
# Valkey, deb-src of trixie and sid for test/build-pg.sh) take the address
# from here, so no archive host is written into this repository.
#
#   mirror=$(bash test/debian-mirror.sh)
#
# DEBIAN_MIRROR, when set, is printed instead.  Fails with a message on
# stderr when no Debian archive is configured.
set -euo pipefail

if [ -n "${DEBIAN_MIRROR:-}" ]; then
	echo "${DEBIAN_MIRROR%/}"
	exit 0
fi

# "deb URI suite..." lines, and the URIs of deb822 stanzas whose Types
# include deb; a URI counts when it ends in /debian (not -security, not
# another vendor's repository).
files=()
for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
	[ -f "$f" ] && files+=("$f")
done
m=
[ ${#files[@]} -gt 0 ] && m=$(awk '
	FNR == 1 { types = "" }
	/^[[:space:]]*#/ { next }
	FILENAME ~ /\.sources$/ {
		if ($0 ~ /^[[:space:]]*$/) { types = ""; next }
		if ($1 == "Types:") { types = $0; next }
		if ($1 == "URIs:" && types ~ /[[:space:]]deb([[:space:]]|$)/)
			for (i = 2; i <= NF; i++) print $i
		next
	}
	$1 == "deb" {
		for (i = 2; i <= NF; i++) if ($i !~ /^\[/ && $i !~ /\]$/ && $i ~ /:\/\//) { print $i; break }
	}' "${files[@]}" |
	sed 's:/*$::' | grep -E '^(https?|file)://.*/debian$' | head -n1 || true)
if [ -z "$m" ]; then
	echo "debian-mirror: no Debian archive (a \"deb\" source ending in /debian) in /etc/apt/sources.list" \
		"or /etc/apt/sources.list.d/; set DEBIAN_MIRROR to the archive's address" >&2
	exit 1
fi
echo "$m"
