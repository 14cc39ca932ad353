#!/usr/bin/env bash
# Install what building and testing redlock needs, from Debian's packages.
# Safe to run again: it installs only what is missing.
#
#   install-deps.sh                       PostgreSQL 15 from Debian, and the rest
#   install-deps.sh --without-postgresql  the rest only (for a PostgreSQL
#                                         installation of your own, see
#                                         run-tests.sh --pg-config)
# On a system without dpkg it installs nothing and only checks the commands.
set -euo pipefail

pkgs=(build-essential libhiredis-dev libc-ares-dev libssl-dev redis-server
      redis-tools libipc-run-perl procps util-linux sudo faketime)
if [ "${1:-}" != --without-postgresql ]; then
	pkgs+=(postgresql-15 postgresql-server-dev-15 postgresql-common)
fi

if ! command -v dpkg-query > /dev/null; then
	for c in cc make redis-server redis-cli perl prove runuser; do
		command -v "$c" > /dev/null || { echo "install-deps: not Debian, and $c is missing" >&2; exit 1; }
	done
	perl -MIPC::Run -e 1 2> /dev/null || { echo "install-deps: perl module IPC::Run is missing" >&2; exit 1; }
	exit 0
fi

missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	if [ "$(id -u)" -ne 0 ]; then
		echo "install-deps: need root to install: ${missing[*]}" >&2
		exit 1
	fi
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	# do not let the packages start system-wide servers we do not use
	printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
	chmod +x /usr/sbin/policy-rc.d
	trap 'rm -f /usr/sbin/policy-rc.d' EXIT
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
