/*-------------------------------------------------------------------------
 *
 * wait_events.h
 *	  The wait events redlock reports in pg_stat_activity.
 *
 *-------------------------------------------------------------------------
 */
#ifndef REDLOCK_WAIT_EVENTS_H
#define REDLOCK_WAIT_EVENTS_H

extern uint32 rl_wait_event_lease(void);
extern uint32 rl_wait_event_nodes(void);
extern uint32 rl_wait_event_shared(void);

#endif							/* REDLOCK_WAIT_EVENTS_H */
