#!/usr/bin/env bash
# Start or stop a set of throwaway redis-server nodes on loopback.
#   redis-nodes.sh start DIR BASEPORT COUNT [extra redis-server args...]
#   redis-nodes.sh stop DIR
# Each node runs in the foreground of its own process (no daemonize), with
# its data, log and pid under DIR/PORT.
set -euo pipefail

cmd=${1:?usage: redis-nodes.sh start|stop DIR [BASEPORT COUNT]}
dir=${2:?directory}

case "$cmd" in
start)
	base=${3:?base port}
	count=${4:?count}
	shift 4
	mkdir -p "$dir"
	for ((i = 0; i < count; i++)); do
		port=$((base + i))
		mkdir -p "$dir/$port"
		redis-server --port "$port" --bind 127.0.0.1 --dir "$dir/$port" \
			--save '' --appendonly no --daemonize no \
			--logfile "$dir/$port/redis.log" --maxmemory-policy noeviction \
			"$@" > /dev/null 2>&1 &
		echo $! > "$dir/$port/pid"
	done
	for ((i = 0; i < count; i++)); do
		port=$((base + i))
		for _ in $(seq 100); do
			redis-cli -p "$port" ping 2>/dev/null | grep -q PONG && break
			sleep 0.05
		done
		redis-cli -p "$port" ping 2>/dev/null | grep -q PONG ||
			{ echo "redis node on port $port did not start" >&2; exit 1; }
	done
	;;
stop)
	for pidfile in "$dir"/*/pid; do
		[ -f "$pidfile" ] || continue
		pid=$(cat "$pidfile")
		kill -CONT "$pid" 2>/dev/null || true
		kill "$pid" 2>/dev/null || true
		rm -f "$pidfile"
	done
	;;
*)
	echo "usage: redis-nodes.sh start|stop DIR [BASEPORT COUNT]" >&2
	exit 2
	;;
esac
