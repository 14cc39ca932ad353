/*-------------------------------------------------------------------------
 *
 * health.h
 *	  What the two views of the nodes' health share (src/sql/health.c,
 *	  src/sql/nodes_view.c): the columns of a node's epoch.
 *
 *-------------------------------------------------------------------------
 */
#ifndef REDLOCK_SQL_HEALTH_H
#define REDLOCK_SQL_HEALTH_H

#include "base/quorum.h"

/* epoch_since, epoch_run_id, epoch_reason */
#define RL_EPOCH_COLUMNS 3

extern void rl_epoch_columns(const RlEpoch *epoch, Datum *values, bool *nulls);

#endif							/* REDLOCK_SQL_HEALTH_H */
