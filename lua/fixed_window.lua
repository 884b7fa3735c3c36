-- Fixed window: a counter per window of `period`, the window starting at
-- the first event after the previous one ended.
--
-- KEYS[1] hash {w = window start in microseconds, n = events counted}.
-- ARGV[3] period in microseconds
-- ARGV[4] burst: the allowance per window (= rate)
-- Reply   {allowed, remaining, retry_after_us, reset_after_us, 0}
local period, burst = tonumber(ARGV[3]), tonumber(ARGV[4])
local state = redis.call('HMGET', KEYS[1], 'w', 'n')
local start, count = tonumber(state[1]), tonumber(state[2])
local fresh = not start or now >= start + period
if fresh then start, count = now, 0 end

local left = start + period - now -- until this window ends
if count + cost > burst then
  return {0, burst - count, left, left, 0}
end
count = count + cost
if cost > 0 then
  redis.call('HSET', KEYS[1], 'w', start, 'n', count)
  if fresh then redis.call('PEXPIRE', KEYS[1], math.max(1, math.ceil(left / 1000))) end
end
if count == 0 then left = 0 end
return {1, burst - count, 0, left, 0}
