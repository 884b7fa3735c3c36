-- GCRA, the generic cell rate algorithm: one timestamp per key.
--
-- KEYS    string: the theoretical arrival time (TAT), in microseconds, of
--         the next event at the sustained rate. A key at or before now is
--         the same as no key: the full burst is available.
-- ARGV    interval: microseconds between events, period / rate rounded up;
--         burst
-- Reply   allowed, remaining, retry_after, reset_after, 0
--
-- Events are spaced `interval` apart; the TAT may run ahead of now by at
-- most burst * interval.
algorithms.gcra = {args = 2, decide = function(key, cost, at, commit)
  local interval, burst = tonumber(ARGV[at]), tonumber(ARGV[at + 1])
  local span = burst * interval
  local tat = tonumber(redis.call('GET', key)) or now
  if tat < now then tat = now end

  local new_tat = tat + cost * interval
  local allow_at = new_tat - span
  if now < allow_at then
    return 0, math.max(0, math.floor((now + span - tat) / interval)), allow_at - now, tat - now, 0
  end
  if commit then
    redis.call('SET', key, new_tat, 'PX', math.max(1, math.ceil((new_tat - now) / 1000)))
  end
  return 1, math.floor((now + span - new_tat) / interval), 0, new_tat - now, 0
end}
