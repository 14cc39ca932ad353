/*-------------------------------------------------------------------------
 *
 * node_batch.c
 *	  Many requests at once on the same connections: the rounds that the
 *	  dispatcher worker runs for the backends of the server.
 *
 * Every request of a batch is queued, in order, on each node's connection
 * under a tag of its own, and each node's commands are written at once, in
 * one write.  Replies come back in order on each connection and go each to
 * its own request (round_request: the undecided requests are chained by
 * batch_next, and every function of the layer that touches "the round's
 * request" walks the chain).  A request is decided on its own, exactly as
 * rl_nodes_run decides a request run alone: its goal, its deadline,
 * node_timeout per node, the nodes in backoff asked again when it could not
 * reach a majority without them.  As soon as it is decided it leaves the
 * chain, is reported (the health hook) and handed to the caller's done
 * callback: its late replies are discarded like those of an earlier round.
 *
 * A node's failure fails it for every undecided request of the batch at
 * once, must-deliver requests kept for its next connection as for a single
 * round.
 *
 * Also here: what the dispatcher and the backends it serves need to know of
 * the connections (the oldest round still owed an answer, whether this
 * process's own connections are quiet, whether the list names one server
 * twice), and the ending of a backend's idle connections, which lets it go
 * over to the shared ones (rl_nodes_shut_idle, rl_nodes_close_shut).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <signal.h>
#include <sys/socket.h>

#include "miscadmin.h"
#include "storage/latch.h"

#include "net/node_internal.h"

/*
 * Unchain the decided requests, report them and hand them over.  Returns
 * the new head of the chain.
 */
static RlRequest *
batch_settle(RlRequest *head, RlRoundDone done, void *arg)
{
	RlRequest **link = &head;

	while (*link != NULL)
	{
		RlRequest  *r = *link;

		if (!round_finished(r))
		{
			link = &r->batch_next;
			continue;
		}
		if (r->decision == RL_UNAVAILABLE && !r->nothrow &&
			!r->batch_retried)
		{
			/* as rl_nodes_run: the nodes in backoff asked once more */
			r->batch_retried = true;
			if (round_dispatch_backed_off(r))
			{
				link = &r->batch_next;
				continue;
			}
		}
		*link = r->batch_next;
		r->batch_next = NULL;
		report_round(r);
		done(r, arg);
	}
	return head;
}

/*
 * The node failed while the batch was queued: the requests queued on it
 * before that get its failure (the one it failed under, and the ones
 * skipped for its backoff after it, have theirs).
 */
static void
batch_fail_dispatched(RlRequest *head, RlNode *node)
{
	int			idx = node - rl_nodes;

	for (RlRequest *r = head; r != NULL; r = r->batch_next)
	{
		RlNodeResult *res = &r->results[idx];

		if (r->skip[idx] || res->vote != RL_VOTE_PENDING)
			continue;
		/* a must-deliver one is kept already (node_disconnect) */
		res->vote = RL_VOTE_FAILED;
		res->outcome = RL_OUTCOME_OTHER;
		strlcpy(res->detail, node->last_error, sizeof(res->detail));
		res->hint = node->last_hint;
	}
}

/*
 * Queue requests on every node, chained at the end of the batch, and write
 * each node's share at once.  Returns the head of the chain.
 */
static RlRequest *
batch_dispatch(RlRequest *head, RlRequest **reqs, int n)
{
	RlRequest **link = &head;
	bool		was_idle[RL_MAX_NODES];

	while (*link != NULL)
		link = &(*link)->batch_next;

	/* the connections idle before may be reconnected once (node_lost) */
	for (int i = 0; i < rl_nnodes; i++)
		was_idle[i] = rl_nodes[i].state == RL_CONN_READY &&
			rl_nodes[i].owed_count == 0;

	/*
	 * Each request is chained once queued: a node that fails while a later
	 * one is queued (a connect refused at once, a full reply ring) fails
	 * only that one, so the earlier ones are failed on it afterwards.
	 */
	for (int k = 0; k < n; k++)
	{
		reqs[k]->batch_next = NULL;
		reqs[k]->batch_retried = false;
		round_dispatch_all(reqs[k], ++rl_round_id, false);
		*link = reqs[k];
		link = &reqs[k]->batch_next;
	}
	if (rl_debug_dispatch_delay_ms > 0)	/* a stall before the write */
		pg_usleep((long) rl_debug_dispatch_delay_ms * 1000);
	for (int i = 0; i < rl_nnodes; i++)
	{
		RlNode	   *node = &rl_nodes[i];

		node->was_idle = was_idle[i];
		if (node->state == RL_CONN_NONE)
			batch_fail_dispatched(head, node);
		else if (node->state == RL_CONN_READY && node->want_write)
			node_write(node, head);
	}
	return head;
}

void
rl_nodes_run_batch(RlRequest **reqs, int n, RlRoundIntake intake,
				   RlRoundDone done, void *arg)
{
	RlRequest  *head = NULL;
	RlRequest  *more[RL_BATCH_INTAKE];
	bool		polled = false;

	if (n <= 0)
		return;
	wait_stall_begin();
	round_housekeeping();
	head = batch_dispatch(NULL, reqs, n);

	for (;;)
	{
		head = batch_settle(head, done, arg);
		if (head == NULL)
			break;
		round_wait_step(head, &polled, false);

		/* the latch: new requests join the batch */
		if (rl_latch_fired && intake != NULL)
		{
			int			nmore;

			rl_latch_fired = false;
			nmore = intake(more, RL_BATCH_INTAKE, arg);
			if (nmore > 0)
				head = batch_dispatch(head, more, nmore);
		}
	}
	wait_stall_reset();
	round_flush();

	/* the latch was set during the batch: the caller looks again */
	if (rl_latch_fired)
	{
		rl_latch_fired = false;
		SetLatch(MyLatch);
	}
}

/*
 * The oldest tag still owed on any connection (the rings are in the order
 * sent, but a command sent again by its text owes its old tag at the end).
 */
uint64_t
rl_nodes_oldest_owed(void)
{
	uint64_t	oldest = UINT64_MAX;

	for (int i = 0; i < rl_nnodes; i++)
	{
		RlNode	   *node = &rl_nodes[i];

		if (node->state != RL_CONN_READY && !node_connecting(node))
			continue;
		for (int k = 0; k < node->owed_count; k++)
		{
			uint64_t	tag = node->owed[(node->owed_head + k) % RL_MAX_OWED];

			if (tag != RL_TAG_AUTH && tag != RL_TAG_INFO &&
				tag != RL_TAG_DISCARD)
				oldest = Min(oldest, tag);
		}
	}
	return oldest;
}

void
rl_nodes_tags_above(uint64_t floor)
{
	if (rl_round_id < floor)
		rl_round_id = floor;
}

bool
rl_nodes_quiet(void)
{
	round_housekeeping();
	for (int i = 0; i < rl_nnodes; i++)
	{
		RlNode	   *node = &rl_nodes[i];

		if (node_connecting(node))
			return false;
		if (node->state == RL_CONN_READY &&
			(node->owed_count > 0 || node->want_write))
			return false;
	}
	return true;
}

bool
rl_nodes_duplicates(void)
{
	for (int i = 0; i < rl_nnodes; i++)
		if (server_same_as_other(&rl_nodes[i]))
			return true;
	return false;
}

/*
 * Before the connections are closed (backend exit): let every node take
 * what we still owe it and answer what it owes us, until the deadline.
 * Closing a socket with replies unread sends a reset, which can make the
 * node drop commands it has received but not yet run.  Raises nothing.
 */
void
rl_nodes_drain(int64_t deadline_us)
{
	RlReady		ready[RL_MAX_READY];

	for (;;)
	{
		bool		busy = false;
		int64_t		now = rl_now_us();
		int			nready;

		for (int i = 0; i < rl_nnodes; i++)
		{
			RlNode	   *node = &rl_nodes[i];

			if (node_connecting(node) ||
				(node->state == RL_CONN_READY &&
				 (node->owed_count > 0 || node->want_write)))
				busy = true;
		}
		if (!busy || now >= deadline_us)
			return;

		nready = wait_in_poll(resolve_timeout_ms((long) ((deadline_us - now + 999) / 1000)),
							  ready);
		wait_handle_ready(NULL, ready, nready);
	}
}

/*
 * Idle connections ended from a signal handler (the idle timer of
 * shared/shared_rounds_permits.c, which fires only while this process runs
 * no round): shutdown(2) for writing, which is async-signal-safe, tells
 * each node at once that nothing more comes; the node runs what it was
 * sent, answers and closes.  Only when every connection has sent all it
 * was given and none is being opened, so that no command of ours is cut
 * off.  The rest is done at the next round (rl_nodes_close_shut), before
 * anything of it is sent elsewhere: the replies still owed (to releases
 * sent without waiting, to rounds decided without them) are read, or the
 * node's close, which comes only once it ran every command before it, up
 * to the caller's deadline; so a command sent next on another connection
 * (the dispatcher's, a new one) cannot reach the node before them (a lock
 * refused because the release before it was not applied yet).  The wait
 * is cut into slices; where the caller may throw (interruptible), a
 * cancel or a termination is served between them, and the sockets stay
 * as they are for the next round to read on.  Then the sockets are let
 * go, quietly: no failure, no backoff; what a node still owes then, if it
 * must be delivered, is kept for its next connection.
 */
#define RL_SHUT_SLICE_MS	100

static volatile sig_atomic_t nodes_shut = false;

bool
rl_nodes_shut_idle(void)
{
	for (int i = 0; i < rl_nnodes; i++)
	{
		const RlNode *node = &rl_nodes[i];

		if (node->state != RL_CONN_NONE &&
			(node->state != RL_CONN_READY || node->want_write))
			return false;
	}
	for (int i = 0; i < rl_nnodes; i++)
		if (rl_nodes[i].state == RL_CONN_READY && rl_nodes[i].fd >= 0)
		{
			rl_nodes[i].shut_ours = true;	/* whoever reads its close */
			(void) shutdown(rl_nodes[i].fd, SHUT_WR);
		}
	nodes_shut = true;
	return true;
}

void
rl_nodes_close_shut(int64_t deadline_us, bool interruptible)
{
	if (!nodes_shut)
		return;
	nodes_shut = false;
	for (;;)
	{
		int64_t		now = rl_now_us();
		bool		owed = false;

		rl_nodes_drain(Min(deadline_us, now + RL_SHUT_SLICE_MS * 1000));
		for (int i = 0; i < rl_nnodes; i++)
			owed |= rl_nodes[i].shut_ours && rl_nodes[i].owed_count > 0;
		if (!owed || rl_now_us() >= deadline_us)
			break;
		if (interruptible && INTERRUPTS_PENDING_CONDITION())
		{
			nodes_shut = true;	/* an error leaves the rest to the next round */
			CHECK_FOR_INTERRUPTS();
			nodes_shut = false;
		}
	}
	for (int i = 0; i < rl_nnodes; i++)
		if (rl_nodes[i].shut_ours)
			node_disconnect(&rl_nodes[i]);
}
