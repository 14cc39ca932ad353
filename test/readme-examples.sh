#!/usr/bin/env bash
# Run every ```sql block of README.md, in order, in one psql session, and fail
# on the first error.  Blocks with a tag after "sql" are skipped: ```sql norun
# (syntax, or your own server's configuration) and ```sql install (run on a
# fresh cluster by test/readme-install.sh).  Runs against the cluster that
# PGHOST, PGPORT and PGUSER name (test/pg-cluster.sh), whose redlock.nodes
# points at live nodes.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
out=$(mktemp /tmp/readme-examples.XXXXXX.sql)
trap 'rm -f "$out"' EXIT

awk '
	/^```sql[ \t]*$/ { inblock = 1; n++; printf "\\echo -- README sql block %d\n", n; next }
	/^```/           { inblock = 0; next }
	inblock          { print }
' "$top/README.md" > "$out"

blocks=$(grep -c '^\\echo -- README sql block' "$out" || true)
[ "$blocks" -gt 0 ] || { echo "no sql blocks found in README.md" >&2; exit 1; }

dropdb --if-exists readme_examples
createdb readme_examples
psql -X -q -d readme_examples -c 'CREATE EXTENSION redlock'
psql -X -q -d readme_examples -v ON_ERROR_STOP=1 -f "$out" > /dev/null
dropdb readme_examples
echo "README examples: $blocks sql blocks ran without error"
