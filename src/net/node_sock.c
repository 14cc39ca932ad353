/*-------------------------------------------------------------------------
 *
 * node_sock.c
 *	  The bytes on one node's connection: our own non-blocking socket, the
 *	  output buffer of commands not yet written, and the input fed to the
 *	  connection's hiredis reader.
 *
 * hiredis is used only to format commands and to parse replies: the socket
 * is ours, so that name resolution, connect and TLS all happen in our own
 * wait loop, and the same code works with hiredis 0.14 and 1.x.
 *
 * With TLS (redlock.tls_mode), the same bytes go through the connection's
 * TLS session (node_tls.c) instead of straight to the socket.
 *
 * Everything here runs on the commit, abort and exit paths too: nothing
 * raises an ERROR, and memory comes from malloc, never from palloc.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <unistd.h>

#include "storage/fd.h"

#include "net/node_internal.h"

#define RL_READ_CHUNK		(16 * 1024) /* read at most this much per call */
#define RL_OBUF_KEEP		(64 * 1024) /* a larger idle buffer is freed */

/*
 * Open a non-blocking socket and start connecting it to sa.  Returns false
 * with the reason in err if that failed at once.
 */
bool
sock_open(RlNode *node, const struct sockaddr *sa, socklen_t salen,
		  char *err, size_t errlen)
{
	int			fd;
	int			flags;

	Assert(node->fd < 0);
	if (!AcquireExternalFD())
	{
		snprintf(err, errlen, "too many open files in this backend (max_files_per_process)");
		return false;
	}
	fd = socket(sa->sa_family, SOCK_STREAM, 0);
	if (fd < 0)
	{
		snprintf(err, errlen, "could not create socket: %s", strerror(errno));
		ReleaseExternalFD();
		return false;
	}
	flags = fcntl(fd, F_GETFL);
	if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0 ||
		fcntl(fd, F_SETFD, FD_CLOEXEC) < 0)
	{
		snprintf(err, errlen, "could not set up socket: %s", strerror(errno));
		close(fd);
		ReleaseExternalFD();
		return false;
	}
	if (connect(fd, sa, salen) < 0 && errno != EINPROGRESS && errno != EINTR)
	{
		snprintf(err, errlen, "%s", strerror(errno));
		close(fd);
		ReleaseExternalFD();
		return false;
	}
	node->fd = fd;
	rl_wes_stale = true;
	return true;
}

/* Close the socket (and its TLS session), if any. */
void
sock_close(RlNode *node)
{
	tls_end(node);
	if (node->fd >= 0)
	{
		close(node->fd);
		ReleaseExternalFD();
		node->fd = -1;
		rl_wes_stale = true;
	}
}

/* Forget unsent output (the connection is gone); free a large buffer. */
void
sock_reset_output(RlNode *node)
{
	node->olen = node->opos = 0;
	node->tls_write_len = 0;
	if (node->ocap > RL_OBUF_KEEP)
	{
		free(node->obuf);
		node->obuf = NULL;
		node->ocap = 0;
	}
}

/* Append a formatted command to the output.  False: out of memory. */
bool
sock_append(RlNode *node, const char *cmd, size_t len)
{
	if (node->olen + len > node->ocap && node->opos > 0 &&
		node->tls_write_len == 0)
	{
		/* make room by dropping what was written already */
		memmove(node->obuf, node->obuf + node->opos, node->olen - node->opos);
		node->olen -= node->opos;
		node->opos = 0;
	}
	if (node->olen + len > node->ocap)
	{
		size_t		cap = Max(node->ocap * 2, 4096);
		char	   *grown;

		while (cap < node->olen + len)
			cap *= 2;
		grown = realloc(node->obuf, cap);
		if (grown == NULL)
			return false;
		node->obuf = grown;
		node->ocap = cap;
	}
	memcpy(node->obuf + node->olen, cmd, len);
	node->olen += len;
	node->want_write = true;
	return true;
}

/*
 * Write as much of the output as the socket takes.  Returns 1 when all of
 * it is written, 0 when some is left for later, -1 on error (err says why).
 */
int
sock_write(RlNode *node, char *err, size_t errlen)
{
	while (node->opos < node->olen)
	{
		ssize_t		n;

		if (node->ssl != NULL)
		{
			n = tls_write(node, node->obuf + node->opos, node->olen - node->opos,
						  err, errlen);
			if (n < 0)
			{
				/*
				 * A server that refuses us after the handshake (TLS 1.3: a
				 * client certificate it wanted) sends an alert and closes:
				 * our write then fails with a reset, but the alert, which
				 * says why, may be waiting to be read.
				 */
				char		buf[512];
				char		alert[160];

				if (tls_read(node, buf, sizeof(buf), alert, sizeof(alert)) < 0 &&
					strstr(alert, "alert") != NULL)
					snprintf(err, errlen, "%s", alert);
				return -1;
			}
			if (n == 0)
				break;
			node->opos += n;
			continue;
		}
		n = send(node->fd, node->obuf + node->opos, node->olen - node->opos,
				 MSG_NOSIGNAL);
		if (n < 0)
		{
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				break;
			snprintf(err, errlen, "%s", strerror(errno));
			return -1;
		}
		node->opos += n;
	}
	if (node->opos < node->olen)
	{
		node->want_write = true;
		return 0;
	}
	node->olen = node->opos = 0;
	node->want_write = false;
	return 1;
}

/* Bytes the reader holds that it has not parsed into a reply yet. */
size_t
sock_unparsed(const RlNode *node)
{
	/* buf, pos and len are public members in hiredis 0.14 and 1.x alike */
	return node->reader != NULL ? node->reader->len - node->reader->pos : 0;
}

/*
 * Hand what was read to the reader, unless it would make the reply being
 * read longer than RL_MAX_REPLY_BYTES: its parsed part (reply_bytes, kept
 * by pipeline_read) and what the reader still holds.  Replies are read as
 * soon as they are complete, so what the reader holds before this feed
 * belongs to one unfinished reply.
 */
static int
sock_feed(RlNode *node, const char *buf, ssize_t n, char *err, size_t errlen)
{
	node->bytes_in += n;
	if (node->reply_bytes + sock_unparsed(node) + n > RL_MAX_REPLY_BYTES)
	{
		snprintf(err, errlen,
				 "reply larger than %s (the most redlock accepts); the connection was closed",
				 RL_MAX_REPLY_TEXT);
		return -2;
	}
	if (redisReaderFeed(node->reader, buf, n) != REDIS_OK)
	{
		snprintf(err, errlen, "out of memory reading the reply");
		return -1;
	}
	return 0;
}

/*
 * Read what the socket holds (up to one chunk) into the reader.  Returns 0
 * when done (perhaps with nothing read), -1 on error or when the server
 * closed the connection, -2 when the reply being read grew too large (err
 * says which).
 */
int
sock_read(RlNode *node, char *err, size_t errlen)
{
	char		buf[RL_READ_CHUNK];
	ssize_t		n;

	if (node->ssl != NULL)
	{
		n = tls_read(node, buf, sizeof(buf), err, errlen);
		if (n <= 0)
			return n;
		return sock_feed(node, buf, n, err, errlen);
	}
	for (;;)
	{
		n = recv(node->fd, buf, sizeof(buf), 0);
		if (n >= 0 || errno != EINTR)
			break;
	}
	if (n < 0)
	{
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			return 0;
		snprintf(err, errlen, "%s", strerror(errno));
		return -1;
	}
	if (n == 0)
	{
		snprintf(err, errlen, "closed by the server");
		return -1;
	}
	return sock_feed(node, buf, n, err, errlen);
}

/* Input already read from the socket but not yet parsed (TLS records). */
bool
sock_has_buffered_input(const RlNode *node)
{
	return tls_pending(node);
}
