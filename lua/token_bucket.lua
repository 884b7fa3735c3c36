-- Token bucket: capacity burst, refilled continuously at rate per period.
--
-- KEYS[1] hash {c = credit, t = microseconds of the last update}.
--         No key means a full bucket.
-- ARGV    as in the prelude; no knobs yet.
-- Reply   {allowed, remaining, retry_after_us, reset_after_us}
--
-- Credit is kept in exact integers: with g = gcd(period, rate), one token is
-- `unit` = period/g credit and each microsecond adds `drip` = rate/g.
local function gcd(a, b)
  while b > 0 do a, b = b, a % b end
  return a
end
local g = gcd(period, rate)
local unit, drip = period / g, rate / g
local full = burst * unit

local state = redis.call('HMGET', KEYS[1], 'c', 't')
local credit, last = tonumber(state[1]), tonumber(state[2])
if not credit then
  credit, last = full, now
elseif now > last then
  credit = math.min(full, credit + (now - last) * drip)
  last = now
end
-- a clock that went backwards refills nothing and keeps `last`

local need = cost * unit
if credit < need then
  return {0, math.floor(credit / unit), ceil_div(need - credit, drip), ceil_div(full - credit, drip)}
end
credit = credit - need
local reset = ceil_div(full - credit, drip)
if cost > 0 then
  redis.call('HSET', KEYS[1], 'c', credit, 't', last)
  redis.call('PEXPIRE', KEYS[1], ms(reset))
end
return {1, math.floor(credit / unit), 0, reset}
