/*-------------------------------------------------------------------------
 *
 * node_table.c
 *	  The node table: one entry per Redis node of the list in force, the
 *	  flags the node layer's files share, and what the rest of redlock may
 *	  read of an entry.
 *
 * The lowest file of the node layer: it uses nothing of the others.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "net/node_internal.h"

RlNode		rl_nodes[RL_MAX_NODES];
int			rl_nnodes = 0;
uint64_t	rl_round_id = 0;	/* tag of the round being waited for */
bool		rl_wes_stale = true;	/* sockets changed: rebuild the wait set */
bool		rl_latch_fired = false; /* the latch was set during a round */

int
rl_nodes_count(void)
{
	return rl_nnodes;
}

const char *
rl_node_name(int i)
{
	return rl_nodes[i].name;
}

/* Changes whenever node i gets a new connection (pub/sub: subscribe again). */
uint64_t
rl_node_connection_serial(int i)
{
	return rl_nodes[i].serial;
}

bool
rl_node_connected(int i)
{
	return rl_nodes[i].state != RL_CONN_NONE;
}

int
rl_nodes_open_connections(void)
{
	int			n = 0;

	for (int i = 0; i < rl_nnodes; i++)
		if (rl_nodes[i].state != RL_CONN_NONE)
			n++;
	return n;
}
