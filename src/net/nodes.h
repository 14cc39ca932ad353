/*-------------------------------------------------------------------------
 *
 * nodes.h
 *	  The Redis nodes as seen by the protocol: one request sent to all of
 *	  them at once, with the replies awaited in a single wait loop.
 *
 *	  The node layer knows nothing of leases: it sends commands, reads
 *	  replies, and keeps the commands a caller marks as must-deliver until
 *	  their node has answered them.
 *
 *-------------------------------------------------------------------------
 */
#ifndef REDLOCK_NODES_H
#define REDLOCK_NODES_H

#include "base/guc.h"
#include "base/quorum.h"
#include "base/redlock.h"

/* How a node's reply to a request is read. */
typedef enum RlReplyKind
{
	RL_REPLY_COUNTER,			/* bulk decimal counter = yes, nil = no,
								 * status "QUEUED n" = no, with n in
								 * queued_ahead */
	RL_REPLY_FLAG,				/* integer 1 = yes, 0 = no */
	RL_REPLY_COUNT,				/* any integer >= 0 = yes */
	RL_REPLY_STATUS,			/* any non-error reply = yes (probes) */
	RL_REPLY_FLAGS				/* array of nitems integers 0 or 1 = yes,
								 * with each item's yes or no in flags */
} RlReplyKind;

/* When a round is finished. */
typedef enum RlRoundGoal
{
	RL_GOAL_QUORUM,				/* decided: won, contended or unavailable */
	RL_GOAL_ANSWERS,			/* a majority answered, or cannot */
	RL_GOAL_ALL,				/* every node answered or timed out */
	RL_GOAL_ITEMS				/* RL_REPLY_FLAGS: every item decided */
} RlRoundGoal;

/*
 * Room for what happened on one node (an errdetail line).  Longer texts,
 * such as a Redis error quoting a script, are cut at a word boundary and
 * end with "...".
 */
#define RL_DETAIL_LEN	384

/*
 * How a request to a node ended, or a failure of the node outside any
 * request: told to the higher layer that keeps the nodes' health (see
 * rl_nodes_set_health_hook below).  The failures are kept by kind.
 */
typedef enum RlNodeOutcome
{
	RL_OUTCOME_NONE,			/* no answer awaited, or none that tells */
	RL_OUTCOME_SUCCESS,			/* answered, yes or no */
	RL_OUTCOME_LATE,			/* no answer within node_timeout (or the
								 * round's deadline), the connection kept:
								 * the answer may still come */
	RL_OUTCOME_REFUSED,			/* connection refused, closed or lost */
	RL_OUTCOME_TIMEOUT,			/* no connection in time, or a connection
								 * given up after a long silence */
	RL_OUTCOME_REDIS_ERROR,		/* an error reply (OOM, NOAUTH, ...) */
	RL_OUTCOME_TLS,				/* the TLS handshake failed */
	RL_OUTCOME_RESOLVE,			/* the host name did not resolve */
	RL_OUTCOME_OTHER			/* a wrong answer (protocol error), or a
								 * local failure */
} RlNodeOutcome;

#define RL_OUTCOME_FIRST_ERROR	RL_OUTCOME_REFUSED
#define RL_OUTCOME_ERROR_KINDS	(RL_OUTCOME_OTHER - RL_OUTCOME_REFUSED + 1)

typedef struct RlNodeResult
{
	RlVote		vote;
	int64_t		asked_us;		/* when the node was asked, 0 if not */
	RlNodeOutcome outcome;		/* what failed it, when vote is FAILED */
	bool		protocol_error; /* the node answered with something wrong */
	bool		in_backoff;		/* not asked: the node failed recently */
	int64_t		counter;		/* RL_REPLY_COUNTER: counter before grant */
	bool		queued;			/* RL_REPLY_COUNTER: "QUEUED n", a refusal
								 * that left the caller's offer behind n
								 * others (queued_ahead) */
	int32		queued_ahead;
	char	   *reply_text;		/* RL_REPLY_STATUS: bulk reply, palloc'd */
	RlItemFlags flags;			/* RL_REPLY_FLAGS: each item's yes */
	int64_t		elapsed_us;		/* time to answer */
	int64_t		latency_us;		/* a node late (RL_OUTCOME_LATE): how long
								 * its last answer took, 0 if none came */
	char		detail[RL_DETAIL_LEN];	/* what happened, for errdetail */
	const char *hint;			/* what is likely wrong (a full sentence,
								 * static), or NULL */
} RlNodeResult;

typedef struct RlRequest
{
	/* input */
	RlReplyKind reply_kind;
	RlRoundGoal goal;
	int			argc;
	const char **argv;
	const size_t *argvlen;
	bool		skip[RL_MAX_NODES]; /* true: do not ask this node */
	bool		must_deliver;	/* a node that cannot take it now gets it
								 * when it can (kept until answered) */
	bool		nothrow;		/* commit/abort/exit: never ereport(ERROR),
								 * no interrupts, no wait event set */
	int64_t		deadline_us;	/* 0, or stop waiting at this time */
	bool		no_reply;		/* (P)SUBSCRIBE-style: nothing is owed for
								 * it; answers arrive as pushes */
	int			nitems;			/* RL_REPLY_FLAGS: 1 .. RL_MAX_ITEMS */
	bool		probe;			/* redlock_nodes: ask every node, even one
								 * found to be another's server, and never
								 * raise for that */
	bool		static_script;	/* EVAL whose script (argv[1]) is text that
								 * never changes or moves: sent as EVALSHA
								 * where the connection ran it before */

	/* the node layer's own */
	struct RlRequest *batch_next;	/* the next undecided request of the
									 * same batch (rl_nodes_run_batch) */
	bool		batch_retried;	/* its nodes in backoff were asked again */

	/* output */
	uint64_t	tag;			/* names the round on the connections (the
								 * node layer's round counter when it was
								 * dispatched); see rl_nodes_oldest_owed */
	int			nnodes;
	RlNodeResult results[RL_MAX_NODES];
	RlTally		tally;
	RlDecision	decision;
} RlRequest;

/*
 * A node's result before its round: every field cleared but detail, which
 * is most of it, emptied.  Cheaper than clearing the whole: a round does
 * it for every node, a shared slot for every round.
 */
StaticAssertDecl(offsetof(RlNodeResult, hint) + sizeof(const char *) ==
				 sizeof(RlNodeResult),
				 "rl_node_result_init: hint must follow detail, last");

static inline void
rl_node_result_init(RlNodeResult *res)
{
	memset(res, 0, offsetof(RlNodeResult, detail));
	res->detail[0] = '\0';
	res->hint = NULL;
}

/*
 * A request cleared but for its results, which its round sets for the
 * nodes it asks (req->nnodes of them, rl_node_result_init first): only
 * those are read.
 */
StaticAssertDecl(offsetof(RlRequest, tally) ==
				 offsetof(RlRequest, results) + sizeof(RlNodeResult) * RL_MAX_NODES,
				 "rl_request_clear: tally must follow results");

static inline void
rl_request_clear(RlRequest *req)
{
	memset(req, 0, offsetof(RlRequest, results));
	memset(&req->tally, 0, sizeof(RlRequest) - offsetof(RlRequest, tally));
}

extern int	rl_nodes_count(void);
extern const char *rl_node_name(int i);
extern bool rl_nodes_config_changed(void);
extern uint64_t rl_nodes_fingerprint(void);
extern void rl_nodes_apply_config(void);
extern void rl_nodes_run(RlRequest *req);
extern void rl_nodes_send(RlRequest *req);
extern void rl_nodes_drain(int64_t deadline_us);
extern void rl_nodes_disconnect_all(void);
/*
 * rl_nodes_shut_idle, for a signal handler that fires while this process
 * runs no round: ends its connections if all are quiet (true), and
 * rl_nodes_close_shut, at the start of the next round, reads what they
 * still owe (up to the deadline; serving interrupts meanwhile if
 * interruptible) and lets them go.
 */
extern bool rl_nodes_shut_idle(void);
extern void rl_nodes_close_shut(int64_t deadline_us, bool interruptible);
extern int	rl_nodes_open_connections(void);
extern const char *rl_nodes_error_hint(const RlRequest *req,
									   const char *fallback);
extern void rl_nodes_unavailable_hint(const RlRequest *req, char *buf,
									  size_t len);

/*
 * Rounds of many requests at once (the dispatcher worker, which serves the
 * rounds of the backends on one connection per node): every request is
 * dispatched, in order, one command after the other on each node's
 * connection (one write per node for all of them), and the replies go each
 * to its own request.  done is called for each request as soon as its goal
 * is met (or its nodes ran out of time), in no particular order.  When the
 * latch is set during the batch, intake (if not NULL) is asked for up to
 * max more requests, which join the batch.  Returns when every request is
 * done.  A request is decided as if it had been run alone: its own goal,
 * its own deadline, node_timeout per node.  Never raises for a node list
 * naming one server twice (rl_nodes_duplicates tells); waits in a
 * WaitEventSet and serves interrupts, so it is for a worker only.
 */
#define RL_BATCH_INTAKE		64
typedef void (*RlRoundDone) (RlRequest *req, void *arg);
typedef int (*RlRoundIntake) (RlRequest **reqs, int max, void *arg);
extern void rl_nodes_run_batch(RlRequest **reqs, int n, RlRoundIntake intake,
							   RlRoundDone done, void *arg);

/*
 * The tag of the oldest round some connection still owes a reply to, or
 * UINT64_MAX if none does: every round tagged below it has been answered
 * by, or has failed on, every node it was sent to.
 */
extern uint64_t rl_nodes_oldest_owed(void);

/*
 * Must-deliver commands kept for nodes that cannot be reached now, handed
 * from one process to another (a dispatcher worker that exits, to the next
 * one): rl_nodes_hand_kept gives each, with its node's name, to fn and
 * forgets it (close the connections first: what they owed is kept then);
 * rl_nodes_take_kept keeps a copy for the node of that name (false: none,
 * or out of memory).  Neither raises.
 */
typedef void (*RlKeptHandler) (const char *node_name, const char *cmd,
							   int len, void *arg);
extern void rl_nodes_hand_kept(RlKeptHandler fn, void *arg);
extern bool rl_nodes_take_kept(const char *node_name, const char *cmd, int len);

/*
 * The rounds dispatched from now on are tagged above floor: a process that
 * takes over another's work (a new dispatcher worker) keeps the tags of
 * the two apart.
 */
extern void rl_nodes_tags_above(uint64_t floor);

/*
 * This process's own connections owe nothing and hold nothing to send:
 * every command sent on them was answered (replies that arrived are taken
 * first, without waiting).  Must-deliver commands kept for a node that
 * cannot be reached do not count.
 */
extern bool rl_nodes_quiet(void);

/* Two entries of the node list in force are one server (RL004). */
extern bool rl_nodes_duplicates(void);

/*
 * Everything that decides which connections a round uses, as a number:
 * the node list and how the nodes are reached (credentials, TLS, DNS
 * servers).  Two processes with the same number may use each other's
 * connections.
 */
extern uint64_t rl_nodes_settings_fingerprint(void);

/*
 * A higher layer that can run a backend's rounds elsewhere (the dispatcher
 * worker's shared connections, shared/shared_rounds.c) registers a hook.
 * rl_nodes_run (wait true) and rl_nodes_send (wait false) ask it first:
 * true means the round was handed there (and, with wait, ran: req holds
 * its results); false means it runs on this process's own connections,
 * and then own_done is called when it ended (also when it ended by an
 * error: own_done raises nothing).
 */
typedef struct RlRoundHook
{
	bool		(*run_elsewhere) (RlRequest *req, bool wait);
	void		(*own_done) (void);
} RlRoundHook;
extern void rl_nodes_set_round_hook(const RlRoundHook *hook);

/*
 * Who a node is: learned from INFO server, asked once on every new
 * connection (pipelined ahead of the connection's first command, so it
 * costs no round trip of its own) by the script that also reads and keeps
 * the node's epoch (node_server.c).  run_id changes when the server
 * restarts; uptime_s was its uptime when learned_us was read.  Two entries
 * of redlock.nodes with the same run_id on their current connections are
 * one server: lock calls refuse to run (RL004) until the list is fixed.
 */
typedef struct RlServerIdent
{
	char		run_id[41];		/* "" until learned (or INFO refused) */
	int64_t		uptime_s;		/* -1 if unknown */
	int64_t		learned_us;		/* rl_now_us() when learned, 0 if never */
	uint64_t	serial;			/* connection it was learned on */
	uint32_t	changes;		/* times run_id changed (restarts seen) */

	/* the node's epoch (quorum.h), as last read from the node */
	bool		epoch_known;
	RlEpoch		epoch;
	int64_t		epoch_node_now_ms;	/* the node's clock when read */
	int64_t		epoch_read_us;	/* rl_now_us() then */
} RlServerIdent;

extern const RlServerIdent *rl_node_ident(int i);
extern int	rl_node_same_as(int i);

/*
 * The health of the nodes across the server: a higher layer that keeps it
 * (shared/health_memory.c, with shared_preload_libraries) registers a
 * hook, and is told the outcome of every request to a node, at the end of
 * its round (all the round's nodes in one call), and every failure of a
 * node outside a request (a pub/sub connection lost, a connect that failed
 * after its round).  The hook
 * raises nothing: it runs on commit, abort and exit paths too.  While a
 * hook is registered, the node layer leaves the log to it: the per-backend
 * lines "stopped answering" and "answering again" are for a backend alone.
 */
typedef struct RlNodeEvent
{
	const char *node;			/* its entry of redlock.nodes, host:port */
	RlNodeOutcome outcome;
	bool		request;		/* the end of one request to the node */
	int64_t		began_us;		/* rl_now_us() when the request, or the
								 * connection that failed, began */
	uint32_t	command;		/* names the request's command (a hash of
								 * its first two words, the script for
								 * EVAL); 0 outside a request */
	const char *error;			/* a failure: what happened */
	const char *hint;			/* what is likely wrong, or NULL */
	const RlServerIdent *ident; /* the node's epoch, if known (a request) */
} RlNodeEvent;

/* the events of one round (one per node asked), or a single failure */
typedef void (*RlHealthHook) (const RlNodeEvent *events, int nevents);
extern void rl_nodes_set_health_hook(RlHealthHook hook);

/*
 * Pub/sub: what a node pushes goes to the push handler, with the node's
 * index, instead of being matched to requests: messages (["message",
 * channel, payload]) and the confirmations of SUBSCRIBE (no payload).
 */
typedef enum RlPushKind
{
	RL_PUSH_MESSAGE,
	RL_PUSH_SUBSCRIBED
} RlPushKind;

typedef void (*RlPushHandler) (int node, RlPushKind kind,
							   const char *channel, size_t len,
							   const char *payload, size_t payloadlen);
extern void rl_nodes_set_push_handler(RlPushHandler handler);
extern uint64_t rl_node_connection_serial(int i);
extern bool rl_node_connected(int i);
extern void rl_nodes_wait_pushes(long timeout_ms);
extern void rl_nodes_ping_idle(int interval_ms);

#endif							/* REDLOCK_NODES_H */
