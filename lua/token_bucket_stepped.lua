-- Token bucket, stepped refill: `rate` tokens are added at once every
-- `period`, counted from the bucket's first use; it holds at most burst.
--
-- KEYS    hash {n = tokens, t = µs of the last refill step}. No key means
--         a full bucket whose steps start now.
-- ARGV    rate; period in microseconds; burst
-- Reply   allowed, remaining, retry_after, reset_after, 0, next
algorithms.token_bucket_stepped = {args = 3, decide = function(key, cost, at, commit)
  local rate, period, burst = tonumber(ARGV[at]), tonumber(ARGV[at + 1]), tonumber(ARGV[at + 2])
  local state = redis.call('HMGET', key, 'n', 't')
  local tokens, step = tonumber(state[1]), tonumber(state[2])
  if not tokens then
    tokens, step = burst, now
  elseif now >= step + period then
    local steps = math.floor((now - step) / period)
    tokens = tokens + steps * rate
    step = step + steps * period
  end
  tokens = math.min(burst, tokens)

  -- wait returns the µs until the bucket holds `want` tokens.
  local function wait(want)
    if tokens >= want then return 0 end
    return step + math.ceil((want - tokens) / rate) * period - now
  end

  if tokens < cost then
    return 0, tokens, wait(cost), wait(burst), 0, wait(tokens + 1)
  end
  tokens = tokens - cost
  local reset = wait(burst)
  if commit then
    redis.call('HSET', key, 'n', tokens, 't', step)
    redis.call('PEXPIRE', key, math.max(1, math.ceil(reset / 1000)))
  end
  return 1, tokens, 0, reset, 0, wait(math.min(burst, tokens + 1))
end}
