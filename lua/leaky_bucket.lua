-- Leaky bucket. The level (events in the bucket) drains continuously at
-- rate per period; an event that would overflow burst is rejected.
-- leaky_bucket polices: an admitted event passes at once.
-- leaky_bucket_shape queues it: it must wait `delay` until the events ahead
-- of it have drained, so admitted events leave period/rate apart; a
-- max_delay above 0 rejects an event that would wait longer.
--
-- KEYS    hash {l = level, t = µs of the last update, u = unit}, counted
--         in exact units as the token bucket's credit. No key: empty. A
--         level above the burst is a debt (settle).
-- ARGV    unit, drip: as the token bucket's; burst; shape only: max_delay
--         in microseconds, 0 for none
-- Reply   allowed, remaining, retry_after, reset_after, delay, next
-- level_of returns the level of key at now, drained, and the µs it was
-- last updated.
local function level_of(key, unit, drip)
  local state = redis.call('HMGET', key, 'l', 't', 'u')
  local level, last = tonumber(state[1]), tonumber(state[2])
  if not level then return 0, now end
  local stored = tonumber(state[3])
  if stored and stored ~= unit then -- the limit changed: keep whole events
    local events = math.floor(level / stored)
    level = events * unit + math.ceil((level - events * stored) * unit / stored)
  end
  if now > last then
    level = math.max(0, level - (now - last) * drip)
    last = now
  end
  return level, last
end

local function leak(key, cost, commit, unit, drip, burst, max_delay)
  local full = burst * unit
  local level, last = level_of(key, unit, drip)

  -- room: how many events fit at `l`; below: µs until the level is at
  -- most `to`.
  local cap = max_delay and max_delay > 0 and max_delay * drip -- the deepest level a new event may join
  local function room(l)
    local r = math.floor((full - l) / unit)
    if cap then r = math.min(r, l <= cap and math.floor((cap - l) / unit) + 1 or 0) end
    return r
  end
  local function below(l, to) return math.max(0, math.ceil((l - to) / drip)) end
  -- next: µs until one more event fits at level l, which fits r
  local function next(l, r)
    if r >= burst then return 0 end
    local t = below(l, full - (r + 1) * unit)
    if cap then t = math.max(t, below(l, cap - r * unit)) end
    return t
  end

  -- after how long `cost` would fit
  local wait = below(level + cost * unit, full)
  local delay = 0
  if max_delay then
    delay = math.ceil(level / drip) -- the queue ahead drains first
    if cap and cost > 0 then wait = math.max(wait, delay - max_delay) end
  end

  if wait > 0 or cost == 0 then
    local r = room(level)
    return wait > 0 and 0 or 1, r, wait, math.ceil(level / drip), 0, next(level, math.max(0, r))
  end
  level = level + cost * unit
  local reset = math.ceil(level / drip)
  if commit then
    redis.call('HSET', key, 'l', level, 't', last, 'u', unit)
    redis.call('PEXPIRE', key, math.max(1, math.ceil(reset / 1000)))
  end
  local r = room(level)
  return 1, r, 0, reset, delay, next(level, math.max(0, r))
end

-- settle puts charged events in, above the burst if need be, and takes
-- refunded ones out as far as they have not drained: the reservation left
-- the bucket empty at reserved + reset (less one µs of rounding). A
-- shaping bucket's queue behind the refunded events moves up; the Delay
-- already given is not changed.
local function leak_settle(key, delta, at, remaining, reset)
  local unit, drip, burst = tonumber(ARGV[at]), tonumber(ARGV[at + 1]), tonumber(ARGV[at + 2])
  local level, last = level_of(key, unit, drip)
  local put = delta * unit
  if delta < 0 then put = -math.min(-put, math.max(0, reserved + reset - 1 - now) * drip) end
  level = math.min(burst * unit + max_debt * drip, math.max(0, level + put))
  redis.call('HSET', key, 'l', level, 't', last, 'u', unit)
  expire(key, math.ceil(level / drip))
end

algorithms.leaky_bucket = {args = 3, decide = function(key, cost, at, commit)
  return leak(key, cost, commit, tonumber(ARGV[at]), tonumber(ARGV[at + 1]), tonumber(ARGV[at + 2]))
end, settle = leak_settle}
algorithms.leaky_bucket_shape = {args = 4, decide = function(key, cost, at, commit)
  return leak(key, cost, commit, tonumber(ARGV[at]), tonumber(ARGV[at + 1]), tonumber(ARGV[at + 2]),
    tonumber(ARGV[at + 3]))
end, settle = leak_settle}
