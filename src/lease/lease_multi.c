/*-------------------------------------------------------------------------
 *
 * lease_multi.c
 *	  Several resources at once, all or none: the acquire loop of a
 *	  multi-resource lock call, and the release of a set.
 *
 * Once granted, each resource of the set is a lease of its own in the
 * registry and the lock table (its holds, validity, keep-alive, extension
 * and release), as if taken by a one-resource call, with the value and the
 * token of the set's grant.  So every path of a lease (commit, abort,
 * savepoints, DISCARD ALL, exit, keep-alive, redlock_extend, the views,
 * the fence) treats a set's resources as it treats any lease, and a set
 * may be released one resource at a time.
 *
 * The resources the session already holds (valid) are re-entered: one
 * more hold each, the same token, as a one-resource call would.  The
 * others are taken all or none: a single one by the one-resource acquire
 * (lease_acquire.c: it then waits in line like any call on it), several
 * by rounds that each ask every node for all of them at once
 * (protocol_multi.c).  Such a call holds nothing while it waits
 * (lease_multi_wait.c says how it waits, and why that cannot deadlock).
 * Nothing changes when the call fails.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "lib/stringinfo.h"

#include "lease/lease_acquire.h"
#include "lease/lease_multi.h"
#include "lease/lease_multi_wait.h"
#include "lease/lease_release.h"
#include "lease/lease_report.h"
#include "lease/registry.h"
#include "lease/session_nodes.h"
#include "shared/lock_table.h"
#include "shared/stats.h"

/* The set's names for messages: a", "b (quoted by the message). */
static char *
set_names(const RlMultiSet *set)
{
	StringInfoData buf;

	initStringInfo(&buf);
	for (int i = 0; i < set->n; i++)
		appendStringInfo(&buf, "%s%s", i > 0 ? "\", \"" : "",
						 set->resources[i]);
	return buf.data;
}

/*
 * Rounds on the nodes until granted; false for a try-lock refused.  Each
 * round asks every node for the whole set at once (n distinct resources
 * of which the session holds none, their keys filled in), all or none; or,
 * shared, for a shared lease on the set's one resource (lease_shared.c).
 * slots: the lock table rows of the set, entered here; the caller ends the
 * acquire (rl_registry_end_acquire_multi) once granted.
 */
bool
rl_lease_acquire_rounds(const RlMultiSet *set, int ttl_ms, bool try_only,
						int wait_ms, bool shared, RlGrant *grant, int *slots)
{
	RlMultiWaiter w;
	RlRequest	req;
	bool		asked = false;
	char	   *names = set_names(set);

	Assert(!shared || set->n == 1);
	rl_registry_begin_acquire_multi(set->resources, set->keys, set->n, shared,
									slots);
	w.set = set;
	w.names = names;
	w.slots = slots;
	w.started_us = rl_now_us();
	w.wait_ms = wait_ms;
	w.announced = false;
	for (;;)
	{
		RlAttempt	r;
		bool		mark = !try_only && wait_ms != 0 && slots[0] >= 0;

		/* while a backend here holds one of them, the nodes would refuse */
		if (!try_only && rl_multi_held_here(&w))
		{
			rl_multi_wait(&w, asked ? &req : NULL);
			continue;
		}

		rl_stats_count(RL_STAT_ATTEMPTS);
		if (shared)
			r = rl_proto_acquire_shared(set->resources[0], set->keys[0],
										set->keylens[0], ttl_ms, mark, grant,
										&req);
		else
			r = rl_proto_acquire_multi(set, ttl_ms, mark, grant, &req);
		asked = true;
		if (r == RL_ATTEMPT_GRANTED)
			break;
		if (r == RL_ATTEMPT_UNAVAILABLE)
		{
			rl_stats_acquire_latency(rl_now_us() - w.started_us);
			rl_report_unavailable(names, &req, false);
		}
		if (try_only)
		{
			rl_stats_acquire_latency(rl_now_us() - w.started_us);
			if (r == RL_ATTEMPT_EXPIRED)
			{
				rl_stats_count(RL_STAT_REFUSED_TIMEOUT);
				ereport(ERROR,
						(errcode(ERRCODE_REDLOCK_NOT_GRANTED),
						 set->n > 1 ?
						 errmsg("leases on \"%s\" expired before they were granted",
								names) :
						 errmsg("lease on \"%s\" expired before it was granted",
								names),
						 errdetail("Acquiring took longer than the TTL of %d ms less the drift allowance.",
								   ttl_ms),
						 errhint("Use a longer TTL.")));
			}
			rl_stats_count(RL_STAT_REFUSED_HELD);
			rl_registry_end_acquire_multi(NULL);
			return false;
		}
		rl_multi_wait(&w, &req);
	}
	rl_stats_count(RL_STAT_GRANTS);
	rl_stats_acquire_latency(rl_now_us() - w.started_us);
	pfree(names);
	return true;
}

/*
 * Take the n distinct resources all or none for ttl_ms, held for the
 * transaction (xact) or the session; tokens[i] is resource i's.  Returns
 * false (nothing taken) when try_only and one of them is held elsewhere.
 * wait_ms: -1 for no limit of its own.  keep_alive: the keep-alive worker
 * extends each of them while this backend lives.
 */
bool
rl_lease_acquire_multi(const char *const *resources, int n, int ttl_ms,
					   bool xact, bool try_only, int wait_ms, bool keep_alive,
					   int64 *tokens)
{
	RlMultiSet	set;
	char		keys[RL_MAX_MULTI][RL_KEY_MAX + 1];
	RlLease    *held[RL_MAX_MULTI];
	RlLease    *granted[RL_MAX_MULTI];
	int			slots[RL_MAX_MULTI];
	RlGrant		grant;
	int			need = 0;

	Assert(n >= 1 && n <= RL_MAX_MULTI);
	rl_lease_call_begin(ttl_ms, keep_alive);

	/* which of them this session holds already, valid */
	set.n = 0;
	for (int i = 0; i < n; i++)
	{
		RlLease    *lease = rl_registry_find(resources[i]);

		rl_registry_check_mode(lease, false);
		if (lease != NULL && lease->state == RL_LEASE_HELD &&
			rl_registry_valid_until(lease) > rl_now_us())
			held[i] = lease;
		else
		{
			held[i] = NULL;
			need++;
		}
	}

	/* one to take: as a one-resource call (which waits in line) */
	if (need == 1)
	{
		for (int i = 0; i < n; i++)
		{
			if (held[i] == NULL &&
				rl_lease_acquire(resources[i], ttl_ms, xact, try_only,
								 wait_ms, keep_alive) < 0)
				return false;
		}
	}
	else if (need > 1)
	{
		for (int i = 0; i < n; i++)
		{
			RlLease    *lease;

			if (held[i] != NULL)
				continue;
			lease = rl_registry_find(resources[i]);
			if (lease != NULL && lease->state == RL_LEASE_RELEASING)
				rl_registry_forget(lease);	/* the node layer releases it */
			else if (lease != NULL)
			{
				/* our own expired lease: released ahead, on the same
				 * connections, so that it is applied first */
				RlReleaseItem item = {lease->key, lease->keylen, lease->owner};
				RlRequest	req;

				rl_registry_expired(lease);
				rl_proto_release(&item, 1, false, false, 0, NULL, &req);
			}
			set.resources[set.n] = resources[i];
			set.keys[set.n] = keys[set.n];
			set.keylens[set.n] = rl_lock_key(keys[set.n], resources[i]);
			set.n++;
		}
		rl_stats_count(RL_STAT_ACQUIRES);
		if (!rl_lease_acquire_rounds(&set, ttl_ms, try_only, wait_ms, false,
									 &grant, slots))
			return false;

		/* each resource a lease of its own (an expired one keeps its holds) */
		for (int j = 0; j < set.n; j++)
			granted[j] = rl_lease_granted(set.resources[j], set.keys[j],
										  set.keylens[j], &grant, ttl_ms,
										  false, xact, keep_alive);
		rl_registry_end_acquire_multi(granted);
	}

	/* the ones held already: one more hold each */
	for (int i = 0; i < n; i++)
	{
		if (held[i] != NULL)
		{
			rl_registry_add_hold(held[i], xact);
			held[i]->keep_alive |= keep_alive;
			rl_registry_holds_changed(held[i]);
		}
		tokens[i] = rl_registry_find(resources[i])->token;
	}
	return true;
}

/*
 * Drop one session hold of each of the n distinct resources, releasing
 * those left without holds in one round.  Returns true when the session
 * held a session lease on every one of them (a WARNING names each it did
 * not hold).
 */
bool
rl_lease_unlock_multi(const char *const *resources, int n)
{
	RlLease    *release[RL_MAX_MULTI];
	int			nrelease = 0;
	bool		all = true;

	rl_session_nodes_ready();
	for (int i = 0; i < n; i++)
	{
		RlLease    *lease = rl_registry_held(resources[i]);

		if (lease == NULL || lease->session_holds == 0 || lease->shared)
		{
			ereport(WARNING,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("this session holds no session lease on \"%s\"",
							resources[i]),
					 lease == NULL || lease->session_holds == 0 ? 0 :
					 errdetail("Its lease on it is shared: redlock_unlock_shared() releases that.")));
			all = false;
			continue;
		}
		if (--lease->session_holds > 0 || lease->xact_holds > 0)
		{
			rl_registry_holds_changed(lease);
			continue;
		}
		if (rl_registry_valid_until(lease) <= rl_now_us())
			ereport(WARNING,
					(errcode(ERRCODE_REDLOCK_LEASE_LOST),
					 errmsg("lease on \"%s\" had expired before it was released",
							resources[i]),
					 errdetail("Its fencing token %lld may since have been superseded.",
							   (long long) lease->token)));
		release[nrelease++] = lease;
	}
	(void) rl_lease_release_leases(release, nrelease, false);
	return all;
}
