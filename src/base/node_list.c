/*-------------------------------------------------------------------------
 *
 * node_list.c
 *	  Parsing and validating redlock.nodes: "host:port[, host:port ...]".
 *
 * A host is an IPv4 address (digits and dots), an IPv6 address in brackets,
 * or a DNS host name (labels of 1 to 63 letters, digits and hyphens, not
 * starting or ending with a hyphen; 253 bytes in all).  Used by the check
 * hook in guc.c, so nothing here raises: a bad value gets its reason as a
 * complete sentence in errbuf.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <netinet/in.h>

#include "base/guc.h"
#include "base/redlock.h"

#define RL_MAX_DNS_NAME_LEN		253
#define RL_MAX_DNS_LABEL_LEN	63

static bool
is_ascii_alnum(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		(c >= '0' && c <= '9');
}

/* Report a character that is not allowed, without printing raw bytes. */
static void
bad_host_char(char c, int entry, const char *allowed, char *errbuf,
			  size_t errlen)
{
	if (c > 0x20 && c < 0x7f)
		snprintf(errbuf, errlen,
				 "The host of entry %d contains \"%c\"; %s.",
				 entry, c, allowed);
	else
		snprintf(errbuf, errlen,
				 "The host of entry %d contains the byte 0x%02x; %s.",
				 entry, (unsigned char) c, allowed);
}

/*
 * Check one host of redlock.nodes.  In brackets it must be an IPv6 address;
 * made only of digits and dots, an IPv4 address (inet_pton: four decimal
 * parts of 0 to 255, no leading zeros, so nothing reads as octal); anything
 * else a DNS host name: labels of 1 to 63 letters, digits and hyphens that
 * neither start nor end with a hyphen, at most 253 bytes in all.  Printable
 * by the time a message quotes it.
 */
static bool
check_host(const char *host, bool bracketed, int entry, char *errbuf,
		   size_t errlen)
{
	unsigned char addr[sizeof(struct in6_addr)];
	bool		numeric = true;
	const char *label;

	if (bracketed)
	{
		for (const char *c = host; *c; c++)
		{
			if (!isxdigit((unsigned char) *c) && *c != ':' && *c != '.')
			{
				bad_host_char(*c, entry,
							  "an address in brackets must be an IPv6 address",
							  errbuf, errlen);
				return false;
			}
		}
		if (inet_pton(AF_INET6, host, addr) != 1)
		{
			snprintf(errbuf, errlen,
					 "The host \"[%s]\" of entry %d is not a valid IPv6 address.",
					 host, entry);
			return false;
		}
		return true;
	}

	for (const char *c = host; *c; c++)
	{
		if (!is_ascii_alnum(*c) && *c != '-' && *c != '.')
		{
			bad_host_char(*c, entry,
						  "a host name may contain only letters, digits, hyphens and dots (IPv6 addresses go in brackets)",
						  errbuf, errlen);
			return false;
		}
		if (!(*c >= '0' && *c <= '9') && *c != '.')
			numeric = false;
	}

	if (numeric)
	{
		if (inet_pton(AF_INET, host, addr) != 1)
		{
			snprintf(errbuf, errlen,
					 "The host \"%s\" of entry %d is not a valid IPv4 address.",
					 host, entry);
			return false;
		}
		return true;
	}

	if (strlen(host) > RL_MAX_DNS_NAME_LEN)
	{
		snprintf(errbuf, errlen,
				 "The host name of entry %d is longer than %d bytes.",
				 entry, RL_MAX_DNS_NAME_LEN);
		return false;
	}
	label = host;
	for (const char *c = host;; c++)
	{
		size_t		len;

		if (*c != '.' && *c != '\0')
			continue;
		len = c - label;
		if (len == 0)
		{
			snprintf(errbuf, errlen,
					 "The host name \"%s\" of entry %d has an empty label.",
					 host, entry);
			return false;
		}
		if (len > RL_MAX_DNS_LABEL_LEN)
		{
			snprintf(errbuf, errlen,
					 "The host name \"%s\" of entry %d has a label longer than %d bytes.",
					 host, entry, RL_MAX_DNS_LABEL_LEN);
			return false;
		}
		if (label[0] == '-' || c[-1] == '-')
		{
			snprintf(errbuf, errlen,
					 "The host name \"%s\" of entry %d has a label that starts or ends with a hyphen.",
					 host, entry);
			return false;
		}
		if (*c == '\0')
			return true;
		label = c + 1;
	}
}

/*
 * Parse "host:port[, host:port ...]".  IPv6 addresses go in brackets:
 * "[::1]:6379".  Returns false with the reason in errbuf, as a complete
 * sentence for an errdetail, on bad input.  An empty or all-blank value
 * parses to an empty list (unset).
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
		long		port;
		char	   *endptr;
		size_t		hostlen;
		bool		bracketed;
		int			entry = out->count + 1;
		RlNodeAddr *node;

		while (isspace((unsigned char) *p))
			p++;
		if (*p == '\0' && out->count == 0)
			return true;		/* blank: unset */
		if (*p == '\0' || *p == ',')
		{
			snprintf(errbuf, errlen, "Entry %d is empty.", entry);
			return false;
		}

		bracketed = (*p == '[');
		if (bracketed)
		{
			host_start = ++p;
			while (*p && *p != ']' && *p != ',')
				p++;
			if (*p != ']')
			{
				snprintf(errbuf, errlen,
						 "Entry %d has a \"[\" without a matching \"]\".",
						 entry);
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
			snprintf(errbuf, errlen, "Entry %d has no host.", entry);
			return false;
		}
		if (hostlen > RL_MAX_HOST_LEN)
		{
			snprintf(errbuf, errlen,
					 "The host of entry %d is longer than %d bytes.",
					 entry, RL_MAX_HOST_LEN);
			return false;
		}
		if (out->count >= RL_MAX_NODES)
		{
			snprintf(errbuf, errlen, "The list has more than %d entries.",
					 RL_MAX_NODES);
			return false;
		}
		node = &out->nodes[out->count];
		memcpy(node->host, host_start, hostlen);
		node->host[hostlen] = '\0';
		if (!check_host(node->host, bracketed, entry, errbuf, errlen))
			return false;

		if (*p != ':')
		{
			snprintf(errbuf, errlen,
					 "Entry %d has no port (expected host:port).", entry);
			return false;
		}
		p++;
		if (!isdigit((unsigned char) *p))
		{
			snprintf(errbuf, errlen, "The port of entry %d is not a number.",
					 entry);
			return false;
		}
		errno = 0;
		port = strtol(p, &endptr, 10);
		if (errno != 0 || port < 1 || port > 65535)
		{
			snprintf(errbuf, errlen,
					 "The port of entry %d is out of range (1 to 65535).",
					 entry);
			return false;
		}
		p = endptr;
		while (isspace((unsigned char) *p))
			p++;
		if (*p != ',' && *p != '\0')
		{
			if (*p > 0x20 && *p < 0x7f)
				snprintf(errbuf, errlen,
						 "Entry %d has \"%c\" after its port.", entry, *p);
			else
				snprintf(errbuf, errlen,
						 "Entry %d has the byte 0x%02x after its port.",
						 entry, (unsigned char) *p);
			return false;
		}
		node->port = (int) port;

		for (int i = 0; i < out->count; i++)
		{
			if (out->nodes[i].port == node->port &&
				pg_strcasecmp(out->nodes[i].host, node->host) == 0)
			{
				snprintf(errbuf, errlen, "The node %s%s%s:%d is listed twice.",
						 bracketed ? "[" : "", node->host,
						 bracketed ? "]" : "", node->port);
				return false;
			}
		}
		out->count++;

		if (*p == '\0')
			return true;
		p++;					/* the comma */
	}
}
