/*-------------------------------------------------------------------------
 *
 * dispatcher.c
 *	  The dispatcher worker: runs the rounds of concurrent sessions on one
 *	  connection per Redis node, shared by the backends of the server.
 *
 * Backends queue their rounds in slots in shared memory and set this
 * worker's latch (shared/shared_rounds_backend.c).  The worker takes every
 * queued round (up to RL_DISPATCH_BATCH) and runs them together on its
 * connections: each node's commands go out in one write, the replies come
 * back in order and each goes to its own round (rl_nodes_run_batch).
 * Rounds queued while a batch runs join it when the latch wakes the batch.
 * Each round is decided as if it had been run alone, and handed back to
 * its backend as soon as it is: the oldest round the connections still owe
 * a reply to is published first, so that a backend knows when its rounds
 * are answered everywhere and it may go back to its own connections.
 *
 * It uses the node list of the server configuration, like the other
 * workers, and publishes it (as the fingerprint of the node settings) with
 * whether it is ready and whether the list names one server twice: a
 * backend hands over a round only when its own settings are the same.
 * When redlock.nodes is empty it is not ready and only waits.  When a
 * reload changes its settings, it takes no more rounds of the old ones,
 * runs those queued on its old connections, and only then connects to the
 * new: nothing queued is failed for the change.  The releases it keeps for
 * a node it cannot reach stay with the node if it stays in the list, and
 * at exit go to the next dispatcher (rl_shared_save_kept), as the rounds
 * still queued do (the ring outlives it).
 *
 * Scripts go by their SHA1 on a connection that ran them before, and the
 * node layer knows a script by its address (node_script.c).  A round's
 * arguments are copied into its slot, so the text of a script is at a
 * different address in every slot, and a slot holds other scripts later:
 * the worker keeps one copy of each script text it has seen and points the
 * round at it.
 *
 * Nothing the backends put in a slot makes the worker raise: the backends
 * check what they queue, and the node layer decides every round without
 * raising.  An error would end the worker (restarted after a second); the
 * backends waiting for it then fail their rounds after a bounded wait, and
 * the next worker fails the rounds the previous one had taken.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/hashfn.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/ipc.h"
#include "storage/latch.h"

#include "base/wait_events.h"
#include "shared/shared_rounds.h"
#include "workers/worker.h"

/* rounds taken from the queue at once */
#define RL_DISPATCH_BATCH	RL_BATCH_INTAKE

/* the scripts seen, each kept once: the node layer knows up to 32 */
#define RL_DISPATCH_SCRIPTS	32

typedef struct RlKeptScript
{
	uint32		hash;
	size_t		len;
	char	   *text;			/* malloc'd, never freed */
} RlKeptScript;

static RlKeptScript scripts[RL_DISPATCH_SCRIPTS];
static int	nscripts = 0;

/* the settings of the worker's connections, while a batch runs */
static uint64_t settings = 0;
static bool published = false;	/* the backends queue rounds of settings */

/*
 * Point the round's script (an EVAL marked static_script) at the worker's
 * one copy of its text; a script that cannot be kept goes by its text.
 */
static void
keep_script(RlRequest *req)
{
	const char *text;
	size_t		len;
	uint32		hash;
	char	   *copy;

	if (!req->static_script || req->argc < 2)
		return;
	text = req->argv[1];
	len = req->argvlen[1];
	hash = hash_bytes((const unsigned char *) text, (int) len);
	for (int i = 0; i < nscripts; i++)
	{
		if (scripts[i].hash == hash && scripts[i].len == len &&
			memcmp(scripts[i].text, text, len) == 0)
		{
			req->argv[1] = scripts[i].text;
			return;
		}
	}
	copy = nscripts < RL_DISPATCH_SCRIPTS ? malloc(Max(len, 1)) : NULL;
	if (copy == NULL)
	{
		req->static_script = false;
		return;
	}
	memcpy(copy, text, len);
	scripts[nscripts].hash = hash;
	scripts[nscripts].len = len;
	scripts[nscripts].text = copy;
	nscripts++;
	req->argv[1] = copy;
}

/* Take queued rounds: the first of a batch, and those that join it. */
static int
take_rounds(RlRequest **reqs, int max, void *arg)
{
	int			n = rl_shared_take(reqs, Min(max, RL_DISPATCH_BATCH), settings);

	for (int i = 0; i < n; i++)
		keep_script(reqs[i]);
	return n;
}

/*
 * A round is decided: what is still owed first, then the round, so that
 * its backend never finds it done while the oldest owed it reads is one
 * published before the round was sent (it would go back to its own
 * connections, and its next command could overtake this one on a node
 * that has not answered yet).  redlock.debug_complete_delay widens the
 * gap between the two, for a test of their order.
 */
static void
round_done(RlRequest *req, void *arg)
{
	rl_shared_publish_oldest_owed(rl_nodes_oldest_owed());
	if (rl_debug_complete_delay_ms > 0)
		pg_usleep((long) rl_debug_complete_delay_ms * 1000);
	rl_shared_complete(req);
}

/* Run every round queued (of the settings in force) until none is left. */
static void
run_queued(RlRequest **reqs)
{
	int			n;

	while ((n = take_rounds(reqs, RL_DISPATCH_BATCH, NULL)) > 0)
		rl_nodes_run_batch(reqs, n, take_rounds, round_done, NULL);
	rl_shared_publish_oldest_owed(rl_nodes_oldest_owed());
}

/*
 * Exit: let the nodes take what is in flight (bounded by node_timeout),
 * close the connections, and hand what is kept for the nodes that could
 * not be reached to the next dispatcher.  Raises nothing.
 */
static void
dispatcher_exit(int code, Datum arg)
{
	rl_nodes_drain(rl_now_us() + (int64_t) rl_node_timeout_ms * 1000);
	rl_nodes_disconnect_all();
	rl_shared_save_kept();
}

/* The first time the worker has its nodes: what a predecessor kept. */
static void
nodes_first_ready(void)
{
	static bool done = false;

	if (!done)
	{
		rl_shared_load_kept();
		before_shmem_exit(dispatcher_exit, (Datum) 0);
		done = true;
	}
}

/*
 * The server configuration changed the worker's node settings: take no
 * more rounds of the old ones, and run those queued on the connections
 * they were queued for before these close.  Nothing queued is failed for
 * the change; the backends, on their old settings until they read the
 * configuration again, run their next rounds on their own connections.
 */
static void
settings_change(RlRequest **reqs)
{
	rl_shared_publish(false, 0, false);
	published = false;
	run_queued(reqs);
}

void
redlock_dispatcher_main(Datum main_arg)
{
	RlRequest  *reqs[RL_DISPATCH_BATCH];

	rl_worker_start_signals();
	if (!rl_shared_attach())
		proc_exit(0);			/* no shared memory: nothing to serve */

	for (;;)
	{
		uint64_t	oldest;
		int			n;

		CHECK_FOR_INTERRUPTS();
		rl_worker_reload_config();

		if (published && (!rl_worker_nodes_configured() ||
						  rl_nodes_settings_fingerprint() != settings))
			settings_change(reqs);
		if (rl_worker_nodes_configured())
		{
			rl_worker_nodes_ready();
			nodes_first_ready();
			settings = rl_nodes_settings_fingerprint();
			rl_shared_publish(true, settings, rl_nodes_duplicates());
			published = true;
		}
		else
		{
			/* not ready: no round is queued */
			settings = rl_nodes_settings_fingerprint() ^ UINT64CONST(1);
			rl_shared_publish(false, 0, false);
		}

		n = take_rounds(reqs, RL_DISPATCH_BATCH, NULL);
		if (n > 0)
		{
			rl_nodes_run_batch(reqs, n, take_rounds, round_done, NULL);
			rl_shared_publish_oldest_owed(rl_nodes_oldest_owed());
			continue;			/* more may be queued */
		}

		/*
		 * Nothing queued.  Replies still owed (rounds decided by a majority,
		 * the others' answers on the way) are read as they come, so that
		 * the backends see their rounds answered; the latch wakes either
		 * wait.
		 */
		oldest = rl_nodes_oldest_owed();
		rl_shared_publish_oldest_owed(oldest);
		if (oldest != UINT64_MAX)
		{
			rl_nodes_wait_pushes(10);
			rl_shared_publish_oldest_owed(rl_nodes_oldest_owed());
		}
		else
		{
			(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							 1000, rl_wait_event_nodes());
			ResetLatch(MyLatch);
		}
	}
}
