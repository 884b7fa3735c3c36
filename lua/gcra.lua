-- GCRA, the generic cell rate algorithm: one theoretical arrival time per
-- key.
--
-- KEYS    string "t", or "t:q:f:b:a[ p]" (b, a, p: see meter.lua; "t:f"
--         from earlier versions). The theoretical arrival time (TAT) of
--         the next event at the sustained rate is t + q/drip µs (0 <= q <
--         drip): events unit/drip µs apart are spaced exactly, however
--         close. A TAT at or before now is the same as no key. f, above 0,
--         is a prefetch's floor: until it passes, no refund moves the TAT
--         below it, so the events a Limiter holds stay counted while it
--         may admit them (a prefetch leaves the TAT at least
--         prefetch_lease plus its held events' time ahead).
-- ARGV    unit, drip: one event is unit, one µs drains drip (period and
--         rate divided by their greatest common divisor); burst
-- Reply   allowed, remaining, retry_after, reset_after, 0, next, mark
---- The backlog is how far the TAT is ahead of now, times drip; an event
-- adds unit; it may reach burst * unit, and more only in debt (settle).

-- gcra_state returns key's backlog at now in units (0 when there is none),
-- its f, b, a and p, and whether it keeps b, a and p: a key of just "t"
-- had no reservation since its meter last started from empty, so no
-- settlement has anything to take back from it (b reads as never).
local function gcra_state(key, drip)
  local raw = redis.call('GET', key)
  local t = tonumber(raw) -- nil for no key (false) and for "t:..."
  if t or not raw then return math.max(0, ((t or now) - now) * drip), 0, math.huge, 0, '', false end
  local q, f, b, a, p
  t, q, f, b, a, p = string.match(raw, '^(%d+):(%d+):(%d+):(%d+):(%d+) ?(.*)$')
  if not t then t, q, f, a, p = string.match(raw, '^(%d+)'), 0, string.match(raw, ':(%d+)$'), 0, '' end
  local backlog = math.max(0, (tonumber(t) - now) * drip + tonumber(q))
  return backlog, tonumber(f), tonumber(b) or math.huge, tonumber(a), p, b ~= nil and b ~= math.huge
end

-- gcra_store stores a backlog of `units` at now and the rest (b, a, p if
-- keep, or for a fraction or a floor) until the later of TAT and floor.
local function gcra_store(key, drip, units, f, b, a, p, keep)
  local last = math.max(math.ceil(units / drip), f - now)
  if last <= 0 then redis.call('DEL', key) return end
  if f <= now then f = 0 end
  local t, q, value = now + math.floor(units / drip), units % drip
  if keep or q ~= 0 or f ~= 0 then
    if b == math.huge then b, a, p = now, 0, '' end
    value = string.format('%d:%d:%d:%d:%d', t, q, f, b, a)
    if p ~= '' then value = value .. ' ' .. p end
  else
    value = string.format('%d', t)
  end
  redis.call('SET', key, value, 'PX', math.max(1, math.ceil(last / 1000)))
end

algorithms.gcra = {args = 3, decide = function(key, cost, at, commit)
  local unit, drip, burst = tonumber(ARGV[at]), tonumber(ARGV[at + 1]), tonumber(ARGV[at + 2])
  local full = burst * unit
  local backlog, f, b, a, p, kept = gcra_state(key, drip)
  local need, x, allowed, retry, mark = backlog + cost * unit, backlog, 0, 0, 0
  if need > full then
    retry = math.ceil((need - full) / drip)
  else
    if commit and fetching > 0 then -- keep what is held counted, for the lease at least
      need = math.max(need, math.min(full, prefetch_lease * drip + fetching * unit))
      f = now + math.ceil(need / drip)
    end
    -- a reservation's settlement needs b, a, p; kept while the meter holds it
    local keep = rid ~= '' or fetching > 0 or kept and backlog > 0
    if keep and not kept then b = now end -- counting starts here
    b, a, p = restart(backlog, b, a, p)
    a = a + need - backlog
    if commit then gcra_store(key, drip, need, f, b, a, p, keep) end
    x, allowed, mark = need, 1, a
  end
  -- l: events that fit at backlog x; after: µs until one more does
  local l, after = math.max(0, math.floor((full - x) / unit)), 0
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
