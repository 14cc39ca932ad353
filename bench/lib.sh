# shellcheck shell=bash disable=SC2034
# Shared by the bench scripts (sourced, not run): which PostgreSQL to use,
# building and installing the extension there, and throwaway servers that
# are stopped again when the script exits.
#
#   . "$(dirname "$0")/lib.sh"
#   bench_pg "$pg_config" "$private"   dependencies, PostgreSQL, PG_CONFIG, PATH
#   bench_build                        make clean, make, make install there
#   bench_workdir NAME                 BENCH_WORK=/tmp/redlock-NAME.XXXXXX, and
#                                      an EXIT trap stopping what is under it
#   nodes=$(bench_nodes redis 5 [args]) 5 Redis nodes on free loopback ports
#   bench_cluster pg name=value ...    a cluster on a unix socket only
#   bench_use pg                       PGHOST, PGPORT... of that cluster
#
# Options every bench script takes, parsed by bench_pg_option:
# --pg-config     the PostgreSQL installation to build against, install into
#                 and run (default: Debian 12's PostgreSQL 15,
#                 /usr/lib/postgresql/15/bin/pg_config)
# --private-copy  first copy that installation (its bin/lib, share and
#                 include directories) under DIR, keeping their absolute
#                 paths (PostgreSQL finds its files relative to its
#                 binaries), and build, install and run there: the
#                 extension is never installed into the shared
#                 installation.  E.g. --private-copy /tmp/pgcopy
# A bench script run by another one (bench/run.sh runs
# bench/fence_trigger.sh) is given the first one's PG_CONFIG with
# --pg-config and does not build again (BENCH_INSTALLED).

BENCH_TOP=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BENCH_NAME=$(basename "$0" .sh)
BENCH_PG_OPTIONS='[--pg-config PATH] [--private-copy DIR]'
bench_pg_config=
bench_private=

# bench_pg_option ARGS...: when $1 is --pg-config or --private-copy, takes
# it (into bench_pg_config / bench_private) and sets BENCH_SHIFT to the
# number of arguments used; returns 1 for any other argument.  A missing
# value calls the script's usage.
bench_pg_option() {
	BENCH_SHIFT=2
	case "$1" in
	--pg-config) [ $# -ge 2 ] || usage; bench_pg_config=$2 ;;
	--pg-config=*) bench_pg_config=${1#*=}; BENCH_SHIFT=1 ;;
	--private-copy) [ $# -ge 2 ] || usage; bench_private=$2 ;;
	--private-copy=*) bench_private=${1#*=}; BENCH_SHIFT=1 ;;
	*) return 1 ;;
	esac
}

# bench_pg PG_CONFIG PRIVATE-DIR (either may be empty): installs the
# dependencies, copies the installation under PRIVATE-DIR when given, and
# exports PG_CONFIG and PATH (its bindir first).
bench_pg() {
	local pg_config=$1 private=$2 bindir
	if [ -z "$pg_config" ]; then
		bash "$BENCH_TOP/test/install-deps.sh" >&2
		pg_config=/usr/lib/postgresql/15/bin/pg_config
	else
		bash "$BENCH_TOP/test/install-deps.sh" --without-postgresql >&2
	fi
	[ -x "$pg_config" ] || { echo "$BENCH_NAME: $pg_config is not an executable pg_config" >&2; exit 2; }
	pg_config=$(cd "$(dirname "$pg_config")" && pwd)/$(basename "$pg_config")

	if [ -n "$private" ]; then
		pg_config=$(bash "$BENCH_TOP/test/pg-copy.sh" "$pg_config" "$private")
	fi
	export PG_CONFIG=$pg_config
	bindir=$("$PG_CONFIG" --bindir)
	export PATH="$bindir:$PATH"
	command -v pgbench > /dev/null || { echo "$BENCH_NAME: no pgbench in $bindir or PATH" >&2; exit 1; }
	echo "== $("$PG_CONFIG" --version), from $PG_CONFIG" >&2
}

# bench_need PACKAGE...: installs the Debian packages that are missing
bench_need() {
	local p missing=()
	for p in "$@"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
	done
	[ ${#missing[@]} -gt 0 ] || return 0
	echo "== installing ${missing[*]}" >&2
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq >&2
	apt-get install -y -qq --no-install-recommends "${missing[@]}" > /dev/null
}

# bench_build: builds the extension and installs it into $PG_CONFIG's
# installation, unless a calling bench script already did (BENCH_INSTALLED)
bench_build() {
	if [ "${BENCH_INSTALLED:-}" = "$PG_CONFIG" ]; then
		return 0
	fi
	echo "== build and install" >&2
	make -s -C "$BENCH_TOP" clean PG_CONFIG="$PG_CONFIG" > /dev/null
	make -s -C "$BENCH_TOP" PG_CONFIG="$PG_CONFIG" > /dev/null
	make -s -C "$BENCH_TOP" install PG_CONFIG="$PG_CONFIG" > /dev/null
	export BENCH_INSTALLED=$PG_CONFIG
}

# bench_workdir NAME: a fresh BENCH_WORK directory for the servers; at exit
# everything started under it is stopped and it is removed
bench_workdir() {
	BENCH_WORK=$(mktemp -d "/tmp/redlock-$1.XXXXXX")
	chmod 755 "$BENCH_WORK"	# the clusters run as postgres when we are root
	trap bench_cleanup EXIT
	trap 'exit 130' INT TERM
}

# bench_stop_all: stops every cluster, then every Redis node, under BENCH_WORK
bench_stop_all() {
	local d
	[ -n "${BENCH_WORK:-}" ] || return 0
	for d in "$BENCH_WORK"/*/; do
		[ -d "$d/data" ] && { bash "$BENCH_TOP/test/pg-cluster.sh" stop "${d%/}" || true; }
	done
	for d in "$BENCH_WORK"/*/; do
		[ -d "$d/data" ] || bash "$BENCH_TOP/test/redis-nodes.sh" stop "${d%/}" || true
	done
}

bench_cleanup() {
	bench_stop_all
	[ -z "${BENCH_WORK:-}" ] || rm -rf "$BENCH_WORK"
}

# bench_nodes NAME COUNT [redis-server args...]: COUNT Redis nodes on free
# loopback ports, each checked to be the process we started
# (test/redis-nodes.sh), under BENCH_WORK/NAME, with these extra settings
# (e.g. --appendonly yes); prints "127.0.0.1:P1,127.0.0.1:P2,..."
bench_nodes() {
	local name=$1 count=$2
	shift 2
	bash "$BENCH_TOP/test/redis-nodes.sh" start "$BENCH_WORK/$name" "$count" "$@"
}

# bench_node_pid NAME PORT: the pid of a node started by bench_nodes NAME
bench_node_pid() { cat "$BENCH_WORK/$1/$2/pid"; }

# bench_cluster NAME [name=value ...]: a throwaway cluster in BENCH_WORK/NAME,
# on a unix socket only (test/pg-cluster.sh), with these settings
bench_cluster() {
	local name=$1
	shift
	bash "$BENCH_TOP/test/pg-cluster.sh" start "$BENCH_WORK/$name" "$@" > /dev/null
}

# bench_use NAME: the environment (PGHOST, PGPORT, PGUSER, PGDATABASE) of
# cluster NAME; it unsets PGOPTIONS
bench_use() {
	unset PGHOST PGPORT PGUSER PGDATABASE
	# shellcheck disable=SC1090
	. "$BENCH_WORK/$1/env"
}

# machine-wide CPU jiffies: "busy total"
bench_cpu_now() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8, $2 + $3 + $4 + $5 + $6 + $7 + $8 }' /proc/stat; }

# bench_busy B0 T0 B1 T1: the busy share in %, between two bench_cpu_now
bench_busy() { awk -v b=$(($3 - $1)) -v t=$(($4 - $2)) 'BEGIN { printf "%.0f", (t > 0 ? 100 * b / t : 0) }'; }

# bench_idle_busy: how busy the shared machine is (all CPUs, %) over 3 s,
# with none of our load
bench_idle_busy() {
	local b0 t0 b1 t1
	read -r b0 t0 < <(bench_cpu_now)
	sleep 3
	read -r b1 t1 < <(bench_cpu_now)
	bench_busy "$b0" "$t0" "$b1" "$t1"
}
