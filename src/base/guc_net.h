/*-------------------------------------------------------------------------
 *
 * guc_net.h
 *	  The settings of how the nodes are reached (guc_net.c): TLS, the DNS
 *	  servers, and the generation that tells the node layer to renew its
 *	  connections.  Included by guc.h; includes nothing of ours but
 *	  redlock.h.
 *
 *-------------------------------------------------------------------------
 */
#ifndef REDLOCK_GUC_NET_H
#define REDLOCK_GUC_NET_H

#include "base/redlock.h"

extern uint64_t rl_node_list_generation;	/* bumped when nodes/auth change */
extern uint64_t rl_tls_files_serial;	/* bumped when a TLS setting is
										 * assigned, changed or not */

extern char *rl_dns_servers;

/*
 * The connections of one server to each node: the workers' (one each:
 * dispatcher, wake-up, keep-alive) and the backends' own
 * (shared/shared_rounds_permits.c).
 */
#define RL_WORKER_CONNECTIONS	3
extern int	rl_max_connections_per_node;
extern int	rl_idle_connection_timeout_ms;
extern int	rl_debug_owed_limit;	/* tests only (net/node_internal.h) */
extern int	rl_debug_dispatch_delay_ms; /* tests only (net/node_batch.c) */

/* redlock.tls_mode: libpq's sslmode words */
typedef enum RlTlsMode
{
	RL_TLS_DISABLE,
	RL_TLS_REQUIRE,				/* encrypt, do not check the certificate */
	RL_TLS_VERIFY_CA,			/* the certificate is signed by a trusted CA */
	RL_TLS_VERIFY_FULL			/* ... and names the node's host or IP */
} RlTlsMode;

extern int	rl_tls_mode;
extern char *rl_tls_ca_file;
extern char *rl_tls_cert_file;
extern char *rl_tls_key_file;

extern void rl_connection_setting_assigned(const char *oldval,
										   const char *newval);
extern void rl_define_net_gucs(void);

#endif							/* REDLOCK_GUC_NET_H */
