\echo Use "CREATE EXTENSION shared_floor" to load this file. \quit

CREATE FUNCTION shared_floor_cycle(lock_key text, counter_key text, owner text,
								   ttl_ms int, prefix text, epoch_key text,
								   quarantine_ms int)
RETURNS bool STRICT
AS 'MODULE_PATHNAME' LANGUAGE C;

CREATE FUNCTION shared_floor_acquire(lock_key text, counter_key text, owner text,
									 ttl_ms int, epoch_key text, quarantine_ms int)
RETURNS bool STRICT
AS 'MODULE_PATHNAME' LANGUAGE C;

CREATE FUNCTION shared_floor_release(lock_key text, owner text, prefix text,
									 epoch_key text, quarantine_ms int)
RETURNS bool STRICT
AS 'MODULE_PATHNAME' LANGUAGE C;
