/*-------------------------------------------------------------------------
 *
 * wakeup.c
 *	  The wake-up worker: wakes the waiters of this server when a lease they
 *	  wait for is released on another server sharing the nodes.
 *
 * It subscribes, on every node, to the channels of the lock keys that
 * backends of this server wait for; every release publishes on its key's
 * channel (protocol_release.c).  A release publishes on each node it reaches, so
 * one release is heard up to once per node: the first waiter here is woken
 * once a majority of the nodes have announced it (before that the lock is
 * not free where it counts, and asking would only be refused), or
 * node_timeout after the first announcement at the latest (a node that
 * never says so must not hold the waiter up).  A failed attempt withdraws
 * itself silently: nobody waits for a lock that was never held.
 *
 * A release that comes between a waiter's refused attempt and our
 * subscription would go unheard: so once every node confirmed a new
 * subscription, the first waiter is woken to ask once more (or once a
 * majority did, node_timeout after it was sent: a node that never confirms
 * must not hold the waiter up).  Not at a majority: the attempt that wake
 * makes must be heard of on every node, and a node that has not confirmed
 * yet might run it first, so the word its withdrawal gives of the waiter's
 * offer ("offer -", lock_table_remote.c) would be lost, and a handoff
 * elsewhere would wait for that node until node_timeout.  Keys stay
 * subscribed for RL_WAKEUP_LINGER_MS after their last waiter left, so that
 * sessions that wait for the same lock again and again (a hot row) do not
 * pay that extra round each time.
 *
 * A missed message (a node down, the worker restarting) costs latency
 * only: waiters still wake at redlock.retry_delay.  A subscribed
 * connection owes no replies, so nothing would tell that its node went
 * silent: a connection quiet for RL_WAKEUP_PING_MS is pinged, and one that
 * does not answer is reconnected (and subscribed again).  Replies larger
 * than the node layer accepts close the connection, messages included.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "port/pg_bitutils.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"

#include "shared/lock_table.h"
#include "net/nodes.h"
#include "workers/worker.h"

#define RL_WAKEUP_MAX_KEYS	4096	/* keys listened for; waiters for more
									 * keys poll */
#define RL_WAKEUP_LINGER_MS	2000	/* a key stays subscribed this long after
									 * its last waiter left */
#define RL_WAKEUP_FRESH_MS	5000	/* a new subscription not confirmed by
									 * every node in this time is let go */
#define RL_WAKEUP_PING_MS	5000	/* a connection silent this long is
									 * pinged; one that then owes the answer
									 * for the silence limit is reconnected */

/*
 * What we know of a lock key: which nodes announced its release (or
 * confirmed its new subscription), since when; or, for the keys we listen
 * to, when a backend last waited for it.
 */
typedef struct RlKeyNote
{
	char		key[RL_KEY_MAX + 1];	/* hash key */
	uint32		nodes;			/* bit i: node i */
	int64_t		since_us;
	bool		woken;			/* a majority said it: the waiter was woken */
} RlKeyNote;

static HTAB *rl_heard = NULL;	/* releases announced by too few nodes yet */
static HTAB *rl_fresh = NULL;	/* new subscriptions confirmed by too few */
static HTAB *rl_listened = NULL;	/* keys we listen to: last awaited */

static HTAB *
key_notes(const char *name)
{
	HASHCTL		ctl;

	ctl.keysize = RL_KEY_MAX + 1;
	ctl.entrysize = sizeof(RlKeyNote);
	ctl.hcxt = TopMemoryContext;
	return hash_create(name, 64, &ctl, HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
}

/*
 * Node node says something of key: once enough of the nodes said it (a
 * majority of a release, every node of a new subscription), wake the key's
 * first waiter here.  The note stays (until notes_due lets it go) so that
 * the other nodes' word on the same event is not taken for a new one; a
 * node that announces a release again starts a new note (one that
 * confirms a subscription again, sent it twice as a new connection, does
 * not).
 */
static void
note_node(HTAB *notes, int node, const char *key)
{
	RlKeyNote  *n;
	bool		found;
	uint32		bit = (uint32) 1 << node;
	int			enough = notes == rl_fresh ? rl_nodes_count() :
		rl_majority(rl_nodes_count());

	n = hash_search(notes, key, HASH_ENTER, &found);
	if (!found || ((n->nodes & bit) != 0 && notes != rl_fresh))
	{
		n->nodes = 0;
		n->since_us = rl_now_us();
		n->woken = false;
	}
	n->nodes |= bit;
	if (!n->woken && pg_popcount32(n->nodes) >= enough)
	{
		rl_lock_table_wake_key(key, strlen(key));
		n->woken = true;
	}
}

static void
forget_all(HTAB *notes)
{
	HASH_SEQ_STATUS status;
	RlKeyNote  *n;

	hash_seq_init(&status, notes);
	while ((n = hash_seq_search(&status)) != NULL)
		hash_search(notes, n->key, HASH_REMOVE, NULL);
}

/*
 * A message on a lock key's channel: empty for a release that left the lock
 * free, "value counter" for one that handed it to the waiter whose
 * offer was on the node (protocol_release.c).  The lock is not free then: only the
 * waiter named hears of it (lock_table_remote.c).  "value -": an attempt
 * refused elsewhere was withdrawn where it had set the lock, and its offer
 * value is not on the node (WITHDRAW_SCRIPT): only its waiter hears of it.
 */
static void
on_message(int node, const char *key, const char *payload, size_t len)
{
	char		text[RL_OWNER_LEN + 64];
	char		owner[RL_OWNER_LEN + 1];
	long long	counter;
	RlKeyNote  *freed;

	if (len == 0)
	{
		note_node(rl_heard, node, key);
		rl_handoff_remote_heard(node, key, NULL, 0, 0, 0);
		return;
	}
	StaticAssertStmt(RL_OWNER_LEN == 100, "the sscanf() width below");
	if (len >= sizeof(text))
		return;
	memcpy(text, payload, len);
	text[len] = '\0';
	if (len > 2 && strcmp(text + len - 2, " -") == 0)
	{
		/* an attempt withdrawn there: its offer is not on the node */
		text[len - 2] = '\0';
		rl_handoff_remote_not_here(node, key, text);
		return;
	}
	freed = hash_search(rl_heard, key, HASH_FIND, NULL);
	if (sscanf(text, "%100s %lld", owner, &counter) == 2)
		rl_handoff_remote_heard(node, key, owner, counter,
								freed ? freed->nodes : 0,
								freed ? freed->since_us : 0);
}

static void
on_push(int node, RlPushKind kind, const char *channel, size_t len,
		const char *payload, size_t payloadlen)
{
	char		key[RL_KEY_MAX + 1];

	if (len > RL_KEY_MAX)
		return;
	memcpy(key, channel, len);
	key[len] = '\0';
	if (kind == RL_PUSH_MESSAGE)
		on_message(node, key, payload, payloadlen);
	else if (hash_search(rl_fresh, key, HASH_FIND, NULL) != NULL)
		note_node(rl_fresh, node, key);
}

/*
 * Notes wake_ms old, of at least wake_nodes nodes: wake the key's first
 * waiter (unless enough nodes already did).  Notes forget_ms old (at least
 * wake_ms): forget them.  Returns the milliseconds until the next is due
 * (at most a second).
 */
static long
notes_due(HTAB *notes, long wake_ms, int wake_nodes, long forget_ms)
{
	HASH_SEQ_STATUS status;
	RlKeyNote  *n;
	int64_t		now = rl_now_us();
	long		next_ms = 1000;

	hash_seq_init(&status, notes);
	while ((n = hash_seq_search(&status)) != NULL)
	{
		int64_t		wake = n->since_us + (int64_t) wake_ms * 1000;
		int64_t		forget = n->since_us + (int64_t) forget_ms * 1000;
		bool		to_wake = !n->woken &&
			pg_popcount32(n->nodes) >= wake_nodes;

		if (to_wake && wake <= now)
		{
			rl_lock_table_wake_key(n->key, strlen(n->key));
			n->woken = true;
			to_wake = false;
		}
		if (forget <= now)
			hash_search(notes, n->key, HASH_REMOVE, NULL);
		else
			next_ms = Min(next_ms,
						  (long) (((to_wake ? wake : forget) - now + 999) / 1000));
	}
	return next_ms;
}

/*
 * The keys to listen to, into wanted[]: those awaited now (awaited[],
 * nawaited of them) first, then those awaited within the last
 * RL_WAKEUP_LINGER_MS, up to RL_WAKEUP_MAX_KEYS in all.  Returns how many.
 */
static int
keys_wanted(char (*awaited)[RL_KEY_MAX + 1], int nawaited,
			char (*wanted)[RL_KEY_MAX + 1])
{
	HASH_SEQ_STATUS status;
	RlKeyNote  *n;
	int64_t		now = rl_now_us();
	int			nwanted = 0;

	for (int i = 0; i < nawaited; i++)
	{
		n = hash_search(rl_listened, awaited[i], HASH_ENTER, NULL);
		n->since_us = now;
		strlcpy(wanted[nwanted++], awaited[i], RL_KEY_MAX + 1);
	}
	hash_seq_init(&status, rl_listened);
	while ((n = hash_seq_search(&status)) != NULL)
	{
		if (n->since_us == now)
			continue;			/* awaited now: in wanted[] already */
		if (now - n->since_us > (int64_t) RL_WAKEUP_LINGER_MS * 1000 ||
			nwanted == RL_WAKEUP_MAX_KEYS)
			hash_search(rl_listened, n->key, HASH_REMOVE, NULL);
		else
			strlcpy(wanted[nwanted++], n->key, RL_KEY_MAX + 1);
	}
	return nwanted;
}

/* (UN)SUBSCRIBE the keys on the nodes not skipped; no reply is owed. */
static void
send_subscription(const char *verb, char (*keys)[RL_KEY_MAX + 1], int nkeys,
				  const bool *skip)
{
	RlRequest	req;
	const char **argv = palloc(sizeof(char *) * (nkeys + 1));
	size_t	   *argvlen = palloc(sizeof(size_t) * (nkeys + 1));

	argv[0] = verb;
	argvlen[0] = strlen(verb);
	for (int i = 0; i < nkeys; i++)
	{
		argv[i + 1] = keys[i];
		argvlen[i + 1] = strlen(keys[i]);
	}
	memset(&req, 0, sizeof(req));
	req.reply_kind = RL_REPLY_STATUS;
	req.goal = RL_GOAL_ALL;
	req.no_reply = true;
	req.argc = nkeys + 1;
	req.argv = argv;
	req.argvlen = argvlen;
	memcpy(req.skip, skip, sizeof(req.skip));
	rl_nodes_send(&req);
	pfree(argv);
	pfree(argvlen);
}

/* keys in a[] that are not in b[], into out[] */
static int
keys_minus(char (*a)[RL_KEY_MAX + 1], int na, char (*b)[RL_KEY_MAX + 1], int nb,
		   char (*out)[RL_KEY_MAX + 1])
{
	int			n = 0;

	for (int i = 0; i < na; i++)
	{
		bool		found = false;

		for (int k = 0; k < nb && !found; k++)
			found = strcmp(a[i], b[k]) == 0;
		if (!found)
			strlcpy(out[n++], a[i], RL_KEY_MAX + 1);
	}
	return n;
}

void
redlock_wakeup_main(Datum main_arg)
{
	char		(*awaited)[RL_KEY_MAX + 1];
	char		(*wanted)[RL_KEY_MAX + 1];
	char		(*subscribed)[RL_KEY_MAX + 1];
	char		(*diff)[RL_KEY_MAX + 1];
	int			nsubscribed = 0;
	uint64_t	serials[RL_MAX_NODES] = {0};
	Size		keys_size = RL_WAKEUP_MAX_KEYS * (RL_KEY_MAX + 1);

	rl_worker_start(RL_WORKER_WAKEUP);
	awaited = MemoryContextAlloc(TopMemoryContext, keys_size);
	wanted = MemoryContextAlloc(TopMemoryContext, keys_size);
	subscribed = MemoryContextAlloc(TopMemoryContext, keys_size);
	diff = MemoryContextAlloc(TopMemoryContext, keys_size);
	rl_heard = key_notes("redlock releases heard");
	rl_fresh = key_notes("redlock new subscriptions");
	rl_listened = key_notes("redlock keys listened to");
	rl_nodes_set_push_handler(on_push);

	for (;;)
	{
		long		wait_ms;

		CHECK_FOR_INTERRUPTS();
		rl_worker_reload_config();

		rl_handoff_remote_nodes(rl_worker_nodes_configured() ?
								rl_nodes_fingerprint() : 0);
		if (rl_worker_nodes_configured())
		{
			int			nwanted;
			int			n;
			uint64_t	snap[RL_MAX_NODES];
			bool		whole[RL_MAX_NODES];	/* skip lists: not these */
			bool		part[RL_MAX_NODES];
			bool		none[RL_MAX_NODES];

			if (rl_nodes_config_changed())
			{
				/* new connections: subscribe anew; node bits mean others */
				nsubscribed = 0;
				forget_all(rl_heard);
				forget_all(rl_fresh);
			}
			rl_worker_nodes_ready();
			nwanted = keys_wanted(awaited,
								  rl_lock_table_awaited_keys(awaited, RL_WAKEUP_MAX_KEYS),
								  wanted);

			/*
			 * A node that reconnected lost its subscriptions, and one without
			 * a connection (down, restarted) gets one by being sent them, once
			 * out of backoff: both get the whole set.  The others get what
			 * changed.  A node that connects while we send shows a new serial
			 * next time, and gets the whole set then.
			 */
			for (int i = 0; i < rl_nodes_count(); i++)
			{
				snap[i] = rl_node_connection_serial(i);
				whole[i] = snap[i] != serials[i] || !rl_node_connected(i);
				part[i] = !whole[i];
			}
			if (nwanted > 0)
				send_subscription("SUBSCRIBE", wanted, nwanted, part);
			n = keys_minus(wanted, nwanted, subscribed, nsubscribed, diff);
			for (int i = 0; i < n; i++)
			{
				RlKeyNote  *f = hash_search(rl_fresh, diff[i], HASH_ENTER, NULL);

				f->nodes = 0;
				f->since_us = rl_now_us();
				f->woken = false;
			}
			if (n > 0)
				send_subscription("SUBSCRIBE", diff, n, whole);
			memset(none, 0, sizeof(none));
			n = keys_minus(subscribed, nsubscribed, wanted, nwanted, diff);
			if (n > 0)
				send_subscription("UNSUBSCRIBE", diff, n, none);
			memcpy(subscribed, wanted, (Size) nwanted * (RL_KEY_MAX + 1));
			nsubscribed = nwanted;
			memcpy(serials, snap, sizeof(serials));
		}

		/*
		 * messages, a new waiter (the latch), a release heard from too few
		 * nodes for too long, or a look every second
		 */
		wait_ms = notes_due(rl_heard, rl_node_timeout_ms, 0,
							rl_node_timeout_ms);
		wait_ms = Min(wait_ms,
					  notes_due(rl_fresh,
								Min(rl_node_timeout_ms, RL_WAKEUP_FRESH_MS),
								rl_majority(rl_nodes_count()),
								RL_WAKEUP_FRESH_MS));
		wait_ms = Min(wait_ms, rl_handoff_remote_due());
		if (rl_worker_nodes_configured())
			rl_nodes_ping_idle(RL_WAKEUP_PING_MS);
		rl_nodes_wait_pushes(wait_ms);
	}
}
