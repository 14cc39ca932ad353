/*-------------------------------------------------------------------------
 *
 * shared_rounds_permits.h
 *	  Which backends may hold connections of their own to the Redis nodes:
 *	  the permits that bound a server's connections to each node
 *	  (shared_rounds_permits.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef REDLOCK_SHARED_ROUNDS_PERMITS_H
#define REDLOCK_SHARED_ROUNDS_PERMITS_H

#include "net/nodes.h"

/*
 * Around every round of a backend (the round hook): begin lets go of
 * connections the idle timer ended, once they answered what they owe (or
 * at drain_deadline_us, serving interrupts meanwhile if interruptible);
 * until end, the timer leaves them be.
 */
extern void rl_own_round_begin(int64_t drain_deadline_us, bool interruptible);
extern void rl_own_round_end(void);

/* true without shared_preload_libraries: no permits, no bound */
extern bool rl_own_permit_held(void);
extern bool rl_own_permit_try(void);
extern void rl_own_permit_wait(bool nothrow, bool must_deliver);
extern void rl_own_permit_abort(void);

/* for redlock_dispatcher: false without shared_preload_libraries */
extern bool rl_own_permit_counts(int *in_use, int *max, uint64_t *waits,
								 uint64_t *waits_failed);

#endif							/* REDLOCK_SHARED_ROUNDS_PERMITS_H */
