#!/usr/bin/env bash
# Install what building and testing redlock needs, from Debian's packages.
# Safe to run again: it installs only what is missing.
#
#   install-deps.sh                       PostgreSQL 15 from Debian, and the rest
#   install-deps.sh --without-postgresql  the rest only (for a PostgreSQL
#                                         installation of your own, see
#                                         run-tests.sh --pg-config)
#   install-deps.sh --valkey              also Valkey 8 (valkey-server) from
#                                         Debian 12's bookworm-backports: adds
#                                         that suite's "deb" line, with the
#                                         archive address of the machine's apt
#                                         sources (test/debian-mirror.sh), and
#                                         installs only valkey-server from it
#                                         (apt-get install -t bookworm-backports)
# On a system without dpkg it installs nothing and only checks the commands.
set -euo pipefail

with_pg=1
valkey=
for arg in "$@"; do
	case "$arg" in
	--without-postgresql) with_pg= ;;
	--valkey) valkey=1 ;;
	*) echo "usage: install-deps.sh [--without-postgresql] [--valkey]" >&2; exit 2 ;;
	esac
done

pkgs=(build-essential libhiredis-dev libc-ares-dev libssl-dev redis-server
      redis-tools libipc-run-perl procps util-linux sudo faketime nftables)
if [ -n "$with_pg" ]; then
	pkgs+=(postgresql-15 postgresql-server-dev-15 postgresql-common)
fi

if ! command -v dpkg-query > /dev/null; then
	cmds=(cc make redis-server redis-cli perl prove runuser)
	[ -n "$valkey" ] && cmds+=(valkey-server)
	for c in "${cmds[@]}"; do
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

if [ -n "$valkey" ] && ! dpkg-query -W -f='${Status}' valkey-server 2>/dev/null | grep -q 'install ok installed'; then
	if [ "$(id -u)" -ne 0 ]; then
		echo "install-deps: need root to install valkey-server" >&2
		exit 1
	fi
	mirror=$(bash "$(dirname "$0")/debian-mirror.sh")
	list=/etc/apt/sources.list.d/redlock-backports.list
	echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror bookworm-backports main" > "$list"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
	chmod +x /usr/sbin/policy-rc.d
	trap 'rm -f /usr/sbin/policy-rc.d' EXIT
	# backports are never preferred by apt: -t takes valkey-server (and what
	# it needs that only backports has) from there, everything else stays
	apt-get install -y -qq --no-install-recommends -t bookworm-backports valkey-server >/dev/null
fi
