-- Fixed window: a counter per window. fixed_window's windows are `period`
-- long, each starting at the first event after the previous one ended;
-- fixed_window_calendar's follow the calendar: the client sends the
-- boundaries around its clock (local midnights, Mondays or firsts of the
-- month in its time zone) and the window holding now is picked here.
--
-- KEYS    hash {w = window start in microseconds, n = events counted,
--         e = the window's epoch: the id of its first reservation, 0 until
--         one, which a refund must name (a window made again at the same
--         start after its key expired is another window)}. A count above
--         the allowance is a debt (settle).
-- ARGV    fixed_window: period in microseconds; burst, the allowance per
--         window (= rate). fixed_window_calendar: burst; then b0 < b1 < b2
--         < b3, boundaries in µs: the window is [b0, b1), [b1, b2) or
--         [b2, b3).
-- Reply   allowed, remaining, retry_after, reset_after, 0, next, 0, epoch
--
-- Its fast path (fixed_window's, not the calendar's) is fixed_window_fast.lua.

-- rolling returns key's window at now: its start, end, count and epoch,
-- and whether it is new (none, or the last one has ended).
local function rolling(key, period)
  local state = redis.call('HMGET', key, 'w', 'n', 'e')
  local start, count = tonumber(state[1]), tonumber(state[2])
  if not start or now >= start + period then return now, now + period, 0, 0, true end
  return start, start + period, count, tonumber(state[3]) or 0, false
end

-- calendar returns the window of the boundaries at ARGV[at] that holds
-- now, its count and whether it is new.
local function calendar(key, at)
  for i = at, at + 2 do
    local start, finish = tonumber(ARGV[i]), tonumber(ARGV[i + 1])
    if start <= now and now < finish then
      local state = redis.call('HMGET', key, 'w', 'n', 'e')
      if tonumber(state[1]) ~= start then return start, finish, 0, 0, true end
      return start, finish, tonumber(state[2]), tonumber(state[3]) or 0, false
    end
  end
  error('redlimit: the Redis clock is outside the calendar windows the client sent (clocks a window apart?)')
end

local function window_decide(key, cost, commit, burst, start, finish, count, e, fresh)
  local left = finish - now -- until this window ends
  if count + cost > burst then
    return 0, burst - count, left, left, 0, left, 0, 0
  end
  count = count + cost
  if commit and (fresh or e == 0 and rid_n ~= 0) then -- a reservation's, the first of the window's
    e = rid_n
    redis.call('HSET', key, 'w', start, 'n', count, 'e', e)
    if fresh then expire(key, left) end
  elseif commit then
    redis.call('HSET', key, 'w', start, 'n', count)
  end
  if e == 0 then e = rid_n end
  if count == 0 then left = 0 end -- nothing used: nothing to come back
  return 1, burst - count, 0, left, 0, left, 0, e
end

algorithms.fixed_window = {args = 2, kind = 'hash', decide = function(key, cost, at, commit)
  local start, finish, count, e, fresh = rolling(key, tonumber(ARGV[at]))
  return window_decide(key, cost, commit, tonumber(ARGV[at + 1]), start, finish, count, e, fresh)
end}

algorithms.fixed_window_calendar = {args = 5, kind = 'hash', decide = function(key, cost, at, commit)
  local start, finish, count, e, fresh = calendar(key, at + 1)
  return window_decide(key, cost, commit, tonumber(ARGV[at]), start, finish, count, e, fresh)
end}
--- settle ---
-- settle refunds only to the window the reservation was counted in (its
-- epoch), while it lasts; it charges to the window of now (a debt ends
-- with the window: no more than max_units are counted).
local function window_settle(key, delta, epoch, start, finish, count, e, fresh)
  if delta < 0 and (fresh or e == 0 or e ~= epoch) then return end -- another window
  redis.call('HSET', key, 'w', start, 'n', math.max(0, math.min(max_units, count + delta)), 'e', e)
  if fresh then expire(key, finish - now) end
end

algorithms.fixed_window.settle = function(key, delta, at, reset, mark, epoch)
  window_settle(key, delta, epoch, rolling(key, tonumber(ARGV[at])))
end
algorithms.fixed_window_calendar.settle = function(key, delta, at, reset, mark, epoch)
  window_settle(key, delta, epoch, calendar(key, at + 1))
end
