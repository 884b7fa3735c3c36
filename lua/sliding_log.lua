-- Sliding log: the exact sliding window. Every event admitted within the
-- last period is one member of a sorted set, scored by its time in µs; an
-- event at or before now - period has left the window.
--
-- KEYS    sorted set: member "<µs>:<i>" (i numbers the events admitted in
--         that µs, so members stay unique), score = the µs. Members that
--         left the window are trimmed on every write, so it holds at most
--         burst members; the key expires one period after the last event.
-- ARGV    period in microseconds; burst: the allowance per window (= rate)
-- Reply   allowed, remaining, retry_after, reset_after, 0, next
algorithms.sliding_log = {args = 2, decide = function(key, cost, at, commit)
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
    local k = count + cost - burst - 1
    local first = k == 0 and oldest or score(gone + k)
    return 0, burst - count, first + period - now, score(-1) + period - now, 0, next
  end
  if cost == 0 then
    if count == 0 then return 1, burst, 0, 0, 0, 0 end
    return 1, burst - count, 0, score(-1) + period - now, 0, next
  end

  if commit then
    if gone > 0 then redis.call('ZREMRANGEBYRANK', key, 0, gone - 1) end
    -- string.format, not tostring or `..`: those keep 14 digits of a 16-digit µs
    local base, stamp = redis.call('ZCOUNT', key, now, now), string.format('%d', now)
    local batch = {}
    for i = 1, cost do
      batch[#batch + 1] = stamp
      batch[#batch + 1] = stamp .. ':' .. (base + i - 1)
      if #batch >= 1000 or i == cost then -- keep unpack within Lua's stack
        redis.call('ZADD', key, unpack(batch))
        batch = {}
      end
    end
    redis.call('PEXPIRE', key, math.max(1, math.ceil(period / 1000)))
  end
  return 1, burst - count - cost, 0, period, 0, next
end}
