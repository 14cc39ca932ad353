/*-------------------------------------------------------------------------
 *
 * node_internal.h
 *	  The node layer's own state: one connection per Redis node per
 *	  backend, shared by node_conn.c (connection lifecycle), node_pipeline.c
 *	  (commands queued on a connection and the replies it owes) and
 *	  node_round.c (one request sent to every node, replies awaited).
 *
 *	  Nothing outside those three files includes this header.
 *
 *-------------------------------------------------------------------------
 */
#ifndef REDLOCK_NODE_INTERNAL_H
#define REDLOCK_NODE_INTERNAL_H

#include <hiredis/hiredis.h>

#include "nodes.h"

#define RL_MAX_OWED			1024	/* replies a connection may owe; a long
									 * silence usually fails it first */
#define RL_TAG_AUTH			UINT64_C(0)
#define RL_TAG_DISCARD		UINT64_MAX
#define RL_MAX_KEPT			32	/* must-deliver commands kept for a node
								 * that cannot be reached now */

typedef enum RlConnState
{
	RL_CONN_NONE,
	RL_CONN_CONNECTING,
	RL_CONN_READY
} RlConnState;

typedef struct RlNode
{
	RlNodeAddr	addr;
	char		name[RL_MAX_HOST_LEN + 16];
	redisContext *ctx;
	bool		fd_reserved;	/* AcquireExternalFD() done for ctx's socket */
	uint64_t	serial;			/* counts the connections opened */
	RlConnState state;
	bool		want_write;		/* hiredis holds unsent output */
	int64_t		connect_deadline_us;
	int64_t		retry_at_us;	/* backoff: no reconnect before this */
	int64_t		failed_at_us;	/* when last_error happened */
	int			backoff_ms;
	char		last_error[128];
	bool		reported_down;	/* we logged that it stopped answering */
	bool		push_refused;	/* we logged a refused subscription */

	/* must-deliver commands not yet sent, sent first on the next connection */
	char	   *kept_cmd[RL_MAX_KEPT];
	int			kept_len[RL_MAX_KEPT];
	int			nkept;

	/* ring of tags of the replies this connection still owes, oldest first */
	uint64_t	owed[RL_MAX_OWED];
	char	   *owed_cmd[RL_MAX_OWED];	/* must-deliver: kept until answered */
	int			owed_cmd_len[RL_MAX_OWED];
	int			owed_head;
	int			owed_count;
	int64_t		last_progress_us;	/* last reply, or when owing began */

	/* current round */
	int64_t		asked_at_us;	/* when our command could first be sent */
	bool		was_idle;		/* an idle connection was reused for it */

	/* position in the wait event set, -1 if none */
	int			wes_pos;
	uint32		wes_events;
} RlNode;

extern RlNode rl_nodes[RL_MAX_NODES];
extern int	rl_nnodes;
extern uint64_t rl_round_id;	/* tag of the round being waited for */
extern uint64_t rl_dispatch_tag;	/* tag of what is being dispatched */
extern bool rl_wes_stale;		/* sockets changed: rebuild the wait set */

/* node_conn.c */
extern void node_connect(RlNode *node, RlRequest *req);
extern void node_connect_done(RlNode *node, RlRequest *req);
extern void node_disconnect(RlNode *node);
extern void node_fail(RlNode *node, RlRequest *req, const char *fmt,...) pg_attribute_printf(3, 4);
extern void node_lost(RlNode *node, RlRequest *req, const char *what);
extern void node_answering(RlNode *node);
extern const char *node_reply_refusal(void);

/* node_pipeline.c */
extern bool pipeline_queue(RlNode *node, const RlRequest *req, uint64_t tag);
extern bool pipeline_owe(RlNode *node, uint64_t tag);
extern void pipeline_keep(RlNode *node, const RlRequest *req);
extern void pipeline_requeue_owed(RlNode *node);
extern void pipeline_send_kept(RlNode *node);
extern void pipeline_forget_kept(RlNode *node);
extern void pipeline_read(RlNode *node, RlRequest *req);
extern void pipeline_write(RlNode *node, RlRequest *req);

#endif							/* REDLOCK_NODE_INTERNAL_H */
