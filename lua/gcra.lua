-- GCRA, the generic cell rate algorithm: one timestamp per key.
--
-- KEYS    string: the theoretical arrival time (TAT), in microseconds, of
--         the next event at the sustained rate. A key at or before now is
--         the same as no key: the full burst is available. After a
--         prefetch, "TAT:FLOOR" until FLOOR passes: no refund moves the
--         TAT below FLOOR, the TAT the prefetch left, so that the events a
--         Limiter holds stay counted while it may admit them. A prefetch
--         leaves the TAT at least prefetch_lease plus its held events'
--         time ahead (within the burst): the meter then cannot refill over
--         them for that long.
-- ARGV    interval: microseconds between events, period / rate rounded up;
--         burst
-- Reply   allowed, remaining, retry_after, reset_after, 0, next
--
-- Events are spaced `interval` apart; the TAT may run ahead of now by at
-- most burst * interval, and by more only in debt (settle).

-- gcra_state returns key's TAT (now when there is none) and floor (0).
local function gcra_state(key)
  local raw = redis.call('GET', key)
  local tat = tonumber(raw)
  if tat or not raw then return tat or now, 0 end
  local t, f = string.match(raw, '^(%d+):(%d+)$')
  return tonumber(t), tonumber(f)
end

-- gcra_store stores tat, and floor while it is ahead; the key lives until
-- the later of the two, or goes when both have passed.
local function gcra_store(key, tat, floor)
  local last = math.max(tat, floor)
  if last <= now then redis.call('DEL', key) return end
  local value = tat
  if floor > now then value = string.format('%d:%d', tat, floor) end
  redis.call('SET', key, value, 'PX', math.max(1, math.ceil((last - now) / 1000)))
end

algorithms.gcra = {args = 2, decide = function(key, cost, at, commit)
  local interval, burst = tonumber(ARGV[at]), tonumber(ARGV[at + 1])
  local span = burst * interval
  local tat, floor = gcra_state(key)
  if tat < now then tat = now end

  local new_tat = tat + cost * interval
  local allow_at = new_tat - span
  -- next: µs until one more event fits, given the TAT `t` and `left` fit now
  local function next(t, left)
    if left >= burst then return 0 end
    return t - now - (burst - left - 1) * interval
  end

  if now < allow_at then
    local left = math.max(0, math.floor((now + span - tat) / interval))
    return 0, left, allow_at - now, tat - now, 0, next(tat, left)
  end
  if commit then
    if fetching > 0 then -- keep what is held counted, for the lease at least
      new_tat = math.max(new_tat, now + math.min(span, prefetch_lease + fetching * interval))
      floor = new_tat
    end
    gcra_store(key, new_tat, floor)
  end
  local left = math.floor((now + span - new_tat) / interval)
  return 1, left, 0, new_tat - now, 0, next(new_tat, left)
end,
-- settle moves the TAT ahead by a charge, or back by a refund, as far as
-- the reservation's own events have not drained (its TAT, reserved +
-- reset, is still ahead of now) and not below the floor. A prefetch's
-- give-back (rid "+") refunds only while the events it held were still in
-- the bucket, and lowers the floor with it when it set the floor.
settle = function(key, delta, at, remaining, reset)
  local interval = tonumber(ARGV[at])
  local tat, floor = gcra_state(key)
  tat = math.max(now, tat)
  local move = delta * interval
  if delta < 0 then
    move = -math.min(-move, math.max(0, reserved + reset - now))
    if rid == '+' then
      if now > reserved + reset + delta * interval then move = 0 end
      if floor == reserved + reset then floor = floor + move end
    end
    tat = math.max(now, floor, tat + move)
  else
    tat = math.min(tat + move, now + max_debt)
  end
  gcra_store(key, tat, floor)
end}
