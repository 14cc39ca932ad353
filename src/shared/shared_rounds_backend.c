/*-------------------------------------------------------------------------
 *
 * shared_rounds_backend.c
 *	  The backends' side of the rounds run by the dispatcher worker: the
 *	  round hook, which hands a round over or leaves it to the backend's own
 *	  connections (see shared_rounds.c for the design).
 *
 * A backend is in one of two modes, kept as long as it can so that its
 * commands reach each node in the order sent: its own connections, or the
 * shared ones.  It counts itself in rounds_in_flight for each round (until
 * the round ends, or an error ends it and the transaction aborts), and
 * takes the shared connections only while RL_SHARED_MIN_OTHERS other
 * rounds are under way, the round can go there, and its own connections
 * owe nothing; it comes back once every round it handed over is done and
 * answered everywhere, never while one is queued, running or owed a reply
 * there.  A round that cannot go through the dispatcher while the backend
 * is in shared mode waits for that (node_timeout on a no-throw path, the
 * time of a round otherwise), and fails without being sent if the worker
 * still holds a round of the backend then.  A round the worker has not
 * taken within node_timeout (a worker stopped or stuck) is taken back,
 * with the backend's other queued rounds, when nothing else of it is in the
 * worker's hands, and runs on the backend's own connections, which it
 * keeps until the worker takes rounds again (shared_rounds_queue.c).
 *
 * Every wait here is bounded and wakes on the latch; interrupts are served
 * unless the round is a no-throw one (commit, abort, exit).  A wake-up
 * that was not the dispatcher's (a lease released for a waiter) is set
 * again for the caller.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "pgstat.h"
#include "storage/ipc.h"
#include "storage/latch.h"

#include "base/guc.h"
#include "base/wait_events.h"
#include "shared/shared_rounds_permits.h"
#include "shared/shared_rounds_internal.h"

static bool shared_mode = false;	/* its rounds go to the dispatcher */
static bool counted = false;	/* its round is in rounds_in_flight */
static bool exit_registered = false;
static int	next_slot = 0;		/* round robin over its slots */
static uint32 wait_event = 0;	/* known once asked outside no-throw */

static void
uncount(void)
{
	if (counted)
	{
		pg_atomic_fetch_sub_u32(&rl_shared->rounds_in_flight, 1);
		counted = false;
	}
}

static void
backend_exit(int code, Datum arg)
{
	uncount();
}

/*
 * A round ended by an error (a cancel, statement_timeout) is no longer
 * under way once its (sub)transaction aborts: uncount it then, or the
 * session, idle, would count as busy to the others until its next round.
 */
static void
shared_xact_callback(XactEvent event, void *arg)
{
	if (event == XACT_EVENT_ABORT || event == XACT_EVENT_PARALLEL_ABORT)
	{
		uncount();
		rl_own_permit_abort();
		rl_own_round_end();
	}
}

static void
shared_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
						SubTransactionId parentSubid, void *arg)
{
	if (event == SUBXACT_EVENT_ABORT_SUB)
	{
		uncount();
		rl_own_permit_abort();
		rl_own_round_end();
	}
}

static uint32
shared_wait_event(bool nothrow)
{
	if (wait_event == 0 && !nothrow)
		wait_event = rl_wait_event_shared();
	return wait_event != 0 ? wait_event : PG_WAIT_EXTENSION;
}

/* Worst time of a round, from its start: two attempts at every node. */
static int64_t
round_bound_us(int64_t start_us)
{
	return start_us +
		(int64_t) 2 * (rl_connect_timeout_ms + rl_node_timeout_ms) * 1000;
}

static bool
dispatcher_alive(void)
{
	int			procno;

	SpinLockAcquire(&rl_shared->mutex);
	procno = rl_shared->dispatcher_procno;
	SpinLockRelease(&rl_shared->mutex);
	return procno >= 0;
}

/*
 * Sleep on the latch up to timeout_ms (at least 1); returns true when the
 * latch was set.  Interrupts are served unless nothrow.
 */
static bool
nap(long timeout_ms, bool nothrow)
{
	int			rc;

	rc = WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
				   Max(timeout_ms, 1), shared_wait_event(nothrow));
	ResetLatch(MyLatch);
	if (!nothrow)
		CHECK_FOR_INTERRUPTS();
	return (rc & WL_LATCH_SET) != 0;
}

/* The request can go through a slot. */
static bool
request_fits(const RlRequest *req)
{
	size_t		bytes = 0;

	if (req->probe || req->no_reply || req->reply_kind == RL_REPLY_STATUS)
		return false;
	if (req->argc < 1 || req->argc > RL_SHARED_MAX_ARGS || req->argv == NULL)
		return false;
	if (req->reply_kind == RL_REPLY_FLAGS &&
		(req->nitems < 1 || req->nitems > RL_MAX_ITEMS))
		return false;
	for (int i = 0; i < req->argc; i++)
	{
		if (req->argvlen[i] > RL_SHARED_ARGS_BYTES - bytes)
			return false;
		bytes += req->argvlen[i];
	}
	return true;
}

/* The dispatcher can run this backend's rounds now. */
static bool
dispatcher_usable(void)
{
	if (rl_shared_connections == RL_SHARED_OFF || rl_nodes_count() <= 0 ||
		rl_nodes_config_changed())
		return false;
	if (pg_atomic_read_u32(&rl_shared->ready) == 0)
		return false;
	pg_read_barrier();
	return pg_atomic_read_u32(&rl_shared->duplicates) == 0 &&
		pg_atomic_read_u64(&rl_shared->fingerprint) ==
		rl_nodes_settings_fingerprint();
}

/*
 * Nothing this backend handed over is in the worker's hands: none of its
 * rounds is queued or running, and every one the worker completed is
 * answered by (or failed on) every node (rl_shared_my_tags_answered).
 * Rounds a departed dispatcher left running are taken back first.
 */
static bool
my_slots_settled(void)
{
	RlSharedSlot *mine = rl_shared_my_slots();
	bool		orphans_taken = false;

	for (int k = 0; k < RL_SHARED_SLOTS_PER_BACKEND; k++)
	{
		uint32		state = pg_atomic_read_u32(&mine[k].state);

		if (state == RL_SLOT_RUNNING && !orphans_taken && !dispatcher_alive())
		{
			rl_shared_forsake_orphans();
			orphans_taken = true;
			state = pg_atomic_read_u32(&mine[k].state);
		}
		if (state == RL_SLOT_QUEUED || state == RL_SLOT_RUNNING)
			return false;
	}
	return rl_shared_my_tags_answered();
}

/*
 * Before a round of ours goes out on our own connections while we were on
 * the shared ones: wait until my_slots_settled, taking back what the worker
 * has not taken within node_timeout (rl_shared_reclaim).  Bounded: a
 * no-throw round (commit, abort, exit) waits node_timeout, another the time
 * of a round.  True: our own connections may be used; false: the worker
 * still holds a round of ours.  *woken: the latch was set.
 */
static bool
await_settled(bool nothrow, bool *woken)
{
	int64_t		start = rl_now_us();
	int64_t		take_by = start + (int64_t) rl_node_timeout_ms * 1000;
	int64_t		deadline = nothrow ? take_by : round_bound_us(start);

	for (;;)
	{
		int64_t		now;

		if (my_slots_settled())
			return true;
		now = rl_now_us();
		if (now >= take_by && rl_shared_reclaim(NULL))
			return my_slots_settled();
		if (now >= deadline)
			return false;
		if (nap(1, nothrow))
			*woken = true;
	}
}

/*
 * A slot of this backend to fill (rl_shared_slot_usable).  A round that
 * need not be delivered leaves the last one free: a command that must be,
 * the withdrawal of an attempt the worker holds, always finds room behind
 * it.  When too few are free, wait within the time of a round; NULL if
 * none came free.
 */
static RlSharedSlot *
my_free_slot(bool must_deliver, bool nothrow, bool *woken)
{
	RlSharedSlot *mine = rl_shared_my_slots();
	int64_t		deadline = round_bound_us(rl_now_us());

	for (;;)
	{
		int			first = -1;
		int			usable = 0;

		for (int k = 0; k < RL_SHARED_SLOTS_PER_BACKEND; k++)
		{
			int			i = (next_slot + k) % RL_SHARED_SLOTS_PER_BACKEND;

			if (!rl_shared_slot_usable(i))
				continue;
			if (first < 0)
				first = i;
			usable++;
		}
		if (usable >= (must_deliver ? 1 : 2))
		{
			next_slot = (first + 1) % RL_SHARED_SLOTS_PER_BACKEND;
			return &mine[first];
		}
		if (rl_now_us() >= deadline)
			return NULL;
		if (nap(1, nothrow))
			*woken = true;
	}
}

/* Copy the request's input into the slot (request_fits said it fits). */
static void
fill_slot(RlSharedSlot *s, const RlRequest *req, bool wait)
{
	RlRequest  *r = &s->req;
	size_t		used = 0;

	s->owner = rl_my_procno();
	s->wait = wait;
	s->nnodes = rl_nodes_count();
	s->fingerprint = rl_nodes_settings_fingerprint();

	rl_request_clear(r);		/* its round sets the results it uses */
	r->reply_kind = req->reply_kind;
	r->goal = req->goal;
	r->argc = req->argc;
	memcpy(r->skip, req->skip, sizeof(r->skip));
	r->must_deliver = req->must_deliver;
	r->nothrow = req->nothrow;
	r->deadline_us = req->deadline_us;
	r->nitems = req->nitems;
	r->static_script = req->static_script;
	for (int i = 0; i < req->argc; i++)
	{
		if (req->argvlen[i] > 0)
			memcpy(s->bytes + used, req->argv[i], req->argvlen[i]);
		s->argv[i] = s->bytes + used;
		s->argvlen[i] = req->argvlen[i];
		used += req->argvlen[i];
	}
	r->argv = s->argv;
	r->argvlen = s->argvlen;
}

/*
 * The round handed over is given up (its time is over, or the dispatcher
 * is gone): req fails, saying why, and whether it may have reached the
 * nodes.  A must-deliver round still queued stays queued: the worker sends
 * it once it takes rounds again (or its successor does: the ring outlives
 * it).
 */
static bool
give_up(RlSharedSlot *s, RlRequest *req, const char *why)
{
	switch (rl_shared_give_up(s, req->must_deliver))
	{
		case RL_SLOT_DONE:
			return true;		/* finished after all */
		case RL_SLOT_FREE:
			rl_shared_fail_request(req, rl_nodes_count(), false, why);
			break;
		case RL_SLOT_QUEUED:
			rl_shared_fail_request(req, rl_nodes_count(), true,
								   "the dispatcher worker did not take the command in time; it stays in its queue");
			break;
		case RL_SLOT_RUNNING:
			rl_shared_fail_request(req, rl_nodes_count(), true, why);
			break;
	}
	req->tag = 0;
	return false;
}

/*
 * Wait for the queued round's results, into req.  Bounded: the round's own
 * time (its deadline, or two attempts at every node) and a second more
 * while the dispatcher lives; node_timeout once it is gone.  A round the
 * worker has not taken within node_timeout is taken back
 * (rl_shared_reclaim): false, the caller runs it on our own connections.
 * *woken: the latch was set while the round was not done.  A latch found
 * set with the round done is taken for the worker's: a wake-up that came
 * just before is not told apart, and is not passed on (a lease waiter
 * reads its lock table row's wake mark before it sleeps, rl_wait_sleep).
 */
static bool
await_slot(RlSharedSlot *s, RlRequest *req, bool *woken)
{
	int64_t		start = rl_now_us();
	int64_t		cap = Max(req->deadline_us, round_bound_us(start)) + 1000000;
	int64_t		take_by = start + (int64_t) rl_node_timeout_ms * 1000;
	int64_t		gone_until = 0;

	for (;;)
	{
		int64_t		now;
		int64_t		next;
		uint32		state = pg_atomic_read_u32(&s->state);

		if (state == RL_SLOT_DONE)
			break;
		now = rl_now_us();
		/* taken back only to run on connections of our own */
		if (state == RL_SLOT_QUEUED && now >= take_by &&
			rl_own_permit_try() && rl_shared_reclaim(s))
			return false;
		if (!dispatcher_alive())
		{
			if (gone_until == 0)
				gone_until = now + (int64_t) rl_node_timeout_ms * 1000;
			if (now >= gone_until)
			{
				if (give_up(s, req, "the dispatcher worker exited before answering"))
					break;
				return true;
			}
		}
		else
			gone_until = 0;
		if (now >= cap)
		{
			if (give_up(s, req, "the dispatcher worker did not answer in time"))
				break;
			return true;
		}
		next = (state == RL_SLOT_QUEUED && take_by > now) ? Min(cap, take_by) : cap;
		if (nap((long) Min((next - now + 999) / 1000, 100), req->nothrow) &&
			pg_atomic_read_u32(&s->state) != RL_SLOT_DONE)
			*woken = true;
	}

	pg_read_barrier();
	req->tag = s->req.tag;
	req->nnodes = Min(Max(s->req.nnodes, 0), RL_MAX_NODES);
	memcpy(req->results, s->req.results, sizeof(RlNodeResult) * req->nnodes);
	for (int i = 0; i < req->nnodes; i++)
		req->results[i].reply_text = NULL;
	req->tally = s->req.tally;
	req->decision = s->req.decision;
	pg_write_barrier();
	pg_atomic_write_u32(&s->state, RL_SLOT_FREE);
	return true;
}

/* What became of a round offered to the dispatcher (run_shared) */
typedef enum RlHanded
{
	RL_HANDED,					/* queued (and, with wait, done or failed:
								 * req holds its results) */
	RL_HANDED_NO_SLOT,			/* no slot of ours came free in time */
	RL_HANDED_REFUSED,			/* no dispatcher, or it takes no rounds of
								 * our settings now */
	RL_HANDED_BACK				/* taken back from a worker that did not
								 * take it: ours to run */
} RlHanded;

static RlHanded
run_shared(RlRequest *req, bool wait)
{
	bool		woken = false;
	RlSharedSlot *s;
	RlHanded	handed = RL_HANDED;

	s = my_free_slot(req->must_deliver, req->nothrow, &woken);
	if (s == NULL)
		handed = RL_HANDED_NO_SLOT;
	else
	{
		fill_slot(s, req, wait);
		if (!rl_shared_queue_slot(s))
			handed = RL_HANDED_REFUSED;
		else if (wait && !await_slot(s, req, &woken))
			handed = RL_HANDED_BACK;
	}
	/* a wake-up that was not ours is for our caller (a lease waiter) */
	if (woken)
		SetLatch(MyLatch);
	return handed;
}

/*
 * Leave the shared connections for this round, which does not go through
 * the dispatcher.  Nothing of ours may be in the worker's hands: unless
 * waited already (for a slot), wait for that (await_settled).  False: the
 * worker still holds a round of ours, and this one must not overtake it on
 * our own connections: it fails without being sent (a release or
 * withdrawal lost so leaves its lock to its TTL; a worker that holds a
 * round that long fails the calls anyway).
 */
static bool
leave_shared(RlRequest *req, bool waited)
{
	bool		woken = false;
	bool		settled;

	if (waited)
		settled = my_slots_settled() ||
			(rl_shared_reclaim(NULL) && my_slots_settled());
	else
		settled = await_settled(req->nothrow, &woken);
	if (woken)
		SetLatch(MyLatch);
	if (settled)
	{
		shared_mode = false;
		return true;
	}
	rl_shared_fail_request(req, rl_nodes_count(), false,
						   "not sent: the dispatcher worker still holds an earlier round of this session");
	req->tag = 0;
	return false;
}

/*
 * The round hook: is this round for the dispatcher?  Decides the backend's
 * mode (its own connections or the shared ones) and keeps it as long as
 * it can; see the file header.  A backend on the shared connections goes
 * back to its own only once nothing of it is in the worker's hands (or it
 * took back all it had queued there): never while a round of it is
 * queued, running, or owed a reply on the worker's connections.
 */
static bool
shared_run_elsewhere(RlRequest *req, bool wait)
{
	uint32		others;
	bool		busy;
	bool		eligible;

#ifdef EXEC_BACKEND
	/* the slots' pointers need shared memory at one address everywhere */
	return false;
#endif
	if (rl_shared == NULL || MyBackendType != B_BACKEND || rl_shared_resending)
		return false;
	if (!exit_registered)
	{
		if (req->nothrow)
			return false;		/* commit, abort or exit: nothing to set up */
		before_shmem_exit(backend_exit, (Datum) 0);
		RegisterXactCallback(shared_xact_callback, NULL);
		RegisterSubXactCallback(shared_subxact_callback, NULL);
		exit_registered = true;
	}

	/*
	 * Connections the idle timer ended: what they still owe is read first,
	 * for as long as a round may take (a node's reply on a commit, abort or
	 * exit path, which waits no longer than that)
	 */
	rl_own_round_begin(req->nothrow ?
					   rl_now_us() + (int64_t) rl_node_timeout_ms * 1000 :
					   round_bound_us(rl_now_us()),
					   !req->nothrow);

	/* counted still if an error ended the last round before its abort */
	if (counted)
	{
		others = pg_atomic_read_u32(&rl_shared->rounds_in_flight);
		others = others > 0 ? others - 1 : 0;
	}
	else
	{
		others = pg_atomic_fetch_add_u32(&rl_shared->rounds_in_flight, 1);
		counted = true;
	}

	busy = others >= RL_SHARED_MIN_OTHERS ||
		rl_shared_connections == RL_SHARED_ALWAYS;
	/* no connections of its own (shared_rounds_permits.c): the dispatcher's */
	if (!busy && !rl_own_permit_try())
		busy = true;
	if (!shared_mode && !busy)
	{
		/* a session alone: nothing more to look at */
		pg_atomic_fetch_add_u64(&rl_shared->own_rounds, 1);
		return false;
	}

	eligible = request_fits(req) && dispatcher_usable();
	if (!shared_mode)
	{
		if (eligible && !rl_shared_bypassing() && rl_nodes_quiet())
			shared_mode = true;
	}
	else if ((!eligible || !busy) && my_slots_settled())
		shared_mode = false;

	if (shared_mode)
	{
		RlHanded	handed = eligible ? run_shared(req, wait) : RL_HANDED_REFUSED;

		if (handed == RL_HANDED)
		{
			pg_atomic_fetch_add_u64(&rl_shared->shared_rounds, 1);
			uncount();
			rl_own_round_end();
			return true;
		}
		if (!leave_shared(req, handed == RL_HANDED_NO_SLOT))
		{
			uncount();
			rl_own_round_end();
			return true;		/* failed without being sent */
		}
	}
	rl_own_permit_wait(req->nothrow, req->must_deliver);
	pg_atomic_fetch_add_u64(&rl_shared->own_rounds, 1);
	return false;				/* own_done uncounts */
}


static void
shared_own_done(void)
{
	if (rl_shared != NULL && !rl_shared_resending)
	{
		uncount();
		rl_own_round_end();
	}
}

static const RlRoundHook shared_round_hook = {
	.run_elsewhere = shared_run_elsewhere,
	.own_done = shared_own_done
};

/*
 * _PG_init: the slots in shared memory when preloaded; the round hook in
 * every process (it declines where there are no slots).
 */
void
rl_shared_rounds_init(void)
{
	rl_nodes_set_round_hook(&shared_round_hook);
	if (process_shared_preload_libraries_in_progress)
		rl_shared_shmem_init();
}
