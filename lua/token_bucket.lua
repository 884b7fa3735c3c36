-- Token bucket: capacity burst, refilled continuously at rate per period.
--
-- KEYS    hash {c = credit, t = µs of the last update, u = unit, f, b, a,
--         p} (b, a, p: see meter.lua). No key means a full bucket.
--         One token is `unit` credit and each µs adds `drip`, so refill is
--         exact. Credit below 0 is a debt (settle). f, above 0: when a
--         prefetch left the bucket full again; until then no refund fills
--         it further than it would be then, so that the tokens a Limiter
--         holds stay taken while it may admit them (gcra.lua's floor). A
--         prefetch leaves the bucket at least prefetch_lease's refill plus
--         its held tokens below full.
-- ARGV    unit: period / gcd(period, rate); drip: rate / gcd(period, rate);
--         burst
-- Reply   allowed, remaining, retry_after, reset_after, 0, next, mark
--- fast ---
-- The fast path (prelude.lua) of a bucket of the limit's unit, its floor passed.
if name == 'token_bucket' then
  local unit, drip, burst = ARGV[at] + 0, ARGV[at + 1], ARGV[at + 2] + 0
  local s = redis.call('HMGET', key, 'c', 't', 'u', 'f', 'b', 'a', 'p')
  local full, credit, last, b, a, p = burst * unit, burst * unit, now, nil, 0, ''
  if drip == '1' then drip = 1 else drip = drip + 0 end
  if s[1] then -- as credit_of (below)
    if s[3] and s[3] ~= ARGV[at] or (tonumber(s[4]) or 0) > now then return end
    credit, last, b, a, p = s[1] + 0, s[2] + 0, s[5] or '0', tonumber(s[6]) or 0, s[7] or ''
    if now > last then credit, last = credit + (now - last) * drip, now end
    if credit > full then credit = full end
  end
  local need, retry = cost * unit, 0
  if credit < need then
    retry = (need - credit + (credit - need) % drip) / drip
  elseif cost > 0 then -- as restart (meter.lua; 2^51: max_units) and bucket_store; b as stored
    local t, ms = string.format('%d', last), drip * 1000 -- ms: units that drain in 1 ms
    if credit == full or a >= 2^51 then b, a, p = now == last and t or string.format('%d', now), 0, '' end
    credit, a = credit - need, a + need
    redis.call('HSET', key, 'c', string.format('%d', credit), 't', t, 'u', ARGV[at],
      'f', '0', 'b', b, 'a', string.format('%d', a), 'p', p)
    redis.call('PEXPIRE', key, string.format('%d', (full - credit + (credit - full) % ms) / ms))
  end
  local tokens, after, left = (credit - credit % unit) / unit, 0, full - credit -- left: credit missing
  if tokens < burst then after = (tokens > 0 and tokens or 0) * unit + unit - credit end -- short of one more
  return retry == 0 and 1 or 0, tokens, (left + -left % drip) / drip, (after + -after % drip) / drip, retry
end
--- general ---
-- credit_of returns the credit of key at now, refilled, the µs it was
-- last updated, its floor (0 for none), b, a and p. A clock that went
-- backwards refills nothing; a changed limit keeps whole tokens, anew.
local function credit_of(key, unit, drip, full)
  local s = redis.call('HMGET', key, 'c', 't', 'u', 'f', 'b', 'a', 'p')
  local credit, last = tonumber(s[1]), tonumber(s[2])
  if not credit then return full, now, 0, now, 0, '' end
  local b, a, p, stored = tonumber(s[5]) or 0, tonumber(s[6]) or 0, s[7] or '', tonumber(s[3])
  if stored and stored ~= unit then -- the limit changed: keep whole tokens
    local tokens = math.floor(credit / stored)
    credit = tokens * unit + math.floor((credit - tokens * stored) * unit / stored)
    b, a, p = now, 0, ''
  end
  if now > last then credit, last = credit + (now - last) * drip, now end
  return math.min(full, credit), last, tonumber(s[4]) or 0, b, a, p
end
-- bucket_store stores the state, with the floor while it is ahead, and
-- lets the key live until the bucket is full and the floor passed.
local function bucket_store(key, credit, last, unit, f, b, a, p, full, drip)
  redis.call('HSET', key, 'c', credit, 't', last, 'u', unit, 'f', f > now and f or 0, 'b', b, 'a', a, 'p', p)
  expire(key, math.max(math.ceil((full - credit) / drip), f - now))
end
algorithms.token_bucket = {args = 3, decide = function(key, cost, at, commit)
  local unit, drip, burst = tonumber(ARGV[at]), tonumber(ARGV[at + 1]), tonumber(ARGV[at + 2])
  local full = burst * unit
  local credit, last, f, b, a, p = credit_of(key, unit, drip, full)
  local need, allowed, retry, mark = cost * unit, 0, 0, 0
  if credit < need then
    retry = math.ceil((need - credit) / drip)
  else
    b, a, p = restart(full - credit, b, a, p)
    local before = credit
    credit = credit - need
    if commit and fetching > 0 then -- keep what is held taken, for the lease at least
      credit = math.min(credit, math.max(0, full - prefetch_lease * drip - fetching * unit))
    end
    a = a + before - credit
    if commit then
      if fetching > 0 then f = now + math.ceil((full - credit) / drip) end
      bucket_store(key, credit, last, unit, f, b, a, p, full, drip)
    end
    allowed, mark = 1, a
  end
  local tokens, after = math.floor(credit / unit), 0 -- after: µs to one more whole token
  if tokens < burst then after = math.ceil(((math.max(0, tokens) + 1) * unit - credit) / drip) end
  return allowed, tokens, retry, math.ceil((full - credit) / drip), 0, after, mark
end}
--- settle ---
-- settle: a charge or a refund (settle_meter, meter.lua) of missing tokens.
algorithms.token_bucket.settle = function(key, delta, at, remaining, reset, next, mark)
  local unit, drip, burst = tonumber(ARGV[at]), tonumber(ARGV[at + 1]), tonumber(ARGV[at + 2])
  local full = burst * unit
  local credit, last, f, b, a, p = credit_of(key, unit, drip, full)
  local backlog
  backlog, f, b, a, p = settle_meter(delta, unit, drip, max_units, full - credit, f, b, a, p, reset, mark)
  bucket_store(key, full - backlog, last, unit, f, b, a, p, full, drip)
end
