/*-------------------------------------------------------------------------
 *
 * node_resolve.c
 *	  The addresses of the nodes: literal IPv4 and IPv6 addresses as they
 *	  are, host names through the system resolver (getaddrinfo, which
 *	  blocks).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>

#include "node_internal.h"

/* Add an address of the node, with the node's port. */
static void
add_address(RlNode *node, const struct sockaddr *sa, size_t len)
{
	int			i = node->naddrs;

	if (i >= RL_MAX_ADDRS || len > sizeof(node->addrs[i]))
		return;
	if (sa->sa_family == AF_INET)
	{
		memcpy(&node->addrs[i], sa, sizeof(struct sockaddr_in));
		((struct sockaddr_in *) &node->addrs[i])->sin_port = htons(node->addr.port);
		node->addrlens[i] = sizeof(struct sockaddr_in);
	}
	else if (sa->sa_family == AF_INET6)
	{
		memcpy(&node->addrs[i], sa, sizeof(struct sockaddr_in6));
		((struct sockaddr_in6 *) &node->addrs[i])->sin6_port = htons(node->addr.port);
		node->addrlens[i] = sizeof(struct sockaddr_in6);
	}
	else
		return;
	node->naddrs++;
}

void
resolve_start(RlNode *node)
{
	struct addrinfo hints;
	struct addrinfo *res = NULL;
	int			rc;

	node->naddrs = 0;
	node->next_addr = 0;
	node->resolve_done = true;
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_NUMERICHOST;
	rc = getaddrinfo(node->addr.host, NULL, &hints, &res);
	if (rc != 0)
	{
		hints.ai_flags = 0;
		rc = getaddrinfo(node->addr.host, NULL, &hints, &res);
	}
	if (rc != 0)
	{
		snprintf(node->addr_error, sizeof(node->addr_error), "%s", gai_strerror(rc));
		return;
	}
	for (struct addrinfo *ai = res; ai != NULL; ai = ai->ai_next)
		add_address(node, ai->ai_addr, ai->ai_addrlen);
	freeaddrinfo(res);
	if (node->naddrs == 0)
		snprintf(node->addr_error, sizeof(node->addr_error), "no IPv4 or IPv6 address");
}

void
resolve_cancel(RlNode *node)
{
	node->resolve_done = false;
	node->resolve_seq = 0;
}

void
resolve_shutdown(void)
{
}

int
resolve_sockets(int *fds, int *events, int max)
{
	return 0;
}

void
resolve_process(int fd, bool readable, bool writable)
{
}

long
resolve_timeout_ms(long max_ms)
{
	return max_ms;
}

void
resolve_advance(RlRequest *req)
{
}
