-- meter: what the meters (gcra, the token and leaky buckets) share about
-- refunds; every script has it, after the prelude.
--
-- KEYS    beside its level, a meter's state keeps, for refunds: e, its
--         epoch, the id of the first reservation counted since it last
--         started afresh (0 until one is); a, the units counted in the
--         epoch (its queue's tail, position a); p, the refunds still in
--         its queue: "position:units ...", at most max_refunds. It starts
--         afresh (e, a, p = 0, 0, "") when it is empty, and when its state
--         reader finds the limit's rate or burst changed (units and
--         positions mean other things) or the clock gone back (the queue's
--         head, read off the clock, moves back too).
-- ARGV    none of its own.
-- Reply   none of its own: a meter's decision replies with mark = a, the
--         position its events end at, and epoch = e, which its settlement
--         sends back.
--
-- Why. A meter holds everyone's events in one queue that drains from the
-- head (refill, leak). A refund must never let more through than the same
-- requests without the refunded events would have: it may take out no
-- more than what its reservation's events, and those queued ahead of
-- them, still hold. A refund of an earlier reservation moves the later
-- ones up, so a reservation's own record at its decision says too much;
-- a refund of a later one moves nothing ahead of it. So: what is held up
-- to position m is the backlog now, less what was counted after m, plus
-- what refunds gave back after m. Nothing is held in another epoch: the
-- queue has been empty since, or positions count other units. An epoch is
-- named by a reservation id, unique, so a key deleted and made again (a
-- clock that went back to the same instant, a restarted Redis) never
-- takes an old reservation's refund. Entries at or below the head are
-- dropped (nothing before the head holds anything); so are the lowest
-- past max_refunds, which can only make a later refund smaller.
local max_refunds = 32

-- restart returns e, a and p of a meter whose backlog is `backlog` before
-- a decision or charge: afresh when it is empty (or its position would
-- grow past what Lua counts exactly), else as they are; and then the
-- decision's id if it reserves or prefetches and no epoch runs. A caller
-- counts its units in a only while an epoch runs (e ~= 0).
local function restart(backlog, e, a, p)
  if backlog == 0 or a >= max_units then e, a, p = 0, 0, '' end
  if e == 0 then e, a, p = rid_n, 0, '' end -- positions count only in an epoch
  return e, a, p
end

--- settle ---
-- in_force returns the numbers key's hash holds under fields when it has
-- them all, else the defaults given: the parameters a bucket's state
-- counts in. A settlement counts in them, the limit in force, so that a
-- reservation made before a change of the limit neither refills nor
-- drains the state at its old rate: its refund finds no epoch of its own
-- and gives nothing back; a charge counts as the limit in force counts.
local function in_force(key, fields, ...)
  local s, out = redis.call('HMGET', key, unpack(fields)), {}
  for i = 1, #fields do
    if not s[i] then return ... end
    out[i] = tonumber(s[i])
  end
  return unpack(out)
end
-- held returns the units a reservation whose events end at position m of
-- epoch `epoch` may still take back, given the meter's backlog, position
-- a, epoch e and refunds p.
local function held(m, epoch, backlog, a, e, p)
  if e == 0 or e ~= epoch then return 0 end
  local back = 0
  for pos, units in string.gmatch(p, '(%d+):(%d+)') do
    if tonumber(pos) > m then back = back + tonumber(units) end
  end
  return backlog - (a - m) + back
end

-- refund returns the backlog after a refund of `want` units that takes out
-- what it may (held), leaving at least `least`, and p with it recorded at
-- position m. A prefetch's give-back takes all or nothing.
local function refund(want, m, epoch, backlog, least, a, e, p)
  local h = held(m, epoch, backlog, a, e, p)
  local give = math.max(0, math.min(want, h))
  if giveback and h < want then give = 0 end
  local after = math.max(least, backlog - give)
  if after >= backlog then return backlog, p end
  local entries, total = {{m, backlog - after}}, backlog - after
  for pos, units in string.gmatch(p, '(%d+):(%d+)') do
    entries[#entries + 1] = {tonumber(pos), tonumber(units)}
    total = total + tonumber(units)
  end
  table.sort(entries, function(x, y) return x[1] > y[1] end)
  local head, out = a - after - total, {} -- the head is at or above it
  for i = 1, math.min(#entries, max_refunds) do
    if entries[i][1] <= head then break end
    out[i] = string.format('%d:%d', entries[i][1], entries[i][2])
  end
  return after, table.concat(out, ' ')
end

-- settle_meter returns a meter's backlog, f, e, a and p after a
-- settlement (settle's delta, reset, mark and epoch): a charge adds delta
-- events, up to cap units (a charge never lowers it); a refund takes them
-- out as far as the meter holds the reservation's events (held) and its
-- floor f allows, and a prefetch's give-back lowers the floor it set.
local function settle_meter(delta, unit, drip, cap, backlog, f, e, a, p, reset, mark, epoch)
  if delta >= 0 then
    if backlog == 0 or a >= max_units then e, a, p = 0, 0, '' end
    local after = math.max(backlog, math.min(backlog + delta * unit, cap))
    if e ~= 0 then a = a + after - backlog end
    return after, f, e, a, p
  end
  local want = -delta * unit
  if giveback and f == reserved + reset and held(mark, epoch, backlog, a, e, p) >= want then
    f = f - math.floor(want / drip) -- its own floor goes down with it
  end
  local least = 0 -- what the floor keeps counted; f = 0: none
  if f ~= 0 and f > now then least = (f - now) * drip end
  backlog, p = refund(want, mark, epoch, backlog, least, a, e, p)
  return backlog, f, e, a, p
end
