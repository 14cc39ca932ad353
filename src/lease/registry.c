/*-------------------------------------------------------------------------
 *
 * registry.c
 *	  The per-backend lease registry: the leases this session holds, with
 *	  their holds, and their rows in the server-wide lock table.
 *
 * Leases are re-entrant per session, like advisory locks: taking a lease the
 * session already holds (at either scope) returns the same token and adds a
 * hold; the lease is released on the nodes when the last hold goes
 * (lease_release.c).  Transaction holds are counted per subtransaction, as
 * PostgreSQL counts a local lock's holds per resource owner: a
 * subtransaction that rolls back takes its holds with it, one that commits
 * leaves them to its parent.  See registry.h for the states of a lease.  Like
 * PostgreSQL's local lock table in front of the shared one, the registry
 * does no network I/O: it only keeps the entries and their lock table rows
 * in step.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"

#include "lease/registry.h"
#include "shared/lock_table.h"

static HTAB *rl_leases = NULL;
static int	rl_acquiring_slot = -1;	/* lock table row of the lease being
										 * acquired (or waited for) */
static int	rl_acquiring_multi[RL_MAX_MULTI];	/* a multi-resource call's
												 * rows, or -1 */
static int	rl_nacquiring_multi = 0;

static void
registry_init(void)
{
	HASHCTL		ctl;

	if (rl_leases != NULL)
		return;
	ctl.keysize = RL_MAX_RESOURCE_LEN + 1;
	ctl.entrysize = sizeof(RlLease);
	ctl.hcxt = TopMemoryContext;
	rl_leases = hash_create("redlock leases", 16, &ctl,
							HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
}

/* The registry entry of a resource, in any state; NULL if none. */
RlLease *
rl_registry_find(const char *resource)
{
	if (rl_leases == NULL)
		return NULL;
	return hash_search(rl_leases, resource, HASH_FIND, NULL);
}

/* The entry of a resource this session holds; NULL if none. */
RlLease *
rl_registry_held(const char *resource)
{
	RlLease    *lease = rl_registry_find(resource);

	return (lease != NULL && lease->state == RL_LEASE_HELD) ? lease : NULL;
}

/* A new, zeroed entry for a resource that has none. */
RlLease *
rl_registry_enter(const char *resource)
{
	RlLease    *lease;
	bool		found;

	registry_init();
	lease = hash_search(rl_leases, resource, HASH_ENTER, &found);
	Assert(!found);
	memset(((char *) lease) + sizeof(lease->resource), 0,
		   sizeof(RlLease) - sizeof(lease->resource));
	lease->state = RL_LEASE_HELD;
	lease->shm_slot = -1;
	return lease;
}

/*
 * A session holds a resource in one mode at a time: asking for the other
 * mode while it holds a lease is an error (55000), raised before anything
 * is asked.  Also a lease that ran out: it stays in the session with its
 * holds, of its mode, until they are dropped.
 */
void
rl_registry_check_mode(const RlLease *lease, bool shared)
{
	if (lease == NULL || lease->state != RL_LEASE_HELD ||
		lease->shared == shared)
		return;
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 lease->shared ?
			 errmsg("this session holds a shared lease on \"%s\"",
					lease->resource) :
			 errmsg("this session holds an exclusive lease on \"%s\"",
					lease->resource),
			 errdetail("A session holds a resource in one mode at a time."),
			 lease->shared ?
			 errhint("Release the shared lease with redlock_unlock_shared() (or end the transaction that holds it) before asking for an exclusive one.") :
			 errhint("The exclusive lease already keeps every other holder out; use it, or release it with redlock_unlock() first.")));
}

/* Leave the lock table, waking the next local waiter, and the registry. */
void
rl_registry_forget(RlLease *lease)
{
	rl_lock_table_remove(lease->shm_slot);
	if (lease->subholds != NULL)
		pfree(lease->subholds);
	hash_search(rl_leases, lease->resource, HASH_REMOVE, NULL);
}

/*
 * The lock table row of the lease this backend starts to acquire: entered
 * now (waiting), granted or removed when the acquire ends, removed by the
 * abort path if an error ends it.  -1 without the lock table.
 */
int
rl_registry_begin_acquire(const char *resource, const char *key)
{
	Assert(rl_acquiring_slot < 0);
	rl_acquiring_slot = rl_lock_table_enter(resource, key, false, false);
	return rl_acquiring_slot;
}

/* The acquire ended: granted to lease (which takes the row), or not (NULL). */
void
rl_registry_end_acquire(RlLease *lease)
{
	if (lease != NULL)
	{
		RlTableGrant g;

		rl_lock_table_remove(lease->shm_slot);	/* an expired grant's row */
		lease->shm_slot = rl_acquiring_slot;
		g.token = lease->token;
		g.scopes = (lease->session_holds ? RL_SCOPE_SESSION : 0) |
			(lease->xact_holds ? RL_SCOPE_XACT : 0);
		g.valid_until_us = lease->valid_until_us;
		g.ttl_ms = lease->ttl_ms;
		g.keep_alive = lease->keep_alive;
		g.shared = lease->shared;
		g.owner = lease->owner;
		g.key = lease->key;
		rl_lock_table_granted(lease->shm_slot, &g);
	}
	else
		rl_lock_table_remove(rl_acquiring_slot);
	rl_acquiring_slot = -1;
}

/*
 * The lock table rows of a multi-resource call's leases, into slots (n of
 * them): entered now, with no place in line (a multi-resource waiter is
 * never the first waiter of a key); each granted or removed when the
 * acquire ends, all removed by the abort path if an error ends it.  -1
 * each without the lock table.
 */
void
rl_registry_begin_acquire_multi(const char *const *resources,
								const char *const *keys, int n, bool shared,
								int *slots)
{
	Assert(rl_acquiring_slot < 0 && rl_nacquiring_multi == 0);
	Assert(n <= RL_MAX_MULTI);
	for (int i = 0; i < n; i++)
	{
		slots[i] = rl_lock_table_enter(resources[i], keys[i], true, shared);
		rl_acquiring_multi[rl_nacquiring_multi++] = slots[i];
	}
}

/*
 * A multi-resource acquire ended: granted (leases[i] takes the row of the
 * i-th resource, as rl_registry_end_acquire), or not (leases NULL).
 */
void
rl_registry_end_acquire_multi(RlLease **leases)
{
	int			n = rl_nacquiring_multi;

	rl_nacquiring_multi = 0;	/* each row is the lease's, or gone */
	for (int i = 0; i < n; i++)
	{
		if (leases == NULL)
		{
			rl_lock_table_remove(rl_acquiring_multi[i]);
			continue;
		}
		rl_acquiring_slot = rl_acquiring_multi[i];
		rl_registry_end_acquire(leases[i]);
	}
}

/* The lock table row of the lease being acquired (or waited for), or -1. */
int
rl_registry_acquiring_slot(void)
{
	return rl_acquiring_slot;
}

/*
 * Abort path: an error ended the acquire (or wait): its lock table row
 * goes (after the wait's offers, lifecycle.c).  Raises nothing.
 */
void
rl_registry_abort_acquire(void)
{
	if (rl_acquiring_slot >= 0)
	{
		rl_lock_table_remove(rl_acquiring_slot);
		rl_acquiring_slot = -1;
	}
	while (rl_nacquiring_multi > 0)
		rl_lock_table_remove(rl_acquiring_multi[--rl_nacquiring_multi]);
}

/*
 * One more hold on a lease: a session hold, or a transaction hold of the
 * current subtransaction.  Raises only before anything changed (out of
 * memory).
 */
void
rl_registry_add_hold(RlLease *lease, bool xact)
{
	SubTransactionId subid = GetCurrentSubTransactionId();
	RlSubHolds *last;

	if (!xact)
	{
		lease->session_holds++;
		return;
	}
	last = lease->nsubholds > 0 ? &lease->subholds[lease->nsubholds - 1] : NULL;
	if (last == NULL || last->subid != subid)
	{
		/* subtransactions nest: a newer one has a greater id */
		Assert(last == NULL || last->subid < subid);
		if (lease->nsubholds == lease->maxsubholds)
		{
			int			n = Max(lease->maxsubholds * 2, 4);

			lease->subholds = lease->subholds == NULL ?
				MemoryContextAlloc(TopMemoryContext, n * sizeof(RlSubHolds)) :
				repalloc(lease->subholds, n * sizeof(RlSubHolds));
			lease->maxsubholds = n;
		}
		last = &lease->subholds[lease->nsubholds++];
		last->subid = subid;
		last->holds = 0;
	}
	last->holds++;
	lease->xact_holds++;
}

/*
 * Drop the holds scope covers (subid: the subtransaction that rolls back,
 * for RL_DROP_SUBXACT, with the holds its committed children left it).
 * True when the lease has none left.  Raises nothing.
 */
bool
rl_registry_drop_holds(RlLease *lease, RlDropScope scope,
					   SubTransactionId subid)
{
	if (scope == RL_DROP_SESSION || scope == RL_DROP_ALL)
		lease->session_holds = 0;
	if (scope == RL_DROP_XACT || scope == RL_DROP_ALL)
	{
		lease->xact_holds = 0;
		lease->nsubholds = 0;
	}
	if (scope == RL_DROP_SUBXACT)
	{
		while (lease->nsubholds > 0 &&
			   lease->subholds[lease->nsubholds - 1].subid >= subid)
			lease->xact_holds -= lease->subholds[--lease->nsubholds].holds;
	}
	return lease->session_holds == 0 && lease->xact_holds == 0;
}

/* Holds or keep-alive changed: show it in the lock table. */
void
rl_registry_holds_changed(RlLease *lease)
{
	rl_lock_table_update(lease->shm_slot,
						 (lease->session_holds ? RL_SCOPE_SESSION : 0) |
						 (lease->xact_holds ? RL_SCOPE_XACT : 0),
						 lease->keep_alive);
}

/*
 * The lease ran out or was lost (its holds stay, until they are dropped or
 * the lease is taken again): leave the lock table and the keep-alive
 * worker, and never count as valid again.
 */
void
rl_registry_expired(RlLease *lease)
{
	rl_lock_table_remove(lease->shm_slot);
	lease->shm_slot = -1;
	lease->keep_alive = false;
	lease->valid_until_us = 0;
}

/*
 * Until when the lease is valid (monotonic clock): the keep-alive worker
 * moves it on for keep-alive leases; 0 once the worker lost it.
 */
int64_t
rl_registry_valid_until(const RlLease *lease)
{
	if (lease->keep_alive && lease->shm_slot >= 0)
		return rl_lock_table_valid_until(lease->shm_slot);
	return lease->valid_until_us;
}

/*
 * The lease this session holds with a given token, for the fence's 'held'
 * mode; NULL if none.  A linear scan: a session holds few leases.
 */
RlLease *
rl_registry_held_token(int64 token)
{
	HASH_SEQ_STATUS status;
	RlLease    *lease;

	for (lease = rl_registry_next(&status, true); lease != NULL;
		 lease = rl_registry_next(&status, false))
	{
		if (lease->state == RL_LEASE_HELD && lease->token == token)
		{
			hash_seq_term(&status);
			return lease;
		}
	}
	return NULL;
}

long
rl_registry_count(void)
{
	return rl_leases ? hash_get_num_entries(rl_leases) : 0;
}

/* Iterate over the entries: first = true starts a scan. */
RlLease *
rl_registry_next(HASH_SEQ_STATUS *status, bool first)
{
	if (rl_leases == NULL)
		return NULL;
	if (first)
		hash_seq_init(status, rl_leases);
	return hash_seq_search(status);
}

bool
rl_registry_has_xact_holds(void)
{
	HASH_SEQ_STATUS status;
	RlLease    *lease;

	for (lease = rl_registry_next(&status, true); lease != NULL;
		 lease = rl_registry_next(&status, false))
	{
		if (lease->state == RL_LEASE_HELD && lease->xact_holds > 0)
		{
			hash_seq_term(&status);
			return true;
		}
	}
	return false;
}

/*
 * The transaction holds taken in a subtransaction move to its parent when
 * it commits.  (When it rolls back, they go with it, as advisory
 * transaction locks do: RL_DROP_SUBXACT.)  Raises nothing.
 */
void
rl_registry_subxact_commit(SubTransactionId mySubid,
						   SubTransactionId parentSubid)
{
	HASH_SEQ_STATUS status;
	RlLease    *lease;

	for (lease = rl_registry_next(&status, true); lease != NULL;
		 lease = rl_registry_next(&status, false))
	{
		RlSubHolds *last;

		if (lease->nsubholds == 0 ||
			lease->subholds[lease->nsubholds - 1].subid != mySubid)
			continue;
		last = &lease->subholds[lease->nsubholds - 1];
		if (lease->nsubholds > 1 && last[-1].subid == parentSubid)
		{
			last[-1].holds += last->holds;
			lease->nsubholds--;
		}
		else
			last->subid = parentSubid;
	}
}

