/*-------------------------------------------------------------------------
 *
 * guc.h
 *	  The redlock.* settings (guc.c), as read by the rest of the
 *	  extension; those of how the nodes are reached are in guc_net.h.
 *	  Settings are the bottom layer: they include nothing of ours but
 *	  redlock.h and guc_net.h.
 *
 *-------------------------------------------------------------------------
 */
#ifndef REDLOCK_GUC_H
#define REDLOCK_GUC_H

#include "base/guc_net.h"
#include "base/redlock.h"

extern const RlNodeList *rl_node_list;	/* NULL or count 0 when unset */
extern int	rl_connect_timeout_ms;
extern int	rl_node_timeout_ms;
extern double rl_drift_factor;
extern int	rl_retry_delay_ms;
extern int	rl_retry_jitter_ms;
extern char *rl_key_prefix;
extern char *rl_username;
extern char *rl_password;
extern char *rl_fence_token_setting;
extern int	rl_fence_max_ahead_s;	/* seconds; -1: no limit */
extern int	rl_max_leases;	/* only with shared_preload_libraries */
extern int	rl_keep_alive_limit_s;
extern int	rl_restart_quarantine_ms;	/* 0: off */
extern int	rl_stats_max_databases; /* only with shared_preload_libraries */
extern int	rl_stats_max_tables;
extern int	rl_shared_connections;	/* RlSharedMode */
extern int	rl_local_handoffs;	/* guc_wait.c */
extern int	rl_debug_complete_delay_ms; /* tests only (dispatcher.c) */

/* redlock.shared_connections: when rounds go to the dispatcher worker */
typedef enum RlSharedMode
{
	RL_SHARED_OFF,
	RL_SHARED_AUTO,				/* while others' rounds are under way */
	RL_SHARED_ALWAYS			/* every round that can */
} RlSharedMode;

/* room for the reason rl_parse_node_list() gives for refusing a value */
#define RL_NODES_ERRLEN			512

extern void rl_define_gucs(void);
extern void rl_define_wait_gucs(void);
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

#endif							/* REDLOCK_GUC_H */
