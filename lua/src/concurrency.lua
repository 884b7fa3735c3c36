-- Concurrency: events in flight. Each reservation of n events holds n
-- slots until it is settled, or until its lease ends if its holder never
-- says (a process that died).
--
-- KEYS    sorted set. Slots: member "<id>:<i>", the i-th slot of
--         reservation id, score = the µs its lease ends. Leases that ended
--         are trimmed on every write. Two kinds of records sit far below
--         any clock (|µs| < 2^52), so that no count of slots sees them:
--         "hold", score = -2^53 + h, h the key's typical hold in µs (see
--         settle), kept while the key lives, absent until a settlement has
--         freed slots; and "x:<id>", score = -2^54 + the µs it ends, left
--         for a lease by the release of a reservation none of whose slots
--         it found: a decision of that reservation that reaches Redis after
--         its release (its caller gave up on it) takes nothing. The key
--         expires when the last lease or record ends.
-- ARGV    lease in microseconds; capacity (the limit's rate)
-- Reply   allowed, remaining, retry_after, reset_after, 0, next.
--         retry_after of a denial, and next, are when the slot waited for
--         is likely free: the typical hold after it was taken, at least
--         conc_min_hint from now, never past its lease end. Before any
--         hold is known, the hint is conc_first_hint (or the lease end, if
--         sooner). reset_after is when the last lease ends.

-- conc_min_hint: the least a hint says, µs, when the slot waited for is
-- already held longer than is typical; conc_first_hint: the hint before
-- a typical hold is known.
local conc_min_hint, conc_first_hint = 10000, 1000000
local conc_hold, conc_grave = -2^53, -2^54 -- the bases of the records' scores

algorithms.concurrency = {args = 2, kind = 'zset', decide = function(key, cost, at, commit)
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
      hold = h and tonumber(h) - conc_hold or nil
    end
    if not hold then return math.min(left, conc_first_hint) end
    return math.min(left, math.max(conc_min_hint, left - lease + hold))
  end

  local released = cost > 0 and rid ~= '' and redis.call('ZSCORE', key, 'x:' .. rid)
  if cost > 0 and (released or held + cost > cap) then -- a look (cost 0) is allowed, as elsewhere
    local last, wait = held > 0 and ends(held) or 0, lease
    if not released then wait = likely(ends(held + cost - cap)) end
    return 0, cap - held, wait, last, 0, held > 0 and likely(ends(1)) or 0
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
    redis.call('ZREMRANGEBYSCORE', key, string.format('(%d', -2^52), now) -- slots only
    local ends_at, slots = string.format('%d', now + lease), {}
    for i = 1, cost do
      slots[#slots + 1] = ends_at
      slots[#slots + 1] = rid .. ':' .. i
      if #slots >= 1000 or i == cost then -- keep unpack within Lua's stack
        redis.call('ZADD', key, unpack(slots))
        slots = {}
      end
    end
    expire(key, last) -- a record ends by now + lease, as a slot taken now
  end
  return 1, left, 0, last, 0, left < cap and likely(first) or 0
end}
--- settle ---
-- settle frees the reservation's slots, whatever its cost. If they were
-- still held (their lease not ended), it first records how long: the
-- key's typical hold becomes that hold, at most the lease, the first
-- time, then moves a quarter of the way to each new one (rounded down).
-- If it finds none of them, it leaves the record "x:<id>" for a lease, so
-- that the decision, should it reach Redis later, takes nothing. Expired
-- records are trimmed here. The records keep the key, and its time to
-- live (the last lease or record end), even when no slot is left.
algorithms.concurrency.settle = function(key, delta, at)
  local lease = tonumber(ARGV[at])
  local ends = reserved_n > 0 and redis.call('ZSCORE', key, rid .. ':1')
  if ends and tonumber(ends) > now and reserved then -- reserved is nil for a decision that may not have run
    local h = math.min(lease, math.max(0, now - reserved))
    local was = redis.call('ZSCORE', key, 'hold')
    if was then
      was = tonumber(was) - conc_hold
      h = was + math.floor((h - was) / 4)
    end
    redis.call('ZADD', key, string.format('%d', conc_hold + h), 'hold')
  elseif not ends and reserved_n > 0 then
    redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('(%d', conc_grave + now))
    redis.call('ZADD', key, string.format('%d', conc_grave + now + lease), 'x:' .. rid)
    if redis.call('PTTL', key) < math.ceil(lease / 1000) then expire(key, lease) end
  end
  for from = 1, reserved_n, 1000 do -- at most 1000 at a time: unpack's stack
    local slots = {}
    for i = from, math.min(from + 999, reserved_n) do slots[#slots + 1] = rid .. ':' .. i end
    redis.call('ZREM', key, unpack(slots))
  end
end
algorithms.concurrency.holds = true
