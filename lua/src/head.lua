-- head: the first lines of every script that decides or settles limits.
-- The scripts are put together by lua/gen (scripts/<name>.lua): this
-- file, then the fast paths of the script's algorithms
-- (<algorithm>_fast.lua), then general, a function that defines the rest
-- (body.lua, meter.lua, the algorithms, decide.lua, settle.lua), then
-- main.lua. A decision of one limit that its algorithm's fast path
-- answers (the common case: no reservation, no prefetch) returns before
-- general runs, so that Redis does not define, on that call, the
-- functions only the general path needs; and a decision defines nothing
-- only settlements need (general's settlement does). Every function and
-- table a call makes costs Redis time (docs/performance.md).
--
-- KEYS    see main.lua.
-- ARGV    see main.lua.
-- Reply   see main.lua.
local now -- the call's clock in µs: decide and settle set it (a fast path takes it as an argument)
local redis_now -- the Redis clock, read at most once per script

-- clock returns the time an ARGV value gives, or the Redis clock for "".
local function clock(arg)
  if arg ~= '' then return arg + 0 end
  if not redis_now then
    local time = redis.call('TIME')
    redis_now = time[1] * 1000000 + time[2]
  end
  return redis_now
end
