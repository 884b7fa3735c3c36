-- Sliding window counter. The period is cut into `k` sub-buckets; the
-- window (now - period, now] covers the k - 1 newest fully and the oldest
-- in part, whose count is weighted by the part still inside. k = 1 is the
-- classic estimate from the current and the previous window.
--
-- KEYS    hash: field = start of a sub-bucket in µs, value = events in it;
--         and e, the epoch: the id of the first reservation counted since
--         the hash was made or the clock went back (a sub-bucket ahead of
--         now's; 0 until one), which a refund must name. Fields that have
--         left the window are deleted on every write, so the hash holds at
--         most k + 2 fields. A charge past the allowance is a debt: the
--         window holds at most three allowances in all (settle).
-- ARGV    period in microseconds; burst: the allowance per window
--         (= rate); k, which divides the period evenly
-- Reply   allowed, remaining, retry_after, reset_after, 0, next, 0, epoch
--
-- Counts are compared scaled by the sub-bucket size, so weights stay exact
-- integers.
algorithms.sliding_window = {args = 3, kind = 'hash', decide = function(key, cost, at, commit)
  local period, burst, k = tonumber(ARGV[at]), tonumber(ARGV[at + 1]), tonumber(ARGV[at + 2])
  local size = period / k
  local cur = math.floor(now / size) -- the sub-bucket now is in
  local into = now - cur * size      -- µs since it began

  -- counts[i], i = 0..k: sub-bucket cur - k + i. 0 is the oldest, part-covered.
  local counts, gone, e, ahead = {}, {}, 0, false
  for i = 0, k do counts[i] = 0 end
  local fields = redis.call('HGETALL', key)
  for j = 1, #fields, 2 do
    local start = tonumber(fields[j])
    local i = start and math.floor(start / size) - cur + k
    if not start then -- e
      e = tonumber(fields[j + 1])
    elseif i < 0 then
      gone[#gone + 1] = fields[j]
    else -- a field from a clock ahead of this one counts as current
      ahead = ahead or i > k
      i = math.min(i, k)
      counts[i] = counts[i] + tonumber(fields[j + 1])
    end
  end
  local stored = e
  if ahead then e = 0 end -- the clock went back: no refund crosses it

  -- wait: µs until `want` events fit. While sub-bucket cur + j runs, the
  -- ones after it are empty (nothing arrived yet), those before it have
  -- left, and sub-bucket j is the part-covered oldest, its weight falling
  -- as time passes; so the first fit found scanning forward is the earliest.
  local function wait(want)
    local newer = 0 -- events in sub-buckets j+1..k, counted whole
    for i = 1, k do newer = newer + counts[i] end
    for j = 0, k do
      local room = (burst - newer - want) * size -- for sub-bucket j's weighted count
      if room >= 0 then
        local from = 0 -- µs into sub-bucket j from which it fits
        if counts[j] > 0 then from = math.max(0, size - math.floor(room / counts[j])) end
        return math.max(0, (cur + j) * size + from - now)
      end
      if j < k then newer = newer - counts[j + 1] end
    end
    return 0 -- unreachable: at j = k, newer is 0 and want <= burst
  end

  -- reset: µs until the newest non-empty sub-bucket has left the window.
  local function reset()
    for i = k, 0, -1 do
      if counts[i] > 0 then return (cur + i + 1) * size - now end
    end
    return 0
  end

  local weighted = counts[0] * (size - into) -- the oldest sub-bucket's share, times size
  for i = 1, k do weighted = weighted + counts[i] * size end
  local free = math.floor((burst * size - weighted) / size) -- below 0: a debt (settle)
  local remaining = math.max(0, free)
  if cost > remaining or free < 0 then -- in debt even a cost of 0 waits, until it is paid
    return 0, free, wait(cost), reset(), 0, wait(remaining + 1), 0, 0
  end
  counts[k] = counts[k] + cost
  if e == 0 then e = rid_n end -- afresh: a reservation's, the first since
  local left = reset()
  if commit then
    redis.call('HINCRBY', key, string.format('%d', cur * size), cost)
    if e ~= stored then redis.call('HSET', key, 'e', e) end
    if #gone > 0 then redis.call('HDEL', key, unpack(gone)) end
    redis.call('PEXPIRE', key, math.max(1, math.ceil(left / 1000)))
  end
  remaining = remaining - cost
  local next = 0 -- µs until one more event fits
  if remaining < burst then next = wait(remaining + 1) end
  return 1, remaining, 0, left, 0, next, 0, e
end}
--- settle ---
-- settle takes refunded events out of the sub-bucket they were counted
-- in, while it is in the window and the epoch theirs, and counts charged
-- ones in now's, as far as the window then holds at most three times the
-- allowance (3 * burst): a debt is bounded, and every weighted count exact.
algorithms.sliding_window.settle = function(key, delta, at, reset, mark, epoch)
  local period, burst = tonumber(ARGV[at]), tonumber(ARGV[at + 1])
  local size = period / tonumber(ARGV[at + 2])
  if delta > 0 then
    local cur, held = math.floor(now / size) * size, 0
    local fields = redis.call('HGETALL', key)
    for j = 1, #fields, 2 do -- what the window holds (e is not a count)
      local start = tonumber(fields[j])
      if start and start > cur - period then held = held + tonumber(fields[j + 1]) end
    end
    delta = math.min(delta, 3 * burst - held)
    if delta > 0 then redis.call('HINCRBY', key, string.format('%d', cur), delta) end
    return expire(key, cur + size + period - now)
  end
  local e = tonumber(redis.call('HGET', key, 'e')) or 0
  if e == 0 or e ~= epoch or reserved > now then return end -- another epoch, or a clock gone back
  local field = string.format('%d', math.floor(reserved / size) * size)
  local have = tonumber(redis.call('HGET', key, field)) or 0
  if math.min(-delta, have) >= have then redis.call('HDEL', key, field)
  else redis.call('HINCRBY', key, field, delta) end
end
