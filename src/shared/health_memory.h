/*-------------------------------------------------------------------------
 *
 * health_memory.h
 *	  The health of every Redis node as the whole server sees it, kept in
 *	  shared memory (src/shared/health_memory.c) from what the network layer tells
 *	  of each request, and read by redlock_stats_nodes.
 *
 *-------------------------------------------------------------------------
 */
#ifndef REDLOCK_HEALTH_MEMORY_H
#define REDLOCK_HEALTH_MEMORY_H

#include "datatype/timestamp.h"

#include "net/nodes.h"

/* nodes kept (several node lists of up to 15 nodes each) */
#define RL_HEALTH_NODES		64

/* what the server knows of one node: a copy, for reading */
typedef struct RlNodeHealth
{
	char		node[RL_MAX_HOST_LEN + 16]; /* "" if the entry is free */
	bool		failing;
	TimestampTz tracked_since;	/* when this server first heard of it */
	TimestampTz failing_since;	/* if failing */
	TimestampTz last_error_at;	/* 0 if never */
	TimestampTz last_success_at;	/* 0 if never */
	uint64		requests;
	uint64		errors[RL_OUTCOME_ERROR_KINDS]; /* by RlNodeOutcome, from
												 * RL_OUTCOME_FIRST_ERROR */
	char		last_error[RL_DETAIL_LEN];
	bool		epoch_known;	/* the node's epoch, as last read from it */
	RlEpoch		epoch;
	TimestampTz quarantined_until;	/* 0: not quarantined when last heard */

	/* for the transitions */
	uint32		failing_command;	/* only a success of it ends the failure
									 * (0: any success) */
	int64		fail_began_us;	/* the latest failed request's start */
	int64		success_began_us;	/* the latest successful request's */
	int64		heard_us;		/* the last event, for reuse of the oldest */

	/* the log: at most a line per node every RL_HEALTH_LOG_GAP_MS */
	bool		logged_failing; /* what the last line said */
	int64		logged_us;		/* when it was written; 0: none yet */
	TimestampTz logged_since;	/* the failure the log last told of */
	uint32		folded;			/* changes since then, not logged */
} RlNodeHealth;

extern void rl_health_memory_init(void);
extern bool rl_health_memory_available(void);
extern int	rl_health_memory_copy(RlNodeHealth *out);

#endif							/* REDLOCK_HEALTH_MEMORY_H */
