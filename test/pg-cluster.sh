#!/usr/bin/env bash
# A throwaway PostgreSQL cluster for the tests and the demo, from any
# PostgreSQL installation (the one of $PG_CONFIG, default: pg_config in PATH).
#
#   pg-cluster.sh start DIR [name=value ...]
#       initdb in DIR/data and start the server, listening only on a unix
#       socket in DIR (no TCP), on a port number that was free, with the
#       given extra settings (e.g. shared_preload_libraries=redlock).
#       Writes DIR/env, which exports PGHOST, PGPORT, PGUSER and PGDATABASE
#       for this cluster, and prints the same lines: use
#           bash test/pg-cluster.sh start "$dir" ... >/dev/null; . "$dir/env"
#       Checks that the server answering there is this one (its
#       data_directory is DIR/data).
#   pg-cluster.sh stop DIR
#       Stops it (fast shutdown; immediate if that does not work).
#
# PostgreSQL refuses to run as root: when run as root, the cluster runs as
# the postgres user, and DIR is handed to that user.
set -euo pipefail

usage() {
	echo "usage: pg-cluster.sh start DIR [name=value ...] | stop DIR" >&2
	exit 2
}

cmd=${1:-}
dir=${2:-}
if [ -z "$cmd" ] || [ -z "$dir" ]; then usage; fi
shift 2

pg_config=${PG_CONFIG:-pg_config}
bindir=$("$pg_config" --bindir) || { echo "pg-cluster: no usable pg_config ($pg_config)" >&2; exit 1; }

if [ "$(id -u)" -eq 0 ]; then
	owner=postgres
	as_owner=(runuser -u postgres --)
else
	owner=$(id -un)
	as_owner=()
fi

# free_port (test/lib.sh)
# shellcheck source=test/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# a value for postgresql.conf, in single quotes
conf_quote() { printf "'%s'" "${1//\'/\'\'}"; }

case "$cmd" in
start)
	mkdir -p "$dir"
	dir=$(cd "$dir" && pwd -P)
	cd "$dir"	# the owner may not be allowed into the caller's directory
	[ ! -e "$dir/data" ] || { echo "pg-cluster: $dir/data already exists" >&2; exit 1; }
	mkdir -p "$dir/data" "$dir/log"
	chmod 700 "$dir/data"
	if [ "$owner" = postgres ] && [ "$(id -u)" -eq 0 ]; then
		chown postgres: "$dir" "$dir/data" "$dir/log"
	fi
	"${as_owner[@]}" test -w "$dir" ||
		{ echo "pg-cluster: $owner cannot write to $dir (check the modes of its parents)" >&2; exit 1; }

	"${as_owner[@]}" "$bindir/initdb" -D "$dir/data" -U "$owner" -A trust \
		-E UTF8 --locale=C --no-sync > "$dir/log/initdb.log" 2>&1 ||
		{ cat "$dir/log/initdb.log" >&2; exit 1; }

	port=$(free_port)
	{
		echo "# pg-cluster.sh"
		echo "listen_addresses = ''"
		echo "port = $port"
		echo "unix_socket_directories = $(conf_quote "$dir")"
		for setting in "$@"; do
			[[ $setting == *=* ]] || { echo "pg-cluster: not name=value: $setting" >&2; exit 2; }
			echo "${setting%%=*} = $(conf_quote "${setting#*=}")"
		done
	} >> "$dir/data/postgresql.conf"

	if ! "${as_owner[@]}" "$bindir/pg_ctl" start -w -t 120 -D "$dir/data" \
		-l "$dir/log/postgresql.log" > /dev/null; then
		tail -n 30 "$dir/log/postgresql.log" >&2 || true
		exit 1
	fi

	cat > "$dir/env" <<-EOF
		unset PGSERVICE PGSERVICEFILE PGHOSTADDR PGPASSWORD PGPASSFILE PGOPTIONS PGSSLMODE
		export PGHOST=$(printf %q "$dir") PGPORT=$port PGUSER=$(printf %q "$owner") PGDATABASE=postgres
	EOF
	# shellcheck disable=SC1091
	. "$dir/env"
	served=$("$bindir/psql" -X -At -c "SELECT current_setting('data_directory')")
	if [ "$served" != "$dir/data" ]; then
		echo "pg-cluster: the server on $PGHOST port $PGPORT is not ours (data_directory $served)" >&2
		"${as_owner[@]}" "$bindir/pg_ctl" stop -D "$dir/data" -m immediate > /dev/null || true
		exit 1
	fi
	cat "$dir/env"
	;;
stop)
	[ -f "$dir/data/postmaster.pid" ] || exit 0
	cd "$dir"
	"${as_owner[@]}" "$bindir/pg_ctl" stop -D "$dir/data" -m fast -w -t 60 > /dev/null 2>&1 ||
		"${as_owner[@]}" "$bindir/pg_ctl" stop -D "$dir/data" -m immediate -w > /dev/null 2>&1 || true
	;;
*)
	usage
	;;
esac
