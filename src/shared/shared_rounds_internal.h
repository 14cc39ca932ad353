/*-------------------------------------------------------------------------
 *
 * shared_rounds_internal.h
 *	  The slots of the rounds run by the dispatcher worker, in shared memory:
 *	  for shared_rounds.c (the memory, the worker's side) and
 *	  shared_rounds_backend.c (the backends' side, the round hook).
 *
 *-------------------------------------------------------------------------
 */
#ifndef REDLOCK_SHARED_ROUNDS_INTERNAL_H
#define REDLOCK_SHARED_ROUNDS_INTERNAL_H

#include "access/twophase.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/proc.h"
#include "storage/spin.h"

#include "shared/procs.h"
#include "shared/shared_rounds.h"

/*
 * A slot's state.  Every change is a compare-and-exchange (or, for the
 * backend's own FREE/DONE slot, a write after a barrier).
 */
typedef enum RlSlotState
{
	RL_SLOT_FREE,
	RL_SLOT_QUEUED,
	RL_SLOT_RUNNING,
	RL_SLOT_DONE
} RlSlotState;

typedef struct RlSharedSlot
{
	pg_atomic_uint32 state;		/* RlSlotState */
	int			owner;			/* procno of the backend that queued it */
	bool		wait;			/* the backend waits for the result */
	int			nnodes;			/* the backend's node count */
	uint64_t	fingerprint;	/* the backend's settings */
	RlRequest	req;			/* run in place by the worker */
	const char *argv[RL_SHARED_MAX_ARGS];
	size_t		argvlen[RL_SHARED_MAX_ARGS];
	char		bytes[RL_SHARED_ARGS_BYTES];
} RlSharedSlot;

typedef struct RlSharedRounds
{
	slock_t		mutex;			/* the ring, the dispatcher's procno, and
								 * which rounds it takes (ready, fingerprint:
								 * written under it, read atomically) */
	int			nslots;
	int			head;			/* next slot index to take */
	int			count;			/* indices in the ring */
	uint64		taken;			/* entries taken from the ring, ever: entry
								 * number taken + count is the next queued */
	int			dispatcher_procno;	/* -1: none */
	int			dispatcher_pid;
	pg_atomic_uint32 ready;
	pg_atomic_uint32 duplicates;
	pg_atomic_uint64 fingerprint;
	pg_atomic_uint64 oldest_owed;
	pg_atomic_uint64 tag_high;	/* the highest tag of a round completed: a
								 * new dispatcher tags its rounds above it */
	pg_atomic_uint32 rounds_in_flight;	/* backends' rounds under way */
	pg_atomic_uint64 shared_rounds;
	pg_atomic_uint64 own_rounds;
	pg_atomic_uint32 own_permits;	/* backends holding own connections
									 * (shared_rounds_permits.c) */
	pg_atomic_uint32 permit_waiters;	/* backends waiting for that */
	pg_atomic_uint64 permit_waits;	/* rounds that waited, ever */
	pg_atomic_uint64 permit_waits_failed;	/* ... and got none in time */
	int			nkept;			/* commands in kept (a dispatcher's, for
								 * its successor) */
	int			kept_used;		/* bytes of kept in use */
	RlSharedSlot slots[FLEXIBLE_ARRAY_MEMBER];

	/*
	 * Then, each MAXALIGN'd: the ring (nslots ints); last_tag, one
	 * pg_atomic_uint64 per PGPROC (the greatest tag of the process's
	 * rounds that the dispatcher completed; written by the dispatcher
	 * alone); kept (RL_SHARED_KEPT_BYTES: the commands a dispatcher kept
	 * for nodes it could not reach, handed to the next one).
	 */
} RlSharedRounds;

/* room for the commands a dispatcher hands to its successor */
#define RL_SHARED_KEPT_BYTES	(2 * 1024 * 1024)	/* about 1000 releases */

extern RlSharedRounds *rl_shared;	/* NULL: not preloaded */

/* As PostgreSQL counts its PGPROCs (ProcGlobal->allProcCount). */
static inline int
rl_shared_procs(void)
{
	return MaxBackends + NUM_AUXILIARY_PROCS + max_prepared_xacts;
}

/* the ring of queued slot indices, after the slots */
static inline int *
rl_shared_ring(void)
{
	return (int *) MAXALIGN(&rl_shared->slots[rl_shared->nslots]);
}

/* the tag of each process's last round completed, after the ring */
static inline pg_atomic_uint64 *
rl_shared_last_tags(void)
{
	return (pg_atomic_uint64 *) MAXALIGN(rl_shared_ring() + rl_shared->nslots);
}

/* the kept commands, after the tags */
static inline char *
rl_shared_kept(void)
{
	return (char *) MAXALIGN(rl_shared_last_tags() + rl_shared_procs());
}

/* this backend's slots */
static inline RlSharedSlot *
rl_shared_my_slots(void)
{
	return &rl_shared->slots[rl_my_procno() * RL_SHARED_SLOTS_PER_BACKEND];
}

/*
 * Every round of this backend that the dispatcher completed is answered by
 * (or failed on) every node: the tag of the last one is below the oldest
 * the worker's connections still owe (published before a round is
 * completed), or no dispatcher is attached (its connections closed before
 * it detached).  Call after reading the slots' states: a round running is
 * not counted here.
 */
static inline bool
rl_shared_my_tags_answered(void)
{
	uint64_t	last;
	uint64_t	oldest;
	int			procno;

	pg_read_barrier();
	oldest = pg_atomic_read_u64(&rl_shared->oldest_owed);
	last = pg_atomic_read_u64(&rl_shared_last_tags()[rl_my_procno()]);
	if (last < oldest)
		return true;
	SpinLockAcquire(&rl_shared->mutex);
	procno = rl_shared->dispatcher_procno;
	SpinLockRelease(&rl_shared->mutex);
	return procno < 0;
}

extern void rl_shared_shmem_init(void);
extern void rl_shared_fail_request(RlRequest *req, int nnodes, bool sent,
								   const char *detail);

/*
 * A backend's rounds in the queue (shared_rounds_queue.c): whether a slot
 * can be filled; queue a filled slot (false: not queued, FREE again); give
 * up a round not done (keep: a queued must-deliver round stays queued);
 * take back what the worker has not taken (rl_shared_reclaim, true: taken
 * back, current is the caller's to run); whether the backend stays on its
 * own connections since; the rounds a departed dispatcher left running
 * ours again.  Resending is set while rounds taken back go out on the
 * backend's own connections.
 */
extern bool rl_shared_resending;
extern bool rl_shared_slot_usable(int k);
extern bool rl_shared_queue_slot(RlSharedSlot *s);
extern RlSlotState rl_shared_give_up(RlSharedSlot *s, bool keep);
extern bool rl_shared_reclaim(RlSharedSlot *current);
extern bool rl_shared_bypassing(void);
extern void rl_shared_forsake_orphans(void);

#endif							/* REDLOCK_SHARED_ROUNDS_INTERNAL_H */
