-- generation: the marker by which a Limiter notices that a Redis server
-- lost the state its limits keep (a restart without persistence, FLUSHALL,
-- a failover to an empty replica, a restore from an older snapshot). It
-- has no TTL: an expiring marker would look like a loss.
-- KEYS    [1] a hash: gen, the generation of the server's data (a random
--         number, set by the first Limiter that finds none); seq, how many
--         times Limiters have checked it.
-- ARGV    [1] the generation to set if there is none (a decimal below 2^52).
-- Reply   {1 if it was set now (there was none), else 0; the generation;
--         seq after this check}.
local made = redis.call('HSETNX', KEYS[1], 'gen', ARGV[1])
local seq = redis.call('HINCRBY', KEYS[1], 'seq', 1)
return {made, tonumber(redis.call('HGET', KEYS[1], 'gen')), seq}
