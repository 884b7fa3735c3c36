-- prelude: prepended by lua.go to every decision script.
--
-- ARGV[1] now in microseconds, or "" to read the Redis clock (TIME), so one
--         key always sees one clock.
-- ARGV[2] cost: events this call asks for, 0 <= cost <= burst; 0 only
--         reports the state and writes nothing.
-- ARGV[3...] the algorithm's own, listed at the top of its body.
--
-- Every script replies {allowed (0|1), remaining, retry_after, reset_after,
-- delay}, durations in microseconds, all integers. Numbers are kept
-- integral (floor or ceil after every division) so that state stored in
-- Redis stays exact. Denials and reports (cost 0) write nothing. Helpers are
-- defined by the bodies that use them: each local function costs the server
-- time on every call.
local now = tonumber(ARGV[1])
if not now then
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
end
local cost = tonumber(ARGV[2])
