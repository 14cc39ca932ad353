#!/usr/bin/env bash
# Make a private, relocated copy of a PostgreSQL installation, so that a
# build of redlock can be installed and tested without touching the one
# other runs on this machine use.
#
#   pg_config=$(bash test/pg-copy.sh SOURCE-PG_CONFIG DIR)
#
# Copies bindir's parent (bin, lib), sharedir and the include directories
# under DIR, keeping their absolute paths (DIR/usr/lib/postgresql/15/...);
# PostgreSQL finds its files relative to its binaries, so the copy's
# pg_config reports the copy's directories.  Prints the copy's pg_config on
# stdout.  Safe to run again: what is already copied is kept.
set -euo pipefail

src=${1:-}
dir=${2:-}
if [ -z "$src" ] || [ -z "$dir" ]; then
	echo "usage: bash test/pg-copy.sh SOURCE-PG_CONFIG DIR" >&2
	exit 2
fi
[ -x "$src" ] || { echo "pg-copy: $src is not an executable pg_config" >&2; exit 2; }
src=$(cd "$(dirname "$src")" && pwd)/$(basename "$src")
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
chmod 755 "$dir"

src_bindir=$("$src" --bindir)
# bindir's parent must be PostgreSQL's own directory (Debian's
# /usr/lib/postgresql/15, a --prefix of its own), never a shared prefix
case "$(dirname "$src_bindir")" in
/ | /usr | /usr/local | /opt | /bin | /sbin)
	echo "pg-copy: $src's bindir ($src_bindir) is in a shared prefix, which this script does not copy" >&2
	exit 1 ;;
esac
for d in "$(dirname "$src_bindir")" "$("$src" --sharedir)" \
	"$("$src" --pkgincludedir)" "$("$src" --includedir-server)" \
	"$("$src" --pkglibdir)"; do
	[ -d "$d" ] || continue
	[ -d "$dir$d" ] && continue
	mkdir -p "$dir$(dirname "$d")"
	cp -a "$d" "$dir$(dirname "$d")/"
done
copy=$dir$src_bindir/$(basename "$src")
[ "$("$copy" --bindir)" = "$dir$src_bindir" ] ||
	{ echo "pg-copy: the copy of pg_config does not relocate ($("$copy" --bindir))" >&2; exit 1; }
echo "$copy"
