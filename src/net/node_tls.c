/*-------------------------------------------------------------------------
 *
 * node_tls.c
 *	  TLS on the nodes' connections, with OpenSSL: the TLS context, the
 *	  non-blocking handshake, and reading and writing through a session.
 *
 * The context (CA, client certificate and key, what is verified) is built
 * once per backend, on the first TLS connect, and built again for the next
 * connect after a TLS setting was assigned (a reload of unchanged settings
 * included: renewed files are read; open connections stay).  The handshake runs in the round's wait loop: what
 * OpenSSL wants next (SSL_ERROR_WANT_READ, _WANT_WRITE) becomes the socket
 * event the node waits for, so the handshake counts against
 * connect_timeout and is interrupted like everything else.
 *
 * Every failure is reported with its cause (the certificate check that
 * failed, or OpenSSL's error text), and OpenSSL's per-thread error queue is
 * cleared around every call, so that nothing of ours is left for
 * PostgreSQL's own TLS code to find, and nothing of its for us.  Nothing
 * here raises an ERROR: it runs on the no-throw paths too.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <limits.h>
#include <sys/socket.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "net/node_internal.h"

static SSL_CTX *rl_ssl_ctx = NULL;
static uint64_t rl_ssl_ctx_generation = 0;	/* settings it was built with */
static uint64_t rl_ssl_ctx_files_serial = 0;	/* ... and files it read */
static char rl_ssl_ctx_error[160];	/* why it could not be built, or "" */

/* Key files must not be encrypted: never prompt on a terminal. */
static int
no_passphrase(char *buf, int size, int rwflag, void *userdata)
{
	return -1;
}

/* The oldest error in OpenSSL's queue as text; the queue is cleared. */
static void
queue_text(char *buf, size_t len)
{
	unsigned long e = ERR_get_error();

	if (e == 0)
		snprintf(buf, len, "no further detail");
	else
		ERR_error_string_n(e, buf, len);
	ERR_clear_error();
}

static bool
build_context(void)
{
	SSL_CTX    *ctx;
	char		why[120];
	const char *cert = rl_tls_cert_file;
	const char *key = rl_tls_key_file;

	ERR_clear_error();
	ctx = SSL_CTX_new(TLS_client_method());
	if (ctx == NULL)
	{
		queue_text(why, sizeof(why));
		snprintf(rl_ssl_ctx_error, sizeof(rl_ssl_ctx_error),
				 "could not create a TLS context: %s", why);
		return false;
	}
	SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
	SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE |
					 SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
	SSL_CTX_set_default_passwd_cb(ctx, no_passphrase);

	/*
	 * verify-ca checks no name: with the system's CA store, any publicly
	 * issued certificate would pass.  libpq 16 likewise refuses
	 * sslrootcert=system below verify-full.
	 */
	if (rl_tls_mode == RL_TLS_VERIFY_CA &&
		(rl_tls_ca_file == NULL || rl_tls_ca_file[0] == '\0'))
	{
		snprintf(rl_ssl_ctx_error, sizeof(rl_ssl_ctx_error),
				 "redlock.tls_mode verify-ca needs redlock.tls_ca_file");
		goto fail;
	}

	if (rl_tls_mode >= RL_TLS_VERIFY_CA)
	{
		if (rl_tls_ca_file != NULL && rl_tls_ca_file[0] != '\0')
		{
			if (SSL_CTX_load_verify_locations(ctx, rl_tls_ca_file, NULL) != 1)
			{
				queue_text(why, sizeof(why));
				snprintf(rl_ssl_ctx_error, sizeof(rl_ssl_ctx_error),
						 "could not load CA file \"%s\": %s", rl_tls_ca_file, why);
				goto fail;
			}
		}
		else if (SSL_CTX_set_default_verify_paths(ctx) != 1)
		{
			queue_text(why, sizeof(why));
			snprintf(rl_ssl_ctx_error, sizeof(rl_ssl_ctx_error),
					 "could not load the system's CA certificates: %s", why);
			goto fail;
		}
		SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
	}
	else
		SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, NULL);

	if (cert != NULL && cert[0] != '\0')
	{
		if (key == NULL || key[0] == '\0')
			key = cert;			/* the key may follow the certificate */
		if (SSL_CTX_use_certificate_chain_file(ctx, cert) != 1)
		{
			queue_text(why, sizeof(why));
			snprintf(rl_ssl_ctx_error, sizeof(rl_ssl_ctx_error),
					 "could not load client certificate file \"%s\": %s", cert, why);
			goto fail;
		}
		if (SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1)
		{
			queue_text(why, sizeof(why));
			snprintf(rl_ssl_ctx_error, sizeof(rl_ssl_ctx_error),
					 "could not load client key file \"%s\": %s", key, why);
			goto fail;
		}
		if (SSL_CTX_check_private_key(ctx) != 1)
		{
			queue_text(why, sizeof(why));
			snprintf(rl_ssl_ctx_error, sizeof(rl_ssl_ctx_error),
					 "client key file \"%s\" does not match certificate \"%s\"",
					 key, cert);
			goto fail;
		}
	}
	ERR_clear_error();
	rl_ssl_ctx = ctx;
	return true;

fail:
	SSL_CTX_free(ctx);
	ERR_clear_error();
	return false;
}

/* The context for the settings in force; NULL with err set if none. */
static SSL_CTX *
tls_context(char *err, size_t errlen)
{
	if (rl_ssl_ctx_generation != rl_node_list_generation ||
		rl_ssl_ctx_files_serial != rl_tls_files_serial)
	{
		if (rl_ssl_ctx != NULL)
			SSL_CTX_free(rl_ssl_ctx);
		rl_ssl_ctx = NULL;
		rl_ssl_ctx_error[0] = '\0';
		rl_ssl_ctx_generation = rl_node_list_generation;
		rl_ssl_ctx_files_serial = rl_tls_files_serial;
		(void) build_context();
	}
	if (rl_ssl_ctx == NULL)
		snprintf(err, errlen, "%s", rl_ssl_ctx_error);
	return rl_ssl_ctx;
}

/* Is host an IPv4 or IPv6 literal? */
static bool
host_is_ip(const char *host)
{
	unsigned char buf[sizeof(struct in6_addr)];

	return inet_pton(AF_INET, host, buf) == 1 ||
		inet_pton(AF_INET6, host, buf) == 1;
}

/*
 * Start a TLS session on the node's connected socket: SNI for host names,
 * and with verify-full, the name or IP the certificate must carry.
 */
bool
tls_begin(RlNode *node, char *err, size_t errlen)
{
	SSL_CTX    *ctx = tls_context(err, errlen);
	SSL		   *ssl;
	const char *host = node->addr.host;
	bool		ip = host_is_ip(host);
	char		why[120];

	if (ctx == NULL)
		return false;
	ERR_clear_error();
	ssl = SSL_new(ctx);
	if (ssl == NULL || SSL_set_fd(ssl, node->fd) != 1 ||
		(!ip && SSL_set_tlsext_host_name(ssl, host) != 1) ||
		(rl_tls_mode == RL_TLS_VERIFY_FULL && !ip &&
		 SSL_set1_host(ssl, host) != 1) ||
		(rl_tls_mode == RL_TLS_VERIFY_FULL && ip &&
		 X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), host) != 1))
	{
		queue_text(why, sizeof(why));
		snprintf(err, errlen, "could not start TLS: %s", why);
		if (ssl != NULL)
			SSL_free(ssl);
		return false;
	}
	SSL_set_connect_state(ssl);
	node->ssl = ssl;
	node->tls_events = RL_EV_WRITE;
	node->tls_write_len = 0;
	return true;
}

/* Close the session (the socket is closed by the caller). */
void
tls_end(RlNode *node)
{
	if (node->ssl != NULL)
	{
		SSL_free(node->ssl);
		node->ssl = NULL;
		ERR_clear_error();
	}
	node->tls_events = 0;
	node->tls_write_len = 0;
}

/* Is the oldest queued error an end of file in the middle of a record? */
static bool
queue_has_eof(void)
{
#ifdef SSL_R_UNEXPECTED_EOF_WHILE_READING
	unsigned long e = ERR_peek_error();

	return e != 0 && ERR_GET_LIB(e) == ERR_LIB_SSL &&
		ERR_GET_REASON(e) == SSL_R_UNEXPECTED_EOF_WHILE_READING;
#else
	return false;
#endif
}

/*
 * Describe a failed call: the certificate check that failed, OpenSSL's
 * error, or the server closing the connection.
 */
static void
describe_failure(RlNode *node, int rc, int sslerr, int saved_errno,
				 const char *what, char *err, size_t errlen)
{
	char		why[120];
	long		vr;

	switch (sslerr)
	{
		case SSL_ERROR_SSL:
			/* require does not check: its verify result means nothing */
			vr = SSL_get_verify_result(node->ssl);
			if (rl_tls_mode >= RL_TLS_VERIFY_CA && vr != X509_V_OK &&
				!SSL_is_init_finished(node->ssl))
			{
				if (vr == X509_V_ERR_HOSTNAME_MISMATCH ||
					vr == X509_V_ERR_IP_ADDRESS_MISMATCH)
					snprintf(err, errlen,
							 "certificate verify failed: %s (the certificate does not name \"%s\")",
							 X509_verify_cert_error_string(vr), node->addr.host);
				else
					snprintf(err, errlen, "certificate verify failed: %s",
							 X509_verify_cert_error_string(vr));
				ERR_clear_error();
				return;
			}
			if (queue_has_eof())
			{
				snprintf(err, errlen, "%s: the server closed the connection", what);
				break;
			}
			queue_text(why, sizeof(why));
			snprintf(err, errlen, "%s: %s", what, why);
			node->tls_broken = true;
			return;
		case SSL_ERROR_ZERO_RETURN:
			snprintf(err, errlen, "%s: the server closed the connection", what);
			break;
		case SSL_ERROR_SYSCALL:
			if (ERR_peek_error() != 0)
			{
				queue_text(why, sizeof(why));
				snprintf(err, errlen, "%s: %s", what, why);
				return;
			}
			if (saved_errno != 0 && rc < 0)
				snprintf(err, errlen, "%s: %s", what, strerror(saved_errno));
			else
				snprintf(err, errlen, "%s: the server closed the connection", what);
			break;
		default:
			snprintf(err, errlen, "%s: SSL error %d", what, sslerr);
			break;
	}
	ERR_clear_error();
}

/*
 * Take the handshake as far as it goes now.  Returns 1 when it is done, 0
 * when it waits for the socket (node->tls_events says for what), -1 when it
 * failed (err says why).
 */
int
tls_handshake(RlNode *node, char *err, size_t errlen)
{
	int			rc;
	int			sslerr;
	int			saved_errno;

	ERR_clear_error();
	errno = 0;
	rc = SSL_do_handshake(node->ssl);
	saved_errno = errno;
	if (rc == 1)
	{
		node->tls_events = 0;
		ERR_clear_error();
		return 1;
	}
	sslerr = SSL_get_error(node->ssl, rc);
	if (sslerr == SSL_ERROR_WANT_READ)
	{
		node->tls_events = RL_EV_READ;
		return 0;
	}
	if (sslerr == SSL_ERROR_WANT_WRITE)
	{
		node->tls_events = RL_EV_WRITE;
		return 0;
	}
	describe_failure(node, rc, sslerr, saved_errno, "TLS handshake failed",
					 err, errlen);
	if (strstr(err, "the server closed the connection") != NULL)
		snprintf(err, errlen, "the server closed the connection during the TLS handshake");
	else if (sslerr == SSL_ERROR_SYSCALL &&
			 (saved_errno == ECONNRESET || saved_errno == EPIPE))
		snprintf(err, errlen, "the server closed the connection during the TLS handshake (%s)",
				 strerror(saved_errno));
	return -1;
}

/* SSL_read: bytes read, 0 if it would block, -1 on error or end (err). */
int
tls_read(RlNode *node, char *buf, int len, char *err, size_t errlen)
{
	int			n;
	int			sslerr;

	ERR_clear_error();
	errno = 0;
	n = SSL_read(node->ssl, buf, len);
	if (n > 0)
	{
		node->tls_events = 0;
		return n;
	}
	sslerr = SSL_get_error(node->ssl, n);
	if (sslerr == SSL_ERROR_WANT_READ)
		return 0;
	if (sslerr == SSL_ERROR_WANT_WRITE)
	{
		node->tls_events = RL_EV_WRITE;
		return 0;
	}
	if (sslerr == SSL_ERROR_ZERO_RETURN ||
		(sslerr == SSL_ERROR_SSL && queue_has_eof()) ||
		(sslerr == SSL_ERROR_SYSCALL && ERR_peek_error() == 0 && n == 0))
	{
		ERR_clear_error();
		snprintf(err, errlen, "closed by the server");
		return -1;
	}
	describe_failure(node, n, sslerr, errno, "TLS error", err, errlen);
	return -1;
}

/* SSL_write: bytes written, 0 if it would block, -1 on error (err). */
int
tls_write(RlNode *node, const char *buf, size_t len, char *err, size_t errlen)
{
	int			n;
	int			sslerr;
	int			want;

	/* a retried write must be given the same length */
	want = node->tls_write_len > 0 ? node->tls_write_len : (int) Min(len, INT_MAX / 2);
	ERR_clear_error();
	errno = 0;
	n = SSL_write(node->ssl, buf, want);
	if (n > 0)
	{
		node->tls_write_len = 0;
		node->tls_events = 0;
		return n;
	}
	node->tls_write_len = want;
	sslerr = SSL_get_error(node->ssl, n);
	if (sslerr == SSL_ERROR_WANT_WRITE)
		return 0;
	if (sslerr == SSL_ERROR_WANT_READ)
	{
		node->tls_events = RL_EV_READ;
		return 0;
	}
	describe_failure(node, n, sslerr, errno, "TLS error", err, errlen);
	return -1;
}

/* Bytes OpenSSL has read from the socket and not yet handed to us. */
bool
tls_pending(const RlNode *node)
{
	return node->ssl != NULL && SSL_pending(node->ssl) > 0;
}

/* Has the server answered our hello yet (its first TLS record)? */
bool
tls_heard_server(const RlNode *node)
{
	OSSL_HANDSHAKE_STATE st;

	if (node->ssl == NULL)
		return false;
	st = SSL_get_state(node->ssl);
	return st != TLS_ST_BEFORE && st != TLS_ST_CW_CLNT_HELLO;
}

/*
 * Before the server's first TLS record: does what waits on the socket look
 * like something other than TLS (a Redis error reply, a greeting)?  Then
 * text gets its first line, made printable.  Only peeks: OpenSSL still
 * reads it, and says what it makes of it.
 */
bool
tls_peer_speaks_plaintext(const RlNode *node, char *text, size_t len)
{
	char		buf[64];
	ssize_t		n;
	size_t		o = 0;

	if (node->ssl == NULL || tls_heard_server(node) || len < 8)
		return false;
	n = recv(node->fd, buf, Min(sizeof(buf), len - 4), MSG_PEEK | MSG_DONTWAIT);
	/* TLS records begin with a content type of 20 to 23 */
	if (n <= 0 || (buf[0] >= 20 && buf[0] <= 23))
		return false;
	for (ssize_t i = 0; i < n && buf[i] != '\r' && buf[i] != '\n' && o + 4 < len; i++)
		text[o++] = isprint((unsigned char) buf[i]) ? buf[i] : '?';
	text[o] = '\0';
	return true;
}
