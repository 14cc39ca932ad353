#!/usr/bin/env bash
# Build a PostgreSQL major from Debian's own source package into a prefix, on
# Debian 12, so the tests can run against releases newer than Debian 12's 15.
#
#   bash test/build-pg.sh MAJOR [PREFIX]        e.g.  bash test/build-pg.sh 18
#
# Prints the path of the pg_config to use on stdout (and nothing else there;
# progress goes to stderr), so a caller can write
#   pg_config=$(bash test/build-pg.sh 18)
#
# MAJOR 15 is Debian 12's own release: nothing is built, the packaged
# /usr/lib/postgresql/15/bin/pg_config is printed (test/install-deps.sh
# installs it).  Other majors are built from the source package
# postgresql-MAJOR of trixie (and its security updates) or sid (today 17
# and 18):
#   1. /etc/apt/sources.list.d/redlock-src.list gets deb-src lines only (no
#      "deb" line: no binary package of another release can be installed),
#      on the archives this machine's apt sources use (test/debian-mirror.sh:
#      no archive address is written here; none configured is an error);
#   2. the build tools are installed from Debian 12, only those missing
#      (nothing is upgraded; never `apt-get build-dep` against another suite);
#   3. `apt-get source --download-only` of the newest version the index
#      lists; when the archive does not serve its files (an index can name
#      a version whose files are gone), the next one, newest first, until
#      one downloads; then the upstream tree is unpacked without Debian's
#      patches and without running Debian's packaging;
#   4. configure in a separate build directory, make -j2 world-bin,
#      install-world-bin, plus the PGXS test tooling (pg_regress,
#      pg_isolation_regress, the TAP perl modules).
# Idempotent: if PREFIX already holds a pg_config of MAJOR it is printed at
# once; an interrupted build resumes where it stopped.
#
# Environment: PREFIX (default /tmp/pgMAJOR), SRC_DIR (default /tmp/src:
# sources, build directories and logs), JOBS (default 2, at most 2),
# CASSERT=1 to configure with --enable-cassert (a distinct build directory),
# DEBIAN_MIRROR and DEBIAN_SECURITY_MIRROR (default: the archives of the
# machine's apt sources), DOWNLOAD_ONLY=1 to stop after step 3 (prints the
# .dsc downloaded).
# Needs root (or sudo) for steps 1-2 only.
set -euo pipefail

major=${1:-}
case "$major" in
	'' | *[!0-9]*) echo "usage: $0 MAJOR [PREFIX]   (e.g. 17, 18)" >&2; exit 2 ;;
esac
PREFIX=${2:-${PREFIX:-/tmp/pg$major}}
SRC_DIR=${SRC_DIR:-/tmp/src}
JOBS=${JOBS:-2}
[ "$JOBS" -gt 2 ] && JOBS=2
pkg=postgresql-$major

log() { printf '[build-pg %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "$*"; exit 1; }

# a pg_config of the right major: print it and stop
have() {
	local pgc=$1
	[ -x "$pgc" ] || return 1
	case "$("$pgc" --version 2>/dev/null)" in
		"PostgreSQL $major."* | "PostgreSQL $major"[!0-9]*) ;;
		*) return 1 ;;
	esac
	local pgxs testdir
	pgxs=$("$pgc" --pgxs)
	testdir=$(dirname "$pgxs")/../test
	for f in "$pgxs" "$testdir/regress/pg_regress" "$testdir/isolation/pg_isolation_regress" \
		"$testdir/perl/PostgreSQL/Test/Cluster.pm"; do
		[ -e "$f" ] || return 1
	done
	return 0
}

if [ "$major" = 15 ]; then
	pgc=/usr/lib/postgresql/15/bin/pg_config
	have "$pgc" || die "PostgreSQL 15 is Debian 12's own: install postgresql-15 and postgresql-server-dev-15 (bash test/install-deps.sh)"
	echo "$pgc"
	exit 0
fi

if have "$PREFIX/bin/pg_config"; then
	log "$("$PREFIX/bin/pg_config" --version) already in $PREFIX"
	echo "$PREFIX/bin/pg_config"
	exit 0
fi
[ -e "$PREFIX/bin/pg_config" ] && die "$PREFIX holds another or an incomplete PostgreSQL: choose another PREFIX or remove it"

SUDO=
if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; fi

# ---------------------------------------------------------------- 1. deb-src
here=$(cd "$(dirname "$0")" && pwd)
MIRROR=$(bash "$here/debian-mirror.sh") || die "no Debian archive to take the source of $pkg from"
SECURITY=$(bash "$here/debian-mirror.sh" --security 2>/dev/null) || SECURITY=
LIST=/etc/apt/sources.list.d/redlock-src.list
KEY=/usr/share/keyrings/debian-archive-keyring.gpg
want_list="# Source-only entries (deb-src, never deb): used to apt-get source newer
# postgresql-NN / hiredis from newer suites and build them into /tmp prefixes.
deb-src [signed-by=$KEY] $MIRROR trixie main"
if [ -n "$SECURITY" ]; then
	want_list+="
deb-src [signed-by=$KEY] $SECURITY trixie-security main"
fi
want_list+="
deb-src [signed-by=$KEY] $MIRROR sid main"
need_update=0
if [ ! -f "$LIST" ] || [ "$(cat "$LIST")" != "$want_list" ]; then
	log "writing $LIST (deb-src only, mirror $MIRROR)"
	printf '%s\n' "$want_list" | $SUDO tee "$LIST" > /dev/null
	need_update=1
fi
if [ "$need_update" = 1 ] || ! apt-cache showsrc "$pkg" 2>/dev/null | grep -q '^Version:'; then
	log "apt-get update"
	$SUDO apt-get update -qq
fi

# ---------------------------------------------------------------- 2. tools
deps="build-essential bison flex libreadline-dev zlib1g-dev libssl-dev libipc-run-perl pkg-config dpkg-dev"
missing=
for d in $deps; do
	dpkg-query -W -f='${Status}' "$d" 2>/dev/null | grep -q 'install ok installed' || missing="$missing $d"
done
if [ -n "$missing" ]; then
	log "installing Debian 12 packages:$missing"
	$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >&2
fi

# ---------------------------------------------------------------- 3. source
mkdir -p "$SRC_DIR"
SRC_DIR=$(cd "$SRC_DIR" && pwd)
exec 9> "$SRC_DIR/.build-pg-$major.lock"
flock 9 # one build of a major at a time in SRC_DIR
# a build that finished while we waited for the lock
if have "$PREFIX/bin/pg_config"; then echo "$PREFIX/bin/pg_config"; exit 0; fi

cd "$SRC_DIR"
# every version the index lists, newest first (dpkg's ordering)
versions=$(apt-cache showsrc "$pkg" 2>/dev/null | awk '/^Version:/ {print $2}' | sort -u)
versions=$(for v in $versions; do
	n=0
	for w in $versions; do dpkg --compare-versions "$w" gt "$v" && n=$((n + 1)); done
	echo "$n $v"
done | sort -n | cut -d' ' -f2)
[ -n "$versions" ] || die "no source package $pkg in the deb-src suites of $LIST (Debian offers other majors only in some suites)"
ver=
for v in $versions; do
	if [ -f "${pkg}_${v#*:}.dsc" ]; then ver=$v; break; fi
	log "apt-get source --download-only $pkg=$v"
	if apt-get source -qq --download-only "$pkg=$v" >&2; then ver=$v; break; fi
	log "$pkg $v is listed but its files did not download; trying the next version"
done
[ -n "$ver" ] || die "none of the versions of $pkg the index lists downloads ($(echo $versions)): the archive does not serve their files"
upver=${ver#*:}
upver=${upver%-*}
dsc="${pkg}_${ver#*:}.dsc"
tree="$SRC_DIR/$pkg-$upver"
if [ "${DOWNLOAD_ONLY:-0}" = 1 ]; then
	log "downloaded $pkg $ver (DOWNLOAD_ONLY: not building)"
	echo "$SRC_DIR/$dsc"
	exit 0
fi
if [ ! -f "$tree/configure" ]; then
	rm -rf "$tree"
	log "unpacking the upstream tree (without Debian's patches) into $tree"
	dpkg-source -q --skip-patches -x "$dsc" "$tree" >&2
fi

# ---------------------------------------------------------------- 4. build
flavour=
conf_extra=()
if [ "${CASSERT:-0}" = 1 ]; then flavour=-cassert; conf_extra+=(--enable-cassert); fi
build="$SRC_DIR/build-$pkg-$upver$flavour"
LOG="$SRC_DIR/build-$pkg-$upver$flavour.log"
# a build directory configured for another prefix starts over
if [ -f "$build/src/Makefile.global" ] && ! grep -qxF "prefix := $PREFIX" "$build/src/Makefile.global"; then
	log "$build was configured for another prefix: starting it over"
	rm -rf "$build"
fi
[ -f "$tree/config.status" ] && die "$tree is configured in place; a separate build directory needs a clean tree (remove $tree)"
mkdir -p "$build"
log "building $pkg $ver into $PREFIX with make -j$JOBS (log: $LOG)"
t0=$(date +%s)
(
	cd "$build"
	if [ ! -f config.status ]; then
		"$tree/configure" --prefix="$PREFIX" --enable-tap-tests --enable-debug \
			--with-openssl --without-icu --without-readline "${conf_extra[@]}"
	fi
	make -j"$JOBS" world-bin
	make install-world-bin
	# normally part of install-world-bin; explicit so the PGXS test tooling
	# is in the prefix whatever the release does
	make -C src/test/regress install
	make -C src/test/isolation install
	make -C src/test/perl install
) >> "$LOG" 2>&1 || { tail -n 30 "$LOG" >&2; die "build FAILED, see $LOG"; }
have "$PREFIX/bin/pg_config" || die "build finished but $PREFIX lacks pg_config, pgxs or the test tooling"
log "$("$PREFIX/bin/pg_config" --version) installed in $PREFIX in $(($(date +%s) - t0))s"
echo "$PREFIX/bin/pg_config"
