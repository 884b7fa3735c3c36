-- meter: what the meters (gcra, the token and leaky buckets) share about
-- refunds; every script has it, after the prelude.
--
-- KEYS    a meter's state keeps, beside its level, three fields for this:
--         b, when the meter last started from empty; a, the units it has
--         counted since (its queue's tail, position a); p, the refunds
--         still in its queue: "position:units ...", at most max_refunds.
-- ARGV    none of its own.
-- Reply   none of its own: a meter's decision replies with mark = a, the
--         position its events end at, which its settlement sends back.
--
-- Why. A meter holds everyone's events in one queue that drains from the
-- head (refill, leak). A refund must never let more through than the same
-- requests without the refunded events would have: it may take out no
-- more than what its reservation's events, and those queued ahead of
-- them, still hold. A refund of an earlier reservation moves the later
-- ones up, so a reservation's own record at its decision says too much;
-- a refund of a later one moves nothing ahead of it. So: what is held up
-- to position m is the backlog now, less what was counted after m, plus
-- what refunds gave back after m. Nothing is held if the meter has been
-- empty since the decision (b after it). Entries at or below the head are
-- dropped (nothing before the head holds anything); so are the lowest past
-- max_refunds, which can only make a later refund smaller, never larger.
local max_refunds = 32

-- restart returns b, a and p of a meter whose backlog is `backlog` before
-- a decision or charge: afresh when it is empty (or its position would
-- grow past what Lua counts exactly), else as they are.
local function restart(backlog, b, a, p)
  if backlog == 0 or a >= max_units then return now, 0, '' end
  return b, a, p
end

--- settle ---
-- held returns the units a reservation whose events end at position m,
-- made at `reserved`, may still take back, given the meter's backlog,
-- position a, start b and refunds p.
local function held(m, backlog, a, b, p)
  if b > reserved then return 0 end
  local back = 0
  for pos, units in string.gmatch(p, '(%d+):(%d+)') do
    if tonumber(pos) > m then back = back + tonumber(units) end
  end
  return backlog - (a - m) + back
end

-- refund returns the backlog after a refund of `want` units that takes out
-- what it may (held), leaving at least `least`, and p with it recorded at
-- position m. A prefetch's give-back (rid "+") takes all or nothing.
local function refund(want, m, backlog, least, a, b, p)
  local h = held(m, backlog, a, b, p)
  local give = math.max(0, math.min(want, h))
  if rid == '+' and h < want then give = 0 end
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

-- settle_meter returns a meter's backlog, f, b, a and p after a settlement
-- (settle's delta, reset and mark): a charge adds delta events, up to cap
-- units; a refund takes them out as far as the meter holds the
-- reservation's events (held) and its floor f allows, and a prefetch's
-- give-back lowers the floor it set.
local function settle_meter(delta, unit, drip, cap, backlog, f, b, a, p, reset, mark)
  if delta >= 0 then
    b, a, p = restart(backlog, b, a, p)
    local after = math.min(backlog + delta * unit, cap)
    return after, f, b, a + after - backlog, p
  end
  local want = -delta * unit
  if rid == '+' and f == reserved + reset and held(mark, backlog, a, b, p) >= want then
    f = f - math.floor(want / drip) -- its own floor goes down with it
  end
  backlog, p = refund(want, mark, backlog, math.max(0, (f - now) * drip), a, b, p)
  return backlog, f, b, a, p
end
