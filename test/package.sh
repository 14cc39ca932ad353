#!/usr/bin/env bash
# The Debian package, end to end (run by CI, as root, on Debian 12):
#   1. copies the checkout (its tracked and new files, as they are in the work
#      tree) to a temporary directory, so the build never writes into the
#      repository, and checks afterwards that the repository is unchanged;
#   2. runs the README's package block (```sh package: two commands) in
#      that copy: its first command installs the build dependencies
#      debian/control declares (apt-get build-dep) and builds with
#      `dpkg-buildpackage -us -uc -b` (postgresql-MAJOR-redlock for each
#      PostgreSQL major pg_buildext finds); lintian must report no error on
#      what it built; its second command installs postgresql-15-redlock
#      (apt-get install ../...deb);
#   3. checks the installed files against the packages' checksums
#      (dpkg --verify), and runs the pg_regress suite as installcheck against
#      them, with 5 Redis nodes (debian/tests/installcheck;
#      REDLOCK_REDIS_SERVER picks the server binary);
#   4. removes them (dpkg -r) and checks that no file any of them installed
#      is left.
# Files of a `make install` by hand that the packages would overwrite are
# moved aside first and put back at the end, so the machine is left as it
# was (run-tests.sh and demo.sh install into private copies of PostgreSQL,
# never into its own directories).
#
#   bash test/package.sh [--keep DIR]     --keep: copy the built .deb files to DIR
set -euo pipefail

keep=
case "${1:-}" in
--keep) keep=${2:?--keep needs a directory} ;;
"") ;;
*) echo "usage: bash test/package.sh [--keep DIR]" >&2; exit 2 ;;
esac
[ "$(id -u)" -eq 0 ] || { echo "package: run as root (it installs and removes packages)" >&2; exit 1; }

top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
log() { printf '== %s\n' "$*"; }

work=$(mktemp -d /tmp/redlock-package.XXXXXX)
chmod 755 "$work"
installed=()
aside=$work/aside
cleanup() {
	local p f
	for p in "${installed[@]}"; do
		dpkg -r "$p" > /dev/null 2>&1 || true
	done
	# put back what a `make install` had there
	if [ -d "$aside" ]; then
		(cd "$aside" && find . -type f -o -type l) | while read -r f; do
			mkdir -p "$(dirname "/${f#./}")"
			mv -f "$aside/${f#./}" "/${f#./}"
		done
	fi
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---------------------------------------------------------------- 1. copy
status_before=$(git status --porcelain --ignored 2>&1)
log "copying the checkout to $work/src"
mkdir -p "$work/src"
git ls-files -z --cached --others --exclude-standard |
	while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
	tar -c --null -T - -f - | tar -x -C "$work/src" -f -

# ---------------------------------------------------------------- 2. build
# shellcheck source=test/lib.sh
. test/lib.sh
mkdir -p "$work/readme"
n=$(readme_blocks README.md 'sh package' "$work/readme")
[ "$n" -eq 1 ] || { echo "expected exactly one \`\`\`sh package block, found $n" >&2; exit 1; }
# its commands: the lines that are neither comments nor blank
grep -Ev '^[[:space:]]*(#|$)' "$work/readme/block.1" > "$work/block" || true
mapfile -t block < "$work/block"
[ ${#block[@]} -eq 2 ] || { echo "package: the README's package block has ${#block[@]} commands, not 2" >&2; exit 1; }
cd "$work/src"
export DEBIAN_FRONTEND=noninteractive
if ! dpkg-checkbuilddeps > /dev/null 2>&1 || ! command -v lintian > /dev/null; then
	apt-get update -qq	# the block's apt-get build-dep needs a fresh index
	apt-get install -y -qq --no-install-recommends lintian > /dev/null
fi
log "pg_buildext: debian/control is up to date with debian/control.in"
pg_buildext checkcontrol
log "the README's first command: ${block[0]}"
t0=$(date +%s)
bash -euo pipefail -c "${block[0]}" > "$work/build.log" 2>&1 || { tail -n 40 "$work/build.log"; exit 1; }
dpkg-checkbuilddeps	# what debian/control declares was all the build needed
log "built in $(($(date +%s) - t0)) s: $(cd "$work" && echo *.deb)"
log "lintian"
lintian --fail-on error "$work"/redlock_*.changes
debs=("$work"/postgresql-*-redlock_*.deb)
[ -e "${debs[0]}" ] || { echo "package: no postgresql-*-redlock .deb was built" >&2; exit 1; }
if [ -n "$keep" ]; then mkdir -p "$keep"; cp "${debs[@]}" "$keep/"; fi
cd "$top"
status_after=$(git status --porcelain --ignored 2>&1)
if [ "$status_before" != "$status_after" ]; then
	echo "package: building changed the repository:" >&2
	diff <(echo "$status_before") <(echo "$status_after") >&2 || true
	exit 1
fi

# ---------------------------------------------------------------- 3. install
for deb in "${debs[@]}"; do
	p=$(dpkg-deb -f "$deb" Package)
	if dpkg-query -W -f '${db:Status-Abbrev}' "$p" 2>/dev/null | grep -q '^ii'; then
		echo "package: $p is installed already: remove it first (dpkg -r $p)" >&2
		exit 1
	fi
	# files of a `make install` in the package's places: moved aside
	dpkg-deb --fsys-tarfile "$deb" | tar -t | sed -n 's:^\./::p' | while read -r f; do
		if [ -f "/$f" ] || [ -L "/$f" ]; then
			mkdir -p "$(dirname "$aside/$f")"
			mv "/$f" "$aside/$f"
		fi
	done
	installed+=("$p")
done
log "the README's second command: ${block[1]}"
(cd "$work/src" && bash -euo pipefail -c "${block[1]}") > "$work/install.log" 2>&1 ||
	{ cat "$work/install.log"; exit 1; }
for p in "${installed[@]}"; do
	if ! dpkg-query -W -f '${db:Status-Abbrev}' "$p" 2>/dev/null | grep -q '^ii'; then
		echo "package: the README's second command did not install $p" >&2
		exit 1
	fi
	dpkg --verify "$p" || { echo "package: the installed files of $p differ from the package" >&2; exit 1; }
	dpkg -L "$p" > "$work/$p.files"
	log "$p $(dpkg-query -W -f '${Version}' "$p"): $(wc -l < "$work/$p.files") paths, e.g. $(grep -m1 '\.so$' "$work/$p.files")"
done

log "installcheck: the pg_regress suite against the installed files"
(cd "$work/src" && bash debian/tests/installcheck)

# ---------------------------------------------------------------- 4. remove
for p in "${installed[@]}"; do
	log "dpkg -r $p"
	dpkg -r "$p" > /dev/null
	left=()
	while read -r f; do
		# directories are shared with PostgreSQL's own packages
		if [ -e "$f" ] && [ ! -d "$f" ]; then left+=("$f"); fi
	done < "$work/$p.files"
	if [ ${#left[@]} -gt 0 ]; then
		echo "package: dpkg -r $p left files behind: ${left[*]}" >&2
		exit 1
	fi
	if dpkg-query -W -f '${db:Status-Abbrev}' "$p" 2>/dev/null | grep -qv '^un\|^$'; then
		echo "package: $p is still known to dpkg: $(dpkg-query -W -f '${db:Status-Abbrev}' "$p")" >&2
		exit 1
	fi
	log "$p removed, none of its $(wc -l < "$work/$p.files") paths left but directories"
done
installed=()
log "package: built, lintian clean, installed, installcheck passed, removed without a trace"
