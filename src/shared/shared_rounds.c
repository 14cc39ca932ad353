/*-------------------------------------------------------------------------
 *
 * shared_rounds.c
 *	  The rounds of concurrent sessions run on one connection per Redis
 *	  node, shared by the backends of the server: the dispatcher worker's
 *	  (workers/dispatcher.c).
 *
 * Each backend of its own costs every node a read and a write per round;
 * with many sessions the nodes spend their time on system calls.  The
 * dispatcher instead writes the commands of every queued round to a node
 * at once, and reads the replies in as few reads as they come
 * (rl_nodes_run_batch).  A session alone gains nothing from the extra hop,
 * so with redlock.shared_connections = auto (the default) a backend uses
 * the shared connections only while at least RL_SHARED_MIN_OTHERS other
 * rounds are under way; always uses them for every round that can, off
 * never.
 *
 * The node layer asks a round hook (shared_rounds_backend.c) before every
 * round of the backend (rl_nodes_run waits for the result, rl_nodes_send
 * does not).  A
 * round handed over goes into one of the backend's slots in shared memory:
 * the request itself, its arguments copied into the slot, so the worker
 * runs it in place (shared memory is at the same address in every process)
 * and its results land in the slot.  The slot's index goes into a ring
 * under a spinlock and the dispatcher's latch is set; the worker sets the
 * backend's latch once the round is decided.
 *
 * A slot is FREE, QUEUED (in the ring), RUNNING (taken by the worker) or
 * DONE (results ready for the backend that waits).  Every change of state
 * is a compare-and-exchange, after a write barrier for what it publishes:
 * a round given up by its backend while still queued is withdrawn
 * (QUEUED -> FREE), and the ring entries of withdrawn slots are skipped.
 * The same withdrawal takes back a round the worker has not taken within
 * the backend's node_timeout (a worker stopped or stuck): the backend runs
 * it on its own connections instead, as nothing of it reached a node, and
 * stays there until the worker has taken every ring entry it left (the
 * ring counts the entries taken, so the backend knows).
 * A round the backend no longer waits for (an error, a cancel, a timeout
 * while the worker runs it) is still completed by the worker; the slot is
 * taken again only once DONE.  A dispatcher that starts fails the rounds
 * its predecessor left RUNNING.
 *
 * Commands of one backend must reach each node in the order it sent them
 * (a release pipelined ahead of a lock, a lock ahead of its withdrawal):
 * so a backend does not go back and forth between its own connections and
 * the shared ones.  It moves onto the shared ones only when its own owe
 * nothing (rl_nodes_quiet), and back only when every round it handed over
 * is done and answered by every node: the greatest tag of its rounds that
 * the worker completed (recorded per backend) is below the oldest round
 * the worker's connections still owe a reply to, which the worker
 * publishes before it completes a round.  Until then a round that cannot
 * go through the worker waits, bounded, and fails unsent rather than
 * overtake one of the worker's.  Tags grow across workers: a new one tags
 * its rounds above every tag its predecessor completed, so it needs to
 * reset no tag and writes no slot but those left running.
 *
 * A round is handed over only if the dispatcher is ready on the same
 * settings as this backend (rl_nodes_settings_fingerprint: a database or
 * role may set other nodes; checked again under the ring's spinlock when
 * it is queued, so that a dispatcher that reloads new settings runs what
 * was queued under the old ones before it switches), the node list names
 * no server twice (the backend's own round raises RL004 for it), and it
 * fits a slot; probes,
 * no-reply commands and status replies (palloc'd text) stay on the
 * backend's own connections.  Nothing of the backend's waits without a
 * bound: a round the dispatcher took and does not finish (it stopped
 * answering, or exited) fails on every node instead.
 *
 * The slots take RL_SHARED_SLOTS_PER_BACKEND per PGPROC, about 16 kB each
 * (the request's results and its arguments): some 8 MB for max_connections
 * = 100.
 * This file keeps the memory and the worker's side; the backends' side is
 * in shared_rounds_backend.c.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"

#include "shared/shared_rounds_internal.h"

RlSharedRounds *rl_shared = NULL;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

/* The slots, the ring, the last tags and the kept commands (see the struct) */
static Size
shared_size(void)
{
	Size		nslots = mul_size(rl_shared_procs(), RL_SHARED_SLOTS_PER_BACKEND);
	Size		size;

	size = MAXALIGN(add_size(offsetof(RlSharedRounds, slots),
							 mul_size(nslots, sizeof(RlSharedSlot))));
	size = add_size(size, MAXALIGN(mul_size(nslots, sizeof(int))));
	size = add_size(size, MAXALIGN(mul_size(rl_shared_procs(),
											sizeof(pg_atomic_uint64))));
	return add_size(size, RL_SHARED_KEPT_BYTES);
}

static void
shared_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(shared_size());
}

static void
shared_shmem_startup(void)
{
	bool		found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	rl_shared = ShmemInitStruct("redlock shared rounds", shared_size(), &found);
	if (!found)
	{
		memset(rl_shared, 0, shared_size());
		SpinLockInit(&rl_shared->mutex);
		rl_shared->nslots = rl_shared_procs() * RL_SHARED_SLOTS_PER_BACKEND;
		rl_shared->dispatcher_procno = -1;
		pg_atomic_init_u32(&rl_shared->ready, 0);
		pg_atomic_init_u32(&rl_shared->duplicates, 0);
		pg_atomic_init_u64(&rl_shared->fingerprint, 0);
		pg_atomic_init_u64(&rl_shared->oldest_owed, PG_UINT64_MAX);
		pg_atomic_init_u64(&rl_shared->tag_high, 0);
		pg_atomic_init_u32(&rl_shared->rounds_in_flight, 0);
		pg_atomic_init_u64(&rl_shared->shared_rounds, 0);
		pg_atomic_init_u64(&rl_shared->own_rounds, 0);
		pg_atomic_init_u32(&rl_shared->own_permits, 0);
		pg_atomic_init_u32(&rl_shared->permit_waiters, 0);
		pg_atomic_init_u64(&rl_shared->permit_waits, 0);
		pg_atomic_init_u64(&rl_shared->permit_waits_failed, 0);
		for (int i = 0; i < rl_shared->nslots; i++)
			pg_atomic_init_u32(&rl_shared->slots[i].state, RL_SLOT_FREE);
		for (int i = 0; i < rl_shared_procs(); i++)
			pg_atomic_init_u64(&rl_shared_last_tags()[i], 0);
	}
	LWLockRelease(AddinShmemInitLock);
}

/* _PG_init, when preloaded: the slots in shared memory */
void
rl_shared_shmem_init(void)
{
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = shared_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = shared_shmem_startup;
}

/* ---------------------------------------------------------------- both */

/*
 * The round failed on every node it was to ask, with detail: the
 * dispatcher's failure, not the nodes', and the hint says so.  (Its
 * pointer is valid in every process: the library is preloaded.)  sent: it
 * may have reached them (the dispatcher took it); otherwise nothing of it
 * did, and each node reads as not asked (asked_us 0), so that nothing is
 * withdrawn where nothing was set.
 */
void
rl_shared_fail_request(RlRequest *req, int nnodes, bool sent,
					   const char *detail)
{
	int64_t		now = rl_now_us();
	RlVote		votes[RL_MAX_NODES];

	req->nnodes = Min(Max(nnodes, 0), RL_MAX_NODES);
	for (int i = 0; i < req->nnodes; i++)
	{
		RlNodeResult *res = &req->results[i];

		rl_node_result_init(res);
		res->vote = RL_VOTE_FAILED;
		res->asked_us = (sent && !req->skip[i]) ? now : 0;
		res->outcome = req->skip[i] ? RL_OUTCOME_NONE : RL_OUTCOME_OTHER;
		strlcpy(res->detail, req->skip[i] ? "not asked" : detail,
				sizeof(res->detail));
		if (!req->skip[i])
			res->hint = "The dispatcher worker, which runs this server's rounds on shared connections, is stalled or gone: it failed the round, not the nodes; see redlock_dispatcher and the server log (redlock.shared_connections = off keeps each session on its own connections).";
		votes[i] = res->vote;
	}
	req->tally = rl_tally(votes, req->nnodes);
	req->decision = rl_decide(req->nnodes, req->tally);
}

static RlSharedSlot *
slot_of(RlRequest *req)
{
	return (RlSharedSlot *) ((char *) req - offsetof(RlSharedSlot, req));
}

/*
 * from -> DONE, or FREE when nobody waits for it; sets the owner's latch.
 * The results are written before (the barrier).
 */
static void
slot_finish(RlSharedSlot *s, uint32 from)
{
	uint32		expected = from;
	bool		wait = s->wait;
	int			owner = s->owner;

	pg_write_barrier();
	if (pg_atomic_compare_exchange_u32(&s->state, &expected,
									   wait ? RL_SLOT_DONE : RL_SLOT_FREE) &&
		wait && owner >= 0 && owner < rl_shared_procs())
		SetLatch(rl_latch_of(owner));
}

/* -------------------------------------------------------------- worker */

static void
shared_detach(int code, Datum arg)
{
	SpinLockAcquire(&rl_shared->mutex);
	rl_shared->dispatcher_procno = -1;
	rl_shared->dispatcher_pid = 0;
	SpinLockRelease(&rl_shared->mutex);
	pg_atomic_write_u32(&rl_shared->ready, 0);
}

/*
 * The dispatcher starts: its latch is the one backends set; the rounds a
 * predecessor took and never finished fail; its rounds are tagged above
 * every tag a predecessor completed.  False without the shared memory
 * (not preloaded).
 */
bool
rl_shared_attach(void)
{
	if (rl_shared == NULL)
		return false;
	pg_atomic_write_u32(&rl_shared->ready, 0);
	before_shmem_exit(shared_detach, (Datum) 0);
	SpinLockAcquire(&rl_shared->mutex);
	rl_shared->dispatcher_procno = rl_my_procno();
	rl_shared->dispatcher_pid = MyProcPid;
	SpinLockRelease(&rl_shared->mutex);

	/*
	 * The predecessor's connections are closed: every round it sent is
	 * answered or failed.  Its tags stay in the backends' last tags, below
	 * every tag of ours: no slot is written but those it left running,
	 * which are the dispatcher's (a backend frees a running slot only while
	 * no dispatcher is attached, under the mutex).
	 */
	rl_nodes_tags_above(pg_atomic_read_u64(&rl_shared->tag_high));
	pg_atomic_write_u64(&rl_shared->oldest_owed, PG_UINT64_MAX);
	for (int i = 0; i < rl_shared->nslots; i++)
	{
		RlSharedSlot *s = &rl_shared->slots[i];

		if (pg_atomic_read_u32(&s->state) != RL_SLOT_RUNNING)
			continue;
		pg_read_barrier();
		rl_shared_fail_request(&s->req, s->nnodes, true,
					 "the dispatcher worker exited before answering");
		slot_finish(s, RL_SLOT_RUNNING);
	}
	return true;
}

/*
 * Which rounds the dispatcher takes: none (not ready), or those of the
 * backends whose settings have this fingerprint.  Written under the mutex,
 * under which rounds are queued: once it returns, no round of other
 * settings joins the ring.
 */
void
rl_shared_publish(bool ready, uint64_t fingerprint, bool duplicates)
{
	if (rl_shared == NULL)
		return;
	SpinLockAcquire(&rl_shared->mutex);
	if (!ready)
		pg_atomic_write_u32(&rl_shared->ready, 0);
	else
	{
		pg_atomic_write_u64(&rl_shared->fingerprint, fingerprint);
		pg_atomic_write_u32(&rl_shared->duplicates, duplicates ? 1 : 0);
		pg_write_barrier();
		pg_atomic_write_u32(&rl_shared->ready, 1);
	}
	SpinLockRelease(&rl_shared->mutex);
}

void
rl_shared_publish_oldest_owed(uint64_t oldest)
{
	if (rl_shared != NULL)
		pg_atomic_write_u64(&rl_shared->oldest_owed, oldest);
}

/*
 * Take up to max queued rounds, in the order queued, marked RUNNING.  A
 * round queued for other settings than the worker's fails at once.
 */
int
rl_shared_take(RlRequest **reqs, int max, uint64_t fingerprint)
{
	int			idx[RL_BATCH_INTAKE];
	int			n;
	int			out = 0;

	if (rl_shared == NULL)
		return 0;
	max = Min(max, RL_BATCH_INTAKE);
	SpinLockAcquire(&rl_shared->mutex);
	n = Min(rl_shared->count, max);
	for (int k = 0; k < n; k++)
	{
		idx[k] = rl_shared_ring()[rl_shared->head];
		rl_shared->head = (rl_shared->head + 1) % rl_shared->nslots;
	}
	rl_shared->count -= n;
	rl_shared->taken += n;
	SpinLockRelease(&rl_shared->mutex);

	for (int k = 0; k < n; k++)
	{
		RlSharedSlot *s;
		uint32		expected = RL_SLOT_QUEUED;

		if (idx[k] < 0 || idx[k] >= rl_shared->nslots)
			continue;
		s = &rl_shared->slots[idx[k]];
		/* withdrawn by its backend, or already taken: skipped */
		if (!pg_atomic_compare_exchange_u32(&s->state, &expected,
											RL_SLOT_RUNNING))
			continue;
		pg_read_barrier();
		if (s->fingerprint != fingerprint)
		{
			/* not queued so (rl_shared_queue_slot): never sent */
			rl_shared_fail_request(&s->req, s->nnodes, false,
						 "the dispatcher worker's node settings changed before the round ran");
			slot_finish(s, RL_SLOT_RUNNING);
			continue;
		}
		s->req.argv = s->argv;
		s->req.argvlen = s->argvlen;
		reqs[out++] = &s->req;
	}
	return out;
}

/*
 * The round is decided: back to its backend, its tag the backend's last
 * (and the highest, for a successor) before.
 */
void
rl_shared_complete(RlRequest *req)
{
	RlSharedSlot *s = slot_of(req);

	/* rounds of a batch end in any order: the greatest tag is the last */
	if (s->owner >= 0 && s->owner < rl_shared_procs() &&
		req->tag > pg_atomic_read_u64(&rl_shared_last_tags()[s->owner]))
		pg_atomic_write_u64(&rl_shared_last_tags()[s->owner], req->tag);
	if (req->tag > pg_atomic_read_u64(&rl_shared->tag_high))
		pg_atomic_write_u64(&rl_shared->tag_high, req->tag);
	slot_finish(s, RL_SLOT_RUNNING);
}

/*
 * The commands the dispatcher kept for nodes it could not reach, handed to
 * its successor in shared memory: each a record of its node's name and
 * the command (RL_SHARED_KEPT_BYTES in all: what does not fit is lost, as
 * when a node's own list of them overflows).  Only the dispatcher reads or
 * writes them, and one dispatcher runs at a time.
 */
typedef struct RlKeptRecord
{
	uint16		namelen;
	int32		cmdlen;
	/* then the name and the command */
} RlKeptRecord;

static void
save_kept(const char *node_name, const char *cmd, int len, void *arg)
{
	RlKeptRecord rec;
	char	   *at = rl_shared_kept() + rl_shared->kept_used;
	size_t		need;

	rec.namelen = (uint16) strlen(node_name);
	rec.cmdlen = len;
	need = sizeof(rec) + rec.namelen + len;
	if (len <= 0 || rl_shared->kept_used + need > RL_SHARED_KEPT_BYTES)
	{
		(*(int *) arg)++;
		return;
	}
	memcpy(at, &rec, sizeof(rec));
	memcpy(at + sizeof(rec), node_name, rec.namelen);
	memcpy(at + sizeof(rec) + rec.namelen, cmd, len);
	rl_shared->kept_used += need;
	rl_shared->nkept++;
}

/* The dispatcher exits, its connections closed: hand on what it kept. */
void
rl_shared_save_kept(void)
{
	int			lost = 0;

	if (rl_shared == NULL)
		return;

	rl_shared->nkept = 0;
	rl_shared->kept_used = 0;
	rl_nodes_hand_kept(save_kept, &lost);
	if (lost > 0)
		ereport(LOG,
				(errmsg_plural("%d release kept for an unreachable Redis node could not be handed to the next dispatcher",
							   "%d releases kept for unreachable Redis nodes could not be handed to the next dispatcher",
							   lost, lost),
				 errdetail("Their locks stay on those nodes until their TTL runs out.")));
}

/*
 * The dispatcher connects to its nodes: take what a predecessor kept, for
 * the nodes of the same names (the others' are dropped).
 */
void
rl_shared_load_kept(void)
{
	const char *at;
	char		name[RL_MAX_HOST_LEN + 16];

	if (rl_shared == NULL)
		return;
	at = rl_shared_kept();
	for (int i = 0; i < rl_shared->nkept; i++)
	{
		RlKeptRecord rec;

		memcpy(&rec, at, sizeof(rec));
		memcpy(name, at + sizeof(rec), Min(rec.namelen, sizeof(name) - 1));
		name[Min(rec.namelen, sizeof(name) - 1)] = '\0';
		(void) rl_nodes_take_kept(name, at + sizeof(rec) + rec.namelen,
								  rec.cmdlen);
		at += sizeof(rec) + rec.namelen + rec.cmdlen;
	}
	rl_shared->nkept = 0;
	rl_shared->kept_used = 0;
}

/*
 * Rounds run on the shared connections and on the backends' own since the
 * server started; false without the shared memory.
 */
bool
rl_shared_rounds_counts(uint64_t *shared_count, uint64_t *own_count)
{
	if (rl_shared == NULL)
	{
		*shared_count = *own_count = 0;
		return false;
	}
	*shared_count = pg_atomic_read_u64(&rl_shared->shared_rounds);
	*own_count = pg_atomic_read_u64(&rl_shared->own_rounds);
	return true;
}

