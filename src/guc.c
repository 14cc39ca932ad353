/*-------------------------------------------------------------------------
 *
 * guc.c
 *	  Configuration: the redlock.* settings and their check hooks.
 *
 * Every setting that decides where locks live or how the nodes are reached
 * is PGC_SUSET.  Bad values are rejected by check hooks when they are set
 * (SET, ALTER SYSTEM + reload, postgresql.conf), so a typo never surfaces
 * later as a puzzling lock failure.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <ctype.h>
#include <limits.h>

#include "utils/guc.h"

#include "guc.h"
#include "redlock.h"

const RlNodeList *rl_node_list = NULL;
uint64_t	rl_node_list_generation = 1;
int			rl_connect_timeout_ms = 200;
int			rl_node_timeout_ms = 50;
double		rl_drift_factor = 0.01;
int			rl_retry_delay_ms = 200;
int			rl_retry_jitter_ms = 100;
char	   *rl_key_prefix = NULL;
char	   *rl_username = NULL;
char	   *rl_password = NULL;
char	   *rl_fence_token_setting = NULL;
char	   *rl_dns_servers = NULL;
int			rl_tls_mode = RL_TLS_DISABLE;
char	   *rl_tls_ca_file = NULL;
char	   *rl_tls_cert_file = NULL;
char	   *rl_tls_key_file = NULL;

static const struct config_enum_entry rl_tls_mode_options[] = {
	{"disable", RL_TLS_DISABLE, false},
	{"require", RL_TLS_REQUIRE, false},
	{"verify-ca", RL_TLS_VERIFY_CA, false},
	{"verify-full", RL_TLS_VERIFY_FULL, false},
	{NULL, 0, false}
};

static char *rl_nodes_setting = NULL;

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

/*
 * Parse "host:port[, host:port ...]".  IPv6 addresses go in brackets:
 * "[::1]:6379".  Returns false with a message in errbuf on bad input.
 * An empty or all-blank value parses to an empty list (unset).
 */
bool
rl_parse_node_list(const char *value, RlNodeList *out, char *errbuf,
				   size_t errlen)
{
	const char *p = value ? value : "";

	memset(out, 0, sizeof(*out));

	for (;;)
	{
		const char *host_start,
				   *host_end;
		const char *entry_start;
		long		port;
		char	   *endptr;
		size_t		hostlen;
		RlNodeAddr *node;

		while (isspace((unsigned char) *p))
			p++;
		if (*p == '\0' && out->count == 0)
			return true;		/* blank: unset */
		if (*p == '\0' || *p == ',')
		{
			snprintf(errbuf, errlen, "entry %d is empty", out->count + 1);
			return false;
		}
		entry_start = p;

		if (*p == '[')
		{
			host_start = ++p;
			while (*p && *p != ']')
				p++;
			if (*p != ']')
			{
				snprintf(errbuf, errlen, "unterminated \"[\" in \"%s\"", entry_start);
				return false;
			}
			host_end = p++;
		}
		else
		{
			host_start = p;
			while (*p && *p != ':' && *p != ',' && !isspace((unsigned char) *p))
				p++;
			host_end = p;
		}

		hostlen = host_end - host_start;
		if (hostlen == 0)
		{
			snprintf(errbuf, errlen, "missing host in entry %d", out->count + 1);
			return false;
		}
		if (hostlen > RL_MAX_HOST_LEN)
		{
			snprintf(errbuf, errlen, "host name in entry %d is longer than %d bytes",
					 out->count + 1, RL_MAX_HOST_LEN);
			return false;
		}
		for (const char *c = host_start; c < host_end; c++)
		{
			if (!isalnum((unsigned char) *c) && *c != '.' && *c != '-' &&
				*c != '_' && *c != ':')
			{
				snprintf(errbuf, errlen, "invalid character \"%c\" in host of entry %d",
						 *c, out->count + 1);
				return false;
			}
		}

		if (*p != ':')
		{
			snprintf(errbuf, errlen, "entry %d has no port (expected host:port)",
					 out->count + 1);
			return false;
		}
		p++;
		if (!isdigit((unsigned char) *p))
		{
			snprintf(errbuf, errlen, "entry %d has an invalid port", out->count + 1);
			return false;
		}
		errno = 0;
		port = strtol(p, &endptr, 10);
		if (errno != 0 || port < 1 || port > 65535)
		{
			snprintf(errbuf, errlen, "port of entry %d is out of range (1..65535)",
					 out->count + 1);
			return false;
		}
		p = endptr;
		while (isspace((unsigned char) *p))
			p++;
		if (*p != ',' && *p != '\0')
		{
			snprintf(errbuf, errlen, "unexpected \"%c\" after the port of entry %d",
					 *p, out->count + 1);
			return false;
		}

		if (out->count >= RL_MAX_NODES)
		{
			snprintf(errbuf, errlen, "more than %d nodes", RL_MAX_NODES);
			return false;
		}
		node = &out->nodes[out->count];
		memcpy(node->host, host_start, hostlen);
		node->host[hostlen] = '\0';
		node->port = (int) port;

		for (int i = 0; i < out->count; i++)
		{
			if (out->nodes[i].port == node->port &&
				pg_strcasecmp(out->nodes[i].host, node->host) == 0)
			{
				snprintf(errbuf, errlen, "node %s:%d is listed twice",
						 node->host, node->port);
				return false;
			}
		}
		out->count++;

		if (*p == '\0')
			return true;
		p++;					/* the comma */
	}
}

static bool
check_nodes(char **newval, void **extra, GucSource source)
{
	RlNodeList	parsed;
	char		errbuf[256];
	RlNodeList *copy;

	if (!rl_parse_node_list(*newval, &parsed, errbuf, sizeof(errbuf)))
	{
		GUC_check_errmsg("invalid value for parameter \"redlock.nodes\": %s", errbuf);
		GUC_check_errhint("Give 1 to %d independent Redis masters as a comma-separated list of host:port, e.g. '10.0.0.1:6379,10.0.0.2:6379,10.0.0.3:6379'.",
						  RL_MAX_NODES);
		return false;
	}
	copy = rl_guc_malloc(sizeof(RlNodeList));
	if (copy == NULL)
		return false;
	memcpy(copy, &parsed, sizeof(RlNodeList));
	*extra = copy;
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
check_key_prefix(char **newval, void **extra, GucSource source)
{
	size_t		len = strlen(*newval);

	if (len == 0 || len > RL_MAX_KEY_PREFIX_LEN)
	{
		GUC_check_errdetail("redlock.key_prefix must be 1 to %d bytes long.",
							RL_MAX_KEY_PREFIX_LEN);
		return false;
	}
	for (const char *c = *newval; *c; c++)
	{
		if ((unsigned char) *c < 0x21 || (unsigned char) *c > 0x7e ||
			*c == '*' || *c == '?' || *c == '[' || *c == ']' || *c == '\\')
		{
			GUC_check_errdetail("redlock.key_prefix may contain only printable ASCII characters other than space, \"*\", \"?\", \"[\", \"]\" and \"\\\".");
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
assign_credential(const char *newval, void *extra)
{
	/* a new username or password needs new, re-authenticated connections */
	rl_node_list_generation++;
}

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

/* The TLS settings take effect on new connections, with a new TLS context. */
static void
assign_tls_mode(int newval, void *extra)
{
	rl_node_list_generation++;
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

static void
assign_tls_file(const char *newval, void *extra)
{
	rl_node_list_generation++;
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
		GUC_check_errdetail("redlock.fence_token must be a positive bigint (1 to 9223372036854775807), or empty.");
		return false;
	}
	return true;
}

void
rl_define_gucs(void)
{
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
							"Keep it small against lease TTLs: a stalled node then costs at most this much.",
							&rl_node_timeout_ms,
							50, 1, 60000,
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
							   NULL,
							   &rl_username,
							   "",
							   PGC_SUSET,
							   0,
							   check_credential, assign_credential, NULL);

	DefineCustomStringVariable("redlock.password",
							   "Redis password (AUTH); empty for none.",
							   NULL,
							   &rl_password,
							   "",
							   PGC_SUSET,
							   GUC_SUPERUSER_ONLY,
							   check_credential, assign_credential, NULL);

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
							   "Empty: the system's default CA store.",
							   &rl_tls_ca_file,
							   "",
							   PGC_SUSET,
							   0,
							   check_tls_ca_file, assign_tls_file, NULL);

	DefineCustomStringVariable("redlock.tls_cert_file",
							   "Client certificate (PEM) presented to the nodes; empty for none.",
							   NULL,
							   &rl_tls_cert_file,
							   "",
							   PGC_SUSET,
							   0,
							   check_tls_cert_file, assign_tls_file, NULL);

	DefineCustomStringVariable("redlock.tls_key_file",
							   "Private key (PEM, unencrypted) of the client certificate.",
							   NULL,
							   &rl_tls_key_file,
							   "",
							   PGC_SUSET,
							   GUC_SUPERUSER_ONLY,
							   check_tls_key_file, assign_tls_file, NULL);

	DefineCustomStringVariable("redlock.dns_servers",
							   "DNS servers used to look up node host names, instead of /etc/resolv.conf.",
							   "A comma-separated list of IP addresses, each optionally with a port.",
							   &rl_dns_servers,
							   "",
							   PGC_SUSET,
							   GUC_NOT_IN_SAMPLE,
							   check_dns_servers, assign_credential, NULL);

	DefineCustomStringVariable("redlock.fence_token",
							   "Fencing token offered by writes in this transaction (use SET LOCAL).",
							   "Read by the redlock_fence() trigger for DELETE and for UPDATEs that leave the token column unchanged.",
							   &rl_fence_token_setting,
							   "",
							   PGC_USERSET,
							   0,
							   check_fence_token, NULL, NULL);

	MarkGUCPrefixReserved("redlock");
}
