-- gcra_fast: the fast path of gcra.lua (first.lua): a decision of cost >=
-- 0 (sent: the cost as sent, in decimal) on a key absent, "t" or "t:q" (no
-- epoch, no floor), answered and stored as gcra's decide would; nothing,
-- having written nothing, for any other key.
--
-- KEYS    key: gcra.lua's state.
-- ARGV    from ARGV[at]: unit, drip, burst (gcra.lua).
-- Reply   allowed, remaining, retry_after, reset_after, next, as decide's.
--
-- x is the backlog; ceil(n / d) is written (n + -n % d) / d, and a number
-- from ARGV read with + 0 only when it is not "1", the usual drip.
local function gcra_fast(key, cost, at, now, sent)
  local unit, drip, raw = ARGV[at] + 0, ARGV[at + 1], redis.call('GET', key)
  local t, q, x = raw and tonumber(raw), 0, 0
  if raw and not t then t, q = string.match(raw, '^(%d+):(%d+)$') end
  if raw and not t then return end
  if drip == '1' then drip = 1 else drip = drip + 0 end
  if t and (t - now) * drip + q > 0 then x = (t - now) * drip + q end
  local full, need, retry = ARGV[at + 2] * unit, x + cost * unit, 0
  if need > full then
    retry = (need - full + (full - need) % drip) / drip
  elseif cost > 0 then -- as gcra_store
    local value, ahead = string.format('%d', now + (need - need % drip) / drip), (need + -need % drip) / drip
    if need % drip ~= 0 then value = string.format('%s:%d', value, need % drip) end
    redis.call('SET', key, value, 'PX', string.format('%d', (ahead + -ahead % 1000) / 1000))
    x = need
  end
  local l, after = full - x, 0 -- as algorithms.gcra.decide's; l < burst when x > 0
  if l > 0 then l = (l - l % unit) / unit else l = 0 end
  if x > 0 then after = x - full + (l + 1) * unit; after = (after + -after % drip) / drip end
  return retry == 0 and 1 or 0, l, retry, (x + -x % drip) / drip, after
end
