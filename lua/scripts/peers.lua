-- peers: the heartbeat of the Limiters that share FailLocal's limits, so
-- that each knows how many instances would share them while Redis is down.
-- KEYS    [1] a sorted set: instance id -> its last heartbeat, ms of the
--         Redis clock.
-- ARGV    [1] this instance's id; [2] how long a heartbeat counts, ms.
-- Reply   {the instances whose heartbeat counts, this one among them}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local span = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - span)
redis.call('PEXPIRE', KEYS[1], span)
return {redis.call('ZCARD', KEYS[1])}
