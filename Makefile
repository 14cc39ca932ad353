# redlock: PGXS build
EXTENSION = redlock
MODULE_big = redlock
# src/ is built in layers, lowest first (ARCHITECTURE.md; test/check-layers.sh)
OBJS = \
	src/base/guc.o \
	src/base/guc_net.o \
	src/base/guc_wait.o \
	src/base/node_list.o \
	src/base/quorum.o \
	src/base/wait_events.o \
	src/net/node_table.o \
	src/net/node_report.o \
	src/net/node_tls.o \
	src/net/node_sock.o \
	src/net/node_resolve.o \
	src/net/node_script.o \
	src/net/node_queue.o \
	src/net/node_fail.o \
	src/net/node_server.o \
	src/net/node_pipeline.o \
	src/net/node_conn.o \
	src/net/node_wait.o \
	src/net/node_round.o \
	src/net/node_batch.o \
	src/protocol/protocol_values.o \
	src/protocol/protocol_acquire.o \
	src/protocol/protocol_extend.o \
	src/protocol/protocol_handoff.o \
	src/protocol/protocol_release.o \
	src/protocol/protocol_multi.o \
	src/protocol/protocol_shared.o \
	src/shared/lock_table_index.o \
	src/shared/lock_table.o \
	src/shared/lock_table_keep.o \
	src/shared/lock_table_remote.o \
	src/shared/lock_table_handoff.o \
	src/shared/lock_table_place.o \
	src/shared/lock_table_workers.o \
	src/shared/health_memory.o \
	src/shared/stats.o \
	src/shared/shared_rounds.o \
	src/shared/shared_rounds_backend.o \
	src/shared/shared_rounds_permits.o \
	src/shared/shared_rounds_queue.o \
	src/lease/registry.o \
	src/lease/lease_report.o \
	src/lease/lease_handoff.o \
	src/lease/lease_release.o \
	src/lease/lifecycle.o \
	src/lease/session_nodes.o \
	src/lease/lease_wait.o \
	src/lease/lease_acquire.o \
	src/lease/lease_multi.o \
	src/lease/lease_multi_wait.o \
	src/lease/lease_shared.o \
	src/sql/module.o \
	src/sql/lease_sql.o \
	src/sql/lease_multi_sql.o \
	src/sql/lease_shared_sql.o \
	src/sql/locks_view.o \
	src/sql/nodes_view.o \
	src/sql/health.o \
	src/sql/holder.o \
	src/sql/fence_config.o \
	src/sql/fence_resource.o \
	src/sql/fence.o \
	src/sql/fence_refuse.o \
	src/sql/dispatcher_view.o \
	src/workers/worker.o \
	src/workers/wakeup.o \
	src/workers/dispatcher.o
DATA = sql/redlock--1.0.sql sql/redlock--1.0--1.1.sql sql/redlock--1.1--1.2.sql
PGFILEDESC = "redlock - Redlock quorum leases with fencing tokens"

# hiredis: the system's by default; another one with e.g.
#   make HIREDIS_CFLAGS=-I/opt/hiredis/include \
#        HIREDIS_LIBS='-L/opt/hiredis/lib -Wl,-rpath,/opt/hiredis/lib -lhiredis'
HIREDIS_CFLAGS ?=
HIREDIS_LIBS ?= -lhiredis
PG_CPPFLAGS = -I$(srcdir)/src $(HIREDIS_CFLAGS)
SHLIB_LINK = $(HIREDIS_LIBS) -lcares -lssl -lcrypto

# pg_regress suites: sql/ and expected/
REGRESS = lease_api fence fence_resource operations multi shared
REGRESS_OPTS = --inputdir=. --load-extension=redlock

# isolation specs: test/specs and test/expected
ISOLATION = lease_contention lease_wakeup lease_wait_cancel lease_multi lease_shared fence_rc fence_rr fence_ser fence_pause
ISOLATION_OPTS = --inputdir=test --outputdir=output_iso --load-extension=redlock

EXTRA_CLEAN = output_iso test/unit/test_quorum

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

# A VPATH build (Debian's pg_buildext builds in build-MAJOR/, see debian/)
# puts the objects under src/'s folders of the build directory: make them.
ifdef VPATH
$(shell mkdir -p $(sort $(dir $(OBJS))))
endif

# PGXS tracks no header dependencies: rebuild every object when one of our
# headers changes (a struct layout change must never mix old and new code).
$(OBJS): $(wildcard $(srcdir)/src/*/*.h)

# Unit tests of the pure quorum logic: no server, no Redis.
test/unit/test_quorum: test/unit/test_quorum.c src/base/quorum.c src/base/quorum.h
	$(CC) -std=c99 -O2 -Wall -Wextra -I$(srcdir)/src -o $@ test/unit/test_quorum.c src/base/quorum.c

.PHONY: unitcheck
unitcheck: test/unit/test_quorum
	./test/unit/test_quorum
