-- Token bucket: capacity burst, refilled continuously at rate per period.
--
-- KEYS[1] hash {c = credit, t = µs of the last update, u = unit}. No key
--         means a full bucket. One token is `unit` credit and each µs adds
--         `drip` (see units in the prelude), so refill is exact.
-- ARGV    as in the prelude; no knobs.
-- Reply   {allowed, remaining, retry_after_us, reset_after_us, 0}
local unit, drip = units()
local full = burst * unit

local state = redis.call('HMGET', KEYS[1], 'c', 't', 'u')
local credit, last = tonumber(state[1]), tonumber(state[2])
if not credit then
  credit, last = full, now
else
  credit = rescale(credit, tonumber(state[3]), unit, math.floor)
  if now > last then
    credit = credit + (now - last) * drip
    last = now
  end
  credit = math.min(full, credit)
end
-- a clock that went backwards refills nothing and keeps `last`

local need = cost * unit
if credit < need then
  return {0, math.floor(credit / unit), ceil_div(need - credit, drip), ceil_div(full - credit, drip), 0}
end
credit = credit - need
local reset = ceil_div(full - credit, drip)
if cost > 0 then
  redis.call('HSET', KEYS[1], 'c', credit, 't', last, 'u', unit)
  redis.call('PEXPIRE', KEYS[1], ms(reset))
end
return {1, math.floor(credit / unit), 0, reset, 0}
