-- Token bucket, stepped refill: `rate` tokens are added at once every
-- `period`, counted from the bucket's first use; it holds at most burst.
--
-- KEYS    hash {n = tokens, t = µs of the last refill step, r = rate,
--         k = burst, h, e, a, p}: h is the clock of the last write; e, a
--         and p (meter.lua) count missing tokens, afresh when the rate or
--         burst changed or the clock went back. No key means a full
--         bucket whose steps start now. Tokens below 0 are a debt (settle).
-- ARGV    rate; period in microseconds; burst
-- Reply   allowed, remaining, retry_after, reset_after, 0, next, mark, epoch

-- stepped returns the tokens of key at now, the µs of its last step, e, a
-- and p.
local function stepped(key, rate, period, burst)
  local s = redis.call('HMGET', key, 'n', 't', 'r', 'k', 'h', 'e', 'a', 'p')
  local tokens, step = tonumber(s[1]), tonumber(s[2])
  if not tokens then return burst, now, 0, 0, '' end
  if now >= step + period then
    local steps = math.floor((now - step) / period)
    tokens = tokens + steps * rate
    step = step + steps * period
  end
  local e, a, p = tonumber(s[6]) or 0, tonumber(s[7]) or 0, s[8] or ''
  if tonumber(s[3]) ~= rate or tonumber(s[4]) ~= burst or now < (tonumber(s[5]) or now) then e, a, p = 0, 0, '' end
  return math.min(burst, tokens), step, e, a, p
end

local function stepped_store(key, tokens, step, e, a, p, rate, period, burst)
  redis.call('HSET', key, 'n', tokens, 't', step, 'r', rate, 'k', burst, 'h', now, 'e', e, 'a', a, 'p', p)
  expire(key, tokens >= burst and 0 or step + math.ceil((burst - tokens) / rate) * period - now)
end

algorithms.token_bucket_stepped = {args = 3, kind = 'hash', decide = function(key, cost, at, commit)
  local rate, period, burst = tonumber(ARGV[at]), tonumber(ARGV[at + 1]), tonumber(ARGV[at + 2])
  local tokens, step, e, a, p = stepped(key, rate, period, burst)

  -- wait returns the µs until the bucket holds `want` tokens.
  local function wait(want)
    if tokens >= want then return 0 end
    return step + math.ceil((want - tokens) / rate) * period - now
  end

  if tokens < cost then
    return 0, tokens, wait(cost), wait(burst), 0, wait(math.max(0, tokens) + 1), 0, 0
  end
  e, a, p = restart(burst - tokens, e, a, p)
  tokens = tokens - cost
  if e ~= 0 then a = a + cost end
  local reset = wait(burst)
  if commit then stepped_store(key, tokens, step, e, a, p, rate, period, burst) end
  return 1, tokens, 0, reset, 0, wait(math.min(burst, tokens + 1)), a, e
end}
--- settle ---
-- settle takes charged tokens out, into a debt of at most debt µs if need
-- be, and puts refunded ones back as far as the bucket still misses them
-- (meter.lua: its steps drain the queue of missing tokens).
algorithms.token_bucket_stepped.settle = function(key, delta, at, reset, mark, epoch, debt)
  local period = tonumber(ARGV[at + 1]) -- part of the key's name: never changed under it
  local rate, burst = in_force(key, {'r', 'k'}, tonumber(ARGV[at]), tonumber(ARGV[at + 2]))
  local tokens, step, e, a, p = stepped(key, rate, period, burst)
  local missing = burst - tokens
  if delta < 0 then
    missing, p = refund(-delta, mark, epoch, missing, 0, a, e, p)
  else
    if missing == 0 or a >= max_units then e, a, p = 0, 0, '' end
    local after = math.max(missing, math.min(missing + delta, burst + math.floor(debt / period) * rate))
    if e ~= 0 then a = a + after - missing end
    missing = after
  end
  stepped_store(key, burst - missing, step, e, a, p, rate, period, burst)
end
