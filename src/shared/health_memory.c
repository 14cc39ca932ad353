/*-------------------------------------------------------------------------
 *
 * health_memory.c
 *	  The health of every Redis node as the whole server sees it, in shared
 *	  memory: requests, failures by kind, the last error and the last
 *	  success, and whether the node is failing now; one LOG line when it
 *	  starts failing and one when it is healthy again, for the server.
 *
 * Each backend and worker knows only its own connections, so a failing
 * minority of nodes stays invisible until a lease is refused, and each
 * backend logs its own "stopped answering".  With shared_preload_libraries
 * the network layer tells every request's outcome, and every failure of a
 * connection outside a request, to the hook registered here
 * (rl_nodes_set_health_hook), and leaves the log to it.  Nothing asks a
 * node for this: redlock_stats_nodes reads what requests met.
 *
 * A node turns failing when a request sent after its last success fails,
 * or a connection to it fails (refused, lost, given up after a silence,
 * TLS, name lookup; an error reply; a wrong answer).  A request that is
 * merely late (node_timeout passed, the connection kept) is counted as a
 * timeout but changes nothing: on a busy machine that happens to healthy
 * nodes, and the connection is given up, which does count, if the silence
 * lasts.  A failing node is healthy again when a request sent after its
 * last failure succeeds; after an error reply or a wrong answer, a request
 * of the same command must succeed: a node out of memory refuses the lock
 * script but runs the release, which must not make it look healthy.  Times
 * of sending, not of the outcomes' arrival, decide, so that the late report
 * of an old request does not undo a newer one.  Each transition is made
 * once, under the entry's spinlock.
 *
 * The log gets a line when a node starts failing and one when it is
 * healthy again, for the whole server, but at most one per node every
 * RL_HEALTH_LOG_GAP_MS: a node that flaps (a maxclients limit reached and
 * left again, memory that fills and frees) would otherwise write a line
 * pair per request.  A change within the gap is folded, counted, and told
 * with the next line; and the first event after the gap writes that line
 * if the log does not say the node's state yet or changes were folded, so
 * that the log's last word on a node is its state, a gap late at most.  The process that took the event
 * decides under the entry's spinlock, and writes the line after.
 *
 * The table has RL_HEALTH_NODES entries; a new name takes a free entry or
 * the one heard of longest ago.  Names are taken under the LWLock held
 * exclusively and looked up with it shared; an entry's figures change
 * under its spinlock.  Nothing here raises: the hook runs on commit, abort
 * and exit paths.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/timestamp.h"

#include "shared/health_memory.h"

#define RL_HEALTH_LOG_GAP_MS	5000

typedef struct RlHealthEntry
{
	slock_t		mutex;			/* guards h, but for h.node (the LWLock) */
	RlNodeHealth h;
} RlHealthEntry;

typedef struct RlHealthMemory
{
	LWLock	   *lock;
	RlHealthEntry entries[RL_HEALTH_NODES];
} RlHealthMemory;

static RlHealthMemory *health = NULL;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

/* The node's entry, or NULL; the caller holds the LWLock. */
static RlHealthEntry *
find_entry(const char *node)
{
	for (int i = 0; i < RL_HEALTH_NODES; i++)
		if (strcmp(health->entries[i].h.node, node) == 0)
			return &health->entries[i];
	return NULL;
}

/*
 * An entry for a node not in the table: a free one, or the one heard of
 * longest ago.  The caller holds the LWLock exclusively.
 */
static RlHealthEntry *
take_entry(const char *node, TimestampTz now)
{
	RlHealthEntry *e = &health->entries[0];

	for (int i = 1; i < RL_HEALTH_NODES && e->h.node[0] != '\0'; i++)
		if (health->entries[i].h.node[0] == '\0' ||
			health->entries[i].h.heard_us < e->h.heard_us)
			e = &health->entries[i];
	memset(&e->h, 0, sizeof(e->h));
	strlcpy(e->h.node, node, sizeof(e->h.node));
	e->h.tracked_since = now;
	return e;
}

/*
 * Take the event into the node's figures.  Returns +1 when it made the
 * node failing, -1 when it made it healthy again, 0 otherwise; since says
 * since when it had been failing.
 */
static int
take_event(RlNodeHealth *h, const RlNodeEvent *ev, TimestampTz now,
		   int64 now_us, TimestampTz *since)
{
	uint32		command;

	h->heard_us = now_us;
	if (ev->request)
		h->requests++;
	if (ev->ident != NULL)
	{
		const RlServerIdent *id = ev->ident;
		int64		left_ms;

		/* the node's clock now, from when its epoch was read */
		left_ms = rl_epoch_quarantine_left_ms(&id->epoch,
											  id->epoch_node_now_ms +
											  (now_us - id->epoch_read_us) / 1000,
											  rl_restart_quarantine_ms);
		h->epoch_known = true;
		h->epoch = id->epoch;
		h->quarantined_until = left_ms > 0 ? now + left_ms * 1000 : 0;
	}
	if (ev->outcome == RL_OUTCOME_SUCCESS)
	{
		h->last_success_at = now;
		h->success_began_us = Max(h->success_began_us, ev->began_us);
		if (h->failing && ev->began_us > h->fail_began_us &&
			(h->failing_command == 0 || h->failing_command == ev->command))
		{
			h->failing = false;
			*since = h->failing_since;
			return -1;
		}
		return 0;
	}
	if (ev->outcome == RL_OUTCOME_NONE)
		return 0;

	/* a failure; a late answer counts as a timeout and changes nothing */
	h->errors[(ev->outcome == RL_OUTCOME_LATE ? RL_OUTCOME_TIMEOUT :
			   ev->outcome) - RL_OUTCOME_FIRST_ERROR]++;
	h->last_error_at = now;
	strlcpy(h->last_error, ev->error != NULL ? ev->error : "",
			sizeof(h->last_error));
	if (ev->outcome == RL_OUTCOME_LATE)
		return 0;
	h->fail_began_us = Max(h->fail_began_us, ev->began_us);
	command = ev->request && (ev->outcome == RL_OUTCOME_REDIS_ERROR ||
							  ev->outcome == RL_OUTCOME_OTHER) ? ev->command : 0;
	if (h->failing)
	{
		/*
		 * The last request that failed says what must succeed now; a
		 * connection lost outside any request says nothing of that.
		 */
		if (ev->request)
			h->failing_command = command;
		return 0;
	}
	if (ev->began_us < h->success_began_us)
		return 0;				/* older than a success seen since */
	h->failing_command = command;
	h->failing = true;
	h->failing_since = now;
	return 1;
}

/*
 * After an event that changed the node's state by change (as take_event
 * returns): should a line be written?  +1 for "is failing", -1 for
 * "healthy again", 0 for none; *folded says how many changes the line
 * sums up beside its own, and *since since when the node had been failing.
 */
static int
log_decision(RlNodeHealth *h, int change, int64 now_us, uint32 *folded,
			 TimestampTz *since)
{
	bool		due = h->logged_us == 0 ||
		now_us - h->logged_us >= (int64) RL_HEALTH_LOG_GAP_MS * 1000;
	bool		told = h->failing == h->logged_failing;

	if (change != 0 && (!due || told))
		h->folded++;
	if (!due || (told && h->folded == 0))
		return 0;
	if (h->logged_us == 0 && !h->failing)
		return 0;				/* healthy from the start: nothing to say */
	if (change == 0 && !told && h->folded > 0)
		h->folded--;			/* the line tells the last change folded */
	*folded = h->folded;
	*since = h->failing ? h->failing_since : h->logged_since;
	h->folded = 0;
	h->logged_us = now_us;
	h->logged_failing = h->failing;
	if (h->failing)
		h->logged_since = h->failing_since;
	return h->failing ? 1 : -1;
}

/*
 * The health hook: what the requests of one round met on its nodes, or
 * what a connection met.  One clock reading and one pass under the LWLock
 * for all of them; the log lines are written after.
 */
static void
health_events(const RlNodeEvent *evs, int nevents)
{
	TimestampTz now = GetCurrentTimestamp();
	int64		now_us = rl_now_us();
	RlHealthEntry *entries[RL_MAX_NODES];
	TimestampTz since[RL_MAX_NODES];
	int			change[RL_MAX_NODES];
	uint32		folded[RL_MAX_NODES];
	char		why[RL_MAX_NODES][RL_DETAIL_LEN];
	bool		wanted[RL_MAX_NODES];
	bool		missing = false;

	if (nevents > RL_MAX_NODES)
	{
		/* more than a round has: in parts */
		health_events(evs + RL_MAX_NODES, nevents - RL_MAX_NODES);
		nevents = RL_MAX_NODES;
	}

	/* nothing to record: no request, and a connection that did not fail */
	for (int i = 0; i < nevents; i++)
		wanted[i] = evs[i].request || evs[i].outcome != RL_OUTCOME_NONE;

	LWLockAcquire(health->lock, LW_SHARED);
	for (int i = 0; i < nevents; i++)
	{
		entries[i] = wanted[i] ? find_entry(evs[i].node) : NULL;
		if (wanted[i] && entries[i] == NULL)
			missing = true;
	}
	if (missing)
	{
		/* a node not in the table: take entries under the lock held alone */
		LWLockRelease(health->lock);
		LWLockAcquire(health->lock, LW_EXCLUSIVE);
		for (int i = 0; i < nevents; i++)
		{
			if (!wanted[i])
				continue;
			entries[i] = find_entry(evs[i].node);
			if (entries[i] == NULL)
				entries[i] = take_entry(evs[i].node, now);
		}
	}
	for (int i = 0; i < nevents; i++)
	{
		RlHealthEntry *e = entries[i];

		change[i] = 0;
		if (e == NULL)
			continue;
		SpinLockAcquire(&e->mutex);
		change[i] = take_event(&e->h, &evs[i], now, now_us, &since[i]);
		change[i] = log_decision(&e->h, change[i], now_us, &folded[i],
								 &since[i]);
		if (change[i] > 0)
			strlcpy(why[i], e->h.last_error, RL_DETAIL_LEN);
		SpinLockRelease(&e->mutex);
	}
	LWLockRelease(health->lock);

	/* a line per change the log is due to tell, for the whole server */
	for (int i = 0; i < nevents; i++)
	{
		const RlNodeEvent *ev = &evs[i];

		if (change[i] > 0)
			ereport(LOG,
					(errmsg("Redis node %s is failing: %s", ev->node,
							why[i][0] != '\0' ? why[i] : "(no detail)"),
					 folded[i] > 0 ?
					 errdetail_plural("Its health changed %u more time since the last line about it, not logged: at most one line per node is written every %d seconds.",
									  "Its health changed %u more times since the last line about it, not logged: at most one line per node is written every %d seconds.",
									  folded[i], folded[i],
									  RL_HEALTH_LOG_GAP_MS / 1000) : 0,
					 ev->hint != NULL ? errhint("%s", ev->hint) : 0));
		else if (change[i] < 0 && folded[i] == 0)
			ereport(LOG,
					(errmsg("Redis node %s is healthy again", ev->node),
					 errdetail("It had been failing since %s.",
							   timestamptz_to_str(since[i]))));
		else if (change[i] < 0)
			ereport(LOG,
					(errmsg("Redis node %s is healthy again", ev->node),
					 errdetail_plural("It had been failing since %s, and its health changed %u more time since the last line about it, not logged: at most one line per node is written every %d seconds.",
									  "It had been failing since %s, and its health changed %u more times since the last line about it, not logged: at most one line per node is written every %d seconds.",
									  folded[i], timestamptz_to_str(since[i]),
									  folded[i], RL_HEALTH_LOG_GAP_MS / 1000)));
	}
}

/* Is the health of the nodes kept (shared_preload_libraries)? */
bool
rl_health_memory_available(void)
{
	return health != NULL;
}

/*
 * Copy the entries in use into out (RL_HEALTH_NODES of room), each
 * consistent in itself; returns how many.
 */
int
rl_health_memory_copy(RlNodeHealth *out)
{
	int			n = 0;

	LWLockAcquire(health->lock, LW_SHARED);
	for (int i = 0; i < RL_HEALTH_NODES; i++)
	{
		RlHealthEntry *e = &health->entries[i];

		if (e->h.node[0] == '\0')
			continue;
		SpinLockAcquire(&e->mutex);
		out[n++] = e->h;
		SpinLockRelease(&e->mutex);
	}
	LWLockRelease(health->lock);
	return n;
}

static void
health_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(sizeof(RlHealthMemory));
	RequestNamedLWLockTranche("redlock node health", 1);
}

static void
health_shmem_startup(void)
{
	bool		found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	health = ShmemInitStruct("redlock node health", sizeof(RlHealthMemory),
							 &found);
	if (!found)
	{
		memset(health, 0, sizeof(RlHealthMemory));
		health->lock = &(GetNamedLWLockTranche("redlock node health"))->lock;
		for (int i = 0; i < RL_HEALTH_NODES; i++)
			SpinLockInit(&health->entries[i].mutex);
	}
	LWLockRelease(AddinShmemInitLock);
	rl_nodes_set_health_hook(health_events);
}

/* _PG_init: with shared_preload_libraries, keep the nodes' health */
void
rl_health_memory_init(void)
{
	if (!process_shared_preload_libraries_in_progress)
		return;
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = health_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = health_shmem_startup;
}
