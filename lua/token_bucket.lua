-- Token bucket: capacity burst, refilled continuously at rate per period.
--
-- KEYS    hash {c = credit, t = µs of the last update, u = unit}. No key
--         means a full bucket. One token is `unit` credit and each µs adds
--         `drip`, so refill is exact. Credit below 0 is a debt (settle).
--         After a prefetch, also f: when the prefetch left the bucket full
--         again; until then no refund fills it further than it would be
--         then, so that the tokens a Limiter holds stay taken while it may
--         admit them (gcra.lua's floor). A prefetch leaves the bucket at
--         least prefetch_lease's refill plus its held tokens below full.
-- ARGV    unit: period / gcd(period, rate); drip: rate / gcd(period, rate);
--         burst
-- Reply   allowed, remaining, retry_after, reset_after, 0, next

-- credit returns the credit of key at now, refilled, the µs it was last
-- updated, and its floor (0 for none); a clock that went backwards refills
-- nothing.
local function credit_of(key, unit, drip, full)
  local state = redis.call('HMGET', key, 'c', 't', 'u', 'f')
  local credit, last = tonumber(state[1]), tonumber(state[2])
  if not credit then return full, now, 0 end
  local stored = tonumber(state[3])
  if stored and stored ~= unit then -- the limit changed: keep whole tokens
    local tokens = math.floor(credit / stored)
    credit = tokens * unit + math.floor((credit - tokens * stored) * unit / stored)
  end
  if now > last then
    credit = credit + (now - last) * drip
    last = now
  end
  return math.min(full, credit), last, tonumber(state[4]) or 0
end

algorithms.token_bucket = {args = 3, decide = function(key, cost, at, commit)
  local unit, drip, burst = tonumber(ARGV[at]), tonumber(ARGV[at + 1]), tonumber(ARGV[at + 2])
  local full = burst * unit
  local credit, last = credit_of(key, unit, drip, full)

  -- next: µs until one more whole token is in the bucket
  local function next(tokens)
    if tokens >= burst then return 0 end
    return math.ceil(((math.max(0, tokens) + 1) * unit - credit) / drip)
  end

  local need = cost * unit
  if credit < need then
    local tokens = math.floor(credit / unit)
    return 0, tokens, math.ceil((need - credit) / drip), math.ceil((full - credit) / drip), 0, next(tokens)
  end
  credit = credit - need
  if commit and fetching > 0 then -- keep what is held taken, for the lease at least
    credit = math.min(credit, math.max(0, full - prefetch_lease * drip - fetching * unit))
  end
  local reset = math.ceil((full - credit) / drip)
  if commit then
    if fetching > 0 then
      redis.call('HSET', key, 'c', credit, 't', last, 'u', unit, 'f', now + reset)
    else
      redis.call('HSET', key, 'c', credit, 't', last, 'u', unit)
    end
    redis.call('PEXPIRE', key, math.max(1, math.ceil(reset / 1000)))
  end
  local tokens = math.floor(credit / unit)
  return 1, tokens, 0, reset, 0, next(tokens)
end,
-- settle takes charged tokens out, into a debt if need be, and puts
-- refunded ones back as far as refill has not (the reservation left the
-- bucket full again at reserved + reset, less one µs of rounding) and not
-- above what the floor allows. A prefetch's give-back (rid "+") refunds
-- only while the tokens it held were still missing from the bucket, and
-- lowers the floor with it when it set the floor.
settle = function(key, delta, at, remaining, reset)
  local unit, drip, burst = tonumber(ARGV[at]), tonumber(ARGV[at + 1]), tonumber(ARGV[at + 2])
  local full = burst * unit
  local credit, last, floor = credit_of(key, unit, drip, full)
  local take = delta * unit
  if delta < 0 then
    take = -math.min(-take, math.max(0, reserved + reset - 1 - now) * drip)
    if rid == '+' then
      if (reserved + reset - now) * drip < -delta * unit then take = 0 end
      if floor == reserved + reset then floor = floor - math.floor(-take / drip) end
    end
    credit = math.min(credit - take, full - math.max(0, floor - now) * drip)
  else
    credit = math.max(-max_debt * drip, credit - take)
  end
  if floor > now then
    redis.call('HSET', key, 'c', credit, 't', last, 'u', unit, 'f', floor)
  else
    redis.call('HSET', key, 'c', credit, 't', last, 'u', unit)
    if floor ~= 0 then redis.call('HDEL', key, 'f') end
  end
  expire(key, math.max(math.ceil((full - credit) / drip), floor - now))
end}
