#!/usr/bin/env bash
# Print the Debian archive address this machine's apt sources use (its
# "deb" entries in /etc/apt/sources.list and /etc/apt/sources.list.d/, in
# one-line or deb822 form; the security archive is skipped), without a
# trailing slash.  The scripts that add a suite (bookworm-backports for
# Valkey, deb-src of trixie and sid for test/build-pg.sh) take the address
# from here, so no archive host is written into this repository.
#
#   mirror=$(bash test/debian-mirror.sh)
#   security=$(bash test/debian-mirror.sh --security)   the security archive
#
# DEBIAN_MIRROR (DEBIAN_SECURITY_MIRROR with --security), when set, is
# printed instead.  Fails with a message on stderr when no such archive is
# configured.
set -euo pipefail

suffix=debian
env_value=${DEBIAN_MIRROR:-}
case "${1:-}" in
--security) suffix=debian-security; env_value=${DEBIAN_SECURITY_MIRROR:-} ;;
"") ;;
*) echo "usage: bash test/debian-mirror.sh [--security]" >&2; exit 2 ;;
esac
if [ -n "$env_value" ]; then
	echo "${env_value%/}"
	exit 0
fi

# "deb URI suite..." lines, and the URIs of deb822 stanzas whose Types
# include deb; a URI counts when it ends in /debian (or /debian-security
# with --security; never another vendor's repository).
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
	sed 's:/*$::' | grep -E "^(https?|file)://.*/$suffix\$" | head -n1 || true)
if [ -z "$m" ]; then
	echo "debian-mirror: no Debian archive (a \"deb\" source ending in /$suffix) in /etc/apt/sources.list" \
		"or /etc/apt/sources.list.d/; set DEBIAN_MIRROR (DEBIAN_SECURITY_MIRROR) to its address" >&2
	exit 1
fi
echo "$m"
