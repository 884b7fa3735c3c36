-- prelude: starts every decision script; the algorithms' files follow it,
-- then decide.lua, then one.lua (one decision) or batch.lua (several).
--
-- A decision is one or more limits, decided all or nothing; their keys
-- share one hash tag (one slot).
-- KEYS    the state of each limit of the decision, in order.
-- ARGV    now in microseconds, or "" to read the Redis clock (TIME), so
--         one key always sees one clock; then per limit, in the order of
--         its keys: its cost (events asked for, 0 <= cost <= burst; 0 only
--         reports the state), the name of its algorithm, then that
--         algorithm's own arguments.
-- Reply   see decide.lua.
--
-- Each algorithm file adds algorithms.<name> = {args = N, decide = f}.
-- f(key, cost, at, commit) reads its N arguments from ARGV[at] on and
-- returns allowed (0|1), remaining, retry_after, reset_after, delay, next:
-- next is the time until one more event fits (0 when remaining is the
-- burst); durations in microseconds, all integers (floor or ceil after every
-- division, so that state stored in Redis stays exact). It reads the time
-- from `now`. It stores the new state only if it allows and commit is
-- true, which the caller passes only for a cost above 0.
local now -- the decision's clock in microseconds: decide sets it
local redis_now -- the Redis clock, read at most once per script

-- clock returns the time an ARGV value gives, or the Redis clock for "".
local function clock(arg)
  local t = tonumber(arg)
  if t then return t end
  if not redis_now then
    local time = redis.call('TIME')
    redis_now = time[1] * 1000000 + time[2]
  end
  return redis_now
end

local algorithms = {}
