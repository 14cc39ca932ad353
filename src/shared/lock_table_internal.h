/*-------------------------------------------------------------------------
 *
 * lock_table_internal.h
 *	  The layout of the server-wide lease table in shared memory, for the
 *	  files of the lock table's family, and only them: lock_table_index.c
 *	  (the index by key), lock_table.c (the slots' life), lock_table_keep.c
 *	  (keep-alive and extension rounds), lock_table_remote.c (a handoff by
 *	  a holder on another server), lock_table_handoff.c (a waiter's offer
 *	  and a local handoff), lock_table_place.c (a waiter's place in line)
 *	  and lock_table_workers.c (the workers).  Every
 *	  other file goes through their functions (lock_table.h).
 *
 *-------------------------------------------------------------------------
 */
#ifndef REDLOCK_LOCK_TABLE_INTERNAL_H
#define REDLOCK_LOCK_TABLE_INTERNAL_H

#include "storage/latch.h"
#include "storage/lwlock.h"
#include "utils/timestamp.h"

#include "shared/lock_table.h"
#include "shared/procs.h"
#include "protocol/protocol.h"

/* A waiting slot's offer to have the lease handed over at release
 * (lock_table_handoff.c). */
typedef enum RlHandoffState
{
	RL_HANDOFF_NONE,			/* no offer: the waiter is not asleep */
	RL_HANDOFF_OFFERED,			/* asleep, the value offered in offered */
	RL_HANDOFF_RUNNING,			/* a releasing holder runs the round */
	RL_HANDOFF_DONE				/* the round's outcome is in handoff_result */
} RlHandoffState;

/* What the wake-up worker heard of a waiting slot's offer on the nodes
 * (lock_table_remote.c). */
typedef enum RlRemoteState
{
	RL_REMOTE_NONE,				/* nothing yet */
	RL_REMOTE_COLLECTING,		/* a holder on another server handed it
								 * over: the nodes' word, in remote_result */
	RL_REMOTE_DONE,				/* their outcome is in remote_result */
	RL_REMOTE_USED				/* the waiter took an outcome: deaf to it */
} RlRemoteState;

typedef struct RlSlot
{
	bool		in_use;
	int			chain_next;		/* the next slot of its key's chain, or of
								 * the free list; -1 at the end */
	uint32		key_hash;		/* rl_key_hash(key), while in use */
	bool		granted;
	bool		waiting;		/* it has waited (not just a first attempt) */
	bool		multi;			/* a multi-resource call's: no place in line
								 * (never the first waiter), woken by every
								 * release of its key (rl_wake_multi_on) */
	bool		shared;			/* a shared lease's (granted or awaited),
								 * which takes no part in
								 * rl_lock_table_holder_expiry() */
	bool		woken;			/* its latch was set for a reason to ask
								 * the nodes (rl_lock_table_take_wake) */
	int			pid;
	int			procno;			/* whose latch to set */
	Oid			dbid;
	Oid			userid;			/* the session user, as in pg_stat_activity */
	uint64_t	nodes;			/* its backend's rl_lock_table_nodes(): only
								 * slots on the same nodes meet (a database
								 * or role may have a node list of its own) */
	uint64		wait_seq;		/* order of arrival, for first come first
								 * served */
	TimestampTz waitstart;
	TimestampTz granted_at;
	int64		token;
	int			scopes;			/* RL_SCOPE_* */
	int64_t		valid_until_us; /* monotonic clock, the same for every
								 * process on this machine */
	/* keep-alive: the worker extends the lease while its backend lives */
	bool		keep_alive;
	bool		lost;			/* the worker could not extend it; then
								 * valid_until_us is when it found out */
	bool		limit_reached;	/* keep_until_us passed: no more extensions */
	int			ttl_ms;
	int64_t		next_extend_us; /* when the worker extends it next */
	int64_t		keep_until_us;	/* no extension after this */
	int			keep_limit_s;	/* the holder's redlock.keep_alive_limit */

	/*
	 * Extension rounds in flight (the worker's, the backend's
	 * redlock_extend), and the smallest validity any of them can leave on the
	 * nodes: rounds that overlap may be applied in either order on a node,
	 * so each records that minimum (lock_table_keep.c).
	 */
	bool		worker_round;
	bool		backend_round;
	int64_t		rounds_floor_us;
	/* handoff: a waiter's standing offer, taken up by a releasing holder */
	RlHandoffState handoff;
	uint64_t	handoff_nodes;	/* the waiter's rl_nodes_fingerprint() */
	RlHandoff	handoff_result; /* when RL_HANDOFF_DONE */
	/* the offer its last attempt left on the nodes (lock_table_remote.c) */
	char		remote_offered[RL_OWNER_LEN + 1];	/* its value, "" for none */
	int64		remote_proposal;
	int64_t		remote_since_us;	/* before that attempt was sent */
	uint64_t	remote_nodes;	/* its rl_nodes_fingerprint() */
	uint32		remote_absent;	/* nodes it is not on: they never hand it
								 * over (rl_handoff_remote_absent) */
	RlRemoteState remote;
	RlHandoff	remote_result;
	int64_t		collect_since_us;	/* when collecting began */
	int32		queue_ahead;	/* offers ahead of its last one in the
								 * waiters' queue on the nodes, as they said
								 * (rl_queue_ahead), or -1: unknown
								 * (lock_table_place.c) */
	char		value[RL_OWNER_LEN + 1];	/* granted: the holder's lock
											 * value */
	char		offered[RL_OWNER_LEN + 1];	/* handoff: the value the waiter
											 * offered to be handed */
	char		key[RL_KEY_MAX + 1];
	char		resource[RL_MAX_RESOURCE_LEN + 1];
} RlSlot;

typedef struct RlLockTable
{
	LWLock	   *lock;
	int			worker_procno[RL_NWORKERS];	/* each worker's, or -1 */
	uint64_t	wakeup_nodes;	/* the wake-up worker's node list
								 * (rl_nodes_fingerprint()), or 0 */
	uint64_t	keepalive_nodes;	/* the keep-alive worker's
									 * rl_lock_table_nodes(), or 0 */
	uint64		next_seq;
	int			nwaiting;		/* slots in use, not granted, waiting */
	int			free_head;		/* the first free slot, or -1 */
	int			nbuckets;		/* a power of two */
	int		   *buckets;		/* the first slot of each key chain, or -1
								 * (after the slots) */
	int			nslots;
	RlSlot		slots[FLEXIBLE_ARRAY_MEMBER];
} RlLockTable;

extern RlLockTable *rl_table;

extern int	rl_first_waiter(const char *key, int skip);
extern int	rl_first_waiter_on(const char *key, uint64_t nodes, int skip);
extern void rl_remote_end_collecting(RlSlot *s);

#define RL_WAKE_MULTI_MAX	64	/* multi-resource waiters woken at once */
extern int	rl_wake_multi_on(const char *key, uint64_t nodes, int skip,
							 int *procnos);

/*
 * The index by key (lock_table_index.c).  Walk the slots of one key with
 *		for (i = rl_key_chain(t, key, &hash); i >= 0;
 *			 i = t->slots[i].chain_next)
 * comparing key_hash and key: a chain holds other keys too.
 */
extern Size rl_index_size(int nslots);
extern void rl_index_init(RlLockTable *t, int *buckets);
extern uint32 rl_key_hash(const char *key);
extern int	rl_key_chain(const RlLockTable *t, const char *key, uint32 *hash);
extern int	rl_index_alloc(RlLockTable *t);
extern void rl_index_link(RlLockTable *t, int slot);
extern void rl_index_unlink(RlLockTable *t, int slot);
extern void rl_index_free(RlLockTable *t, int slot);

#define RL_SLOT_OF_KEY(s, hash, key) \
	((s)->key_hash == (hash) && strcmp((s)->key, (key)) == 0)

#endif							/* REDLOCK_LOCK_TABLE_INTERNAL_H */
