/*-------------------------------------------------------------------------
 *
 * holder.c
 *	  redlock_holder(): who holds a resource, as each node that has its lock
 *	  says, whichever server took it.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xlog.h"
#include "fmgr.h"
#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

#include "lease/session_nodes.h"
#include "protocol/protocol.h"
#include "sql/lease_sql.h"

/*
 * redlock_holder(resource): who holds it, as each node that has its lock
 * says, whichever server took it.  The lock value names its holder (see
 * rl_proto_new_owner() in protocol_values.c): the server's system identifier and
 * start time, the database and the process.  "This server" is the one with
 * both: a standby made with pg_basebackup shares its primary's system
 * identifier, not its start time.  Values from before version 1.1 name
 * nobody.
 */
/* One holder as node i says: "<lock value> <remaining ms>". */
static void
put_holder(ReturnSetInfo *rsinfo, int i, const char *answer, const char *key)
{
	Datum		values[9];
	bool		nulls[9] = {0};
	char		owner[RL_OWNER_LEN + 1];
	uint64		sysid;
	int64		started;
	unsigned int dbid;
	int			pid;
	long		pttl;

	values[0] = CStringGetTextDatum(rl_node_name(i));
	if (sscanf(answer, "%100s %ld", owner, &pttl) == 2 &&
		sscanf(owner + Min(strlen(owner), RL_OWNER_RANDOM_LEN),
			   ":" UINT64_FORMAT ":" INT64_FORMAT ":%u:%d",
			   &sysid, &started, &dbid, &pid) == 4)
	{
		values[1] = Int64GetDatum((int64) sysid);
		values[2] = ObjectIdGetDatum((Oid) dbid);
		values[3] = Int32GetDatum(pid);
		values[7] = TimestampTzGetDatum((TimestampTz) started);
	}
	else
	{
		nulls[1] = nulls[2] = nulls[3] = nulls[7] = true;
		if (sscanf(answer, "%*s %ld", &pttl) != 1)
			pttl = -1;
	}
	if (pttl >= 0)
		values[4] = Int32GetDatum((int32) Min(pttl, PG_INT32_MAX));
	else
		nulls[4] = true;
	values[5] = BoolGetDatum(!nulls[1] &&
							 sysid == GetSystemIdentifier() &&
							 started == (int64) PgStartTime);
	values[6] = CStringGetTextDatum(key);
	values[8] = CStringGetTextDatum(answer[0] == 'r' ? "shared" : "exclusive");
	/* (a 1.1 catalog's function has no mode column: only natts are read) */
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
}

PG_FUNCTION_INFO_V1(redlock_holder);

Datum
redlock_holder(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	char		key[RL_KEY_MAX + 1];
	char		resource[RL_MAX_RESOURCE_LEN + 1];
	RlRequest	req;

	rl_resource_arg(fcinfo, 0, resource);
	InitMaterializedSRF(fcinfo, 0);
	rl_session_nodes_ready();
	rl_proto_holder(key, rl_lock_key(key, resource), &req);

	for (int i = 0; i < req.nnodes; i++)
	{
		char	   *answer = req.results[i].reply_text;
		char	   *line;
		char	   *next;

		if (req.results[i].vote != RL_VOTE_YES || answer == NULL)
			continue;			/* unreachable */
		/* a line per holder: the lock's, or each reader's of a shared one */
		for (line = answer; line != NULL; line = next)
		{
			next = strchr(line, '\n');
			if (next != NULL)
				*next++ = '\0';
			if (line[0] != '\0')
				put_holder(rsinfo, i, line, key);
		}
	}
	return (Datum) 0;
}
