\echo Use "CREATE EXTENSION shared_floor" to load this file. \quit

CREATE FUNCTION shared_floor_cycle(lock_key text, counter_key text, owner text,
								   ttl_ms int, prefix text, epoch_key text,
								   quarantine_ms int)
RETURNS bool STRICT
AS 'MODULE_PATHNAME' LANGUAGE C;
