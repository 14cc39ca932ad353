/*-------------------------------------------------------------------------
 *
 * node_internal.h
 *	  The node layer's own state: one connection per Redis node per
 *	  backend, shared by the files of src/net/ (listed below, lowest
 *	  first, with their functions).
 *
 *	  Nothing outside those files includes this header.
 *
 *-------------------------------------------------------------------------
 */
#ifndef REDLOCK_NODE_INTERNAL_H
#define REDLOCK_NODE_INTERNAL_H

#include <sys/socket.h>

#include <hiredis/hiredis.h>

#include "base/guc_net.h"
#include "net/nodes.h"

#define RL_MAX_OWED			1024	/* replies a connection may owe; a long
									 * silence usually fails it first */
#define RL_TAG_AUTH			UINT64_C(0)
#define RL_TAG_DISCARD		UINT64_MAX
#define RL_TAG_INFO			(UINT64_MAX - 1)	/* INFO server at connect */
#define RL_MAX_KEPT			RL_MAX_OWED /* must-deliver commands kept for a
									 * node that cannot take them now: as
									 * many as a connection may owe (the
									 * dispatcher's, for hundreds of
									 * backends, owes hundreds) */
#define RL_MAX_ADDRS		8	/* addresses of one node tried in turn */

/*
 * The largest reply a node may send (a lock reply, INFO, a pub/sub
 * message): none of ours comes near it.  A node that sends more, or
 * announces a bulk string and streams it, has its connection closed once
 * this much of one reply is read, so a broken or hostile node cannot make
 * a backend or a worker buffer gigabytes.  Documented in doc/protocol.md
 * ("Replies that are too large").
 */
#define RL_MAX_REPLY_BYTES	(1024 * 1024)
#define RL_MAX_REPLY_TEXT	"1 MB"

typedef enum RlConnState
{
	RL_CONN_NONE,
	RL_CONN_RESOLVING,			/* waiting for the node's addresses */
	RL_CONN_CONNECTING,			/* TCP connect in progress */
	RL_CONN_HANDSHAKE,			/* TLS handshake in progress */
	RL_CONN_READY
} RlConnState;

/* socket events a node waits for (the same bits as poll(2)'s) */
#define RL_EV_READ			0x01
#define RL_EV_WRITE			0x02

struct ssl_st;					/* OpenSSL's SSL, seen only by node_tls.c */

typedef struct RlNode
{
	RlNodeAddr	addr;
	char		name[RL_MAX_HOST_LEN + 16];
	uint64_t	serial;			/* counts the connections opened */
	RlConnState state;
	int			fd;				/* our socket, -1 if none; counted with
								 * AcquireExternalFD() while open */
	redisReader *reader;		/* replies parsed from what we read */
	char	   *obuf;			/* output not yet written (malloc'd) */
	size_t		olen;			/* bytes in obuf */
	size_t		opos;			/* bytes of obuf already written */
	size_t		ocap;			/* allocated size of obuf */
	bool		want_write;		/* obuf holds unsent output */
	struct ssl_st *ssl;			/* TLS session, or NULL */
	int			tls_events;		/* RL_EV_*: what the TLS layer waits for */
	int			tls_write_len;	/* length of an SSL_write to be retried */
	bool		tls_broken;		/* TLS itself failed on this connection
								 * (an alert such as "certificate
								 * required"), not the transport */

	/* the addresses being tried, in order */
	struct sockaddr_storage addrs[RL_MAX_ADDRS];
	socklen_t	addrlens[RL_MAX_ADDRS];
	int			naddrs;
	int			next_addr;		/* the next one to try */
	char		addr_error[128];	/* why the last one failed */
	uint64_t	resolve_seq;	/* names the lookup in progress, 0 if none */
	bool		resolve_done;	/* the lookup ended (addrs or addr_error) */

	int64_t		connect_started_us;
	int64_t		phase_started_us;	/* when the current state began */
	int64_t		connect_deadline_us;
	int64_t		retry_at_us;	/* backoff: no reconnect before this */
	int64_t		failed_at_us;	/* when last_error happened */
	int			backoff_ms;
	char		last_error[RL_DETAIL_LEN];
	const char *last_hint;		/* likely cause of last_error, or NULL */
	RlNodeOutcome last_outcome; /* what kind of failure last_error is */
	int64_t		last_rtt_us;	/* how long its last answer to a request
								 * took, 0 before the first */
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
	bool		owed_by_sha[RL_MAX_OWED];	/* sent as EVALSHA */
	int			owed_head;
	int			owed_count;
	int64_t		last_progress_us;	/* last reply, or when owing began */
	int64_t		stalled_us;		/* the time this process was not running
								 * since then, which its clocks skip
								 * (wait_stall_check) */
	int64_t		last_heard_us;	/* last reply or push */

	/* scripts (node_script.c): bit i: this connection ran script i */
	uint32		scripts_run;
	bool		evalsha_refused;	/* an ACL allows EVAL but not EVALSHA */

	/* input on this connection */
	uint64_t	bytes_in;		/* bytes read since it was opened */
	size_t		reply_bytes;	/* bytes of the reply being read that the
								 * reader has already taken in */

	/* the Redis server behind the name (node_server.c) */
	RlServerIdent ident;
	int			same_as;		/* another node (index) found to be the same
								 * server, or -1 */
	uint64_t	same_serials[2];	/* the two connections that showed it */

	/* current round */
	int64_t		asked_at_us;	/* when our command could first be sent */
	bool		was_idle;		/* an idle connection was reused for it */
	volatile bool shut_ours;	/* ended by rl_nodes_shut_idle: its close
								 * by the node is no failure */

	/* position in the wait event set, -1 if none */
	int			wes_pos;
	uint32		wes_events;
} RlNode;

/* One socket that is ready, whichever way we waited. */
typedef struct RlReady
{
	RlNode	   *node;			/* NULL: a resolver socket */
	int			fd;
	bool		readable;
	bool		writable;
} RlReady;

#define RL_MAX_RESOLVER_SOCKS	16
#define RL_MAX_READY			(RL_MAX_NODES + RL_MAX_RESOLVER_SOCKS)

/* Is the node on its way to a connection (lookup, connect, handshake)? */
static inline bool
node_connecting(const RlNode *node)
{
	return node->state == RL_CONN_RESOLVING ||
		node->state == RL_CONN_CONNECTING ||
		node->state == RL_CONN_HANDSHAKE;
}

/*
 * The request of the round (or of the batch of rounds, chained by
 * batch_next) that a reply owed under tag answers, or NULL: a reply to an
 * earlier round, or to a request nobody waits for.
 */
static inline RlRequest *
round_request(RlRequest *req, uint64_t tag)
{
	if (tag == RL_TAG_DISCARD)
		return NULL;
	for (RlRequest *r = req; r != NULL; r = r->batch_next)
		if (r->tag == tag)
			return r;
	return NULL;
}

/*
 * The files of the node layer, lowest first.  Each uses only the files
 * above it in this list (test/check-layers.sh checks it); a lower one that
 * must tell a higher one something returns it (pipeline_read's lost
 * connection) or calls a function pointer it was given.
 */

/* node_table.c: the node table and the flags the files share */
extern RlNode rl_nodes[RL_MAX_NODES];
extern int	rl_nnodes;
extern uint64_t rl_round_id;	/* tag of the last round dispatched */
extern bool rl_wes_stale;		/* sockets changed: rebuild the wait set */
extern bool rl_latch_fired;		/* the latch was set during a round */

/* node_report.c: failures put in words, likely causes; the health hook */
extern void report_clip(char *dst, size_t len, const char *fmt,...) pg_attribute_printf(3, 4);
extern void report_vclip(char *dst, size_t len, const char *fmt, va_list args) pg_attribute_printf(3, 0);
extern const char *report_closed_hint(const RlNode *node);
extern const char *report_text_hint(const char *text);
extern const char *report_refusal_hint(const char *text, size_t len);
extern bool report_server_wide(void);
extern void report_failure(const RlNode *node, RlNodeOutcome kind,
						   int64_t began_us);
extern void report_round(const RlRequest *req);

/* node_tls.c: TLS on a connection */
extern bool tls_begin(RlNode *node, char *err, size_t errlen);
extern void tls_end(RlNode *node);
extern int	tls_handshake(RlNode *node, char *err, size_t errlen);
extern int	tls_read(RlNode *node, char *buf, int len, char *err, size_t errlen);
extern int	tls_write(RlNode *node, const char *buf, size_t len, char *err,
					  size_t errlen);
extern bool tls_pending(const RlNode *node);
extern bool tls_heard_server(const RlNode *node);
extern bool tls_peer_speaks_plaintext(const RlNode *node, char *text, size_t len);

/* node_sock.c: the socket and its buffers */
extern bool sock_open(RlNode *node, const struct sockaddr *sa, socklen_t salen,
					  char *err, size_t errlen);
extern void sock_close(RlNode *node);
extern bool sock_append(RlNode *node, const char *cmd, size_t len);
extern void sock_reset_output(RlNode *node);
extern int	sock_write(RlNode *node, char *err, size_t errlen);
extern int	sock_read(RlNode *node, char *err, size_t errlen);
extern size_t sock_unparsed(const RlNode *node);
extern bool sock_has_buffered_input(const RlNode *node);

/* node_resolve.c: the nodes' addresses */
extern void resolve_start(RlNode *node);
extern void resolve_cancel(RlNode *node);
extern void resolve_shutdown(void);
extern int	resolve_sockets(int *fds, int *events, int max);
extern void resolve_process(int fd, bool readable, bool writable);
extern long resolve_timeout_ms(long max_ms);

/* node_script.c: scripts sent by their SHA1 */
extern int	script_by_sha(RlNode *node, const RlRequest *req);
extern int	script_sha_form(const RlRequest *req, int s, char **buf, int *cap);
extern char *script_eval_form(const char *shacmd, int shalen, int *evallen);
extern bool script_refused(RlNode *node, const redisReply *reply);
extern uint32_t *script_command_slot(const RlRequest *req);
extern void script_forget_all(RlNode *node);

/* node_queue.c: commands queued, replies owed, must-deliver commands kept */
extern void queue_format_begin(const RlRequest *req);
extern void queue_format_end(void);
extern bool queue_request(RlNode *node, const RlRequest *req, uint64_t tag);
extern bool queue_owe(RlNode *node, uint64_t tag);
extern void queue_keep(RlNode *node, const RlRequest *req);
extern void queue_keep_text(RlNode *node, char *cmd, int len);
extern void queue_requeue_owed(RlNode *node);
extern void queue_send_kept(RlNode *node, int upto);

/* node_fail.c: a node's failure and recovery */
extern void node_disconnect(RlNode *node);
extern void node_fail(RlNode *node, RlRequest *req, RlNodeOutcome kind,
					  const char *fmt,...) pg_attribute_printf(4, 5);
extern void node_fail_hint(RlNode *node, RlRequest *req, RlNodeOutcome kind,
						   const char *hint, const char *fmt,...) pg_attribute_printf(5, 6);
extern void node_answering(RlNode *node);
extern void node_connect_timed_out(RlNode *node, RlRequest *req);

/* node_server.c: which server answers (INFO server), its epoch, duplicates */
extern bool server_queue_info(RlNode *node);
extern void server_learn(RlNode *node, RlRequest *req, const redisReply *reply);
extern bool server_same_as_other(const RlNode *node);
extern bool server_quarantine_refusal(RlNode *node, RlNodeResult *res,
									  const char *str, size_t len);
extern void server_refuse_duplicates(void);

/* node_pipeline.c: replies read and handed on, queued commands written */
extern redisReader *pipeline_new_reader(void);
extern bool pipeline_read(RlNode *node, RlRequest *req, char *lost, size_t lostlen);
extern bool pipeline_write(RlNode *node, char *lost, size_t lostlen);

/* node_conn.c: the node list in force, connecting, a connection's events */
extern void node_connect(RlNode *node, RlRequest *req);
extern int	node_wanted_events(const RlNode *node);
extern void node_event(RlNode *node, RlRequest *req, bool readable, bool writable);
extern void node_resolved(RlNode *node, RlRequest *req);
extern void node_lost(RlNode *node, RlRequest *req, const char *what);
extern void node_read(RlNode *node, RlRequest *req);
extern void node_write(RlNode *node, RlRequest *req);
extern void node_lookups_ended(RlRequest *req);

/* node_wait.c: waiting for the sockets */
extern short node_poll_events(const RlNode *node);
extern int	wait_in_event_set(long timeout_ms, RlReady *ready);
extern int	wait_in_poll(long timeout_ms, RlReady *ready);
extern void wait_pump_resolver(RlRequest *req);
extern void wait_handle_ready(RlRequest *req, RlReady *ready, int nready);
extern bool wait_any_buffered_input(void);
#define RL_STALL_SLICE_MS	100 /* a round's longest wait between looks at
									 * the clock (wait_stall_check) */
extern void wait_stall_reset(void);
extern void wait_stall_begin(void);
extern void wait_stall_expect(int64_t until_us);
extern void wait_stall_check(int64_t now);
extern const char *wait_stall_who(void);

/* node_round.c: one request to every node (and the functions of nodes.h) */
extern void round_housekeeping(void);
extern void round_dispatch(RlNode *node, RlRequest *req, uint64_t tag,
						   bool honour_backoff, bool write_now);
extern void round_dispatch_all(RlRequest *req, uint64_t tag, bool write_now);
extern bool round_dispatch_backed_off(RlRequest *req);
extern bool round_finished(RlRequest *req);
extern int64_t round_node_deadline(const RlNode *node);
extern void round_node_overdue(RlNode *node, RlRequest *req, int64_t now,
							   bool round_deadline);
extern void round_wait_step(RlRequest *req, bool *polled, bool use_poll);
extern void round_flush(void);

/* node_batch.c: many requests at once (its functions are in nodes.h) */

/*
 * Replies a connection may owe now: RL_MAX_OWED, or fewer for a test
 * (redlock.debug_owed_limit); owing three quarters of that, it is asked
 * nothing new (round_dispatch).
 */
static inline int
rl_owed_limit(void)
{
	return rl_debug_owed_limit > 0 ? Min(rl_debug_owed_limit, RL_MAX_OWED) :
		RL_MAX_OWED;
}

static inline int
rl_owed_behind(void)
{
	return rl_owed_limit() * 3 / 4;
}

#endif							/* REDLOCK_NODE_INTERNAL_H */
