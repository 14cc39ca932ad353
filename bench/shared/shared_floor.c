/*-------------------------------------------------------------------------
 *
 * shared_floor.c
 *	  The floor of a design redlock does not have: one connection per Redis
 *	  node shared by every backend of a server, owned by a background worker.
 *	  A backend puts the command of its round in a shared-memory slot, queues
 *	  the slot and sets the worker's latch; the worker appends every queued
 *	  command to each node's connection, writes each node's batch in one
 *	  write, reads the replies in as few reads as the kernel allows, counts
 *	  them per slot and sets the backend's latch once the majority answered.
 *	  Built and run by bench/targets.sh (beside issue 18's target 4:
 *	  16 sessions against node-redlock's 16 workers over 5 pipelined
 *	  connections); not part of the extension, and not a lock service: no
 *	  lock table, no registry, no fencing choice, no failure handling beyond
 *	  a deadline.  What it measures is what such a network layer would cost
 *	  at least, against redlock's connections of each backend.
 *
 *	  shared_floor_cycle(lock_key, counter_key, owner, ttl_ms, prefix,
 *	  epoch_key, quarantine_ms) runs one
 *	  acquire round and one release round with the scripts whose SHA1s are
 *	  shared_floor.acquire_sha and shared_floor.release_sha (the commands of
 *	  redlock_try_lock and redlock_unlock as the bench captured them, their
 *	  arguments in the same places), each to every node of
 *	  shared_floor.nodes, and returns whether the acquire was granted by a
 *	  majority (the release then ran); a majority refusal returns false.
 *	  shared_floor_acquire(lock_key, counter_key, owner, ttl_ms, epoch_key,
 *	  quarantine_ms) and shared_floor_release(lock_key, owner, prefix,
 *	  epoch_key, quarantine_ms) run one of the two rounds each: a cycle of
 *	  two statements, as redlock_lock and redlock_unlock.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <fcntl.h>
#include <sys/time.h>

#include <hiredis/hiredis.h>

#include "access/twophase.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "port/atomics.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/fd.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/wait_event.h"

PG_MODULE_MAGIC;

#define SF_MAX_NODES 16
#define SF_CMD_MAX 1024
#define SF_WAIT_MS 5000

enum
{
	SLOT_FREE,					/* the backend may write it */
	SLOT_QUEUED,				/* the worker counts its replies */
	SLOT_DONE					/* counted: ok and replies are final */
};

typedef struct SfSlot
{
	pg_atomic_uint32 state;
	uint32		gen;			/* which request of the slot a reply is for */
	Latch	   *latch;
	int			len;
	int			replies;
	int			ok;
	char		cmd[SF_CMD_MAX];
} SfSlot;

typedef struct SfShared
{
	slock_t		mutex;			/* the ring */
	Latch	   *worker_latch;	/* NULL until the worker is connected */
	int			nnodes;			/* set by the worker */
	int			nslots;
	uint32		head;			/* next to take (worker) */
	uint32		tail;			/* next to fill (backends) */
	int		   *ring;			/* nslots entries, after the slots */
	SfSlot		slots[FLEXIBLE_ARRAY_MEMBER];
} SfShared;

/* a command the worker is owed a reply for, per node, in order */
typedef struct SfOwed
{
	int			slot;
	uint32		gen;
} SfOwed;

typedef struct SfNode
{
	redisContext *ctx;
	SfOwed	   *owed;
	int			owed_cap;
	int			owed_head;
	int			owed_n;
	int			event;			/* position in the WaitEventSet */
	bool		writing;		/* waiting for room to write */
} SfNode;

void		_PG_init(void);
PGDLLEXPORT void shared_floor_main(Datum arg);

static char *sf_nodes = NULL;
static char *sf_acquire_sha = NULL;
static char *sf_release_sha = NULL;
static SfShared *sf = NULL;
static shmem_request_hook_type prev_shmem_request = NULL;
static shmem_startup_hook_type prev_shmem_startup = NULL;
static int64 sf_last_proposal = 0;

static int
sf_nslots(void)
{
	return MaxBackends + NUM_AUXILIARY_PROCS + max_prepared_xacts;
}

static Size
sf_size(void)
{
	int			n = sf_nslots();

	return add_size(add_size(offsetof(SfShared, slots), mul_size(n, sizeof(SfSlot))),
					mul_size(n, sizeof(int)));
}

static void
sf_shmem_request(void)
{
	if (prev_shmem_request)
		prev_shmem_request();
	RequestAddinShmemSpace(sf_size());
}

static void
sf_shmem_startup(void)
{
	bool		found;

	if (prev_shmem_startup)
		prev_shmem_startup();
	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	sf = ShmemInitStruct("shared_floor", sf_size(), &found);
	if (!found)
	{
		memset(sf, 0, sf_size());
		SpinLockInit(&sf->mutex);
		sf->nslots = sf_nslots();
		for (int i = 0; i < sf->nslots; i++)
			pg_atomic_init_u32(&sf->slots[i].state, SLOT_FREE);
	}
	sf->ring = (int *) &sf->slots[sf->nslots];
	LWLockRelease(AddinShmemInitLock);
}

void
_PG_init(void)
{
	BackgroundWorker worker;

	if (!process_shared_preload_libraries_in_progress)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("shared_floor must be loaded via shared_preload_libraries")));

	DefineCustomStringVariable("shared_floor.nodes",
							   "The Redis nodes, host:port,host:port,...",
							   NULL, &sf_nodes, "", PGC_POSTMASTER, 0,
							   NULL, NULL, NULL);
	DefineCustomStringVariable("shared_floor.acquire_sha",
							   "SHA1 of the acquire script.",
							   NULL, &sf_acquire_sha, "", PGC_POSTMASTER, 0,
							   NULL, NULL, NULL);
	DefineCustomStringVariable("shared_floor.release_sha",
							   "SHA1 of the release script.",
							   NULL, &sf_release_sha, "", PGC_POSTMASTER, 0,
							   NULL, NULL, NULL);
	MarkGUCPrefixReserved("shared_floor");

	prev_shmem_request = shmem_request_hook;
	shmem_request_hook = sf_shmem_request;
	prev_shmem_startup = shmem_startup_hook;
	shmem_startup_hook = sf_shmem_startup;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS;
	worker.bgw_start_time = BgWorkerStart_PostmasterStart;
	worker.bgw_restart_time = 1;
	snprintf(worker.bgw_library_name, BGW_MAXLEN, "shared_floor");
	snprintf(worker.bgw_function_name, BGW_MAXLEN, "shared_floor_main");
	snprintf(worker.bgw_name, BGW_MAXLEN, "shared_floor connections");
	snprintf(worker.bgw_type, BGW_MAXLEN, "shared_floor");
	RegisterBackgroundWorker(&worker);
}

/* ---------------------------------------------------------------- worker */

static SfNode nodes[SF_MAX_NODES];
static int	nnodes;

static void
sf_connect_all(void)
{
	char	   *list = pstrdup(sf_nodes);
	char	   *save = NULL;

	for (char *tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
	{
		char	   *colon = strrchr(tok, ':');
		struct timeval tv = {2, 0};
		redisContext *c;
		int			flags;

		if (colon == NULL || nnodes == SF_MAX_NODES)
			elog(FATAL, "shared_floor.nodes: bad entry \"%s\"", tok);
		*colon = '\0';
		if (!AcquireExternalFD())
			elog(FATAL, "shared_floor: out of file descriptors");
		c = redisConnectWithTimeout(tok, atoi(colon + 1), tv);
		if (c == NULL || c->err)
			elog(FATAL, "shared_floor: could not connect to %s:%s: %s",
				 tok, colon + 1, c ? c->errstr : "out of memory");
		flags = fcntl(c->fd, F_GETFL);
		if (flags < 0 || fcntl(c->fd, F_SETFL, flags | O_NONBLOCK) < 0)
			elog(FATAL, "shared_floor: fcntl: %m");
		c->flags &= ~REDIS_BLOCK;
		nodes[nnodes].ctx = c;
		nodes[nnodes].owed_cap = 1024;
		nodes[nnodes].owed = palloc(sizeof(SfOwed) * 1024);
		nnodes++;
	}
	if (nnodes == 0)
		elog(FATAL, "shared_floor.nodes is empty");
}

static void
sf_owe(SfNode *n, int slot, uint32 gen)
{
	if (n->owed_n == n->owed_cap)
	{
		SfOwed	   *bigger = palloc(sizeof(SfOwed) * n->owed_cap * 2);

		for (int i = 0; i < n->owed_n; i++)
			bigger[i] = n->owed[(n->owed_head + i) % n->owed_cap];
		pfree(n->owed);
		n->owed = bigger;
		n->owed_head = 0;
		n->owed_cap *= 2;
	}
	n->owed[(n->owed_head + n->owed_n) % n->owed_cap] = (SfOwed) {slot, gen};
	n->owed_n++;
}

/* a reply for the oldest command owed on node n */
static void
sf_count(SfNode *n, redisReply *reply)
{
	SfOwed		o;
	SfSlot	   *s;
	int			majority = nnodes / 2 + 1;

	if (n->owed_n == 0)
		elog(FATAL, "shared_floor: a reply nobody asked for");
	o = n->owed[n->owed_head];
	n->owed_head = (n->owed_head + 1) % n->owed_cap;
	n->owed_n--;
	s = &sf->slots[o.slot];
	/* the state first: a backend sets the generation before it queues */
	if (pg_atomic_read_u32(&s->state) != SLOT_QUEUED)
		return;					/* late: the round ended at its majority */
	pg_read_barrier();
	if (s->gen != o.gen)
		return;					/* late: the slot's next round is on */
	s->replies++;
	if (reply->type != REDIS_REPLY_ERROR && reply->type != REDIS_REPLY_NIL)
		s->ok++;
	if (s->ok >= majority || s->replies - s->ok > nnodes - majority)
	{
		pg_write_barrier();
		pg_atomic_write_u32(&s->state, SLOT_DONE);
		SetLatch(s->latch);
	}
}

/* every queued slot's command, appended to every node's output */
static void
sf_take_queue(void)
{
	for (;;)
	{
		int			slot;
		SfSlot	   *s;

		SpinLockAcquire(&sf->mutex);
		if (sf->head == sf->tail)
		{
			SpinLockRelease(&sf->mutex);
			return;
		}
		slot = sf->ring[sf->head % sf->nslots];
		sf->head++;
		SpinLockRelease(&sf->mutex);
		s = &sf->slots[slot];
		pg_read_barrier();
		for (int i = 0; i < nnodes; i++)
		{
			if (redisAppendFormattedCommand(nodes[i].ctx, s->cmd, s->len) != REDIS_OK)
				elog(FATAL, "shared_floor: out of memory");
			sf_owe(&nodes[i], slot, s->gen);
		}
	}
}

static void
sf_write(WaitEventSet *set, SfNode *n)
{
	int			done = 0;

	if (redisBufferWrite(n->ctx, &done) != REDIS_OK)
		elog(FATAL, "shared_floor: write: %s", n->ctx->errstr);
	if (!done != n->writing)
	{
		n->writing = !done;
		ModifyWaitEvent(set, n->event,
						WL_SOCKET_READABLE | (n->writing ? WL_SOCKET_WRITEABLE : 0),
						NULL);
	}
}

static void
sf_read(SfNode *n)
{
	void	   *reply;

	if (redisBufferRead(n->ctx) != REDIS_OK)
		elog(FATAL, "shared_floor: read: %s", n->ctx->errstr);
	for (;;)
	{
		if (redisGetReplyFromReader(n->ctx, &reply) != REDIS_OK)
			elog(FATAL, "shared_floor: protocol error: %s", n->ctx->errstr);
		if (reply == NULL)
			return;
		sf_count(n, reply);
		freeReplyObject(reply);
	}
}

static void
sf_worker_exit(int code, Datum arg)
{
	sf->worker_latch = NULL;
}

void
shared_floor_main(Datum arg)
{
	WaitEventSet *set;
	WaitEvent	events[SF_MAX_NODES + 1];

	pqsignal(SIGTERM, SignalHandlerForShutdownRequest);
	pqsignal(SIGHUP, SIG_IGN);
	BackgroundWorkerUnblockSignals();

	sf_connect_all();
	set = CreateWaitEventSet(TopMemoryContext, nnodes + 1);
	AddWaitEventToSet(set, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, NULL);
	for (int i = 0; i < nnodes; i++)
		nodes[i].event = AddWaitEventToSet(set, WL_SOCKET_READABLE,
										   nodes[i].ctx->fd, NULL, &nodes[i]);
	sf->nnodes = nnodes;
	pg_write_barrier();
	sf->worker_latch = MyLatch;
	before_shmem_exit(sf_worker_exit, 0);

	while (!ShutdownRequestPending)
	{
		int			n = WaitEventSetWait(set, -1, events, lengthof(events),
										 PG_WAIT_EXTENSION);

		for (int e = 0; e < n; e++)
		{
			if (events[e].events & WL_LATCH_SET)
				ResetLatch(MyLatch);
			else if (events[e].events & WL_SOCKET_READABLE)
				sf_read(events[e].user_data);
		}
		/* whatever came in while we read goes out in the same writes */
		sf_take_queue();
		for (int i = 0; i < nnodes; i++)
			sf_write(set, &nodes[i]);
	}
	proc_exit(0);
}

/* ---------------------------------------------------------------- backend */

static void
resp_arg(StringInfo buf, const char *s, int len)
{
	appendStringInfo(buf, "$%d\r\n", len);
	appendBinaryStringInfo(buf, s, len);
	appendBinaryStringInfo(buf, "\r\n", 2);
}

/* waits until the slot is no longer in state "while", or errors out */
static void
sf_wait(SfSlot *s, uint32 while_state, TimestampTz deadline)
{
	while (pg_atomic_read_u32(&s->state) == while_state)
	{
		long		left = TimestampDifferenceMilliseconds(GetCurrentTimestamp(), deadline);

		if (left <= 0)
			ereport(ERROR,
					(errcode(ERRCODE_CONNECTION_FAILURE),
					 errmsg("no majority of replies within %d ms", SF_WAIT_MS)));
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 left, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
}

/* one round: whether a majority replied neither an error nor nil */
static bool
sf_round(StringInfo cmd)
{
	int			me;
	int			ok;
	SfSlot	   *s;
	TimestampTz deadline = GetCurrentTimestamp() + SF_WAIT_MS * INT64CONST(1000);
	Latch	   *worker = sf->worker_latch;

#if PG_VERSION_NUM >= 170000
	me = MyProcNumber;
#else
	me = MyProc->pgprocno;
#endif
	s = &sf->slots[me];
	if (worker == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the shared_floor worker is not connected")));
	if (cmd->len > SF_CMD_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("command too long")));
	/* a round left by an error ends at its majority or when all answered */
	sf_wait(s, SLOT_QUEUED, deadline);
	s->latch = MyLatch;
	if (pg_atomic_read_u32(&s->state) == SLOT_DONE)
		pg_atomic_write_u32(&s->state, SLOT_FREE);
	memcpy(s->cmd, cmd->data, cmd->len);
	s->len = cmd->len;
	s->replies = s->ok = 0;
	s->gen++;
	pg_write_barrier();
	pg_atomic_write_u32(&s->state, SLOT_QUEUED);
	SpinLockAcquire(&sf->mutex);
	sf->ring[sf->tail % sf->nslots] = me;
	sf->tail++;
	SpinLockRelease(&sf->mutex);
	SetLatch(worker);

	sf_wait(s, SLOT_QUEUED, deadline);
	pg_read_barrier();
	ok = s->ok;
	pg_atomic_write_u32(&s->state, SLOT_FREE);
	return ok >= sf->nnodes / 2 + 1;
}

/* the acquire command of lock, as the extension sends it */
static void
sf_acquire_cmd(StringInfo cmd, text *lock, text *counter, text *owner,
			   int32 ttl, text *epoch, int32 quarantine)
{
	char		num[32];
	struct timeval tv;
	int64		proposal;

	gettimeofday(&tv, NULL);
	proposal = Max((int64) tv.tv_sec * 1000000 + tv.tv_usec, sf_last_proposal + 1);
	sf_last_proposal = proposal;

	appendStringInfoString(cmd, "*10\r\n");
	resp_arg(cmd, "EVALSHA", 7);
	resp_arg(cmd, sf_acquire_sha, strlen(sf_acquire_sha));
	resp_arg(cmd, "2", 1);
	resp_arg(cmd, VARDATA_ANY(lock), VARSIZE_ANY_EXHDR(lock));
	resp_arg(cmd, VARDATA_ANY(counter), VARSIZE_ANY_EXHDR(counter));
	resp_arg(cmd, VARDATA_ANY(owner), VARSIZE_ANY_EXHDR(owner));
	resp_arg(cmd, num, snprintf(num, sizeof(num), "%d", ttl));
	resp_arg(cmd, num, snprintf(num, sizeof(num), INT64_FORMAT, proposal));
	resp_arg(cmd, VARDATA_ANY(epoch), VARSIZE_ANY_EXHDR(epoch));
	resp_arg(cmd, num, snprintf(num, sizeof(num), "%d", quarantine));
}

/* the release command of lock, as the extension sends it */
static void
sf_release_cmd(StringInfo cmd, text *lock, text *owner, text *prefix,
			   text *epoch, int32 quarantine)
{
	char		num[32];

	appendStringInfoString(cmd, "*8\r\n");
	resp_arg(cmd, "EVALSHA", 7);
	resp_arg(cmd, sf_release_sha, strlen(sf_release_sha));
	resp_arg(cmd, "1", 1);
	resp_arg(cmd, VARDATA_ANY(lock), VARSIZE_ANY_EXHDR(lock));
	resp_arg(cmd, VARDATA_ANY(owner), VARSIZE_ANY_EXHDR(owner));
	resp_arg(cmd, VARDATA_ANY(prefix), VARSIZE_ANY_EXHDR(prefix));
	resp_arg(cmd, VARDATA_ANY(epoch), VARSIZE_ANY_EXHDR(epoch));
	resp_arg(cmd, num, snprintf(num, sizeof(num), "%d", quarantine));
}

PG_FUNCTION_INFO_V1(shared_floor_cycle);

Datum
shared_floor_cycle(PG_FUNCTION_ARGS)
{
	text	   *lock = PG_GETARG_TEXT_PP(0);
	text	   *owner = PG_GETARG_TEXT_PP(2);
	text	   *epoch = PG_GETARG_TEXT_PP(5);
	int32		quarantine = PG_GETARG_INT32(6);
	StringInfoData cmd;

	initStringInfo(&cmd);
	sf_acquire_cmd(&cmd, lock, PG_GETARG_TEXT_PP(1), owner, PG_GETARG_INT32(3),
				   epoch, quarantine);
	if (!sf_round(&cmd))
		PG_RETURN_BOOL(false);
	resetStringInfo(&cmd);
	sf_release_cmd(&cmd, lock, owner, PG_GETARG_TEXT_PP(4), epoch, quarantine);
	PG_RETURN_BOOL(sf_round(&cmd));
}

/* the two rounds of a cycle apart, for a cycle of two statements */
PG_FUNCTION_INFO_V1(shared_floor_acquire);

Datum
shared_floor_acquire(PG_FUNCTION_ARGS)
{
	StringInfoData cmd;

	initStringInfo(&cmd);
	sf_acquire_cmd(&cmd, PG_GETARG_TEXT_PP(0), PG_GETARG_TEXT_PP(1),
				   PG_GETARG_TEXT_PP(2), PG_GETARG_INT32(3),
				   PG_GETARG_TEXT_PP(4), PG_GETARG_INT32(5));
	PG_RETURN_BOOL(sf_round(&cmd));
}

PG_FUNCTION_INFO_V1(shared_floor_release);

Datum
shared_floor_release(PG_FUNCTION_ARGS)
{
	StringInfoData cmd;

	initStringInfo(&cmd);
	sf_release_cmd(&cmd, PG_GETARG_TEXT_PP(0), PG_GETARG_TEXT_PP(1),
				   PG_GETARG_TEXT_PP(2), PG_GETARG_TEXT_PP(3),
				   PG_GETARG_INT32(4));
	PG_RETURN_BOOL(sf_round(&cmd));
}
