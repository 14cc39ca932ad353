#!/usr/bin/env bash
# Run every redlock test: unit tests of the quorum logic, pg_regress suites
# and isolation specs against a throwaway cluster with 5 local Redis nodes,
# the examples and install block of README.md and doc/*.md, the links
# between those pages, and the process-level TAP tests (which start their
# own clusters and nodes).
#
#   bash test/run-tests.sh [--pg-config PATH] [--redis-server PATH] [--long] [--seconds N] [--only REGEX]
#
# --pg-config  the PostgreSQL installation to test with (default: Debian
#              12's PostgreSQL 15, /usr/lib/postgresql/15/bin/pg_config,
#              installed first by test/install-deps.sh); its
#              lib/pgxs/src/test must hold pg_regress, pg_isolation_regress
#              and the TAP perl modules.  The extension is built against,
#              and installed into, a private copy of it (test/pg-copy.sh)
#              in this run's own directory, removed at the end: the
#              installation itself is never written to, so runs of this
#              script and of test/demo.sh from several clones, and a
#              package installed or removed meanwhile, do not disturb each
#              other
# --redis-server  the server binary every Redis node of every suite runs
#              (default: Debian 12's redis-server), e.g. /usr/bin/valkey-server
#              (test/install-deps.sh --valkey installs Valkey 8); passed
#              down as REDLOCK_REDIS_SERVER to test/redis-nodes.sh and
#              test/perl/RedisNode.pm
# --long       the chaos soak runs 30 minutes (SOAK_MINUTES chooses another
#              length; the default run soaks for 40 s fenced + 40 s
#              control, see test/t/004_soak.pl)
# --seconds N  the soaks' faults go on for N seconds (SOAK_SECONDS: the
#              feature soak test/t/021_feature_soak.pl, default 60, and the
#              fenced phase of 004)
# --only       run only the suites whose name matches the extended regular
#              expression REGEX (e.g. --only 'pg_regress|TAP 011'); the
#              others are not counted.  For working on one part: CI and the
#              Quick start run everything.
#
# Every server it starts listens on ports that were free (Redis) or only on
# a unix socket in its own directory (PostgreSQL), and is stopped at the end.
# Two runs in one clone take turns where they share its files (the build,
# pg_regress's and the isolation tester's output): a lock on the clone's
# Makefile (flock), held from the build to the end of the README examples.
# Run as root (as CI runs it), the TAP tests run as postgres, and a suite
# that names REDLOCK_NETFAULT (the feature soak) gets network faults from a
# root helper beside it (test/netfault.sh, nftables; see netfault_start);
# without root that suite runs without them and says so.
# Exits non-zero on any failure; the last line counts the suites.
set -euo pipefail

usage() {
	echo "usage: bash test/run-tests.sh [--pg-config PATH] [--redis-server PATH] [--long] [--seconds N] [--only REGEX]" >&2
	exit 2
}

pg_config=
redis_server=
only=
seconds=
while [ $# -gt 0 ]; do
	case "$1" in
	--pg-config) [ $# -ge 2 ] || usage; pg_config=$2; shift 2 ;;
	--pg-config=*) pg_config=${1#*=}; shift ;;
	--redis-server) [ $# -ge 2 ] || usage; redis_server=$2; shift 2 ;;
	--redis-server=*) redis_server=${1#*=}; shift ;;
	--only) [ $# -ge 2 ] || usage; only=$2; shift 2 ;;
	--only=*) only=${1#*=}; shift ;;
	--long) export SOAK_MINUTES="${SOAK_MINUTES:-30}"; shift ;;
	--seconds) [ $# -ge 2 ] && [[ $2 =~ ^[0-9]+$ ]] || usage; seconds=$2; shift 2 ;;
	--seconds=*) seconds=${1#*=}; [[ $seconds =~ ^[0-9]+$ ]] || usage; shift ;;
	*) usage ;;
	esac
done
if [ -n "${SOAK_MINUTES:-}" ]; then export SOAK_SECONDS=$((SOAK_MINUTES * 60)); fi
if [ -n "$seconds" ]; then export SOAK_SECONDS=$seconds; fi

top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"

if [ -z "$pg_config" ]; then
	bash test/install-deps.sh
	pg_config=/usr/lib/postgresql/15/bin/pg_config
else
	bash test/install-deps.sh --without-postgresql
fi
[ -x "$pg_config" ] || { echo "run-tests: $pg_config is not an executable pg_config" >&2; exit 2; }
pg_config=$(cd "$(dirname "$pg_config")" && pwd)/$(basename "$pg_config")
if [ -n "$redis_server" ]; then
	REDLOCK_REDIS_SERVER=$(command -v "$redis_server") ||
		{ echo "run-tests: $redis_server is not an executable" >&2; exit 2; }
	export REDLOCK_REDIS_SERVER
fi
echo "== Redis nodes run $(bash test/redis-nodes.sh version)"
server_name=$(basename "${REDLOCK_REDIS_SERVER:-redis-server}")

work=$(mktemp -d /tmp/redlock-test.XXXXXX)
chmod 755 "$work"

# Stop what we started: our cluster and nodes, then anything a TAP test left
# behind (a redis-server or postmaster whose directory is under $work).
cleanup() {
	local pid cwd
	bash "$top/test/pg-cluster.sh" stop "$work/pg" || true
	bash "$top/test/redis-nodes.sh" stop "$work/redis" || true
	for pid in $(pgrep -x "redis-server|${server_name:0:15}|postgres" || true); do
		cwd=$(readlink "/proc/$pid/cwd" 2>/dev/null) || continue
		[[ $cwd == "$work"/* ]] || continue
		if [ "$(cat "/proc/$pid/comm" 2>/dev/null)" != postgres ]; then
			kill -CONT "$pid" 2>/dev/null || true
			kill -KILL "$pid" 2>/dev/null || true
		elif [ "$(ps -o comm= -p "$(ps -o ppid= -p "$pid" | tr -d ' ')" 2>/dev/null)" != postgres ]; then
			kill -QUIT "$pid" 2>/dev/null || true	# a postmaster: immediate shutdown
		fi
	done
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# A private copy of the installation, in this run's directory: the
# extension is installed there, never into $pg_config's own directories.
echo "== a private copy of $("$pg_config" --version) ($pg_config)"
PG_CONFIG=$(bash test/pg-copy.sh "$pg_config" "$work/pg-install" | tail -n 1)
export PG_CONFIG
bindir=$("$PG_CONFIG" --bindir)
pgxs_test=$(cd "$(dirname "$("$PG_CONFIG" --pgxs)")/../test" && pwd)
export PATH="$bindir:$PATH"
echo "   in $work/pg-install, removed at the end"

# The clone's files are shared with any other run in it: take turns.
exec {clone_lock}< "$top/Makefile"
if ! flock -n "$clone_lock"; then
	echo "== waiting for another run in this clone (it holds a lock on $top/Makefile)"
	flock "$clone_lock"
fi

echo "== build and install"
make -s clean PG_CONFIG="$PG_CONFIG"
make -s PG_CONFIG="$PG_CONFIG" \
	COPT='-Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers -Wno-sign-compare -Werror'
make -s install PG_CONFIG="$PG_CONFIG"

passed=()
failed=()
# run_suite NAME COMMAND...: runs it with errexit in force, records the outcome
run_suite() {
	local name=$1 rc
	shift
	if [ -n "$only" ] && ! [[ $name =~ $only ]]; then
		return 0
	fi
	echo "== $name"
	set +e
	("$@")
	rc=$?
	set -e
	if [ "$rc" -eq 0 ]; then
		passed+=("$name")
	else
		echo "== $name: FAILED (exit $rc)"
		failed+=("$name")
	fi
}

show_diffs() {
	[ -f "$1" ] && cat "$1"
	return 1
}
pg_regress_suite() {
	make -s installcheck PG_CONFIG="$PG_CONFIG" ISOLATION= || show_diffs regression.diffs
}
isolation_suite() {
	make -s installcheck PG_CONFIG="$PG_CONFIG" REGRESS= || show_diffs output_iso/regression.diffs
}

run_suite "unit tests: quorum logic" make -s unitcheck PG_CONFIG="$PG_CONFIG"
run_suite "META.json agrees with redlock.control" bash test/meta-json.sh
run_suite "links between the documentation's pages" bash test/doc-links.sh

echo "== starting 5 Redis nodes and a cluster for pg_regress, isolation and the README"
nodes=$(bash test/redis-nodes.sh start "$work/redis" 5) ||
	{ echo "run-tests: could not start the Redis nodes" >&2; exit 1; }
bash test/pg-cluster.sh start "$work/pg" "redlock.nodes=$nodes" \
	shared_preload_libraries=redlock fsync=off > /dev/null ||
	{ echo "run-tests: could not start the PostgreSQL cluster" >&2; exit 1; }
# with_pg COMMAND...: COMMAND with PGHOST, PGPORT... of that cluster
with_pg() {
	# shellcheck disable=SC1091
	. "$work/pg/env"
	"$@"
}
echo "   Redis nodes $nodes; PostgreSQL on $work/pg"
run_suite "pg_regress" with_pg pg_regress_suite
run_suite "isolation" with_pg isolation_suite
run_suite "README and doc/ examples" with_pg bash test/readme-examples.sh
bash test/pg-cluster.sh stop "$work/pg"
bash test/redis-nodes.sh stop "$work/redis"
# what follows writes only under $work
flock -u "$clone_lock"
exec {clone_lock}<&-

run_suite "README install block on a fresh cluster" bash test/readme-install.sh

# The TAP tests: PostgreSQL refuses to run as root, so they run as postgres,
# on a copy of test/t, test/perl, the README and doc/ that user can write
# next to.
tap=$work/tap
mkdir -p "$tap/tmp_check/log"
cp -r test/t test/perl README.md doc "$tap/"
if [ "$(id -u)" -eq 0 ]; then
	chown -R postgres: "$tap"
	as_pg=(runuser -u postgres --)
else
	as_pg=()
fi
# The network faults of a suite whose file names REDLOCK_NETFAULT (the
# feature soak): as root, with nft, the root helper test/netfault.sh runs
# beside it in a directory of its own (an nftables table named after its
# PID, commands from a FIFO the test writes), named to the test in
# REDLOCK_NETFAULT.  The helper deletes its table when it is stopped, when
# this suite's shell is gone, or after an hour more than the soak's
# seconds.  Without root or nft the test runs without network faults and
# says so.  Sets netfault_dir and netfault_pid.
netfault_dir=
netfault_pid=
netfault_start() {
	# this suite's shell ($BASHPID inside the background job below would be
	# the helper's own)
	local me=$BASHPID
	local dir=$tap/netfault-$me i
	[ "$(id -u)" -eq 0 ] && command -v nft > /dev/null || return 0
	mkdir -p "$dir"
	chmod 755 "$dir"
	bash "$top/test/netfault.sh" "$dir" postgres "$me" $((${SOAK_SECONDS:-60} + 3600)) &
	netfault_pid=$!
	for i in $(seq 100); do
		if grep -qx ready "$dir/netfault.log" 2> /dev/null; then
			netfault_dir=$dir
			return 0
		fi
		kill -0 "$netfault_pid" 2> /dev/null || break
		sleep 0.1
	done
	echo "run-tests: the network fault helper (test/netfault.sh) did not start" >&2
	netfault_stop
}
netfault_stop() {
	[ -n "$netfault_pid" ] || return 0
	kill -TERM "$netfault_pid" 2> /dev/null || true
	wait "$netfault_pid" 2> /dev/null || true
	netfault_pid=
}
# shellcheck disable=SC2086 # PROVE_FLAGS: several words
tap_suite() {
	local t=$1 log rc=0
	cd "$tap"
	if grep -q REDLOCK_NETFAULT "$t"; then
		trap netfault_stop EXIT
		trap 'exit 130' INT TERM
		netfault_start
	fi
	"${as_pg[@]}" env PATH="$PATH" TESTDIR="$tap" REDLOCK_REDIS_SERVER="${REDLOCK_REDIS_SERVER:-}" \
		TESTDATADIR="$tap/tmp_check" TESTLOGDIR="$tap/tmp_check/log" \
		PG_REGRESS="$pgxs_test/regress/pg_regress" \
		PERL5LIB="$pgxs_test/perl:$tap/perl" REDLOCK_README="$tap/README.md" \
		REDLOCK_NETFAULT="$netfault_dir" \
		prove ${PROVE_FLAGS:-} "$t" || rc=1
	netfault_stop
	[ "$rc" -eq 0 ] && return 0
	log=$tap/tmp_check/log/regress_log_$(basename "$t" .pl)
	[ -f "$log" ] && tail -n 60 "$log"
	return 1
}
for t in test/t/*.pl; do
	run_suite "TAP $(basename "$t")" tap_suite "t/$(basename "$t")"
done

echo
echo "== $("$PG_CONFIG" --version); Redis nodes: $(bash test/redis-nodes.sh version)"
if [ ${#failed[@]} -gt 0 ]; then
	echo "failed: ${failed[*]}"
	echo "${#passed[@]} passed, ${#failed[@]} failed"
	exit 1
fi
echo "${#passed[@]} passed, 0 failed"
