-- prelude: prepended by lua.go to every decision script.
--
-- ARGV[1] now in microseconds, or "" to read the Redis clock (TIME), so one
--         key always sees one clock.
-- ARGV[2] rate:   events per period, > 0
-- ARGV[3] period: microseconds, > 0
-- ARGV[4] burst:  capacity (the allowance of window algorithms), > 0
-- ARGV[5] cost:   events this call asks for, 0 <= cost <= burst; 0 only
--         reports the state and writes nothing.
-- ARGV[6...] algorithm knobs, documented in each script.
--
-- Every script replies {allowed (0|1), remaining, retry_after, reset_after},
-- durations in microseconds, all integers. Numbers are kept integral (floor
-- or ceil after every division) so state stored as strings stays exact.
local now = tonumber(ARGV[1])
if not now then
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
end
local rate, period = tonumber(ARGV[2]), tonumber(ARGV[3])
local burst, cost = tonumber(ARGV[4]), tonumber(ARGV[5])

-- ceil_div divides two non-negative integers, rounding up.
local function ceil_div(a, b)
  return math.ceil(a / b)
end

-- ms turns a span of microseconds into a TTL for PX/PEXPIRE: whole
-- milliseconds, rounded up, at least 1.
local function ms(us)
  return math.max(1, ceil_div(us, 1000))
end
