/*-------------------------------------------------------------------------
 *
 * node_round.c
 *	  One request sent to every node at once, and the replies awaited in a
 *	  single wait loop until the round's outcome is known.
 *
 * A round appends one command to every node's connection, flushes them all,
 * and waits.  The round ends as soon as its goal is met; nodes that have
 * not answered are not waited for.  A node has node_timeout to answer (a
 * connect in progress, connect_timeout); a request may also carry a
 * deadline for the whole round.
 *
 * How the waiting is done, in a WaitEventSet or with poll(2), is in
 * node_wait.c.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <poll.h>

#include "miscadmin.h"
#include "pgstat.h"
#include "storage/latch.h"
#include "utils/memutils.h"

#include "net/node_internal.h"

/*
 * How long a connection may owe replies without producing one before it is
 * dropped.  Rounds stop waiting for a silent node after node_timeout; the
 * connection itself is kept much longer, because a node that is merely slow
 * (overloaded) still applies the releases we pipeline behind its backlog,
 * while a dropped connection would lose them and leave locks to their TTL.
 * A stalled node is dropped sooner anyway when its reply ring fills up.
 */
static int64_t
silence_limit_us(void)
{
	return Max((int64_t) rl_node_timeout_ms * 10, 1000) * 1000;
}

/*
 * Drop the connection of a node that has owed replies in silence for the
 * silence limit, or is still connecting past its deadline.  True when it
 * was dropped.
 */
static bool
drop_if_overdue(RlNode *node, int64_t now)
{
	if (node->state == RL_CONN_READY && node->owed_count > 0 &&
		now - node->last_progress_us > silence_limit_us())
	{
		node_fail(node, NULL, RL_OUTCOME_TIMEOUT,
				  "stopped answering (no reply for %d ms)",
				  (int) ((now - node->last_progress_us) / 1000));
		return true;
	}
	if (node_connecting(node) && now > node->connect_deadline_us)
	{
		node_connect_timed_out(node, NULL);
		return true;
	}
	return false;
}

/*
 * Before a round: take replies that arrived since the last one, and drop
 * connections that have owed replies in silence for too long.
 */
void
round_housekeeping(void)
{
	int64_t		now;

	queue_format_end();			/* a dispatch an error cut short */
	wait_pump_resolver(NULL);
	now = rl_now_us();
	for (int i = 0; i < rl_nnodes; i++)
	{
		RlNode	   *node = &rl_nodes[i];

		if (node->state == RL_CONN_READY && node->owed_count > 0)
			node_read(node, NULL);
		(void) drop_if_overdue(node, now);
	}
}

/*
 * Queue the request on one node, and start sending unless write_now is
 * false (a batch writes once all its requests are queued).  A node in
 * backoff is not asked unless honour_backoff is false.
 */
void
round_dispatch(RlNode *node, RlRequest *req, uint64_t tag, bool honour_backoff,
			   bool write_now)
{
	RlNodeResult *res = &req->results[node - rl_nodes];
	int64_t		now = rl_now_us();

	rl_node_result_init(res);
	res->vote = RL_VOTE_PENDING;
	node->was_idle = (node->state == RL_CONN_READY && node->owed_count == 0);

	if (!req->probe && server_same_as_other(node))
	{
		/* the server gets it through the other entry */
		res->vote = RL_VOTE_FAILED;
		snprintf(res->detail, sizeof(res->detail),
				 "not asked: the same Redis server as %s (run_id %s)",
				 rl_nodes[node->same_as].name, node->ident.run_id);
		return;
	}

	if (node->state == RL_CONN_NONE && now < node->retry_at_us && honour_backoff)
	{
		char		why[RL_DETAIL_LEN - 80];	/* room for the rest */

		res->vote = RL_VOTE_FAILED;
		res->in_backoff = true;
		res->outcome = node->last_outcome;	/* not asked: not told of */
		res->hint = node->last_hint;
		report_clip(why, sizeof(why), "%s", node->last_error);
		snprintf(res->detail, sizeof(res->detail),
				 "not asked: it failed %d ms ago (%s), next attempt in %d ms",
				 (int) ((now - node->failed_at_us) / 1000), why,
				 (int) ((node->retry_at_us - now + 999) / 1000));
		if (req->must_deliver)
			queue_keep(node, req);
		return;
	}

	res->asked_us = now;		/* asked from here on (report_round) */
	if (node->state == RL_CONN_NONE)
	{
		node_connect(node, req);	/* sends what is kept for the node */
		if (node->state == RL_CONN_NONE)
			return;				/* node_fail kept a must-deliver request */
	}

	/* what is kept for the node goes first, as far as there is room */
	if (node->state == RL_CONN_READY && node->nkept > 0)
		queue_send_kept(node, rl_owed_limit());

	/*
	 * A connection far behind (its node kept off the CPU while the rounds
	 * of many sessions go on without it), or with commands still kept for
	 * it, is asked nothing new, and kept rather than failed: a new
	 * connection's commands could reach the node before the old one's,
	 * which it has yet to run (a lock applied after its release), and a
	 * new request must not overtake the kept ones.  Its answers count as
	 * late, which is not a failure of the node.  A must-deliver request
	 * goes on this connection all the same, behind its backlog and what
	 * was kept before it (kept only while the connection cannot owe one
	 * more reply).  Once, at most 32 were kept and the oldest dropped, and
	 * locks outlived their release until their TTL (bench/scale.sh at 256
	 * sessions).
	 */
	if (node->nkept > 0 ||
		(node->state == RL_CONN_READY && node->owed_count >= rl_owed_behind()))
	{
		res->asked_us = 0;
		res->vote = RL_VOTE_FAILED;
		res->outcome = RL_OUTCOME_LATE;
		res->latency_us = node->last_rtt_us;
		snprintf(res->detail, sizeof(res->detail),
				 "not asked: its connection still owed %d replies",
				 node->owed_count);
		if (req->must_deliver)
		{
			queue_keep(node, req);
			queue_send_kept(node, rl_owed_limit());
		}
		return;
	}

	if (!queue_request(node, req, tag))
	{
		node_fail(node, req, RL_OUTCOME_TIMEOUT,
				  "too many requests queued on a stalled connection");
		return;
	}
	node->asked_at_us = now;
	node->want_write = true;
	if (node->state == RL_CONN_READY && write_now)
		node_write(node, req);
}

/*
 * Queue the request on every participating node, under tag; write at once
 * unless write_now is false.
 */
void
round_dispatch_all(RlRequest *req, uint64_t tag, bool write_now)
{
	req->tag = tag;
	req->nnodes = rl_nnodes;
	queue_format_begin(req);	/* formatted once for every node */
	for (int i = 0; i < rl_nnodes; i++)
	{
		if (req->skip[i])
		{
			rl_node_result_init(&req->results[i]);
			req->results[i].vote = RL_VOTE_FAILED;
			strlcpy(req->results[i].detail, "not asked", sizeof(req->results[i].detail));
			continue;
		}
		round_dispatch(&rl_nodes[i], req, tag, true, write_now);
	}
	queue_format_end();
}

/*
 * Backoff spares a connect attempt per call to a node that is down, but it
 * must never be what decides a round: a node that came back would sit out
 * its backoff while calls fail.  When a round could not reach a majority
 * and some nodes were skipped for backoff, ask them now.
 */
bool
round_dispatch_backed_off(RlRequest *req)
{
	bool		any = false;

	queue_format_begin(req);
	for (int i = 0; i < req->nnodes; i++)
	{
		if (!req->skip[i] && req->results[i].in_backoff)
		{
			round_dispatch(&rl_nodes[i], req, req->tag, false, true);
			any = true;
		}
	}
	queue_format_end();
	return any;
}

bool
round_finished(RlRequest *req)
{
	RlVote		votes[RL_MAX_NODES];

	for (int i = 0; i < req->nnodes; i++)
		votes[i] = req->results[i].vote;
	req->tally = rl_tally(votes, req->nnodes);
	req->decision = rl_decide(req->nnodes, req->tally);

	switch (req->goal)
	{
		case RL_GOAL_QUORUM:
			return req->decision != RL_UNDECIDED;
		case RL_GOAL_ANSWERS:
			return req->tally.yes + req->tally.no >= rl_majority(req->nnodes) ||
				req->tally.yes + req->tally.no + req->tally.pending <
				rl_majority(req->nnodes);
		case RL_GOAL_ALL:
			return req->tally.pending == 0;
		case RL_GOAL_ITEMS:
			{
				RlItemFlags flags[RL_MAX_NODES];

				for (int i = 0; i < req->nnodes; i++)
					flags[i] = req->results[i].flags;
				return rl_decide_items(req->nnodes, votes, flags, req->nitems,
									   NULL, NULL) == 0;
			}
	}
	return true;
}

/* When node i's pending answer in this round is due. */
int64_t
round_node_deadline(const RlNode *node)
{
	int64_t		since;

	if (node_connecting(node))
		return node->connect_deadline_us;
	since = Min(node->last_progress_us, node->asked_at_us);
	return since + (int64_t) rl_node_timeout_ms * 1000;
}

/* A pending node ran out of time: say truthfully how. */
void
round_node_overdue(RlNode *node, RlRequest *req, int64_t now,
				   bool round_deadline)
{
	RlNodeResult *res = &req->results[node - rl_nodes];

	if (node_connecting(node) && !round_deadline)
	{
		node_connect_timed_out(node, req);
		return;
	}
	res->vote = RL_VOTE_FAILED;
	res->outcome = RL_OUTCOME_LATE;
	res->latency_us = node->last_rtt_us;
	if (round_deadline)
		snprintf(res->detail, sizeof(res->detail),
				 "no answer within the %d ms this release could wait",
				 (int) ((now - node->asked_at_us) / 1000));
	else if (node->last_progress_us < node->asked_at_us)
		snprintf(res->detail, sizeof(res->detail),
				 "no reply for %d ms; it still owed %d earlier replies when asked",
				 (int) ((now - node->last_progress_us) / 1000),
				 node->owed_count - 1);
	else
		snprintf(res->detail, sizeof(res->detail), "timed out after %d ms",
				 rl_node_timeout_ms);

	/* a late waiter is named, not blamed on the node (wait_stall_check) */
	if (node->stalled_us >= 1000)
	{
		size_t		len = strlen(res->detail);

		snprintf(res->detail + len, sizeof(res->detail) - len,
				 " (not counting %d ms when %s was not running)",
				 (int) (node->stalled_us / 1000), wait_stall_who());
	}
}

/*
 * One step of the wait of the requests chained from req (one round, or the
 * undecided requests of a batch): fail the pending nodes whose time is up,
 * or wait for the sockets until the next node is due.  A node is late only
 * if its answer is not already waiting in the socket: a backend kept off
 * the CPU past a deadline must not fail nodes that did answer.  So a step
 * that finds one due looks once without waiting (*polled), and the next
 * judges.
 */
void
round_wait_step(RlRequest *req, bool *polled, bool use_poll)
{
	RlReady		ready[RL_MAX_READY];
	int64_t		now = rl_now_us();
	int64_t		next_deadline = INT64_MAX;
	bool		overdue = false;
	long		timeout_ms;
	int			nready;

	wait_stall_check(now);
	for (RlRequest *r = req; r != NULL; r = r->batch_next)
	{
		bool		round_over = r->deadline_us != 0 && now >= r->deadline_us;

		if (r->deadline_us != 0)
			next_deadline = Min(next_deadline, r->deadline_us);
		for (int i = 0; i < r->nnodes; i++)
		{
			int64_t		deadline;

			if (r->results[i].vote != RL_VOTE_PENDING)
				continue;
			deadline = round_node_deadline(&rl_nodes[i]);
			if (now >= deadline || round_over)
				overdue = true;
			else
				next_deadline = Min(next_deadline, deadline);
		}
	}

	if (overdue && *polled)
	{
		for (RlRequest *r = req; r != NULL; r = r->batch_next)
		{
			bool		round_over = r->deadline_us != 0 && now >= r->deadline_us;

			for (int i = 0; i < r->nnodes; i++)
			{
				RlNode	   *node = &rl_nodes[i];

				if (r->results[i].vote == RL_VOTE_PENDING &&
					(round_over || now >= round_node_deadline(node)))
					round_node_overdue(node, r, now, round_over);
			}
		}
		*polled = false;
		return;
	}
	*polled = overdue;

	timeout_ms = overdue ? 0 : (long) ((next_deadline - now + 999) / 1000);
	timeout_ms = resolve_timeout_ms(timeout_ms);
	if (wait_any_buffered_input())
		timeout_ms = 0;
	/* waits no longer than a slice, so that a stall in it is measured */
	if (timeout_ms < 0 || timeout_ms > RL_STALL_SLICE_MS)
		timeout_ms = RL_STALL_SLICE_MS;
	wait_stall_expect(now + (int64_t) timeout_ms * 1000);
	if (use_poll)
		nready = wait_in_poll(timeout_ms, ready);
	else
		nready = wait_in_event_set(timeout_ms, ready);
	wait_stall_check(rl_now_us());
	wait_handle_ready(req, ready, nready);
}

static void
round_wait(RlRequest *req)
{
	bool		polled = false;

	while (!round_finished(req))
		round_wait_step(req, &polled, req->nothrow);
}

/*
 * After a round: push out what is still queued without waiting.  A node
 * whose connect was still in progress when the round was decided holds the
 * request (and any kept commands) in its output buffer; finishing the
 * connect now sends them at once instead of at this backend's next call.
 */
void
round_flush(void)
{
	wait_pump_resolver(NULL);
	for (int i = 0; i < rl_nnodes; i++)
	{
		RlNode	   *node = &rl_nodes[i];

		if (node->state == RL_CONN_CONNECTING ||
			node->state == RL_CONN_HANDSHAKE)
		{
			struct pollfd pfd;

			pfd.fd = node->fd;
			pfd.events = node_poll_events(node);
			pfd.revents = 0;
			if (poll(&pfd, 1, 0) == 1)
				node_event(node, NULL,
						   (pfd.revents & (POLLIN | POLLERR | POLLHUP)) != 0,
						   (pfd.revents & (POLLOUT | POLLERR | POLLHUP)) != 0);
		}
		else if (node->state == RL_CONN_READY && node->want_write)
			node_write(node, NULL);
	}
}

static const RlRoundHook *round_hook = NULL;

void
rl_nodes_set_round_hook(const RlRoundHook *hook)
{
	round_hook = hook;
}

static void run_own(RlRequest *req);

/*
 * Send the request to every node and wait until the round's goal is met:
 * on this process's connections, unless the round hook runs it elsewhere.
 */
void
rl_nodes_run(RlRequest *req)
{
	if (round_hook == NULL)
	{
		run_own(req);
		return;
	}
	if (round_hook->run_elsewhere(req, true))
		return;
	PG_TRY();
	{
		run_own(req);
	}
	PG_FINALLY();
	{
		round_hook->own_done();
	}
	PG_END_TRY();
}

/*
 * Send the request to every node and wait until the round's goal is met.
 * Nodes that did not answer in time are left PENDING or FAILED in
 * req->results; their replies, should they come later, are discarded.
 *
 * A no-throw round makes at most one connect attempt per node and does not
 * retry nodes in backoff: its time is bounded by one connect_timeout plus
 * one node_timeout, and by its deadline if it has one.
 */
static void
run_own(RlRequest *req)
{
	/* lock rounds refuse a node list that names one server twice */
	bool		refuse = !req->nothrow && !req->must_deliver && !req->probe;

	req->batch_next = NULL;		/* a round of its own */
	wait_stall_begin();
	round_housekeeping();
	if (refuse)
		server_refuse_duplicates();
	rl_round_id++;
	round_dispatch_all(req, rl_round_id, true);
	round_wait(req);
	if (req->decision == RL_UNAVAILABLE && !req->nothrow &&
		round_dispatch_backed_off(req))
		round_wait(req);
	wait_stall_reset();
	round_flush();
	report_round(req);

	/*
	 * A wake-up that came during the round (a lease released while we were
	 * asking for it) is for our caller: set the latch again.
	 */
	if (rl_latch_fired)
	{
		rl_latch_fired = false;
		SetLatch(MyLatch);
	}

	/*
	 * Shown by this round's connections: an acquire's abort path withdraws
	 * what it may have set (rl_proto_abandon_in_flight).
	 */
	if (refuse)
		server_refuse_duplicates();
}

/*
 * Wait up to timeout_ms for pushes (pub/sub messages) on the open
 * connections, handing them to the push handler; returns early when the
 * latch is set.  Interrupts are served.
 */
void
rl_nodes_wait_pushes(long timeout_ms)
{
	RlReady		ready[RL_MAX_READY];
	int			nready;

	timeout_ms = resolve_timeout_ms(timeout_ms);
	if (wait_any_buffered_input())
		timeout_ms = 0;
	nready = wait_in_event_set(timeout_ms, ready);
	rl_latch_fired = false;		/* the caller is the one woken */
	wait_handle_ready(NULL, ready, nready);
}

/*
 * Ping the connections that owe nothing and have said nothing for
 * interval_ms: a pub/sub connection only listens, so without this a node
 * that stopped answering (or a link that dropped without a reset) would
 * go unnoticed and its messages unheard.  A connection that leaves a reply
 * owed for the silence limit is closed (and the caller reconnects it).
 */
void
rl_nodes_ping_idle(int interval_ms)
{
	static const char ping[] = "*1\r\n$4\r\nPING\r\n";
	int64_t		now = rl_now_us();

	for (int i = 0; i < rl_nnodes; i++)
	{
		RlNode	   *node = &rl_nodes[i];

		if (drop_if_overdue(node, now))
			continue;
		if (node->state == RL_CONN_READY && node->owed_count == 0 &&
			now - node->last_heard_us >= (int64_t) interval_ms * 1000)
		{
			/* a subscribed connection answers ["pong", ""]: any reply does */
			if (sock_append(node, ping, sizeof(ping) - 1) &&
				queue_owe(node, RL_TAG_DISCARD))
				node_write(node, NULL);
		}
	}
}

/*
 * Send the request without waiting for replies (releases pipelined ahead of
 * a request that will be waited for).  Output that does not fit in the
 * socket now goes out with the next round.
 */
void
rl_nodes_send(RlRequest *req)
{
	if (round_hook != NULL && round_hook->run_elsewhere(req, false))
		return;
	req->batch_next = NULL;
	round_housekeeping();
	round_dispatch_all(req, RL_TAG_DISCARD, true);
	round_flush();
	report_round(req);
	if (round_hook != NULL)
		round_hook->own_done(); /* nothing above waits or raises */
}
