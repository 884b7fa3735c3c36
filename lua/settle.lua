-- settle: follows the algorithms' files. settle(k, n, at) settles one
-- reservation (core.Reservation's Settle, SettleEach and Release): each of
-- its n limits gives back or charges the difference between its true cost
-- and what it reserved, and concurrency limits free the reservation's
-- slots.
--
-- KEYS    the reservation's keys are KEYS[k .. k+n-1], one per limit.
-- ARGV    from ARGV[at]: now ("" for the Redis clock); the reservation's
--         id; the µs it was made at (its decision's now; "" when unknown:
--         the release of a decision that may not have run); 1 for a
--         prefetch's give-back, else 0; then per limit, in the order of
--         its keys: delta (its true cost less what it reserved), what it
--         reserved, what the decision said of it (reset_after in µs, mark
--         and epoch), the longest debt a charge may leave (µs past the
--         limit's full allowance coming back), the name of its algorithm
--         and its arguments, as for the decision.
-- Reply   settle returns {1}.
local settle_args = 6 -- per limit, before its algorithm's name

local function settle(k, n, at)
  now, rid, reserved = clock(ARGV[at]), ARGV[at + 1], tonumber(ARGV[at + 2])
  rid_n, giveback = tonumber(rid) or 0, ARGV[at + 3] == '1'
  at = at + 4
  for i = 1, n do
    local delta, alg = tonumber(ARGV[at]), algorithms[ARGV[at + settle_args]]
    reserved_n = tonumber(ARGV[at + 1])
    if delta ~= 0 or alg.holds then
      alg.settle(KEYS[k + i - 1], delta, at + settle_args + 1, tonumber(ARGV[at + 2]), tonumber(ARGV[at + 3]),
        tonumber(ARGV[at + 4]), tonumber(ARGV[at + 5]))
    end
    at = at + settle_args + 1 + alg.args
  end
  return {1}
end
