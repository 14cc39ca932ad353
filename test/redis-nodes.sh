#!/usr/bin/env bash
# Start or stop a set of throwaway redis-server nodes on loopback.
#
#   redis-nodes.sh start DIR COUNT [extra redis-server args...]
#       Starts COUNT nodes on ports that were free (the kernel picks them),
#       checks that each port is served by the very process it started (a
#       port lost to a race is given up and another one is tried), and prints
#       the node list "127.0.0.1:P1,127.0.0.1:P2,..." (also in DIR/nodes).
#   redis-nodes.sh start DIR BASEPORT COUNT [extra args...]
#       The same on the fixed ports BASEPORT..BASEPORT+COUNT-1 (no script
#       of the project uses them any more); a port that is taken is an
#       error, never silently used.
#   redis-nodes.sh stop DIR
#       Stops every node started under DIR.
#   redis-nodes.sh version
#       Prints which server binary the nodes run, and its version.
#
# The server binary is REDLOCK_REDIS_SERVER (a path or a command name, e.g.
# /usr/bin/valkey-server), by default redis-server; any server that speaks
# Redis' protocol and options does (Redis, Valkey).  Each node runs in the
# foreground of its own process (no daemonize), with its data, log and pid
# under DIR/PORT.
set -euo pipefail
server=${REDLOCK_REDIS_SERVER:-redis-server}

usage() {
	echo "usage: redis-nodes.sh start DIR [BASEPORT] COUNT [redis-server args...] | stop DIR | version" >&2
	exit 2
}

cmd=${1:-}
dir=${2:-}
if [ "$cmd" = version ]; then
	path=$(command -v "$server") || { echo "redis-nodes: no server binary $server" >&2; exit 1; }
	echo "$path: $("$path" --version)"
	exit 0
fi
if [ -z "$cmd" ] || [ -z "$dir" ]; then usage; fi
is_number() { [[ $1 =~ ^[0-9]+$ ]]; }

# free_port (test/lib.sh)
# shellcheck source=test/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# Is PID a live server process of the binary named NAME (not a recycled
# pid)?  The kernel keeps the first 15 bytes of the name it was run by.
is_our_redis() {
	local pid=$1 name=$2 comm
	comm=$(cat "/proc/$pid/comm" 2>/dev/null) || return 1
	[ "$comm" = "${name:0:15}" ]
}

# stop_pid PID NAME
stop_pid() {
	local pid=$1 name=$2
	is_our_redis "$pid" "$name" || return 0
	kill -CONT "$pid" 2>/dev/null || true
	kill -TERM "$pid" 2>/dev/null || true
	for _ in $(seq 100); do
		is_our_redis "$pid" "$name" || return 0
		# a zombie is gone for our purposes
		grep -q '^State:.*Z' "/proc/$pid/status" 2>/dev/null && return 0
		sleep 0.05
	done
	kill -KILL "$pid" 2>/dev/null || true
}

# seed_epoch PORT: a node we just started is new and holds no lock, so its
# epoch (the record the restart quarantine rests on, key "redlock:epoch")
# is written as old ("seeded"), as an operator may do for nodes just
# provisioned (doc/operating.md, "The restart quarantine and the epoch
# key"): a first lock call does not wait out redlock.restart_quarantine.
seed_epoch() {
	local port=$1 run_id
	run_id=$(redis-cli -p "$port" INFO server | tr -d '\r' | sed -n 's/^run_id://p')
	[ -n "$run_id" ] && [ "$(redis-cli -p "$port" SET redlock:epoch "0 $run_id seeded")" = OK ]
}

# start_node PORT [args...]: 0 when PORT is now served by a redis-server we
# started (its pid in DIR/PORT/pid); 1 when the port was taken, with the
# node we tried stopped and its directory removed.
start_node() {
	local port=$1 pid served
	shift
	mkdir -p "$dir/$port"
	basename "$server" > "$dir/$port/name"
	"$server" --port "$port" --bind 127.0.0.1 --dir "$dir/$port" \
		--save '' --appendonly no --daemonize no \
		--logfile "$dir/$port/redis.log" --maxmemory-policy noeviction \
		"$@" < /dev/null > /dev/null 2>&1 &
	pid=$!
	echo "$pid" > "$dir/$port/pid"
	for _ in $(seq 200); do
		# it exits at once when it cannot bind the port
		if ! kill -0 "$pid" 2>/dev/null; then
			break
		fi
		served=$(redis-cli -p "$port" INFO server 2>/dev/null | tr -d '\r' |
			sed -n 's/^process_id://p') || true
		if [ -n "$served" ]; then
			[ "$served" = "$pid" ] || break	# someone else answers on this port
			seed_epoch "$port" && return 0
			break
		fi
		sleep 0.05
	done
	echo "redis-nodes: port $port: not served by the redis-server we started (pid $pid)" \
		"but by ${served:-nobody}; see $dir/$port/redis.log" >&2
	stop_pid "$pid" "$(basename "$server")"
	rm -rf "${dir:?}/$port"
	return 1
}

case "$cmd" in
start)
	base=
	if [ $# -ge 4 ] && is_number "${3:-}" && is_number "${4:-}"; then
		base=$3
		count=$4
		shift 4
	else
		count=${3:-}
		is_number "$count" || usage
		shift 3
	fi
	mkdir -p "$dir"
	started=()
	# a failed start leaves nothing running
	trap '[ $? -eq 0 ] || for p in "${started[@]}"; do stop_pid "$(cat "$dir/$p/pid")" "$(cat "$dir/$p/name")"; rm -rf "${dir:?}/$p"; done' EXIT
	for ((i = 0; i < count; i++)); do
		if [ -n "$base" ]; then
			port=$((base + i))
			start_node "$port" "$@" || { echo "redis-nodes: fixed port $port is not ours" >&2; exit 1; }
		else
			ok=
			for _ in $(seq 20); do
				port=$(free_port)
				[ -e "$dir/$port" ] && continue
				if start_node "$port" "$@"; then ok=1; break; fi
			done
			[ -n "$ok" ] || { echo "redis-nodes: could not start a node on a free port" >&2; exit 1; }
		fi
		started+=("$port")
	done
	list=
	for p in "${started[@]}"; do list+="${list:+,}127.0.0.1:$p"; done
	echo "$list" > "$dir/nodes"
	echo "$list"
	;;
stop)
	for pidfile in "$dir"/*/pid; do
		[ -f "$pidfile" ] || continue
		name=$(cat "$(dirname "$pidfile")/name" 2>/dev/null || echo redis-server)
		stop_pid "$(cat "$pidfile")" "$name"
		rm -f "$pidfile"
	done
	;;
*)
	usage
	;;
esac
