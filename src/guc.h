/*-------------------------------------------------------------------------
 *
 * guc.h
 *	  The redlock.* settings (src/guc.c), as read by the rest of the
 *	  extension.  Settings are the bottom layer: they include nothing of
 *	  ours but redlock.h.
 *
 *-------------------------------------------------------------------------
 */
#ifndef REDLOCK_GUC_H
#define REDLOCK_GUC_H

#include "redlock.h"

extern const RlNodeList *rl_node_list;	/* NULL or count 0 when unset */
extern uint64_t rl_node_list_generation;	/* bumped when nodes/auth change */
extern int	rl_connect_timeout_ms;
extern int	rl_node_timeout_ms;
extern double rl_drift_factor;
extern int	rl_retry_delay_ms;
extern int	rl_retry_jitter_ms;
extern char *rl_key_prefix;
extern char *rl_username;
extern char *rl_password;
extern char *rl_fence_token_setting;
extern char *rl_dns_servers;

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

extern void rl_define_gucs(void);
extern bool rl_parse_node_list(const char *value, RlNodeList *out,
							   char *errbuf, size_t errlen);

#endif							/* REDLOCK_GUC_H */
