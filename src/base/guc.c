/*-------------------------------------------------------------------------
 *
 * guc.c
 *	  Configuration: the redlock.* settings and their check hooks.
 *
 * Every setting that decides where locks live or how the nodes are reached
 * is PGC_SUSET.  Bad values are rejected by check hooks when they are set
 * (SET, ALTER SYSTEM + reload, postgresql.conf), so a typo never surfaces
 * later as a puzzling lock failure.  A bad redlock.nodes from the server
 * configuration is remembered, so the lease functions can say why no nodes
 * are set (rl_nodes_rejected_reason()).
 *
 * The fence reads redlock.fence_token only when the value in force was set
 * by the current transaction (rl_fence_token_scope()), which it learns from
 * the variable's GUC stack.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <ctype.h>
#include <limits.h>

#include "access/xact.h"
#include "miscadmin.h"
#include "utils/guc.h"
#include "utils/guc_tables.h"

#include "base/guc.h"
#include "base/redlock.h"

const RlNodeList *rl_node_list = NULL;
int			rl_connect_timeout_ms = 200;
int			rl_node_timeout_ms = 250;
double		rl_drift_factor = 0.01;
int			rl_retry_delay_ms = 200;
int			rl_retry_jitter_ms = 100;
char	   *rl_key_prefix = NULL;
char	   *rl_username = NULL;
char	   *rl_password = NULL;
char	   *rl_fence_token_setting = NULL;
int			rl_fence_max_ahead_s = 300;
int			rl_max_leases = 1024;
int			rl_keep_alive_limit_s = 3600;
int			rl_restart_quarantine_ms = 60000;
int			rl_stats_max_databases = 256;
int			rl_stats_max_tables = 4096;
int			rl_shared_connections = RL_SHARED_AUTO;
int			rl_debug_complete_delay_ms = 0;

static char *rl_nodes_setting = NULL;

/* on, true, yes and 1 are auto: the setting began as a boolean */
static const struct config_enum_entry rl_shared_connections_options[] = {
	{"auto", RL_SHARED_AUTO, false},
	{"always", RL_SHARED_ALWAYS, false},
	{"off", RL_SHARED_OFF, false},
	{"on", RL_SHARED_AUTO, true},
	{"true", RL_SHARED_AUTO, true},
	{"yes", RL_SHARED_AUTO, true},
	{"1", RL_SHARED_AUTO, true},
	{"false", RL_SHARED_OFF, true},
	{"no", RL_SHARED_OFF, true},
	{"0", RL_SHARED_OFF, true},
	{NULL, 0, false}
};

/* Our own GUC records, found once when they are defined */
static struct config_generic *rl_nodes_gconf = NULL;
static struct config_generic *rl_fence_token_gconf = NULL;

/*
 * The last redlock.nodes from a configuration source that check_nodes()
 * refused, as an errdetail text: malloc'd, since check hooks run in the
 * postmaster too (backends inherit it) and must not throw.
 */
static bool rl_nodes_rejected = false;
static char *rl_nodes_rejected_text = NULL;
static char rl_nodes_rejected_fallback[RL_NODES_ERRLEN];

/* rl_define_gucs() is running: placeholder values are being applied */
static bool rl_defining_gucs = false;

#define RL_MAX_CREDENTIAL_LEN	512

static void *
rl_guc_malloc(size_t size)
{
#if PG_VERSION_NUM >= 160000
	return guc_malloc(LOG, size);
#else
	return malloc(size);
#endif
}

/* Where a value from a configuration source came from, for messages. */
static const char *
config_source_name(GucSource source)
{
	switch (source)
	{
		case PGC_S_FILE:
			return "the configuration file";
		case PGC_S_ARGV:
			return "the server command line";
		case PGC_S_GLOBAL:
		case PGC_S_DATABASE:
		case PGC_S_USER:
		case PGC_S_DATABASE_USER:
			return "ALTER ROLE or ALTER DATABASE settings";
		case PGC_S_CLIENT:
			return "the connection request";
		default:
			return "the server configuration";
	}
}

static void
nodes_forget_rejection(void)
{
	rl_nodes_rejected = false;
	free(rl_nodes_rejected_text);
	rl_nodes_rejected_text = NULL;
}

#define RL_NODES_REJECTED_FMT \
	"The value \"%s\" of redlock.nodes from %s was rejected, so the previous value stays in force. %s"

static void
nodes_remember_rejection(const char *value, const char *why, GucSource source)
{
	const char *from = config_source_name(source);
	size_t		len;

	nodes_forget_rejection();
	rl_nodes_rejected = true;
	if (value == NULL)
		value = "";
	len = sizeof(RL_NODES_REJECTED_FMT) + strlen(value) + strlen(from) + strlen(why);
	rl_nodes_rejected_text = malloc(len);
	if (rl_nodes_rejected_text != NULL)
		snprintf(rl_nodes_rejected_text, len, RL_NODES_REJECTED_FMT,
				 value, from, why);
	else
		snprintf(rl_nodes_rejected_fallback, sizeof(rl_nodes_rejected_fallback),
				 "The value of redlock.nodes from %s was rejected. %s", from, why);
}

const char *
rl_nodes_rejected_reason(void)
{
	if (!rl_nodes_rejected)
		return NULL;
	/* a value set in this session was never the configured one */
	if (rl_nodes_gconf != NULL && rl_nodes_gconf->source >= PGC_S_INTERACTIVE)
		return NULL;
	return rl_nodes_rejected_text ? rl_nodes_rejected_text :
		rl_nodes_rejected_fallback;
}

static bool
check_nodes(char **newval, void **extra, GucSource source)
{
	RlNodeList	parsed;
	char		errbuf[RL_NODES_ERRLEN];
	RlNodeList *copy;
	bool		from_config;

	/*
	 * A value from a configuration source (postgresql.conf, the command
	 * line, ALTER ROLE/DATABASE SET, the connection request) that is
	 * refused leaves the previous value in force, often the empty default,
	 * with nothing but a line in the server log: remember why, for the lease
	 * functions' error; a valid value from such a source forgets it.
	 * Interactive SET and PGC_S_TEST (validating ALTER ROLE/DATABASE SET)
	 * report the error to the user directly and change nothing.
	 *
	 * ALTER SYSTEM and pg_file_settings check values as PGC_S_FILE too, but
	 * inside a transaction, where the configuration file is never applied
	 * except to the placeholder values of a library being loaded (here,
	 * while rl_define_gucs() runs): those checks leave the record alone.
	 *
	 * Not seen here: a refused line that is removed from postgresql.conf
	 * (PostgreSQL re-checks only settings still in the file, and one whose
	 * value came from the file), so that refusal is remembered until a
	 * restart or a valid value.
	 */
	from_config = source < PGC_S_INTERACTIVE &&
		!(source == PGC_S_FILE && IsTransactionState() && !rl_defining_gucs);

	if (!rl_parse_node_list(*newval, &parsed, errbuf, sizeof(errbuf)))
	{
		GUC_check_errdetail("%s", errbuf);
		GUC_check_errhint("Give 1 to %d independent Redis masters as a comma-separated list of host:port, e.g. '10.0.0.1:6379,10.0.0.2:6379,10.0.0.3:6379'.",
						  RL_MAX_NODES);
		if (from_config)
			nodes_remember_rejection(*newval, errbuf, source);
		return false;
	}
	copy = rl_guc_malloc(sizeof(RlNodeList));
	if (copy == NULL)
		return false;
	memcpy(copy, &parsed, sizeof(RlNodeList));
	*extra = copy;
	if (from_config)
		nodes_forget_rejection();
	return true;
}

static void
assign_nodes(const char *newval, void *extra)
{
	const RlNodeList *list = (const RlNodeList *) extra;

	if (rl_node_list == NULL || list == NULL ||
		memcmp(rl_node_list, list, sizeof(RlNodeList)) != 0)
		rl_node_list_generation++;
	rl_node_list = list;
}

static bool
check_restart_quarantine(int *newval, void **extra, GucSource source)
{
	/* 0 (off) or at least the resolution of the uptime a node reports */
	if (*newval > 0 && *newval < 1000)
	{
		GUC_check_errdetail("A Redis node reports its uptime in whole seconds, from which the quarantine is counted.");
		GUC_check_errhint("Use 0 to turn the quarantine off, or at least 1s.");
		return false;
	}
	return true;
}

static bool
check_key_prefix(char **newval, void **extra, GucSource source)
{
	size_t		len = strlen(*newval);

	if (len == 0 || len > RL_MAX_KEY_PREFIX_LEN)
	{
		GUC_check_errdetail("The key prefix must be 1 to %d bytes long.",
							RL_MAX_KEY_PREFIX_LEN);
		return false;
	}
	for (const char *c = *newval; *c; c++)
	{
		if ((unsigned char) *c < 0x21 || (unsigned char) *c > 0x7e ||
			*c == '*' || *c == '?' || *c == '[' || *c == ']' || *c == '\\')
		{
			GUC_check_errdetail("The key prefix may contain only printable ASCII characters other than space, \"*\", \"?\", \"[\", \"]\" and \"\\\".");
			return false;
		}
	}
	return true;
}

static bool
check_credential(char **newval, void **extra, GucSource source)
{
	if (strlen(*newval) > RL_MAX_CREDENTIAL_LEN)
	{
		GUC_check_errdetail("Redis credentials may be at most %d bytes long.",
							RL_MAX_CREDENTIAL_LEN);
		return false;
	}
	for (const char *c = *newval; *c; c++)
	{
		if ((unsigned char) *c < 0x20 || *c == 0x7f)
		{
			GUC_check_errdetail("Redis credentials may not contain control characters.");
			return false;
		}
	}
	return true;
}

static void
assign_username(const char *newval, void *extra)
{
	rl_connection_setting_assigned(rl_username, newval);
}

/*
 * redlock.password: also refused where it would be stored in a catalog that
 * every user can read (pg_db_role_setting for ALTER ROLE/DATABASE SET,
 * pg_proc.proconfig for a function's SET clause): PostgreSQL validates
 * those values with PGC_S_TEST.
 */
static bool
check_password(char **newval, void **extra, GucSource source)
{
	if (source == PGC_S_TEST && *newval != NULL && (*newval)[0] != '\0')
	{
		GUC_check_errdetail("ALTER ROLE ... SET, ALTER DATABASE ... SET and a function's SET clause store the value in a catalog that every user can read.");
		GUC_check_errhint("Set redlock.password in postgresql.conf, with ALTER SYSTEM, or with SET in the session.");
		return false;
	}
	return check_credential(newval, extra, source);
}

static void
assign_password(const char *newval, void *extra)
{
	rl_connection_setting_assigned(rl_password, newval);
}

/*
 * SHOW, current_setting() and pg_settings show the password only to
 * superusers: members of pg_read_all_settings (pg_monitor) may read
 * GUC_SUPERUSER_ONLY settings.  GUC_NO_SHOW_ALL keeps it out of pg_settings
 * and SHOW ALL, whose reset_val and boot_val bypass this hook.  Whether one
 * is set is shown.
 */
static const char *
show_password(void)
{
	if (rl_password == NULL || rl_password[0] == '\0')
		return "";
	if (!superuser())
		return "********";
	return rl_password;
}

/*
 * redlock.fence_token: a transaction-local token for the fence trigger.
 * Empty means unset; otherwise a positive bigint.
 */
static bool
check_fence_token(char **newval, void **extra, GucSource source)
{
	const char *s = *newval;
	char	   *end;
	long long	v;

	if (s == NULL || s[0] == '\0')
		return true;
	errno = 0;
	v = strtoll(s, &end, 10);
	if (errno != 0 || end == s || *end != '\0' || v <= 0 || !isdigit((unsigned char) s[0]))
	{
		GUC_check_errdetail("The token must be a positive bigint (1 to 9223372036854775807), or empty.");
		return false;
	}
	return true;
}

/*
 * Our own GUC record, to read its source and stack.  PostgreSQL 16 exports
 * find_option(); before that, the sorted array of all records is searched.
 * A custom variable's record stays where it is once defined.
 */
static struct config_generic *
find_own_guc(const char *name)
{
#if PG_VERSION_NUM >= 160000
	return find_option(name, false, true, ERROR);
#else
	struct config_generic **vars = get_guc_variables();
	int			nvars = GetNumConfigOptions();

	for (int i = 0; i < nvars; i++)
	{
		if (strcmp(vars[i]->name, name) == 0)
			return vars[i];
	}
	return NULL;
#endif
}

/*
 * Where the value of redlock.fence_token in force comes from.  A GUC has a
 * stack entry only while it was changed in the current transaction (each
 * subtransaction and each function with a SET clause opens a nest level;
 * AtEOXact_GUC() pops or merges the entries when they end).  The newest
 * entry tells how the value in force was set at its level:
 *
 *	GUC_LOCAL		SET LOCAL or set_config(..., true): undone at the end of
 *					the transaction at the latest
 *	GUC_SET_LOCAL	SET, then SET LOCAL at the same level: the value in force
 *					is the LOCAL one; the SET value comes back at commit
 *	GUC_SAVE		a function's SET clause: undone when the function returns
 *	GUC_SET			SET without LOCAL: kept after commit
 *
 * This stays exact across subtransactions: a RELEASE merges the entry into
 * its parent's level with the same meaning (a plain SET makes the parent's
 * entry GUC_SET; a LOCAL one over a parent's SET makes it GUC_SET_LOCAL),
 * and a rollback to a savepoint restores the value and entries from before
 * it.  Without a stack entry the value was set outside this transaction: a
 * session SET in an earlier one, ALTER ROLE/DATABASE SET, the connection
 * request or the server configuration.  So is a value that SET LOCAL ... TO
 * DEFAULT or RESET brought back: its source is then the configuration's,
 * below PGC_S_INTERACTIVE.
 */
RlTokenScope
rl_fence_token_scope(void)
{
	struct config_generic *gconf = rl_fence_token_gconf;

	if (rl_fence_token_setting == NULL || rl_fence_token_setting[0] == '\0')
		return RL_TOKEN_UNSET;
	if (gconf == NULL || gconf->stack == NULL ||
		gconf->source < PGC_S_INTERACTIVE)
		return RL_TOKEN_OUTSIDE;
	if (gconf->stack->state == GUC_SET)
		return RL_TOKEN_PLAIN_SET;
	return RL_TOKEN_TRANSACTION;
}

void
rl_define_gucs(void)
{
	rl_defining_gucs = true;
	DefineCustomStringVariable("redlock.nodes",
							   "Redis masters holding the leases, as a comma-separated host:port list.",
							   "Use 1 to 15 independent masters; an odd number tolerates the most failures.",
							   &rl_nodes_setting,
							   "",
							   PGC_SUSET,
							   0,
							   check_nodes, assign_nodes, NULL);

	DefineCustomIntVariable("redlock.connect_timeout",
							"Time allowed to open a connection to a Redis node.",
							NULL,
							&rl_connect_timeout_ms,
							200, 1, 60000,
							PGC_SUSET,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("redlock.node_timeout",
							"Time a Redis node has to answer one request.",
							"A round returns once a majority answered: this bounds only the wait for a node the round still needs.  Keep it small against lease TTLs.",
							&rl_node_timeout_ms,
							250, 1, 60000,
							PGC_SUSET,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomRealVariable("redlock.drift_factor",
							 "Clock drift allowance, as a fraction of the lease TTL.",
							 "A further 2 ms is always allowed for Redis expiry precision.",
							 &rl_drift_factor,
							 0.01, 0.0, 0.5,
							 PGC_SUSET,
							 0,
							 NULL, NULL, NULL);

	DefineCustomIntVariable("redlock.restart_quarantine",
							"Time after a Redis node's restart during which it does not count toward a majority.",
							"A node whose run_id changed is kept out of every majority for lock and extend calls until this long after its start (0: off).  Keep it longer than the longest lease TTL, unless every node persists every write (appendfsync always).",
							&rl_restart_quarantine_ms,
							60000, 0, 86400000,
							PGC_SUSET,
							GUC_UNIT_MS,
							check_restart_quarantine, NULL, NULL);

	DefineCustomIntVariable("redlock.retry_delay",
							"Base delay between attempts of redlock_lock().",
							NULL,
							&rl_retry_delay_ms,
							200, 1, 60000,
							PGC_SUSET,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("redlock.retry_jitter",
							"Largest random delay added to redlock.retry_delay.",
							NULL,
							&rl_retry_jitter_ms,
							100, 0, 60000,
							PGC_SUSET,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomStringVariable("redlock.key_prefix",
							   "Prefix of every Redis key redlock touches.",
							   NULL,
							   &rl_key_prefix,
							   "redlock:",
							   PGC_SUSET,
							   0,
							   check_key_prefix, NULL, NULL);

	DefineCustomStringVariable("redlock.username",
							   "Redis ACL user name (empty: the default user).",
							   "Without redlock.password, AUTH is sent with an empty password, which a user with nopass accepts.",
							   &rl_username,
							   "",
							   PGC_SUSET,
							   0,
							   check_credential, assign_username, NULL);

	DefineCustomStringVariable("redlock.password",
							   "Redis password (AUTH); empty for none.",
							   "Shown only to superusers.",
							   &rl_password,
							   "",
							   PGC_SUSET,
							   GUC_SUPERUSER_ONLY | GUC_NO_SHOW_ALL | GUC_NOT_IN_SAMPLE,
							   check_password, assign_password, show_password);

	rl_define_net_gucs();
	rl_define_wait_gucs();

	DefineCustomStringVariable("redlock.fence_token",
							   "Fencing token offered by writes in this transaction (set it with SET LOCAL).",
							   "Read by the redlock_fence() trigger for DELETE, for INSERTs that leave the token column NULL and for UPDATEs that leave it unchanged.  Only a token set in the current transaction (SET LOCAL, set_config(..., true), a function's SET clause) is accepted.",
							   &rl_fence_token_setting,
							   "",
							   PGC_USERSET,
							   0,
							   check_fence_token, NULL, NULL);

	DefineCustomIntVariable("redlock.fence_max_ahead",
							"How far a fencing token may be ahead of this server's clock.",
							"Tokens are proposed from the clock in microseconds, so no grant gives one far ahead of it; the fence refuses a token further ahead (-1: no limit).  Writes in the 'held' mode of redlock_fence() are not checked.",
							&rl_fence_max_ahead_s,
							300, -1, INT_MAX,
							PGC_SUSET,
							GUC_UNIT_S,
							NULL, NULL, NULL);

	/*
	 * The statistics tables and the lock table live in shared memory, so
	 * their sizes are fixed at server start; PostgreSQL allows
	 * PGC_POSTMASTER variables only to libraries in shared_preload_libraries,
	 * which they need anyway.
	 */
	if (process_shared_preload_libraries_in_progress)
	{
		DefineCustomIntVariable("redlock.stats_max_databases",
								"Number of databases whose lease statistics are kept in shared memory.",
								"Events of further databases are counted only in redlock_stats_info.database_events_untracked.",
								&rl_stats_max_databases,
								256, 1, 65536,
								PGC_POSTMASTER,
								0,
								NULL, NULL, NULL);

		DefineCustomIntVariable("redlock.stats_max_tables",
								"Number of tables whose fence rejections are kept in shared memory.",
								"Rejections on further tables are counted only in redlock_stats_info.table_rejections_untracked; redlock_stats_reset() empties the table.",
								&rl_stats_max_tables,
								4096, 1, 1048576,
								PGC_POSTMASTER,
								0,
								NULL, NULL, NULL);

		DefineCustomIntVariable("redlock.max_leases",
								"Leases held or awaited at once on this server that the lock table can hold.",
								"The lock table (redlock_locks, wake-ups at release, keep-alive) needs redlock in shared_preload_libraries.",
								&rl_max_leases,
								1024, 16, 1000000,
								PGC_POSTMASTER,
								0,
								NULL, NULL, NULL);
	}

	DefineCustomIntVariable("redlock.keep_alive_limit",
							"Longest time the keep-alive worker extends a lease after it was granted.",
							"After it, a lease taken with keep_alive => true expires by its TTL unless it is extended by hand.",
							&rl_keep_alive_limit_s,
							3600, 1, 604800,
							PGC_SUSET,
							GUC_UNIT_S,
							NULL, NULL, NULL);

	DefineCustomEnumVariable("redlock.shared_connections",
							 "Runs lock calls of concurrent sessions on one connection per Redis node shared by the server's backends (a background worker).",
							 "auto: while other sessions' calls are under way; always: every call that can (for tests); off: never.  Needs redlock in shared_preload_libraries.",
							 &rl_shared_connections,
							 RL_SHARED_AUTO,
							 rl_shared_connections_options,
							 PGC_SIGHUP,
							 0,
							 NULL, NULL, NULL);

	DefineCustomIntVariable("redlock.debug_complete_delay",
							"For tests: the dispatcher worker sleeps this long between publishing what its connections still owe and handing a decided round back.",
							NULL, &rl_debug_complete_delay_ms, 0, 0, 10000,
							PGC_SIGHUP,
							GUC_UNIT_MS | GUC_NOT_IN_SAMPLE | GUC_NO_SHOW_ALL,
							NULL, NULL, NULL);

	MarkGUCPrefixReserved("redlock");
	rl_defining_gucs = false;

	rl_nodes_gconf = find_own_guc("redlock.nodes");
	rl_fence_token_gconf = find_own_guc("redlock.fence_token");
	if (rl_nodes_gconf == NULL || rl_fence_token_gconf == NULL)
		elog(ERROR, "redlock could not find its own configuration variables");
}
