/*-------------------------------------------------------------------------
 *
 * lease_report.c
 *	  How a lease call reports what the nodes said: one errdetail line per
 *	  node, and the error raised when a majority could not answer an
 *	  acquire or an extend.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "lease/lease_report.h"
#include "shared/stats.h"

/* Append "node: outcome" lines for errdetail. */
void
rl_describe_nodes(StringInfo buf, const RlRequest *req)
{
	for (int i = 0; i < req->nnodes; i++)
	{
		const RlNodeResult *res = &req->results[i];

		appendStringInfo(buf, "\n%s: %s", rl_node_name(i),
						 res->vote == RL_VOTE_PENDING ?
						 "not waited for (outcome already decided)" : res->detail);
	}
}

static bool
any_protocol_error(const RlRequest *req)
{
	for (int i = 0; i < req->nnodes; i++)
		if (req->results[i].protocol_error)
			return true;
	return false;
}

/*
 * A majority could not answer an acquire (or an extend): raise, with a
 * hint that names the cause (net/node_report.c).
 */
void
rl_report_unavailable(const char *resource, const RlRequest *req,
					  bool extending)
{
	StringInfoData nodes;
	char		hint[1024];

	initStringInfo(&nodes);
	rl_describe_nodes(&nodes, req);

	if (any_protocol_error(req))
	{
		rl_stats_count(RL_STAT_REFUSED_ERROR);
		ereport(ERROR,
				(errcode(ERRCODE_REDLOCK_PROTOCOL),
				 extending ?
				 errmsg("could not extend lease on \"%s\": Redis nodes answered with errors",
						resource) :
				 errmsg("could not acquire lease on \"%s\": Redis nodes answered with errors",
						resource),
				 errdetail_internal("%s", nodes.data + 1),
				 errhint("%s", rl_nodes_error_hint(req, "Check the nodes' logs, redlock.username and redlock.password."))));
	}
	rl_stats_count(RL_STAT_REFUSED_NO_QUORUM);
	rl_nodes_unavailable_hint(req, hint, sizeof(hint));
	ereport(ERROR,
			(errcode(ERRCODE_REDLOCK_NOT_GRANTED),
			 extending ?
			 errmsg("could not extend lease on \"%s\": fewer than a majority of Redis nodes could answer",
					resource) :
			 errmsg("could not acquire lease on \"%s\": fewer than a majority of Redis nodes could answer",
					resource),
			 errdetail_plural("%d of %d nodes failed; a majority is %d.%s",
							  "%d of %d nodes failed; a majority is %d.%s",
							  req->tally.failed,
							  req->tally.failed, req->nnodes,
							  rl_majority(req->nnodes), nodes.data),
			 errhint("%s", hint)));
}
