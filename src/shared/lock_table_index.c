/*-------------------------------------------------------------------------
 *
 * lock_table_index.c
 *	  The lock table's index of slots by lock key, and its free list.
 *
 * Finding the holders and waiters of one key must not read every slot of
 * the table (redlock.max_leases of them) under its LWLock: a release, a
 * handoff and a message from the nodes concern one key.  Slots in use are
 * chained by the hash of their key into buckets (a power of two, at least
 * as many as slots, so chains stay short); the buckets hold the index of
 * the first slot of their chain, each slot the next one.  Slots not in use
 * are chained the same way into the free list, so that entering a slot
 * takes the first free one at once.
 *
 * The hash is hash_bytes() over the key's bytes, the one SQL's hashtext()
 * computes: a test can pick keys that share a bucket.
 *
 * Every function here works on the table it is given (the lock table's
 * files give it rl_table) and expects the table's LWLock: exclusive to
 * change a chain, shared at least to walk one.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/hashfn.h"

#include "shared/lock_table_internal.h"

/* Buckets for nslots slots: the next power of two. */
static int
bucket_count(int nslots)
{
	int			n = 1;

	while (n < nslots)
		n <<= 1;
	return n;
}

Size
rl_index_size(int nslots)
{
	return mul_size(bucket_count(nslots), sizeof(int));
}

/* At startup, after the slots: every chain empty, every slot free. */
void
rl_index_init(RlLockTable *t, int *buckets)
{
	t->buckets = buckets;
	t->nbuckets = bucket_count(t->nslots);
	for (int b = 0; b < t->nbuckets; b++)
		buckets[b] = -1;
	for (int i = 0; i < t->nslots; i++)
		t->slots[i].chain_next = i + 1 < t->nslots ? i + 1 : -1;
	t->free_head = t->nslots > 0 ? 0 : -1;
}

uint32
rl_key_hash(const char *key)
{
	return hash_bytes((const unsigned char *) key, strlen(key));
}

/* The first slot of the chain where key's slots are (others too), or -1. */
int
rl_key_chain(const RlLockTable *t, const char *key, uint32 *hash)
{
	*hash = rl_key_hash(key);
	return t->buckets[*hash & (t->nbuckets - 1)];
}

/* Take a free slot (not yet in a chain), or -1 when all are in use. */
int
rl_index_alloc(RlLockTable *t)
{
	int			slot = t->free_head;

	if (slot >= 0)
	{
		t->free_head = t->slots[slot].chain_next;
		t->slots[slot].chain_next = -1;
	}
	return slot;
}

/* Chain a slot in use by its key (s->key set). */
void
rl_index_link(RlLockTable *t, int slot)
{
	RlSlot	   *s = &t->slots[slot];
	int		   *head;

	s->key_hash = rl_key_hash(s->key);
	head = &t->buckets[s->key_hash & (t->nbuckets - 1)];
	s->chain_next = *head;
	*head = slot;
}

/* Take a slot out of its key's chain. */
void
rl_index_unlink(RlLockTable *t, int slot)
{
	RlSlot	   *s = &t->slots[slot];
	int		   *link = &t->buckets[s->key_hash & (t->nbuckets - 1)];

	while (*link >= 0 && *link != slot)
		link = &t->slots[*link].chain_next;
	Assert(*link == slot);
	if (*link == slot)
		*link = s->chain_next;
	s->chain_next = -1;
}

/* Give back a slot out of its chain: free it. */
void
rl_index_free(RlLockTable *t, int slot)
{
	RlSlot	   *s = &t->slots[slot];

	s->in_use = false;
	s->chain_next = t->free_head;
	t->free_head = slot;
}
