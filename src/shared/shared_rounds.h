/*-------------------------------------------------------------------------
 *
 * shared_rounds.h
 *	  The rounds of the backends run by the dispatcher worker on its
 *	  connections, one per Redis node, through slots in shared memory
 *	  (shared_rounds.c; the worker is workers/dispatcher.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef REDLOCK_SHARED_ROUNDS_H
#define REDLOCK_SHARED_ROUNDS_H

#include "net/nodes.h"

/* slots of one process: a send and a run in flight, with room to spare */
#define RL_SHARED_SLOTS_PER_BACKEND	4
/*
 * largest request a slot takes (arguments, and their bytes: the script's
 * text too, up to about 4 kB for those of the waiters' queue, and their
 * keys and values)
 */
#define RL_SHARED_MAX_ARGS			64
#define RL_SHARED_ARGS_BYTES		8192
/* a backend moves onto the shared connections with this many others busy */
#define RL_SHARED_MIN_OTHERS		2

/* _PG_init: the shared memory (when preloaded) and the round hook */
extern void rl_shared_rounds_init(void);

/*
 * The dispatcher worker's side.  Attach announces the worker (its latch is
 * what backends set) and fails the rounds a predecessor left running; it
 * detaches by itself at exit.  Publish tells the backends whether they may
 * use the worker's connections: ready, on which settings, whether the node
 * list names one server twice.  Each round a backend queued is taken with
 * rl_shared_take (at most max, marked running; a round queued for other
 * settings than fingerprint is failed there and not returned), run in
 * place, and handed back with rl_shared_complete, after the oldest owed
 * round was published.  Nothing here raises.
 */
extern bool rl_shared_attach(void);
extern void rl_shared_publish(bool ready, uint64_t fingerprint, bool duplicates);
extern void rl_shared_publish_oldest_owed(uint64_t oldest);
extern int	rl_shared_take(RlRequest **reqs, int max, uint64_t fingerprint);
extern void rl_shared_complete(RlRequest *req);

/*
 * The must-deliver commands the dispatcher kept for nodes it could not
 * reach: saved when it exits (its connections closed), loaded by the next
 * one once it has its node list, for the nodes of the same names.
 */
extern void rl_shared_save_kept(void);
extern void rl_shared_load_kept(void);

/* Rounds run on the shared connections and on the backends' own, so far. */
extern bool rl_shared_rounds_counts(uint64_t *shared, uint64_t *own);

#endif							/* REDLOCK_SHARED_ROUNDS_H */
