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
#   bench_seed_epoch "$nodes"          their epochs written as old (no
#                                      restart quarantine to wait out)
#   bench_cluster pg name=value ...    a cluster on a unix socket only
#   bench_use pg                       PGHOST, PGPORT... of that cluster
#   bench_uptime                       the machine's load (uptime), to report
#   bench_floor_build DIR              DIR/floor, from bench/floor.c
#   bench_floor_capture DIR PORT TTL   the commands of one lock and unlock
#                                      of the extension, for DIR/floor
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
	BENCH_PG_SOURCE=$pg_config	# the installation a private copy is made of

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

# bench_build_rev REV DIR: the extension as it was at git revision REV of
# this repository (e.g. main), built and installed into a second private
# copy of the installation, DIR (the current build stays in the first);
# prints that copy's pg_config.  For an A/B comparison in one run
# (bench/profile.sh --before).
bench_build_rev() {
	local rev=$1 dir=$2 src pgc
	git -C "$BENCH_TOP" rev-parse --verify -q "$rev^{commit}" > /dev/null ||
		{ echo "$BENCH_NAME: $rev is no revision of $BENCH_TOP" >&2; exit 2; }
	pgc=$(bash "$BENCH_TOP/test/pg-copy.sh" "$BENCH_PG_SOURCE" "$dir")
	src=$(mktemp -d "/tmp/redlock-rev.XXXXXX")
	git -C "$BENCH_TOP" archive "$rev" | tar -x -C "$src"
	echo "== build and install $rev ($(git -C "$BENCH_TOP" rev-parse --short "$rev")) into $dir" >&2
	make -s -C "$src" PG_CONFIG="$pgc" > /dev/null
	make -s -C "$src" install PG_CONFIG="$pgc" > /dev/null
	rm -rf "$src"
	echo "$pgc"
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

# bench_seed_epoch NODES: each node's epoch (the restart quarantine's
# evidence, redlock:epoch) written as old, as an operator may for nodes just
# provisioned that hold no lock (test/perl/RedlockTest.pm, seed_epoch):
# fresh nodes count at once, not after redlock.restart_quarantine
bench_seed_epoch() {
	local addr port rid
	for addr in ${1//,/ }; do
		port=${addr##*:}
		rid=$(redis-cli -p "$port" INFO server | tr -d '\r' | sed -n 's/^run_id://p')
		redis-cli -p "$port" SET redlock:epoch "0 $rid seeded" > /dev/null
	done
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

# bench_our_cpu NAME PORTS PMS: "redis cluster", the CPU jiffies so far of
# the redis-servers started by bench_nodes NAME on PORTS, and of the
# clusters whose postmasters' pids are PMS (the postmasters, their
# children, and the children they reaped)
bench_our_cpu() {
	local r=0 t=0 p c pm
	for p in $2; do
		r=$((r + $(awk '{ print $14 + $15 }' "/proc/$(bench_node_pid "$1" "$p")/stat")))
	done
	for pm in $3; do
		t=$((t + $(awk '{ print $14 + $15 + $16 + $17 }' "/proc/$pm/stat")))
		for c in $(pgrep -P "$pm"); do
			t=$((t + $(awk '{ print $14 + $15 }' "/proc/$c/stat" 2>/dev/null || echo 0)))
		done
	done
	echo "$r $t"
}

# bench_uptime: the machine's load as uptime(1) prints it, for a report
# ("12:15:42 up 7 min, 0 users, load average: 2.80, 1.11, 0.44")
bench_uptime() { uptime | sed 's/^ *//; s/  */ /g'; }

# bench_idle_busy: how busy the shared machine is (all CPUs, %) over 3 s,
# with none of our load
bench_idle_busy() {
	local b0 t0 b1 t1
	read -r b0 t0 < <(bench_cpu_now)
	sleep 3
	read -r b1 t1 < <(bench_cpu_now)
	bench_busy "$b0" "$t0" "$b1" "$t1"
}

# ---------------------------------------------------------------- the floor
# bench/floor.c replays the commands the extension sends for one lock and
# one unlock (bench/targets.sh, bench/profile.sh).

# bench_floor_build DIR: DIR/floor
bench_floor_build() {
	cc -O2 -Wall -o "$1/floor" "$BENCH_TOP/bench/floor.c" -lhiredis
}

# bench_floor_capture DIR PORT TTL: one redlock_try_lock(r, TTL) and
# redlock_unlock(r) in the cluster of the environment (bench_use), with
# MONITOR on the node at PORT: the commands its backend sent go to
# DIR/floor_cmds.txt (the format bench/floor.c reads), the token it was
# granted to BENCH_FLOOR_TOKEN.  Checks that every script it sent is one of
# the scripts in src/*/*.c (DIR/src_scripts.txt: "SHA1 NAME" of each
# "static const char NAME_SCRIPT[] = ...;" literal, compiled and hashed
# here), so that the floor never runs a stale copy.  Needs DIR/floor.
bench_floor_capture() {
	local dir=$1 port=$2 ttl=$3 mon phase i name sha
	redis-cli -p "$port" MONITOR > "$dir/monitor.txt" &
	mon=$!
	sleep 0.5
	# a warm-up cycle (connections, scripts), then the markers around the
	# captured calls, each sent after the calls before it have returned
	BENCH_FLOOR_TOKEN=$(psql -X -q -v ON_ERROR_STOP=1 -At <<-SQL
	SELECT redlock_try_lock('capture:warm', $ttl) IS NULL, redlock_unlock('capture:warm') \g /dev/null
	\! bash -c 'sleep 0.3; redis-cli -p $port ECHO redlock-bench-mark-acquire > /dev/null'
	SELECT redlock_try_lock('capture', $ttl) AS token \gset
	\! bash -c 'sleep 0.3; redis-cli -p $port ECHO redlock-bench-mark-release > /dev/null'
	SELECT redlock_unlock('capture') \g /dev/null
	\! bash -c 'sleep 0.3; redis-cli -p $port ECHO redlock-bench-mark-end > /dev/null'
	SELECT :'token';
	SQL
	)
	sleep 0.3
	kill "$mon" 2>/dev/null || true
	wait "$mon" 2>/dev/null || true
	# MONITOR lines: 'TIME [DB ADDR] "ARG" "ARG" ...'; commands run by a
	# script say [DB lua].  The backend is the client of the first command
	# after the acquire marker; its commands between the markers make the
	# two phases.
	awk '
		/"ECHO" "redlock-bench-mark-acquire"/ { phase = "acquire"; next }
		/"ECHO" "redlock-bench-mark-release"/ { phase = "release"; next }
		/"ECHO" "redlock-bench-mark-end"/ { phase = ""; next }
		phase == "" || / lua\] / { next }
		{
			match($0, /^[0-9.]+ \[[0-9]+ [^]]*\] /)
			if (RSTART != 1) next
			who = substr($0, 1, RLENGTH); sub(/^[0-9.]+ \[[0-9]+ /, "", who); sub(/\] $/, "", who)
			if (backend == "") backend = who
			if (who == backend) print phase, substr($0, RLENGTH + 1)
		}' "$dir/monitor.txt" > "$dir/floor_cmds.txt"
	if ! grep -q '^acquire ' "$dir/floor_cmds.txt" || ! grep -q '^release ' "$dir/floor_cmds.txt"; then
		echo "$BENCH_NAME: could not capture the extension's commands (see $dir/monitor.txt)" >&2
		exit 1
	fi
	[[ $BENCH_FLOOR_TOKEN =~ ^[0-9]+$ ]] ||
		{ echo "$BENCH_NAME: the captured lock returned no token ($BENCH_FLOOR_TOKEN)" >&2; exit 1; }
	grep '^acquire ' "$dir/floor_cmds.txt" | grep -qF "\"$BENCH_FLOOR_TOKEN\"" ||
		{ echo "$BENCH_NAME: the captured acquire does not carry its token $BENCH_FLOOR_TOKEN" >&2; exit 1; }

	bench_src_scripts "$dir" > "$dir/src_scripts.txt"
	for phase in acquire release; do
		i=0
		while name=$("$dir/floor" --arg "$dir/floor_cmds.txt" "$phase" "$i" 0); do
			sha=$(bench_floor_sha "$dir" "$phase" "$i" "$name")
			if [ -n "$sha" ] && ! grep -q "^$sha " "$dir/src_scripts.txt"; then
				echo "$BENCH_NAME: the $phase script the extension sent (SHA1 $sha) is none of the scripts in src/*/*.c" >&2
				exit 1
			fi
			i=$((i + 1))
		done
	done
}

# bench_src_scripts DIR: "SHA1 NAME" of every script literal in src/*/*.c
bench_src_scripts() {
	local f name
	for f in $(bench_src_files); do
		for name in $(sed -n 's/^static const char \([A-Z_]*SCRIPT\)\[\] =.*/\1/p' "$f"); do
			echo "$(bench_src_script "$1" "$name" | sha1sum | cut -d' ' -f1) $name"
		done
	done
}

# the C files of src/ (in folders or not)
bench_src_files() { find "$BENCH_TOP/src" -name '*.c' | sort; }

# bench_src_script DIR NAME: the text of the script literal NAME
# ("static const char NAME[] = ...;") of src/, compiled and printed by a
# program built in DIR; the pieces of Lua the scripts share (the
# "#define RL_LUA_... \" string macros of src/'s headers, and the one-line
# string macros they use, "#define RL_... \"...\"") with it
bench_src_script() {
	local f
	f=$(grep -l "^static const char $2\[\] =" $(bench_src_files) | head -1)
	[ -n "$f" ] || { echo "$BENCH_NAME: no script $2 in src/" >&2; return 1; }
	{
		echo '#include <stdio.h>'
		find "$BENCH_TOP/src" -name '*.h' | sort | xargs awk '
			/^#define RL_[A-Z0-9_]*[ \t]+"[^"]*"$/ { print }
			/^#define RL_LUA_[A-Z0-9_]*[ \t]*\\$/ { on = 1 }
			on { print; if ($0 !~ /\\$/) on = 0 }'
		echo 'static const char s[] ='
		sed -n "/^static const char $2\[\] =/,/;/{/^static const char/d;p}" "$f"
		echo 'int main(void) { fwrite(s, 1, sizeof(s) - 1, stdout); return 0; }'
	} > "$1/script.c"
	cc -o "$1/script" "$1/script.c" && "$1/script"
}

# bench_floor_sha DIR PHASE INDEX NAME: the SHA1 of that captured command's
# script (EVAL: of its text; EVALSHA: its argument), lower case; empty for
# other commands
bench_floor_sha() {
	case ${4^^} in
	EVAL) "$1/floor" --arg "$1/floor_cmds.txt" "$2" "$3" 1 | sha1sum | cut -d' ' -f1 ;;
	EVALSHA) "$1/floor" --arg "$1/floor_cmds.txt" "$2" "$3" 1 | tr 'A-F' 'a-f' ;;
	esac
}

# bench_floor_describe DIR PHASE: the captured commands of PHASE, for a
# report: "EVAL RELEASE_SCRIPT (SHA1 4a5ea7514ef7), 6 arguments; ..."
bench_floor_describe() {
	local dir=$1 phase=$2 i=0 name n s
	while name=$("$dir/floor" --arg "$dir/floor_cmds.txt" "$phase" "$i" 0); do
		n=1
		while "$dir/floor" --arg "$dir/floor_cmds.txt" "$phase" "$i" "$n" > /dev/null; do n=$((n + 1)); done
		s=$(bench_floor_sha "$dir" "$phase" "$i" "$name")
		[ -z "$s" ] || s=" $(awk -v h="$s" '$1 == h { print $2 }' "$dir/src_scripts.txt") (SHA1 ${s:0:12})"
		echo "${name^^}$s, $n arguments"
		i=$((i + 1))
	done | paste -sd';' | sed 's/;/; /g'
}

# bench_node_install OUT: node-redlock 4.2 with ioredis, as pinned in
# bench/node/package-lock.json, installed with npm ci in bench/node
# (nodejs and npm from Debian's packages when missing); its log in OUT/npm.log
bench_node_install() {
	if ! command -v node > /dev/null || ! command -v npm > /dev/null; then
		bench_need nodejs npm
	fi
	(cd "$BENCH_TOP/bench/node" && npm ci --no-audit --no-fund --loglevel=error > "$1/npm.log" 2>&1) ||
		{ cat "$1/npm.log" >&2; exit 1; }
}

# bench_shared_build OUT: bench/shared's module (the shared-connection
# floor, not the extension) built and installed into $PG_CONFIG's
# installation; its log in OUT/shared_floor_build.log
bench_shared_build() {
	make -s -C "$BENCH_TOP/bench/shared" PG_CONFIG="$PG_CONFIG" install > "$1/shared_floor_build.log" 2>&1 ||
		{ cat "$1/shared_floor_build.log" >&2; exit 1; }
	make -s -C "$BENCH_TOP/bench/shared" clean PG_CONFIG="$PG_CONFIG" > /dev/null
}

# bench_shared_floor DIR NODES TTL [name=value ...]: the shared-connection
# floor in a cluster of its own, BENCH_WORK/sf (bench_use sf), with
# shared_floor preloaded on NODES and these extra settings, and a function
# bench_sf_cycle(r text) there: one acquire and one release round of the
# resource r through the module's worker, as bench_cycle does them (a
# refusal is an error).  It sends the extension's scripts with the
# arguments where the commands bench_floor_capture DIR captured (with TTL)
# have them (the restart quarantine's epoch key and time last, as the
# extension sends them): checked here, so that a change of the scripts' arguments
# stops the run instead of measuring something else; the scripts are
# loaded on every node (EVALSHA only).
bench_shared_floor() {
	local dir=$1 nodes=$2 ttl=$3 addr p sha acq rel
	shift 3
	bench_sf_arg() { "$dir/floor" --arg "$dir/floor_cmds.txt" "$1" 0 "$2"; }
	bench_sf_argc() { local n=0; while bench_sf_arg "$1" "$n" > /dev/null; do n=$((n + 1)); done; echo "$n"; }
	if [ "$(bench_sf_argc acquire)" != 10 ] || [ "$(bench_sf_argc release)" != 8 ] ||
		"$dir/floor" --arg "$dir/floor_cmds.txt" acquire 1 0 > /dev/null ||
		"$dir/floor" --arg "$dir/floor_cmds.txt" release 1 0 > /dev/null ||
		[ "$(bench_sf_arg acquire 0 | tr a-z A-Z)" != EVALSHA ] || [ "$(bench_sf_arg release 0 | tr a-z A-Z)" != EVALSHA ] ||
		[ "$(bench_sf_arg acquire 3)" != "$(bench_sf_arg release 3)" ] ||
		[ "$(bench_sf_arg acquire 5)" != "$(bench_sf_arg release 4)" ] ||
		[ "$(bench_sf_arg acquire 6)" != "$ttl" ] || [ "$(bench_sf_arg acquire 7)" != "$BENCH_FLOOR_TOKEN" ] ||
		[ "$(bench_sf_arg acquire 3)" != "$(bench_sf_arg release 5)lock:capture" ] ||
		[ "$(bench_sf_arg acquire 8)" != "$(bench_sf_arg release 6)" ] ||
		[ "$(bench_sf_arg acquire 9)" != "$(bench_sf_arg release 7)" ] ||
		! [[ $(bench_sf_arg acquire 9) =~ ^[0-9]+$ ]]; then
		echo "$BENCH_NAME: the captured commands (floor_cmds.txt) are no longer laid out as bench/shared/shared_floor.c sends them: update it" >&2
		exit 1
	fi
	acq=$(bench_sf_arg acquire 1 | tr A-F a-f)
	rel=$(bench_sf_arg release 1 | tr A-F a-f)
	for addr in ${nodes//,/ }; do
		p=${addr##*:}
		for sha in $acq $rel; do
			if [ "$(redis-cli -p "$p" SCRIPT EXISTS "$sha")" != 1 ]; then
				bench_src_script "$dir" "$(awk -v h="$sha" '$1 == h { print $2 }' "$dir/src_scripts.txt")" |
					redis-cli -p "$p" -x SCRIPT LOAD > /dev/null
			fi
			[ "$(redis-cli -p "$p" SCRIPT EXISTS "$sha")" = 1 ] ||
				{ echo "$BENCH_NAME: could not load script $sha on node $p" >&2; exit 1; }
		done
	done
	bench_cluster sf shared_preload_libraries=shared_floor "$@" \
		"shared_floor.nodes=$nodes" "shared_floor.acquire_sha=$acq" "shared_floor.release_sha=$rel"
	(bench_use sf; psql -X -q -v ON_ERROR_STOP=1 <<-SQL
	CREATE EXTENSION shared_floor;
	-- as bench_cycle: one PL/pgSQL call per cycle, a refusal is an error; the
	-- captured counter and owner value (the same length as the extension's)
	CREATE FUNCTION bench_sf_cycle(r text) RETURNS void LANGUAGE plpgsql AS \$\$
	BEGIN
		IF NOT shared_floor_cycle('$(bench_sf_arg release 5)lock:' || r, '$(bench_sf_arg acquire 4)', '$(bench_sf_arg acquire 5)', $ttl, '$(bench_sf_arg release 5)',
			'$(bench_sf_arg acquire 8)', $(bench_sf_arg acquire 9)) THEN
			RAISE EXCEPTION 'lock on % refused', r;
		END IF;
	END
	\$\$;
	-- its two rounds apart, a statement each (bench/scale.sh's sf2): SQL
	-- functions, which the planner inlines into the statement (no call of
	-- their own), as redlock_lock and redlock_unlock are called
	CREATE FUNCTION bench_sf_lock(r text) RETURNS bool LANGUAGE sql AS \$\$
		SELECT shared_floor_acquire('$(bench_sf_arg release 5)lock:' || r, '$(bench_sf_arg acquire 4)', '$(bench_sf_arg acquire 5)', $ttl,
			'$(bench_sf_arg acquire 8)', $(bench_sf_arg acquire 9))
	\$\$;
	CREATE FUNCTION bench_sf_unlock(r text) RETURNS bool LANGUAGE sql AS \$\$
		SELECT shared_floor_release('$(bench_sf_arg release 5)lock:' || r, '$(bench_sf_arg acquire 5)', '$(bench_sf_arg release 5)',
			'$(bench_sf_arg acquire 8)', $(bench_sf_arg acquire 9))
	\$\$;
	SQL
	)
}

# bench_cycle_sql TTL: the SQL of bench_cycle(r text): one lock + unlock
# cycle, redlock_try_lock(r, TTL) and redlock_unlock(r), in one PL/pgSQL
# call, on a resource nobody else uses: a refusal is an error (the pgbench
# client aborts and the run is reported as failed)
bench_cycle_sql() {
	cat <<-SQL
	CREATE FUNCTION bench_cycle(r text) RETURNS void LANGUAGE plpgsql AS \$\$
	BEGIN
		IF redlock_try_lock(r, $1) IS NULL THEN
			RAISE EXCEPTION 'lock on % refused', r;
		END IF;
		IF NOT redlock_unlock(r) THEN
			RAISE EXCEPTION 'unlock of % found no lease', r;
		END IF;
	END
	\$\$;
	SQL
}

# bench_loop_sql TTL: the SQL of bench_loop(rep, n, warm) and its table
# samples (rep, i, op, us): one session, n timed
# redlock_try_lock(r, TTL) / redlock_unlock(r) cycles on one resource
# ('single:' || rep) after warm untimed ones, each call timed in the server
# with clock_timestamp() (as bench/run.sh does)
bench_loop_sql() {
	cat <<-SQL
	CREATE TABLE samples (rep int, i int, op text, us float8);
	CREATE FUNCTION bench_loop(rep int, n int, warm int) RETURNS void LANGUAGE plpgsql AS \$\$
	DECLARE
		acq float8[] := array_fill(0::float8, ARRAY[n]);
		rel float8[] := array_fill(0::float8, ARRAY[n]);
		t0 timestamptz; t1 timestamptz; t2 timestamptz;
		r text := 'single:' || rep;
		tok bigint; ok bool;
	BEGIN
		FOR i IN 1 - warm .. n LOOP
			t0 := clock_timestamp();
			tok := redlock_try_lock(r, $1);
			t1 := clock_timestamp();
			ok := redlock_unlock(r);
			t2 := clock_timestamp();
			IF tok IS NULL OR NOT ok THEN
				RAISE EXCEPTION 'cycle % not granted', i;
			END IF;
			IF i >= 1 THEN
				acq[i] := extract(epoch FROM t1 - t0) * 1e6;
				rel[i] := extract(epoch FROM t2 - t1) * 1e6;
			END IF;
		END LOOP;
		INSERT INTO samples SELECT rep, g, 'acquire', acq[g] FROM generate_series(1, n) g;
		INSERT INTO samples SELECT rep, g, 'release', rel[g] FROM generate_series(1, n) g;
	END
	\$\$;
	SQL
}

# bench_loop_pct REP: "acquire_p50=..." ... "release_p99=..." and the same
# for the cycle (the two calls of one iteration), from samples
bench_loop_pct() {
	psql -X -q -v ON_ERROR_STOP=1 -At <<-SQL
	SELECT op || '_p' || p || '=' || round(percentile_disc(p / 100.0) WITHIN GROUP (ORDER BY us)::numeric, 1)
	FROM (SELECT rep, op, us FROM samples
	      UNION ALL
	      SELECT a.rep, 'cycle', a.us + r.us FROM samples a JOIN samples r USING (rep, i)
	      WHERE a.op = 'acquire' AND r.op = 'release') s,
	     (VALUES (50), (90), (99)) v(p)
	WHERE rep = $1 GROUP BY op, p ORDER BY op, p;
	SQL
}

# bench_plot_cdf_head PNG TITLE: the gnuplot commands that begin a plot of
# two CDFs side by side (latency on a log scale) into PNG; the caller's
# commands (two "set title" and "plot", then "unset multiplot") follow
bench_plot_cdf_head() {
	cat <<-EOF
	set terminal pngcairo size 1200,520 font "DejaVu Sans,10"
	set output "$1"
	set multiplot layout 1,2 title "$2"
	set logscale x
	set xlabel "latency (us, log scale)"
	set ylabel "fraction of calls <= x"
	set grid
	set key bottom right
	set yrange [0:1]
	EOF
}
