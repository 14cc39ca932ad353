/*-------------------------------------------------------------------------
 *
 * lock_table.c
 *	  The server-wide table of leases held or awaited by every backend, in
 *	  shared memory, and the wake-up of local waiters at release.
 *
 * Available when redlock is in shared_preload_libraries, sized by
 * redlock.max_leases.  Each backend enters a slot when it starts to take a
 * lease (granted = false: it is acquiring or waiting), marks it granted with
 * the token, and removes it when the lease is released.  The table is what
 * the redlock_locks view shows, like pg_locks.
 *
 * Waiters on this server queue in the order they started waiting: only the
 * first waiter for a resource asks the nodes; when a holder on this server
 * releases the resource it hands the lease straight to the first waiter
 * asleep with an offer (lock_table_handoff.c, lease_handoff.c), and otherwise, or when a waiter ahead
 * gives up, the first remaining waiter's latch is set, so it asks again at
 * once instead of after a polling delay.  Waiters still wake by themselves
 * (at the local holder's expiry, and after a bounded delay), so a missed
 * wake-up costs latency, never liveness.
 *
 * Each slot carries the fingerprint of its backend's node list: a database
 * or role may set redlock.nodes of its own, and the same lock key on other
 * nodes is another lock.  Holders and waiters only meet (wait behind each
 * other, hand over, wake each other) on the same nodes.
 *
 * Slots are found by key through an index (lock_table_index.c): a grant,
 * a release and a word from the nodes touch the slots of one key, never
 * the whole table; a backend knows its own slots by number.
 *
 * Removing a slot is used on the commit, abort and exit paths: it takes an
 * LWLock and sets a latch, and raises nothing.
 *
 * The keep-alive side of the table (extension rounds, the worker's due
 * leases) is in lock_table_keep.c; the workers' registration and the
 * waking of waiters by key in lock_table_workers.c; the index by key in
 * lock_table_index.c.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "base/guc.h"
#include "shared/lock_table_internal.h"
#include "base/quorum.h"

RlLockTable *rl_table = NULL;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

static Size
slots_size(void)
{
	return add_size(offsetof(RlLockTable, slots),
					mul_size(rl_max_leases, sizeof(RlSlot)));
}

/* The slots, then the buckets of their index by key */
static Size
table_size(void)
{
	return add_size(MAXALIGN(slots_size()), rl_index_size(rl_max_leases));
}

static void
table_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(table_size());
	RequestNamedLWLockTranche("redlock locks", 1);
}

static void
table_shmem_startup(void)
{
	bool		found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	rl_table = ShmemInitStruct("redlock lock table", table_size(), &found);
	if (!found)
	{
		memset(rl_table, 0, table_size());
		rl_table->lock = &(GetNamedLWLockTranche("redlock locks"))->lock;
		rl_table->nslots = rl_max_leases;
		rl_table->next_seq = 1;
		rl_index_init(rl_table,
					  (int *) ((char *) rl_table + MAXALIGN(slots_size())));
		for (int i = 0; i < RL_NWORKERS; i++)
			rl_table->worker_procno[i] = -1;
	}
	LWLockRelease(AddinShmemInitLock);
}

void
rl_lock_table_init(void)
{
	if (!process_shared_preload_libraries_in_progress)
		return;
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = table_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = table_shmem_startup;
}

bool
rl_lock_table_enabled(void)
{
	return rl_table != NULL;
}

/*
 * This process's node list, as a number for the slots: the same for every
 * list of the same nodes, in any order (sums of FNV-1a hashes of the
 * names); 0 for none.  Which lock a key names depends on the nodes, not on
 * their order (a handoff, which settles votes node by node, also needs the
 * same order: rl_nodes_fingerprint()).
 */
uint64_t
rl_lock_table_nodes(void)
{
	uint64_t	sum = 0;

	for (int i = 0; i < rl_nodes_count(); i++)
	{
		uint64_t	hash = UINT64CONST(14695981039346656037);

		for (const unsigned char *c = (const unsigned char *) rl_node_name(i); *c; c++)
		{
			hash ^= *c;
			hash *= UINT64CONST(1099511628211);
		}
		sum += hash;
	}
	return sum;
}

/*
 * A node list's fingerprint as the column node_list of redlock_locks and
 * redlock_nodes show it: 16 hex digits, palloc'd.  Two rows show the same
 * id exactly when the table takes their lists for the same nodes (any
 * order), on every server with those nodes.  The digits are mixed (a
 * bijection: splitmix64's finalizer), since lists that differ in a port
 * have sums that differ in a few digits only, easy to take for one another.
 */
char *
rl_node_list_id(uint64_t nodes)
{
	uint64_t	x = nodes;

	x ^= x >> 30;
	x *= UINT64CONST(0xbf58476d1ce4e5b9);
	x ^= x >> 27;
	x *= UINT64CONST(0x94d049bb133111eb);
	x ^= x >> 31;
	return psprintf("%016llx", (unsigned long long) x);
}

/* The slot's backend waits: the wake-up worker listens for its key. */
void
rl_lock_table_waiting(int slot)
{
	if (rl_table == NULL || slot < 0)
		return;
	LWLockAcquire(rl_table->lock, LW_EXCLUSIVE);
	if (!rl_table->slots[slot].waiting && !rl_table->slots[slot].granted)
		rl_table->nwaiting++;
	rl_table->slots[slot].waiting = true;
	LWLockRelease(rl_table->lock);
	rl_lock_table_wake_worker(RL_WORKER_WAKEUP);
}

/* Something for a worker to do: a keep-alive lease, a new waiter. */
void
rl_lock_table_wake_worker(RlWorkerRole role)
{
	int			procno;

	if (rl_table == NULL)
		return;
	LWLockAcquire(rl_table->lock, LW_SHARED);
	procno = rl_table->worker_procno[role];
	LWLockRelease(rl_table->lock);
	if (procno >= 0)
		SetLatch(rl_latch_of(procno));
}

/*
 * Enter a slot for a lease this backend starts to take (not granted yet).
 * Returns -1 without the table; raises when the table is full.
 */
int
rl_lock_table_enter(const char *resource, const char *key, bool multi,
					bool shared)
{
	int			slot;
	RlSlot		entry;

	if (rl_table == NULL)
		return -1;

	/* filled in before the lock is taken, copied under it */
	memset(&entry, 0, sizeof(entry));
	entry.in_use = true;
	entry.pid = MyProcPid;
	entry.procno = rl_my_procno();
	entry.dbid = MyDatabaseId;
	entry.userid = GetSessionUserId();
	entry.nodes = rl_lock_table_nodes();
	entry.waitstart = GetCurrentTimestamp();
	entry.multi = multi;
	entry.shared = shared;
	strlcpy(entry.resource, resource, sizeof(entry.resource));
	strlcpy(entry.key, key, sizeof(entry.key));

	LWLockAcquire(rl_table->lock, LW_EXCLUSIVE);
	slot = rl_index_alloc(rl_table);
	if (slot >= 0)
	{
		RlSlot	   *s = &rl_table->slots[slot];

		memcpy(s, &entry, sizeof(entry));
		s->wait_seq = rl_table->next_seq++;
		s->queue_ahead = -1;
		rl_index_link(rl_table, slot);
	}
	LWLockRelease(rl_table->lock);

	if (slot < 0)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of shared memory for redlock leases"),
				 errdetail_plural("All %d slot of the lease table are in use.",
								  "All %d slots of the lease table are in use.",
								  rl_max_leases, rl_max_leases),
				 errhint("Increase redlock.max_leases (needs a restart), or take fewer leases at once.")));
	return slot;
}

/* The slot's lease was granted.  g->keep_alive asks the worker to keep it. */
void
rl_lock_table_granted(int slot, const RlTableGrant *g)
{
	RlSlot	   *s;
	int64_t		now = rl_now_us();
	TimestampTz granted_at = GetCurrentTimestamp();

	if (rl_table == NULL || slot < 0)
		return;
	s = &rl_table->slots[slot];
	LWLockAcquire(rl_table->lock, LW_EXCLUSIVE);
	if (s->waiting && !s->granted)
		rl_table->nwaiting--;
	s->granted = true;
	s->granted_at = granted_at;
	s->token = g->token;
	s->scopes = g->scopes;
	s->valid_until_us = g->valid_until_us;
	s->keep_alive = g->keep_alive;
	s->shared = g->shared;
	s->lost = false;
	s->ttl_ms = g->ttl_ms;
	s->next_extend_us = now + (int64_t) g->ttl_ms * 1000 / 3;
	s->keep_until_us = now + (int64_t) rl_keep_alive_limit_s * 1000000;
	s->keep_limit_s = rl_keep_alive_limit_s;
	strlcpy(s->value, g->owner, sizeof(s->value));
	if (strcmp(s->key, g->key) != 0)
	{
		/* not the key it was entered with: chain it by the new one */
		rl_index_unlink(rl_table, slot);
		strlcpy(s->key, g->key, sizeof(s->key));
		rl_index_link(rl_table, slot);
	}
	s->remote = RL_REMOTE_NONE;
	s->remote_offered[0] = '\0';
	s->queue_ahead = -1;
	LWLockRelease(rl_table->lock);
	if (g->keep_alive)
		rl_lock_table_wake_worker(RL_WORKER_KEEPALIVE);
}

/*
 * Holds or keep-alive changed.  (An extension's validity is recorded by
 * rl_lock_table_extend_end.)
 */
void
rl_lock_table_update(int slot, int scopes, bool keep_alive)
{
	RlSlot	   *s;
	bool		wake;

	if (rl_table == NULL || slot < 0)
		return;
	s = &rl_table->slots[slot];
	LWLockAcquire(rl_table->lock, LW_EXCLUSIVE);
	s->scopes = scopes;
	wake = keep_alive && !s->keep_alive;
	if (wake)
	{
		s->keep_alive = true;
		s->keep_until_us = rl_now_us() + (int64_t) rl_keep_alive_limit_s * 1000000;
		s->keep_limit_s = rl_keep_alive_limit_s;
		s->limit_reached = false;
	}
	LWLockRelease(rl_table->lock);
	if (wake)
		rl_lock_table_wake_worker(RL_WORKER_KEEPALIVE);
}

/*
 * The first waiter for a lock key on the given nodes other than skip, or
 * -1.  Lock held.  By key, not resource name: sessions with different
 * redlock.key_prefix values wait for different locks; and by node list:
 * the same key on other nodes is another lock.
 */
int
rl_first_waiter_on(const char *key, uint64_t nodes, int skip)
{
	int			first = -1;
	uint32		hash;

	for (int i = rl_key_chain(rl_table, key, &hash); i >= 0;
		 i = rl_table->slots[i].chain_next)
	{
		RlSlot	   *s = &rl_table->slots[i];

		if (s->granted || s->multi || i == skip || s->nodes != nodes ||
			!RL_SLOT_OF_KEY(s, hash, key))
			continue;
		if (first < 0 || s->wait_seq < rl_table->slots[first].wait_seq)
			first = i;
	}
	return first;
}

/* The same, on the nodes of this process. */
int
rl_first_waiter(const char *key, int skip)
{
	return rl_first_waiter_on(key, rl_lock_table_nodes(), skip);
}

/*
 * Lock held (exclusive).  Mark woken every multi-resource call for key on
 * nodes (but skip), asleep or not yet (its round under way: it then asks
 * again at once rather than sleep), and put the processes to wake in
 * procnos (up to RL_WAKE_MULTI_MAX; one beyond that wakes at its
 * backstop); returns how many.  A multi-resource call takes no place in
 * line: every release of any of its keys lets it try its whole set again.
 */
int
rl_wake_multi_on(const char *key, uint64_t nodes, int skip, int *procnos)
{
	uint32		hash;
	int			n = 0;

	for (int i = rl_key_chain(rl_table, key, &hash); i >= 0 &&
		 n < RL_WAKE_MULTI_MAX; i = rl_table->slots[i].chain_next)
	{
		RlSlot	   *s = &rl_table->slots[i];

		if (!s->multi || s->granted || i == skip ||
			s->nodes != nodes || !RL_SLOT_OF_KEY(s, hash, key))
			continue;
		s->woken = true;
		procnos[n++] = s->procno;
	}
	return n;
}

/* Lock held.  Does a backend other than skip hold key on nodes? */
static bool
holder_on(const char *key, uint64_t nodes, int skip)
{
	uint32		hash;

	for (int i = rl_key_chain(rl_table, key, &hash); i >= 0;
		 i = rl_table->slots[i].chain_next)
	{
		RlSlot	   *s = &rl_table->slots[i];

		if (s->granted && !s->lost && i != skip && s->nodes == nodes &&
			RL_SLOT_OF_KEY(s, hash, key))
			return true;
	}
	return false;
}

/*
 * Remove a slot: the lease was released (or lost), or the backend stopped
 * waiting.  Wakes the first remaining waiter on the same resource, unless
 * another backend here holds it.  Raises nothing: used on the commit,
 * abort and exit paths.
 */
void
rl_lock_table_remove(int slot)
{
	RlSlot	   *s;
	int			next;
	int			procno = -1;
	int			multi[RL_WAKE_MULTI_MAX];
	int			nmulti = 0;

	if (rl_table == NULL || slot < 0)
		return;
	s = &rl_table->slots[slot];
	LWLockAcquire(rl_table->lock, LW_EXCLUSIVE);
	Assert(s->in_use && s->pid == MyProcPid);
	next = rl_first_waiter_on(s->key, s->nodes, slot);

	/*
	 * While another backend here holds it (it was handed the lease), the
	 * waiter would only go back to sleep; awake meanwhile, it would miss
	 * that holder's handoff (it offers only asleep).
	 */
	if (next >= 0 && !holder_on(s->key, s->nodes, slot))
	{
		rl_table->slots[next].woken = true;
		procno = rl_table->slots[next].procno;
	}
	/* a lease released: the multi-resource waiters for it try again */
	if (s->granted && !holder_on(s->key, s->nodes, slot))
		nmulti = rl_wake_multi_on(s->key, s->nodes, slot, multi);
	if (s->waiting && !s->granted)
		rl_table->nwaiting--;
	rl_index_unlink(rl_table, slot);
	rl_index_free(rl_table, slot);
	LWLockRelease(rl_table->lock);
	if (procno >= 0)
		SetLatch(rl_latch_of(procno));
	for (int i = 0; i < nmulti; i++)
		SetLatch(rl_latch_of(multi[i]));
}

/*
 * For redlock_locks: a copy of every slot in use, palloc'd in *rows (at
 * least one row's room); returns how many.  Copied under the table's lock,
 * so that no output work is done under it.  0 without the table.
 */
int
rl_lock_table_rows(RlLockRow **rows)
{
	RlLockRow  *copy;
	int			n = 0;

	*rows = NULL;
	if (rl_table == NULL)
		return 0;
	LWLockAcquire(rl_table->lock, LW_SHARED);
	for (int i = 0; i < rl_table->nslots; i++)
		if (rl_table->slots[i].in_use)
			n++;
	copy = palloc_extended(sizeof(RlLockRow) * Max(n, 1), MCXT_ALLOC_HUGE);
	n = 0;
	for (int i = 0; i < rl_table->nslots; i++)
	{
		const RlSlot *s = &rl_table->slots[i];
		RlLockRow  *r = &copy[n];

		if (!s->in_use)
			continue;
		r->pid = s->pid;
		r->dbid = s->dbid;
		r->userid = s->userid;
		r->granted = s->granted;
		r->multi = s->multi;
		r->shared = s->shared;
		r->token = s->token;
		r->scopes = s->scopes;
		r->waitstart = s->waitstart;
		r->wait_seq = s->wait_seq;
		r->nodes = s->nodes;
		r->queue_ahead = s->queue_ahead;
		r->granted_at = s->granted_at;
		r->valid_until_us = s->valid_until_us;
		r->keep_alive = s->keep_alive;
		r->lost = s->lost;
		r->limit_reached = s->limit_reached;
		memcpy(r->key, s->key, sizeof(r->key));
		memcpy(r->resource, s->resource, sizeof(r->resource));
		n++;
	}
	LWLockRelease(rl_table->lock);
	*rows = copy;
	return n;
}

/*
 * Was the waiter of this slot woken for a reason (a release, its turn, a
 * handoff's outcome, a lost lease) since it last asked?  Clears the mark.
 * Its latch is also set by things that are none of ours (PostgreSQL's own
 * timers, such as the idle statistics flush armed before the call, and
 * signals): those must not make it ask the nodes.  False without the
 * table: nobody wakes a waiter that polls.
 */
bool
rl_lock_table_take_wake(int slot)
{
	bool		woken;

	if (rl_table == NULL || slot < 0)
		return false;
	LWLockAcquire(rl_table->lock, LW_EXCLUSIVE);
	woken = rl_table->slots[slot].woken;
	rl_table->slots[slot].woken = false;
	LWLockRelease(rl_table->lock);
	return woken;
}

/* Is this waiting slot first in line for its resource on this server? */
bool
rl_lock_table_first_waiter(int slot)
{
	bool		first;

	if (rl_table == NULL || slot < 0)
		return true;
	LWLockAcquire(rl_table->lock, LW_SHARED);
	first = rl_first_waiter_on(rl_table->slots[slot].key,
							   rl_table->slots[slot].nodes, -1) == slot;
	LWLockRelease(rl_table->lock);
	return first;
}

/*
 * When the lock key of a holder on this server expires on our nodes (0:
 * none holds it here): rl_gone_from_nodes_us() of its validity.  A
 * keep-alive lease the worker lost holds nothing: a majority said it is
 * not ours.  Exclusive holders only: readers do not keep each other out,
 * and an exclusive call asks the nodes while readers hold the resource,
 * so that its offer there stops further readers (lease_shared.c).
 */
int64_t
rl_lock_table_holder_expiry(const char *key)
{
	int64_t		expiry = 0;
	uint64_t	nodes = rl_lock_table_nodes();
	uint32		hash;

	if (rl_table == NULL)
		return 0;
	LWLockAcquire(rl_table->lock, LW_SHARED);
	for (int i = rl_key_chain(rl_table, key, &hash); i >= 0;
		 i = rl_table->slots[i].chain_next)
	{
		RlSlot	   *s = &rl_table->slots[i];

		if (s->granted && !s->lost && !s->shared && s->nodes == nodes &&
			RL_SLOT_OF_KEY(s, hash, key))
			expiry = Max(expiry, rl_gone_from_nodes_us(s->valid_until_us,
													   s->ttl_ms,
													   rl_drift_factor));
	}
	LWLockRelease(rl_table->lock);
	return expiry;
}
