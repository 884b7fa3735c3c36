-- fixed_window_fast: the fast path of fixed_window.lua (first.lua): a
-- decision of cost >= 0 (sent: the cost as sent, in decimal), answered
-- and stored as fixed_window's decide would. The count of a window that
-- goes on grows by HINCRBY, which leaves its start and epoch as they
-- were, as HSET of them would.
--
-- KEYS    key: fixed_window.lua's state.
-- ARGV    from ARGV[at]: period, burst (fixed_window.lua).
-- Reply   allowed, remaining, retry_after, reset_after, next, as decide's.
local function fixed_window_fast(key, cost, at, now, sent)
  local period, burst, state = ARGV[at] + 0, ARGV[at + 1] + 0, redis.call('HMGET', key, 'w', 'n')
  local start, count = tonumber(state[1]), tonumber(state[2])
  local fresh = not start or now >= start + period -- as fixed_window.lua's rolling
  if fresh then start, count = now, 0 end
  local left = start + period - now
  if count + cost > burst then return 0, burst - count, left, left, left end
  if cost > 0 and fresh then
    redis.call('HSET', key, 'w', string.format('%d', now), 'n', sent, 'e', '0')
    redis.call('PEXPIRE', key, string.format('%d', (left + -left % 1000) / 1000))
  elseif cost > 0 then
    redis.call('HINCRBY', key, 'n', sent)
  end
  if count + cost == 0 then left = 0 end
  return 1, burst - count - cost, 0, left, left
end
