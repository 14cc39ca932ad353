/*-------------------------------------------------------------------------
 *
 * node_resolve.c
 *	  The addresses of the nodes: literal IPv4 and IPv6 addresses as they
 *	  are, host names looked up with c-ares, asynchronously.
 *
 * A blocking getaddrinfo() would hold the backend, uncancellable, for as
 * long as the resolver takes to answer, which for a resolver that never
 * answers is far beyond any lease TTL.  Instead every lookup is started
 * with ares_getaddrinfo() and driven by the round's own wait loop: the
 * resolver's sockets are waited on alongside the nodes' sockets (and the
 * latch), so lookups of all nodes run in parallel, count against
 * connect_timeout, and cancel and statement_timeout interrupt them.
 *
 * Names are looked up again on every connect, so a node whose address
 * changes is followed.  Every address found (IPv4 and IPv6, in the order
 * c-ares sorts them, RFC 6724) is tried in turn by node_conn.c.
 *
 * The channel is created on first use, so always in the backend after
 * fork, and destroyed with the connections.  Its sockets are opened and
 * closed through our own socket functions, which count them with
 * AcquireExternalFD() like the nodes' own sockets.  c-ares allocates with
 * malloc and knows nothing of ereport: nothing here raises an ERROR.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <ares.h>

#include "storage/fd.h"

#include "net/node_internal.h"

static ares_channel rl_channel = NULL;
static bool rl_ares_library_ready = false;
static uint64_t rl_next_seq = 1;
static int	rl_resolver_sockets = 0;	/* open now, for the record */

/* c-ares opens and closes its sockets through these: each one is counted */
static ares_socket_t
rl_ares_socket(int domain, int type, int protocol, void *user_data)
{
	int			fd;

	if (!AcquireExternalFD())
	{
		errno = EMFILE;
		return ARES_SOCKET_BAD;
	}
	fd = socket(domain, type, protocol);
	if (fd < 0)
	{
		int			save_errno = errno;

		ReleaseExternalFD();
		errno = save_errno;
		return ARES_SOCKET_BAD;
	}
	rl_resolver_sockets++;
	rl_wes_stale = true;
	return fd;
}

static int
rl_ares_close(ares_socket_t fd, void *user_data)
{
	int			rc = close(fd);

	ReleaseExternalFD();
	rl_resolver_sockets--;
	rl_wes_stale = true;
	return rc;
}

static int
rl_ares_connect(ares_socket_t fd, const struct sockaddr *sa, ares_socklen_t len,
				void *user_data)
{
	return connect(fd, sa, len);
}

static ares_ssize_t
rl_ares_recvfrom(ares_socket_t fd, void *buf, size_t len, int flags,
				 struct sockaddr *from, ares_socklen_t *fromlen, void *user_data)
{
	return recvfrom(fd, buf, len, flags, from, fromlen);
}

static ares_ssize_t
rl_ares_sendv(ares_socket_t fd, const struct iovec *iov, int iovcnt,
			  void *user_data)
{
	struct msghdr msg;

	memset(&msg, 0, sizeof(msg));
	msg.msg_iov = (struct iovec *) iov;
	msg.msg_iovlen = iovcnt;
	return sendmsg(fd, &msg, MSG_NOSIGNAL);
}

static const struct ares_socket_functions rl_ares_socket_functions = {
	rl_ares_socket, rl_ares_close, rl_ares_connect, rl_ares_recvfrom,
	rl_ares_sendv
};

/* A resolver socket was opened, closed or changed what it waits for. */
static void
rl_ares_sock_state(void *data, ares_socket_t fd, int readable, int writable)
{
	rl_wes_stale = true;
}

/* Create the channel if there is none.  False with err set if that failed. */
static bool
resolver_init(char *err, size_t errlen)
{
	struct ares_options opts;
	int			rc;

	if (rl_channel != NULL)
		return true;
	if (!rl_ares_library_ready)
	{
		rc = ares_library_init(ARES_LIB_INIT_ALL);
		if (rc != ARES_SUCCESS)
		{
			snprintf(err, errlen, "could not start the resolver: %s", ares_strerror(rc));
			return false;
		}
		rl_ares_library_ready = true;
	}
	memset(&opts, 0, sizeof(opts));
	opts.sock_state_cb = rl_ares_sock_state;
	/* ask again within connect_timeout if a datagram was lost */
	opts.timeout = Max(rl_connect_timeout_ms / 2, 50);
	opts.tries = 2;
	rc = ares_init_options(&rl_channel, &opts,
						   ARES_OPT_SOCK_STATE_CB | ARES_OPT_TIMEOUTMS | ARES_OPT_TRIES);
	if (rc != ARES_SUCCESS)
	{
		rl_channel = NULL;
		snprintf(err, errlen, "could not start the resolver: %s", ares_strerror(rc));
		return false;
	}
	ares_set_socket_functions(rl_channel, &rl_ares_socket_functions, NULL);
	if (rl_dns_servers != NULL && rl_dns_servers[0] != '\0')
	{
		rc = ares_set_servers_ports_csv(rl_channel, rl_dns_servers);
		if (rc != ARES_SUCCESS)
		{
			ares_destroy(rl_channel);
			rl_channel = NULL;
			snprintf(err, errlen, "invalid redlock.dns_servers: %s", ares_strerror(rc));
			return false;
		}
	}
	return true;
}

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

/* Literal IPv4 and IPv6 addresses need no resolver. */
static bool
resolve_literal(RlNode *node)
{
	struct sockaddr_in sin;
	struct sockaddr_in6 sin6;

	memset(&sin, 0, sizeof(sin));
	memset(&sin6, 0, sizeof(sin6));
	if (inet_pton(AF_INET, node->addr.host, &sin.sin_addr) == 1)
	{
		sin.sin_family = AF_INET;
		add_address(node, (struct sockaddr *) &sin, sizeof(sin));
		return true;
	}
	if (inet_pton(AF_INET6, node->addr.host, &sin6.sin6_addr) == 1)
	{
		sin6.sin6_family = AF_INET6;
		add_address(node, (struct sockaddr *) &sin6, sizeof(sin6));
		return true;
	}
	return false;
}

/* A lookup ended (or was cancelled): hand its addresses to its node. */
static void
resolved_cb(void *arg, int status, int timeouts, struct ares_addrinfo *res)
{
	uint64_t	seq = (uint64_t) (uintptr_t) arg;
	RlNode	   *node = NULL;

	for (int i = 0; i < rl_nnodes; i++)
		if (rl_nodes[i].state == RL_CONN_RESOLVING &&
			rl_nodes[i].resolve_seq == seq)
			node = &rl_nodes[i];
	if (node != NULL)
	{
		if (status == ARES_SUCCESS && res != NULL)
		{
			for (struct ares_addrinfo_node *ai = res->nodes; ai != NULL; ai = ai->ai_next)
				add_address(node, ai->ai_addr, ai->ai_addrlen);
			if (node->naddrs == 0)
				snprintf(node->addr_error, sizeof(node->addr_error),
						 "no IPv4 or IPv6 address");
		}
		else
			snprintf(node->addr_error, sizeof(node->addr_error), "%s",
					 ares_strerror(status));
		node->resolve_done = true;
	}
	if (res != NULL)
		ares_freeaddrinfo(res);
}

/*
 * Start finding the node's addresses.  The lookup may end at once (a
 * literal address, a name in /etc/hosts, an error): then resolve_done is
 * set on return.
 */
void
resolve_start(RlNode *node)
{
	struct ares_addrinfo_hints hints;
	uint64_t	seq;

	node->naddrs = 0;
	node->next_addr = 0;
	node->resolve_done = false;
	if (resolve_literal(node))
	{
		node->resolve_done = true;
		return;
	}
	if (!resolver_init(node->addr_error, sizeof(node->addr_error)))
	{
		node->resolve_done = true;
		return;
	}
	seq = rl_next_seq++;
	node->resolve_seq = seq;
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_protocol = IPPROTO_TCP;
	ares_getaddrinfo(rl_channel, node->addr.host, NULL, &hints, resolved_cb,
					 (void *) (uintptr_t) seq);
}

/*
 * The node gives up its lookup.  When no node waits for one any more, the
 * lookups still running are cancelled, which closes the resolver's sockets.
 */
void
resolve_cancel(RlNode *node)
{
	bool		any = false;

	node->resolve_seq = 0;
	node->resolve_done = false;
	for (int i = 0; i < rl_nnodes; i++)
		if (rl_nodes[i].resolve_seq != 0)
			any = true;
	if (!any && rl_channel != NULL)
		ares_cancel(rl_channel);
}

/* Destroy the channel (exit, or a new configuration). */
void
resolve_shutdown(void)
{
	if (rl_channel != NULL)
	{
		for (int i = 0; i < rl_nnodes; i++)
			rl_nodes[i].resolve_seq = 0;
		ares_destroy(rl_channel);
		rl_channel = NULL;
		rl_wes_stale = true;
	}
	Assert(rl_resolver_sockets == 0);
}

/* The resolver's sockets and the events (RL_EV_*) it waits for on them. */
int
resolve_sockets(int *fds, int *events, int max)
{
	ares_socket_t socks[ARES_GETSOCK_MAXNUM];
	int			bits;
	int			n = 0;

	if (rl_channel == NULL)
		return 0;
	bits = ares_getsock(rl_channel, socks, ARES_GETSOCK_MAXNUM);
	for (int i = 0; i < ARES_GETSOCK_MAXNUM && n < max; i++)
	{
		int			ev = (ARES_GETSOCK_READABLE(bits, i) ? RL_EV_READ : 0) |
			(ARES_GETSOCK_WRITABLE(bits, i) ? RL_EV_WRITE : 0);

		if (ev == 0)
			break;
		fds[n] = socks[i];
		events[n] = ev;
		n++;
	}
	return n;
}

/* A resolver socket is ready (fd < 0: just handle the timeouts). */
void
resolve_process(int fd, bool readable, bool writable)
{
	if (rl_channel == NULL)
		return;
	if (fd < 0)
		ares_process_fd(rl_channel, ARES_SOCKET_BAD, ARES_SOCKET_BAD);
	else
		ares_process_fd(rl_channel, readable ? fd : ARES_SOCKET_BAD,
						writable ? fd : ARES_SOCKET_BAD);
}

/* How long to wait at most, so that the resolver's timeouts are kept. */
long
resolve_timeout_ms(long max_ms)
{
	struct timeval maxtv;
	struct timeval tv;
	struct timeval *next;
	long		ms;

	if (rl_channel == NULL || max_ms <= 0)
		return max_ms;
	maxtv.tv_sec = max_ms / 1000;
	maxtv.tv_usec = (max_ms % 1000) * 1000;
	next = ares_timeout(rl_channel, &maxtv, &tv);
	if (next == NULL)
		return max_ms;
	ms = (long) next->tv_sec * 1000 + (next->tv_usec + 999) / 1000;
	return Min(ms, max_ms);
}

