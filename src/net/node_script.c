/*-------------------------------------------------------------------------
 *
 * node_script.c
 *	  Scripts sent by their SHA1: an EVAL of a script that a connection has
 *	  already run goes out as EVALSHA, so that the node neither receives
 *	  nor hashes the script's text again.
 *
 * Redis hashes the text of every EVAL it runs (SHA1, to find the compiled
 * script), and the release script carries the handoff's code: sent by its
 * text, it costs each node more than the owner-checked GET and DEL that
 * an uncontended release runs (bench/PROFILE.md).  By its SHA1 it costs
 * what it runs.
 *
 * The first EVAL of a script on a connection goes out by its text, which
 * puts the script in the server's cache; every later one by its SHA1.  A
 * request marks its script as one that may be sent so (static_script: the
 * protocol layer's scripts are static literals, so a text is known by its
 * address).  A node that no longer has the script (SCRIPT FLUSH, a cache
 * that evicts) answers NOSCRIPT, and an ACL user allowed EVAL but not
 * EVALSHA (the minimal ACL of doc/operating.md) answers NOPERM: the pipeline
 * then sends the command again by its text (node_pipeline.c), and the
 * connection sends scripts by their text again (NOSCRIPT: until it has run
 * each again; NOPERM: for as long as it lasts).  A new connection starts
 * with no script run.
 *
 * Which form goes to a node is decided for each connection
 * (script_by_sha); the EVALSHA form itself is the same for every node, and
 * is built once per round (script_sha_form, called by node_queue.c)
 * straight from the request's arguments and heads built once per script:
 * a round that goes by SHA1 everywhere never formats the script's text.
 * A must-deliver command sent so is kept in that form too, and turned back
 * into its text (script_eval_form) only when a node refused it or a new
 * connection is to get it.
 *
 * Nothing here raises or uses palloc: commands are formatted on the
 * commit, abort and exit paths too.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <openssl/evp.h>

#include "utils/builtins.h"

#include "net/node_internal.h"

/* scripts known by their address; one bit each in RlNode.scripts_run */
#define RL_MAX_SCRIPTS		32

typedef struct RlScript
{
	const char *text;
	size_t		len;
	bool		hashed;			/* sha is its SHA1; false: it could not be
								 * hashed, and goes by its text */
	char		sha[41];
	/* "$4 EVAL $<len>" and "$7 EVALSHA $40 <sha1>", with their CRLFs */
	char		eval_head[32];
	int			eval_head_len;
	char		sha_head[64];
	int			sha_head_len;
	uint32_t	command;		/* its number for the health record
								 * (node_report.c), once known; 0 before */
} RlScript;

static RlScript rl_scripts[RL_MAX_SCRIPTS];
static int	rl_nscripts = 0;

/* Append text to dst at *len (the caller made room). */
static void
put(char *dst, int *len, const char *text, int textlen)
{
	memcpy(dst + *len, text, textlen);
	*len += textlen;
}

/* put() of a string literal */
#define PUT_LITERAL(dst, len, lit)	put(dst, len, lit, sizeof(lit) - 1)

/* The heads of the script's commands, built once (no snprintf per round) */
static void
script_heads(RlScript *s)
{
	char		digits[MAXINT8LEN];

	s->eval_head_len = 0;
	PUT_LITERAL(s->eval_head, &s->eval_head_len, "$4\r\nEVAL\r\n$");
	put(s->eval_head, &s->eval_head_len, digits,
		pg_ulltoa_n((uint64) s->len, digits));
	PUT_LITERAL(s->eval_head, &s->eval_head_len, "\r\n");
	s->sha_head_len = 0;
	PUT_LITERAL(s->sha_head, &s->sha_head_len, "$7\r\nEVALSHA\r\n$40\r\n");
	put(s->sha_head, &s->sha_head_len, s->sha, 40);
	PUT_LITERAL(s->sha_head, &s->sha_head_len, "\r\n");
}

/* The script's index in rl_scripts, hashing it on first sight; -1: none. */
static int
script_index(const char *text, size_t len)
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	RlScript   *s;

	for (int i = 0; i < rl_nscripts; i++)
		if (rl_scripts[i].text == text && rl_scripts[i].len == len)
			return rl_scripts[i].hashed ? i : -1;
	if (rl_nscripts == RL_MAX_SCRIPTS)
		return -1;
	s = &rl_scripts[rl_nscripts];
	s->text = text;
	s->len = len;
	s->command = 0;
	s->hashed = EVP_Digest(text, len, md, &mdlen, EVP_sha1(), NULL) == 1 &&
		mdlen == 20;
	s->sha[40] = '\0';
	if (s->hashed)
	{
		hex_encode((const char *) md, 20, s->sha);
		script_heads(s);
	}
	rl_nscripts++;
	return s->hashed ? rl_nscripts - 1 : -1;
}

/*
 * The request is to go to this node: when the connection has run its
 * script (and may send EVALSHA), returns the script's number for
 * script_sha_form.  Otherwise -1: it goes by its text, and the script is
 * noted as run.
 */
int
script_by_sha(RlNode *node, const RlRequest *req)
{
	int			s;
	uint32		bit;

	if (!req->static_script || req->argc < 2 || req->no_reply ||
		node->evalsha_refused)
		return -1;
	s = script_index(req->argv[1], req->argvlen[1]);
	if (s < 0)
		return -1;
	bit = UINT32_C(1) << s;
	if ((node->scripts_run & bit) == 0)
	{
		node->scripts_run |= bit;	/* it goes by its text this time */
		return -1;
	}
	return s;
}

/*
 * Where the number that names a static script's command is kept
 * (node_report.c computes it once per script, not per round); NULL for a
 * request whose script is not known by its address.
 */
uint32_t *
script_command_slot(const RlRequest *req)
{
	int			s;

	if (!req->static_script || req->argc < 2)
		return NULL;
	s = script_index(req->argv[1], req->argvlen[1]);
	return s >= 0 ? &rl_scripts[s].command : NULL;
}

/* "*argc" and its CRLF into star (MAXINT8LEN + 3 bytes); returns its length */
static int
multibulk_head(char *star, int argc)
{
	int			len = 0;

	PUT_LITERAL(star, &len, "*");
	len += pg_ultoa_n((uint32) argc, star + len);
	PUT_LITERAL(star, &len, "\r\n");
	return len;
}

/*
 * The EVALSHA form of the request, for script s (script_by_sha): the same
 * for every node that sends it so.  Formatted straight from its arguments
 * (the EVAL form, with the script's whole text, is not needed for it) into
 * *buf, of *cap bytes, grown with realloc when too small (buf stays the
 * caller's to free()).  Returns its length, or -1 when it cannot be built
 * (out of memory): the request then goes by its text.
 */
int
script_sha_form(const RlRequest *req, int s, char **buf, int *cap)
{
	const RlScript *script;
	char		star[MAXINT8LEN + 3];
	int			starlen;
	size_t		need;
	int			len;
	char	   *out;

	if (s < 0 || s >= rl_nscripts || !rl_scripts[s].hashed || req->argc < 2 ||
		req->argvlen[1] != rl_scripts[s].len)
		return -1;
	script = &rl_scripts[s];
	starlen = multibulk_head(star, req->argc);
	/* each argument: "$<len>" (at most MAXINT8LEN digits), CRLF, it, CRLF */
	need = starlen + script->sha_head_len;
	for (int i = 2; i < req->argc; i++)
		need += 1 + MAXINT8LEN + 2 + req->argvlen[i] + 2;
	if (need > (size_t) PG_INT32_MAX)
		return -1;
	if (*buf == NULL || (size_t) *cap < need)
	{
		size_t		grown = Max(need, 512);
		char	   *p = realloc(*buf, grown);

		if (p == NULL)
			return -1;
		*buf = p;
		*cap = (int) grown;
	}
	out = *buf;
	len = 0;
	put(out, &len, star, starlen);
	put(out, &len, script->sha_head, script->sha_head_len);
	for (int i = 2; i < req->argc; i++)
	{
		PUT_LITERAL(out, &len, "$");
		len += pg_ulltoa_n((uint64) req->argvlen[i], out + len);
		PUT_LITERAL(out, &len, "\r\n");
		put(out, &len, req->argv[i], (int) req->argvlen[i]);
		PUT_LITERAL(out, &len, "\r\n");
	}
	return len;
}

/*
 * A command kept by its EVALSHA form (script_sha_form), by its text: for a
 * node that refused it (NOSCRIPT, NOPERM) or a new connection, which may
 * not have the script.  Returns it malloc'd (free()) with its length in
 * *evallen; NULL when shacmd is not the EVALSHA form of one of our scripts,
 * or out of memory.
 */
char *
script_eval_form(const char *shacmd, int shalen, int *evallen)
{
	const char *head = memchr(shacmd, '\n', Min(shalen, MAXINT8LEN + 3));
	int			starlen;

	if (head == NULL)
		return NULL;
	starlen = head + 1 - shacmd;
	for (int i = 0; i < rl_nscripts; i++)
	{
		const RlScript *script = &rl_scripts[i];
		int			rest;
		int			len = 0;
		char	   *out;

		if (!script->hashed || starlen + script->sha_head_len > shalen ||
			memcmp(shacmd + starlen, script->sha_head, script->sha_head_len) != 0)
			continue;
		rest = shalen - starlen - script->sha_head_len;
		out = malloc(starlen + script->eval_head_len + script->len + 2 + rest);
		if (out == NULL)
			return NULL;
		put(out, &len, shacmd, starlen);
		put(out, &len, script->eval_head, script->eval_head_len);
		put(out, &len, script->text, (int) script->len);
		PUT_LITERAL(out, &len, "\r\n");
		put(out, &len, shacmd + starlen + script->sha_head_len, rest);
		*evallen = len;
		return out;
	}
	return NULL;
}

/*
 * The node refused an EVALSHA.  True when it is one to send again by its
 * text: NOSCRIPT (it no longer has the script: the connection has run
 * none of ours now), or NOPERM for EVALSHA itself (an ACL that allows
 * EVAL: this connection sends every script by its text from now on).
 */
bool
script_refused(RlNode *node, const redisReply *reply)
{
	if (reply->type != REDIS_REPLY_ERROR)
		return false;
	if (reply->len >= 8 && strncmp(reply->str, "NOSCRIPT", 8) == 0)
	{
		node->scripts_run = 0;
		return true;
	}
	if (reply->len >= 6 && strncmp(reply->str, "NOPERM", 6) == 0)
	{
		for (size_t i = 6; i + 7 <= reply->len; i++)
		{
			if (pg_strncasecmp(reply->str + i, "evalsha", 7) == 0)
			{
				node->evalsha_refused = true;
				return true;
			}
		}
	}
	return false;
}

/* A new connection: it has run none of our scripts, and may try EVALSHA. */
void
script_forget_all(RlNode *node)
{
	node->scripts_run = 0;
	node->evalsha_refused = false;
}
