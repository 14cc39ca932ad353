/*-------------------------------------------------------------------------
 *
 * stats.h
 *	  Cluster-wide lease statistics (needs shared_preload_libraries).
 *
 *-------------------------------------------------------------------------
 */
#ifndef REDLOCK_STATS_H
#define REDLOCK_STATS_H

/* Order matches the columns of redlock_stats(). */
typedef enum RlStatCounter
{
	RL_STAT_ACQUIRES,			/* acquire calls that went to Redis */
	RL_STAT_ATTEMPTS,			/* acquire rounds a lock call ran itself,
								 * retries included; a handoff takes none */
	RL_STAT_GRANTS,
	RL_STAT_REFUSED_HELD,		/* try-lock: held elsewhere */
	RL_STAT_REFUSED_NO_QUORUM,	/* fewer than a majority could answer */
	RL_STAT_REFUSED_TIMEOUT,	/* lock_timeout, or validity used up */
	RL_STAT_REFUSED_ERROR,		/* nodes answered with errors */
	RL_STAT_EXTENDS,
	RL_STAT_EXTEND_FAILURES,
	RL_STAT_RELEASES,
	RL_STAT_FENCE_REJECTIONS,
	RL_STAT_NCOUNTERS
} RlStatCounter;

#define RL_LATENCY_BUCKETS 12

extern void rl_stats_init(void);
extern void rl_stats_required(void);
extern void rl_stats_count(RlStatCounter counter);
extern void rl_stats_acquire_latency(int64 elapsed_us);
extern void rl_stats_fence_rejection(Oid relid);

#endif							/* REDLOCK_STATS_H */
