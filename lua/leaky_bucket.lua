-- Leaky bucket. The level (events in the bucket) drains continuously at
-- rate per period; an event that would overflow burst is rejected.
-- Policing (ARGV[7] = 0) lets an admitted event through at once. Shaping
-- (ARGV[7] = 1) queues it: it must wait `delay` until the events ahead of
-- it have drained, so admitted events leave period/rate apart. ARGV[8] > 0
-- caps that delay: an event that would wait longer is rejected.
--
-- KEYS[1] hash {l = level, t = µs of the last update, u = unit}, counted
--         in exact units as the token bucket's credit. No key: empty.
-- Reply   {allowed, remaining, retry_after_us, reset_after_us, delay_us}
local unit, drip = units()
local full = burst * unit
local shape, max_delay = ARGV[7] == '1', tonumber(ARGV[8])

local state = redis.call('HMGET', KEYS[1], 'l', 't', 'u')
local level, last = tonumber(state[1]), tonumber(state[2])
if not level then
  level, last = 0, now
else
  level = rescale(level, tonumber(state[3]), unit, math.ceil)
  if now > last then
    level = math.max(0, level - (now - last) * drip)
    last = now
  end
end

-- room: how many events fit now, and after how long `cost` would fit.
local room = math.floor((full - level) / unit)
local wait = ceil_div(math.max(0, level + cost * unit - full), drip)
local delay = 0
if shape then
  delay = ceil_div(level, drip) -- the queue ahead drains first
  if max_delay > 0 then
    local cap = max_delay * drip -- the deepest level a new event may join
    room = math.min(room, level <= cap and math.floor((cap - level) / unit) + 1 or 0)
    if cost > 0 then wait = math.max(wait, delay - max_delay) end
  end
end

if wait > 0 then
  return {0, room, wait, ceil_div(level, drip), 0}
end
level = level + cost * unit
local reset = ceil_div(level, drip)
if cost > 0 then
  redis.call('HSET', KEYS[1], 'l', level, 't', last, 'u', unit)
  redis.call('PEXPIRE', KEYS[1], ms(reset))
  room = math.max(0, room - cost)
else
  delay = 0
end
return {1, room, 0, reset, delay}
