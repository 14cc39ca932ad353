#!/usr/bin/env bash
# The README's install block (```sql install) must work as printed on a
# fresh server: start a cluster without redlock loaded or configured (from
# $PG_CONFIG, with the extension installed there), run the block verbatim
# with ON_ERROR_STOP and nothing before it, and check in a new session that
# redlock.nodes is the value the block set and that the role the block
# grants redlock_user to is a member of it and sees that value.  The block's
# node addresses must not be contacted: nothing here takes a lease, and the
# server log must not show redlock trying to reach a node.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d /tmp/readme-install.XXXXXX)
chmod 755 "$work"
trap 'bash "$top/test/pg-cluster.sh" stop "$work/pg"; rm -rf "$work"' EXIT

# shellcheck source=test/lib.sh
. "$top/test/lib.sh"
n=$(readme_blocks "$top/README.md" 'sql install' "$work")
[ "$n" -eq 1 ] || { echo "expected exactly one \`\`\`sql install block, found $n" >&2; exit 1; }
mv "$work/block.1" "$work/install.sql"

nodes=$(sed -n "s/^ALTER SYSTEM SET redlock\.nodes = '\([^']*\)';.*/\1/p" "$work/install.sql")
[ -n "$nodes" ] || { echo "the install block sets no redlock.nodes" >&2; exit 1; }
role=$(sed -n 's/^GRANT redlock_user TO \([a-z_][a-z0-9_]*\);.*/\1/p' "$work/install.sql")
[ -n "$role" ] || { echo "the install block grants redlock_user to no role" >&2; exit 1; }

bash "$top/test/pg-cluster.sh" start "$work/pg" > /dev/null
# shellcheck disable=SC1091
. "$work/pg/env"
echo "-- the install block, as printed in README.md:"
sed 's/^/   /' "$work/install.sql"
psql -X -v ON_ERROR_STOP=1 -f "$work/install.sql"

# a new session sees the new value and what the block created
got=$(psql -X -At -c 'SHOW redlock.nodes')
[ "$got" = "$nodes" ] || { echo "SHOW redlock.nodes in a new session: '$got', expected '$nodes'" >&2; exit 1; }
got=$(psql -X -At -c "SELECT extversion FROM pg_extension WHERE extname = 'redlock'")
[ -n "$got" ] || { echo "the block did not create the extension" >&2; exit 1; }
got=$(psql -X -At -c "SELECT pg_has_role('$role', 'redlock_user', 'MEMBER')")
[ "$got" = t ] || { echo "$role is not a member of redlock_user" >&2; exit 1; }
got=$(psql -X -At -U "$role" -c 'SHOW redlock.nodes')
[ "$got" = "$nodes" ] || { echo "SHOW redlock.nodes as $role: '$got', expected '$nodes'" >&2; exit 1; }

# a node that redlock tries to reach and cannot is logged ("Redis node
# ... stopped answering", or with redlock preloaded "... is failing"); none
# may be
if grep -E 'Redis node [^ ]+ (stopped|is answering|refused|is failing|is healthy)|RL00[0-9]' "$work/pg/log/postgresql.log"; then
	echo "redlock contacted the block's nodes" >&2
	exit 1
fi
echo "README install block: ran as printed, nothing before it; a new session of $role shows redlock.nodes = '$nodes'"
