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

/* Limits */
#define RL_MAX_NODES			15
#define RL_MAX_RESOURCE_LEN		512 /* bytes of a resource name */
#define RL_MIN_TTL_MS			10
#define RL_MAX_TTL_MS			86400000	/* one day */
#define RL_MAX_KEY_PREFIX_LEN	64
#define RL_MAX_HOST_LEN			255
#define RL_OWNER_LEN			32	/* hex characters of the random owner */

/*
 * SQLSTATEs of our own, in class "RL" (classes I-Z are free for
 * implementations).  Documented in README.md.
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

/* guc.c: settings */
extern const RlNodeList *rl_node_list;	/* NULL or count 0 when unset */
extern uint64_t rl_node_list_generation;	/* bumped when nodes/auth change */
extern int	rl_connect_timeout_ms;
extern int	rl_node_timeout_ms;
extern double rl_drift_factor;
extern int	rl_retry_delay_ms;
extern int	rl_retry_jitter_ms;
extern char *rl_key_prefix;
extern char *rl_username;
extern char *rl_password;
extern char *rl_fence_token_setting;
extern int	rl_stats_max_databases; /* only with shared_preload_libraries */
extern int	rl_stats_max_tables;

/* room for the reason rl_parse_node_list() gives for refusing a value */
#define RL_NODES_ERRLEN			512

extern void rl_define_gucs(void);
extern bool rl_parse_node_list(const char *value, RlNodeList *out,
							   char *errbuf, size_t errlen);

/*
 * Why the server configuration's redlock.nodes is not in force: a value
 * from postgresql.conf, the command line, ALTER ROLE/DATABASE SET or the
 * connection request that the check hook refused (the previous value, often
 * the empty default, stays in force).  A complete errdetail sentence naming
 * the value; NULL when there is no such refusal, or when the value in force
 * was set in this session (SET, a function's SET clause).
 */
extern const char *rl_nodes_rejected_reason(void);

/*
 * Where the value of redlock.fence_token in force comes from.  Only a token
 * set in the current transaction may fence a write: one that outlives its
 * transaction also outlives the lease it came from.
 */
typedef enum RlTokenScope
{
	RL_TOKEN_UNSET,				/* empty: no token */
	RL_TOKEN_TRANSACTION,		/* SET LOCAL, set_config(..., true), or a
								 * function's SET clause */
	RL_TOKEN_PLAIN_SET,			/* SET without LOCAL in this transaction: it
								 * will outlive the transaction */
	RL_TOKEN_OUTSIDE			/* not set by this transaction: a session SET
								 * in an earlier one, ALTER ROLE/DATABASE SET,
								 * the server configuration */
} RlTokenScope;

extern RlTokenScope rl_fence_token_scope(void);

/* Monotonic clock in microseconds, for deadlines and lease validity. */
static inline int64_t
rl_now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t) ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

#endif							/* REDLOCK_H */
