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
 * EVALSHA (the minimal ACL of the README) answers NOPERM: the pipeline
 * then sends the command again by its text (node_pipeline.c), and the
 * connection sends scripts by their text again (NOSCRIPT: until it has run
 * each again; NOPERM: for as long as it lasts).  A new connection starts
 * with no script run.
 *
 * Which form goes to a node is decided for each connection
 * (script_by_sha); the EVALSHA form itself is the same for every node, and
 * is built once per round (script_sha_form, called by node_queue.c) from
 * heads built once per script.
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

/*
 * The EVALSHA form of the request, formatted by hiredis as eval (its EVAL
 * form), for script s (script_by_sha): the same for every node that sends
 * it so.  Returns true with it in *shacmd (malloc'd, freed with free())
 * and *shalen; false when eval is not formatted as expected (it goes by
 * its text) or out of memory.
 */
bool
script_sha_form(const RlRequest *req, int s, const char *eval, int evallen,
				char **shacmd, int *shalen)
{
	const RlScript *script;
	char		star[MAXINT8LEN + 3];	/* "*argc" and its CRLF */
	int			starlen = 0;
	size_t		skip;
	char	   *out;

	if (s < 0 || s >= rl_nscripts || !rl_scripts[s].hashed || req->argc < 2 ||
		req->argvlen[1] != rl_scripts[s].len)
		return false;
	script = &rl_scripts[s];

	/* "*argc $4 EVAL $len <script>", then the other arguments */
	PUT_LITERAL(star, &starlen, "*");
	starlen += pg_ultoa_n((uint32) req->argc, star + starlen);
	PUT_LITERAL(star, &starlen, "\r\n");
	skip = starlen + script->eval_head_len + script->len + 2;
	if (skip > (size_t) evallen || memcmp(eval, star, starlen) != 0 ||
		memcmp(eval + starlen, script->eval_head, script->eval_head_len) != 0)
		return false;			/* not formatted as expected: by its text */
	out = malloc(starlen + script->sha_head_len + (evallen - skip));
	if (out == NULL)
		return false;
	memcpy(out, star, starlen);
	memcpy(out + starlen, script->sha_head, script->sha_head_len);
	memcpy(out + starlen + script->sha_head_len, eval + skip, evallen - skip);
	*shacmd = out;
	*shalen = starlen + script->sha_head_len + (int) (evallen - skip);
	return true;
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
