-- Leaky bucket. The level (events in the bucket) drains continuously at
-- rate per period; an event that would overflow burst is rejected.
-- Policing (no ARGV[6]) lets an admitted event through at once. Shaping
-- (ARGV[6] given) queues it: it must wait `delay` until the events ahead of
-- it have drained, so admitted events leave period/rate apart. ARGV[6] > 0
-- caps that delay: an event that would wait longer is rejected.
--
-- KEYS[1] hash {l = level, t = µs of the last update, u = unit}, counted
--         in exact units as the token bucket's credit. No key: empty.
-- ARGV[3] unit, ARGV[4] drip: as the token bucket's
-- ARGV[5] burst
-- ARGV[6] shaping only: the longest delay in microseconds, 0 for none
-- Reply   {allowed, remaining, retry_after_us, reset_after_us, delay_us}
local unit, drip, burst = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local max_delay = tonumber(ARGV[6])
local full = burst * unit

local state = redis.call('HMGET', KEYS[1], 'l', 't', 'u')
local level, last = tonumber(state[1]), tonumber(state[2])
if not level then
  level, last = 0, now
else
  local stored = tonumber(state[3])
  if stored and stored ~= unit then -- the limit changed: keep whole events
    local events = math.floor(level / stored)
    level = events * unit + math.ceil((level - events * stored) * unit / stored)
  end
  if now > last then
    level = math.max(0, level - (now - last) * drip)
    last = now
  end
end

-- room: how many events fit now, and after how long `cost` would fit.
local room = math.floor((full - level) / unit)
local wait = math.ceil(math.max(0, level + cost * unit - full) / drip)
local delay = 0
if max_delay then
  delay = math.ceil(level / drip) -- the queue ahead drains first
  if max_delay > 0 then
    local cap = max_delay * drip -- the deepest level a new event may join
    room = math.min(room, level <= cap and math.floor((cap - level) / unit) + 1 or 0)
    if cost > 0 then wait = math.max(wait, delay - max_delay) end
  end
end

if wait > 0 then
  return {0, room, wait, math.ceil(level / drip), 0}
end
level = level + cost * unit
local reset = math.ceil(level / drip)
if cost > 0 then
  redis.call('HSET', KEYS[1], 'l', level, 't', last, 'u', unit)
  redis.call('PEXPIRE', KEYS[1], math.max(1, math.ceil(reset / 1000)))
  room = math.max(0, room - cost)
else
  delay = 0
end
return {1, room, 0, reset, delay}
