#!/usr/bin/env bash
# Run every ```sql block of README.md and of each page doc/*.md, and fail
# on the first error.  Each page runs in a database of its own, created with
# the extension for it and dropped afterwards; its blocks run in order in
# one psql session, so a block may use what an earlier block of the same
# page made, never what another page made.
#
# Which blocks run: every block that opens with exactly ```sql.  A block
# opened with a word after "sql" does not run here, and the word says why:
#   ```sql norun     syntax, or the configuration of your own server
#   ```sql install   the README's install block, run on a fresh cluster by
#                    test/readme-install.sh
# A ```text block that follows a sql block (only blank lines between them)
# is that block's output, as psql prints it (aligned, with -q; trailing
# blanks aside): the output must be exactly that.
#
# Also: doc/testing.md's list of TAP tests is test/t's.  Runs against the
# cluster that PGHOST, PGPORT and PGUSER name (test/pg-cluster.sh), whose
# redlock.nodes points at live nodes.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d /tmp/readme-examples.XXXXXX)
trap 'rm -rf "$work"' EXIT

# shellcheck source=test/lib.sh
. "$top/test/lib.sh"

failed=0
total_blocks=0
total_outputs=0
pages=0

# run_page FILE DB: runs FILE's sql blocks in a fresh database DB, and
# compares what they print with the text blocks after them
run_page() {
	local file=$1 db=$2 name dir blocks outputs n exp
	name=${file#"$top"/}
	dir=$work/$db
	mkdir -p "$dir"
	# $dir/block.N: the blocks; $dir/out.N: the output block after block N
	blocks=$(readme_blocks "$file" sql "$dir")
	[ "$blocks" -gt 0 ] || return 0
	for ((n = 1; n <= blocks; n++)); do
		printf '\\echo -- sql block %d\n' "$n"
		cat "$dir/block.$n"
	done > "$dir/all.sql"
	outputs=$(find "$dir" -name 'out.*' | wc -l)

	dropdb --if-exists "$db"
	createdb "$db"
	psql -X -q -d "$db" -c 'CREATE EXTENSION redlock'
	if ! psql -X -q -d "$db" -v ON_ERROR_STOP=1 -P pager=off -f "$dir/all.sql" > "$dir/actual"; then
		echo "$name: a sql block failed; the last block begun:" >&2
		grep '^-- sql block' "$dir/actual" | tail -n 1 >&2 || true
		dropdb --if-exists "$db"
		failed=1
		return 0
	fi
	dropdb "$db"

	# split the output at the markers: $dir/actual.N is what block N printed
	awk -v dir="$dir" '
		/^-- sql block [0-9]+$/ { n = $4; printf "" > (dir "/actual." n); next }
		n { print > (dir "/actual." n) }
	' "$dir/actual"
	for exp in "$dir"/out.*; do
		[ -e "$exp" ] || continue
		n=${exp##*.}
		# psql pads its columns and ends a result with an empty line; the
		# page's block need not
		if ! diff -u <(sed -e 's/[ \t]*$//' -e '$ { /^$/d; }' "$exp") \
			<(sed -e 's/[ \t]*$//' -e '$ { /^$/d; }' "$dir/actual.$n" 2>/dev/null) \
			> "$dir/diff.$n"; then
			echo "$name, sql block $n: the output differs from the page's (--- page, +++ psql):" >&2
			cat "$dir/diff.$n" >&2
			failed=1
		fi
	done
	echo "   $name: $blocks sql blocks, $outputs of them with their output shown"
	total_blocks=$((total_blocks + blocks))
	total_outputs=$((total_outputs + outputs))
	pages=$((pages + 1))
}

run_page "$top/README.md" readme_examples
for page in "$top"/doc/*.md; do
	[ -e "$page" ] || continue
	run_page "$page" "doc_examples_$(basename "$page" .md)"
done
[ "$total_blocks" -gt 0 ] || { echo "no sql blocks found in README.md or doc/*.md" >&2; exit 1; }

# doc/testing.md lists every TAP test of test/t, and no other
listed=$(grep -o '^  - `[0-9][0-9][0-9]_[a-z0-9_]*\.pl`' "$top/doc/testing.md" | tr -d ' `-' | sort)
present=$(cd "$top/test/t" && ls -- *.pl | sort)
if [ "$listed" != "$present" ]; then
	echo "doc/testing.md's list of TAP tests differs from test/t (--- doc/testing.md, +++ test/t):" >&2
	diff -u <(echo "$listed") <(echo "$present") >&2 || true
	failed=1
fi
[ "$failed" -eq 0 ] || exit 1
echo "README and doc/ examples: $total_blocks sql blocks on $pages pages ran without error, $total_outputs of them printed what the page shows"
