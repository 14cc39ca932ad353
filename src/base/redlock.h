/*-------------------------------------------------------------------------
 *
 * redlock.h
 *	  Declarations shared by the parts of the redlock extension.
 *
 * redlock takes Redlock leases on N independent Redis masters and hands out
 * fencing tokens; the fence trigger rejects writes carrying stale tokens.
 *
 *-------------------------------------------------------------------------
 */
#ifndef REDLOCK_H
#define REDLOCK_H

#include <stdint.h>
#include <time.h>

/*
 * pg_noreturn (PostgreSQL 18+) goes before a declaration; 18 removed the
 * trailing pg_attribute_noreturn() that older releases have instead.  GCC,
 * clang and MSVC all accept the attribute in front of the declaration.
 */
#ifndef pg_noreturn
#define pg_noreturn pg_attribute_noreturn()
#endif

/* Limits */
#define RL_MAX_NODES			15
#define RL_MAX_RESOURCE_LEN		512 /* bytes of a resource name */
#define RL_MIN_TTL_MS			10
#define RL_MAX_TTL_MS			86400000	/* one day */
#define RL_MAX_KEY_PREFIX_LEN	64
#define RL_MAX_HOST_LEN			255
#define RL_MAX_MULTI			16	/* resources of one multi-resource call */
#define RL_OWNER_LEN			100	/* a lock's value: random part and holder */
#define RL_OWNER_RANDOM_LEN		32	/* hex characters of its random part */
#define RL_KEY_MAX	(RL_MAX_KEY_PREFIX_LEN + 5 + RL_MAX_RESOURCE_LEN)	/* a Redis key */

/*
 * SQLSTATEs of our own, in class "RL" (classes I-Z are free for
 * implementations).  Documented in doc/reference.md ("SQLSTATEs").
 */
#define ERRCODE_REDLOCK_STALE_TOKEN		MAKE_SQLSTATE('R','L','0','0','1')
#define ERRCODE_REDLOCK_NOT_GRANTED		MAKE_SQLSTATE('R','L','0','0','2')
#define ERRCODE_REDLOCK_LEASE_LOST		MAKE_SQLSTATE('R','L','0','0','3')
#define ERRCODE_REDLOCK_CONFIG			MAKE_SQLSTATE('R','L','0','0','4')
#define ERRCODE_REDLOCK_PROTOCOL		MAKE_SQLSTATE('R','L','0','0','5')

/* One configured node, as parsed from redlock.nodes */
typedef struct RlNodeAddr
{
	char		host[RL_MAX_HOST_LEN + 1];
	int			port;
} RlNodeAddr;

typedef struct RlNodeList
{
	int			count;
	RlNodeAddr	nodes[RL_MAX_NODES];
} RlNodeList;

/*
 * The clock of every deadline and lease validity, in microseconds: the
 * time the Redis nodes' PX timers run, whatever happens to this machine.
 * CLOCK_MONOTONIC stops while the system is suspended (Linux), so a lease
 * would seem to have time left that the nodes' timers have already spent;
 * CLOCK_BOOTTIME counts the suspension too.  Both are the same for every
 * process, so the lock table in shared memory can hold their values.
 * Where there is no CLOCK_BOOTTIME, CLOCK_MONOTONIC.
 */
#ifdef CLOCK_BOOTTIME
#define RL_LEASE_CLOCK		CLOCK_BOOTTIME
#else
#define RL_LEASE_CLOCK		CLOCK_MONOTONIC
#endif

static inline int64_t
rl_now_us(void)
{
	struct timespec ts;

	clock_gettime(RL_LEASE_CLOCK, &ts);
	return (int64_t) ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

#endif							/* REDLOCK_H */
