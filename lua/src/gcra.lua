-- GCRA, the generic cell rate algorithm: one theoretical arrival time a key.
--
-- KEYS    string "t", "t:q", or "t:q:f:u:d:h:e:a[ p]". The theoretical
--         arrival time (TAT) of the next event at the sustained rate is
--         t + q/drip µs (0 <= q < drip): events unit/drip µs apart are
--         spaced exactly, however close. A TAT at or before now is the
--         same as no key. The long form is kept while a reservation or a
--         prefetch may settle: f, above 0, is a prefetch's floor: until it
--         passes, no refund moves the TAT below it, so the events a Limiter
--         holds stay counted while it may admit them (a prefetch leaves the
--         TAT at least prefetch_lease plus its held events' time ahead); u
--         and d are the unit and drip the refund positions e, a, p
--         (meter.lua) are counted in, and h the clock of the last write.
--         The backlog is how far the TAT is ahead of now, times drip; an
--         event adds unit; it may reach burst * unit, and more only in
--         debt (settle).
-- ARGV    unit, drip: one event is unit, one µs drains drip (period and
--         rate divided by their greatest common divisor); burst
-- Reply   allowed, remaining, retry_after, reset_after, 0, next, mark, epoch
--
-- Its fast path is gcra_fast.lua.
-- gcra_state returns key's backlog at now in units (0 for none), f, e, a
-- and p; the epoch afresh if the state was counted in another unit or
-- drip, or at a clock ahead of now. t, f, h < 0 before 1970.
local function gcra_state(key, unit, drip)
  local raw = redis.call('GET', key)
  local t, q, f, u, d, h, e, a, p = tonumber(raw), 0, 0, unit, drip, now, 0, 0, ''
  if raw and not t then
    t, q, f, u, d, h, e, a, p = string.match(raw, '^(-?%d+):(%d+):(-?%d+):(%d+):(%d+):(-?%d+):(%d+):(%d+) ?(.*)$')
    if not t then -- "t:q", or an earlier version's long form ("t:q:f:b:a p"): its TAT and floor
      t, q, f = string.match(raw, '^(-?%d+):(%d+):?(-?%d*)')
      f, u, d, h, e, a, p = tonumber(f) or 0, unit, drip, now, 0, 0, ''
    end
  end
  if not t then t, q = now, 0 end -- none, or unreadable: as none
  local backlog = math.max(0, (t - now) * drip + q)
  if u + 0 ~= unit or d + 0 ~= drip or now < h + 0 then e, a, p = 0, 0, '' end
  return backlog, f + 0, e + 0, a + 0, p
end
-- gcra_store stores a backlog of `units` at now until the later of TAT and
-- floor; the long form while an epoch runs, or for a floor.
local function gcra_store(key, unit, drip, units, f, e, a, p)
  local last = math.max(math.ceil(units / drip), f - now)
  if last <= 0 then redis.call('DEL', key) return end
  if f <= now then f = 0 end
  local t, q = now + math.floor(units / drip), units % drip
  local value = string.format('%d', t)
  if e ~= 0 or f ~= 0 then
    value = string.format('%d:%d:%d:%d:%d:%d:%d:%d', t, q, f, unit, drip, now, e, a) .. (p ~= '' and ' ' .. p or '')
  elseif q ~= 0 then
    value = string.format('%d:%d', t, q)
  end
  redis.call('SET', key, value, 'PX', math.max(1, math.ceil(last / 1000)))
end
algorithms.gcra = {args = 3, kind = 'string', decide = function(key, cost, at, commit)
  local unit, drip, burst = tonumber(ARGV[at]), tonumber(ARGV[at + 1]), tonumber(ARGV[at + 2])
  local full, backlog, f, e, a, p = burst * unit, gcra_state(key, unit, drip)
  local need, x, allowed, retry = backlog + cost * unit, backlog, 0, 0
  if need > full then
    retry = math.ceil((need - full) / drip)
  else
    if commit and fetching > 0 then -- keep what is held counted, for the lease at least
      need = math.max(need, math.min(full, prefetch_lease * drip + fetching * unit))
      f = now + math.ceil(need / drip)
    end
    e, a, p = restart(backlog, e, a, p)
    if e ~= 0 then a = a + need - backlog end
    if commit then gcra_store(key, unit, drip, need, f, e, a, p) end
    x, allowed = need, 1
  end
  local l, after = math.max(0, math.floor((full - x) / unit)), 0 -- fit at backlog x; µs to one more
  if l < burst then after = math.ceil((x - full + (l + 1) * unit) / drip) end
  return allowed, l, retry, math.ceil(x / drip), 0, after, a, e
end}
--- settle ---
-- settle: a charge, up to debt µs past full, or a refund (settle_meter).
algorithms.gcra.settle = function(key, delta, at, reset, mark, epoch, debt)
  local unit, drip, burst = tonumber(ARGV[at]), tonumber(ARGV[at + 1]), tonumber(ARGV[at + 2])
  local u, d = string.match(redis.call('GET', key) or '', '^-?%d+:%d+:-?%d+:(%d+):(%d+):') -- in force (meter.lua)
  if u then unit, drip = tonumber(u), tonumber(d) end
  local backlog, f, e, a, p = gcra_state(key, unit, drip)
  backlog, f, e, a, p = settle_meter(delta, unit, drip, math.min(max_units, (burst * unit) + debt * drip),
    backlog, f, e, a, p, reset, mark, epoch)
  gcra_store(key, unit, drip, backlog, f, e, a, p)
end
