-- Fixed window: a counter per window. fixed_window's windows are `period`
-- long, each starting at the first event after the previous one ended;
-- fixed_window_calendar's follow the calendar: the client sends the
-- boundaries around its clock (local midnights, Mondays or firsts of the
-- month in its time zone) and the window holding now is picked here.
--
-- KEYS    hash {w = window start in microseconds, n = events counted}.
--         A count above the allowance is a debt (settle).
-- ARGV    fixed_window: period in microseconds; burst, the allowance per
--         window (= rate). fixed_window_calendar: burst; then b0 < b1 < b2
--         < b3, boundaries in µs: the window is [b0, b1), [b1, b2) or
--         [b2, b3).
-- Reply   allowed, remaining, retry_after, reset_after, 0, next

--- fast ---
-- The fast path of fixed_window (prelude.lua): its decide's answers and
-- state in fewer steps. The count of a window that goes on grows by
-- HINCRBY, which leaves its start as it was, as HSET would.
if name == 'fixed_window' then
  local period, burst, state = ARGV[at] + 0, ARGV[at + 1] + 0, redis.call('HMGET', key, 'w', 'n')
  local start, count = tonumber(state[1]), tonumber(state[2])
  local fresh = not start or now >= start + period -- as rolling (below)
  if fresh then start, count = now, 0 end
  local left = start + period - now
  if count + cost > burst then return 0, burst - count, left, left, left end
  if cost > 0 and fresh then
    redis.call('HSET', key, 'w', string.format('%d', now), 'n', sent)
    redis.call('PEXPIRE', key, string.format('%d', (left + -left % 1000) / 1000))
  elseif cost > 0 then
    redis.call('HINCRBY', key, 'n', sent)
  end
  if count + cost == 0 then left = 0 end
  return 1, burst - count - cost, left, left, 0
end
--- general ---
-- rolling returns key's window at now: its start, end and count, and
-- whether it is new (none, or the last one has ended).
local function rolling(key, period)
  local state = redis.call('HMGET', key, 'w', 'n')
  local start, count = tonumber(state[1]), tonumber(state[2])
  if not start or now >= start + period then return now, now + period, 0, true end
  return start, start + period, count, false
end

-- calendar returns the window of the boundaries at ARGV[at] that holds
-- now, its count and whether it is new.
local function calendar(key, at)
  for i = at, at + 2 do
    local start, finish = tonumber(ARGV[i]), tonumber(ARGV[i + 1])
    if start <= now and now < finish then
      local state = redis.call('HMGET', key, 'w', 'n')
      if tonumber(state[1]) ~= start then return start, finish, 0, true end
      return start, finish, tonumber(state[2]), false
    end
  end
  error('redlimit: the Redis clock is outside the calendar windows the client sent (clocks a window apart?)')
end

local function window_decide(key, cost, commit, burst, start, finish, count, fresh)
  local left = finish - now -- until this window ends
  if count + cost > burst then
    return 0, burst - count, left, left, 0, left
  end
  count = count + cost
  if commit then
    redis.call('HSET', key, 'w', start, 'n', count)
    if fresh then expire(key, left) end
  end
  if count == 0 then left = 0 end -- nothing used: nothing to come back
  return 1, burst - count, 0, left, 0, left
end

algorithms.fixed_window = {args = 2, decide = function(key, cost, at, commit)
  local start, finish, count, fresh = rolling(key, tonumber(ARGV[at]))
  return window_decide(key, cost, commit, tonumber(ARGV[at + 1]), start, finish, count, fresh)
end}

algorithms.fixed_window_calendar = {args = 5, decide = function(key, cost, at, commit)
  local start, finish, count, fresh = calendar(key, at + 1)
  return window_decide(key, cost, commit, tonumber(ARGV[at]), start, finish, count, fresh)
end}
--- settle ---
-- settle refunds only to the window the reservation was counted in, while
-- it lasts; it charges to the window of now.
local function window_settle(key, delta, start, finish, count, fresh)
  if delta < 0 and (fresh or reserved < start) then return end -- that window has passed
  if fresh then count = 0 end
  redis.call('HSET', key, 'w', start, 'n', math.max(0, count + delta))
  if fresh then expire(key, finish - now) end
end

algorithms.fixed_window.settle = function(key, delta, at)
  window_settle(key, delta, rolling(key, tonumber(ARGV[at])))
end
algorithms.fixed_window_calendar.settle = function(key, delta, at)
  window_settle(key, delta, calendar(key, at + 1))
end
