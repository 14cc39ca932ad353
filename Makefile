# redlock: PGXS build
EXTENSION = redlock
MODULE_big = redlock
OBJS = \
	src/redlock.o \
	src/guc.o \
	src/guc_net.o \
	src/node_list.o \
	src/quorum.o \
	src/node_conn.o \
	src/node_sock.o \
	src/node_tls.o \
	src/node_resolve.o \
	src/node_pipeline.o \
	src/node_script.o \
	src/node_round.o \
	src/node_wait.o \
	src/node_server.o \
	src/node_report.o \
	src/protocol.o \
	src/protocol_extend.o \
	src/protocol_handoff.o \
	src/protocol_release.o \
	src/registry.o \
	src/lifecycle.o \
	src/lease_sql.o \
	src/lease_wait.o \
	src/handoff.o \
	src/handoff_remote.o \
	src/lock_table.o \
	src/lock_table_keep.o \
	src/lock_table_index.o \
	src/restart_memory.o \
	src/locks_view.o \
	src/wait_events.o \
	src/worker.o \
	src/wakeup.o \
	src/stats.o \
	src/health.o \
	src/fence.o \
	src/fence_refuse.o
DATA = sql/redlock--1.0.sql sql/redlock--1.0--1.1.sql
PGFILEDESC = "redlock - Redlock quorum leases with fencing tokens"

# hiredis: the system's by default; another one with e.g.
#   make HIREDIS_CFLAGS=-I/opt/hiredis/include \
#        HIREDIS_LIBS='-L/opt/hiredis/lib -Wl,-rpath,/opt/hiredis/lib -lhiredis'
HIREDIS_CFLAGS ?=
HIREDIS_LIBS ?= -lhiredis
PG_CPPFLAGS = -I$(srcdir)/src $(HIREDIS_CFLAGS)
SHLIB_LINK = $(HIREDIS_LIBS) -lcares -lssl -lcrypto

# pg_regress suites: sql/ and expected/
REGRESS = lease_api fence operations
REGRESS_OPTS = --inputdir=. --load-extension=redlock

# isolation specs: test/specs and test/expected
ISOLATION = lease_contention lease_wakeup lease_wait_cancel fence_rc fence_rr fence_ser fence_pause
ISOLATION_OPTS = --inputdir=test --outputdir=output_iso --load-extension=redlock

EXTRA_CLEAN = output_iso test/unit/test_quorum

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

# A VPATH build (Debian's pg_buildext builds in build-MAJOR/, see debian/)
# puts the objects under src/ of the build directory: make it.
ifdef VPATH
$(shell mkdir -p src)
endif

# PGXS tracks no header dependencies: rebuild every object when one of our
# headers changes (a struct layout change must never mix old and new code).
$(OBJS): $(wildcard $(srcdir)/src/*.h)

# Unit tests of the pure quorum logic: no server, no Redis.
test/unit/test_quorum: test/unit/test_quorum.c src/quorum.c src/quorum.h
	$(CC) -std=c99 -O2 -Wall -Wextra -I$(srcdir)/src -o $@ test/unit/test_quorum.c src/quorum.c

.PHONY: unitcheck
unitcheck: test/unit/test_quorum
	./test/unit/test_quorum
