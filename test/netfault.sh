#!/usr/bin/env bash
# The network faults of the feature soak (test/t/021_feature_soak.pl): a
# small root helper that cuts and heals loopback TCP traffic to Redis node
# ports with nftables, on behalf of a TAP test that runs as another user
# (PostgreSQL refuses root) and so cannot touch nftables itself.
#
#   bash test/netfault.sh DIR OWNER PARENT_PID SECONDS
#
# run-tests.sh starts it (as root, only for the TAP suites that name
# REDLOCK_NETFAULT) and passes DIR to the test as REDLOCK_NETFAULT.  It
# makes an nftables table of its own, "redlock_netfault_PID" (its PID: two
# runs side by side never touch each other's), with two sets of
# (address . port) and three fixed rules on the output hook, which is where
# loopback traffic leaves:
#   cut:  both directions dropped: packets to ADDR:PORT and from ADDR:PORT
#   mute: packets from ADDR:PORT that carry data (PSH) dropped: the node's
#         replies are lost while the requests reach it and are applied
#         (connections still open, ACKs still flow)
# and reads commands, one a line, from the FIFO DIR/netfault.fifo (owned by
# OWNER, mode 0600):
#   N cut ADDR PORT | N heal ADDR PORT | N drop-replies ADDR PORT |
#   N heal-all | N quit
# N is the command's number (digits); the answer "N ok" or "N error WHY" is
# appended to DIR/netfault.log.  ADDR must be a loopback address other than
# 127.0.0.1 (which every other test on the machine uses): the soak's nodes
# also listen on 127.0.0.2 and 127.0.0.3, one per PostgreSQL server, and
# only those addresses are ever cut.  PORT: 1024-65535.  Anything else is
# refused, and nothing in a line is ever passed to a shell.
#
# It deletes its table and the FIFO on every exit path (trap EXIT; INT and
# TERM exit): at "quit", when PARENT_PID is gone (checked every second, so a
# killed run-tests.sh leaves no rules behind), after SECONDS, or after
# 100000 commands.  "DIR/netfault.log" says "ready" once the table exists.
set -euo pipefail

[ $# -eq 4 ] && [[ $3 =~ ^[0-9]+$ ]] && [[ $4 =~ ^[0-9]+$ ]] ||
	{ echo "usage: bash test/netfault.sh DIR OWNER PARENT_PID SECONDS" >&2; exit 2; }
dir=$1
owner=$2
parent=$3
seconds=$4
[ "$parent" != $$ ] || { echo "netfault: PARENT_PID is this helper's own" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "netfault: needs root (nftables)" >&2; exit 1; }
command -v nft > /dev/null || { echo "netfault: nft is missing (Debian's nftables)" >&2; exit 1; }
[ -d "$dir" ] || { echo "netfault: $dir is not a directory" >&2; exit 2; }

table=redlock_netfault_$$
fifo=$dir/netfault.fifo
log=$dir/netfault.log
made=
cleanup() {
	[ -n "$made" ] && nft delete table ip "$table" 2> /dev/null
	rm -f "$fifo"
	return 0
}
trap cleanup EXIT
trap 'exit 130' INT TERM

nft -f - <<EOF
table ip $table {
	set cut { type ipv4_addr . inet_service; }
	set mute { type ipv4_addr . inet_service; }
	chain out {
		type filter hook output priority filter; policy accept;
		ip daddr . tcp dport @cut drop
		ip saddr . tcp sport @cut drop
		ip saddr . tcp sport @mute tcp flags & psh == psh drop
	}
}
EOF
made=1
rm -f "$fifo"
mkfifo -m 600 "$fifo"
chown "$owner" "$fifo"
: > "$log"
chmod 644 "$log"
# read and write: the FIFO never reads as closed between two writers
exec 3<> "$fifo"
echo ready >> "$log"

# ADDR and PORT valid: a loopback address but 127.0.0.1, a port 1024-65535
valid() {
	local a=$1 p=$2 o
	[[ $a =~ ^127\.([0-9]{1,3})\.([0-9]{1,3})\.([0-9]{1,3})$ ]] || return 1
	for o in "${BASH_REMATCH[@]:1}"; do
		[ "$((10#$o))" -le 255 ] || return 1
	done
	[ "$a" != 127.0.0.1 ] || return 1
	[[ $p =~ ^[0-9]{1,5}$ ]] && [ "$((10#$p))" -ge 1024 ] && [ "$((10#$p))" -le 65535 ]
}

end=$((SECONDS + seconds))
n=0
part=
while [ "$n" -lt 100000 ] && [ "$SECONDS" -lt "$end" ] && kill -0 "$parent" 2> /dev/null; do
	# A writer writes a whole line at once (under PIPE_BUF), but read takes
	# it a byte at a time, and its timeout can fire in the middle of a line
	# (a helper kept off the CPU after the first byte): what it read then is
	# kept, and the rest of the line follows it.  (Dropping it once cost a
	# command its first digit, and its caller the answer it waited for.)
	chunk=
	if ! IFS= read -r -t 1 chunk <&3; then
		part=$part$chunk
		continue
	fi
	line=$part$chunk
	part=
	n=$((n + 1))
	read -r id cmd addr port extra <<< "$line" || true
	if ! [[ ${id:-} =~ ^[0-9]{1,9}$ ]]; then
		echo "? error no command number" >> "$log"
		continue
	fi
	case "${cmd:-}" in
	cut | heal | drop-replies)
		if [ -n "${extra:-}" ] || ! valid "${addr:-}" "${port:-}"; then
			echo "$id error bad arguments" >> "$log"
			continue
		fi
		port=$((10#$port))
		ok=1
		case $cmd in
		cut) nft add element ip "$table" cut "{ $addr . $port }" 2> /dev/null || ok= ;;
		drop-replies) nft add element ip "$table" mute "{ $addr . $port }" 2> /dev/null || ok= ;;
		heal)
			# either set may hold it; deleting an absent element fails
			nft delete element ip "$table" cut "{ $addr . $port }" 2> /dev/null || true
			nft delete element ip "$table" mute "{ $addr . $port }" 2> /dev/null || true
			;;
		esac
		if [ -n "$ok" ]; then
			echo "$id ok" >> "$log"
		else
			echo "$id error nft refused" >> "$log"
		fi
		;;
	heal-all)
		if [ -n "${addr:-}" ]; then
			echo "$id error bad arguments" >> "$log"
		elif nft flush set ip "$table" cut && nft flush set ip "$table" mute; then
			echo "$id ok" >> "$log"
		else
			echo "$id error nft refused" >> "$log"
		fi
		;;
	quit)
		echo "$id ok" >> "$log"
		exit 0
		;;
	*) echo "$id error unknown command" >> "$log" ;;
	esac
done
