/*-------------------------------------------------------------------------
 *
 * lock_table_workers.c
 *	  The lock table's side of the background workers: their registration,
 *	  the lock keys the wake-up worker listens for, and the waiters it
 *	  wakes by key.
 *
 * Each worker announces its process in the table when it starts and when
 * it exits, so that backends can set its latch (rl_lock_table_wake_worker,
 * in lock_table.c) and know whether it runs.  The wake-up worker reads the
 * keys that backends of this server wait for on its nodes, subscribes to
 * their channels, and wakes the first waiter of a key whose release a
 * majority of the nodes announced.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "storage/latch.h"
#include "storage/lwlock.h"

#include "shared/lock_table_internal.h"

/* A worker announces itself (running = false: it is exiting). */
void
rl_lock_table_set_worker(RlWorkerRole role, bool running)
{
	if (rl_table == NULL)
		return;
	LWLockAcquire(rl_table->lock, LW_EXCLUSIVE);
	rl_table->worker_procno[role] = running ? rl_my_procno() : -1;
	if (role == RL_WORKER_WAKEUP && !running)
		rl_table->wakeup_nodes = 0;	/* nobody gathers remote handoffs */
	if (role == RL_WORKER_KEEPALIVE && !running)
		rl_table->keepalive_nodes = 0;	/* nobody keeps leases alive */
	LWLockRelease(rl_table->lock);
	if (role == RL_WORKER_KEEPALIVE && !running)
		rl_lock_table_worker_gone();
}

/*
 * For the wake-up worker: the distinct lock keys that backends of this
 * server wait for on its nodes, up to max, in keys[] (each RL_KEY_MAX + 1
 * bytes).
 */
int
rl_lock_table_awaited_keys(char (*keys)[RL_KEY_MAX + 1], int max)
{
	int			n = 0;
	uint64_t	nodes = rl_lock_table_nodes();

	if (rl_table == NULL)
		return 0;
	LWLockAcquire(rl_table->lock, LW_SHARED);
	if (rl_table->nwaiting == 0)
		max = 0;				/* nobody waits: no need to look */
	for (int i = 0; i < rl_table->nslots && n < max; i++)
	{
		RlSlot	   *s = &rl_table->slots[i];
		bool		seen = false;

		if (!s->in_use || s->granted || !s->waiting || s->nodes != nodes)
			continue;
		for (int k = 0; k < n && !seen; k++)
			seen = strcmp(keys[k], s->key) == 0;
		if (!seen)
			strlcpy(keys[n++], s->key, RL_KEY_MAX + 1);
	}
	LWLockRelease(rl_table->lock);
	return n;
}

/*
 * A lease on key was released on some server (the wake-up worker heard it
 * from a node of its own): wake the first waiter for it here, and every
 * multi-resource waiter for it.
 */
void
rl_lock_table_wake_key(const char *key, size_t keylen)
{
	int			first = -1;
	int			procno = -1;
	int			multi[RL_WAKE_MULTI_MAX];
	int			nmulti;
	char		k[RL_KEY_MAX + 1];

	if (rl_table == NULL || keylen > RL_KEY_MAX)
		return;
	memcpy(k, key, keylen);
	k[keylen] = '\0';
	LWLockAcquire(rl_table->lock, LW_EXCLUSIVE);
	first = rl_first_waiter(k, -1);
	if (first >= 0)
	{
		rl_table->slots[first].woken = true;
		procno = rl_table->slots[first].procno;
	}
	nmulti = rl_wake_multi_on(k, rl_lock_table_nodes(), -1, multi);
	LWLockRelease(rl_table->lock);
	if (procno >= 0)
		SetLatch(rl_latch_of(procno));
	for (int i = 0; i < nmulti; i++)
		SetLatch(rl_latch_of(multi[i]));
}
