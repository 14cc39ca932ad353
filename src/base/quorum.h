/*-------------------------------------------------------------------------
 *
 * quorum.h
 *	  The Redlock quorum rules and fencing-token choice, as pure functions.
 *
 * Nothing here does I/O or depends on PostgreSQL, so test/unit can check
 * the rules against adversarial orderings directly.
 *
 *-------------------------------------------------------------------------
 */
#ifndef REDLOCK_QUORUM_H
#define REDLOCK_QUORUM_H

#include <stdbool.h>
#include <stdint.h>

/* What one node said in one round. */
typedef enum RlVote
{
	RL_VOTE_PENDING,			/* no answer yet */
	RL_VOTE_YES,				/* granted / done */
	RL_VOTE_NO,					/* answered, but refused (held by another owner) */
	RL_VOTE_FAILED				/* could not answer: down, timed out, error */
} RlVote;

typedef enum RlDecision
{
	RL_UNDECIDED,				/* keep waiting */
	RL_WON,						/* a majority said yes */
	RL_CONTENDED,				/* a majority answered, too few said yes */
	RL_UNAVAILABLE				/* a majority can no longer answer */
} RlDecision;

typedef struct RlTally
{
	int			yes;
	int			no;
	int			failed;
	int			pending;
} RlTally;

/*
 * A round that asks about several items at once (one key each) gets from
 * every node that answers a yes or no per item: bit i is item i's yes.
 */
#define RL_MAX_ITEMS	256		/* items of one multi-item round */
#define RL_ITEM_WORDS	(RL_MAX_ITEMS / 64)

typedef struct RlItemFlags
{
	uint64_t	bits[RL_ITEM_WORDS];
} RlItemFlags;

static inline void
rl_item_flag_set(RlItemFlags *f, int item)
{
	f->bits[item / 64] |= UINT64_C(1) << (item % 64);
}

static inline bool
rl_item_flag(const RlItemFlags *f, int item)
{
	return (f->bits[item / 64] >> (item % 64)) & 1;
}

extern int	rl_majority(int nnodes);
extern RlTally rl_tally(const RlVote *votes, int nvotes);
extern RlDecision rl_decide(int nnodes, RlTally t);
extern RlTally rl_tally_item(const RlVote *votes, const RlItemFlags *flags,
							 int nvotes, int item);
extern int	rl_decide_items(int nnodes, const RlVote *votes,
							const RlItemFlags *flags, int nitems,
							RlTally *tallies, RlDecision *decisions);

extern int64_t rl_drift_us(int64_t ttl_ms, double drift_factor);
extern int64_t rl_validity_us(int64_t ttl_ms, int64_t elapsed_us,
							  double drift_factor);
extern int64_t rl_valid_until_us(int64_t start_us, int64_t ttl_ms,
								 double drift_factor);
extern int64_t rl_gone_from_nodes_us(int64_t valid_until_us, int64_t ttl_ms,
									 double drift_factor);

extern int64_t rl_propose_token(int64_t wall_clock_us, int64_t last_token);
extern bool rl_choose_token(int64_t proposal, const int64_t *counters,
							int ncounters, int64_t *token);
extern bool rl_handoff_fresh(int64_t set_after_us, int64_t now_us,
							 int64_t round_us);

/*
 * What this server last saw of one node (an entry of redlock.nodes): its
 * run_id, and when the server behind it started if that run_id was seen to
 * replace another.
 */
#define RL_RUN_ID_LEN	40

typedef struct RlRestartMemo
{
	char		run_id[RL_RUN_ID_LEN + 1];	/* "" until first seen */
	bool		restarted;		/* run_id replaced another one */
	int64_t		start_us;		/* if so, when its server started */
} RlRestartMemo;

extern int64_t rl_server_start_us(int64_t seen_us, int64_t uptime_s);
extern bool rl_restart_sighting(RlRestartMemo *memo, const char *run_id,
								int64_t start_us);
extern int64_t rl_quarantined_until(const RlRestartMemo *memo,
									int64_t quarantine_ms, int64_t now_us);

extern bool rl_parse_counter(const char *s, size_t len, int64_t *value);
extern int	rl_format_counter(int64_t value, char *buf);

#endif							/* REDLOCK_QUORUM_H */
