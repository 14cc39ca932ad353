#!/usr/bin/env bash
# Run every ```sql block of README.md, in order, in one psql session, and fail
# on the first error.  Blocks with a tag after "sql" are skipped: ```sql norun
# (syntax, or your own server's configuration) and ```sql install (run on a
# fresh cluster by test/readme-install.sh).  A ```text block that follows a
# sql block (only blank lines between them) is that block's output, as psql
# prints it (aligned, with -q; trailing blanks aside): the output must be
# exactly that.  Also: the README's list of TAP tests is test/t's.  Runs
# against the cluster that PGHOST, PGPORT and PGUSER name
# (test/pg-cluster.sh), whose redlock.nodes points at live nodes.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d /tmp/readme-examples.XXXXXX)
trap 'rm -rf "$work"' EXIT

# shellcheck source=test/lib.sh
. "$top/test/lib.sh"

# $work/all.sql: the blocks, each after a marker line; $work/out.N: the
# output block that follows sql block N, if any
blocks=$(readme_blocks "$top/README.md" sql "$work")
[ "$blocks" -gt 0 ] || { echo "no sql blocks found in README.md" >&2; exit 1; }
for ((n = 1; n <= blocks; n++)); do
	printf '\\echo -- README sql block %d\n' "$n"
	cat "$work/block.$n"
done > "$work/all.sql"
outputs=$(find "$work" -name 'out.*' | wc -l)

dropdb --if-exists readme_examples
createdb readme_examples
psql -X -q -d readme_examples -c 'CREATE EXTENSION redlock'
psql -X -q -d readme_examples -v ON_ERROR_STOP=1 -P pager=off -f "$work/all.sql" > "$work/actual"
dropdb readme_examples

# split the output at the markers: $work/actual.N is what block N printed
awk -v dir="$work" '
	/^-- README sql block [0-9]+$/ { n = $5; printf "" > (dir "/actual." n); next }
	n { print > (dir "/actual." n) }
' "$work/actual"

failed=0
# the Tests section lists every TAP test of test/t, and no other
listed=$(grep -o '^  - `[0-9][0-9][0-9]_[a-z0-9_]*\.pl`' "$top/README.md" | tr -d ' `-' | sort)
present=$(cd "$top/test/t" && ls -- *.pl | sort)
if [ "$listed" != "$present" ]; then
	echo "README's list of TAP tests differs from test/t (--- README, +++ test/t):" >&2
	diff -u <(echo "$listed") <(echo "$present") >&2 || true
	failed=1
fi
for exp in "$work"/out.*; do
	[ -e "$exp" ] || continue
	n=${exp##*.}
	# psql pads its columns and ends a result with an empty line; the README
	# block need not
	if ! diff -u <(sed -e 's/[ \t]*$//' -e '$ { /^$/d; }' "$exp") \
		<(sed -e 's/[ \t]*$//' -e '$ { /^$/d; }' "$work/actual.$n" 2>/dev/null) \
		> "$work/diff.$n"; then
		echo "README sql block $n: the output differs from the README's (--- README, +++ psql):" >&2
		cat "$work/diff.$n" >&2
		failed=1
	fi
done
[ "$failed" -eq 0 ] || exit 1
echo "README examples: $blocks sql blocks ran without error, $outputs of them printed what the README shows"
