/*-------------------------------------------------------------------------
 *
 * guc_net.c
 *	  The settings for how the nodes are reached: TLS (redlock.tls_*) and
 *	  the DNS servers host names are looked up with (redlock.dns_servers);
 *	  and the generation of every setting that needs new connections when
 *	  it changes (these, redlock.nodes and the credentials of guc.c).
 *
 * All are PGC_SUSET.  Changing the value of any of them renews the
 * connections (the node list generation is bumped), so the next call
 * connects with the new TLS context or resolver; a reload that leaves them
 * as they were changes nothing but has the TLS files read again for new
 * connections.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <ctype.h>

#include "utils/guc.h"

#include "base/guc_net.h"

uint64_t	rl_node_list_generation = 1;
char	   *rl_dns_servers = NULL;
int			rl_tls_mode = RL_TLS_DISABLE;
uint64_t	rl_tls_files_serial = 0;
char	   *rl_tls_ca_file = NULL;
char	   *rl_tls_cert_file = NULL;
char	   *rl_tls_key_file = NULL;
int			rl_max_connections_per_node = 16;
int			rl_idle_connection_timeout_ms = 10000;
int			rl_debug_owed_limit = 0;
int			rl_debug_dispatch_delay_ms = 0;

/*
 * A setting that decides how the nodes are reached was assigned: a new
 * value needs new connections, and the leases taken on the old ones are
 * released (session_nodes.c).  PostgreSQL calls assign hooks on every reload
 * of the configuration file, for unchanged values too, and when a SET
 * LOCAL or a function's SET clause ends: only a different value counts.
 * The variable still holds the value in force while the hook runs.
 */
void
rl_connection_setting_assigned(const char *oldval, const char *newval)
{
	if (strcmp(oldval ? oldval : "", newval ? newval : "") != 0)
		rl_node_list_generation++;
}

static const struct config_enum_entry rl_tls_mode_options[] = {
	{"disable", RL_TLS_DISABLE, false},
	{"require", RL_TLS_REQUIRE, false},
	{"verify-ca", RL_TLS_VERIFY_CA, false},
	{"verify-full", RL_TLS_VERIFY_FULL, false},
	{NULL, 0, false}
};

/*
 * redlock.dns_servers: the DNS servers to ask instead of those of
 * /etc/resolv.conf, as "ip[:port],..." ("[ipv6]:port" with a port).
 */
static bool
check_dns_servers(char **newval, void **extra, GucSource source)
{
	if (strlen(*newval) > 1024)
	{
		GUC_check_errdetail("redlock.dns_servers may be at most 1024 bytes long.");
		return false;
	}
	for (const char *c = *newval; *c; c++)
	{
		if (!isxdigit((unsigned char) *c) && *c != '.' && *c != ':' &&
			*c != ',' && *c != '[' && *c != ']' && *c != ' ')
		{
			GUC_check_errdetail("redlock.dns_servers is a comma-separated list of IP addresses, each optionally with a port (\"10.0.0.53:53\", \"[::1]:53\").");
			return false;
		}
	}
	return true;
}

/*
 * The TLS settings take effect on new connections, with a new TLS context.
 * Only a different value renews the connections (and releases the leases,
 * see rl_connection_setting_assigned()); any assignment, a reload of an
 * unchanged value included, has the files read again for the connections
 * opened from now on, so that renewed certificates are picked up.
 */
static void
assign_tls_mode(int newval, void *extra)
{
	if (newval != rl_tls_mode)
		rl_node_list_generation++;
	rl_tls_files_serial++;
}

/*
 * A certificate or key file must be readable and hold PEM data of the right
 * kind.  Whether OpenSSL accepts it is known only when it loads it: that
 * error, naming the file, is reported at connect.
 */
static bool
check_pem_file(char **newval, const char *name, const char *marker)
{
	FILE	   *f;
	char		buf[65536];
	size_t		n;

	if (*newval == NULL || (*newval)[0] == '\0')
		return true;
	f = fopen(*newval, "r");
	if (f == NULL)
	{
		GUC_check_errdetail("Could not open %s file \"%s\": %s.", name, *newval,
							strerror(errno));
		return false;
	}
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	if (strstr(buf, "-----BEGIN ") == NULL || strstr(buf, marker) == NULL)
	{
		GUC_check_errdetail("The %s file \"%s\" holds no PEM \"%s\" block.",
							name, *newval, marker);
		return false;
	}
	return true;
}

static bool
check_tls_ca_file(char **newval, void **extra, GucSource source)
{
	return check_pem_file(newval, "CA", "CERTIFICATE");
}

static bool
check_tls_cert_file(char **newval, void **extra, GucSource source)
{
	return check_pem_file(newval, "certificate", "CERTIFICATE");
}

static bool
check_tls_key_file(char **newval, void **extra, GucSource source)
{
	return check_pem_file(newval, "key", "PRIVATE KEY");
}

/* one of the TLS files is assigned; see assign_tls_mode() */
static void
tls_file_assigned(const char *oldval, const char *newval)
{
	rl_connection_setting_assigned(oldval, newval);
	rl_tls_files_serial++;
}

static void
assign_tls_ca_file(const char *newval, void *extra)
{
	tls_file_assigned(rl_tls_ca_file, newval);
}

static void
assign_tls_cert_file(const char *newval, void *extra)
{
	tls_file_assigned(rl_tls_cert_file, newval);
}

static void
assign_tls_key_file(const char *newval, void *extra)
{
	tls_file_assigned(rl_tls_key_file, newval);
}

/* a new resolver channel comes with new connections */
static void
assign_dns_servers(const char *newval, void *extra)
{
	rl_connection_setting_assigned(rl_dns_servers, newval);
}

/* Called by rl_define_gucs(). */
void
rl_define_net_gucs(void)
{
	DefineCustomEnumVariable("redlock.tls_mode",
							 "Whether connections to the Redis nodes use TLS, and what is checked.",
							 "disable, require (encrypted, certificate not checked), verify-ca (signed by a trusted CA), verify-full (and names the node).",
							 &rl_tls_mode,
							 RL_TLS_DISABLE,
							 rl_tls_mode_options,
							 PGC_SUSET,
							 0,
							 NULL, assign_tls_mode, NULL);

	DefineCustomStringVariable("redlock.tls_ca_file",
							   "CA certificates (PEM) that node certificates are checked against.",
							   "Needed by verify-ca; empty: verify-full checks against the system's default CA store.",
							   &rl_tls_ca_file,
							   "",
							   PGC_SUSET,
							   0,
							   check_tls_ca_file, assign_tls_ca_file, NULL);

	DefineCustomStringVariable("redlock.tls_cert_file",
							   "Client certificate (PEM) presented to the nodes; empty for none.",
							   NULL,
							   &rl_tls_cert_file,
							   "",
							   PGC_SUSET,
							   0,
							   check_tls_cert_file, assign_tls_cert_file, NULL);

	DefineCustomStringVariable("redlock.tls_key_file",
							   "Private key (PEM, unencrypted) of the client certificate.",
							   NULL,
							   &rl_tls_key_file,
							   "",
							   PGC_SUSET,
							   GUC_SUPERUSER_ONLY,
							   check_tls_key_file, assign_tls_key_file, NULL);

	DefineCustomIntVariable("redlock.max_connections_per_node",
							"The most connections this server opens to each Redis node.",
							"Three are the workers' (dispatcher, wake-up, keep-alive); the rest are backends' own, one per node for each backend that holds some.  A backend without any sends its calls through the dispatcher's shared connections, or waits for a backend's to close.  Needs redlock in shared_preload_libraries.",
							&rl_max_connections_per_node,
							16, RL_WORKER_CONNECTIONS + 1, 10000,
							PGC_SIGHUP,
							0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("redlock.idle_connection_timeout",
							"A backend closes its own connections to the Redis nodes after they were unused this long.",
							"Sooner when another backend waits for connections.",
							&rl_idle_connection_timeout_ms,
							10000, 100, 3600 * 1000,
							PGC_SIGHUP,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("redlock.debug_owed_limit",
							"For tests: the replies a connection to a node may owe, if fewer than the built-in 1024 (0: those).",
							NULL, &rl_debug_owed_limit, 0, 0, 1024,
							PGC_SIGHUP,
							GUC_NOT_IN_SAMPLE | GUC_NO_SHOW_ALL,
							NULL, NULL, NULL);

	DefineCustomIntVariable("redlock.debug_dispatch_delay",
							"For tests: the dispatcher worker sleeps this long between queueing a batch of rounds on its connections and writing them.",
							NULL, &rl_debug_dispatch_delay_ms, 0, 0, 10000,
							PGC_SIGHUP,
							GUC_UNIT_MS | GUC_NOT_IN_SAMPLE | GUC_NO_SHOW_ALL,
							NULL, NULL, NULL);

	DefineCustomStringVariable("redlock.dns_servers",
							   "DNS servers used to look up node host names, instead of /etc/resolv.conf.",
							   "A comma-separated list of IP addresses, each optionally with a port.",
							   &rl_dns_servers,
							   "",
							   PGC_SUSET,
							   GUC_NOT_IN_SAMPLE,
							   check_dns_servers, assign_dns_servers, NULL);
}
