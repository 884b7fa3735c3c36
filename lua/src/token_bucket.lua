-- Token bucket: capacity burst, refilled continuously at rate per period.
--
-- KEYS    hash {c = credit, t = µs of the last update, u = unit, d = drip,
--         k = burst, f, h, e, a, p}. No key means a full bucket. One token
--         is `unit` credit and each µs adds `drip`, so refill is exact.
--         Credit below 0 is a debt (settle). f, above 0: when a prefetch
--         left the bucket full again; until then no refund fills it
--         further than it would be then, so that the tokens a Limiter
--         holds stay taken while it may admit them (gcra.lua's floor). A
--         prefetch leaves the bucket at least prefetch_lease's refill plus
--         its held tokens below full. h is the clock of the last write; e,
--         a, p count missing credit for refunds (meter.lua).
-- ARGV    unit: period / gcd(period, rate); drip: rate / gcd(period, rate);
--         burst
-- Reply   allowed, remaining, retry_after, reset_after, 0, next, mark, epoch
--
-- Its fast path is token_bucket_fast.lua.
-- credit_of returns the credit of key at now, refilled, the µs it was
-- last updated, its floor (0 for none), e, a and p. A clock that went
-- backwards refills nothing; a changed limit keeps whole tokens, and
-- either starts the epoch afresh.
local function credit_of(key, unit, drip, burst, full)
  local s = redis.call('HMGET', key, 'c', 't', 'u', 'd', 'k', 'f', 'h', 'e', 'a', 'p')
  local credit, last = tonumber(s[1]), tonumber(s[2])
  if not credit then return full, now, 0, 0, 0, '' end
  local stored, e, a, p = tonumber(s[3]) or unit, tonumber(s[8]) or 0, tonumber(s[9]) or 0, s[10] or ''
  if stored ~= unit then -- the limit changed: keep whole tokens
    local tokens = math.floor(credit / stored)
    credit = tokens * unit + math.floor((credit - tokens * stored) * unit / stored)
  end
  if stored ~= unit or tonumber(s[4]) ~= drip or tonumber(s[5]) ~= burst or now < (tonumber(s[7]) or now) then
    e, a, p = 0, 0, ''
  end
  if now > last then credit, last = credit + (now - last) * drip, now end
  return math.min(full, credit), last, tonumber(s[6]) or 0, e, a, p
end
-- bucket_store stores the state, with the floor while it is ahead, and
-- lets the key live until the bucket is full and the floor passed.
local function bucket_store(key, credit, last, unit, drip, burst, f, e, a, p, full)
  redis.call('HSET', key, 'c', credit, 't', last, 'u', unit, 'd', drip, 'k', burst, 'f', f > now and f or 0,
    'h', now, 'e', e, 'a', a, 'p', p)
  expire(key, math.max(math.ceil((full - credit) / drip), f - now))
end
algorithms.token_bucket = {args = 3, kind = 'hash', decide = function(key, cost, at, commit)
  local unit, drip, burst = tonumber(ARGV[at]), tonumber(ARGV[at + 1]), tonumber(ARGV[at + 2])
  local full = burst * unit
  local credit, last, f, e, a, p = credit_of(key, unit, drip, burst, full)
  local need, allowed, retry = cost * unit, 0, 0
  if credit < need then
    retry = math.ceil((need - credit) / drip)
  else
    e, a, p = restart(full - credit, e, a, p)
    local before = credit
    credit = credit - need
    if commit and fetching > 0 then -- keep what is held taken, for the lease at least
      credit = math.min(credit, math.max(0, full - prefetch_lease * drip - fetching * unit))
    end
    if e ~= 0 then a = a + before - credit end
    if commit then
      if fetching > 0 then f = now + math.ceil((full - credit) / drip) end
      bucket_store(key, credit, last, unit, drip, burst, f, e, a, p, full)
    end
    allowed = 1
  end
  local tokens, after = math.floor(credit / unit), 0 -- after: µs to one more whole token
  if tokens < burst then after = math.ceil(((math.max(0, tokens) + 1) * unit - credit) / drip) end
  return allowed, tokens, retry, math.ceil((full - credit) / drip), 0, after, a, e
end}
--- settle ---
-- settle: a charge, up to debt µs in debt, or a refund (settle_meter) of missing tokens.
algorithms.token_bucket.settle = function(key, delta, at, reset, mark, epoch, debt)
  local unit, drip, burst = in_force(key, {'u', 'd', 'k'}, tonumber(ARGV[at]), tonumber(ARGV[at + 1]),
    tonumber(ARGV[at + 2]))
  local full = burst * unit
  local credit, last, f, e, a, p = credit_of(key, unit, drip, burst, full)
  local backlog
  backlog, f, e, a, p = settle_meter(delta, unit, drip, math.min(max_units, full + debt * drip),
    full - credit, f, e, a, p, reset, mark, epoch)
  bucket_store(key, full - backlog, last, unit, drip, burst, f, e, a, p, full)
end
