-- Leaky bucket. The level (events in the bucket) drains continuously at
-- rate per period; an event that would overflow burst is rejected.
-- leaky_bucket polices: an admitted event passes at once. leaky_bucket_shape
-- queues it: it waits `delay`, until the events ahead have drained, so they
-- leave period/rate apart; a max_delay above 0 rejects longer waits.
--
-- KEYS    hash {l = level, t = µs of the last update, u = unit, d = drip,
--         k = burst, h, e, a, p}: units as the token bucket's; h the clock
--         of the last write; e, a, p: see meter.lua. No key: empty. A
--         level above the burst is a debt (settle).
-- ARGV    unit, drip: as the token bucket's; burst; shape only: max_delay
--         in microseconds, 0 for none
-- Reply   allowed, remaining, retry_after, reset_after, delay, next, mark, epoch
-- level_of returns the level of key at now, drained, its last update, e,
-- a and p: the epoch afresh when the limit changed or the clock went back.
local function level_of(key, unit, drip, burst)
  local s = redis.call('HMGET', key, 'l', 't', 'u', 'd', 'k', 'h', 'e', 'a', 'p')
  local level, last = tonumber(s[1]), tonumber(s[2])
  if not level then return 0, now, 0, 0, '' end
  local stored, e, a, p = tonumber(s[3]) or unit, tonumber(s[7]) or 0, tonumber(s[8]) or 0, s[9] or ''
  if stored ~= unit then -- the limit changed: keep whole events
    local events = math.floor(level / stored)
    level = events * unit + math.ceil((level - events * stored) * unit / stored)
  end
  if stored ~= unit or tonumber(s[4]) ~= drip or tonumber(s[5]) ~= burst or now < (tonumber(s[6]) or now) then
    e, a, p = 0, 0, ''
  end
  if now > last then level, last = math.max(0, level - (now - last) * drip), now end
  return level, last, e, a, p
end

local function leak_store(key, level, last, unit, drip, burst, e, a, p)
  redis.call('HSET', key, 'l', level, 't', last, 'u', unit, 'd', drip, 'k', burst, 'h', now, 'e', e, 'a', a, 'p', p)
  expire(key, math.ceil(level / drip))
end

local function leak(key, cost, commit, unit, drip, burst, max_delay)
  local full = burst * unit
  local level, last, e, a, p = level_of(key, unit, drip, burst)

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
  local delay = max_delay and math.ceil(level / drip) or 0 -- the queue ahead drains first
  if cap and cost > 0 then wait = math.max(wait, delay - max_delay) end

  if wait > 0 or cost == 0 then
    local r = room(level)
    return wait > 0 and 0 or 1, r, wait, math.ceil(level / drip), 0, next(level, math.max(0, r)), 0, 0
  end
  e, a, p = restart(level, e, a, p)
  level = level + cost * unit
  if e ~= 0 then a = a + cost * unit end
  local reset = math.ceil(level / drip)
  if commit then leak_store(key, level, last, unit, drip, burst, e, a, p) end
  local r = room(level)
  return 1, r, 0, reset, delay, next(level, math.max(0, r)), a, e
end

algorithms.leaky_bucket = {args = 3, kind = 'hash', decide = function(key, cost, at, commit)
  return leak(key, cost, commit, tonumber(ARGV[at]), tonumber(ARGV[at + 1]), tonumber(ARGV[at + 2]))
end}
algorithms.leaky_bucket_shape = {args = 4, kind = 'hash', decide = function(key, cost, at, commit)
  return leak(key, cost, commit, tonumber(ARGV[at]), tonumber(ARGV[at + 1]), tonumber(ARGV[at + 2]),
    tonumber(ARGV[at + 3]))
end}
--- settle ---
-- settle puts charged events in, at most debt µs above the burst, and
-- takes refunded ones out as far as they are still in (settle_meter, as
-- gcra.lua's settle counts them). A shaping bucket's queue behind the refunded events moves
-- up; the Delay already given is not changed.
local function leak_settle(key, delta, at, reset, mark, epoch, debt)
  local unit, drip, burst = in_force(key, {'u', 'd', 'k'}, tonumber(ARGV[at]), tonumber(ARGV[at + 1]),
    tonumber(ARGV[at + 2]))
  local level, last, e, a, p = level_of(key, unit, drip, burst)
  local f -- a leaky bucket has no floor
  level, f, e, a, p = settle_meter(delta, unit, drip, math.min(max_units, burst * unit + debt * drip),
    level, 0, e, a, p, reset, mark, epoch)
  leak_store(key, level, last, unit, drip, burst, e, a, p)
end
algorithms.leaky_bucket.settle = leak_settle
algorithms.leaky_bucket_shape.settle = leak_settle
