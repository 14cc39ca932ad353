/*-------------------------------------------------------------------------
 *
 * nodes_view.c
 *	  redlock_stats_nodes(): the health of every Redis node as this whole
 *	  server sees it, from shared memory.
 *
 * Nothing is asked of any node: the rows are what the backends' and the
 * workers' requests met (src/shared/health_memory.c), so the view answers at once
 * even while nodes are down, and a monitoring system may poll it as often
 * as it likes.  redlock_nodes is the one that probes.  The epoch columns
 * and quarantined_until are what the latest request to the node read of
 * its epoch (the restart quarantine, node_server.c).  1.2 added the last
 * three columns; a 1.1 definition takes the first 15 values.
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
#include "sql/health.h"
#include "shared/stats.h"

#define RL_STATS_NODES_COLUMNS (15 + RL_EPOCH_COLUMNS)

PG_FUNCTION_INFO_V1(redlock_stats_nodes);

Datum
redlock_stats_nodes(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	RlNodeHealth *rows;
	int			nrows;
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
		values[col] = TimestampTzGetDatum(h->quarantined_until);
		nulls[col++] = h->quarantined_until == 0 || h->quarantined_until <= now;
		values[col++] = TimestampTzGetDatum(h->tracked_since);
		rl_epoch_columns(h->epoch_known ? &h->epoch : NULL, values + col,
						 nulls + col);
		col += RL_EPOCH_COLUMNS;
		Assert(col == RL_STATS_NODES_COLUMNS);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}
