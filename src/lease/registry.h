/*-------------------------------------------------------------------------
 *
 * registry.h
 *	  The per-backend lease registry: which leases this session holds, with
 *	  their holds, and the transitions of a lease's life.
 *
 * A lease goes through four states:
 *
 *	acquiring	an attempt is in flight (protocol_acquire.c keeps it; an error
 *				releases it on the abort path);
 *	held		granted: in the registry, RL_LEASE_HELD, with one or more
 *				holds;
 *	releasing	its last hold is gone and its release has been handed to the
 *				node layer (must-deliver): RL_LEASE_RELEASING.  It is never
 *				treated as held again, whatever error interrupts the release;
 *	gone		removed from the registry.
 *
 *-------------------------------------------------------------------------
 */
#ifndef REDLOCK_REGISTRY_H
#define REDLOCK_REGISTRY_H

#include "access/xact.h"
#include "utils/hsearch.h"

#include "protocol/protocol.h"

typedef enum RlLeaseState
{
	RL_LEASE_HELD,
	RL_LEASE_RELEASING
} RlLeaseState;

/* The transaction holds a lease got in one (sub)transaction. */
typedef struct RlSubHolds
{
	SubTransactionId subid;
	int			holds;
} RlSubHolds;

typedef struct RlLease
{
	char		resource[RL_MAX_RESOURCE_LEN + 1];	/* hash key */
	RlLeaseState state;
	char		key[RL_KEY_MAX + 1];
	int			keylen;
	char		owner[RL_OWNER_LEN + 1];
	int64		token;
	int			ttl_ms;
	int64_t		valid_until_us; /* monotonic clock */
	int			session_holds;
	int			xact_holds;		/* all of them: the sum over subholds */
	RlSubHolds *subholds;		/* by the subtransaction that took them,
								 * oldest first (TopMemoryContext) */
	int			nsubholds;
	int			maxsubholds;
	uint64		release_batch;	/* which bulk release handles it */
	int			shm_slot;		/* its row in the lock table, or -1 */
	bool		keep_alive;		/* the worker extends it (lock table) */
	int			in_row;			/* local handoffs in a row that gave it */
	bool		shared;			/* a shared lease (lease_shared.c) */
} RlLease;

/* Which holds a bulk release drops. */
typedef enum RlDropScope
{
	RL_DROP_XACT,				/* transaction end */
	RL_DROP_SESSION,			/* redlock_unlock_all() */
	RL_DROP_ALL,				/* exit, DISCARD ALL, node list change */
	RL_DROP_SUBXACT				/* holds taken in one subtransaction */
} RlDropScope;

extern RlLease *rl_registry_find(const char *resource);
extern RlLease *rl_registry_held(const char *resource);
extern RlLease *rl_registry_held_token(int64 token);
extern RlLease *rl_registry_enter(const char *resource);
extern int	rl_registry_begin_acquire(const char *resource, const char *key);
extern void rl_registry_end_acquire(RlLease *lease);
extern int	rl_registry_acquiring_slot(void);
extern void rl_registry_begin_acquire_multi(const char *const *resources,
											const char *const *keys, int n,
											bool shared, int *slots);
extern void rl_registry_end_acquire_multi(RlLease **leases);
extern void rl_registry_abort_acquire(void);
extern void rl_registry_add_hold(RlLease *lease, bool xact);
extern bool rl_registry_drop_holds(RlLease *lease, RlDropScope scope,
								   SubTransactionId subid);
extern void rl_registry_holds_changed(RlLease *lease);
extern int64_t rl_registry_valid_until(const RlLease *lease);
extern void rl_registry_expired(RlLease *lease);
extern void rl_registry_forget(RlLease *lease);
extern void rl_registry_check_mode(const RlLease *lease, bool shared);
extern long rl_registry_count(void);
extern bool rl_registry_has_xact_holds(void);
extern RlLease *rl_registry_next(HASH_SEQ_STATUS *status, bool first);
extern void rl_registry_subxact_commit(SubTransactionId mySubid,
									   SubTransactionId parentSubid);

#endif							/* REDLOCK_REGISTRY_H */
