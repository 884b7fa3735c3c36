-- settle: settle(k, n, at) settles one reservation (core.Reservation's
-- Settle, SettleEach and Release): each of its n limits gives back or
-- charges the difference between its true cost and what it reserved, and
-- concurrency limits free the reservation's slots. internal/wire/wire.go
-- is its Go side.
--
-- KEYS    the reservation's keys: KEYS[k .. k+n-1], one per limit.
-- ARGV    from ARGV[at]: the clock ("" for the Redis clock); the
--         reservation's id; the µs it was made at (its decision's clock;
--         "" when unknown: the release of a decision that may not have
--         run); 1 for a prefetch's give-back, else 0; then per limit, in
--         the order of its keys: delta (its true cost less what it
--         reserved), what it reserved, what the decision said of it
--         (reset_after in µs, mark and epoch), the longest debt a charge
--         may leave (µs past the limit's full allowance coming back), the
--         name of its algorithm and its arguments, as for the decision.
-- Reply   {1}.
local settle_width = 6 -- arguments per limit before its algorithm's name (wire.AppendSettled's)

local function settle(k, n, at)
  now, rid, reserved = clock(ARGV[at]), ARGV[at + 1], tonumber(ARGV[at + 2])
  rid_n, giveback = tonumber(rid) or 0, ARGV[at + 3] == '1'
  at = at + 4
  local algs, starts = {}, {}
  for i = 1, n do -- each limit's algorithm; its state's type, before anything is written
    local alg, key = algorithms[ARGV[at + settle_width]], KEYS[k + i - 1]
    local kind = n > 1 and redis.call('TYPE', key).ok
    if kind and kind ~= 'none' and kind ~= alg.kind then
      error({err = 'WRONGTYPE ' .. key .. ' holds a ' .. kind .. ', not the ' .. alg.kind .. ' of a ' .. ARGV[at + settle_width] .. ' limit'})
    end
    algs[i], starts[i] = alg, at
    at = at + settle_width + 1 + alg.args
  end
  for i = 1, n do
    local a = starts[i]
    local delta = tonumber(ARGV[a])
    reserved_n = tonumber(ARGV[a + 1])
    if delta ~= 0 or algs[i].holds then
      algs[i].settle(KEYS[k + i - 1], delta, a + settle_width + 1, tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]),
        tonumber(ARGV[a + 4]), tonumber(ARGV[a + 5]))
    end
  end
  return {1}
end
