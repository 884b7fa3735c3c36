-- prelude: prepended by lua.go to every decision script.
--
-- ARGV[1] now in microseconds, or "" to read the Redis clock (TIME), so one
--         key always sees one clock.
-- ARGV[2] rate:   events per period, > 0
-- ARGV[3] period: microseconds, > 0
-- ARGV[4] burst:  capacity (the allowance of window algorithms), > 0
-- ARGV[5] cost:   events this call asks for, 0 <= cost <= burst; 0 only
--         reports the state and writes nothing.
-- ARGV[6] sub-buckets per period (sliding_window; else 0)
-- ARGV[7] 1 to shape, 0 to police (leaky_bucket; else 0)
-- ARGV[8] the longest delay shaping may impose in microseconds, 0 for none
--
-- Every script replies {allowed (0|1), remaining, retry_after, reset_after,
-- delay}, durations in microseconds, all integers. Numbers are kept
-- integral (floor or ceil after every division) so that state stored in
-- Redis stays exact. Denials and reports (cost 0) write nothing.
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

-- int formats an integer exactly. Redis's tostring and `..` use %.14g,
-- which rounds a microsecond timestamp (16 digits).
local function int(x)
  return string.format('%d', x)
end

-- units returns the exact integer scale of the bucket algorithms: one event
-- is `unit` and one microsecond refills or drains `drip`, both period and
-- rate divided by their greatest common divisor.
local function units()
  local a, b = period, rate
  while b > 0 do a, b = b, a % b end
  return period / a, rate / a
end

-- rescale converts an amount kept under an older unit (the limit changed
-- since it was stored) to the current one; round is math.floor or
-- math.ceil, whichever errs on the side of fewer events.
local function rescale(amount, stored_unit, unit, round)
  if not stored_unit or stored_unit == unit then return amount end
  local events = math.floor(amount / stored_unit) -- whole events stay exact
  return events * unit + round((amount - events * stored_unit) * unit / stored_unit)
end
