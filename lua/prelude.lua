-- prelude: starts every decision script; the algorithms' files follow it
-- and decide.lua ends it.
--
-- KEYS[i]   the state of limit i. One script decides one or more limits,
--           all or nothing; their keys share one hash tag (one slot).
-- ARGV[1]   now in microseconds, or "" to read the Redis clock (TIME), so
--           one key always sees one clock.
-- ARGV[2..] per limit, in the order of KEYS: its cost (events asked for,
--           0 <= cost <= burst; 0 only reports the state), the name of its
--           algorithm, then that algorithm's own arguments.
-- Reply     see decide.lua.
--
-- Each algorithm file adds algorithms.<name> = {args = N, decide = f}.
-- f(key, cost, at, commit) reads its N arguments from ARGV[at] on and
-- returns allowed (0|1), remaining, retry_after, reset_after, delay, next:
-- next is the time until one more event fits (0 when remaining is the
-- burst); durations in microseconds, all integers (floor or ceil after every
-- division, so that state stored in Redis stays exact). It stores the new
-- state only if it allows and commit is true, which the caller passes only
-- for a cost above 0.
local now = tonumber(ARGV[1])
if not now then
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
end
local algorithms = {}
