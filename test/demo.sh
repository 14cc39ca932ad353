#!/usr/bin/env bash
# The redlock demo: installs what it needs, builds and installs the
# extension, starts a throwaway PostgreSQL cluster and 5 Redis nodes on
# loopback, shows leases and fencing tokens, then replays the pause scenario
# with two sessions and shows the stale write refused.  Stops everything.
#
#   bash test/demo.sh [--pg-config PATH] [--redis-server PATH]
#
# --pg-config: the PostgreSQL installation to use (default: Debian 12's
# PostgreSQL 15, installed first by test/install-deps.sh).  The extension
# is built against, and installed into, a private copy of it
# (test/pg-copy.sh) in the demo's own directory, removed at the end: the
# installation itself is never written to.  Two runs in one clone take
# turns for the build (a lock on the clone's Makefile, flock).
# --redis-server: the server binary the nodes run (default redis-server),
# e.g. /usr/bin/valkey-server.  The Redis nodes
# run on ports that were free, each checked to be served by the process
# started for it; the cluster listens only on a unix socket of its own.
set -euo pipefail

usage() {
	echo "usage: bash test/demo.sh [--pg-config PATH] [--redis-server PATH]" >&2
	exit 2
}
pg_config=
redis_server=
while [ $# -gt 0 ]; do
	case "$1" in
	--pg-config) [ $# -ge 2 ] || usage; pg_config=$2; shift 2 ;;
	--pg-config=*) pg_config=${1#*=}; shift ;;
	--redis-server) [ $# -ge 2 ] || usage; redis_server=$2; shift 2 ;;
	--redis-server=*) redis_server=${1#*=}; shift ;;
	*) usage ;;
	esac
done

top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"

echo "== installing dependencies and building redlock"
if [ -z "$pg_config" ]; then
	bash test/install-deps.sh
	pg_config=/usr/lib/postgresql/15/bin/pg_config
else
	bash test/install-deps.sh --without-postgresql
fi
[ -x "$pg_config" ] || { echo "demo: $pg_config is not an executable pg_config" >&2; exit 2; }
if [ -n "$redis_server" ]; then
	REDLOCK_REDIS_SERVER=$(command -v "$redis_server") ||
		{ echo "demo: $redis_server is not an executable" >&2; exit 2; }
	export REDLOCK_REDIS_SERVER
fi
work=$(mktemp -d /tmp/redlock-demo.XXXXXX)
chmod 755 "$work"
cleanup() {
	bash "$top/test/pg-cluster.sh" stop "$work/pg" || true
	bash "$top/test/redis-nodes.sh" stop "$work/redis" || true
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# a private copy of the installation: the extension is installed there
PG_CONFIG=$(bash test/pg-copy.sh "$pg_config" "$work/pg-install" | tail -n 1)
export PG_CONFIG
bindir=$("$PG_CONFIG" --bindir)
export PATH="$bindir:$PATH"
exec {clone_lock}< "$top/Makefile"
if ! flock -n "$clone_lock"; then
	echo "== waiting for another run in this clone (it holds a lock on $top/Makefile)"
	flock "$clone_lock"
fi
make -s clean PG_CONFIG="$PG_CONFIG"
make -s PG_CONFIG="$PG_CONFIG"
make -s install PG_CONFIG="$PG_CONFIG"
flock -u "$clone_lock"
exec {clone_lock}<&-

nodes=$(bash test/redis-nodes.sh start "$work/redis" 5)
echo "== 5 Redis masters: $nodes, running $(bash test/redis-nodes.sh version)"
bash test/pg-cluster.sh start "$work/pg" "redlock.nodes=$nodes" > /dev/null
# shellcheck disable=SC1091
. "$work/pg/env"
echo "== a throwaway cluster: $("$PG_CONFIG" --version), socket in $PGHOST"

DEMO_WORK="$work" bash "$top/test/demo-sessions.sh" "$work"
