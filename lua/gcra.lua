-- GCRA, the generic cell rate algorithm: one theoretical arrival time a key.
--
-- KEYS    string "t", or "t:q:f:b:a[ p]" (b, a, p: see meter.lua; "t:f"
--         from earlier versions). The theoretical arrival time (TAT) of
--         the next event at the sustained rate is t + q/drip µs (0 <= q <
--         drip): events unit/drip µs apart are spaced exactly, however
--         close. A TAT at or before now is the same as no key. f, above 0,
--         is a prefetch's floor: until it passes, no refund moves the TAT
--         below it, so the events a Limiter holds stay counted while it
--         may admit them (a prefetch leaves the TAT at least
--         prefetch_lease plus its held events' time ahead). The backlog is
--         how far the TAT is ahead of now, times drip; an event adds unit;
--         it may reach burst * unit, and more only in debt (settle).
-- ARGV    unit, drip: one event is unit, one µs drains drip (period and
--         rate divided by their greatest common divisor); burst
-- Reply   allowed, remaining, retry_after, reset_after, 0, next, mark
--- fast ---
-- The fast path (prelude.lua) of a key absent, "t" or "t:q:0:b:a": its
-- decide's answers and state in fewer steps, any other key left to that,
-- unwritten. x: the backlog; ceil(n / d) is (n + -n % d) / d.
if name == 'gcra' then
  local unit, drip, raw = ARGV[at] + 0, ARGV[at + 1], redis.call('GET', key)
  local t, q, b, a, x = raw and tonumber(raw), 0, nil, 0, 0
  if raw and not t then t, q, b, a = string.match(raw, '^(%d+):(%d+):0:(%d+):(%d+)$') end
  if raw and not t then return end
  if drip == '1' then drip = 1 else drip = drip + 0 end
  if t and (t - now) * drip + q > 0 then x = (t - now) * drip + q end
  local full, need, retry = ARGV[at + 2] * unit, x + cost * unit, 0
  if need > full then
    retry = (need - full + (full - need) % drip) / drip
  elseif cost > 0 then -- b and a as restart (meter.lua; 2^51: max_units) and gcra_store leave them
    local kept = b and x > 0
    if not b or x == 0 or a + 0 >= 2^51 then b, a = now, 0 end
    if kept or x == 0 then a = a + need - x end
    local value, ahead = string.format('%d', now + (need - need % drip) / drip), (need + -need % drip) / drip
    if kept or need % drip ~= 0 then value = string.format('%s:%d:0:%d:%d', value, need % drip, b, a) end
    redis.call('SET', key, value, 'PX', string.format('%d', (ahead + -ahead % 1000) / 1000))
    x = need
  end
  local l, after = full - x, 0 -- as algorithms.gcra.decide's; l < burst when x > 0
  if l > 0 then l = (l - l % unit) / unit else l = 0 end
  if x > 0 then after = x - full + (l + 1) * unit; after = (after + -after % drip) / drip end
  return retry == 0 and 1 or 0, l, (x + -x % drip) / drip, after, retry
end
--- general ---
-- gcra_state returns key's backlog at now in units (0 for none), f, b, a, p and whether
-- it keeps b, a, p (a bare "t" does not: b reads as never). t, f, b < 0 before 1970.
local function gcra_state(key, drip)
  local raw = redis.call('GET', key)
  local t, q, f, b, a, p = tonumber(raw), 0, 0, nil, 0, ''
  if raw and not t then
    t, q, f, b, a, p = string.match(raw, '^(-?%d+):(%d+):(-?%d+):(-?%d+):(%d+) ?(.*)$')
    if not t then t, q, f, a, p = string.match(raw, '^(-?%d+)'), 0, string.match(raw, ':(-?%d+)$'), 0, '' end
  end
  return math.max(0, ((t or now) - now) * drip + q), f + 0, tonumber(b) or math.huge, a + 0, p, b ~= nil
end
-- gcra_store stores a backlog of `units` at now and the rest (b, a, p if
-- keep, or for a fraction or a floor) until the later of TAT and floor.
local function gcra_store(key, drip, units, f, b, a, p, keep)
  local last = math.max(math.ceil(units / drip), f - now)
  if last <= 0 then redis.call('DEL', key) return end
  if f <= now then f = 0 end
  local t, q = now + math.floor(units / drip), units % drip
  local value = string.format('%d', t)
  if keep or q ~= 0 or f ~= 0 then
    if b == math.huge then b, a, p = now, 0, '' end
    value = string.format('%d:%d:%d:%d:%d', t, q, f, b, a) .. (p ~= '' and ' ' .. p or '')
  end
  redis.call('SET', key, value, 'PX', math.max(1, math.ceil(last / 1000)))
end
algorithms.gcra = {args = 3, decide = function(key, cost, at, commit)
  local unit, drip, burst = tonumber(ARGV[at]), tonumber(ARGV[at + 1]), tonumber(ARGV[at + 2])
  local full, backlog, f, b, a, p, kept = burst * unit, gcra_state(key, drip)
  local need, x, allowed, retry, mark = backlog + cost * unit, backlog, 0, 0, 0
  if need > full then
    retry = math.ceil((need - full) / drip)
  else
    if commit and fetching > 0 then -- keep what is held counted, for the lease at least
      need = math.max(need, math.min(full, prefetch_lease * drip + fetching * unit))
      f = now + math.ceil(need / drip)
    end
    local keep = rid ~= '' or fetching > 0 or kept and backlog > 0 -- for a settlement, while held
    if keep and not kept then b = now end -- counting starts here
    b, a, p = restart(backlog, b, a, p)
    a = a + need - backlog
    if commit then gcra_store(key, drip, need, f, b, a, p, keep) end
    x, allowed, mark = need, 1, a
  end
  local l, after = math.max(0, math.floor((full - x) / unit)), 0 -- fit at backlog x; µs to one more
  if l < burst then after = math.ceil((x - full + (l + 1) * unit) / drip) end
  return allowed, l, retry, math.ceil(x / drip), 0, after, mark
end}
--- settle ---
-- settle: a charge or a refund (settle_meter, meter.lua), stored as kept.
algorithms.gcra.settle = function(key, delta, at, remaining, reset, next, mark)
  local unit, drip = tonumber(ARGV[at]), tonumber(ARGV[at + 1])
  local backlog, f, b, a, p, kept = gcra_state(key, drip)
  backlog, f, b, a, p = settle_meter(delta, unit, drip, max_units, backlog, f, b, a, p, reset, mark)
  gcra_store(key, drip, backlog, f, b, a, p, kept)
end
