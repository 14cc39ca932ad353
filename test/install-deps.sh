#!/usr/bin/env bash
# Install what building and testing redlock needs, from Debian's packages.
# Safe to run again: it installs only what is missing.
set -euo pipefail

pkgs=(build-essential postgresql-15 postgresql-server-dev-15 postgresql-common
      libhiredis-dev libc-ares-dev libssl-dev redis-server redis-tools libipc-run-perl procps sudo)
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
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
	rm -f /usr/sbin/policy-rc.d
fi
