/*-------------------------------------------------------------------------
 *
 * floor.c
 *	  The majority-round floor of redlock's acquire and release: a bare C
 *	  client that sends the very commands the extension sends to every node
 *	  at once (non-blocking, one parallel round) and times the majority's
 *	  replies, with nothing else around them.  Built and run by
 *	  bench/targets.sh; not part of the extension.
 *
 *	  floor NODES CMDFILE ROUNDS WARM [PROPOSAL]
 *	  floor --arg CMDFILE PHASE INDEX ARGNO
 *
 * NODES is "host:port,host:port,...".  CMDFILE holds the commands of one
 * lock/unlock cycle as redis-server's MONITOR printed them when the
 * extension ran one (bench/targets.sh captures them: the script text, the
 * keys and every argument are the extension's own, whatever src/ is today),
 * one per line, each line "acquire" or "release" and then the arguments,
 * quoted and escaped as MONITOR quotes them.  Every argument equal to
 * PROPOSAL (the token the captured acquire was granted) is replaced in each
 * round by a fresh proposal made as the extension makes one (the wall clock
 * in microseconds, or one more than the last), so that the acquire script
 * raises the fencing counter in every round, as it does for the extension.
 *
 * A round writes a phase's commands to every node, then waits in poll() for
 * the replies; its time is from just before the first write to the moment
 * the majority's (N / 2 + 1) last reply of the phase has been read.  The
 * round then waits for all nodes (untimed) before the next phase.  WARM
 * untimed cycles come first, then ROUNDS timed ones.  Prints "key=value"
 * lines: p50/p90/p99 in microseconds of the acquire round, of the release
 * round and of their sum (cycle), the same for the time to all replies
 * (acquire_all_*, release_all_*), and the replies that were errors or
 * (acquire) nil.  With FLOOR_SAMPLES=FILE in the environment, every timed
 * round's "acquire release" times (us) also go to FILE, one round a line.  With --arg it prints, as it is, argument ARGNO (0: the
 * command's name) of command INDEX (from 0) of PHASE (acquire or release),
 * and exits 1 when there is no such argument: a script's text, for its SHA1.
 *
 *-------------------------------------------------------------------------
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#define MAX_NODES 16
#define MAX_CMDS 16
#define MAX_ARGS 64

typedef struct
{
	int			argc;
	char	   *argv[MAX_ARGS];
	size_t		argvlen[MAX_ARGS];
	int			proposal_at[MAX_ARGS];	/* 1: replaced by the proposal */
} Cmd;

typedef struct
{
	int			fd;
	redisReader *reader;
} Node;

static Node nodes[MAX_NODES];
static int	nnodes;
static Cmd	cmds[2][MAX_CMDS];		/* [0] acquire, [1] release */
static int	ncmds[2];
static long errors,
			nils;

static void
die(const char *fmt, const char *arg)
{
	fprintf(stderr, "floor: ");
	fprintf(stderr, fmt, arg);
	fprintf(stderr, "\n");
	exit(1);
}

static int64_t
now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t) ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int64_t
wall_us(void)
{
	struct timeval tv;

	gettimeofday(&tv, NULL);
	return (int64_t) tv.tv_sec * 1000000 + tv.tv_usec;
}

static int
hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/*
 * One argument quoted as MONITOR quotes it (sdscatrepr): "..." with \\ \"
 * \n \r \t \a \b and \xHH.  Returns the position after it, NULL at the end
 * of the line.
 */
static char *
parse_arg(char *p, char **out, size_t *outlen)
{
	char	   *buf,
			   *o;

	while (*p == ' ')
		p++;
	if (*p == '\0' || *p == '\n')
		return NULL;
	if (*p != '"')
		die("bad command line near: %.40s", p);
	p++;
	buf = o = malloc(strlen(p) + 1);
	while (*p && *p != '"')
	{
		if (*p != '\\')
		{
			*o++ = *p++;
			continue;
		}
		p++;
		switch (*p)
		{
			case 'n': *o++ = '\n'; p++; break;
			case 'r': *o++ = '\r'; p++; break;
			case 't': *o++ = '\t'; p++; break;
			case 'a': *o++ = '\a'; p++; break;
			case 'b': *o++ = '\b'; p++; break;
			case 'x':
				if (hexval(p[1]) < 0 || hexval(p[2]) < 0)
					die("bad \\x escape near: %.40s", p);
				*o++ = (char) (hexval(p[1]) * 16 + hexval(p[2]));
				p += 3;
				break;
			case '\0':
				die("%s", "unterminated escape");
				break;
			default: *o++ = *p++; break;
		}
	}
	if (*p != '"')
		die("%s", "unterminated argument");
	*out = buf;
	*outlen = o - buf;
	return p + 1;
}

static void
read_cmds(const char *path, const char *proposal)
{
	FILE	   *f = fopen(path, "r");
	char	   *line = NULL;
	size_t		cap = 0;

	if (f == NULL)
		die("cannot open %s", path);
	while (getline(&line, &cap, f) > 0)
	{
		int			phase;
		char	   *p;
		Cmd		   *c;

		if (strncmp(line, "acquire ", 8) == 0)
			phase = 0, p = line + 8;
		else if (strncmp(line, "release ", 8) == 0)
			phase = 1, p = line + 8;
		else if (line[0] == '\n' || line[0] == '#')
			continue;
		else
			die("not an acquire or release line: %.40s", line);
		if (ncmds[phase] == MAX_CMDS)
			die("%s", "too many commands");
		c = &cmds[phase][ncmds[phase]++];
		while ((p = parse_arg(p, &c->argv[c->argc], &c->argvlen[c->argc])) != NULL)
		{
			c->proposal_at[c->argc] = proposal != NULL &&
				c->argvlen[c->argc] == strlen(proposal) &&
				memcmp(c->argv[c->argc], proposal, c->argvlen[c->argc]) == 0;
			if (++c->argc == MAX_ARGS)
				die("%s", "too many arguments");
		}
	}
	free(line);
	fclose(f);
	if (ncmds[0] == 0 || ncmds[1] == 0)
		die("%s: needs acquire and release commands", path);
}

static void
connect_nodes(const char *list)
{
	char	   *s = strdup(list),
			   *save = NULL,
			   *tok;

	for (tok = strtok_r(s, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
	{
		char	   *colon = strrchr(tok, ':');
		struct addrinfo hints = {0},
				   *ai;
		int			fd,
					one = 1;

		if (colon == NULL || nnodes == MAX_NODES)
			die("bad node list: %s", list);
		*colon = '\0';
		hints.ai_family = AF_UNSPEC;
		hints.ai_socktype = SOCK_STREAM;
		if (getaddrinfo(tok, colon + 1, &hints, &ai) != 0)
			die("cannot resolve %s", tok);
		fd = socket(ai->ai_family, SOCK_STREAM, 0);
		if (fd < 0 || connect(fd, ai->ai_addr, ai->ai_addrlen) != 0)
			die("cannot connect to %s", tok);
		freeaddrinfo(ai);
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
		nodes[nnodes].fd = fd;
		nodes[nnodes].reader = redisReaderCreate();
		nnodes++;
	}
	free(s);
	if (nnodes == 0)
		die("no nodes in %s", list);
}

/* RESP for one phase's commands, with the proposal filled in */
static size_t
format_phase(int phase, const char *proposal, char **buf, size_t *cap)
{
	size_t		len = 0;

	for (int i = 0; i < ncmds[phase]; i++)
	{
		Cmd		   *c = &cmds[phase][i];
		const char *argv[MAX_ARGS];
		size_t		argvlen[MAX_ARGS];
		char	   *out;
		int			n;

		for (int a = 0; a < c->argc; a++)
		{
			argv[a] = c->proposal_at[a] ? proposal : c->argv[a];
			argvlen[a] = c->proposal_at[a] ? strlen(proposal) : c->argvlen[a];
		}
		n = redisFormatCommandArgv(&out, c->argc, argv, argvlen);
		if (n < 0)
			die("%s", "cannot format a command");
		if (len + n > *cap)
		{
			*cap = (len + n) * 2;
			*buf = realloc(*buf, *cap);
		}
		memcpy(*buf + len, out, n);
		len += n;
		free(out);
	}
	return len;
}

static void
write_all(int fd, const char *buf, size_t len)
{
	while (len > 0)
	{
		ssize_t		n = write(fd, buf, len);

		if (n < 0 && (errno == EAGAIN || errno == EINTR))
		{
			struct pollfd pfd = {fd, POLLOUT, 0};

			poll(&pfd, 1, 1000);
			continue;
		}
		if (n <= 0)
			die("%s", "write to a node failed");
		buf += n;
		len -= n;
	}
}

/*
 * One round of a phase on every node: returns the time to the majority's
 * replies (ns), and the time to all of them in *all_ns.
 */
static int64_t
round_trip(int phase, const char *buf, size_t len, int64_t *all_ns)
{
	int			pending[MAX_NODES];
	int			done = 0,
				quorum = nnodes / 2 + 1;
	int64_t		t0,
				tq = 0;

	t0 = now_ns();
	for (int i = 0; i < nnodes; i++)
	{
		write_all(nodes[i].fd, buf, len);
		pending[i] = ncmds[phase];
	}
	while (done < nnodes)
	{
		struct pollfd pfd[MAX_NODES];
		int			map[MAX_NODES],
					np = 0;

		for (int i = 0; i < nnodes; i++)
			if (pending[i] > 0)
			{
				pfd[np].fd = nodes[i].fd;
				pfd[np].events = POLLIN;
				map[np++] = i;
			}
		if (poll(pfd, np, 10000) <= 0)
			die("%s", "no reply from a node within 10 s");
		for (int j = 0; j < np; j++)
		{
			int			i = map[j];
			char		rbuf[16384];
			ssize_t		n;
			void	   *reply;

			if (!(pfd[j].revents & (POLLIN | POLLERR | POLLHUP)))
				continue;
			n = read(nodes[i].fd, rbuf, sizeof(rbuf));
			if (n < 0 && (errno == EAGAIN || errno == EINTR))
				continue;
			if (n <= 0)
				die("%s", "a node closed the connection");
			redisReaderFeed(nodes[i].reader, rbuf, n);
			while (pending[i] > 0)
			{
				if (redisReaderGetReply(nodes[i].reader, &reply) != REDIS_OK)
					die("%s", "protocol error");
				if (reply == NULL)
					break;
				pending[i]--;
				if (((redisReply *) reply)->type == REDIS_REPLY_ERROR)
				{
					if (errors++ < 3)
						fprintf(stderr, "floor: error reply: %s\n", ((redisReply *) reply)->str);
				}
				else if (phase == 0 && pending[i] == 0 &&
						 ((redisReply *) reply)->type == REDIS_REPLY_NIL)
					nils++;
				freeReplyObject(reply);
				if (pending[i] == 0 && ++done == quorum)
					tq = now_ns();
			}
		}
	}
	*all_ns = now_ns() - t0;
	return tq - t0;
}

static int
cmp_double(const void *a, const void *b)
{
	double		x = *(const double *) a,
				y = *(const double *) b;

	return (x > y) - (x < y);
}

static void
print_pct(const char *name, double *v, int n)
{
	qsort(v, n, sizeof(double), cmp_double);
	for (int k = 0; k < 3; k++)
	{
		static const double p[] = {0.5, 0.9, 0.99};
		static const char *pn[] = {"p50", "p90", "p99"};
		int			i = (int) (n * p[k] + 0.999999) - 1;

		if (i < 0)
			i = 0;
		printf("%s_%s=%.1f\n", name, pn[k], v[i]);
	}
}

int
main(int argc, char **argv)
{
	int			rounds,
				warm;
	const char *proposal;
	char	   *bufs[2] = {NULL, NULL};
	size_t		caps[2] = {0, 0};
	double	   *acq,
			   *rel,
			   *cyc,
			   *acq_all,
			   *rel_all;
	int64_t		last = 0;
	char		prop[32];

	if (argc == 6 && strcmp(argv[1], "--arg") == 0)
	{
		int			phase = strcmp(argv[3], "release") == 0,
					idx = atoi(argv[4]),
					argno = atoi(argv[5]);

		read_cmds(argv[2], NULL);
		if (idx >= 0 && idx < ncmds[phase] && argno >= 0 && argno < cmds[phase][idx].argc)
		{
			fwrite(cmds[phase][idx].argv[argno], 1, cmds[phase][idx].argvlen[argno], stdout);
			return 0;
		}
		return 1;
	}
	if (argc != 5 && argc != 6)
	{
		fprintf(stderr, "usage: floor NODES CMDFILE ROUNDS WARM [PROPOSAL] | floor --arg CMDFILE PHASE INDEX ARGNO\n");
		return 2;
	}
	rounds = atoi(argv[3]);
	warm = atoi(argv[4]);
	proposal = argc == 6 ? argv[5] : NULL;
	if (rounds <= 0 || warm < 0)
		die("%s", "bad ROUNDS or WARM");
	read_cmds(argv[2], proposal);
	connect_nodes(argv[1]);
	acq = calloc(rounds, sizeof(double));
	rel = calloc(rounds, sizeof(double));
	cyc = calloc(rounds, sizeof(double));
	acq_all = calloc(rounds, sizeof(double));
	rel_all = calloc(rounds, sizeof(double));

	for (int r = -warm; r < rounds; r++)
	{
		int64_t		a,
					b,
					a_all,
					b_all,
					w = wall_us();
		size_t		len0,
					len1;

		/* rl_propose_token(): above the last, and at least the wall clock */
		last = (last + 1 > w) ? last + 1 : w;
		snprintf(prop, sizeof(prop), "%lld", (long long) last);
		len0 = format_phase(0, prop, &bufs[0], &caps[0]);
		len1 = format_phase(1, prop, &bufs[1], &caps[1]);
		a = round_trip(0, bufs[0], len0, &a_all);
		b = round_trip(1, bufs[1], len1, &b_all);
		if (r >= 0)
		{
			acq[r] = a / 1000.0;
			rel[r] = b / 1000.0;
			cyc[r] = (a + b) / 1000.0;
			acq_all[r] = a_all / 1000.0;
			rel_all[r] = b_all / 1000.0;
		}
	}
	if (getenv("FLOOR_SAMPLES") != NULL && getenv("FLOOR_SAMPLES")[0] != '\0')
	{
		FILE	   *f = fopen(getenv("FLOOR_SAMPLES"), "w");

		if (f == NULL)
			die("cannot write %s", getenv("FLOOR_SAMPLES"));
		for (int r = 0; r < rounds; r++)
			fprintf(f, "%.1f %.1f\n", acq[r], rel[r]);
		fclose(f);
	}
	print_pct("acquire", acq, rounds);
	print_pct("release", rel, rounds);
	print_pct("cycle", cyc, rounds);
	print_pct("acquire_all", acq_all, rounds);
	print_pct("release_all", rel_all, rounds);
	printf("rounds=%d\nnodes=%d\nerrors=%ld\nnils=%ld\n", rounds, nnodes, errors, nils);
	return (errors > 0 || nils > 0) ? 1 : 0;
}
