/*-------------------------------------------------------------------------
 *
 * lease_acquire.h
 *	  Taking a lease: the acquire loop of the lock calls (lease_acquire.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef REDLOCK_LEASE_ACQUIRE_H
#define REDLOCK_LEASE_ACQUIRE_H

extern int64 rl_lease_acquire(const char *resource, int ttl_ms, bool xact,
							  bool try_only, int wait_ms, bool keep_alive);
extern void rl_warn_quarantine_short(int ttl_ms);

#endif							/* REDLOCK_LEASE_ACQUIRE_H */
