#!/usr/bin/env bash
# Run every ```sql block of README.md, in order, in one psql session, and fail
# on the first error.  Blocks marked ```sql norun are skipped.  Runs inside
# pg_virtualenv (PG* set) with redlock.nodes pointing at live nodes.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
out=$(mktemp /tmp/readme-examples.XXXXXX.sql)
trap 'rm -f "$out"' EXIT

awk '
	/^```sql norun/ { skip = 1; next }
	/^```sql/       { inblock = 1; n++; printf "\\echo -- README sql block %d\n", n; next }
	/^```/          { inblock = 0; skip = 0; next }
	inblock && !skip { print }
' "$top/README.md" > "$out"

blocks=$(grep -c '^\\echo -- README sql block' "$out")
[ "$blocks" -gt 0 ] || { echo "no sql blocks found in README.md" >&2; exit 1; }

createdb readme_examples
psql -X -q -d readme_examples -c 'CREATE EXTENSION redlock'
psql -X -q -d readme_examples -v ON_ERROR_STOP=1 -f "$out" > /dev/null
dropdb readme_examples
echo "README examples: $blocks sql blocks ran without error"
