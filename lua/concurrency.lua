-- Concurrency: events in flight. Each reservation of n events holds n
-- slots until it is settled, or until its lease ends if its holder never
-- says (a process that died).
--
-- KEYS    sorted set: member "<id>:<i>", the i-th slot of reservation id,
--         score = the µs its lease ends (always above 0). Leases that
--         ended are trimmed on every write. Member "hold", score = -h: h
--         is the key's typical hold, µs (see settle), kept while the key
--         lives; absent until a settlement has freed slots. The key
--         expires when the last lease taken ends.
-- ARGV    lease in microseconds; capacity (the limit's rate)
-- Reply   allowed, remaining, retry_after, reset_after, 0, next.
--         retry_after of a denial, and next, are when the slot waited for
--         is likely free: the typical hold after it was taken, at least
--         conc_min_hint from now, never past its lease end, which is the
--         answer when there is no typical hold yet. reset_after is when
--         the last lease ends.

-- conc_min_hint: the least a hint says, µs, when the slot waited for is
-- already held longer than is typical.
local conc_min_hint = 10000

algorithms.concurrency = {args = 2, decide = function(key, cost, at, commit)
  local lease, cap = tonumber(ARGV[at]), tonumber(ARGV[at + 1])
  -- string.format: `..` would keep 14 of a µs clock's 16 digits
  local after = string.format('(%d', now)
  local held = redis.call('ZCOUNT', key, after, '+inf')
  -- ends returns µs until the r-th lease to end (1 is the first) ends.
  local function ends(r)
    local e = redis.call('ZRANGEBYSCORE', key, after, '+inf', 'WITHSCORES', 'LIMIT', r - 1, 1)
    return tonumber(e[2]) - now
  end

  -- likely returns µs until a slot whose lease ends in `left` is likely
  -- free: taken at left - lease from now, it is typically held `hold`.
  -- Leases of one key are equal (the lease is in the key's name), so the
  -- lease that ends r-th is of the slot taken r-th.
  local hold = false
  local function likely(left)
    if hold == false then
      local h = redis.call('ZSCORE', key, 'hold')
      hold = h and -tonumber(h) or nil
    end
    if not hold then return left end
    return math.min(left, math.max(conc_min_hint, left - lease + hold))
  end

  if cost > 0 and held + cost > cap then -- a look (cost 0) is allowed, as elsewhere
    local last = held > 0 and ends(held) or 0
    return 0, cap - held, likely(ends(held + cost - cap)), last, 0, held > 0 and likely(ends(1)) or 0
  end
  -- as it will be with the cost's slots taken, whose leases end in `lease`
  local taken = cost > 0 and lease or 0
  local first, last = taken, taken
  if held > 0 then
    first, last = ends(1), math.max(ends(held), taken)
    if cost > 0 then first = math.min(first, lease) end
  end
  local left = cap - held - cost
  if commit then
    redis.call('ZREMRANGEBYSCORE', key, '(0', now) -- not the record, scored 0 or below
    local ends_at, slots = string.format('%d', now + lease), {}
    for i = 1, cost do
      slots[#slots + 1] = ends_at
      slots[#slots + 1] = rid .. ':' .. i
      if #slots >= 1000 or i == cost then -- keep unpack within Lua's stack
        redis.call('ZADD', key, unpack(slots))
        slots = {}
      end
    end
    expire(key, last)
  end
  return 1, left, 0, last, 0, left < cap and likely(first) or 0
end}
--- settle ---
-- settle frees the reservation's slots, whatever its cost. If they were
-- still held (their lease not ended), it first records how long: the
-- key's typical hold becomes that hold, at most the lease, the first
-- time, then moves a quarter of the way to each new one (rounded down).
-- Recorded before the slots go, the record keeps the key, and the key's
-- time to live (the last lease end), even when no slot is left.
algorithms.concurrency.settle = function(key, delta, at)
  local lease = tonumber(ARGV[at])
  local ends = reserved_n > 0 and redis.call('ZSCORE', key, rid .. ':1')
  if ends and tonumber(ends) > now then
    local h = math.min(lease, math.max(0, now - reserved))
    local was = redis.call('ZSCORE', key, 'hold')
    if was then
      was = -tonumber(was)
      h = was + math.floor((h - was) / 4)
    end
    redis.call('ZADD', key, string.format('%d', -h), 'hold')
  end
  for from = 1, reserved_n, 1000 do -- at most 1000 at a time: unpack's stack
    local slots = {}
    for i = from, math.min(from + 999, reserved_n) do slots[#slots + 1] = rid .. ':' .. i end
    redis.call('ZREM', key, unpack(slots))
  end
end
algorithms.concurrency.holds = true
