-- token_bucket_fast: the fast path of token_bucket.lua (first.lua): a
-- decision of cost >= 0 on a bucket of the limit's unit, drip and burst
-- whose floor is 0 and in which no epoch runs (or none at all), answered
-- and stored as token_bucket's decide would; nothing, having written
-- nothing, for any other.
--
-- KEYS    key: token_bucket.lua's state.
-- ARGV    from ARGV[at]: unit, drip, burst (token_bucket.lua).
-- Reply   allowed, remaining, retry_after, reset_after, next, as decide's.
local function token_bucket_fast(key, cost, at, now, sent)
  local unit, drip, burst = ARGV[at] + 0, ARGV[at + 1], ARGV[at + 2] + 0
  local s = redis.call('HMGET', key, 'c', 't', 'u', 'd', 'k', 'f', 'e')
  local full, credit, last = burst * unit, burst * unit, now
  if s[1] then -- as credit_of (below)
    if s[3] ~= ARGV[at] or s[4] ~= drip or s[5] ~= ARGV[at + 2] or s[6] ~= '0' or s[7] ~= '0' then return end
    credit, last = s[1] + 0, s[2] + 0
  end
  if drip == '1' then drip = 1 else drip = drip + 0 end
  if now > last then credit, last = credit + (now - last) * drip, now end
  if credit > full then credit = full end
  local need, retry = cost * unit, 0
  if credit < need then
    retry = (need - credit + (credit - need) % drip) / drip
  elseif cost > 0 then -- as bucket_store, no floor, no epoch
    local ms = drip * 1000 -- units that drain in 1 ms
    credit = credit - need
    redis.call('HSET', key, 'c', string.format('%d', credit), 't', string.format('%d', last), 'u', ARGV[at],
      'd', ARGV[at + 1], 'k', ARGV[at + 2], 'f', '0', 'h', string.format('%d', now), 'e', '0', 'a', '0', 'p', '')
    redis.call('PEXPIRE', key, string.format('%d', (full - credit + (credit - full) % ms) / ms))
  end
  local tokens, after, left = (credit - credit % unit) / unit, 0, full - credit -- left: credit missing
  if tokens < burst then after = (tokens > 0 and tokens or 0) * unit + unit - credit end -- short of one more
  return retry == 0 and 1 or 0, tokens, retry, (left + -left % drip) / drip, (after + -after % drip) / drip
end
