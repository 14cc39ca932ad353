/*-------------------------------------------------------------------------
 *
 * node_wait.c
 *	  Waiting for the nodes' sockets and the resolver's: in a WaitEventSet
 *	  (ordinary rounds) or with poll(2) (no-throw rounds, exit drain), and
 *	  moving along whatever the wait found ready.
 *
 * Ordinary rounds wait in a WaitEventSet that also wakes on the latch
 * (query cancel, statement_timeout) and on postmaster death.  No-throw
 * rounds (commit, abort, exit) must not raise at all, and building a wait
 * event set can (epoll or memory failures), so they wait with poll(2) on
 * the sockets alone: interrupts are held there anyway, and their deadline
 * bounds them.
 *
 * The resolver's sockets (c-ares, node_resolve.c) come and go while names
 * are looked up; the wait event set is rebuilt when they change.
 *
 * Also here: this process's own stalls while it waits (wait_stall_check),
 * which are not counted against the nodes.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <poll.h>

#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "storage/latch.h"
#include "utils/memutils.h"

#include "net/node_internal.h"
#include "base/wait_events.h"

static WaitEventSet *rl_wes = NULL;

/* the resolver's sockets in the wait event set, and their events */
static int	rl_wes_resolver_fds[RL_MAX_RESOLVER_SOCKS];
static int	rl_wes_resolver_events[RL_MAX_RESOLVER_SOCKS];
static int	rl_wes_nresolver = 0;
static int	rl_resolver_tag;	/* user_data of the resolver's sockets */

/*
 * Let the resolver take what its sockets hold and handle its timeouts,
 * without waiting; then move on the nodes whose lookup ended.
 */
void
wait_pump_resolver(RlRequest *req)
{
	int			fds[RL_MAX_RESOLVER_SOCKS];
	int			events[RL_MAX_RESOLVER_SOCKS];
	struct pollfd pfds[RL_MAX_RESOLVER_SOCKS];
	int			n;

	n = resolve_sockets(fds, events, RL_MAX_RESOLVER_SOCKS);
	for (int i = 0; i < n; i++)
	{
		pfds[i].fd = fds[i];
		pfds[i].events = ((events[i] & RL_EV_READ) ? POLLIN : 0) |
			((events[i] & RL_EV_WRITE) ? POLLOUT : 0);
		pfds[i].revents = 0;
	}
	if (n > 0 && poll(pfds, n, 0) > 0)
	{
		for (int i = 0; i < n; i++)
			if (pfds[i].revents != 0)
				resolve_process(fds[i],
								(pfds[i].revents & (POLLIN | POLLERR | POLLHUP)) != 0,
								(pfds[i].revents & (POLLOUT | POLLERR | POLLHUP)) != 0);
	}
	resolve_process(-1, false, false);
	node_lookups_ended(req);
}

/* Make the wait event set match the open sockets. */
static void
wes_rebuild(void)
{
	if (rl_wes != NULL)
		FreeWaitEventSet(rl_wes);
	rl_wes = NULL;

#if PG_VERSION_NUM >= 170000
	rl_wes = CreateWaitEventSet(NULL, RL_MAX_READY + 2);
#else
	rl_wes = CreateWaitEventSet(TopMemoryContext, RL_MAX_READY + 2);
#endif
	AddWaitEventToSet(rl_wes, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, NULL);
	if (IsUnderPostmaster)
		AddWaitEventToSet(rl_wes, WL_POSTMASTER_DEATH, PGINVALID_SOCKET,
						  NULL, NULL);
	for (int i = 0; i < rl_nnodes; i++)
	{
		RlNode	   *node = &rl_nodes[i];

		node->wes_pos = -1;
		if (node->fd < 0)
			continue;
		node->wes_events = WL_SOCKET_WRITEABLE;
		node->wes_pos = AddWaitEventToSet(rl_wes, node->wes_events,
										  node->fd, NULL, node);
	}
	rl_wes_nresolver = resolve_sockets(rl_wes_resolver_fds, rl_wes_resolver_events,
									   RL_MAX_RESOLVER_SOCKS);
	for (int i = 0; i < rl_wes_nresolver; i++)
		AddWaitEventToSet(rl_wes,
						  ((rl_wes_resolver_events[i] & RL_EV_READ) ? WL_SOCKET_READABLE : 0) |
						  ((rl_wes_resolver_events[i] & RL_EV_WRITE) ? WL_SOCKET_WRITEABLE : 0),
						  rl_wes_resolver_fds[i], NULL, &rl_resolver_tag);
	rl_wes_stale = false;
}

/* Have the resolver's sockets, or what it waits for on them, changed? */
static bool
wes_resolver_changed(void)
{
	int			fds[RL_MAX_RESOLVER_SOCKS];
	int			events[RL_MAX_RESOLVER_SOCKS];
	int			n = resolve_sockets(fds, events, RL_MAX_RESOLVER_SOCKS);

	if (n != rl_wes_nresolver)
		return true;
	for (int i = 0; i < n; i++)
		if (fds[i] != rl_wes_resolver_fds[i] ||
			events[i] != rl_wes_resolver_events[i])
			return true;
	return false;
}

/* The socket events a node waits for now (as poll(2) events). */
short
node_poll_events(const RlNode *node)
{
	int			ev = node_wanted_events(node);

	return ((ev & RL_EV_READ) ? POLLIN : 0) | ((ev & RL_EV_WRITE) ? POLLOUT : 0);
}

/* Wait in the wait event set: wakes on cancel and postmaster death too. */
int
wait_in_event_set(long timeout_ms, RlReady *ready)
{
	WaitEvent	events[RL_MAX_READY + 2];
	int			nevents;
	int			n = 0;
	bool		latch_seen = false;

	if (rl_wes_stale || rl_wes == NULL || wes_resolver_changed())
		wes_rebuild();
	for (int i = 0; i < rl_nnodes; i++)
	{
		RlNode	   *node = &rl_nodes[i];
		short		want = node_poll_events(node);
		uint32		events_now;

		if (node->wes_pos < 0)
			continue;
		events_now = ((want & POLLIN) ? WL_SOCKET_READABLE : 0) |
			((want & POLLOUT) ? WL_SOCKET_WRITEABLE : 0);
		if (events_now != node->wes_events)
		{
			ModifyWaitEvent(rl_wes, node->wes_pos, events_now, NULL);
			node->wes_events = events_now;
		}
	}

	nevents = WaitEventSetWait(rl_wes, timeout_ms, events, lengthof(events),
							   rl_wait_event_nodes());
	for (int e = 0; e < nevents; e++)
	{
		WaitEvent  *ev = &events[e];
		RlNode	   *node = (RlNode *) ev->user_data;

		if (ev->events & WL_LATCH_SET)
		{
			ResetLatch(MyLatch);
			rl_latch_fired = true;
			CHECK_FOR_INTERRUPTS();
			latch_seen = true;
			continue;
		}
		if (ev->events & WL_POSTMASTER_DEATH)
			ereport(FATAL,
					(errcode(ERRCODE_ADMIN_SHUTDOWN),
					 errmsg("terminating connection due to unexpected postmaster exit")));
		if (ev->user_data == (void *) &rl_resolver_tag)
			node = NULL;
		else if (node == NULL || node->wes_pos != ev->pos)
			continue;
		ready[n].node = node;
		ready[n].fd = ev->fd;
		ready[n].readable = (ev->events & WL_SOCKET_READABLE) != 0;
		ready[n].writable = (ev->events & WL_SOCKET_WRITEABLE) != 0;
		n++;
	}

	/*
	 * A latch found set is all WaitEventSetWait returns: it does not look at
	 * the sockets then.  A process whose latch is set often (the dispatcher,
	 * which every queued round wakes) would read its replies late, or judge
	 * a node late whose reply waits in its socket: look at them now, without
	 * waiting.
	 */
	if (latch_seen && n == 0)
		n = wait_in_poll(0, ready);
	return n;
}

/* Wait with poll(2): raises nothing, allocates nothing. */
int
wait_in_poll(long timeout_ms, RlReady *ready)
{
	struct pollfd pfds[RL_MAX_READY];
	RlNode	   *who[RL_MAX_READY];
	int			fds[RL_MAX_RESOLVER_SOCKS];
	int			events[RL_MAX_RESOLVER_SOCKS];
	int			nres;
	int			npfds = 0;
	int			n = 0;

	for (int i = 0; i < rl_nnodes; i++)
	{
		RlNode	   *node = &rl_nodes[i];

		if (node->fd < 0)
			continue;
		pfds[npfds].fd = node->fd;
		pfds[npfds].events = node_poll_events(node);
		pfds[npfds].revents = 0;
		who[npfds++] = node;
	}
	nres = resolve_sockets(fds, events, RL_MAX_RESOLVER_SOCKS);
	for (int i = 0; i < nres; i++)
	{
		pfds[npfds].fd = fds[i];
		pfds[npfds].events = ((events[i] & RL_EV_READ) ? POLLIN : 0) |
			((events[i] & RL_EV_WRITE) ? POLLOUT : 0);
		pfds[npfds].revents = 0;
		who[npfds++] = NULL;
	}
	if (poll(pfds, npfds, (int) timeout_ms) <= 0)
		return 0;				/* timeout, EINTR or error: the caller's
								 * deadlines decide what happens next */
	for (int i = 0; i < npfds; i++)
	{
		short		r = pfds[i].revents;

		if (r == 0)
			continue;
		ready[n].node = who[i];
		ready[n].fd = pfds[i].fd;
		ready[n].readable = (r & (POLLIN | POLLHUP | POLLERR)) != 0;
		ready[n].writable = (r & (POLLOUT | POLLERR | POLLHUP)) != 0;
		n++;
	}
	return n;
}

/* Does a node hold input it read but did not parse yet (TLS records)? */
bool
wait_any_buffered_input(void)
{
	for (int i = 0; i < rl_nnodes; i++)
		if (rl_nodes[i].state == RL_CONN_READY &&
			sock_has_buffered_input(&rl_nodes[i]))
			return true;
	return false;
}

/*
 * This process's own stalls while it waits for the nodes: time it was not
 * running (stopped, or kept off the CPU: the dispatcher worker, or the
 * whole machine) beyond what it expected between two looks at the clock in
 * a round's wait (a wait's timeout, at most RL_STALL_SLICE_MS, a moment's
 * work).  Replies that came
 * meanwhile are read before any node is judged (round_wait_step), but a
 * node that was stopped with us, or that got our command only as we ran
 * again, needs time once we run: so a node is judged on the time this
 * process was there to hear it, its clocks (asked, last reply, connect
 * deadline) moved on by the stall, up to the time of a round and a second
 * in all since it last answered (a process kept off the CPU for good still
 * gives up on a dead node).  A round's own deadline does not move.
 */
#define RL_STALL_MIN_US		5000	/* shorter: scheduling noise */

static int64_t stall_expected_us = 0;	/* when we expect to look again; 0:
										 * not in a round's wait */

/* A round's wait ends: no look at the clock is expected. */
void
wait_stall_reset(void)
{
	stall_expected_us = 0;
}

/*
 * A round begins, before anything of it is queued: from here on the
 * process is expected to run.  A stall between queueing a command and
 * writing it (the node's clock starts at the queueing) is counted too.
 */
void
wait_stall_begin(void)
{
	stall_expected_us = rl_now_us();
}

/* The process expects to look at the clock again by until_us. */
void
wait_stall_expect(int64_t until_us)
{
	stall_expected_us = until_us;
}

/*
 * The clock says now: the time beyond the expected look was a stall; the
 * clocks of the nodes we wait for skip it.  Expects the next look now.
 */
void
wait_stall_check(int64_t now)
{
	int64_t		stall = stall_expected_us != 0 ? now - stall_expected_us : 0;
	int64_t		cap = ((int64_t) 2 * (rl_connect_timeout_ms + rl_node_timeout_ms) +
					   1000) * 1000;

	stall_expected_us = now;
	if (stall < RL_STALL_MIN_US)
		return;
	for (int i = 0; i < rl_nnodes; i++)
	{
		RlNode	   *node = &rl_nodes[i];
		int64_t		credit = Min(stall, cap - node->stalled_us);

		if (credit <= 0 ||
			!((node->state == RL_CONN_READY && node->owed_count > 0) ||
			  node_connecting(node)))
			continue;
		node->stalled_us += credit;
		node->asked_at_us += credit;
		node->last_progress_us += credit;
		if (node_connecting(node))
			node->connect_deadline_us += credit;
	}
}

/* Who waits for the nodes here, for a detail that says it stalled. */
const char *
wait_stall_who(void)
{
	static char who[BGW_MAXLEN + 8];

	if (MyBgworkerEntry == NULL)
		return "this session";
	snprintf(who, sizeof(who), "the %s", MyBgworkerEntry->bgw_type);
	return who;
}

/* Move everything along that the wait found ready. */
void
wait_handle_ready(RlRequest *req, RlReady *ready, int nready)
{
	for (int e = 0; e < nready; e++)
		if (ready[e].node == NULL)
			resolve_process(ready[e].fd, ready[e].readable, ready[e].writable);
	resolve_process(-1, false, false);	/* the resolver's timeouts */
	node_lookups_ended(req);

	for (int e = 0; e < nready; e++)
	{
		RlNode	   *node = ready[e].node;

		/* skip a socket closed (or replaced) earlier in this batch */
		if (node == NULL || node->fd != ready[e].fd)
			continue;
		node_event(node, req, ready[e].readable, ready[e].writable);
	}
	for (int i = 0; i < rl_nnodes; i++)
		if (rl_nodes[i].state == RL_CONN_READY &&
			sock_has_buffered_input(&rl_nodes[i]))
			node_event(&rl_nodes[i], req, true, false);
}
