-- GCRA, the generic cell rate algorithm: one timestamp per key.
--
-- KEYS    string: the theoretical arrival time (TAT), in microseconds, of
--         the next event at the sustained rate. A key at or before now is
--         the same as no key: the full burst is available.
-- ARGV    interval: microseconds between events, period / rate rounded up;
--         burst
-- Reply   allowed, remaining, retry_after, reset_after, 0, next
--
-- Events are spaced `interval` apart; the TAT may run ahead of now by at
-- most burst * interval, and by more only in debt (settle).
algorithms.gcra = {args = 2, decide = function(key, cost, at, commit)
  local interval, burst = tonumber(ARGV[at]), tonumber(ARGV[at + 1])
  local span = burst * interval
  local tat = tonumber(redis.call('GET', key)) or now
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
    redis.call('SET', key, new_tat, 'PX', math.max(1, math.ceil((new_tat - now) / 1000)))
  end
  local left = math.floor((now + span - new_tat) / interval)
  return 1, left, 0, new_tat - now, 0, next(new_tat, left)
end,
-- settle moves the TAT ahead by a charge, or back by a refund, as far as
-- the reservation's own events have not drained: its TAT, reserved +
-- reset, is still ahead of now.
settle = function(key, delta, at, remaining, reset)
  local interval = tonumber(ARGV[at])
  local tat = math.max(now, tonumber(redis.call('GET', key)) or now)
  local move = delta * interval
  if delta < 0 then move = -math.min(-move, math.max(0, reserved + reset - now)) end
  tat = math.min(math.max(now, tat + move), now + max_debt)
  if tat > now then redis.call('SET', key, tat) end
  expire(key, tat - now)
end}
