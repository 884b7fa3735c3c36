-- Sliding log: the exact sliding window. Every event admitted within the
-- last period is one member of a sorted set, scored by its time in µs; an
-- event at or before now - period has left the window.
--
-- KEYS    sorted set, score = the µs; member "<µs>:<i>" (i numbers the
--         events admitted in that µs, so members stay unique), or, for a
--         reservation's events, "<µs>:<id>:<i>", so that its settlement
--         takes back its own. Members that left the window are trimmed on
--         every write (at most log_trim a call), so it holds about burst
--         members (and as many more in debt); the key expires one period
--         after the last event.
-- ARGV    period in microseconds; burst: the allowance per window (= rate)
-- Reply   allowed, remaining, retry_after, reset_after, 0, next

-- log_trim: the most entries that have left the window one call removes
-- (the rest go with the next calls; counts leave them out), so that a call
-- adds and removes at most about 20 000 entries whatever came before.
local log_trim = 10000

-- log adds events i = from..to at now, named as above, and trims what
-- has left the window. A plain event's i starts past the members already
-- at now and moves on past any name a refund left free (ZADD NX).
local function log(key, from, to, id, period)
  local gone = redis.call('ZCOUNT', key, '-inf', now - period) -- the oldest, by rank
  if gone > 0 then redis.call('ZREMRANGEBYRANK', key, 0, math.min(gone, log_trim) - 1) end
  -- string.format, not tostring or `..`: those keep 14 digits of a 16-digit µs
  local stamp = string.format('%d', now)
  local base, need = stamp .. ':', to - from + 1
  if id == '' then
    from = from + redis.call('ZCOUNT', key, now, now)
  else
    base = base .. id .. ':'
  end
  while need > 0 do -- in batches that keep unpack within Lua's stack
    local batch = {}
    for i = from, from + math.min(need, 500) - 1 do
      batch[#batch + 1] = stamp
      batch[#batch + 1] = base .. i
    end
    from = from + #batch / 2
    need = need - redis.call('ZADD', key, 'NX', unpack(batch))
  end
  expire(key, period)
end

algorithms.sliding_log = {args = 2, kind = 'zset', decide = function(key, cost, at, commit)
  local period, burst = tonumber(ARGV[at]), tonumber(ARGV[at + 1])
  local edge = now - period
  local gone = redis.call('ZCOUNT', key, '-inf', edge)
  local count = redis.call('ZCARD', key) - gone

  -- score of the member at rank r (0 is the oldest still stored)
  local function score(r)
    return tonumber(redis.call('ZRANGE', key, r, r, 'WITHSCORES')[2])
  end

  -- next: µs until the oldest event in the window leaves it
  local oldest = count > 0 and score(gone)
  local next = period
  if oldest then next = oldest + period - now end

  if count + cost > burst then
    -- the (count + cost - burst)-th oldest in the window must leave first
    -- (for a cost of 1 on a full window, the oldest)
    local k = math.max(0, count + cost - burst - 1)
    local first = k == 0 and oldest or score(gone + k)
    return 0, burst - count, first + period - now, score(-1) + period - now, 0, next
  end
  if cost == 0 then
    if count == 0 then return 1, burst, 0, 0, 0, 0 end
    return 1, burst - count, 0, score(-1) + period - now, 0, next
  end
  if commit then log(key, rid == '' and 0 or 1, rid == '' and cost - 1 or cost, rid, period) end
  return 1, burst - count - cost, 0, period, 0, next
end}
--- settle ---
-- settle takes back the reservation's last -delta events while they are
-- in the window, or logs delta more at now (at most burst: more would
-- leave the window at the same instant and change nothing).
algorithms.sliding_log.settle = function(key, delta, at)
  local period, burst = tonumber(ARGV[at]), tonumber(ARGV[at + 1])
  if delta > 0 then return log(key, reserved_n + 1, reserved_n + math.min(delta, burst), rid, period) end
  local names, stamp = {}, string.format('%d', reserved)
  for i = math.max(1, reserved_n + delta + 1), reserved_n do names[#names + 1] = stamp .. ':' .. rid .. ':' .. i end
  for i = 1, #names, 1000 do redis.call('ZREM', key, unpack(names, i, math.min(i + 999, #names))) end
end
