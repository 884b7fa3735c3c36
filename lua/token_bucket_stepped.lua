-- Token bucket, stepped refill: `rate` tokens are added at once every
-- `period`, counted from the bucket's first use; it holds at most burst.
--
-- KEYS    hash {n = tokens, t = µs of the last refill step, b, a, p}: b, a
--         and p (meter.lua) count tokens. No key means a full bucket whose
--         steps start now. Tokens below 0 are a debt (settle).
-- ARGV    rate; period in microseconds; burst
-- Reply   allowed, remaining, retry_after, reset_after, 0, next, mark

-- stepped returns the tokens of key at now, the µs of its last step, b, a
-- and p.
local function stepped(key, rate, period, burst)
  local s = redis.call('HMGET', key, 'n', 't', 'b', 'a', 'p')
  local tokens, step = tonumber(s[1]), tonumber(s[2])
  if not tokens then return burst, now, now, 0, '' end
  if now >= step + period then
    local steps = math.floor((now - step) / period)
    tokens = tokens + steps * rate
    step = step + steps * period
  end
  return math.min(burst, tokens), step, tonumber(s[3]) or 0, tonumber(s[4]) or 0, s[5] or ''
end

local function stepped_store(key, tokens, step, b, a, p, rate, period, burst)
  redis.call('HSET', key, 'n', tokens, 't', step, 'b', b, 'a', a, 'p', p)
  expire(key, tokens >= burst and 0 or step + math.ceil((burst - tokens) / rate) * period - now)
end

algorithms.token_bucket_stepped = {args = 3, decide = function(key, cost, at, commit)
  local rate, period, burst = tonumber(ARGV[at]), tonumber(ARGV[at + 1]), tonumber(ARGV[at + 2])
  local tokens, step, b, a, p = stepped(key, rate, period, burst)

  -- wait returns the µs until the bucket holds `want` tokens.
  local function wait(want)
    if tokens >= want then return 0 end
    return step + math.ceil((want - tokens) / rate) * period - now
  end

  if tokens < cost then
    return 0, tokens, wait(cost), wait(burst), 0, wait(math.max(0, tokens) + 1), 0
  end
  b, a, p = restart(burst - tokens, b, a, p)
  tokens, a = tokens - cost, a + cost
  local reset = wait(burst)
  if commit then stepped_store(key, tokens, step, b, a, p, rate, period, burst) end
  return 1, tokens, 0, reset, 0, wait(math.min(burst, tokens + 1)), a
end}
--- settle ---
-- settle takes charged tokens out, into a debt if need be, and puts
-- refunded ones back as far as the bucket still misses them (meter.lua:
-- its steps drain the queue of missing tokens).
algorithms.token_bucket_stepped.settle = function(key, delta, at, remaining, reset, next, mark)
  local rate, period, burst = tonumber(ARGV[at]), tonumber(ARGV[at + 1]), tonumber(ARGV[at + 2])
  local tokens, step, b, a, p = stepped(key, rate, period, burst)
  local missing = burst - tokens
  if delta < 0 then
    missing, p = refund(-delta, mark, missing, 0, a, b, p)
  else
    b, a, p = restart(missing, b, a, p)
    local after = math.min(missing + delta, burst + math.floor(max_debt / period) * rate)
    a = a + after - missing
    missing = after
  end
  stepped_store(key, burst - missing, step, b, a, p, rate, period, burst)
end
