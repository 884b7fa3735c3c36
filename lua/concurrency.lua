-- Concurrency: events in flight. Each reservation of n events holds n
-- slots until it is settled, or until its lease ends if its holder never
-- says (a process that died).
--
-- KEYS    sorted set: member "<id>:<i>", the i-th slot of reservation id,
--         score = the µs its lease ends. Leases that ended are trimmed on
--         every write; the key expires when its last lease ends.
-- ARGV    lease in microseconds; capacity (the limit's rate)
-- Reply   allowed, remaining, retry_after, reset_after, 0, next: a denial's
--         retry_after is the time until enough leases end at the latest
--         (sooner if their holders settle), at most the lease.
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

  if cost > 0 and held + cost > cap then -- a look (cost 0) is allowed, as elsewhere
    local last = held > 0 and ends(held) or 0
    return 0, cap - held, ends(held + cost - cap), last, 0, held > 0 and ends(1) or 0
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
    redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
    local ends, slots = string.format('%d', now + lease), {}
    for i = 1, cost do
      slots[#slots + 1] = ends
      slots[#slots + 1] = rid .. ':' .. i
      if #slots >= 1000 or i == cost then -- keep unpack within Lua's stack
        redis.call('ZADD', key, unpack(slots))
        slots = {}
      end
    end
    expire(key, last)
  end
  return 1, left, 0, last, 0, left < cap and first or 0
end,
-- settle frees the reservation's slots, whatever its cost.
settle = function(key, delta, at)
  for from = 1, reserved_n, 1000 do -- at most 1000 at a time: unpack's stack
    local slots = {}
    for i = from, math.min(from + 999, reserved_n) do slots[#slots + 1] = rid .. ':' .. i end
    redis.call('ZREM', key, unpack(slots))
  end
end, holds = true}
