/*-------------------------------------------------------------------------
 *
 * nodes_view.c
 *	  redlock_stats_nodes(): the health of every Redis node as this whole
 *	  server sees it, from shared memory.
 *
 * Nothing is asked of any node: the rows are what the backends' and the
 * workers' requests met (src/shared/health_memory.c), so the view answers at once
 * even while nodes are down, and a monitoring system may poll it as often
 * as it likes.  redlock_nodes is the one that probes.  quarantined_until
 * comes from the server's record of the nodes' restarts
 * (src/shared/restart_memory.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

#include "base/guc.h"
#include "shared/health_memory.h"
#include "shared/restart_memory.h"
#include "shared/stats.h"

#define RL_STATS_NODES_COLUMNS 15

PG_FUNCTION_INFO_V1(redlock_stats_nodes);

Datum
redlock_stats_nodes(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	RlNodeHealth *rows;
	int			nrows;
	int64_t		now_us = rl_now_us();
	TimestampTz now = GetCurrentTimestamp();

	rl_stats_required();		/* the same need: shared_preload_libraries */
	Assert(rl_health_memory_available());
	InitMaterializedSRF(fcinfo, 0);

	rows = palloc(sizeof(RlNodeHealth) * RL_HEALTH_NODES);
	nrows = rl_health_memory_copy(rows);
	for (int i = 0; i < nrows; i++)
	{
		RlNodeHealth *h = &rows[i];
		Datum		values[RL_STATS_NODES_COLUMNS];
		bool		nulls[RL_STATS_NODES_COLUMNS] = {0};
		RlRestartMemo memo;
		int64_t		until = 0;
		int			col = 0;

		values[col++] = CStringGetTextDatum(h->node);
		values[col++] = CStringGetTextDatum(h->failing ? "failing" : "healthy");
		values[col] = TimestampTzGetDatum(h->failing_since);
		nulls[col++] = !h->failing;
		values[col++] = Int64GetDatum((int64) h->requests);
		for (int k = 0; k < RL_OUTCOME_ERROR_KINDS; k++)
			values[col++] = Int64GetDatum((int64) h->errors[k]);
		values[col] = CStringGetTextDatum(h->last_error);
		nulls[col++] = h->last_error_at == 0;
		values[col] = TimestampTzGetDatum(h->last_error_at);
		nulls[col++] = h->last_error_at == 0;
		values[col] = TimestampTzGetDatum(h->last_success_at);
		nulls[col++] = h->last_success_at == 0;
		if (rl_restart_memory_get(h->node, &memo))
			until = rl_quarantined_until(&memo, rl_restart_quarantine_ms, now_us);
		values[col] = TimestampTzGetDatum(now + (until - now_us));
		nulls[col++] = until == 0;
		values[col++] = TimestampTzGetDatum(h->tracked_since);
		Assert(col == RL_STATS_NODES_COLUMNS);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}
