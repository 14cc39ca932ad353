#!/usr/bin/env bash
# Run every redlock test: unit tests of the quorum logic, pg_regress suites
# and isolation specs against a throwaway cluster with 5 local Redis nodes,
# and the process-level TAP tests (which start their own cluster and nodes).
# Installs what it needs; stops everything it started; exits non-zero on
# any failure.
set -euo pipefail

# --long: the chaos soak runs 30 minutes (SOAK_MINUTES chooses another length;
# the default run soaks for about 40 s + 40 s control, see test/t/004_soak.pl)
if [ "${1:-}" = "--long" ]; then export SOAK_MINUTES="${SOAK_MINUTES:-30}"; fi
if [ -n "${SOAK_MINUTES:-}" ]; then export SOAK_SECONDS=$((SOAK_MINUTES * 60)); fi

top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"

bash test/install-deps.sh
export PATH="/usr/lib/postgresql/15/bin:$PATH"

make -s clean
make -s COPT='-Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers -Wno-sign-compare -Werror'
make -s install

work=$(mktemp -d /tmp/redlock-test.XXXXXX)
chmod 755 "$work"
cleanup() {
	bash "$top/test/redis-nodes.sh" stop "$work/redis" || true
	pkill -f "redis-server .*--dir $work" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

echo "== unit tests: quorum logic"
make -s unitcheck

echo "== pg_regress and isolation: 5 Redis nodes on 16379-16383"
bash test/redis-nodes.sh start "$work/redis" 16379 5
nodes="127.0.0.1:16379,127.0.0.1:16380,127.0.0.1:16381,127.0.0.1:16382,127.0.0.1:16383"
if ! pg_virtualenv -t -o "redlock.nodes=$nodes" -o shared_preload_libraries=redlock \
	sh -c 'make -s installcheck && bash test/readme-examples.sh'; then
	for f in regression.diffs output_iso/regression.diffs; do
		[ -f "$f" ] && cat "$f"
	done
	exit 1
fi
bash test/redis-nodes.sh stop "$work/redis"

echo "== TAP: process-level tests"
# PostgreSQL refuses to run as root: the TAP clusters run as postgres.
mkdir -p "$work/tap"
cp -r test/t test/perl "$work/tap/"
chown -R postgres: "$work/tap"
pgxs_test=$(dirname "$(pg_config --pgxs)")/../test
if [ "$(id -u)" -eq 0 ]; then
	as_pg=(runuser -u postgres --)
else
	as_pg=()
fi
(cd "$work/tap" && "${as_pg[@]}" env PATH="$PATH" TESTDIR="$work/tap" \
	PG_REGRESS="$pgxs_test/regress/pg_regress" \
	PERL5LIB="$pgxs_test/perl:$work/tap/perl" \
	prove ${PROVE_FLAGS:-} t/*.pl) || {
	find "$work/tap/tmp_check/log" -name 'regress_log_*' -exec tail -n 60 {} \; 2>/dev/null
	exit 1
}
echo "== all tests passed"
