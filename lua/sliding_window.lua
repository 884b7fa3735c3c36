-- Sliding window counter. The period is cut into `k` sub-buckets; the
-- window (now - period, now] covers the k - 1 newest fully and the oldest
-- in part, whose count is weighted by the part still inside. k = 1 is the
-- classic estimate from the current and the previous window.
--
-- KEYS[1] hash: field = start of a sub-bucket in µs, value = events in it.
--         Fields that have left the window are deleted on every write, so
--         the hash holds at most k + 1 fields.
-- ARGV[3] period in microseconds
-- ARGV[4] burst: the allowance per window (= rate)
-- ARGV[5] k, which divides the period evenly
-- Reply   {allowed, remaining, retry_after_us, reset_after_us, 0}
--
-- Counts are compared scaled by the sub-bucket size, so weights stay exact
-- integers.
local period, burst, k = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local size = period / k
local cur = math.floor(now / size) -- the sub-bucket now is in
local into = now - cur * size      -- µs since it began

-- counts[i], i = 0..k: sub-bucket cur - k + i. 0 is the oldest, part-covered.
local counts, gone = {}, {}
for i = 0, k do counts[i] = 0 end
local fields = redis.call('HGETALL', KEYS[1])
for j = 1, #fields, 2 do
  local i = math.floor(tonumber(fields[j]) / size) - cur + k
  if i < 0 then
    gone[#gone + 1] = fields[j]
  else -- a field from a clock ahead of this one counts as current
    i = math.min(i, k)
    counts[i] = counts[i] + tonumber(fields[j + 1])
  end
end

-- wait: µs until `want` events fit. While sub-bucket cur + j runs, the
-- ones after it are empty (nothing arrived yet), those before it have left,
-- and sub-bucket j is the part-covered oldest, its weight falling as time
-- passes; so the first fit found scanning forward is the earliest.
local function wait(want)
  local newer = 0 -- events in sub-buckets j+1..k, counted whole
  for i = 1, k do newer = newer + counts[i] end
  for j = 0, k do
    local room = (burst - newer - want) * size -- for sub-bucket j's weighted count
    if room >= 0 then
      local at = 0 -- µs into sub-bucket j from which it fits
      if counts[j] > 0 then at = math.max(0, size - math.floor(room / counts[j])) end
      return math.max(0, (cur + j) * size + at - now)
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
local remaining = math.max(0, math.floor((burst * size - weighted) / size))
if cost > remaining then
  return {0, remaining, wait(cost), reset(), 0}
end
if cost > 0 then
  counts[k] = counts[k] + cost
  redis.call('HINCRBY', KEYS[1], string.format('%d', cur * size), cost)
  if #gone > 0 then redis.call('HDEL', KEYS[1], unpack(gone)) end
  redis.call('PEXPIRE', KEYS[1], math.max(1, math.ceil(reset() / 1000)))
end
return {1, remaining - cost, 0, reset(), 0}
