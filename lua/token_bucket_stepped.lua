-- Token bucket, stepped refill: `rate` tokens are added at once every
-- `period`, counted from the bucket's first use; it holds at most burst.
--
-- KEYS    hash {n = tokens, t = µs of the last refill step}. No key means
--         a full bucket whose steps start now. Tokens below 0 are a debt
--         (settle).
-- ARGV    rate; period in microseconds; burst
-- Reply   allowed, remaining, retry_after, reset_after, 0, next

-- stepped returns the tokens of key at now and the µs of its last step.
local function stepped(key, rate, period, burst)
  local state = redis.call('HMGET', key, 'n', 't')
  local tokens, step = tonumber(state[1]), tonumber(state[2])
  if not tokens then return burst, now end
  if now >= step + period then
    local steps = math.floor((now - step) / period)
    tokens = tokens + steps * rate
    step = step + steps * period
  end
  return math.min(burst, tokens), step
end

algorithms.token_bucket_stepped = {args = 3, decide = function(key, cost, at, commit)
  local rate, period, burst = tonumber(ARGV[at]), tonumber(ARGV[at + 1]), tonumber(ARGV[at + 2])
  local tokens, step = stepped(key, rate, period, burst)

  -- wait returns the µs until the bucket holds `want` tokens.
  local function wait(want)
    if tokens >= want then return 0 end
    return step + math.ceil((want - tokens) / rate) * period - now
  end

  if tokens < cost then
    return 0, tokens, wait(cost), wait(burst), 0, wait(math.max(0, tokens) + 1)
  end
  tokens = tokens - cost
  local reset = wait(burst)
  if commit then
    redis.call('HSET', key, 'n', tokens, 't', step)
    redis.call('PEXPIRE', key, math.max(1, math.ceil(reset / 1000)))
  end
  return 1, tokens, 0, reset, 0, wait(math.min(burst, tokens + 1))
end,
-- settle takes charged tokens out, into a debt if need be, and puts
-- refunded ones back as far as the steps since the reservation have not:
-- it left `remaining` tokens, its next step `next` after it was made.
settle = function(key, delta, at, remaining, reset, next)
  local rate, period, burst = tonumber(ARGV[at]), tonumber(ARGV[at + 1]), tonumber(ARGV[at + 2])
  local tokens, step = stepped(key, rate, period, burst)
  if delta < 0 then
    local steps = 0
    if now >= reserved + next then steps = math.floor((now - reserved - next) / period) + 1 end
    local held = math.min(burst, remaining - delta + steps * rate) - math.min(burst, remaining + steps * rate)
    delta = -math.min(-delta, held)
  end
  tokens = math.max(-math.floor(max_debt / period) * rate, math.min(burst, tokens - delta))
  redis.call('HSET', key, 'n', tokens, 't', step)
  expire(key, tokens >= burst and 0 or step + math.ceil((burst - tokens) / rate) * period - now)
end}
