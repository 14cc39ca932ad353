#!/usr/bin/env bash
# The redlock demo: installs what it needs, builds and installs the
# extension, starts a throwaway PostgreSQL cluster and 5 Redis nodes on
# loopback, shows leases and fencing tokens, then replays the pause scenario
# with two sessions and shows the stale write refused.  Stops everything.
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"

echo "== installing dependencies and building redlock"
bash test/install-deps.sh
export PATH="/usr/lib/postgresql/15/bin:$PATH"
make -s clean
make -s
make -s install

work=$(mktemp -d /tmp/redlock-demo.XXXXXX)
trap 'bash "$top/test/redis-nodes.sh" stop "$work/redis"; rm -rf "$work"' EXIT
bash test/redis-nodes.sh start "$work/redis" 17379 5
nodes="127.0.0.1:17379,127.0.0.1:17380,127.0.0.1:17381,127.0.0.1:17382,127.0.0.1:17383"
echo "== 5 Redis masters: $nodes"

chmod 777 "$work"
pg_virtualenv -t -o "redlock.nodes=$nodes" \
	env DEMO_WORK="$work" bash "$top/test/demo-sessions.sh" "$work"
