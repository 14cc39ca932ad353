/*-------------------------------------------------------------------------
 *
 * session_nodes.h
 *	  The node list a session's calls run against (session_nodes.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef REDLOCK_SESSION_NODES_H
#define REDLOCK_SESSION_NODES_H

extern void rl_session_nodes_ready(void);

#endif							/* REDLOCK_SESSION_NODES_H */
