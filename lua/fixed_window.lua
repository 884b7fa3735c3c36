-- Fixed window: a counter per window of `period`, the window starting at
-- the first event after the previous one ended.
--
-- KEYS    hash {w = window start in microseconds, n = events counted}.
-- ARGV    period in microseconds; burst: the allowance per window (= rate)
-- Reply   allowed, remaining, retry_after, reset_after, 0, next
algorithms.fixed_window = {args = 2, decide = function(key, cost, at, commit)
  local period, burst = tonumber(ARGV[at]), tonumber(ARGV[at + 1])
  local state = redis.call('HMGET', key, 'w', 'n')
  local start, count = tonumber(state[1]), tonumber(state[2])
  local fresh = not start or now >= start + period
  if fresh then start, count = now, 0 end

  local left = start + period - now -- until this window ends
  if count + cost > burst then
    return 0, burst - count, left, left, 0, left
  end
  count = count + cost
  if commit then
    redis.call('HSET', key, 'w', start, 'n', count)
    if fresh then redis.call('PEXPIRE', key, math.max(1, math.ceil(left / 1000))) end
  end
  if count == 0 then left = 0 end -- nothing used: nothing to come back
  return 1, burst - count, 0, left, 0, left
end}
