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

extern int	rl_majority(int nnodes);
extern RlTally rl_tally(const RlVote *votes, int nvotes);
extern RlDecision rl_decide(int nnodes, RlTally t);

extern int64_t rl_drift_us(int64_t ttl_ms, double drift_factor);
extern int64_t rl_validity_us(int64_t ttl_ms, int64_t elapsed_us,
							  double drift_factor);

extern int64_t rl_propose_token(int64_t wall_clock_us, int64_t last_token);
extern bool rl_choose_token(int64_t proposal, const int64_t *counters,
							int ncounters, int64_t *token);

extern bool rl_parse_counter(const char *s, size_t len, int64_t *value);
extern int	rl_format_counter(int64_t value, char *buf);

#endif							/* REDLOCK_QUORUM_H */
