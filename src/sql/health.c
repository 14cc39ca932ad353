/*-------------------------------------------------------------------------
 *
 * health.c
 *	  redlock_nodes(): what each configured Redis node looks like from here.
 *	  (Who holds a resource, redlock_holder(): holder.c.)
 *
 * Probes every node (PING for the round trip, INFO and CONFIG GET save for
 * its settings) and warns about settings that make locks unsafe, as read
 * from the node itself.  Unreachable nodes are reported, never raised.
 * Each row names the session's node list as redlock_locks does
 * (node_list), so that a session can find its own leases' rows there.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "fmgr.h"
#include "funcapi.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/datetime.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

#include "lease/session_nodes.h"
#include "shared/lock_table.h"
#include "sql/health.h"
#include "net/nodes.h"

/*
 * Columns of redlock_nodes(); 1.1 added server and quarantined_until, 1.2
 * the node's epoch (epoch_since, epoch_run_id, epoch_reason) and node_list.
 * An older
 * definition of the function (library updated, ALTER EXTENSION UPDATE not
 * run yet) has fewer columns: its tuples are formed from the first values.
 */
#define RL_HEALTH_COLUMNS (12 + RL_EPOCH_COLUMNS)

/* the node's epoch and the node's clock then, for the quarantine */
static const char EPOCH_PROBE_SCRIPT[] =
"local t = redis.call('TIME')\n"
"return {redis.call('GET', ARGV[1]) or '',\n"
"        string.format('%d', t[1] * 1000 + math.floor(t[2] / 1000))}\n";

/*
 * The epoch columns of redlock_nodes and redlock_stats_nodes from the
 * node's epoch (NULL: unknown): since when (the node's clock), the run_id
 * of the process that wrote it, and why it began.
 */
void
rl_epoch_columns(const RlEpoch *epoch, Datum *values, bool *nulls)
{
	if (epoch == NULL)
	{
		for (int i = 0; i < RL_EPOCH_COLUMNS; i++)
			nulls[i] = true;
		return;
	}
	values[0] = TimestampTzGetDatum((TimestampTz) epoch->since_ms * 1000 -
									((TimestampTz) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE)) *
									SECS_PER_DAY * USECS_PER_SEC);
	nulls[0] = false;
	values[1] = CStringGetTextDatum(epoch->run_id);
	nulls[1] = epoch->run_id[0] == '\0';
	values[2] = CStringGetTextDatum(rl_epoch_reason(epoch));
	nulls[2] = false;
}

/* Value of "field:" in INFO output, palloc'd, or NULL. */
static char *
info_field(const char *info, const char *field)
{
	size_t		flen = strlen(field);
	const char *p = info;

	while (p != NULL && *p)
	{
		if (strncmp(p, field, flen) == 0 && p[flen] == ':')
		{
			const char *v = p + flen + 1;
			size_t		vlen = strcspn(v, "\r\n");

			return pnstrdup(v, vlen);
		}
		p = strchr(p, '\n');
		if (p)
			p++;
	}
	return NULL;
}

/*
 * Which server the node is, from its INFO: "Valkey 8.0.1" (Valkey names
 * itself in server_name and gives its own version in valkey_version; its
 * redis_version is the Redis release it is compatible with), "Redis 7.0.15"
 * (Redis has no server_name), or another server's own name and version.
 * palloc'd, or NULL when the node said nothing usable.
 */
static char *
server_of(const char *info)
{
	char	   *name = info_field(info, "server_name");
	char	   *version = NULL;

	if (name != NULL)
		version = info_field(info, psprintf("%s_version", name));
	if (version == NULL)
		version = info_field(info, "redis_version");
	if (name == NULL || strcmp(name, "redis") == 0)
		name = "Redis";
	else if (strcmp(name, "valkey") == 0)
		name = "Valkey";
	if (version == NULL)
		return NULL;
	return psprintf("%s %s", name, version);
}

static void
probe(RlRequest *req, int argc, const char **argv, const size_t *argvlen)
{
	memset(req, 0, sizeof(*req));
	req->reply_kind = RL_REPLY_STATUS;
	req->goal = RL_GOAL_ALL;
	req->argc = argc;
	req->argv = argv;
	req->argvlen = argvlen;
	req->probe = true;
	rl_nodes_run(req);
}

/* INFO field as a number, or -1 if missing */
static int64
info_number(const char *info, const char *field)
{
	char	   *v = info_field(info, field);
	int64		n = -1;

	if (v != NULL && v[0] != '\0')
		n = strtoll(v, NULL, 10);
	if (v != NULL)
		pfree(v);
	return n;
}

/*
 * Warnings read from a node's INFO: what makes its locks unsafe or its
 * answers fail or stall.
 */
static List *
info_warnings(List *warnings, const char *info)
{
	char	   *policy = info_field(info, "maxmemory_policy");
	int64		maxmemory = info_number(info, "maxmemory");
	int64		used = info_number(info, "used_memory");

	if (info_number(info, "cluster_enabled") == 1)
		warnings = lappend(warnings,
						   "cluster mode is enabled (cluster_enabled:1): redlock needs independent masters, not a Redis Cluster; keys of other slots are refused");
	if (policy != NULL && strcmp(policy, "noeviction") == 0 && maxmemory > 0 &&
		used >= 0)
	{
		if (used >= maxmemory)
			warnings = lappend(warnings,
							   psprintf("used_memory (" INT64_FORMAT " bytes) is over maxmemory (" INT64_FORMAT " bytes) with noeviction: the node refuses writes (OOM), so it grants no lease",
										used, maxmemory));
		else if (used >= maxmemory / 10 * 9)
			warnings = lappend(warnings,
							   psprintf("used_memory is %d%% of maxmemory with noeviction: the node refuses writes (OOM) once it is full",
										(int) (used * 100 / maxmemory)));
	}
	if (info_number(info, "loading") == 1)
		warnings = lappend(warnings,
						   "loading its data set: it answers nothing else until done");

	/*
	 * A fork copies the page tables of the whole data set and stalls the
	 * node for that long; AOF rewrites of nodes with the same write volume
	 * tend to start together.
	 */
	if (info_number(info, "aof_rewrite_in_progress") == 1)
		warnings = lappend(warnings,
						   "AOF rewrite in progress (a fork): the node may stall past node_timeout while it forks and finishes");
	else if (info_number(info, "aof_rewrite_scheduled") == 1)
		warnings = lappend(warnings,
						   "AOF rewrite scheduled (a fork): the node may stall past node_timeout while it forks and finishes");
	if (info_number(info, "rdb_bgsave_in_progress") == 1)
		warnings = lappend(warnings,
						   "RDB snapshot in progress (a fork): the node may stall past node_timeout while it forks");
	if (info_number(info, "module_fork_in_progress") == 1)
		warnings = lappend(warnings,
						   "a module's fork in progress: the node may stall past node_timeout while it forks");
	return warnings;
}

PG_FUNCTION_INFO_V1(redlock_nodes);

Datum
redlock_nodes(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	RlRequest	ping,
				info,
				save;
	static const char *ping_argv[] = {"PING"};
	static const size_t ping_len[] = {4};
	static const char *info_argv[] = {"INFO"};
	static const size_t info_len[] = {4};
	static const char *save_argv[] = {"CONFIG", "GET", "save"};
	static const size_t save_len[] = {6, 3, 4};
	RlRequest	epoch_req;
	char		epoch_key[RL_KEY_MAX + 1];
	const char *epoch_argv[4] = {"EVAL", EPOCH_PROBE_SCRIPT, "0", epoch_key};
	size_t		epoch_len[4] = {4, sizeof(EPOCH_PROBE_SCRIPT) - 1, 1, 0};
	char	   *node_list;

	InitMaterializedSRF(fcinfo, 0);
	if (rl_node_list == NULL || rl_node_list->count == 0)
		return (Datum) 0;
	rl_session_nodes_ready();
	/* the list in force now, as this session's leases have it */
	node_list = rl_node_list_id(rl_lock_table_nodes());

	probe(&ping, 1, ping_argv, ping_len);
	probe(&info, 1, info_argv, info_len);
	probe(&save, 3, save_argv, save_len);
	epoch_len[3] = snprintf(epoch_key, sizeof(epoch_key), "%sepoch", rl_key_prefix);
	probe(&epoch_req, 4, epoch_argv, epoch_len);

	for (int i = 0; i < ping.nnodes; i++)
	{
		Datum		values[RL_HEALTH_COLUMNS];
		bool		nulls[RL_HEALTH_COLUMNS] = {0};
		bool		reachable = ping.results[i].vote == RL_VOTE_YES;
		const char *text = info.results[i].reply_text;
		char	   *version = text ? info_field(text, "redis_version") : NULL;
		char	   *role = text ? info_field(text, "role") : NULL;
		char	   *policy = text ? info_field(text, "maxmemory_policy") : NULL;
		char	   *aof = text ? info_field(text, "aof_enabled") : NULL;
		char	   *server = text ? server_of(text) : NULL;
		const char *save_text = save.results[i].reply_text;
		const char *persistence = NULL;
		List	   *warnings = NIL;
		const char *epoch_text = epoch_req.results[i].reply_text;
		RlEpoch		epoch;
		bool		epoch_known = false;
		int64_t		left_ms = 0;

		/* CONFIG GET save answers "save\n<value>\n"; empty value: none */
		if (save_text != NULL && strncmp(save_text, "save\n", 5) == 0)
		{
			bool		snapshots = save_text[5] != '\n' && save_text[5] != '\0';
			bool		aof_on = aof != NULL && strcmp(aof, "1") == 0;

			persistence = aof_on && snapshots ? "aof+snapshots" :
				aof_on ? "aof" : snapshots ? "snapshots" : "none";
			if (!aof_on && !snapshots)
				warnings = lappend(warnings,
								   "no persistence (neither AOF nor snapshots): fencing counters and locks vanish on restart");
		}
		else if (aof != NULL)
			persistence = strcmp(aof, "1") == 0 ? "aof" : "unknown (CONFIG GET save refused; AOF off)";

		if (policy != NULL && strcmp(policy, "noeviction") != 0)
			warnings = lappend(warnings,
							   psprintf("maxmemory-policy is %s: lock keys can be evicted; use noeviction", policy));
		if (role != NULL && strcmp(role, "master") != 0)
			warnings = lappend(warnings,
							   psprintf("replication role is %s: redlock needs independent masters", role));
		if (text != NULL)
			warnings = info_warnings(warnings, text);
		/* the probe's reply: "epoch\nnow_ms\n" ("" for no epoch) */
		if (epoch_text != NULL)
		{
			const char *nl = strchr(epoch_text, '\n');
			int64		node_now_ms;

			if (nl != NULL && nl > epoch_text &&
				rl_parse_epoch(epoch_text, nl - epoch_text, &epoch) &&
				rl_parse_counter(nl + 1, strcspn(nl + 1, "\n"), &node_now_ms))
			{
				epoch_known = true;
				left_ms = rl_epoch_quarantine_left_ms(&epoch, node_now_ms,
													  rl_restart_quarantine_ms);
			}
			else if (nl == epoch_text && rl_restart_quarantine_ms > 0)
				warnings = lappend(warnings,
								   "no epoch: the node lost its data or was flushed since a client last read it; the next lock call begins its quarantine (redlock.restart_quarantine)");
		}
		if (left_ms > 0)
		{
			values[10] = TimestampTzGetDatum(GetCurrentTimestamp() + left_ms * 1000);
			warnings = lappend(warnings,
							   psprintf("in its restart quarantine: %s; it does not count toward a majority until quarantined_until (redlock.restart_quarantine)",
										rl_epoch_reason(&epoch)));
		}
		else
			nulls[10] = true;
		rl_epoch_columns(epoch_known ? &epoch : NULL, values + 11, nulls + 11);
		values[11 + RL_EPOCH_COLUMNS] = CStringGetTextDatum(node_list);
		if (rl_node_same_as(i) >= 0)
			warnings = lappend(warnings,
							   psprintf("the same Redis server as %s (run_id %s): a majority would count it twice, so lock calls are refused until one of the two entries is removed",
										rl_node_name(rl_node_same_as(i)),
										rl_node_ident(i)->run_id));

		values[0] = CStringGetTextDatum(rl_node_name(i));
		values[1] = BoolGetDatum(reachable);
		if (reachable)
			values[2] = Float8GetDatum(ping.results[i].elapsed_us / 1000.0);
		else
			nulls[2] = true;
#define TEXT_OR_NULL(col, str) \
		do { if (str) values[col] = CStringGetTextDatum(str); else nulls[col] = true; } while (0)
		TEXT_OR_NULL(3, version);
		TEXT_OR_NULL(4, role);
		TEXT_OR_NULL(5, policy);
		TEXT_OR_NULL(6, persistence);
		TEXT_OR_NULL(9, server);
#undef TEXT_OR_NULL
		if (warnings != NIL)
		{
			Datum	   *elems = palloc(sizeof(Datum) * list_length(warnings));
			int			n = 0;
			ListCell   *lc;

			foreach(lc, warnings)
				elems[n++] = CStringGetTextDatum((char *) lfirst(lc));
			values[7] = PointerGetDatum(construct_array(elems, n, TEXTOID, -1,
														false, TYPALIGN_INT));
		}
		else
			values[7] = PointerGetDatum(construct_empty_array(TEXTOID));
		if (reachable)
			nulls[8] = true;
		else
			values[8] = CStringGetTextDatum(ping.results[i].vote == RL_VOTE_PENDING ?
											"no answer" : ping.results[i].detail);

		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}
